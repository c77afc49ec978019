// Nadaraya–Watson kernel regression: estimators, leave-one-out training, data recipes, CSV input.
#include "qkv/models/nadaraya_watson.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <type_traits>

#include "qkv/autograd/grad_mode.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/reduce.h"
#include "qkv/ops/shape_ops.h"
#include "qkv/ops/softmax.h"

namespace qkv::models {

namespace {

/// Checks queries (N) against keys/values (N, M) or (M).
void check_nw_args(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
    QKV_CHECK(q.defined() && k.defined() && v.defined(), op, ": undefined queries, keys or values");
    QKV_CHECK(q.dim() == 1, op, ": queries must be (N), got ", q.shape());
    QKV_CHECK(k.shape() == v.shape(), op, ": keys ", k.shape(), " and values ", v.shape(),
              " must have the same shape");
    QKV_CHECK((k.dim() == 2 && k.size(0) == q.size(0)) || k.dim() == 1, op,
              ": keys must be (N, M) with N = ", q.size(0), " or (M), got ", k.shape());
    QKV_CHECK(k.size(-1) >= 1, op, ": need at least one key");
}

/// softmax over the keys of the scores, then the weighted sum of the values.
NWResult pool(const Tensor& scores, const Tensor& values) {
    Tensor w = softmax(scores, 1);                 // (N, M)
    return {sum(mul(w, values), {1}), w};          // values (M) broadcasts over N
}

}  // namespace

NWResult nadaraya_watson(const Tensor& queries, const Tensor& keys, const Tensor& values,
                         double width) {
    check_nw_args("nadaraya_watson", queries, keys, values);
    QKV_CHECK(std::isfinite(width) && width > 0, "nadaraya_watson: width must be positive and "
              "finite, got ", width);
    Tensor d = sub(queries.unsqueeze(1), keys);  // (N, M)
    // Gaussian kernel exp(−d²/(2σ²)) normalised over the keys = softmax of −d²/(2σ²).
    return pool(mul(mul(d, d), -0.5 / (width * width)), values);
}

NWKernelRegression::NWKernelRegression(double w_init) {
    w = register_parameter("w", scalar_tensor(w_init));
}

Tensor NWKernelRegression::forward(const Tensor& queries, const Tensor& keys,
                                   const Tensor& values) {
    check_nw_args("NWKernelRegression", queries, keys, values);
    Tensor d = sub(queries.unsqueeze(1), keys);           // (N, M)
    Tensor scores = mul(pow(mul(w, d), 2.0), -0.5);       // −½ (w·(q − k))²
    NWResult r = pool(scores, values);
    attention_weights_ = r.attention_weights;
    return r.predictions;
}

namespace {

/// torch.optim.SGD's step without momentum or weight decay: p −= lr · grad, in p's dtype.
void sgd_step(const std::vector<Tensor>& params, double lr) {
    NoGradGuard no_grad;
    for (const Tensor& p : params) {
        const Tensor g = p.grad();
        if (!g.defined()) continue;
        const Tensor gc = g.contiguous().to(p.dtype());
        auto run = [&](auto* pp, const auto* pg) {
            using T = std::remove_pointer_t<decltype(pp)>;
            for (int64_t j = 0, n = p.numel(); j < n; ++j) pp[j] -= T(lr) * pg[j];
        };
        if (p.dtype() == DType::f32) run(p.data<float>(), gc.data<float>());
        else run(p.data<double>(), gc.data<double>());
    }
}

}  // namespace

std::vector<NWEpoch> train_nw(NWKernelRegression& model, const Tensor& x_train,
                              const Tensor& y_train, const NWTrainConfig& cfg,
                              const std::function<void(const NWEpoch&)>& on_epoch) {
    QKV_CHECK(x_train.defined() && y_train.defined() && x_train.dim() == 1 &&
                  x_train.shape() == y_train.shape(),
              "train_nw: x_train and y_train must be (n) of the same shape, got ",
              x_train.shape(), " and ", y_train.shape());
    QKV_CHECK(cfg.epochs >= 0, "train_nw: epochs must be >= 0, got ", cfg.epochs);
    QKV_CHECK(std::isfinite(cfg.lr) && cfg.lr > 0, "train_nw: lr must be positive, got ", cfg.lr);
    const Tensor keys = leave_one_out(x_train), values = leave_one_out(y_train);  // (n, n − 1)
    std::vector<NWEpoch> history;
    for (int64_t e = 1; e <= cfg.epochs; ++e) {
        const Tensor d = sub(model.forward(x_train, keys, values), y_train);
        const Tensor sq = pow(d, 2.0);
        const Tensor loss = cfg.loss == NWLoss::mean ? mean(sq) : sum(sq);
        const double lv = loss.item();
        QKV_CHECK(std::isfinite(lv), "training diverged: the loss is not finite at epoch ", e,
                  " (w = ", model.w.item(), "); lower --lr, or scale the data down (the squared error of values "
                  "near 1e19 or beyond overflows float32)");
        model.zero_grad();
        loss.backward();
        sgd_step(model.parameters(), cfg.lr);
        history.push_back({e, lv, model.w.item()});
        if (on_epoch) on_epoch(history.back());
    }
    return history;
}

Tensor leave_one_out(const Tensor& x) {
    QKV_CHECK(x.defined() && x.dim() == 1 && x.size(0) >= 2, "leave_one_out: x must be (n) with "
              "n >= 2, got ", x.defined() ? x.shape() : Shape{});
    const int64_t n = x.size(0);
    std::vector<int64_t> idx;  // row i: 0..n-1 without i
    idx.reserve(size_t(n * (n - 1)));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j)
            if (j != i) idx.push_back(j);
    return index_select(x, 0, from_vector(idx, {n * (n - 1)})).reshape({n, n - 1});
}

Tensor nw_target(const Tensor& x, NWPreset preset) {
    if (preset == NWPreset::seed) return add(mul(sin(x), 2.333), pow(x, 0.666));
    return add(mul(sin(x), 2.0), pow(x, 0.8));
}

Tensor nw_test_inputs() { return arange(0.0, 5.0, 0.1); }

NWData make_nw_data(NWPreset preset, int64_t n_train, Generator& gen) {
    QKV_CHECK(n_train >= 2, "make_nw_data: n_train must be >= 2, got ", n_train);
    std::vector<float> x = rand({n_train}, &gen, 0.0, 5.0).to_vector<float>();
    std::sort(x.begin(), x.end());
    NWData d;
    d.x_train = from_vector(x, {n_train});
    d.y_train = add(nw_target(d.x_train, preset), randn({n_train}, &gen, 0.0, 0.5));
    d.x_test  = nw_test_inputs();
    d.y_true  = nw_target(d.x_test, preset);
    return d;
}

namespace {

/// Parses one number filling the whole field (surrounding spaces allowed; "nan"/"inf" parse and
/// are rejected by the caller with their line number).
bool parse_number(const std::string& field, double& out) {
    const char* b = field.c_str();
    char* end     = nullptr;
    out           = std::strtod(b, &end);
    if (end == b) return false;
    while (*end == ' ' || *end == '\t' || *end == '\r') ++end;
    return *end == '\0';
}

std::string trim(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t\r");
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

}  // namespace

std::pair<Tensor, Tensor> read_xy_csv(const std::string& path) {
    std::ifstream in(path);
    QKV_CHECK(in.good(), "cannot open the CSV file '", path, "': ", std::strerror(errno));
    std::vector<std::pair<double, double>> rows;
    std::string line;
    int64_t lineno = 0;
    bool first_content = true;
    while (std::getline(in, line)) {
        ++lineno;
        const std::string t = trim(line);
        if (t.empty() || t[0] == '#') continue;
        const size_t comma = t.find(',');
        double x = 0, y = 0;
        const bool two = comma != std::string::npos && t.find(',', comma + 1) == std::string::npos;
        const bool x_ok = two && parse_number(t.substr(0, comma), x);
        const bool y_ok = two && parse_number(t.substr(comma + 1), y);
        const bool ok   = x_ok && y_ok;
        if (first_content && two && !x_ok && !y_ok) {  // a header line such as "x,y"
            first_content = false;
            continue;
        }
        first_content = false;
        QKV_CHECK(ok, path, ":", lineno, ": expected two numbers 'x,y', got '", t, "'");
        QKV_CHECK(std::isfinite(x) && std::isfinite(y), path, ":", lineno,
                  ": values must be finite (no NaN or inf), got '", t, "'");
        QKV_CHECK(std::isfinite(float(x)) && std::isfinite(float(y)), path, ":", lineno,
                  ": values must fit in float32 (|v| < 3.4e38), got '", t, "'");
        rows.emplace_back(x, y);
    }
    QKV_CHECK(rows.size() >= 2, path, ": need at least 2 data rows (x,y), found ", rows.size());
    std::stable_sort(rows.begin(), rows.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<float> xs, ys;
    for (const auto& [x, y] : rows) {
        xs.push_back(float(x));
        ys.push_back(float(y));
    }
    const int64_t n = int64_t(rows.size());
    return {from_vector(xs, {n}), from_vector(ys, {n})};
}

}  // namespace qkv::models
