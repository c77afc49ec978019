// The Nadaraya–Watson leave-one-out training loop (SGD on w).
#include "qkv/train/nw_train.h"

#include <cmath>

#include "qkv/ops/elementwise.h"
#include "qkv/ops/reduce.h"
#include "qkv/optim/optimizer.h"

namespace qkv::train {

using models::leave_one_out;

std::vector<NWEpoch> train_nw(models::NWKernelRegression& model, const Tensor& x_train,
                              const Tensor& y_train, const NWTrainConfig& cfg,
                              const std::function<void(const NWEpoch&)>& on_epoch) {
    QKV_CHECK(x_train.defined() && y_train.defined() && x_train.dim() == 1 &&
                  x_train.shape() == y_train.shape(),
              "train_nw: x_train and y_train must be (n) of the same shape, got ",
              x_train.shape(), " and ", y_train.shape());
    QKV_CHECK(cfg.epochs >= 0, "train_nw: epochs must be >= 0, got ", cfg.epochs);
    QKV_CHECK(std::isfinite(cfg.lr) && cfg.lr > 0, "train_nw: lr must be positive, got ", cfg.lr);
    const Tensor keys = leave_one_out(x_train), values = leave_one_out(y_train);  // (n, n − 1)
    optim::SGD opt(model.parameters(), cfg.lr);
    std::vector<NWEpoch> history;
    for (int64_t e = 1; e <= cfg.epochs; ++e) {
        const Tensor d = sub(model.forward(x_train, keys, values), y_train);
        const Tensor sq = pow(d, 2.0);
        const Tensor loss = cfg.loss == NWLoss::mean ? mean(sq) : sum(sq);
        const double lv = loss.item();
        QKV_CHECK(std::isfinite(lv), "training diverged: the loss is not finite at epoch ", e,
                  " (w = ", model.w.item(), "); lower --lr, or scale the data down (the squared error of values "
                  "near 1e19 or beyond overflows float32)");
        opt.zero_grad();
        loss.backward();
        opt.step();
        history.push_back({e, lv, model.w.item()});
        if (on_epoch) on_epoch(history.back());
    }
    return history;
}

}  // namespace qkv::train
