// RowPacking: kept-row indices of a padded batch, and the pack/unpack conversions.
#include "qkv/nn/packing.h"

#include "qkv/ops/shape_ops.h"

namespace qkv::nn {

RowPacking::RowPacking(std::vector<int64_t> lens, int64_t steps) : lens_(std::move(lens)), steps_(steps) {
    QKV_CHECK(steps_ >= 0, "RowPacking: steps (T) must not be negative, got ", steps_);
    std::vector<int64_t> idx;
    for (size_t b = 0; b < lens_.size(); ++b) {
        QKV_CHECK(lens_[b] >= 0 && lens_[b] <= steps_, "RowPacking: lens[", b, "] = ", lens_[b],
                  " is outside [0, ", steps_, "]");
        for (int64_t t = 0; t < lens_[b]; ++t) idx.push_back(int64_t(b) * steps_ + t);
    }
    rows_  = int64_t(idx.size());
    index_ = from_vector(idx, {rows_});
}

Tensor RowPacking::pack(const Tensor& x) const {
    QKV_CHECK(x.defined() && x.dim() == 3 && x.size(0) == batch() && x.size(1) == steps_,
              "RowPacking::pack: x must be (", batch(), ", ", steps_, ", C), got ",
              x.defined() ? x.shape() : Shape{});
    return index_select(x.reshape({batch() * steps_, x.size(2)}), 0, index_);
}

Tensor RowPacking::unpack(const Tensor& xp) const {
    QKV_CHECK(xp.defined() && xp.dim() == 2 && xp.size(0) == rows_,
              "RowPacking::unpack: xp must be (", rows_, ", C), got ", xp.defined() ? xp.shape() : Shape{});
    return scatter_rows(xp, index_, batch() * steps_).reshape({batch(), steps_, xp.size(1)});
}

}  // namespace qkv::nn
