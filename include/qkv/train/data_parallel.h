#pragma once
// Data-parallel training (one model, N processes; PyTorch DDP's semantics): every rank builds the
// same global batches (one shared permutation per epoch), takes a contiguous share of each
// balanced by target tokens, and after backward the gradients are summed over ranks with each
// rank's share weighted by its tokens over the global batch's, so every update equals the
// single-process update on the global batch (up to the rounding of the sum, fixed for a given
// N). Rank 0's initial parameters are broadcast; dropout draws come from (seed, rank).
#include <cstdint>
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

/// Gradient and scalar synchronisation over a communicator, between backward and the optimizer
/// step. Holds one flat fp32 buffer of all parameters' sizes, reused every step.
class GradientSync {
public:
    /// params: the optimizer's parameters, in the same order on every rank.
    GradientSync(std::shared_ptr<dist::Communicator> comm, std::vector<Tensor> params);

    /// Copies rank 0's parameter values to every rank (call once, before training).
    void broadcast_parameters();

    /// Replaces every parameter's .grad by Σ_ranks (local_weight / global_weight) · grad (a
    /// missing grad counts as zeros; every parameter has a grad afterwards), and every element
    /// of `scalars` by its sum over ranks. global_weight > 0 (the global batch's tokens);
    /// local_weight may be 0 (an empty share). The new grads are fresh tensors, never written
    /// in place (a grad may be shared with another tensor). Throws qkv::Error on a weight < 0.
    void sync(double local_weight, double global_weight, std::span<double> scalars);

    dist::Communicator& comm() { return *comm_; }
    /// Seconds spent inside the collectives so far (the communication share of a step).
    double comm_seconds() const { return comm_seconds_; }

private:
    std::shared_ptr<dist::Communicator> comm_;
    std::vector<Tensor> params_;
    std::vector<float> flat_;
    double comm_seconds_ = 0;
};

}  // namespace qkv::train
