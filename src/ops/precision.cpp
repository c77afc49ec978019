// Matrix-product precision (ops/precision.h).
#include "qkv/ops/precision.h"

#include "kernels/cpu/gemm.h"
#include "qkv/core/error.h"

namespace qkv {
namespace {
thread_local MatmulPrecision g_precision = MatmulPrecision::fp32;
}

MatmulPrecision matmul_precision() { return g_precision; }

MatmulPrecision set_matmul_precision(MatmulPrecision p) {
    const MatmulPrecision old = g_precision;
    g_precision = p;
    return old;
}

const char* precision_name(MatmulPrecision p) { return p == MatmulPrecision::bf16 ? "bf16" : "fp32"; }

MatmulPrecision parse_precision(const std::string& name, const char* what) {
    if (name == "fp32") return MatmulPrecision::fp32;
    if (name == "bf16") return MatmulPrecision::bf16;
    throw Error(detail::str(what, ": expected fp32 or bf16, got '", name, "'"));
}

std::string bf16_matmul_path() { return kernels::cpu::bf16_gemm_path(); }

}  // namespace qkv
