// Batcher (data/batcher.h).
#include "qkv/data/batcher.h"

#include <algorithm>
#include <numeric>

#include "qkv/core/error.h"

namespace qkv::data {

Batcher::Batcher(const NmtArrays& data, BatcherOptions opt) : data_(&data), opt_(opt) {
    QKV_CHECK(opt_.batch_size >= 1, "Batcher: batch_size must be >= 1, got ", opt_.batch_size);
}

int64_t Batcher::num_batches() const {
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
}

Batch Batcher::batch(int64_t b) const {
    QKV_CHECK(epoch_ >= 0, "Batcher: call start_epoch() before batch()");
    QKV_CHECK(b >= 0 && b < num_batches(), "Batcher: batch ", b, " out of range [0, ",
              num_batches(), ")");
    const int64_t begin = b * opt_.batch_size;
    const int64_t end   = std::min(begin + opt_.batch_size, data_->n);
    const int64_t T     = data_->num_steps;
    Batch out;
    out.size      = end - begin;
    out.num_steps = T;
    out.rows.assign(order_.begin() + begin, order_.begin() + end);
    const size_t cells = size_t(out.size * T);
    out.src.resize(cells);
    out.dec_input.resize(cells);
    out.label.resize(cells);
    out.src_valid_len.resize(size_t(out.size));
    out.tgt_valid_len.resize(size_t(out.size));
    for (int64_t i = 0; i < out.size; ++i) {
        const int64_t r = out.rows[size_t(i)];
        std::copy_n(data_->src.begin() + r * T, T, out.src.begin() + i * T);
        std::copy_n(data_->dec_input.begin() + r * T, T, out.dec_input.begin() + i * T);
        std::copy_n(data_->label.begin() + r * T, T, out.label.begin() + i * T);
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
