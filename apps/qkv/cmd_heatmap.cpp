// `qkv heatmap`: translates one sentence and draws the attention weights D2L shows (spec §5):
// encoder self-attention, decoder self-attention and encoder–decoder (cross) attention, one
// panel per block × head, tokens as tick labels. For a Bahdanau model (one additive attention,
// spec §5 "Bahdanau"): one panel of the decoder's attention over the source per output token,
// also printed as numbers.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "options.h"
#include "qkv/core/parallel.h"
#include "qkv/data/tokenizer.h"
#include "qkv/decode/greedy.h"
#include "qkv/runtime/model_dir.h"
#include "qkv/runtime/text.h"
#include "qkv/runtime/translate.h"
#include "qkv/runtime/translation_data.h"
#include "qkv/util/atomic_file.h"
#include "qkv/util/plot.h"

namespace qkv::cli {
namespace {

struct HeatmapArgs {
    std::string model = "runs/qkv", sentence, out = "attention", format = "png";
    int64_t max_len = 0;
    bool pe_quirk = false;
};

/// (1, H, Tq, Tk) weights -> one panel per head, values padded to `cols` columns with 0.
util::HeatmapPanel panel_from(const std::vector<float>& w, int64_t h, int64_t Tq, int64_t Tk, int64_t cols) {
    util::HeatmapPanel p;
    p.rows = Tq;
    p.cols = cols;
    p.values.assign(size_t(Tq * cols), 0.0);
    for (int64_t i = 0; i < Tq; ++i)
        for (int64_t j = 0; j < Tk; ++j) p.values[size_t(i * cols + j)] = w[size_t((h * Tq + i) * Tk + j)];
    p.title = "Head " + std::to_string(h + 1);
    return p;
}

/// A warning when the greedy translation ran to the length limit before <eos>, as `qkv translate`
/// says it (runtime::length_limit_note): the rows drawn then end mid-sentence. `limit`: the limit
/// decoding had (a real-text model's source-tied one when below max_len).
void note_if_cut(const std::vector<int64_t>& out, int64_t limit, int64_t max_len) {
    if (int64_t(out.size()) < limit) return;  // the limit counts the <eos>
    std::fprintf(stderr, "qkv heatmap: warning: %s\n",
                 runtime::length_limit_note("the translation", "--max-len", max_len, limit < max_len).c_str());
}

/// Bahdanau: greedy decoding with the trace; cross[t][0] is (1, 1, 1, num_steps) for output token
/// t. The source keeps its padding: the GRU encoder runs over the pads (spec §7.11), so its states
/// (and the translation) depend on them; the padded keys get weight 0 and are not drawn (D2L
/// slices the keys to the valid length the same way).
void run_bahdanau(const HeatmapArgs& a, runtime::ModelDir& m) {
    const std::vector<std::string> toks = runtime::tokenize_sentences(m, {a.sentence}).front();
    // a subword model's attention is over pieces: the labels are pieces, the printed line words
    data::SeqArray arr = runtime::encode_sources(runtime::source_units(m, {toks}), m.src_vocab, m.config.data.num_steps);
    const int64_t Ts = arr.valid_len[0], Tp = arr.num_steps;
    const std::vector<int64_t> ids(arr.ids.begin(), arr.ids.begin() + Ts);
    const std::vector<std::string> src_labels = m.src_vocab.decode(ids);
    models::DecoderAttentionTrace trace;
    decode::GreedyOptions g;
    g.bos     = m.tgt_vocab.bos();
    g.eos     = m.tgt_vocab.eos();
    g.max_len = a.max_len > 0 ? a.max_len : m.config.decode.max_len;
    g.trace   = &trace;
    auto out = decode::greedy_decode(*m.model, from_vector(arr.ids, {1, Tp}), from_vector<int64_t>({Ts}, {1}), g);
    const std::vector<std::string> hyp = m.tgt_vocab.decode(out[0]);
    note_if_cut(out[0], g.max_len, g.max_len);
    std::printf("%s => %s\n", runtime::join_tokens(toks).c_str(),
                runtime::join_tokens(runtime::target_words(m, hyp)).c_str());
    const int64_t steps = int64_t(trace.cross.size());
    std::vector<std::string> out_labels = hyp;
    if (int64_t(out_labels.size()) < steps) out_labels.push_back("<eos>");
    util::HeatmapPanel p;
    p.rows = steps, p.cols = Ts;
    p.values.assign(size_t(steps * Ts), 0.0);
    std::printf("attention weights (rows: output tokens; columns: %s):\n", runtime::join_tokens(src_labels).c_str());
    for (int64_t t = 0; t < steps; ++t) {
        const auto w = trace.cross[size_t(t)][0].contiguous().to_vector<float>();  // (1, 1, 1, Tp)
        std::printf("  %-12s", out_labels[size_t(t)].c_str());
        for (int64_t j = 0; j < Ts; ++j) {
            p.values[size_t(t * Ts + j)] = w[size_t(j)];
            std::printf(" %.4f", double(w[size_t(j)]));
        }
        std::printf("\n");
    }
    util::HeatmapGrid cross(1, 1);
    cross.title = "Bahdanau attention";
    cross.xlabel = "Key positions (source)", cross.ylabel = "Query positions (output token)";
    cross.row_labels = out_labels, cross.col_labels = src_labels;
    cross.set(0, 0, p);
    const std::string path = a.out + "-cross." + a.format;
    cross.save(path);
    std::printf("wrote %s\n", path.c_str());
}

/// The file prefix --out names, checked before anything is loaded or decoded: a value ending in
/// '/' or naming an existing folder is a folder (the files go inside it with the default prefix
/// "attention"); the folder the files go in must exist. A bad --out is a usage error (exit 2), as
/// for eval's --json and train's --out; an empty one is refused when the options are parsed
/// (non_empty_path).
std::string output_prefix(const std::string& out) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const bool as_dir = out.back() == '/' || fs::is_directory(out, ec);
    // "-o /dev/stdout" would make /dev/stdout-encoder.png: heatmap writes several files, so a
    // device, FIFO, socket or open descriptor as the prefix is refused.
    const fs::file_status st = fs::status(out, ec);
    bool stream = false;
    try {
        stream = util::is_stream_output(out);
    } catch (const Error&) {  // a symlink loop: reported by the write check below
    }
    if (stream || (fs::exists(st) && !fs::is_regular_file(st) && !fs::is_directory(st)))
        usage_error("heatmap: --out '" + out + "' is a device, FIFO or standard output, but --out is a file prefix: "
                    "heatmap writes several files (PREFIX-encoder.png, ...); give a folder or a prefix in one");
    const fs::path prefix = as_dir ? fs::path(out) / "attention" : fs::path(out);
    const fs::path folder = prefix.parent_path();
    if (!folder.empty() && !fs::is_directory(folder, ec))
        usage_error("heatmap: --out '" + out + "': the folder '" + folder.string() + "' does not exist" +
                    (as_dir ? "" : " (--out is a file prefix; create the folder first)"));
    return prefix.string();
}

void run(HeatmapArgs a) {
    // A Bahdanau model's additive attention has no flash path: --attention does not concern it.
    // Anything else (a Transformer, or a folder whose config cannot be read) is checked before
    // the model is loaded.
    bool additive = false;
    try {
        additive = runtime::load_model_dir_config(a.model).architecture == runtime::ModelKind::bahdanau;
    } catch (const Error&) {
    }
    if (!additive) check_weights_backend("heatmap");
    QKV_CHECK(a.format == "png" || a.format == "svg", "heatmap: --format must be png or svg");
    a.out = output_prefix(a.out);
    check_writable("--out", a.out + (additive ? "-cross." : "-encoder.") + a.format);  // before decoding
    const size_t bad = data::invalid_utf8_offset(a.sentence);
    QKV_CHECK(bad == std::string::npos, "heatmap: the sentence is not valid UTF-8 (byte offset ", bad, ")");
    runtime::ModelDir m = runtime::load_model_dir(a.model);
    const std::vector<std::string> toks = runtime::tokenize_sentences(m, {a.sentence}).front();
    QKV_CHECK(!toks.empty(), "heatmap: the sentence is empty");
    warn_if_truncated("qkv heatmap", "the sentence", m, toks);
    if (a.pe_quirk) {
        QKV_CHECK(m.transformer() != nullptr, "--pe-quirk applies to the Transformer only");
        m.transformer()->set_pe_position_zero_at_inference(true);
    }
    if (m.bahdanau()) return run_bahdanau(a, m);
    auto& model = *m.transformer();
    const auto& cfg = m.config.model;
    const int64_t H = cfg.num_heads, L = cfg.num_blks;

    // The source without padding: padded keys are masked anyway, so the weights are the same.
    // a subword model's attention is over pieces: the labels are pieces, the printed line words
    data::SeqArray arr = runtime::encode_sources(runtime::source_units(m, {toks}), m.src_vocab, m.config.data.num_steps);
    const int64_t Ts = arr.valid_len[0];
    std::vector<int64_t> ids(arr.ids.begin(), arr.ids.begin() + Ts);
    std::vector<std::string> src_labels = m.src_vocab.decode(ids);

    model.keep_attention_weights(true);
    models::DecoderAttentionTrace trace;
    decode::GreedyOptions g;
    g.bos     = m.tgt_vocab.bos();
    g.eos     = m.tgt_vocab.eos();
    g.max_len = a.max_len > 0 ? a.max_len : m.config.decode.max_len;
    g.trace   = &trace;
    if (runtime::reads_raw_text(m)) {  // as translate_nbest decodes a real-text model
        g.banned  = {m.tgt_vocab.unk()};
        g.max_len = std::min(g.max_len, runtime::source_tied_max_len(Ts));
    }
    auto out = decode::greedy_decode(model, from_vector(ids, {1, Ts}), from_vector<int64_t>({Ts}, {1}), g);
    const std::vector<std::string> hyp = m.tgt_vocab.decode(out[0]);
    note_if_cut(out[0], g.max_len, a.max_len > 0 ? a.max_len : m.config.decode.max_len);
    std::printf("%s => %s\n", runtime::join_tokens(toks).c_str(),
                runtime::join_tokens(runtime::target_words(m, hyp)).c_str());

    const int64_t steps = int64_t(trace.self.size());
    std::vector<std::string> out_labels = hyp, in_labels = {"<bos>"};
    if (int64_t(out_labels.size()) < steps) out_labels.push_back("<eos>");
    for (int64_t i = 0; i + 1 < steps; ++i) in_labels.push_back(out_labels[size_t(i)]);
    const std::string ext = "." + a.format;

    util::HeatmapGrid enc(L, H);
    enc.title = "encoder self-attention";
    enc.xlabel = "Key positions", enc.ylabel = "Query positions";
    enc.row_labels = src_labels, enc.col_labels = src_labels;
    for (int64_t b = 0; b < L; ++b) {
        const Tensor w = model.encoder->blks[size_t(b)]->attention->attention_weights();
        QKV_CHECK(w.defined(), "heatmap: encoder attention weights were not kept");
        const auto v = w.contiguous().to_vector<float>();
        for (int64_t h = 0; h < H; ++h) {
            auto p = panel_from(v, h, Ts, Ts, Ts);
            p.title = "block " + std::to_string(b + 1) + ", head " + std::to_string(h + 1);
            enc.set(b, h, p);
        }
    }

    util::HeatmapGrid self(L, H), cross(L, H);
    self.title = "decoder self-attention", cross.title = "encoder-decoder attention";
    self.xlabel = "Decoder input", cross.xlabel = "Source";
    self.ylabel = cross.ylabel = "Output token";
    self.row_labels = cross.row_labels = out_labels;
    self.col_labels = in_labels;
    cross.col_labels = src_labels;
    for (int64_t b = 0; b < L; ++b) {
        // Stack the single query row of every step: (H, steps, steps) and (H, steps, Ts).
        std::vector<float> sv(size_t(H * steps * steps), 0.f), cv(size_t(H * steps * Ts), 0.f);
        for (int64_t t = 0; t < steps; ++t) {
            const auto s = trace.self[size_t(t)][size_t(b)].contiguous().to_vector<float>();   // (1, H, 1, t+1)
            const auto c = trace.cross[size_t(t)][size_t(b)].contiguous().to_vector<float>();  // (1, H, 1, Ts)
            for (int64_t h = 0; h < H; ++h) {
                for (int64_t j = 0; j <= t; ++j) sv[size_t((h * steps + t) * steps + j)] = s[size_t(h * (t + 1) + j)];
                for (int64_t j = 0; j < Ts; ++j) cv[size_t((h * steps + t) * Ts + j)] = c[size_t(h * Ts + j)];
            }
        }
        for (int64_t h = 0; h < H; ++h) {
            auto ps = panel_from(sv, h, steps, steps, steps);
            auto pc = panel_from(cv, h, steps, Ts, Ts);
            ps.title = pc.title = "block " + std::to_string(b + 1) + ", head " + std::to_string(h + 1);
            self.set(b, h, ps);
            cross.set(b, h, pc);
        }
    }
    // Every image is sized before any is written, so a too-large one leaves no partial output.
    for (const auto* grid : {&enc, &self, &cross}) {
        const auto [w, h] = grid->canvas_size();
        QKV_CHECK(w <= util::kMaxCanvasPx && h <= util::kMaxCanvasPx, "heatmap: the ", grid->title,
                  " image would be ", w, "x", h, " px (at most ", util::kMaxCanvasPx, " each way) for ", steps,
                  " decoded tokens and ", Ts, " source tokens: use a shorter sentence or a smaller --max-len");
    }
    enc.save(a.out + "-encoder" + ext);
    self.save(a.out + "-decoder-self" + ext);
    cross.save(a.out + "-cross" + ext);
    std::printf("wrote %s-encoder%s, %s-decoder-self%s, %s-cross%s\n", a.out.c_str(), ext.c_str(),
                a.out.c_str(), ext.c_str(), a.out.c_str(), ext.c_str());
}

Registration reg([](CLI::App& app) {
    auto a = std::make_shared<HeatmapArgs>();
    CLI::App* c = app.add_subcommand("heatmap", "draw a trained model's attention weights for one sentence");
    c->add_option("--model", a->model, "model folder written by qkv train (default runs/qkv)")
        ->check(non_empty_path());
    c->add_option("sentence", a->sentence, "a sentence in the model's source language")->required();
    c->add_option("--out,-o", a->out,
                  "output file prefix (default 'attention': attention-encoder.png, ...); a folder (an "
                  "existing one, or a value ending in '/') gets the files inside it with that default "
                  "prefix; the folder must exist")
        ->check(non_empty_path());
    c->add_option("--format", a->format, "png or svg (default png)")->check(CLI::IsMember({"png", "svg"}));
    c->add_option("--max-len", a->max_len, "most output tokens, <eos> included (default: config.json's decode.max_len)")->transform(int_range(1, runtime::kMaxLenMost));
    c->add_flag("--pe-quirk", a->pe_quirk, "D2L's inference quirk: positional encoding 0 at every step");
    c->callback([a] { run(*a); });
});

}  // namespace
}  // namespace qkv::cli
