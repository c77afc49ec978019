// What the notebooks (notebooks/) look inside: qkv.attention_trace, every attention weight of a
// trained model folder for one sentence as numpy arrays — what `qkv heatmap` draws
// (apps/qkv/cmd_heatmap.cpp), for D2L's show_heatmaps (11.4.4, 11.7.6), greedy decoding with the
// weights kept — and qkv.allocator_stats, the tensor allocator's counters (core/allocator.h), for
// the fused kernel's memory curve.
#include <pybind11/stl/filesystem.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "bind.h"
#include "qkv/core/allocator.h"
#include "qkv/core/parallel.h"
#include "qkv/data/tokenizer.h"
#include "qkv/decode/greedy.h"
#include "qkv/data/text.h"
#include "qkv/runtime/model_dir.h"
#include "qkv/runtime/text.h"
#include "qkv/runtime/translate.h"
#include "qkv/runtime/text.h"
#include "qkv/runtime/translation_data.h"

namespace qkv::py {
namespace {

/// (L, H, rows, cols) float32 array, zero-filled.
pyb::array_t<float> zeros4(int64_t L, int64_t H, int64_t rows, int64_t cols) {
    pyb::array_t<float> a({L, H, rows, cols});
    std::fill(a.mutable_data(), a.mutable_data() + a.size(), 0.f);
    return a;
}

pyb::dict attention_trace(const std::filesystem::path& model_dir, const std::string& sentence, int64_t max_len) {
    if (max_len > 1000) throw pyb::value_error(detail::str("max_len: ", max_len, " is above 1000 (<= 0: config.json's)"));
    const size_t bad = data::invalid_utf8_offset(sentence);
    if (bad != std::string::npos || sentence.find('\0') != std::string::npos)
        throw pyb::value_error("sentence: invalid UTF-8 or a NUL byte");
    if (data::raw_words(sentence).empty()) throw pyb::value_error("sentence: empty");

    std::vector<std::string> src_labels, hyp_words, out_labels, in_labels;
    int64_t L = 1, H = 1, Ts = 0, steps = 0;
    models::DecoderAttentionTrace trace;
    std::vector<float> enc;  // (L, H, Ts, Ts), Transformer only
    bool transformer = false;
    {
        pyb::gil_scoped_release nogil;
        const bool prev_flush = flush_denormal();
        set_flush_denormal(true);  // as qkv (apps/qkv/main.cpp) and qkv.Translator
        runtime::ModelDir m = runtime::load_model_dir(model_dir.string());
        const std::vector<std::string> toks = runtime::tokenize_sentences(m, {sentence}).front();
        data::SeqArray arr = runtime::encode_sources(runtime::source_units(m, {toks}), m.src_vocab, m.config.data.num_steps);
        Ts = arr.valid_len[0];
        src_labels = m.src_vocab.decode(std::vector<int64_t>(arr.ids.begin(), arr.ids.begin() + Ts));
        decode::GreedyOptions g;
        g.bos     = m.tgt_vocab.bos();
        g.eos     = m.tgt_vocab.eos();
        g.max_len = max_len > 0 ? max_len : m.config.decode.max_len;
        g.trace   = &trace;
        if (runtime::reads_raw_text(m)) {  // as runtime::translate_nbest decodes a real-text model
            g.banned  = {m.tgt_vocab.unk()};
            g.max_len = std::min(g.max_len, runtime::source_tied_max_len(Ts));
        }
        std::vector<std::vector<int64_t>> out;
        if (auto* t = m.transformer()) {
            // The source without padding, as `qkv heatmap`: padded keys are masked, the weights are the same.
            transformer = true;
            L = m.config.model.num_blks, H = m.config.model.num_heads;
            t->keep_attention_weights(true);
            std::vector<int64_t> ids(arr.ids.begin(), arr.ids.begin() + Ts);
            out = decode::greedy_decode(*t, from_vector(ids, {1, Ts}), from_vector<int64_t>({Ts}, {1}), g);
            for (int64_t b = 0; b < L; ++b) {
                const Tensor w = t->encoder->blks[size_t(b)]->attention->attention_weights();  // (1, H, Ts, Ts)
                QKV_CHECK(w.defined(), "attention_trace: encoder attention weights were not kept");
                const auto v = w.contiguous().to(DType::f32).to_vector<float>();
                enc.insert(enc.end(), v.begin(), v.end());
            }
        } else {
            // Bahdanau: the GRU encoder runs over the padded source (its states depend on the pads).
            out = decode::greedy_decode(*m.model, from_vector(arr.ids, {1, arr.num_steps}),
                                        from_vector<int64_t>({Ts}, {1}), g);
        }
        set_flush_denormal(prev_flush);
        const std::vector<std::string> hyp = m.tgt_vocab.decode(out[0]);
        hyp_words = runtime::target_words(m, hyp);
        steps      = int64_t(trace.cross.size());
        out_labels = hyp;
        if (int64_t(out_labels.size()) < steps) out_labels.push_back("<eos>");
        in_labels = {"<bos>"};
        for (int64_t i = 0; i + 1 < steps; ++i) in_labels.push_back(out_labels[size_t(i)]);
    }
    pyb::dict d;
    d["translation"]    = runtime::join_tokens(hyp_words);
    d["source_tokens"]  = src_labels;
    d["output_tokens"]  = out_labels;
    d["decoder_inputs"] = in_labels;
    auto cross          = zeros4(L, H, steps, Ts);
    auto c              = cross.mutable_unchecked<4>();
    for (int64_t s = 0; s < steps; ++s)
        for (int64_t b = 0; b < L; ++b) {
            // Transformer: (1, H, 1, Ts); Bahdanau: one tensor whose last dim is the padded source.
            const auto v    = trace.cross[size_t(s)][size_t(b)].contiguous().to(DType::f32).to_vector<float>();
            const int64_t k = trace.cross[size_t(s)][size_t(b)].size(-1);
            for (int64_t h = 0; h < H; ++h)
                for (int64_t j = 0; j < Ts; ++j) c(b, h, s, j) = v[size_t(h * k + j)];
        }
    d["cross"] = cross;
    if (transformer) {
        auto e = zeros4(L, H, Ts, Ts);
        std::copy(enc.begin(), enc.end(), e.mutable_data());
        d["encoder"] = e;
        auto self    = zeros4(L, H, steps, steps);
        auto sv      = self.mutable_unchecked<4>();
        for (int64_t s = 0; s < steps; ++s)
            for (int64_t b = 0; b < L; ++b) {
                const auto v = trace.self[size_t(s)][size_t(b)].contiguous().to(DType::f32).to_vector<float>();  // (1, H, 1, s+1)
                for (int64_t h = 0; h < H; ++h)
                    for (int64_t j = 0; j <= s; ++j) sv(b, h, s, j) = v[size_t(h * (s + 1) + j)];
            }
        d["decoder_self"] = self;
    }
    return d;
}

}  // namespace

void bind_inspect(pyb::module_& m) {
    m.def("allocator_stats", [] {
        const AllocatorStats s = allocator_stats();
        pyb::dict d;
        d["allocs"]        = s.allocs;
        d["cache_hits"]    = s.cache_hits;
        d["system_allocs"] = s.system_allocs;
        d["bytes_fresh"]   = s.bytes_fresh;
        d["bytes_in_use"]  = s.bytes_in_use;
        d["bytes_cached"]  = s.bytes_cached;
        d["peak_bytes"]    = s.peak_bytes;
        d["peak_reserved"] = s.peak_reserved;
        return d;
    }, "The tensor allocator's counters since reset_allocator_stats() (core/allocator.h), in bytes and calls: "
       "bytes_in_use (live tensor memory now), peak_bytes (its maximum), bytes_cached, peak_reserved, allocs, "
       "cache_hits, system_allocs, bytes_fresh. Memory a kernel takes outside tensors (per-thread workspaces) "
       "is not counted.");
    m.def("reset_allocator_stats", &reset_allocator_stats,
          "Zeroes allocator_stats()'s counters; peak_bytes restarts from the bytes in use now.");
    m.def("attention_trace", &attention_trace, pyb::arg("model_dir"), pyb::arg("sentence"), pyb::kw_only(),
          pyb::arg("max_len") = 0,
          R"(Translates one sentence greedily with a model folder (qkv train --out DIR; a str or os.PathLike) and returns every attention
weight, as `qkv heatmap` draws them: a dict of translation (str), source_tokens (the source units and
<eos>), output_tokens (the output units and <eos>), decoder_inputs (<bos> and the outputs but the last),
and float32 arrays: cross (L, H, steps, source units), the encoder–decoder attention of each decoder
block and head; for a Transformer also encoder (L, H, source units, source units), the encoder's
self-attention, and decoder_self (L, H, steps, steps), the decoder's masked self-attention (step t
attends to inputs 0..t; later ones are 0). A Bahdanau model has one additive attention: cross is
(1, 1, steps, source units). max_len <= 0: config.json's. ValueError for an empty or invalid sentence;
qkv.Error for a folder that is not a model.)");
}

}  // namespace qkv::py
