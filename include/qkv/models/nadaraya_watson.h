#pragma once
// Nadaraya–Watson kernel regression as attention pooling (D2L 11.2 EN / 10.2 ZH; Nadaraya 1964,
// Watson 1964): the non-parametric Gaussian-kernel estimator, the parametric model with one
// learned scalar w, the leave-one-out tiling, and the data of the seed experiment and of D2L ZH.
// Its training loop is here too: full-batch gradient descent on the one scalar w needs no optimizer
// object (models sit below optim). Plotting and the command line live in apps/qkv/cmd_nw.cpp.
// Dim legend: N queries, M keys (training points) per query.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/tensor.h"
#include "qkv/nn/module.h"

namespace qkv::models {

/// Predictions and the attention weights that made them.
struct NWResult {
    Tensor predictions;        // (N)
    Tensor attention_weights;  // (N, M), rows sum to 1
};

/// Non-parametric Nadaraya–Watson with a Gaussian kernel of width σ = `width`:
/// α(q, k_j) = softmax_j(−(q − k_j)² / (2σ²)), ŷ = Σ_j α(q, k_j) v_j (D2L EN 11.2 eqs. 11.2.3–4;
/// σ = 1 is D2L's exp(−u²/2)). queries (N); keys and values (N, M), or (M) shared by every query.
/// f32 or f64. Differentiable in all inputs (a composition of ops). Throws qkv::Error when shapes
/// disagree or width is not positive and finite.
NWResult nadaraya_watson(const Tensor& queries, const Tensor& keys, const Tensor& values,
                         double width = 1.0);

/// Parametric Nadaraya–Watson (D2L ZH 10.2.4; the seed program): one learned scalar w,
/// score(q, k) = −½ (w·(q − k))², α = softmax over the keys, ŷ = Σ α v. The parameter is named
/// "w" and is 0-d (the seed's nn.Parameter(torch.tensor(1.0))).
class NWKernelRegression : public nn::Module {
public:
    /// w starts at `w_init` (the seed uses 1.0; D2L ZH draws it from U[0, 1)).
    explicit NWKernelRegression(double w_init = 1.0);
    /// queries (N), keys/values (N, M) or (M) -> predictions (N). Keeps the weights (N, M).
    Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values);
    /// The last forward's attention weights (N, M).
    const Tensor& attention_weights() const { return attention_weights_; }
    Tensor w;

private:
    Tensor attention_weights_;
};

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

/// Trains `model` on the leave-one-out problem (queries x_train, keys/values the other points,
/// D2L ZH 10.2.4; the seed program), one full-batch step per epoch with torch.optim.SGD's plain
/// rule (no momentum, no weight decay): p −= lr · ∂loss/∂p. x_train, y_train (n) of the model's
/// dtype. Calls on_epoch after each step. Throws qkv::Error when shapes differ, n < 2, epochs < 0,
/// lr is not positive, or the loss stops being finite (names the epoch).
std::vector<NWEpoch> train_nw(NWKernelRegression& model, const Tensor& x_train, const Tensor& y_train,
                              const NWTrainConfig& cfg, const std::function<void(const NWEpoch&)>& on_epoch = {});

/// Leave-one-out tiling of the training set: x (n) -> (n, n − 1), row i = x without element i,
/// in order (the seed's x.repeat(n, 1)[~eye(n)].reshape(n, n − 1)). Throws when n < 2.
Tensor leave_one_out(const Tensor& x);

/// The two data recipes: `seed` (shared/seeds/000: f(x) = 2.333 sin x + x^0.666, 150 points) and
/// `zh` (D2L ZH 10.2.1: f(x) = 2 sin x + x^0.8, 50 points). Noise N(0, 0.5²) in both.
enum class NWPreset { seed, zh };

/// The noise-free target function of a preset, element-wise on x (f32).
Tensor nw_target(const Tensor& x, NWPreset preset);

struct NWData {
    Tensor x_train, y_train;  // (n) f32, x sorted ascending
    Tensor x_test, y_true;    // (50) f32: 0, 0.1, ..., 4.9 and f(x_test)
};

/// x_train = sort(U(0, 5)), y_train = f(x_train) + N(0, 0.5²), from gen (D2L's recipe).
/// Throws when n_train < 2.
NWData make_nw_data(NWPreset preset, int64_t n_train, Generator& gen);

/// x_test = arange(0, 5, 0.1) (50 points) as in both D2L and the seed.
Tensor nw_test_inputs();

/// Reads (x, y) pairs from a CSV file: one "x,y" per line; blank lines and lines starting with '#'
/// are skipped; a first line whose two fields are both non-numeric ("x,y") is a header. Throws
/// qkv::Error naming the file and line number for a row that is not two numbers, a non-finite
/// value (NaN/inf) or one outside float32's range, an unreadable file, or fewer than 2 rows. Returns (x (n), y (n)) f32 sorted by
/// x (stable), so heatmaps show keys in order.
std::pair<Tensor, Tensor> read_xy_csv(const std::string& path);

}  // namespace qkv::models
