#pragma once
// Process-wide choice between fast kernels and the scalar reference kernels (CONVENTIONS §4):
// re-run anything on references to bisect a numerical problem. QKV_KERNELS=ref at start-up or
// `--kernels ref` on the CLI selects the references. float64 always uses the references.

#include <string>

namespace qkv {

enum class KernelMode { fast, reference };

KernelMode kernel_mode();
void set_kernel_mode(KernelMode m);

/// Reads the kernel-ISA cap now (the environment variable QKV_MAX_ISA is otherwise read at the
/// first kernel call, e.g. after a model is loaded). Throws qkv::Error naming QKV_MAX_ISA and the
/// value when it is not one of scalar, avx2, avx512, avx512_bf16, amx.
void check_isa_cap();

/// What this machine's CPU offers and which path each kind of kernel takes now (after the ISA cap
/// QKV_MAX_ISA and the kernel mode), one "name: value" line each, for `qkv --version`:
///   cpu features: avx2 avx512 avx512_bf16 ... (from CPUID)
///   AMX: usable | not usable (the Linux permission request failed) | not on this CPU
///   fp32 kernels: avx512 | avx2 | scalar reference (QKV_KERNELS=ref / the cap)
///   bf16 matrix products: oneDNN bf16 matmul (<implementation>) | fp32 GEMM on bf16-rounded inputs (<why>)
///   flash attention under bf16: the AMX tile kernels | the vdpbf16ps kernel | the fp32 tiles on
///   bf16-rounded operands (<why>)
std::string kernel_paths();

}  // namespace qkv
