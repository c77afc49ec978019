#pragma once
// Matrix-product precision (mixed-precision training and low-precision inference): in bf16 mode
// every float32 matrix product of the ops — matmul and linear (ops/matmul.h, forward and
// backward, so the math attention backend's Q·Kᵀ and P·V too) and linear_cross_entropy's output
// layer — rounds both operands to bf16 (round to nearest even) and accumulates in fp32, as
// PyTorch's CPU autocast and oneDNN do (kernels: oneDNN's bf16 matmul on AMX / AVX-512-BF16,
// else the fp32 GEMM on rounded inputs). The flash attention backend rounds q, k, v, dO, P and dS
// before its products (kernels/params.h: AttentionParams::bf16).
// Everything else stays fp32: parameters (master weights), gradients, optimizer state, softmax
// and attention's online-softmax statistics, layer norm, the loss. float64 tensors are never
// affected (references and gradchecks stay exact).
// Sources: Micikevicius et al., "Mixed Precision Training" (ICLR 2018); Kalamkar et al., "A Study
// of BFLOAT16 for Deep Learning Training" (arXiv:1905.12322).
#include <string>

namespace qkv {

enum class MatmulPrecision { fp32, bf16 };

/// The calling thread's setting (default fp32). Thread-local, as PyTorch's autocast state: two
/// models served from two threads may run in different precisions.
MatmulPrecision matmul_precision();
/// Sets the calling thread's precision; returns the previous one.
MatmulPrecision set_matmul_precision(MatmulPrecision p);

/// Sets a precision for the guard's lifetime (restores the previous one).
class MatmulPrecisionGuard {
public:
    explicit MatmulPrecisionGuard(MatmulPrecision p) : old_(set_matmul_precision(p)) {}
    ~MatmulPrecisionGuard() { set_matmul_precision(old_); }
    MatmulPrecisionGuard(const MatmulPrecisionGuard&)            = delete;
    MatmulPrecisionGuard& operator=(const MatmulPrecisionGuard&) = delete;

private:
    MatmulPrecision old_;
};

/// "fp32" or "bf16".
const char* precision_name(MatmulPrecision p);
/// The precision named `name` ("fp32", "bf16"); throws qkv::Error naming `what` (the flag or
/// config key) and the value otherwise.
MatmulPrecision parse_precision(const std::string& name, const char* what);

/// How bf16 products run on this machine now (the kernel path and why), for `qkv --version` and
/// run headers: e.g. "oneDNN bf16 matmul (brg:avx512_core_amx)" or "fp32 GEMM on bf16-rounded
/// inputs (oneDNN has no bf16 matmul for this CPU)".
std::string bf16_matmul_path();

}  // namespace qkv
