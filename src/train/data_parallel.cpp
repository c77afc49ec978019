// Data-parallel helpers (train/data_parallel.h).
#include "qkv/train/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"

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
                comm_->allreduce_sum(std::span<float>(flat_.data() + b.offset, b.count));
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
    comm_->allreduce_sum(std::span<float>(flat_));
    if (!scalars.empty()) comm_->allreduce_sum(scalars);
    comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    write_back_grads();
}

}  // namespace qkv::train
