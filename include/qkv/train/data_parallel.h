#pragma once
// Data-parallel training (one model, N processes; PyTorch DDP's semantics): every rank builds the
// same global batches (one shared permutation per epoch), takes a contiguous share of each
// balanced by target tokens, and after backward the gradients are summed over ranks with each
// rank's share weighted by its tokens over the global batch's, so every update equals the
// single-process update on the global batch (up to the rounding of the sum, fixed for a given
// N). Rank 0's initial parameters are broadcast; dropout draws come from (seed, rank).
// ZeroRedundancyAdam shards Adam's moments over the ranks (ZeRO stage 1, PyTorch's
// ZeroRedundancyOptimizer): each keeps 1/N of them, the gradients are reduce-scattered, each rank
// updates its shard of the parameters and the shards are all-gathered.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/data/batcher.h"
#include "qkv/dist/communicator.h"
#include "qkv/optim/optimizer.h"

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

    /// Reduce-scatters from now on instead of all-reducing (ZeroRedundancyAdam::bounds(): size()
    /// + 1 offsets into the parameters' elements laid end to end, the same on every rank): after
    /// a sync a rank's .grad holds the reduced gradient only on its own shard's elements, and its
    /// own weighted share elsewhere. Call before the first step. Throws qkv::Error when `bounds`
    /// does not cut the parameters into size() ranges.
    void set_shards(std::vector<int64_t> bounds);

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
    void reduce(size_t offset, size_t count);
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
    std::vector<int64_t> shards_;         // set_shards(); empty: all-reduce
    double comm_seconds_ = 0;
    struct Thread;
    std::unique_ptr<Thread> thread_;
};

/// The ZeRO shards of parameters with `numels` elements (in order) over `size` ranks: size + 1
/// offsets into their elements laid end to end, bounds[0] = 0, bounds[size] = the total; rank r
/// owns [bounds[r], bounds[r+1]). Balanced by element count: boundary r is r/size of the total,
/// moved down to a multiple of `align` elements from the start of the tensor it falls in (so each
/// rank's piece of a tensor starts on a 64-byte boundary with the default 16 fp32 elements: the
/// vector Adam kernel loads from aligned addresses), within `align` elements of the even split. A
/// shard may be empty (fewer than size · align elements). Throws qkv::Error on size < 1, align <
/// 1 or a negative count.
std::vector<int64_t> zero_shard_bounds(std::span<const int64_t> numels, int size, int64_t align = 16);

/// Adam (optim::Adam's update, bit for bit per element) with its moments sharded over the ranks:
/// ZeRO stage 1, as PyTorch's ZeroRedundancyOptimizer(params, optimizer_class=Adam) but cutting the
/// flattened parameters into contiguous ranges balanced by element count (zero_shard_bounds)
/// instead of whole tensors. Rank r keeps exp_avg and exp_avg_sq for its range only: state_bytes()
/// is about 1/size() of Adam's 8 bytes per parameter. step() and clip_factor() are collectives
/// (every rank calls them in the same order). Parameters must be contiguous fp32, the same on
/// every rank.
/// Use with a GradientReducer::set_shards(bounds()): only this rank's shard of .grad is read.
class ZeroRedundancyAdam : public optim::Optimizer {
public:
    /// Throws as optim::Adam does (messages start "ZeroRedundancyAdam:"), when comm is null and
    /// when a parameter is not fp32.
    ZeroRedundancyAdam(std::vector<Tensor> params, std::shared_ptr<dist::Communicator> comm, double lr = 1e-3,
                       optim::AdamOptions opt = {});
    /// Adam on this rank's shard (parameters without .grad are skipped, as Adam does), then every
    /// rank's updated shard is all-gathered into every rank's parameters. A collective.
    void step(double grad_scale = 1.0) override;
    /// The global norm over every rank's shard of the gradients (a double sum of squares per
    /// rank, all-reduced): grad_clip_factor's norm up to the grouping of that sum. A collective.
    optim::ClipFactor clip_factor(double max_norm) override;
    /// Gathers the whole state onto rank `to` (torch's consolidate_state_dict): every rank must
    /// call it; then state_dict() on `to` returns it until release_state_dict() or the next step.
    /// Rank `to` then holds the whole moments (its own shard becomes a view of them: Adam's
    /// unsharded memory, no more); the others one tensor's at a time, during the call.
    void consolidate_state_dict(int to = 0);
    /// Drops the consolidated state: rank `to` goes back to its shard's memory (copied out one
    /// tensor at a time). step() and load_state_dict() do it first.
    void release_state_dict();
    /// optim::Adam's state_dict (keys "step", "exp_avg.<i>", "exp_avg_sq.<i>" of every parameter
    /// once a step was taken), so a checkpoint loads into Adam or into any number of ranks. Throws
    /// qkv::Error unless consolidate_state_dict(to) ran on every rank since the last step and this
    /// is rank `to`.
    std::map<std::string, Tensor> state_dict() const override;
    /// Takes this rank's shard of a whole state (Adam's or a consolidated one, written with any
    /// number of ranks); a missing moment is zeros (Adam's state before a parameter's first
    /// step). Throws naming a mis-shaped entry. Every rank loads the whole state.
    void load_state_dict(const std::map<std::string, Tensor>& sd) override;
    /// The shards (zero_shard_bounds of the parameters over comm->size()).
    const std::vector<int64_t>& bounds() const { return bounds_; }
    /// Bytes of moments this rank holds (2 · 4 · its shard's elements).
    int64_t state_bytes() const;
    /// Bytes of moments Adam holds unsharded (2 · 4 · every parameter's elements).
    int64_t total_state_bytes() const;

private:
    struct Piece {  // this rank's elements [begin, end) of parameter `index`
        size_t index;
        int64_t begin, end;
        Tensor m, v;
    };
    std::shared_ptr<dist::Communicator> comm_;
    optim::AdamOptions opt_;
    std::vector<int64_t> bounds_, offset_of_;  // offset_of_: parameter -> first flat element
    std::vector<Piece> pieces_;
    // Parameters gathered together (consecutive, up to kGatherElements), and their buffer.
    std::vector<std::pair<size_t, size_t>> gather_groups_;
    std::vector<float> gather_buf_;
    std::map<std::string, Tensor> consolidated_;
    int64_t consolidated_step_ = -1;
    int consolidated_to_ = -1;
    std::vector<int64_t> block_counts(int64_t begin, int64_t end) const;
};

}  // namespace qkv::train
