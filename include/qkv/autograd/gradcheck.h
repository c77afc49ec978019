#pragma once
// Finite-difference gradient check in float64 (PyTorch torch.autograd.gradcheck defaults).
#include <functional>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv {

struct GradcheckTol {
    double eps  = 1e-6;  // central-difference step
    double atol = 1e-5;
    double rtol = 1e-3;
};

struct GradcheckResult {
    bool        ok = true;
    std::string message;  // first mismatch: input index, element, analytic vs numeric
};

/// fn maps the inputs (f64, requires_grad set on those to check) to one output of any shape.
/// Compares d(sum(out * r))/d(input) from backward() against central differences, where r is a
/// fixed random projection (so every output element matters). Inputs must be f64.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckTol& tol = {});

}  // namespace qkv
