// DataConfig -> TranslationData: read, filter, split, vocabularies, arrays.
#include "qkv/runtime/translation_data.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include "qkv/core/error.h"
#include "qkv/data/corpus.h"
#include "qkv/data/dedup_split.h"
#include "qkv/data/text.h"
#include "qkv/data/fra_eng.h"
#include "qkv/data/tokenizer.h"

namespace qkv::runtime {

data::SeqArray encode_sources(const data::Sentences& tokens, const data::Vocab& src_vocab,
                              int64_t num_steps) {
    return data::build_array_nmt(tokens, src_vocab, num_steps);
}

std::string truncation_note(int64_t n, int64_t steps, bool pieces, int64_t words, bool at_least) {
    if (n < steps) return "";
    const std::string unit = pieces ? "piece" : "token";
    const auto count = [&unit](int64_t k) { return std::to_string(k) + " " + unit + (k == 1 ? "" : "s"); };
    std::string s = detail::str("has ", at_least ? "at least " : "", n, " source ", unit, n == 1 ? "" : "s");
    if (pieces) s += detail::str(" (", words, words == 1 ? " word)" : " words)");
    s += detail::str(" but the model reads ", steps, " positions (", count(steps - 1), " + <eos>): ");
    if (n == steps && !at_least) return s + "all " + std::to_string(n) + " are read, but not <eos>";
    if (at_least) return s + unit + "s " + std::to_string(steps + 1) + (n == steps ? " and later, if any," : " and later") +
                         " are not read, nor is <eos>";
    if (n == steps + 1) return s + unit + " " + std::to_string(n) + " is not read, nor is <eos>";
    return s + unit + "s " + std::to_string(steps + 1) + "-" + std::to_string(n) + " are not read, nor is <eos>";
}

DataFingerprint fingerprint_pairs(const std::vector<std::string>& src, const std::vector<std::string>& tgt) {
    QKV_CHECK(src.size() == tgt.size(), "fingerprint_pairs: ", src.size(), " sources but ", tgt.size(),
              " targets");
    uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64 offset basis
    auto add = [&h](const std::string& s) {
        for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;  // FNV-1a 64 prime
    };
    for (size_t i = 0; i < src.size(); ++i) {
        add(src[i]);
        add("\t");
        add(tgt[i]);
        add("\n");
    }
    return {int64_t(src.size()), h};
}

std::string fingerprint_hex(uint64_t h) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
    return buf;
}

namespace {

/// The smallest T such that at least 99 % of `lens` (+ 1 for <eos>) are <= T (0 for none).
int64_t p99_len(std::vector<int64_t> lens) {
    if (lens.empty()) return 0;
    std::sort(lens.begin(), lens.end());
    // ceil(0.99 n) sentences must fit: the one at that rank (1-based) sets T
    const size_t rank = (lens.size() * 99 + 99) / 100;
    return lens[std::max<size_t>(rank, 1) - 1] + 1;
}

/// Fraction of `rows` whose unit count + 1 (<eos>) exceeds num_steps.
double truncated_fraction(const data::Sentences& units, const std::vector<int64_t>& rows, int64_t num_steps) {
    if (rows.empty()) return 0.0;
    int64_t cut = 0;
    for (int64_t r : rows) cut += int64_t(units[size_t(r)].size()) + 1 > num_steps;
    return double(cut) / double(rows.size());
}

std::string percent(double f) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f%%", 100.0 * f);
    return buf;
}

/// A vocabulary's name in errors: "source (en)", or "source" when the language is unknown.
std::string side_name(const std::string& side, const std::string& lang) {
    return lang.empty() ? side : side + " (" + lang + ")";
}

/// Trains one SentencePiece model on the given sentences (rows of one or two sides); `which` names
/// the vocabulary in errors: "source (en)", "target (fr)" or "shared (en + fr)" (the languages when known).
std::shared_ptr<const data::SubwordModel> train_subword(const DataConfig& cfg, const std::string& which,
                                                        const std::vector<const data::Sentences*>& sides,
                                                        const std::vector<int64_t>& rows) {
    std::vector<std::string> lines;
    lines.reserve(rows.size() * sides.size());
    for (const data::Sentences* side : sides)
        for (int64_t r : rows) {
            std::string line;
            for (const auto& w : (*side)[size_t(r)]) line += (line.empty() ? "" : " ") + w;
            if (!line.empty()) lines.push_back(std::move(line));
        }
    data::SubwordOptions so;
    so.kind             = cfg.subword;
    so.vocab_size       = cfg.subword_vocab_size;
    so.hard_vocab_limit = !cfg.subword_vocab_soft;
    so.seed             = cfg.split_seed;
    try {
        return std::make_shared<const data::SubwordModel>(data::SubwordModel::train(lines, so));
    } catch (const Error& e) {
        throw Error(detail::str("data: subword vocabulary size (--vocab-size) ", cfg.subword_vocab_size,
                                " does not fit the ", which, " vocabulary of this data: ", e.what()));
    }
}

/// The pairs `cfg` names: fra-eng, a TSV file or a line-aligned file pair; sets out.origin.
data::ParallelCorpus read_pairs(const DataConfig& cfg, const data::ParseOptions& po, TranslationData& out) {
    if (!cfg.src_file.empty() || !cfg.tgt_file.empty()) {
        QKV_CHECK(!cfg.src_file.empty() && !cfg.tgt_file.empty(), "data: --src-file and --tgt-file go together (got only ",
                  cfg.src_file.empty() ? "--tgt-file" : "--src-file", ")");
        data::ParallelCorpus c = data::load_file_pair(cfg.src_file, cfg.tgt_file, po);
        out.origin = c.origin;
        return c;
    }
    if (data::corpus_format(cfg.path) == data::CorpusFormat::tsv) {
        out.origin = cfg.path;
        return data::load_tsv_corpus(cfg.path, po);
    }
    out.origin = data::locate_fra_eng(cfg.path);
    return data::load_fra_eng(out.origin, po);
}

/// The D2L EN pipeline: the first d2l_num_train + d2l_num_val pairs, D2L's vocabularies; the
/// validation pairs are the held-out set.
TranslationData load_d2l_en(const DataConfig& cfg, data::ParseOptions po, TranslationData out) {
    QKV_CHECK(cfg.d2l_num_train >= 1 && cfg.d2l_num_val >= 0, "data: bad d2l_en split sizes");
    po.max_lines = cfg.d2l_num_train + cfg.d2l_num_val + 1;
    data::ParallelCorpus corpus = read_pairs(cfg, po, out);
    out.malformed = corpus.malformed;
    out.fingerprint = fingerprint_pairs(corpus.src, corpus.tgt);
    data::D2lEnData d = data::prepare_d2l_en(corpus, cfg.num_steps, cfg.d2l_num_train, cfg.d2l_num_val);
    out.src_vocab = std::move(d.src_vocab);
    out.tgt_vocab = std::move(d.tgt_vocab);
    out.train     = std::move(d.train);
    out.valid     = std::move(d.valid);
    out.test      = out.valid;
    for (int64_t i = cfg.d2l_num_train; i < corpus.size(); ++i) {
        out.test_src.push_back(data::tokenize_nmt(corpus.src[size_t(i)]));
        out.test_ref.push_back(data::tokenize_nmt(corpus.tgt[size_t(i)]));
        out.test_src_text.push_back(corpus.src[size_t(i)]);
        out.test_ref_text.push_back(corpus.tgt[size_t(i)]);
    }
    out.pairs   = out.train.n + out.valid.n;
    out.record.pairs_read = out.record.pairs_kept = corpus.size();
    out.record.malformed  = corpus.malformed;
    out.record.train = out.train.n, out.record.valid = out.valid.n, out.record.test = out.test.n;
    out.record.pipeline   = detail::str("d2l_en: the first ", out.train.n, " pairs train, the next ", out.valid.n,
                                        " validate and are the held-out set; D2L's vocabularies, num_steps ",
                                        cfg.num_steps);
    out.summary = corpus.summary() + "; D2L EN split " + std::to_string(out.train.n) + " train / " +
                  std::to_string(out.valid.n) + " valid (the valid pairs are the held-out set)";
    return out;
}

/// The pairs within the length limits, the first max_pairs of them; says so in `summary` and counts
/// the dropped ones by reason in `rec`.
data::ParallelCorpus filter_pairs(data::ParallelCorpus corpus, const DataConfig& cfg, std::string& summary,
                                  DataRecord& rec) {
    rec.pairs_read = corpus.size();
    rec.malformed  = corpus.malformed;
    if (cfg.max_src_tokens == 0 && cfg.max_tgt_tokens == 0 && cfg.max_pairs == 0) return corpus;
    data::ParallelCorpus kept;
    kept.origin     = corpus.origin;
    kept.lines_read = corpus.lines_read;
    kept.malformed  = corpus.malformed;
    for (int64_t i = 0; i < corpus.size(); ++i) {
        if (cfg.max_pairs > 0 && kept.size() >= cfg.max_pairs) {
            rec.beyond_max_pairs = corpus.size() - i;
            break;
        }
        const std::string& s = corpus.src[size_t(i)];
        const std::string& t = corpus.tgt[size_t(i)];
        if (cfg.max_src_tokens > 0 && int64_t(data::tokenize_nmt(s).size()) > cfg.max_src_tokens) {
            ++rec.source_too_long;
            continue;
        }
        if (cfg.max_tgt_tokens > 0 && int64_t(data::tokenize_nmt(t).size()) > cfg.max_tgt_tokens) {
            ++rec.target_too_long;
            continue;
        }
        kept.src.push_back(s);
        kept.tgt.push_back(t);
        kept.line.push_back(corpus.line[size_t(i)]);
    }
    summary += "; kept " + std::to_string(kept.size()) + (kept.size() == 1 ? " pair" : " pairs");
    if (cfg.max_src_tokens > 0) summary += ", source <= " + std::to_string(cfg.max_src_tokens) + " tokens";
    if (cfg.max_tgt_tokens > 0) summary += ", target <= " + std::to_string(cfg.max_tgt_tokens) + " tokens";
    if (cfg.max_pairs > 0) summary += ", first " + std::to_string(cfg.max_pairs);
    return kept;
}

/// Subword units: the given SentencePiece models (a resume) or ones learned from the train split;
/// the pieces of every sentence into src_pieces / tgt_pieces, the vocabularies, the truncation
/// fractions of pieces into `out`. Returns the summary's note.
std::string subword_units(const DataConfig& cfg, const SubwordModels& given, const data::AnchorData& d,
                          TranslationData& out, data::Sentences& src_pieces, data::Sentences& tgt_pieces) {
    if (given.active()) {
        out.subwords = given;
    } else if (cfg.shared_vocab) {
        const std::string sl = source_language(cfg), tl = target_language(cfg);
        out.subwords.src = train_subword(cfg, side_name("shared", sl.empty() || tl.empty() ? "" : sl + " + " + tl),
                                         {&d.src_tokens, &d.tgt_tokens},
                                         d.split.train);
        out.subwords.tgt = out.subwords.src;
    } else {
        out.subwords.src = train_subword(cfg, side_name("source", source_language(cfg)), {&d.src_tokens}, d.split.train);
        out.subwords.tgt = train_subword(cfg, side_name("target", target_language(cfg)), {&d.tgt_tokens}, d.split.train);
    }
    src_pieces = out.subwords.src->encode(d.src_tokens);
    tgt_pieces = out.subwords.tgt->encode(d.tgt_tokens);
    out.src_vocab = out.subwords.src->vocab();
    out.tgt_vocab = out.subwords.tgt->vocab();
    int64_t nw[2] = {0, 0}, np[2] = {0, 0};
    std::vector<int64_t> src_lens, tgt_lens;
    for (int64_t r : d.split.train) {
        nw[0] += int64_t(d.src_tokens[size_t(r)].size()), np[0] += int64_t(src_pieces[size_t(r)].size());
        nw[1] += int64_t(d.tgt_tokens[size_t(r)].size()), np[1] += int64_t(tgt_pieces[size_t(r)].size());
        src_lens.push_back(int64_t(src_pieces[size_t(r)].size()));
        tgt_lens.push_back(int64_t(tgt_pieces[size_t(r)].size()));
    }
    out.target_len_p99 = p99_len(tgt_lens);
    std::string chosen;
    if (cfg.num_steps_from_data) {
        out.num_steps = pieces_num_steps(src_lens, tgt_lens, 4 * cfg.num_steps);
        chosen = detail::str(" (num_steps ", out.num_steps, " from the train split: 99 % of its sentences fit",
                             out.num_steps == 4 * cfg.num_steps ? ", capped at 4 x the preset's " : "",
                             out.num_steps == 4 * cfg.num_steps ? std::to_string(cfg.num_steps) : "", ")");
        // the words' fractions at the same length, for comparison
        out.truncated_src = truncated_fraction(d.src_tokens, d.split.train, out.num_steps);
        out.truncated_tgt = truncated_fraction(d.tgt_tokens, d.split.train, out.num_steps);
    }
    const int64_t steps = out.num_steps;
    const double t_src  = truncated_fraction(src_pieces, d.split.train, steps);
    const double t_tgt  = truncated_fraction(tgt_pieces, d.split.train, steps);
    // A soft limit (subword_vocab_soft) may give the two sides different sizes.
    const std::string sizes = out.src_vocab.size() == out.tgt_vocab.size()
                                  ? std::to_string(out.tgt_vocab.size())
                                  : std::to_string(out.src_vocab.size()) + " / " + std::to_string(out.tgt_vocab.size());
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "; %s %s vocabulary of %s pieces, %.3f / %.3f pieces per word (source / target); "
                  "truncated to %lld: source %s, target %s of train pairs (words at %lld: %s, %s)",
                  cfg.shared_vocab ? "shared" : "per-side", data::subword_kind_name(cfg.subword),
                  sizes.c_str(), nw[0] ? double(np[0]) / double(nw[0]) : 0.0,
                  nw[1] ? double(np[1]) / double(nw[1]) : 0.0, (long long)steps,
                  percent(t_src).c_str(), percent(t_tgt).c_str(), (long long)steps,
                  percent(out.truncated_src).c_str(),
                  percent(out.truncated_tgt).c_str());
    out.truncated_src = t_src;
    out.truncated_tgt = t_tgt;
    // Unigram learns only pieces seen often enough: a few hundred pairs give it ~150 pieces and
    // 2-3 pieces per word, where BPE keeps most words whole (~1.2).
    std::string hint;
    if (!given.active() && cfg.subword == data::SubwordKind::unigram && cfg.subword_vocab_soft &&
        std::max(nw[0] ? double(np[0]) / double(nw[0]) : 0.0, nw[1] ? double(np[1]) / double(nw[1]) : 0.0) > 2.0)
        hint = "; over 2 pieces per word: the corpus is small for unigram pieces (--subword bpe keeps more words whole)";
    return buf + chosen + hint;
}

/// The concatenated train pairs of DataConfig::concat_fraction, appended: their pieces to
/// src_pieces / tgt_pieces (new rows), their rows to train_rows, their text to src_text /
/// tgt_text. Tatoeba's sentences are short (6 words on average), and a model that never saw a long
/// target ends long sentences early; joining 2-8 random train pairs (the originals: the first
/// train_rows) gives it long ones made of real text. Pairs over num_steps `T` pieces (with <eos>)
/// on either side are not made (4 x the wanted number of draws at most, then each encoded).
void add_concatenated_pairs(const DataConfig& cfg, const data::ParallelCorpus& corpus, const data::SubwordModel& src_sp,
                            const data::SubwordModel& tgt_sp, int64_t T, std::vector<int64_t>& train_rows,
                            data::Sentences& src_pieces, data::Sentences& tgt_pieces, std::vector<std::string>& src_text,
                            std::vector<std::string>& tgt_text) {
    const int64_t originals = int64_t(train_rows.size());
    const int64_t want = int64_t(cfg.concat_fraction * double(originals) + 0.5);
    if (want <= 0) return;
    std::mt19937_64 rng(cfg.split_seed ^ 0x636f6e636174ULL);  // "concat"
    const auto pick = [&](uint64_t k) { return int64_t(rng() % k); };
    // Draws first (bounded by the sum of the parts' pieces), then the exact pieces of each.
    std::vector<std::string> drawn_src, drawn_tgt;
    for (int64_t tries = 0; int64_t(drawn_src.size()) < want && tries < 4 * want; ++tries) {
        const int64_t k = 2 + pick(7);
        std::string s, t;
        size_t ls = 0, lt = 0;
        for (int64_t j = 0; j < k; ++j) {
            const int64_t r = train_rows[size_t(pick(uint64_t(originals)))];
            s += (j ? " " : "") + corpus.src[size_t(r)];
            t += (j ? " " : "") + corpus.tgt[size_t(r)];
            ls += src_pieces[size_t(r)].size(), lt += tgt_pieces[size_t(r)].size();
        }
        if (int64_t(ls) + 1 > T || int64_t(lt) + 1 > T) continue;
        drawn_src.push_back(std::move(s));
        drawn_tgt.push_back(std::move(t));
    }
    for (size_t i = 0; i < drawn_src.size(); ++i) {
        std::vector<std::string> ps = src_sp.encode_text(drawn_src[i]), pt = tgt_sp.encode_text(drawn_tgt[i]);
        if (int64_t(ps.size()) + 1 > T || int64_t(pt.size()) + 1 > T) continue;
        train_rows.push_back(int64_t(src_pieces.size()));
        src_pieces.push_back(std::move(ps));
        tgt_pieces.push_back(std::move(pt));
        src_text.push_back(std::move(drawn_src[i]));
        tgt_text.push_back(std::move(drawn_tgt[i]));
    }
}

/// The text pipeline's SentencePiece models learned from the train split's raw text: one shared by
/// both sides (cfg.shared_vocab) or one per side.
SubwordModels train_text_subwords(const DataConfig& cfg, const data::ParallelCorpus& corpus,
                                  const data::SourceDisjointSplit& split) {
    auto train_on = [&](const std::string& which, bool src, bool tgt) {
        std::vector<std::string> lines;
        lines.reserve(split.train.size() * 2);
        for (int64_t r : split.train) {
            if (src) lines.push_back(corpus.src[size_t(r)]);
            if (tgt) lines.push_back(corpus.tgt[size_t(r)]);
        }
        data::SubwordOptions so;
        so.kind             = cfg.subword;
        so.vocab_size       = cfg.subword_vocab_size;
        so.hard_vocab_limit = !cfg.subword_vocab_soft;
        so.seed             = cfg.split_seed;
        so.raw_text         = true;
        try {
            return std::make_shared<const data::SubwordModel>(data::SubwordModel::train(lines, so));
        } catch (const Error& e) {
            throw Error(detail::str("data: subword vocabulary size (--vocab-size) ", cfg.subword_vocab_size,
                                    " does not fit the ", which, " vocabulary of this data: ", e.what()));
        }
    };
    SubwordModels m;
    const std::string sl = source_language(cfg), tl = target_language(cfg);
    if (cfg.shared_vocab) {
        m.src = train_on(side_name("shared", sl.empty() || tl.empty() ? "" : sl + " + " + tl), true, true);
        m.tgt = m.src;
    } else {
        m.src = train_on(side_name("source", sl), true, false);
        m.tgt = train_on(side_name("target", tl), false, true);
    }
    return m;
}

/// The train pairs that fit num_steps pieces (with <eos>), and the counts the summary reports.
struct TextTrainRows {
    std::vector<int64_t> rows;
    std::vector<int64_t> tgt_lens;
    int64_t words = 0, pieces_src = 0, pieces_tgt = 0, words_tgt = 0, over = 0;
};

TextTrainRows fitting_train_rows(const data::ParallelCorpus& corpus, const std::vector<int64_t>& train,
                                 const data::Sentences& src_pieces, const data::Sentences& tgt_pieces, int64_t T) {
    TextTrainRows t;
    for (int64_t r : train) {
        const int64_t ls = int64_t(src_pieces[size_t(r)].size()), lt = int64_t(tgt_pieces[size_t(r)].size());
        if (ls + 1 > T || lt + 1 > T) {
            ++t.over;
            continue;
        }
        t.rows.push_back(r);
        t.tgt_lens.push_back(lt);
        t.pieces_src += ls, t.pieces_tgt += lt;
        t.words += int64_t(data::raw_words(corpus.src[size_t(r)]).size());
        t.words_tgt += int64_t(data::raw_words(corpus.tgt[size_t(r)]).size());
    }
    QKV_CHECK(!t.rows.empty(), "data: no train pair fits num_steps ", T, " pieces (with <eos>): raise --num-steps");
    return t;
}

/// The raw text of the splits: test sources and references (as words and as text), the train
/// pairs' text (the first `originals` train rows, then the concatenated pairs already in
/// out.train_src_text / train_tgt_text), the valid pairs' text.
void keep_split_texts(TranslationData& out, const data::ParallelCorpus& corpus, const data::SourceDisjointSplit& split,
                      const std::vector<int64_t>& train_rows, int64_t originals) {
    for (int64_t i : split.test) {
        out.test_src.push_back(data::raw_words(corpus.src[size_t(i)]));
        out.test_ref.push_back(data::raw_words(corpus.tgt[size_t(i)]));
        out.test_src_text.push_back(corpus.src[size_t(i)]);
        out.test_ref_text.push_back(corpus.tgt[size_t(i)]);
    }
    {  // the train pairs' text, originals first, then the concatenated pairs kept above
        std::vector<std::string> s, t;
        s.reserve(train_rows.size()), t.reserve(train_rows.size());
        for (int64_t i = 0; i < originals; ++i) {
            s.push_back(corpus.src[size_t(train_rows[size_t(i)])]);
            t.push_back(corpus.tgt[size_t(train_rows[size_t(i)])]);
        }
        for (auto& x : out.train_src_text) s.push_back(std::move(x));
        for (auto& x : out.train_tgt_text) t.push_back(std::move(x));
        out.train_src_text.swap(s), out.train_tgt_text.swap(t);
    }
    for (int64_t r : split.valid) {
        out.valid_src_text.push_back(corpus.src[size_t(r)]);
        out.valid_tgt_text.push_back(corpus.tgt[size_t(r)]);
    }
}

/// out.record and out.summary of the text pipeline.
void describe_text_data(TranslationData& out, const DataConfig& cfg, const data::SourceDisjointSplit& split,
                        const TextTrainRows& t, int64_t originals, int64_t concatenated, std::string summary) {
    const int64_t T = cfg.num_steps;
    DataRecord& rec = out.record;
    rec.over_length_cap     = t.over;
    rec.held_out_duplicates = split.unused;
    rec.concatenated        = concatenated;
    rec.pairs_kept          = out.pairs;
    rec.train = out.train.n, rec.valid = out.valid.n, rec.test = out.test.n;
    rec.pipeline = detail::str("text: raw sentences, a source-disjoint split (seed ", cfg.split_seed, ", ",
                               split.distinct_sources, " distinct sources), ",
                               cfg.shared_vocab ? "one shared " : "per-side ", data::subword_kind_name(cfg.subword),
                               " SentencePiece vocabulary of ", out.src_vocab.size(),
                               cfg.shared_vocab ? "" : " / " + std::to_string(out.tgt_vocab.size()),
                               " pieces (nmt_nfkc, byte fallback) learned from the train split, train pairs over ",
                               T, " pieces with <eos> skipped");
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "; %s %s vocabulary of %lld pieces (raw text, nmt_nfkc, byte fallback), %.3f / %.3f pieces per "
                  "word (source / target); %lld train pairs over %lld pieces skipped",
                  cfg.shared_vocab ? "shared" : "per-side", data::subword_kind_name(cfg.subword),
                  (long long)out.tgt_vocab.size(), t.words ? double(t.pieces_src) / double(t.words) : 0.0,
                  t.words_tgt ? double(t.pieces_tgt) / double(t.words_tgt) : 0.0, (long long)t.over, (long long)T);
    if (concatenated > 0)
        summary += detail::str("; ", concatenated, " concatenated train pairs (2-8 pairs each, ", cfg.concat_fraction,
                               " x the ", originals, " train pairs) added");
    out.summary = summary + buf + detail::str("; source-disjoint split ", out.train.n, " train / ", out.valid.n,
                                              " valid / ", out.test.n, " test (seed ", cfg.split_seed, "; ",
                                              split.unused, " other translations of held-out sources unused)");
}

/// The text pipeline (DataPipeline::text) on the pairs read (after max_pairs).
TranslationData load_text_data(const DataConfig& cfg, const SubwordModels& given, const data::ParallelCorpus& corpus,
                               std::string summary, TranslationData out) {
    const int64_t n = corpus.size();
    QKV_CHECK(cfg.subword != data::SubwordKind::none, "data: the text pipeline reads subword pieces (--subword bpe or "
              "unigram), not words");
    QKV_CHECK(cfg.concat_fraction >= 0 && cfg.concat_fraction <= 1, "data: concat_fraction must be in [0, 1], got ",
              cfg.concat_fraction);
    QKV_CHECK(cfg.max_src_tokens == 0 && cfg.max_tgt_tokens == 0, "data: --max-src-tokens / --max-tgt-tokens count "
              "D2L tokens, which the text pipeline (preset real) has none of: its length cap is --num-steps, in pieces");
    int64_t nv = cfg.n_valid, nt = cfg.n_test;
    if (n < 4 * (nv + nt)) {  // small corpora shrink the held-out sets, as the anchor pipeline does
        nv = std::max<int64_t>(1, n / 10), nt = std::max<int64_t>(1, n / 10);
        summary += "; small corpus: valid and test shrunk to " + std::to_string(nv) + " sources each";
    }
    const data::SourceDisjointSplit split = data::source_disjoint_split(corpus.src, nv, nt, cfg.split_seed);
    out.subwords  = given.active() ? given : train_text_subwords(cfg, corpus, split);
    out.src_vocab = out.subwords.src->vocab();
    out.tgt_vocab = out.subwords.tgt->vocab();
    const int64_t T = cfg.num_steps;
    data::Sentences src_pieces(static_cast<size_t>(n)), tgt_pieces(static_cast<size_t>(n));
    auto encode_rows = [&](const std::vector<int64_t>& rows) {
        for (int64_t r : rows) {
            src_pieces[size_t(r)] = out.subwords.src->encode_text(corpus.src[size_t(r)]);
            tgt_pieces[size_t(r)] = out.subwords.tgt->encode_text(corpus.tgt[size_t(r)]);
        }
    };
    encode_rows(split.train), encode_rows(split.valid), encode_rows(split.test);
    TextTrainRows t = fitting_train_rows(corpus, split.train, src_pieces, tgt_pieces, T);
    out.target_len_p99 = p99_len(t.tgt_lens);
    const int64_t originals = int64_t(t.rows.size());
    add_concatenated_pairs(cfg, corpus, *out.subwords.src, *out.subwords.tgt, T, t.rows, src_pieces, tgt_pieces,
                           out.train_src_text, out.train_tgt_text);
    const int64_t concatenated = int64_t(t.rows.size()) - originals;
    const data::NmtArrays all = data::build_nmt_arrays(src_pieces, tgt_pieces, out.src_vocab, out.tgt_vocab, T);
    out.train = all.subset(t.rows);
    out.valid = all.subset(split.valid);
    out.test  = all.subset(split.test);
    out.truncated_src = out.truncated_tgt = 0;  // train pairs over the cap are skipped, not cut
    keep_split_texts(out, corpus, split, t.rows, originals);
    out.pairs = out.train.n + out.valid.n + out.test.n;
    describe_text_data(out, cfg, split, t, originals, concatenated, std::move(summary));
    return out;
}

}  // namespace

int64_t pieces_num_steps(const std::vector<int64_t>& src_lens, const std::vector<int64_t>& tgt_lens, int64_t cap) {
    const int64_t t = std::max({int64_t(2), p99_len(src_lens), p99_len(tgt_lens)});
    return std::min(t, std::max<int64_t>(cap, 2));
}

std::string DataRecord::dropped_text(int64_t max_src_tokens, int64_t max_tgt_tokens, int64_t max_pairs,
                                     int64_t num_steps) const {
    if (pairs_kept == pairs_read) return detail::str("kept all ", pairs_read, pairs_read == 1 ? " pair" : " pairs");
    std::string s = detail::str("kept ", pairs_kept, " of ", pairs_read, " pairs: dropped ");
    std::string why;
    const auto add = [&why](int64_t n, const std::string& reason) {
        if (n > 0) why += detail::str(why.empty() ? "" : ", ", n, " ", reason);
    };
    add(source_too_long, detail::str("with more than ", max_src_tokens, " source token", max_src_tokens == 1 ? "" : "s"));
    add(target_too_long, detail::str("with more than ", max_tgt_tokens, " target token", max_tgt_tokens == 1 ? "" : "s"));
    add(beyond_max_pairs, detail::str("after the first ", max_pairs));
    add(over_length_cap, detail::str("train pair", over_length_cap == 1 ? "" : "s", " over the length cap of ", num_steps,
                                     " pieces with <eos> (num_steps)"));
    add(held_out_duplicates, detail::str("other translation", held_out_duplicates == 1 ? "" : "s",
                                         " of held-out sources (so that no held-out source is trained on)"));
    return s + why;
}

bool is_fra_eng_data(const DataConfig& cfg) {
    return cfg.src_file.empty() && cfg.tgt_file.empty() && data::corpus_format(cfg.path) == data::CorpusFormat::fra_eng;
}

std::string source_language(const DataConfig& cfg) {
    return !cfg.src_lang.empty() ? cfg.src_lang : is_fra_eng_data(cfg) ? "en" : "";
}

std::string target_language(const DataConfig& cfg) {
    return !cfg.tgt_lang.empty() ? cfg.tgt_lang : is_fra_eng_data(cfg) ? "fr" : "";
}

std::string language_pair(const DataConfig& cfg) {
    const std::string s = source_language(cfg), t = target_language(cfg);
    return (s.empty() ? std::string("src") : s) + "\u2192" + (t.empty() ? std::string("tgt") : t);
}

TranslationData load_translation_data(const DataConfig& cfg, const SubwordModels& given) {
    QKV_CHECK(cfg.num_steps >= 2, "data: num_steps must be >= 2, got ", cfg.num_steps);
    QKV_CHECK(cfg.max_src_tokens >= 0 && cfg.max_tgt_tokens >= 0 && cfg.max_pairs >= 0,
              "data: max-src-tokens, max-tgt-tokens and max-pairs must be >= 0");
    QKV_CHECK(cfg.n_valid >= 1 && cfg.n_test >= 1, "data: n_valid and n_test must be >= 1");
    QKV_CHECK(cfg.subword == data::SubwordKind::none || cfg.subword_vocab_size >= 5,
              "data: subword vocabulary size (--vocab-size) must be >= 5, got ", cfg.subword_vocab_size);
    QKV_CHECK(cfg.pipeline != DataPipeline::d2l_en ||
                  (cfg.subword == data::SubwordKind::none && !cfg.shared_vocab),
              "data: --subword and --shared-vocab need the anchor pipeline (presets demo, full, anchor), "
              "not d2l_en");
    TranslationData out;
    out.num_steps = cfg.num_steps;
    data::ParseOptions po;
    po.strict = cfg.strict;

    if (cfg.pipeline == DataPipeline::d2l_en) return load_d2l_en(cfg, po, std::move(out));

    data::ParallelCorpus corpus = read_pairs(cfg, po, out);
    out.malformed = corpus.malformed;
    std::string summary = corpus.summary();
    corpus = filter_pairs(std::move(corpus), cfg, summary, out.record);
    const int64_t n = corpus.size();
    out.fingerprint = fingerprint_pairs(corpus.src, corpus.tgt);
    QKV_CHECK(n >= 3, "data: only ", n, n == 1 ? " pair" : " pairs", " in ", out.origin,
              " after filtering; need at least 3");
    if (cfg.pipeline == DataPipeline::text) return load_text_data(cfg, given, corpus, summary, std::move(out));
    data::AnchorConfig ac;
    ac.num_steps = cfg.num_steps;
    ac.min_freq  = cfg.min_freq;
    ac.n_valid   = cfg.n_valid;
    ac.n_test    = cfg.n_test;
    ac.seed      = cfg.split_seed;
    if (n < 4 * (cfg.n_valid + cfg.n_test)) {
        ac.n_valid = std::max<int64_t>(1, n / 10);
        ac.n_test  = std::max<int64_t>(1, n / 10);
        summary += "; small corpus: valid and test shrunk to " + std::to_string(ac.n_valid) + " pairs each";
    }
    data::AnchorData d = data::prepare_anchor_data(corpus, ac);
    out.truncated_src = truncated_fraction(d.src_tokens, d.split.train, cfg.num_steps);
    out.truncated_tgt = truncated_fraction(d.tgt_tokens, d.split.train, cfg.num_steps);
    if (cfg.subword == data::SubwordKind::none && !cfg.shared_vocab) {
        out.src_vocab = std::move(d.src_vocab);
        out.tgt_vocab = std::move(d.tgt_vocab);
        out.train     = std::move(d.train);
        out.valid     = std::move(d.valid);
        out.test      = std::move(d.test);
    } else {
        const data::Sentences* src_units = &d.src_tokens;
        const data::Sentences* tgt_units = &d.tgt_tokens;
        data::Sentences src_pieces, tgt_pieces;
        std::string units_note;
        if (cfg.subword != data::SubwordKind::none) {
            units_note = subword_units(cfg, given, d, out, src_pieces, tgt_pieces);
            src_units  = &src_pieces;
            tgt_units  = &tgt_pieces;
        } else {
            // shared word vocabulary: both sides' train sentences, source lines first
            data::Sentences both;
            both.reserve(d.split.train.size() * 2);
            for (int64_t r : d.split.train) both.push_back(d.src_tokens[size_t(r)]);
            for (int64_t r : d.split.train) both.push_back(d.tgt_tokens[size_t(r)]);
            data::VocabOptions vo;
            vo.min_freq   = cfg.min_freq;
            out.src_vocab = data::Vocab::build(both, vo);
            out.tgt_vocab = out.src_vocab;
            units_note    = "; shared word vocabulary of " + std::to_string(out.src_vocab.size()) + " tokens";
        }
        const data::NmtArrays all =
            data::build_nmt_arrays(*src_units, *tgt_units, out.src_vocab, out.tgt_vocab, out.num_steps);
        out.train = all.subset(d.split.train);
        out.valid = all.subset(d.split.valid);
        out.test  = all.subset(d.split.test);
        summary += units_note;
    }
    for (int64_t i : d.split.test) {
        out.test_src.push_back(d.src_tokens[size_t(i)]);
        out.test_ref.push_back(d.tgt_tokens[size_t(i)]);
        out.test_src_text.push_back(corpus.src[size_t(i)]);
        out.test_ref_text.push_back(corpus.tgt[size_t(i)]);
    }
    out.pairs   = n;
    DataRecord& rec = out.record;
    rec.pairs_kept  = n;
    rec.train = out.train.n, rec.valid = out.valid.n, rec.test = out.test.n;
    rec.pipeline = detail::str("anchor: seeded shuffle split (seed ", cfg.split_seed, ")",
                               n < 4 * (cfg.n_valid + cfg.n_test) ? ", valid and test shrunk to 10 % each (small corpus)"
                                                                   : "",
                               ", ",
                               cfg.subword != data::SubwordKind::none
                                   ? detail::str(cfg.shared_vocab ? "one shared " : "per-side ",
                                                 data::subword_kind_name(cfg.subword), " vocabulary of ",
                                                 out.src_vocab.size(), cfg.shared_vocab ? "" : " / ",
                                                 cfg.shared_vocab ? "" : std::to_string(out.tgt_vocab.size()),
                                                 " pieces learned from the train split")
                                   : detail::str(cfg.shared_vocab ? "one shared word vocabulary" : "word vocabularies",
                                                 " from the train split (words seen at least ", cfg.min_freq,
                                                 " times)"),
                               ", num_steps ", out.num_steps);
    out.summary = summary + "; split " + std::to_string(out.train.n) + " train / " +
                  std::to_string(out.valid.n) + " valid / " + std::to_string(out.test.n) +
                  " test (seed " + std::to_string(cfg.split_seed) + ")";
    return out;
}

}  // namespace qkv::runtime
