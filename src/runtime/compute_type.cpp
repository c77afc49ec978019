// Compute types (runtime/compute_type.h).
#include "qkv/runtime/compute_type.h"

#include "qkv/core/error.h"
#include "qkv/nn/layers.h"

namespace qkv::runtime {

const char* compute_type_name(ComputeType t) {
    switch (t) {
        case ComputeType::bf16: return "bf16";
        case ComputeType::int8: return "int8";
        case ComputeType::fp32: break;
    }
    return "fp32";
}

ComputeType parse_compute_type(const std::string& name) {
    for (ComputeType t : {ComputeType::fp32, ComputeType::bf16, ComputeType::int8})
        if (name == compute_type_name(t)) return t;
    throw Error(detail::str("compute_type: expected 'fp32', 'bf16' or 'int8', got '", name, "'"));
}

MatmulPrecision matmul_precision(ComputeType t) {
    return t == ComputeType::bf16 ? MatmulPrecision::bf16 : MatmulPrecision::fp32;
}

void apply_compute_type(nn::Module& model, ComputeType t) {
    if (t == ComputeType::int8) nn::quantize_linears_int8(model);
}

}  // namespace qkv::runtime
