// Data-parallel helpers (train/data_parallel.h).
#include "qkv/train/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/ops/optim_step.h"

namespace qkv::train {

std::pair<int64_t, int64_t> shard_rows(std::span<const int64_t> weights, int rank, int size) {
    QKV_CHECK(size >= 1 && rank >= 0 && rank < size, "shard_rows: rank ", rank, " not in [0, ", size, ")");
    int64_t total = 0;
    for (int64_t w : weights) {
        QKV_CHECK(w >= 0, "shard_rows: negative weight ", w);
        total += w;
    }
    const int64_t n = static_cast<int64_t>(weights.size());
    // start(r): the first row whose preceding weight reaches r/size of the total (integer math:
    // prefix * size >= r * total), so the shares tile [0, n) in order.
    auto start = [&](int r) {
        if (r == 0) return int64_t{0};
        if (r == size) return n;
        int64_t prefix = 0, i = 0;
        while (i < n && prefix * size < static_cast<int64_t>(r) * total) prefix += weights[static_cast<size_t>(i++)];
        return i;
    };
    return {start(rank), start(rank + 1)};
}

data::Batch shard_batch(const data::Batch& b, int rank, int size, bool by_positions) {
    if (size == 1) return b;
    std::vector<int64_t> w(static_cast<size_t>(b.size));
    for (int64_t i = 0; i < b.size; ++i)
        w[static_cast<size_t>(i)] = by_positions ? b.num_steps : b.tgt_valid_len[static_cast<size_t>(i)];
    const auto range = shard_rows(w, rank, size);
    const int64_t r0 = range.first, r1 = range.second;  // not a structured binding: lambdas capture it (clang 14)
    data::Batch s;
    s.size = r1 - r0;
    s.num_steps = b.num_steps;
    s.src_steps = b.src_steps;
    auto rows = [&](const std::vector<int64_t>& v, int64_t width) {
        return std::vector<int64_t>(v.begin() + r0 * width, v.begin() + r1 * width);
    };
    s.src = rows(b.src, b.src_steps);
    s.src_valid_len = rows(b.src_valid_len, 1);
    s.dec_input = rows(b.dec_input, b.num_steps);
    s.label = rows(b.label, b.num_steps);
    s.tgt_valid_len = rows(b.tgt_valid_len, 1);
    s.rows = rows(b.rows, 1);
    return s;
}

uint64_t rank_seed(uint64_t seed, int rank) {
    if (rank == 0) return seed;
    // splitmix64 of (seed, rank): distinct, well-mixed streams per rank.
    uint64_t z = seed + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(rank);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// The communication thread of an overlapped step: it reduces bucket after bucket, in order, as
// each becomes ready (or the step is finishing, when a missing gradient counts as zeros).
struct GradientReducer::Thread {
    std::mutex mu;
    std::condition_variable cv;
    bool quit = false;
    int64_t step = 0, done_step = 0;  // a step is posted by ++step; done when done_step == step
    bool finishing = false;
    float scale = 0;
    std::exception_ptr error;
    std::thread worker;
};

void check_same_reduction_on_all_ranks(dist::Communicator& comm, const GradientReducerOptions& opt) {
    dist::check_same_on_all_ranks(comm, "the gradient reduction (--grad-reduce, bucket sizes)",
                                  detail::str(opt.overlap ? "overlap" : "after-backward", ", first bucket ",
                                              opt.first_bucket_bytes, " bytes, buckets ", opt.bucket_bytes, " bytes"));
}

GradientReducer::GradientReducer(std::shared_ptr<dist::Communicator> comm, std::vector<Tensor> params,
                           GradientReducerOptions opt)
    : comm_(std::move(comm)), params_(std::move(params)), opt_(opt) {
    QKV_CHECK(comm_ != nullptr, "GradientReducer: no communicator");
    QKV_CHECK(opt_.first_bucket_bytes >= sizeof(float) && opt_.bucket_bytes >= sizeof(float),
              "GradientReducer: bucket sizes must hold at least one float");
    size_t n = 0;
    offset_of_.resize(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
        QKV_CHECK(params_[i].dtype() == DType::f32, "GradientReducer: parameters must be f32");
        offset_of_[i] = n;
        n += static_cast<size_t>(params_[i].numel());
    }
    flat_.resize(n);
    bucket_of_.resize(params_.size());
    for (size_t k = params_.size(); k-- > 0;) order_.push_back(k);
    // Buckets over order_, each a contiguous range of it. Reverse order makes each bucket's
    // elements contiguous in flat_ too, ending where the previous bucket begins.
    for (size_t pos = 0; pos < order_.size();) {
        Bucket b;
        b.first = pos;
        const size_t cap = (buckets_.empty() ? opt_.first_bucket_bytes : opt_.bucket_bytes) / sizeof(float);
        while (pos < order_.size() && (b.count == 0 || b.count + static_cast<size_t>(params_[order_[pos]].numel()) <= cap)) {
            b.count += static_cast<size_t>(params_[order_[pos]].numel());
            bucket_of_[order_[pos]] = buckets_.size();
            ++pos;
        }
        b.last = pos;
        b.offset = offset_of_[order_[pos - 1]];
        buckets_.push_back(b);
    }
    // The ranks' collectives must match one for one: a rank reducing per bucket beside one
    // reducing once after backward would pair allreduces of different lengths (heap corruption
    // in MPI, then a stall). Refused on every rank before the first step.
    if (comm_->size() > 1)
        check_same_reduction_on_all_ranks(*comm_, opt_);
    if (opt_.overlap && comm_->size() > 1) {
        thread_ = std::make_unique<Thread>();
        thread_->worker = std::thread([this] { comm_loop(); });
    }
}

GradientReducer::~GradientReducer() {
    if (!thread_) return;
    {
        std::lock_guard<std::mutex> lock(thread_->mu);
        thread_->quit = true;
    }
    thread_->cv.notify_all();
    thread_->worker.join();
}

void GradientReducer::fill(const Bucket& b, float scale) {
    for (size_t pos = b.first; pos < b.last; ++pos) {
        const size_t k = order_[pos];
        const size_t n = static_cast<size_t>(params_[k].numel());
        float* dst = flat_.data() + offset_of_[k];
        Tensor g = params_[k].grad();
        if (!g.defined() || scale == 0.f) {
            std::fill_n(dst, n, 0.f);
            continue;
        }
        Tensor c = g.contiguous();
        const float* src = c.data<float>();
        for (size_t i = 0; i < n; ++i) dst[i] = src[i] * scale;
    }
}

void GradientReducer::reduce(size_t offset, size_t count) {
    const std::span<float> data(flat_.data() + offset, count);
    if (shards_.empty()) {
        comm_->allreduce_sum(data);
        return;
    }
    // Rank r receives the part of [offset, offset + count) inside its shard.
    std::vector<int64_t> counts(static_cast<size_t>(comm_->size()));
    const int64_t lo = static_cast<int64_t>(offset), hi = static_cast<int64_t>(offset + count);
    for (size_t r = 0; r < counts.size(); ++r)
        counts[r] = std::max<int64_t>(0, std::min(hi, shards_[r + 1]) - std::max(lo, shards_[r]));
    comm_->reduce_scatter_sum(data, counts);
}

void GradientReducer::set_shards(std::vector<int64_t> bounds) {
    QKV_CHECK(bounds.size() == static_cast<size_t>(comm_->size()) + 1 && bounds.front() == 0 &&
                  bounds.back() == static_cast<int64_t>(flat_.size()) && std::is_sorted(bounds.begin(), bounds.end()),
              "GradientReducer::set_shards: expected ", comm_->size() + 1, " ascending offsets from 0 to ",
              flat_.size(), " (the parameters' elements), got ", bounds.size());
    shards_ = std::move(bounds);
}

void GradientReducer::write_back_grads() {
    for (size_t k = 0; k < params_.size(); ++k) {
        const size_t n = static_cast<size_t>(params_[k].numel());
        Tensor g = Tensor::empty(params_[k].shape(), DType::f32);
        std::memcpy(g.data<float>(), flat_.data() + offset_of_[k], sizeof(float) * n);
        params_[k].set_grad(g);
    }
}

void GradientReducer::comm_loop() {
    Thread& t = *thread_;
    int64_t served = 0;
    for (;;) {
        std::unique_lock<std::mutex> lock(t.mu);
        t.cv.wait(lock, [&] { return t.quit || t.step > served; });
        if (t.quit) return;
        served = t.step;
        try {
            for (Bucket& b : buckets_) {
                t.cv.wait(lock, [&] { return t.finishing || b.ready == b.last - b.first; });
                const float scale = t.scale;
                lock.unlock();
                fill(b, scale);
                reduce(b.offset, b.count);
                lock.lock();
            }
        } catch (...) {
            t.error = std::current_exception();
        }
        t.done_step = served;
        lock.unlock();
        t.cv.notify_all();
    }
}

void GradientReducer::backward_and_sync(const std::function<void()>& backward, double local_weight,
                                     double global_weight, std::span<double> scalars) {
    QKV_CHECK(local_weight >= 0 && global_weight > 0, "GradientReducer::sync: weights ", local_weight,
              " / ", global_weight);
    if (!thread_) {
        backward();
        sync(local_weight, global_weight, scalars);
        return;
    }
    Thread& t = *thread_;
    std::unordered_map<const TensorImpl*, size_t> index;
    index.reserve(params_.size());
    for (size_t k = 0; k < params_.size(); ++k) index[params_[k].impl_ptr().get()] = k;
    {
        std::lock_guard<std::mutex> lock(t.mu);
        for (Bucket& b : buckets_) b.ready = 0;
        t.finishing = false;
        t.scale = static_cast<float>(local_weight / global_weight);
        t.error = nullptr;
        ++t.step;
    }
    t.cv.notify_all();
    std::exception_ptr backward_error;
    {
        LeafGradHook hook([&](const TensorImpl& leaf) {
            auto it = index.find(&leaf);
            if (it == index.end()) return;
            {
                std::lock_guard<std::mutex> lock(t.mu);
                ++buckets_[bucket_of_[it->second]].ready;
            }
            t.cv.notify_all();
        });
        try {
            backward();
        } catch (...) {
            backward_error = std::current_exception();
        }
    }
    const auto t0 = std::chrono::steady_clock::now();
    {
        std::unique_lock<std::mutex> lock(t.mu);
        t.finishing = true;
        t.cv.notify_all();
        t.cv.wait(lock, [&] { return t.done_step == t.step; });
    }
    if (t.error) std::rethrow_exception(t.error);
    if (!scalars.empty()) comm_->allreduce_sum(scalars);
    comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (backward_error) std::rethrow_exception(backward_error);
    write_back_grads();
}

void GradientReducer::broadcast_parameters() {
    size_t off = 0;
    for (const Tensor& p : params_) {
        Tensor c = p.contiguous();
        std::memcpy(flat_.data() + off, c.data<float>(), sizeof(float) * static_cast<size_t>(p.numel()));
        off += static_cast<size_t>(p.numel());
    }
    auto t0 = std::chrono::steady_clock::now();
    comm_->broadcast(std::as_writable_bytes(std::span<float>(flat_)), 0);
    comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    NoGradGuard no_grad;
    off = 0;
    for (Tensor& p : params_) {
        QKV_CHECK(p.is_contiguous(), "GradientReducer: a parameter is not contiguous");
        std::memcpy(p.data<float>(), flat_.data() + off, sizeof(float) * static_cast<size_t>(p.numel()));
        off += static_cast<size_t>(p.numel());
    }
}

void GradientReducer::sync(double local_weight, double global_weight, std::span<double> scalars) {
    QKV_CHECK(local_weight >= 0 && global_weight > 0, "GradientReducer::sync: weights ", local_weight,
              " / ", global_weight);
    const float scale = static_cast<float>(local_weight / global_weight);
    for (const Bucket& b : buckets_) fill(b, scale);
    auto t0 = std::chrono::steady_clock::now();
    reduce(0, flat_.size());
    if (!scalars.empty()) comm_->allreduce_sum(scalars);
    comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    write_back_grads();
}

// ---- ZeRO stage 1 ----

std::vector<int64_t> zero_shard_bounds(std::span<const int64_t> numels, int size, int64_t align) {
    QKV_CHECK(size >= 1, "zero_shard_bounds: size must be >= 1, got ", size);
    QKV_CHECK(align >= 1, "zero_shard_bounds: align must be >= 1, got ", align);
    std::vector<int64_t> start(numels.size() + 1, 0);
    for (size_t i = 0; i < numels.size(); ++i) {
        QKV_CHECK(numels[i] >= 0, "zero_shard_bounds: parameter ", i, " has ", numels[i], " elements");
        start[i + 1] = start[i] + numels[i];
    }
    const int64_t total = start.back();
    std::vector<int64_t> bounds(static_cast<size_t>(size) + 1, total);
    bounds[0] = 0;
    for (int r = 1; r < size; ++r) {
        // The even split, floor(total · r / size) without overflow, then down to an aligned
        // element of its tensor.
        const int64_t even = total / size * r + total % size * r / size;
        const size_t i = static_cast<size_t>(std::upper_bound(start.begin(), start.end(), even) - start.begin()) - 1;
        const int64_t at = i < numels.size() ? start[i] + (even - start[i]) / align * align : total;
        bounds[static_cast<size_t>(r)] = std::max(bounds[static_cast<size_t>(r) - 1], at);
    }
    return bounds;
}

namespace {
/// Elements all-gathered in one collective (4 MiB of fp32, the gradient buckets' size); a larger
/// parameter is gathered alone, in place.
constexpr int64_t kGatherElements = int64_t{1} << 20;

std::vector<int64_t> numels_of(const std::vector<Tensor>& params) {
    std::vector<int64_t> n;
    for (const Tensor& p : params) n.push_back(p.numel());
    return n;
}
}  // namespace

ZeroRedundancyAdam::ZeroRedundancyAdam(std::vector<Tensor> params, std::shared_ptr<dist::Communicator> comm,
                                       double lr, optim::AdamOptions opt)
    : Optimizer(std::move(params), lr, "ZeroRedundancyAdam"), comm_(std::move(comm)), opt_(opt) {
    QKV_CHECK(comm_ != nullptr, "ZeroRedundancyAdam: no communicator");
    QKV_CHECK(opt.beta1 >= 0 && opt.beta1 < 1 && opt.beta2 >= 0 && opt.beta2 < 1,
              "ZeroRedundancyAdam: betas must be in [0, 1), got ", opt.beta1, ", ", opt.beta2);
    QKV_CHECK(opt.eps >= 0, "ZeroRedundancyAdam: eps must be >= 0, got ", opt.eps);
    for (size_t i = 0; i < params_.size(); ++i)
        QKV_CHECK(params_[i].dtype() == DType::f32, "ZeroRedundancyAdam: parameter ", i, " is ",
                  dtype_name(params_[i].dtype()), ", expected float32");
    const std::vector<int64_t> numels = numels_of(params_);
    bounds_ = zero_shard_bounds(numels, comm_->size());
    const int64_t mine0 = bounds_[static_cast<size_t>(comm_->rank())];
    const int64_t mine1 = bounds_[static_cast<size_t>(comm_->rank()) + 1];
    int64_t off = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
        offset_of_.push_back(off);
        const int64_t b = std::max(mine0, off), e = std::min(mine1, off + numels[i]);
        if (b < e)
            pieces_.push_back({i, b - off, e - off, zeros({e - b}, DType::f32), zeros({e - b}, DType::f32)});
        off += numels[i];
    }
    offset_of_.push_back(off);
    // Consecutive parameters up to kGatherElements share one all-gather through gather_buf_.
    int64_t largest = 0;
    for (size_t i = 0; i < params_.size();) {
        size_t j = i + 1;
        while (j < params_.size() && offset_of_[j + 1] - offset_of_[i] <= kGatherElements) ++j;
        gather_groups_.emplace_back(i, j);
        if (j > i + 1) largest = std::max(largest, offset_of_[j] - offset_of_[i]);
        i = j;
    }
    gather_buf_.resize(static_cast<size_t>(largest));
}

std::vector<int64_t> ZeroRedundancyAdam::block_counts(int64_t begin, int64_t end) const {
    std::vector<int64_t> counts(static_cast<size_t>(comm_->size()));
    for (size_t r = 0; r < counts.size(); ++r)
        counts[r] = std::max<int64_t>(0, std::min(end, bounds_[r + 1]) - std::max(begin, bounds_[r]));
    return counts;
}

int64_t ZeroRedundancyAdam::state_bytes() const {
    int64_t n = 0;
    for (const Piece& p : pieces_) n += p.m.numel() + p.v.numel();
    return n * int64_t(sizeof(float));
}

int64_t ZeroRedundancyAdam::total_state_bytes() const { return 2 * offset_of_.back() * int64_t(sizeof(float)); }

optim::ClipFactor ZeroRedundancyAdam::clip_factor(double max_norm) {
    QKV_CHECK(std::isfinite(max_norm) && max_norm > 0, "clip_grad_norm: max_norm must be finite and > 0, got ",
              max_norm);
    NoGradGuard ng;
    std::vector<Tensor> grads;
    for (const Piece& p : pieces_) {
        const Tensor g = params_[p.index].grad();
        if (g.defined()) grads.push_back(g.contiguous().reshape({-1}).slice(0, p.begin, p.end));
    }
    double total = sum_of_squares(grads);
    comm_->allreduce_sum(std::span<double>(&total, 1));
    const double norm = std::sqrt(total);
    QKV_CHECK(std::isfinite(norm), "clip_grad_norm: the gradient norm is ", norm,
              " (a NaN or inf gradient; lower the learning rate or check the inputs)");
    return {norm, norm > max_norm && norm > 0 ? max_norm / norm : 1.0};
}

void ZeroRedundancyAdam::step(double grad_scale) {
    QKV_CHECK(std::isfinite(grad_scale) && grad_scale >= 0,
              "ZeroRedundancyAdam::step: grad_scale must be finite and >= 0, got ", grad_scale);
    NoGradGuard ng;
    release_state_dict();
    ++steps_;
    AdamStepArgs a;
    a.lr = lr_, a.beta1 = opt_.beta1, a.beta2 = opt_.beta2, a.eps = opt_.eps;
    a.weight_decay = opt_.weight_decay, a.decoupled = opt_.decoupled_weight_decay, a.step = steps_;
    a.grad_scale = grad_scale;
    for (Piece& p : pieces_) {
        const Tensor g = params_[p.index].grad();
        if (!g.defined()) continue;
        Tensor param = params_[p.index].reshape({-1}).slice(0, p.begin, p.end);
        adam_step_(param, g.contiguous().reshape({-1}).slice(0, p.begin, p.end), p.m, p.v, a);
    }
    // Every rank's shard to every rank: one parameter in place, or a group through the buffer.
    for (const auto& [i, j] : gather_groups_) {
        const int64_t b = offset_of_[i], e = offset_of_[j];
        const std::vector<int64_t> counts = block_counts(b, e);
        if (j == i + 1) {
            comm_->allgather_blocks(std::span<float>(params_[i].data<float>(), size_t(e - b)), counts);
            continue;
        }
        float* buf = gather_buf_.data();
        for (size_t k = i; k < j; ++k)
            std::copy_n(params_[k].data<float>(), params_[k].numel(), buf + (offset_of_[k] - b));
        comm_->allgather_blocks(std::span<float>(buf, size_t(e - b)), counts);
        for (size_t k = i; k < j; ++k)
            std::copy_n(buf + (offset_of_[k] - b), params_[k].numel(), params_[k].data<float>());
    }
}

void ZeroRedundancyAdam::release_state_dict() {
    // Rank `to`'s pieces are views of the consolidated tensors: each is copied out before its
    // tensor goes, so the whole state and a copy of this rank's shard never coexist.
    for (Piece& p : pieces_) {
        const std::string i = std::to_string(p.index);
        if (consolidated_.count("exp_avg." + i)) {
            p.m = p.m.clone();
            p.v = p.v.clone();
            consolidated_.erase("exp_avg." + i);
            consolidated_.erase("exp_avg_sq." + i);
        }
    }
    consolidated_.clear();
    consolidated_step_ = -1;
}

void ZeroRedundancyAdam::consolidate_state_dict(int to) {
    QKV_CHECK(to >= 0 && to < comm_->size(), "ZeroRedundancyAdam::consolidate_state_dict: rank ", to,
              " out of range for ", comm_->size(), " ranks");
    release_state_dict();
    consolidated_ = Optimizer::state_dict();
    if (steps_ > 0) {
        size_t next = 0;  // this rank's next piece
        for (size_t i = 0; i < params_.size(); ++i) {
            const Piece* mine = next < pieces_.size() && pieces_[next].index == i ? &pieces_[next++] : nullptr;
            const std::vector<int64_t> counts = block_counts(offset_of_[i], offset_of_[i + 1]);
            for (const char* kind : {"exp_avg", "exp_avg_sq"}) {
                Tensor whole = Tensor::empty(params_[i].shape(), DType::f32);
                float* w = whole.data<float>();
                if (mine) {
                    const Tensor& part = std::string(kind) == "exp_avg" ? mine->m : mine->v;
                    std::copy_n(part.data<float>(), part.numel(), w + mine->begin);
                }
                comm_->allgather_blocks(std::span<float>(w, size_t(whole.numel())), counts);
                if (comm_->rank() != to) continue;
                consolidated_[std::string(kind) + "." + std::to_string(i)] = whole;
                if (mine) {  // the shard lives on in the whole tensor (released by release_state_dict)
                    Tensor& part = std::string(kind) == "exp_avg" ? pieces_[next - 1].m : pieces_[next - 1].v;
                    part = whole.reshape({-1}).slice(0, mine->begin, mine->end);
                }
            }
        }
    }
    if (comm_->rank() != to) consolidated_.clear();
    consolidated_step_ = steps_;
    consolidated_to_   = to;
}

std::map<std::string, Tensor> ZeroRedundancyAdam::state_dict() const {
    QKV_CHECK(consolidated_step_ == steps_ && consolidated_to_ == comm_->rank(),
              "ZeroRedundancyAdam::state_dict: rank ", comm_->rank(),
              " has no whole state of this step; call consolidate_state_dict(", comm_->rank(),
              ") on every rank first");
    return consolidated_;
}

void ZeroRedundancyAdam::load_state_dict(const std::map<std::string, Tensor>& sd) {
    Optimizer::load_state_dict(sd);
    release_state_dict();
    for (size_t i = 0; i < params_.size(); ++i)  // every rank checks the whole state
        for (const char* kind : {"exp_avg", "exp_avg_sq"}) {
            const std::string key = std::string(kind) + "." + std::to_string(i);
            auto it = sd.find(key);
            QKV_CHECK(it == sd.end() || it->second.shape() == params_[i].shape(), "optimizer: state '", key,
                      "' has shape ", it->second.shape(), ", parameter has ", params_[i].shape());
        }
    for (Piece& p : pieces_)
        for (const char* kind : {"exp_avg", "exp_avg_sq"}) {
            Tensor& part = std::string(kind) == "exp_avg" ? p.m : p.v;
            const std::string key = std::string(kind) + "." + std::to_string(p.index);
            auto it = sd.find(key);
            if (it == sd.end()) {
                std::fill_n(part.data<float>(), part.numel(), 0.f);
                continue;
            }
            const Tensor whole = it->second.to(DType::f32).contiguous();
            std::copy_n(whole.data<float>() + p.begin, p.end - p.begin, part.data<float>());
        }
}

}  // namespace qkv::train
