// Greedy decoding: the first maximum of the next-token logits (the model's greedy_next, fused with
// the output layer where it can be), batched, cached or recomputed.
#include "qkv/decode/greedy.h"

#include "qkv/autograd/grad_mode.h"
#include "qkv/decode/deadline.h"

namespace qkv::decode {

std::vector<std::vector<int64_t>> greedy_decode(models::EncoderDecoder& model, const Tensor& src,
                                                const Tensor& src_valid_len,
                                                const GreedyOptions& opt) {
    const int64_t V = model.tgt_vocab_size();
    QKV_CHECK(opt.bos >= 0 && opt.bos < V && opt.eos >= 0 && opt.eos < V,
              "greedy_decode: bos and eos must be target ids in [0, ", V, "), got ", opt.bos, ", ",
              opt.eos);
    QKV_CHECK(opt.max_len >= 1, "greedy_decode: max_len must be >= 1, got ", opt.max_len);
    std::vector<char> banned_flags;  // empty when nothing is banned
    for (int64_t id : opt.banned) {
        QKV_CHECK(id >= 0 && id < V && id != opt.eos, "greedy_decode: banned id ", id,
                  " is outside [0, ", V, ") or is <eos>");
        if (banned_flags.empty()) banned_flags.assign(static_cast<size_t>(V), 0);
        banned_flags[size_t(id)] = 1;
    }
    QKV_CHECK(src.defined() && src.dim() == 2, "greedy_decode: src must be (B, Ts)");
    const int64_t B = src.size(0);
    NoGradGuard ng;

    std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
    std::vector<char> done(size_t(B), 0);
    int64_t n_done = 0;
    // prefix: (B, t+1) decoder inputs so far, <bos> first (only for the uncached path)
    std::vector<int64_t> prefix(size_t(B), opt.bos);
    std::unique_ptr<models::DecoderState> state;
    // Cached path: rows that have produced <eos> are dropped from the batch (their cache rows
    // too, through DecoderState::reorder), so the step cost follows the unfinished rows only.
    // `rows[i]` is the original row of batch position i. Not with a trace (heatmaps want every
    // row at every step) and not with early_stop = false (D2L EN runs every row max_len steps).
    const bool compact = opt.use_cache && opt.trace == nullptr && opt.early_stop;
    std::vector<int64_t> rows(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) rows[size_t(b)] = b;
    std::vector<int64_t> last(size_t(B), opt.bos);  // per batch position
    if (opt.use_cache) {
        state = model.init_state(src, src_valid_len);
        state->trace = opt.trace;
    }
    for (int64_t t = 0; t < opt.max_len; ++t) {
        detail::check_decode_deadline("greedy_decode", t);
        const int64_t Bn = int64_t(rows.size());
        Tensor hidden;  // (Bn, C): the decoder's top states; greedy_next applies the output layer
        if (opt.use_cache) {
            hidden = model.decode_step_hidden(from_vector(last, {Bn}), *state);
        } else {
            Tensor dec = from_vector(prefix, {B, t + 1});
            hidden = model.forward_hidden(src, src_valid_len, dec).select(1, t);
        }
        const std::vector<int64_t> next = model.greedy_next(hidden, banned_flags).to_vector<int64_t>();
        std::vector<int64_t> grown;
        if (!opt.use_cache) grown.reserve(size_t(B * (t + 2)));
        for (int64_t i = 0; i < Bn; ++i) {
            const int64_t b = rows[size_t(i)];
            const int64_t tok = next[size_t(i)];
            if (!done[size_t(b)]) {
                if (tok == opt.eos) {
                    done[size_t(b)] = 1;
                    ++n_done;
                } else {
                    out[size_t(b)].push_back(tok);
                }
            }
            last[size_t(i)] = tok;
            if (!opt.use_cache) {
                grown.insert(grown.end(), prefix.begin() + b * (t + 1), prefix.begin() + (b + 1) * (t + 1));
                grown.push_back(tok);
            }
        }
        if (!opt.use_cache) prefix.swap(grown);
        if (opt.early_stop && n_done == B) break;
        if (compact && t + 1 < opt.max_len) {
            std::vector<int64_t> keep, keep_rows, keep_last;
            for (int64_t i = 0; i < Bn; ++i)
                if (!done[size_t(rows[size_t(i)])]) {
                    keep.push_back(i);
                    keep_rows.push_back(rows[size_t(i)]);
                    keep_last.push_back(last[size_t(i)]);
                }
            if (int64_t(keep.size()) < Bn) {
                state->reorder(from_vector(keep, {int64_t(keep.size())}));
                rows.swap(keep_rows);
                last.swap(keep_last);
            }
        }
    }
    return out;
}

}  // namespace qkv::decode
