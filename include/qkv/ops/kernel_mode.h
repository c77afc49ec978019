#pragma once
// Process-wide choice between fast kernels and the scalar reference kernels (CONVENTIONS §4):
// re-run anything on references to bisect a numerical problem. QKV_KERNELS=ref at start-up or
// `--kernels ref` on the CLI selects the references. float64 always uses the references.

namespace qkv {

enum class KernelMode { fast, reference };

KernelMode kernel_mode();
void set_kernel_mode(KernelMode m);

}  // namespace qkv
