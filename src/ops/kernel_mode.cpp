// Kernel mode switch (see include/qkv/ops/kernel_mode.h).
#include "qkv/ops/kernel_mode.h"

#include <cstdlib>
#include <cstring>

#include "kernels/cpu/isa.h"

namespace qkv {
namespace {
KernelMode initial_mode() {
    const char* env = std::getenv("QKV_KERNELS");
    return env && std::strcmp(env, "ref") == 0 ? KernelMode::reference : KernelMode::fast;
}
KernelMode g_mode = initial_mode();
}  // namespace

KernelMode kernel_mode() {
    (void)kernels::cpu::max_isa();  // validates QKV_MAX_ISA here, outside any kernel
    return g_mode;
}
void set_kernel_mode(KernelMode m) { g_mode = m; }

}  // namespace qkv
