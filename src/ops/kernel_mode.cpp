// Kernel mode switch (see include/qkv/ops/kernel_mode.h).
#include "qkv/ops/kernel_mode.h"

#include <cstdlib>
#include <cstring>

#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_int8.h"
#include "kernels/cpu/isa.h"
#include "qkv/ops/attention.h"

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

void check_isa_cap() { (void)kernels::cpu::max_isa(); }

std::string kernel_paths() {
    namespace cpu = kernels::cpu;
    const cpu::CpuFeatures& f = cpu::cpu_features();
    std::string feats;
    for (auto [on, name] : {std::pair{f.avx2, "avx2"}, std::pair{f.avx512, "avx512"}, std::pair{f.avx512_bf16, "avx512_bf16"},
                            std::pair{f.avx512_fp16, "avx512_fp16"}, std::pair{f.amx_tile, "amx_tile"},
                            std::pair{f.amx_bf16, "amx_bf16"}})
        if (on) feats += std::string(feats.empty() ? "" : " ") + name;
    std::string s = "cpu features: " + (feats.empty() ? std::string("none of avx2, avx512, bf16, amx") : feats) + "\n";
    s += std::string("AMX: ") +
         (!(f.amx_tile && f.amx_bf16) ? "not on this CPU"
                                      : cpu::amx_permitted() ? "usable (Linux granted the tile state)"
                                                             : "not usable (the Linux permission request failed)") +
         "\n";
    const bool ref = kernel_mode() == KernelMode::reference;
    s += std::string("fp32 kernels: ") +
         (ref ? "scalar reference (QKV_KERNELS=ref / --kernels ref)"
              : cpu::fp32_variant_isa() == cpu::Isa::scalar ? "scalar (portable) builds"
                                                             : cpu::isa_name(cpu::fp32_variant_isa())) +
         (cpu::max_isa() < cpu::cpu_isa() ? std::string(" (capped at ") + cpu::isa_name(cpu::max_isa()) + ")" : "") +
         "\n";
    s += std::string("bf16 matrix products (--precision/--compute-type bf16): ") + cpu::bf16_gemm_path() + "\n";
    const bool math = default_attention_backend() == AttentionBackend::math;
    s += std::string("flash attention under bf16: ") +
         (ref    ? "not used (reference kernels: the math backend, its products bf16)"
          : math ? "not used (the math backend is selected: its products bf16)"
          : (cpu::bf16_attention_tiles(cpu::kAmxMinQueries, cpu::kAmxMinKeys) == cpu::Bf16AttentionTiles::amx
                 ? std::string("the AMX tile kernels (tdpbf16ps products of bf16 q, k, v, P and dS, fp32 "
                               "softmax and sums) from ") + std::to_string(cpu::kAmxMinQueries) + " queries and " +
                       std::to_string(cpu::kAmxMinKeys) + " keys per call; below (decoding, short sentences): "
                 : std::string()) +
                (cpu::bf16_attention_uses_dot()
                     ? "the vdpbf16ps (AVX-512-BF16) kernel: bf16 q, k, v, P and dS, fp32 sums"
                 : cpu::simd_isa() >= cpu::Isa::avx512_bf16
                     ? "the fp32 tile kernel with bf16-rounded q, k, v, P and dS (vdpbf16ps runs at half rate on "
                       "this CPU)"
                     : "the fp32 tile kernel with bf16-rounded q, k, v, P and dS (no AVX-512-BF16 or AMX in use)")) +
         "\n";
    s += std::string("int8 matrix products (--compute-type int8): ") + cpu::int8_gemm_path() + "\n";
    s += "(QKV_KERNELS, QKV_ATTENTION and QKV_MAX_ISA are applied above; the --kernels and --attention flags "
         "apply when a command runs)\n";
    return s;
}

}  // namespace qkv
