// Data-parallel helpers (train/data_parallel.h).
#include "qkv/train/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstring>

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
    auto [r0, r1] = shard_rows(w, rank, size);
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

GradientSync::GradientSync(std::shared_ptr<dist::Communicator> comm, std::vector<Tensor> params)
    : comm_(std::move(comm)), params_(std::move(params)) {
    QKV_CHECK(comm_ != nullptr, "GradientSync: no communicator");
    size_t n = 0;
    for (const Tensor& p : params_) {
        QKV_CHECK(p.dtype() == DType::f32, "GradientSync: parameters must be f32");
        n += static_cast<size_t>(p.numel());
    }
    flat_.resize(n);
}

void GradientSync::broadcast_parameters() {
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
        QKV_CHECK(p.is_contiguous(), "GradientSync: a parameter is not contiguous");
        std::memcpy(p.data<float>(), flat_.data() + off, sizeof(float) * static_cast<size_t>(p.numel()));
        off += static_cast<size_t>(p.numel());
    }
}

void GradientSync::sync(double local_weight, double global_weight, std::span<double> scalars) {
    QKV_CHECK(local_weight >= 0 && global_weight > 0, "GradientSync::sync: weights ", local_weight,
              " / ", global_weight);
    const float scale = static_cast<float>(local_weight / global_weight);
    size_t off = 0;
    for (const Tensor& p : params_) {
        const size_t n = static_cast<size_t>(p.numel());
        Tensor g = p.grad();
        if (!g.defined() || scale == 0.f) {
            std::fill_n(flat_.data() + off, n, 0.f);
        } else {
            Tensor c = g.contiguous();
            const float* src = c.data<float>();
            float* dst = flat_.data() + off;
            for (size_t i = 0; i < n; ++i) dst[i] = src[i] * scale;
        }
        off += n;
    }
    auto t0 = std::chrono::steady_clock::now();
    comm_->allreduce_sum(std::span<float>(flat_));
    if (!scalars.empty()) comm_->allreduce_sum(scalars);
    comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    off = 0;
    for (Tensor& p : params_) {
        const size_t n = static_cast<size_t>(p.numel());
        Tensor g = Tensor::empty(p.shape(), DType::f32);
        std::memcpy(g.data<float>(), flat_.data() + off, sizeof(float) * n);
        p.set_grad(g);
        off += n;
    }
}

}  // namespace qkv::train
