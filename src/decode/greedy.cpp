// Greedy decoding: decode::generate with beam size 1 on the fused greedy_next path, cached or
// (for checking) recomputed through the teacher-forced forward.
#include "qkv/decode/greedy.h"

#include "qkv/decode/generate.h"

namespace qkv::decode {

std::vector<std::vector<int64_t>> greedy_decode(models::Autoregressive& model, const Tensor& src,
                                                const Tensor& src_valid_len, const GreedyOptions& opt) {
    DecodeOptions d;
    d.bos       = opt.bos;
    d.eos       = opt.eos;
    d.max_len   = opt.max_len;
    d.beam_size = 1;
    d.banned    = opt.banned;
    d.scores    = false;
    d.trace     = opt.trace;
    std::vector<std::vector<Hypothesis>> hyps;
    if (opt.use_cache) {
        hyps = detail::generate_as(model, src, src_valid_len, d, "greedy_decode");
    } else {
        auto* ed = dynamic_cast<models::EncoderDecoder*>(&model);
        QKV_CHECK(ed != nullptr, "greedy_decode: use_cache = false needs an EncoderDecoder (teacher-forced forward)");
        models::TeacherForcedDecoding full(*ed);
        hyps = detail::generate_as(full, src, src_valid_len, d, "greedy_decode");
    }
    std::vector<std::vector<int64_t>> out;
    out.reserve(hyps.size());
    for (auto& h : hyps) out.push_back(h.empty() ? std::vector<int64_t>{} : std::move(h.front().tokens));
    return out;
}

}  // namespace qkv::decode
