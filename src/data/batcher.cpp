// Batcher (data/batcher.h).
#include "qkv/data/batcher.h"

#include <algorithm>
#include <numeric>

#include "qkv/core/error.h"

namespace qkv::data {

Batcher::Batcher(const NmtArrays& data, BatcherOptions opt) : data_(&data), opt_(opt) {
    QKV_CHECK(opt_.batch_size >= 1, "Batcher: batch_size must be >= 1, got ", opt_.batch_size);
    QKV_CHECK(opt_.bucket_pool >= 0, "Batcher: bucket_pool must be >= 0, got ", opt_.bucket_pool);
    QKV_CHECK(opt_.batch_tokens >= 0, "Batcher: batch_tokens must be >= 0, got ", opt_.batch_tokens);
    if (opt_.batch_tokens > 0) {
        int64_t total = 0;
        for (int64_t r = 0; r < data_->n; ++r) total += cost(r);
        token_batches_ = std::min(data_->n, (total + opt_.batch_tokens - 1) / opt_.batch_tokens);
        if (data_->n > 0) token_batches_ = std::max<int64_t>(token_batches_, 1);
    }
}

int64_t Batcher::cost(int64_t r) const {
    return std::max<int64_t>(1, std::max(data_->src_valid_len[size_t(r)], data_->tgt_valid_len[size_t(r)]));
}

void Batcher::cut_by_tokens() {
    const int64_t n = int64_t(order_.size()), nb = token_batches_;
    starts_.assign(size_t(nb), 0);
    ends_.assign(size_t(nb), 0);
    if (nb == 0) return;
    double total = 0;
    for (int64_t r : order_) total += double(cost(r));
    // Batch k ends at the first row where the running cost reaches (k + 1) / nb of the total,
    // keeping at least one row for itself and for each batch after it.
    double run = 0;
    int64_t i = 0;
    for (int64_t k = 0; k < nb; ++k) {
        starts_[size_t(k)] = i;
        const double goal = total * double(k + 1) / double(nb);
        int64_t end = i + 1;
        run += double(cost(order_[size_t(i)]));
        while (end < n - (nb - 1 - k) && run + double(cost(order_[size_t(end)])) <= goal + 1e-9) {
            run += double(cost(order_[size_t(end)]));
            ++end;
        }
        if (k == nb - 1) {
            for (; end < n; ++end) run += double(cost(order_[size_t(end)]));
        }
        ends_[size_t(k)] = end;
        i = end;
    }
    if (!opt_.shuffle || nb < 2) return;
    const std::vector<int64_t> perm = shuffled_indices(nb, opt_.seed + 1, uint64_t(epoch_));
    std::vector<int64_t> s(static_cast<size_t>(nb)), e(static_cast<size_t>(nb));
    for (int64_t k = 0; k < nb; ++k) s[size_t(k)] = starts_[size_t(perm[size_t(k)])], e[size_t(k)] = ends_[size_t(perm[size_t(k)])];
    starts_.swap(s);
    ends_.swap(e);
}

int64_t Batcher::num_batches() const {
    if (opt_.batch_tokens > 0) return token_batches_;
    const int64_t n = data_->n, b = opt_.batch_size;
    return opt_.drop_last ? n / b : (n + b - 1) / b;
}

void Batcher::start_epoch(int64_t epoch) {
    QKV_CHECK(epoch >= 0, "Batcher: negative epoch ", epoch);
    epoch_  = epoch;
    cursor_ = 0;
    if (opt_.shuffle) {
        order_ = shuffled_indices(data_->n, opt_.seed, uint64_t(epoch));
    } else {
        order_.resize(size_t(data_->n));
        std::iota(order_.begin(), order_.end(), int64_t(0));
    }
    if (opt_.bucket_pool > 0) bucket();
    if (opt_.batch_tokens > 0) cut_by_tokens();
}

void Batcher::bucket() {
    const int64_t n  = int64_t(order_.size());
    const int64_t bs = opt_.batch_tokens > 0 ? std::max<int64_t>(1, n / std::max<int64_t>(1, token_batches_))
                                             : opt_.batch_size;
    const int64_t pool = opt_.bucket_pool * bs;
    auto len = [&](int64_t r) {
        return std::max(data_->src_valid_len[size_t(r)], data_->tgt_valid_len[size_t(r)]);
    };
    for (int64_t p = 0; p < n; p += pool) {
        auto first = order_.begin() + p, last = order_.begin() + std::min(n, p + pool);
        std::stable_sort(first, last, [&](int64_t a, int64_t b) { return len(a) < len(b); });
    }
    // Shuffle the full batches (the partial last one, if any, stays last: batch() cuts fixed
    // batch_size chunks). A different stream from the row shuffle: seed + 1, the same epoch.
    // Batches by tokens are shuffled once cut (cut_by_tokens).
    const int64_t full = n / bs;
    if (!opt_.shuffle || full < 2 || opt_.batch_tokens > 0) return;
    const std::vector<int64_t> perm = shuffled_indices(full, opt_.seed + 1, uint64_t(epoch_));
    std::vector<int64_t> out(order_.size());
    for (int64_t i = 0; i < full; ++i)
        std::copy_n(order_.begin() + perm[size_t(i)] * bs, bs, out.begin() + i * bs);
    std::copy(order_.begin() + full * bs, order_.end(), out.begin() + full * bs);
    order_.swap(out);
}

Batch Batcher::batch(int64_t b) const {
    QKV_CHECK(epoch_ >= 0, "Batcher: call start_epoch() before batch()");
    QKV_CHECK(b >= 0 && b < num_batches(), "Batcher: batch ", b, " out of range [0, ",
              num_batches(), ")");
    const int64_t begin = opt_.batch_tokens > 0 ? starts_[size_t(b)] : b * opt_.batch_size;
    const int64_t end   = opt_.batch_tokens > 0 ? ends_[size_t(b)] : std::min(begin + opt_.batch_size, data_->n);
    const int64_t T     = data_->num_steps;
    Batch out;
    out.size = end - begin;
    out.rows.assign(order_.begin() + begin, order_.begin() + end);
    int64_t Ts = T, Tt = T;
    if (opt_.trim) {
        Ts = Tt = 1;
        for (int64_t r : out.rows) {
            Ts = std::max(Ts, data_->src_valid_len[size_t(r)]);
            Tt = std::max(Tt, data_->tgt_valid_len[size_t(r)]);
        }
        Ts = std::min(Ts, T), Tt = std::min(Tt, T);
    }
    out.num_steps = Tt;
    out.src_steps = Ts;
    out.src.resize(size_t(out.size * Ts));
    out.dec_input.resize(size_t(out.size * Tt));
    out.label.resize(size_t(out.size * Tt));
    out.src_valid_len.resize(size_t(out.size));
    out.tgt_valid_len.resize(size_t(out.size));
    for (int64_t i = 0; i < out.size; ++i) {
        const int64_t r = out.rows[size_t(i)];
        std::copy_n(data_->src.begin() + r * T, Ts, out.src.begin() + i * Ts);
        std::copy_n(data_->dec_input.begin() + r * T, Tt, out.dec_input.begin() + i * Tt);
        std::copy_n(data_->label.begin() + r * T, Tt, out.label.begin() + i * Tt);
        out.src_valid_len[size_t(i)] = data_->src_valid_len[size_t(r)];
        out.tgt_valid_len[size_t(i)] = data_->tgt_valid_len[size_t(r)];
    }
    return out;
}

bool Batcher::next(Batch& out) {
    if (epoch_ < 0) start_epoch(0);
    if (cursor_ >= num_batches()) return false;
    out = batch(cursor_++);
    return true;
}

}  // namespace qkv::data
