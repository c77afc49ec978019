#pragma once
// The compute type a trained model translates with (`qkv translate/eval/serve --compute-type`,
// qkv.Translator(compute_type=...)), parsed and applied here for every front end.
#include <string>

#include "qkv/ops/precision.h"

namespace qkv::nn {
class Module;
}

namespace qkv::runtime {

/// fp32: float32 throughout. bf16: matrix products and attention with bf16-rounded operands and
/// fp32 accumulation (ops/precision.h MatmulPrecision::bf16). int8: the Linear layers' weights
/// quantized per output channel after loading, activations per row at run time
/// (nn::quantize_linears_int8); the other products stay fp32.
enum class ComputeType { fp32, bf16, int8 };

/// "fp32" / "bf16" / "int8".
const char* compute_type_name(ComputeType t);
/// Inverse of compute_type_name. Throws qkv::Error "compute_type: expected 'fp32', 'bf16' or
/// 'int8', got 'fp16'" for another name.
ComputeType parse_compute_type(const std::string& name);
/// The matrix-product precision a translation under `t` runs with (bf16 for bf16, else fp32); the
/// caller sets it for its thread (MatmulPrecisionGuard).
MatmulPrecision matmul_precision(ComputeType t);
/// What `t` changes in a loaded model: int8 quantizes its Linear layers (nn::quantize_linears_int8);
/// fp32 and bf16 change nothing (bf16 is a per-thread setting, matmul_precision).
void apply_compute_type(nn::Module& model, ComputeType t);

}  // namespace qkv::runtime
