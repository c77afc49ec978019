#pragma once
// The leave-one-out training loop of the parametric Nadaraya–Watson model (D2L ZH 10.2.4; the seed
// program): full-batch torch.optim.SGD on one learned scalar w. It sits in train/, above models,
// because it owns an optimizer (docs/architecture.md: optimisation sits above models).
// Dim legend: n training points.
#include <cstdint>
#include <functional>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/models/nadaraya_watson.h"

namespace qkv::train {

/// The training loss: `mean` = nn.MSELoss() (the seed), `sum` = MSELoss(reduction='none').sum()
/// (D2L ZH, no factor ½).
enum class NWLoss { mean, sum };

struct NWTrainConfig {
    int64_t epochs = 20;  // full-batch SGD steps
    double lr      = 0.5;
    NWLoss loss    = NWLoss::mean;
};

/// One epoch's record: loss before that epoch's step, w after it (what the seed prints).
struct NWEpoch {
    int64_t epoch = 0;  // 1-based
    double loss   = 0;
    double w      = 0;
};

/// Trains `model` on the leave-one-out problem (queries x_train, keys/values the other points),
/// one full-batch torch.optim.SGD step per epoch. x_train, y_train (n) of the model's dtype.
/// Calls on_epoch after each step. Throws when shapes differ, n < 2, or the loss stops being
/// finite (names the epoch).
std::vector<NWEpoch> train_nw(models::NWKernelRegression& model, const Tensor& x_train,
                              const Tensor& y_train, const NWTrainConfig& cfg,
                              const std::function<void(const NWEpoch&)>& on_epoch = {});

}  // namespace qkv::train
