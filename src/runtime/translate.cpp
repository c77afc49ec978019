// Translating with a loaded model folder (runtime/translate.h).
#include "qkv/runtime/translate.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/decode/generate.h"
#include "qkv/decode/greedy.h"
#include "qkv/ops/softmax.h"
#include "qkv/runtime/translation_data.h"
#include "qkv/util/progress.h"

namespace qkv::runtime {
namespace {

/// The decoder's options for `opt` (the prefix encoded into target ids and checked).
decode::DecodeOptions decode_options(const ModelDir& m, const TranslateOptions& opt) {
    decode::DecodeOptions d;
    d.bos                  = m.tgt_vocab.bos();
    d.eos                  = m.tgt_vocab.eos();
    d.max_len              = opt.max_len;
    d.beam_size            = opt.beam;
    d.length_penalty       = opt.length_penalty;
    d.num_hypotheses       = opt.num_hypotheses;
    d.min_len              = opt.min_len;
    d.no_repeat_ngram_size = opt.no_repeat_ngram_size;
    d.repetition_penalty   = opt.repetition_penalty;
    d.coverage_penalty     = opt.coverage_penalty;
    d.sampling             = opt.sampling;
    // A real-text model spells every character with byte pieces, so it never needs <unk>: it is
    // banned, and no user of that path sees it (issue 45).
    if (opt.no_unk || reads_raw_text(m)) d.banned = {m.tgt_vocab.unk()};
    if (!opt.prefix.empty()) {
        const auto units = m.subwords.active() ? m.subwords.tgt->encode(opt.prefix) : opt.prefix;
        for (const auto& u : units) {
            QKV_CHECK(m.tgt_vocab.contains(u), "translate: target prefix word '", u,
                      "' is not in the target vocabulary");
            const int64_t id = m.tgt_vocab.token_to_idx(u);
            // Reserved tokens are not words a translation can start with (<eos> would end it;
            // <pad>, <bos> would be printed as text); a banned one (<unk> under --no-unk) is refused.
            QKV_CHECK(id != m.tgt_vocab.eos() && id != m.tgt_vocab.pad() && id != m.tgt_vocab.bos(),
                      "translate: target prefix word '", u, "' is a reserved token, not a word");
            QKV_CHECK(!(opt.no_unk && id == m.tgt_vocab.unk()), "translate: target prefix word '", u,
                      "' is <unk>, which --no-unk bans");
            d.prefix.push_back(id);
        }
    }
    d.return_attention = opt.attention || opt.replace_unknowns;
    d.validate(m.model->tgt_vocab_size());
    return d;
}

/// One decoder batch on the plain greedy path (decode::greedy_decode's fused loop): the best
/// translation of each row, scores left 0.
std::vector<std::vector<Translation>> greedy_batch(ModelDir& m, const Tensor& s, const Tensor& vl,
                                                   const decode::DecodeOptions& d) {
    decode::GreedyOptions g;
    g.bos     = d.bos;
    g.eos     = d.eos;
    g.max_len = d.max_len;
    g.banned  = d.banned;
    const auto ids = decode::greedy_decode(*m.model, s, vl, g);
    std::vector<std::vector<Translation>> out(ids.size());
    for (size_t r = 0; r < ids.size(); ++r) {
        Translation t;
        t.words    = target_words(m, m.tgt_vocab.decode(ids[r]));
        t.ids      = ids[r];
        t.finished = int64_t(ids[r].size()) < d.max_len;  // max_len counts the <eos>
        out[r]     = {std::move(t)};
    }
    return out;
}

/// One hypothesis of decode::generate as a Translation of the source units `src_units`.
Translation from_hypothesis(const ModelDir& m, const decode::Hypothesis& h, const std::vector<std::string>& src_units,
                            const TranslateOptions& opt) {
    const int64_t num_steps = m.config.data.num_steps;
    // Source positions the model read: its units (cut to num_steps - 1) then <eos>.
    const int64_t src_len = std::min<int64_t>(int64_t(src_units.size()), num_steps);
    std::vector<std::string> u = m.tgt_vocab.decode(h.tokens);
    if (opt.replace_unknowns)
        for (size_t j = 0; j < h.tokens.size(); ++j) {
            if (h.tokens[j] != m.tgt_vocab.unk()) continue;
            const auto& w = h.attention[j];
            const auto i  = int64_t(std::max_element(w.begin(), w.end()) - w.begin());
            if (i >= src_len) continue;  // attends to <eos> or beyond: keep <unk>
            u[j] = src_units[size_t(i)];  // a piece keeps its word-start mark
        }
    Translation t;
    t.words    = target_words(m, u);
    t.log_prob = h.log_prob;
    t.score    = h.score;
    t.ids      = h.tokens;
    t.finished = h.finished;
    if (opt.attention) {
        t.units     = u;
        t.attention = h.attention;
        // Columns: the source positions read (units, then <eos>), not the padding of the batch
        // (weight 0) after them.
        const size_t cols = size_t(std::min<int64_t>(int64_t(src_units.size()) + 1, num_steps));
        for (auto& w : t.attention)
            if (w.size() > cols) w.resize(cols);
        t.alignment = decode::alignment_pairs(h.attention, src_len);
    }
    return t;
}

}  // namespace

std::vector<std::vector<Translation>> translate_nbest(ModelDir& m, const std::vector<std::vector<std::string>>& src,
                                                      const TranslateOptions& opt) {
    QKV_CHECK(opt.batch_size >= 1, "translate: batch size must be >= 1");
    QKV_CHECK(opt.beam >= 1, "translate: beam must be >= 1, got ", opt.beam);
    const decode::DecodeOptions d = decode_options(m, opt);
    const bool plain_greedy =
        opt.beam == 1 && !d.needs_logits() && !d.return_attention && !opt.scores && d.coverage_penalty == 0.0;
    const int64_t n = int64_t(src.size());
    std::vector<std::vector<Translation>> out(static_cast<size_t>(n));
    m.model->eval();
    std::unique_ptr<util::ProgressBar> bar;
    if (opt.progress) bar = std::make_unique<util::ProgressBar>(n, "decode");
    // Batches of sources of similar length (a stable sort by unit count): the rows of a batch
    // then tend to finish together, so decoding keeps full GEMMs for longer and the cached
    // greedy path drops fewer stragglers one by one. Each row's result does not depend on its
    // batch-mates (padding is masked); outputs go back to the input order.
    const data::Sentences units = source_units(m, src);
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return units[size_t(a)].size() < units[size_t(b)].size();
    });
    const int64_t num_steps = m.config.data.num_steps;
    auto row_units = [&](int64_t i) { return std::min(num_steps, int64_t(units[size_t(order[size_t(i)])].size()) + 1); };
    for (int64_t start = 0, end = 0; start < n; start = end) {
        if (opt.batch_tokens) {
            // Sorted ascending, so the last row added is the longest: rows × its units.
            end = start + 1;
            while (end < n && (end - start + 1) * row_units(end) <= opt.batch_size) ++end;
        } else {
            end = std::min(n, start + opt.batch_size);
        }
        data::Sentences chunk;
        chunk.reserve(size_t(end - start));
        for (int64_t i = start; i < end; ++i) chunk.push_back(units[size_t(order[size_t(i)])]);
        data::SeqArray a = encode_sources(chunk, m.src_vocab, num_steps);
        const Tensor s  = from_vector(a.ids, {a.rows, a.num_steps});
        const Tensor vl = from_vector(a.valid_len, {a.rows});
        decode::DecodeOptions db = d;
        if (reads_raw_text(m)) {
            // Output length tied to the source (a runaway hypothesis stops early; a long source
            // keeps room): the batch's longest source in pieces, with <eos>.
            int64_t longest = 0;
            for (int64_t v : a.valid_len) longest = std::max(longest, v);
            db.max_len = std::min(d.max_len, source_tied_max_len(longest));
        }
        if (plain_greedy) {
            auto batch = greedy_batch(m, s, vl, db);
            for (size_t r = 0; r < batch.size(); ++r) out[size_t(order[size_t(start) + r])] = std::move(batch[r]);
        } else {
            const auto hyps = decode::generate(*m.model, s, vl, db);
            for (size_t r = 0; r < hyps.size(); ++r) {
                const int64_t row = order[size_t(start) + r];
                for (const auto& h : hyps[r]) out[size_t(row)].push_back(from_hypothesis(m, h, units[size_t(row)], opt));
            }
        }
        if (opt.on_translated)
            for (int64_t i = start; i < end; ++i) opt.on_translated(order[size_t(i)], out[size_t(order[size_t(i)])]);
        if (bar) bar->update(end - start);
    }
    return out;
}

std::vector<std::vector<std::string>> translate_tokens(ModelDir& m,
                                                       const std::vector<std::vector<std::string>>& src,
                                                       const TranslateOptions& opt) {
    TranslateOptions o = opt;
    o.num_hypotheses   = 1;
    auto nbest         = translate_nbest(m, src, o);
    std::vector<std::vector<std::string>> out;
    out.reserve(nbest.size());
    for (auto& t : nbest) out.push_back(t.empty() ? std::vector<std::string>{} : std::move(t.front().words));
    return out;
}

// ---- teacher forcing and attention -------------------------------------------------------------

namespace {

/// Switches a Transformer's attention-weight keeping on for one scope (off again on a throw).
struct KeepWeights {
    models::Transformer* t;
    explicit KeepWeights(models::Transformer* tr) : t(tr) {
        if (t) t->keep_attention_weights(true);
    }
    ~KeepWeights() {
        if (t) t->keep_attention_weights(false);
    }
    KeepWeights(const KeepWeights&)            = delete;
    KeepWeights& operator=(const KeepWeights&) = delete;
};

/// The decoder blocks' kept cross-attention weights of a (1, Tt) pass over the first Ts source
/// positions, into att (L, H, Tt, Ts).
void copy_cross_attention(models::Transformer& tr, int64_t Tt, int64_t Ts, CrossAttention& att) {
    const int64_t L = int64_t(tr.decoder->blks.size());
    const int64_t H = tr.config().num_heads;
    att.layers = L, att.heads = H;
    att.weights.assign(size_t(L * H * Tt * Ts), 0.f);
    for (int64_t l = 0; l < L; ++l) {
        const Tensor w = tr.decoder->blks[size_t(l)]->attention2->attention_weights();  // (1, H, Tt, Tk)
        QKV_CHECK(w.defined(), "teacher forcing: the decoder's attention weights were not kept");
        const auto wv = w.contiguous().to_vector<float>();
        // Tk is Tp, or Ts when the model drops the padded columns; the padded keys have weight 0.
        const int64_t Tk = int64_t(wv.size()) / std::max<int64_t>(1, H * Tt);
        QKV_CHECK(int64_t(wv.size()) == H * Tt * Tk && Tk >= Ts, "teacher forcing: cross-attention weights of ",
                  wv.size(), " values for ", H, " heads, ", Tt, " target and ", Ts, " source positions");
        for (int64_t r = 0; r < H * Tt; ++r)
            std::copy(wv.begin() + r * Tk, wv.begin() + r * Tk + Ts, att.weights.begin() + (l * H * Tt + r) * Ts);
    }
}

}  // namespace

std::vector<double> teacher_force(ModelDir& m, const std::vector<int64_t>& src_row, int64_t valid_len,
                                  const std::vector<int64_t>& target, CrossAttention* att) {
    NoGradGuard no_grad;
    m.model->eval();
    const int64_t Tt = int64_t(target.size()), Tp = int64_t(src_row.size()), Ts = valid_len;
    if (Tt == 0) return {};
    std::vector<int64_t> dec_in{m.tgt_vocab.bos()};
    for (int64_t i = 0; i + 1 < Tt; ++i) dec_in.push_back(target[size_t(i)]);
    models::Transformer* tr = att ? m.transformer() : nullptr;
    QKV_CHECK(!att || tr, "attention weights are available for Transformer models only");
    KeepWeights keep(tr);
    const Tensor hidden = m.model->forward_hidden(from_vector(src_row, {1, Tp}), from_vector<int64_t>({Ts}, {1}),
                                                  from_vector(dec_in, {1, Tt}));
    const Tensor lp = log_softmax(m.model->output_logits(hidden), -1).contiguous();  // (1, Tt, V)
    const int64_t V = lp.shape().back();
    const auto v    = lp.to_vector<float>();
    std::vector<double> out(static_cast<size_t>(Tt));
    for (int64_t t = 0; t < Tt; ++t) out[size_t(t)] = double(v[size_t(t * V + target[size_t(t)])]);
    if (att) {
        att->source = m.src_vocab.decode(std::vector<int64_t>(src_row.begin(), src_row.begin() + Ts));
        att->target = m.tgt_vocab.decode(target);
        copy_cross_attention(*tr, Tt, Ts, *att);
    }
    return out;
}

SourceRow encode_source_row(const ModelDir& m, const std::vector<std::string>& units) {
    const data::SeqArray a = encode_sources({units}, m.src_vocab, m.config.data.num_steps);
    return {a.ids, a.valid_len[0]};
}

AttentionMap greedy_attention(ModelDir& m, const std::vector<std::string>& units, int64_t max_len, bool no_unk) {
    m.model->eval();
    const SourceRow row = encode_source_row(m, units);
    const int64_t num_steps = int64_t(row.ids.size());
    models::DecoderAttentionTrace trace;
    decode::GreedyOptions g;
    g.bos     = m.tgt_vocab.bos();
    g.eos     = m.tgt_vocab.eos();
    g.max_len = max_len;
    g.trace   = &trace;
    if (no_unk || reads_raw_text(m)) g.banned = {m.tgt_vocab.unk()};
    decode::greedy_decode(*m.model, from_vector(row.ids, {1, num_steps}), from_vector<int64_t>({row.valid_len}, {1}), g);
    AttentionMap a;
    a.steps   = int64_t(trace.cross.size());
    a.sources = row.valid_len;
    a.weights.assign(size_t(a.steps * a.sources), 0.f);
    for (int64_t s = 0; s < a.steps; ++s) {
        if (trace.cross[size_t(s)].empty()) continue;
        Tensor w = trace.cross[size_t(s)].back().contiguous().to(DType::f32);  // last layer
        // (1, H, 1, Tk) for the Transformer, (1, Tk) for Bahdanau: average all but Tk.
        const int64_t tk = w.size(-1);
        const auto v     = w.to_vector<float>();
        const int64_t n  = int64_t(v.size()) / tk;
        for (int64_t j = 0; j < std::min(a.sources, tk); ++j) {
            double acc = 0;
            for (int64_t h = 0; h < n; ++h) acc += v[size_t(h * tk + j)];
            a.weights[size_t(s * a.sources + j)] = float(acc / double(n));
        }
    }
    return a;
}

std::string join_translations(const data::SentenceSplit& layout, const std::vector<std::string>& texts) {
    const std::string text = data::join_sentences(layout, texts);
    const size_t b = text.find_first_not_of(" \t\n\r"), e = text.find_last_not_of(" \t\n\r");
    return b == std::string::npos ? std::string() : text.substr(b, e - b + 1);
}

std::vector<TextHypothesis> join_sentence_nbest(const std::vector<std::vector<TextHypothesis>>& per_sentence,
                                                const data::SentenceSplit& layout) {
    QKV_CHECK(per_sentence.size() == layout.sentences.size(), "join_sentence_nbest: ", per_sentence.size(),
              " n-best lists for ", layout.sentences.size(), " sentences");
    size_t k_max = 0;
    for (const auto& l : per_sentence) k_max = std::max(k_max, l.size());
    std::vector<TextHypothesis> out(k_max);
    for (size_t k = 0; k < k_max; ++k) {
        std::vector<std::string> texts;
        for (const auto& l : per_sentence) {
            if (l.empty()) {
                texts.emplace_back();
                continue;
            }
            const TextHypothesis& t = l[std::min(k, l.size() - 1)];
            texts.push_back(t.text);
            out[k].log_prob += t.log_prob;
            out[k].score += t.score;
            out[k].finished = out[k].finished && t.finished;
            out[k].units.insert(out[k].units.end(), t.units.begin(), t.units.end());
        }
        out[k].text = join_translations(layout, texts);
    }
    return out;
}

std::vector<TextHypothesis> join_sentence_nbest(const std::vector<std::vector<Translation>>& per_sentence,
                                                const data::SentenceSplit& layout) {
    std::vector<std::vector<TextHypothesis>> lists;
    for (const auto& l : per_sentence) {
        QKV_CHECK(!l.empty(), "join_sentence_nbest: a sentence without hypotheses");
        auto& out = lists.emplace_back();
        for (const Translation& t : l) out.push_back({join_tokens(t.words), t.log_prob, t.score, t.finished, t.units});
    }
    return join_sentence_nbest(lists, layout);
}

int64_t source_tied_max_len(int64_t source_units) { return 2 * source_units + 10; }

double gnmt_score(double log_prob, int64_t n, double alpha) {
    return log_prob / std::pow((5.0 + double(n)) / 6.0, alpha);
}

}  // namespace qkv::runtime
