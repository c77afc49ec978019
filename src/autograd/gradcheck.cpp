// Finite-difference gradient check (float64). Output projection r makes every output element
// count: L = Σ out ∘ r; analytic dL/dx from backward(r), numeric from central differences.
#include "qkv/autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/philox.h"

namespace qkv {

namespace {
double project(const Tensor& out, const std::vector<double>& r) {
    const std::vector<double> v = out.to_vector<double>();
    double s = 0;
    for (size_t i = 0; i < v.size(); ++i) s += v[i] * r[i];
    return s;
}
}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckTol& tol) {
    for (size_t k = 0; k < inputs.size(); ++k) {
        const Tensor& x = inputs[k];
        QKV_CHECK(!x.defined() || !x.requires_grad() || (x.dtype() == DType::f64 && x.is_leaf() &&
                  x.is_contiguous()), "gradcheck: input ", k,
                  " requires grad but is not a contiguous float64 leaf");
    }
    for (const Tensor& x : inputs)
        if (x.defined()) const_cast<Tensor&>(x).reset_grad();
    Tensor out = fn(inputs);
    QKV_CHECK(out.dtype() == DType::f64, "gradcheck: output must be float64, got ",
              dtype_name(out.dtype()));
    std::vector<double> r(static_cast<size_t>(out.numel()));
    for (size_t i = 0; i < r.size(); ++i)
        r[i] = 0.5 + philox::uniform01(philox::bits(1234, 7, i));  // in [0.5, 1.5)
    if (out.requires_grad()) out.backward(from_vector(r, out.shape()));

    GradcheckResult res;
    for (size_t k = 0; k < inputs.size(); ++k) {
        const Tensor& x = inputs[k];
        if (!x.defined() || !x.requires_grad()) continue;
        const Tensor g = x.grad();
        const std::vector<double> analytic =
            g.defined() ? g.to_vector<double>() : std::vector<double>(static_cast<size_t>(x.numel()), 0.0);
        double* p = x.data<double>();
        for (int64_t i = 0; i < x.numel(); ++i) {
            const double orig = p[i];
            double fp, fm;
            {
                NoGradGuard ng;
                p[i] = orig + tol.eps;
                fp   = project(fn(inputs), r);
                p[i] = orig - tol.eps;
                fm   = project(fn(inputs), r);
                p[i] = orig;
            }
            const double numeric = (fp - fm) / (2 * tol.eps);
            const double a = analytic[size_t(i)];
            if (!(std::abs(a - numeric) <= tol.atol + tol.rtol * std::abs(numeric))) {
                std::ostringstream os;
                os << "input " << k << " element " << i << ": analytic " << a << " vs numeric "
                   << numeric << " (diff " << std::abs(a - numeric) << ")";
                res.ok = false;
                res.message = os.str();
                return res;
            }
        }
    }
    return res;
}

}  // namespace qkv
