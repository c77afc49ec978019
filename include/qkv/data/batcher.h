#pragma once
// Minibatches over NmtArrays (D2L's DataLoader role): a fresh permutation per epoch, consecutive
// batches cut from it, the last partial batch kept unless drop_last. Int64 row-major buffers;
// the training loop turns them into Tensors. Shapes: B batch (<= batch_size), T num_steps.
#include <cstdint>
#include <vector>

#include "qkv/data/nmt_data.h"

namespace qkv::data {

/// One minibatch, rows in permutation order. With BatcherOptions::trim the source columns are
/// cut to the longest source in the batch (Ts = src_steps) and the target columns to the longest
/// target (T = num_steps); otherwise both are the data's num_steps.
struct Batch {
    int64_t size = 0, num_steps = 0;     // B, T (target columns)
    int64_t src_steps = 0;               // Ts (source columns)
    std::vector<int64_t> src;            // (B, Ts)
    std::vector<int64_t> src_valid_len;  // (B)
    std::vector<int64_t> dec_input;      // (B, T)
    std::vector<int64_t> label;          // (B, T)
    std::vector<int64_t> tgt_valid_len;  // (B)
    std::vector<int64_t> rows;           // (B) row of each example in the dataset
};

struct BatcherOptions {
    int64_t batch_size = 128;
    bool shuffle       = true;   // false: rows in order every epoch (validation)
    bool drop_last     = false;  // D2L and the anchor keep the last partial batch
    uint64_t seed      = 0;
    /// Length bucketing (0: off). The epoch's permutation is cut into pools of
    /// bucket_pool * batch_size rows; each pool is sorted (stably) by the pair's length
    /// max(src_valid_len, tgt_valid_len) and cut into batches; the full batches of the whole epoch
    /// are then shuffled (seeded by seed and epoch), the partial one stays last. Batches then hold
    /// pairs of similar length, so `trim` removes most padding (fairseq/tensor2tensor's bucketing).
    int64_t bucket_pool = 0;
    /// Cut each batch's source and target columns to its longest valid length. Only padding is
    /// removed, so a loss that ignores padded positions is unchanged (up to dropout draws); do
    /// not use it with a loss over padding (D2L EN's --loss-on-padding).
    bool trim = false;
    /// Batches by tokens instead of rows (0: off; fairseq's --max-tokens idea, but a fixed count).
    /// A row costs max(src_valid_len, tgt_valid_len) tokens; an epoch is cut into
    /// ceil(total cost / batch_tokens) batches (at most one per row, the same number every epoch)
    /// of nearly equal cost, consecutive in the epoch's order, so a batch of short pairs holds
    /// more of them. With bucket_pool the order is first sorted by length within pools of
    /// bucket_pool batches' rows, so batches hold pairs of similar length; the batches are then
    /// shuffled (seed + 1, the epoch). batch_size and drop_last are not used.
    int64_t batch_tokens = 0;
};

/// Epoch e visits the rows in the order shuffled_indices(n, seed, e) (data/split.h: CPython's
/// random.Random(seed + (e << 64)).shuffle(list(range(n))), reproducible in Python and
/// independent of other epochs, so a resumed run sees the same batches), or 0..n-1 unshuffled.
/// This is not torch.randperm: the anchor's exact batch order is not reproduced.
/// Holds a pointer to `data`, which must outlive the Batcher.
class Batcher {
public:
    /// Throws qkv::Error when batch_size < 1.
    Batcher(const NmtArrays& data, BatcherOptions opt);
    Batcher(NmtArrays&&, BatcherOptions) = delete;  // would dangle

    /// Batches per epoch: ceil(n / batch_size), or floor with drop_last.
    int64_t num_batches() const;
    /// Starts epoch `epoch` (computes its order; the next next() returns batch 0).
    void start_epoch(int64_t epoch);
    int64_t epoch() const { return epoch_; }
    /// Fills `out` with the next batch of the current epoch; false (out untouched) at its end.
    /// The first call without start_epoch starts epoch 0.
    bool next(Batch& out);
    /// Batch `b` of the current epoch (0 <= b < num_batches(); throws otherwise).
    Batch batch(int64_t b) const;
    /// The current epoch's row order.
    const std::vector<int64_t>& order() const { return order_; }

private:
    void bucket();  // BatcherOptions::bucket_pool: reorders order_ in place
    void cut_by_tokens();  // BatcherOptions::batch_tokens: fills starts_ / ends_
    int64_t cost(int64_t row) const;
    const NmtArrays* data_;
    BatcherOptions opt_;
    int64_t epoch_ = -1;
    int64_t cursor_ = 0;
    std::vector<int64_t> order_;
    int64_t token_batches_ = 0;              // batch_tokens: batches per epoch
    std::vector<int64_t> starts_, ends_;      // batch_tokens: batch b is order_[starts_[b], ends_[b])
};

}  // namespace qkv::data
