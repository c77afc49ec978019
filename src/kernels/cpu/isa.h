#pragma once
// The one place for CPU features: which instruction sets this CPU has, the cap that limits what
// the fast kernels may use (QKV_MAX_ISA or set_max_isa), and the one dispatch point every fast
// kernel goes through (QKV_ISA_DISPATCH). Per-ISA kernel bodies are compiled from one source
// (cpu/variants.inc) once per ISA; docs/kernels/recipe.md says where new ones go.
#include <cstdint>
#include <string_view>

namespace qkv::kernels::cpu {

/// Instruction-set tiers, in increasing order (each includes the ones before it).
///   scalar:      no SIMD kernels; the fast entry points run the reference kernels (flash: its
///                portable build).
///   avx2:        AVX2 + FMA + F16C (8 fp32 lanes; F16C converts float16).
///   avx512:      AVX-512 F, BW, VL, DQ (16 fp32 lanes).
///   avx512_bf16: avx512 + AVX512_BF16 (vdpbf16ps). The bf16 flash attention has a
///                vdpbf16ps build (cpu/flash_attention.h: Bf16AttentionPath); the fp32 kernels run
///                their avx512 variant.
///   amx:         avx512_bf16 + AMX-TILE/AMX-BF16. Detected from CPUID only (using the tiles also
///                needs the Linux permission request, amx_permitted); the bf16 flash attention
///                has an AMX build (cpu/flash_kernels.h), every other kernel runs its avx512 one.
enum class Isa : uint8_t { scalar, avx2, avx512, avx512_bf16, amx };

/// What the CPU reports (CPUID through __builtin_cpu_supports), read once.
struct CpuFeatures {
    bool avx2        = false;  // AVX2, FMA and F16C
    bool avx512      = false;  // AVX-512 F, BW, VL and DQ
    bool avx512_bf16 = false;
    // Reported for messages and benchmarks; no tier uses it yet: float16 attention converts to
    // fp32 on every machine (ops/attention.h), native-half arithmetic would need a tested path.
    bool avx512_fp16 = false;
    bool amx_tile    = false;
    bool amx_bf16    = false;
    // vdpbf16ps issues at the fp32 FMA rate, so it doubles the products per cycle: AMD's
    // AVX-512-BF16 (Zen 4, Zen 5; bench_peak on an EPYC family 26: 2.0x vfmadd231ps's FLOP/s).
    // Intel's (Cooper Lake, Sapphire/Emerald Rapids) issues it at half that (bench_peak on a Xeon
    // model 207: 0.5x), where the bf16 kernels keep the fp32 tiles. bench/RESULTS.md has both.
    bool bf16_dot_full_rate = false;
};
const CpuFeatures& cpu_features();

/// Whether this process may use the AMX tiles: the CPU has AMX-TILE and AMX-BF16 and Linux granted
/// the tile state (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA; asked once). False otherwise.
bool amx_permitted();

/// The best tier this CPU supports, ignoring the cap.
Isa cpu_isa();
/// The cap: set_max_isa's last value, else the environment variable QKV_MAX_ISA (read once:
/// scalar, avx2, avx512, avx512_bf16 or amx), else amx (no cap). Throws qkv::Error naming
/// QKV_MAX_ISA and its value when the variable holds another word (qkv::kernel_mode(), which the
/// ops call before choosing a fast kernel, reads it first, so the error comes from an op rather
/// than from a kernel inside a parallel region). QKV_MAX_ISA also caps oneDNN (set when the library
/// loads; oneDNN's own ONEDNN_MAX_CPU_ISA wins when set and not empty): scalar -> sse41, avx2 -> avx2, avx512 ->
/// avx512_core_vnni, avx512_bf16 -> avx512_core_bf16. set_max_isa does not (oneDNN takes a cap
/// only before its first use).
Isa max_isa();
/// Caps the tier used by later kernel calls (tests run every path the CPU has; benchmarks
/// compare them). Not thread-safe: call it between kernel calls. Returns the previous cap.
Isa set_max_isa(Isa cap);
/// min(cpu_isa(), max_isa()): the tier the fast kernels use now.
Isa simd_isa();
/// "scalar", "avx2", "avx512", "avx512_bf16", "amx".
const char* isa_name(Isa isa);
/// The tier named `name` (isa_name's words); throws qkv::Error naming `what` (e.g. the variable or
/// flag it came from) and the value otherwise.
Isa parse_isa(std::string_view name, const char* what);

/// The fp32 kernels' variants: avx512 serves every tier from avx512 up until bf16/AMX variants
/// exist. A new tier with its own variants adds its case here and in QKV_ISA_DISPATCH.
inline Isa fp32_variant_isa() {
    const Isa isa = simd_isa();
    return isa > Isa::avx512 ? Isa::avx512 : isa;
}

}  // namespace qkv::kernels::cpu

/// The one dispatch point of the fast kernels: calls NAME<Isa::avx512>(ARGS...) or
/// NAME<Isa::avx2>(ARGS...) (the per-ISA instantiations of cpu/variants.inc) as the capped CPU
/// allows, else evaluates FALLBACK (the reference kernel) — from a function returning void.
#define QKV_ISA_DISPATCH(NAME, FALLBACK, ...)                                        \
    do {                                                                             \
        switch (::qkv::kernels::cpu::fp32_variant_isa()) {                           \
            case ::qkv::kernels::cpu::Isa::avx512:                                   \
                return NAME<::qkv::kernels::cpu::Isa::avx512>(__VA_ARGS__);          \
            case ::qkv::kernels::cpu::Isa::avx2:                                     \
                return NAME<::qkv::kernels::cpu::Isa::avx2>(__VA_ARGS__);            \
            default:                                                                 \
                return FALLBACK;                                                     \
        }                                                                            \
    } while (0)
