#pragma once
// Data-parallel training (one model, N processes; PyTorch DDP's semantics): every rank builds the
// same global batches (one shared permutation per epoch), takes a contiguous share of each
// balanced by target tokens, and after backward the gradients are summed over ranks with each
// rank's share weighted by its tokens over the global batch's, so every update equals the
// single-process update on the global batch (up to the rounding of the sum, fixed for a given
// N). Rank 0's initial parameters are broadcast; dropout draws come from (seed, rank).
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/data/batcher.h"
#include "qkv/dist/communicator.h"

namespace qkv::train {

/// Rows [begin, end) of a batch of weights.size() rows that `rank` of `size` takes: contiguous
/// shares whose weight sums are as equal as contiguity allows (rank r's share starts at the first
/// row whose preceding weight reaches r/size of the total). A share may be empty when the batch
/// has fewer rows than ranks. Throws qkv::Error when rank is not in [0, size) or a weight < 0.
std::pair<int64_t, int64_t> shard_rows(std::span<const int64_t> weights, int rank, int size);

/// The rows of `b` that `rank` takes (shard_rows over target tokens, tgt_valid_len; over
/// positions, b.num_steps per row, with `by_positions`, the loss over padding). Columns are
/// kept, so trimming stays the global batch's.
data::Batch shard_batch(const data::Batch& b, int rank, int size, bool by_positions = false);

/// The dropout seed of `rank` in a run seeded `seed` (rank 0 keeps `seed`, so a one-process run
/// is unchanged).
uint64_t rank_seed(uint64_t seed, int rank);

struct GradientReducerOptions {
    /// Reduce each bucket of gradients as soon as backward has finished it, on a communication
    /// thread, while backward goes on (PyTorch DDP); false: one reduction after backward.
    bool overlap = true;
    /// Bucket sizes (bytes of fp32 gradients): buckets are filled in reverse parameter order (the
    /// order backward finishes them); the first is small so communication starts early.
    size_t first_bucket_bytes = size_t{1} << 20;
    size_t bucket_bytes = size_t{4} << 20;
};

/// Throws qkv::Error on every rank ("the ranks disagree on the gradient reduction (--grad-reduce,
/// bucket sizes): rank 1 has 'after-backward, ...' where rank 0 has 'overlap, ...'") unless all
/// ranks have the same options: their collectives must pair one for one. A collective.
void check_same_reduction_on_all_ranks(dist::Communicator& comm, const GradientReducerOptions& opt);

/// Gradient and scalar synchronisation over a communicator, between backward and the optimizer
/// step. Holds one flat fp32 buffer of all parameters' sizes, reused every step. Buckets are
/// reduced strictly in bucket order on every rank (the collectives must match), whatever order
/// the gradients become ready in.
class GradientReducer {
public:
    /// params: the optimizer's parameters, in the same order on every rank.
    GradientReducer(std::shared_ptr<dist::Communicator> comm, std::vector<Tensor> params,
                 GradientReducerOptions opt = {});
    ~GradientReducer();
    GradientReducer(const GradientReducer&) = delete;
    GradientReducer& operator=(const GradientReducer&) = delete;

    /// Runs `backward` (which calls Tensor::backward, or nothing for an empty share) and
    /// synchronises as sync() does; with overlap, buckets are reduced while it runs. Afterwards
    /// every parameter's .grad is the reduced gradient. Exceptions from `backward` propagate
    /// after the communication thread has finished the step's buckets (every rank must).
    void backward_and_sync(const std::function<void()>& backward, double local_weight,
                           double global_weight, std::span<double> scalars);

    /// Copies rank 0's parameter values to every rank (call once, before training).
    void broadcast_parameters();

    /// Replaces every parameter's .grad by Σ_ranks (local_weight / global_weight) · grad (a
    /// missing grad counts as zeros; every parameter has a grad afterwards), and every element
    /// of `scalars` by its sum over ranks. global_weight > 0 (the global batch's tokens);
    /// local_weight may be 0 (an empty share). The new grads are fresh tensors, never written
    /// in place (a grad may be shared with another tensor). Throws qkv::Error on a weight < 0.
    void sync(double local_weight, double global_weight, std::span<double> scalars);

    dist::Communicator& comm() { return *comm_; }
    /// Seconds the training thread has waited for communication so far (with overlap, only
    /// what backward did not hide).
    double comm_seconds() const { return comm_seconds_; }
    /// Number of buckets (reverse parameter order).
    size_t num_buckets() const { return buckets_.size(); }

private:
    struct Bucket {
        size_t first = 0, last = 0;  // positions in order_ [first, last)
        size_t offset = 0, count = 0;  // elements in flat_
        size_t ready = 0;
    };
    void fill(const Bucket& b, float scale);
    void write_back_grads();
    void comm_loop();

    std::shared_ptr<dist::Communicator> comm_;
    std::vector<Tensor> params_;
    GradientReducerOptions opt_;
    std::vector<float> flat_;
    std::vector<size_t> order_;           // parameter indices, last parameter first
    std::vector<size_t> offset_of_;       // parameter index -> offset in flat_
    std::vector<size_t> bucket_of_;       // parameter index -> bucket
    std::vector<Bucket> buckets_;
    double comm_seconds_ = 0;
    struct Thread;
    std::unique_ptr<Thread> thread_;
};

}  // namespace qkv::train
