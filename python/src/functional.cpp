// qkv.scaled_dot_product_attention, masked_softmax, positional encoding, Nadaraya–Watson pooling:
// thin wrappers over ops/ and models/ that convert arguments, check the (B, H, T, D) layout and
// release the GIL around the computation.
#include "bind.h"
#include "qkv/models/nadaraya_watson.h"
#include "qkv/nn/attention.h"
#include "qkv/ops/attention.h"
#include "qkv/ops/masked_softmax.h"
#include "qkv/ops/matmul.h"
#include "qkv/ops/softmax.h"

namespace qkv::py {
namespace {

std::string shape_str(const Tensor& t) { return detail::str(t.shape()); }

/// Rank-4 q, k, v read as (B, H, T, D): the dims that must agree. Returns "" when they do.
std::string bhtd_mismatch(const Tensor& q, const Tensor& k, const Tensor& v) {
    const auto& a = q.shape();
    const auto& b = k.shape();
    const auto& c = v.shape();
    if (a[0] != b[0] || a[0] != c[0]) return "batch sizes (dim 0) differ";
    if (b[1] != c[1]) return "k and v have different head counts (dim 1)";
    if (b[1] == 0 || a[1] % b[1] != 0) return "k's head count (dim 1) does not divide q's";
    if (b[2] != c[2]) return "k and v have different key counts (dim 2)";
    if (a[3] != b[3]) return "q and k have different head widths (dim 3)";
    return "";
}

CausalAlign parse_causal(const pyb::object& c) {
    if (c.is_none()) return CausalAlign::none;
    if (pyb::isinstance<pyb::bool_>(c)) return c.cast<bool>() ? CausalAlign::top_left : CausalAlign::none;
    const std::string s = c.cast<std::string>();
    if (s == "top_left") return CausalAlign::top_left;
    if (s == "bottom_right") return CausalAlign::bottom_right;
    throw pyb::value_error(detail::str("causal: '", s, "' is not None, True, False, 'top_left' or 'bottom_right'"));
}

// qkv.scaled_dot_product_attention: the fused attention op with PyTorch's arguments.
void bind_attention_op(pyb::module_& m) {
    using pyb::arg;
    m.def(
        "scaled_dot_product_attention",
        [](const pyb::object& qo, const pyb::object& ko, const pyb::object& vo, const pyb::object& valid_lens,
           const pyb::object& mask, const pyb::object& causal, const pyb::object& scale, double dropout,
           bool training, const std::string& backend, const std::string& layout, bool return_weights) -> pyb::object {
            Tensor q = to_tensor(qo, "q"), k = to_tensor(ko, "k"), v = to_tensor(vo, "v");
            if (q.dim() != k.dim() || q.dim() != v.dim() || (q.dim() != 3 && q.dim() != 4))
                throw pyb::value_error(detail::str("scaled_dot_product_attention: q, k, v must all be (B, H, T, D) or all "
                                                   "(B, T, D); got q ", shape_str(q), ", k ", shape_str(k), ", v ", shape_str(v)));
            if (layout != "BHTD" && layout != "BTHD")
                throw pyb::value_error(detail::str("layout: '", layout, "' is not 'BHTD' or 'BTHD'"));
            const bool bthd = layout == "BTHD" && q.dim() == 4;
            if (bthd) {  // views, no copy
                q = q.transpose(1, 2);
                k = k.transpose(1, 2);
                v = v.transpose(1, 2);
            }
            if (q.dim() == 4) {
                const std::string why = bhtd_mismatch(q, k, v);
                if (!why.empty()) {
                    std::string hint;
                    if (!bthd && bhtd_mismatch(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).empty())
                        hint = "; the shapes fit (B, T, H, D): pass layout='BTHD' if that is how the arrays are laid out";
                    throw pyb::value_error(detail::str("scaled_dot_product_attention: q ", shape_str(q), ", k ", shape_str(k),
                                                       ", v ", shape_str(v), " read as (B, H, T, D): ", why, hint));
                }
            }
            AttentionMask am;
            am.valid_lens = to_lengths(valid_lens, "valid_lens");
            am.mask       = to_tensor(mask, "mask", true);
            am.causal     = parse_causal(causal);
            AttentionOptions opt;
            if (!scale.is_none()) {
                if (pyb::isinstance<pyb::bool_>(scale) || !(pyb::isinstance<pyb::int_>(scale) || pyb::isinstance<pyb::float_>(scale) ||
                                                              pyb::hasattr(scale, "__float__")))
                    throw pyb::type_error(detail::str("scale: expected a number or None, got ",
                                                      std::string(pyb::str(pyb::type::of(scale)))));
                opt.scale = scale.cast<double>();
                if (opt.scale == 0.0)
                    throw pyb::value_error("scale: 0 is not supported (qkv reads 0 as 'default'); pass None for 1/sqrt(D)");
            }
            opt.dropout  = dropout;
            opt.training = training;
            opt.backend  = parse_attention_backend(backend);
            Tensor out, w;
            {
                pyb::gil_scoped_release nogil;
                out = scaled_dot_product_attention(q, k, v, am, opt, return_weights ? &w : nullptr);
            }
            if (bthd) out = out.transpose(1, 2);
            if (return_weights) return pyb::make_tuple(out, w);
            return pyb::cast(out);
        },
        arg("q"), arg("k"), arg("v"), arg("valid_lens") = pyb::none(), arg("mask") = pyb::none(),
        arg("causal") = pyb::none(), arg("scale") = pyb::none(), arg("dropout") = 0.0, arg("training") = false,
        arg("backend") = "auto", pyb::kw_only(), arg("layout") = "BHTD", arg("return_weights") = false,
        R"(softmax(q kᵀ · scale + mask) v (D2L 11.3.2; Vaswani et al. 2017 eq. 1), differentiable.

q (B, H, Tq, D), k (B, Hkv, Tk, D), v (B, Hkv, Tk, Dv) -> (B, H, Tq, Dv); or all rank 3 (B, T, D).
float32 or float64; or all three float16 (computed in fp32, output float16) or bfloat16 (bf16
products, output bfloat16), inference only.
Arrays laid out (B, T, H, D) (PyTorch's nn.MultiheadAttention internals, FlashAttention's API) must
say layout='BTHD' (read through transposed views, no copy; the output is (B, Tq, H, Dv) then):
the default reads dim 1 as heads, and mismatching dims raise ValueError naming the layout.
valid_lens: None, (B) or (B, Tq), integers (any width) or float (keys j >= len masked). mask: bool (True = attend)
or float (added to the logits), broadcastable to (B, H, Tq, Tk). causal: None/False, True
('top_left', PyTorch's is_causal) or 'bottom_right'. scale: None = 1/sqrt(D). dropout acts when
training=True. backend: 'auto', 'math' or 'flash'. return_weights=True returns (out, weights) with
weights (B, H, Tq, Tk) (math path). Releases the GIL while computing.)");
}

// masked_softmax, softmax, matmul, sequence_mask, the positional-encoding table.
void bind_tensor_ops(pyb::module_& m) {
    using pyb::arg;
    m.def("masked_softmax", [](const pyb::object& X, const pyb::object& valid_lens) {
        Tensor x = to_tensor(X, "X"), vl = to_lengths(valid_lens, "valid_lens");
        pyb::gil_scoped_release nogil;
        return masked_softmax(x, vl);
    }, arg("X"), arg("valid_lens") = pyb::none(),
          "Softmax over the last dim of X (B, ..., Q, K) with keys j >= valid_lens masked (D2L 11.3.1); "
          "valid_lens None, (B) or (B, Q). Fully masked rows give zeros.");
    m.def("softmax", [](const pyb::object& X, int64_t dim) {
        Tensor x = to_tensor(X, "X");
        pyb::gil_scoped_release nogil;
        return softmax(x, dim);
    },
          arg("X"), arg("dim") = -1);
    m.def("matmul", [](const pyb::object& a, const pyb::object& b) {
        Tensor x = to_tensor(a, "a"), y = to_tensor(b, "b");
        pyb::gil_scoped_release nogil;
        return matmul(x, y);
    }, arg("a"), arg("b"));
    m.def("sequence_mask", [](const pyb::object& X, const pyb::object& valid_len, double value) {
        return sequence_mask(to_tensor(X, "X"), to_tensor(valid_len, "valid_len"), value);
    }, arg("X"), arg("valid_len"), arg("value") = 0.0);
    m.def("positional_encoding", [](int64_t num_steps, int64_t num_hiddens) {
        if (num_steps < 1 || num_hiddens < 1)
            throw pyb::value_error(detail::str("positional_encoding: num_steps (", num_steps, ") and num_hiddens (",
                                               num_hiddens, ") must be >= 1"));
        nn::PositionalEncoding pe(num_hiddens, 0.0, num_steps);
        return pe.P.select(0, 0);
    }, arg("num_steps"), arg("num_hiddens"),
          "The sinusoidal table P (num_steps, num_hiddens) of D2L 11.6.3: P[i, 2j] = sin(i / 10000^(2j/C)), "
          "P[i, 2j+1] = cos(...), float32.");
}

// Nadaraya–Watson pooling (D2L 11.2): the estimator, the data, the parametric model and its fit.
void bind_nadaraya_watson(pyb::module_& m) {
    using pyb::arg;
    m.def("nadaraya_watson", [](const pyb::object& q, const pyb::object& k, const pyb::object& v, double width) {
        Tensor qt = to_tensor(q, "queries"), kt = to_tensor(k, "keys"), vt = to_tensor(v, "values");
        models::NWResult r;
        {
            pyb::gil_scoped_release nogil;
            r = models::nadaraya_watson(qt, kt, vt, width);
        }
        return pyb::make_tuple(r.predictions, r.attention_weights);
    }, arg("queries"), arg("keys"), arg("values"), arg("width") = 1.0,
          "Gaussian-kernel attention pooling (D2L 11.2): queries (N), keys/values (N, M) or (M) -> "
          "(predictions (N), attention_weights (N, M)). Differentiable.");
    m.def("nw_data", [](const std::string& preset, int64_t n_train, uint64_t seed) {
        if (preset != "seed" && preset != "zh") throw pyb::value_error(detail::str("preset: '", preset, "' is not 'seed' or 'zh'"));
        Generator gen(seed);
        auto d = models::make_nw_data(preset == "seed" ? models::NWPreset::seed : models::NWPreset::zh, n_train, gen);
        pyb::dict out;
        out["x_train"] = d.x_train;
        out["y_train"] = d.y_train;
        out["x_test"]  = d.x_test;
        out["y_true"]  = d.y_true;
        return out;
    }, arg("preset") = "seed", arg("n_train") = 150, arg("seed") = 0,
          "The Nadaraya–Watson experiment's data (qkv nw): dict of x_train, y_train (n), x_test, y_true (50).");
    m.def("leave_one_out", [](const pyb::object& x) { return models::leave_one_out(to_tensor(x, "x")); }, arg("x"));

    pyb::class_<models::NWKernelRegression, nn::Module, std::shared_ptr<models::NWKernelRegression>>(m, "NWKernelRegression",
        "Parametric Nadaraya–Watson regression with one learned scalar w (D2L ZH 10.2.4, the seed).")
        .def(pyb::init<double>(), arg("w_init") = 1.0)
        .def("__call__", [](models::NWKernelRegression& r, const pyb::object& q, const pyb::object& k, const pyb::object& v) {
            return r.forward(to_tensor(q, "queries"), to_tensor(k, "keys"), to_tensor(v, "values"));
        }, arg("queries"), arg("keys"), arg("values"))
        .def_property_readonly("attention_weights", &models::NWKernelRegression::attention_weights)
        .def_readonly("w", &models::NWKernelRegression::w)
        .def("fit", [](models::NWKernelRegression& r, const pyb::object& x, const pyb::object& y, int64_t epochs, double lr,
                       const std::string& loss, const pyb::object& on_epoch) {
            models::NWTrainConfig cfg;
            cfg.epochs = epochs;
            cfg.lr     = lr;
            if (loss != "mean" && loss != "sum") throw pyb::value_error(detail::str("loss: '", loss, "' is not 'mean' or 'sum'"));
            cfg.loss = loss == "mean" ? models::NWLoss::mean : models::NWLoss::sum;
            std::vector<std::tuple<int64_t, double, double>> hist;
            models::train_nw(r, to_tensor(x, "x_train"), to_tensor(y, "y_train"), cfg, [&](const models::NWEpoch& e) {
                hist.emplace_back(e.epoch, e.loss, e.w);
                if (!on_epoch.is_none()) on_epoch(e.epoch, e.loss, e.w);
            });
            return hist;
        }, arg("x_train"), arg("y_train"), arg("epochs") = 20, arg("lr") = 0.5, arg("loss") = "mean",
            arg("on_epoch") = pyb::none(),
            "Leave-one-out full-batch SGD (qkv nw); returns [(epoch, loss, w)], calls on_epoch(epoch, loss, w).");
}

}  // namespace

void bind_functional(pyb::module_& m) {
    bind_attention_op(m);
    bind_tensor_ops(m);
    bind_nadaraya_watson(m);
}

}  // namespace qkv::py
