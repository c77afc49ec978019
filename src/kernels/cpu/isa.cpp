// CPU feature detection and the ISA cap (cpu/isa.h). Compiled for plain x86-64.
#include "kernels/cpu/isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <dnnl.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

#include "qkv/core/error.h"

namespace qkv::kernels::cpu {
namespace {

constexpr Isa kAllIsas[] = {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx};

// CPUID leaf 7 bit: subleaf 0 EDX (AVX512_FP16 23, AMX-BF16 22, AMX-TILE 24), subleaf 1 EAX
// (AVX512_BF16 5). Read directly because clang 14's __builtin_cpu_supports does not know these
// names (GCC 12's does); the AVX-512 register state itself is checked by the avx512f test above.
bool cpuid_bit(unsigned subleaf, int reg, int bit) {
    unsigned r[4] = {0, 0, 0, 0};
    if (!__get_cpuid_count(7, subleaf, &r[0], &r[1], &r[2], &r[3])) return false;
    return (r[reg] >> bit) & 1u;
}
constexpr int kEax = 0, kEdx = 3;
// CPUID leaf 1 ECX bit 29: F16C (vcvtph2ps / vcvtps2ph), which the avx2 tier's float16
// conversions use (every AVX2 CPU has it; checked so a CPU without it gets the scalar tier).
bool has_f16c() {
    unsigned r[4] = {0, 0, 0, 0};
    if (!__get_cpuid(1, &r[0], &r[1], &r[2], &r[3])) return false;
    return (r[2] >> 29) & 1u;
}

CpuFeatures detect() {
    __builtin_cpu_init();
    CpuFeatures f;
    f.avx2        = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    f.avx512      = f.avx2 && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq");
    f.avx512_bf16 = f.avx512 && cpuid_bit(1, kEax, 5);
    f.avx512_fp16 = f.avx512 && cpuid_bit(0, kEdx, 23);
    f.amx_tile    = cpuid_bit(0, kEdx, 24);
    f.amx_bf16    = cpuid_bit(0, kEdx, 22);
    f.bf16_dot_full_rate = f.avx512_bf16 && __builtin_cpu_is("amd");
    return f;
}

// QKV_MAX_ISA caps oneDNN's kernels too, so a capped run is an older CPU for the GEMMs as well
// (e.g. int8 without VNNI). oneDNN takes its cap only before its first use: set at load time.
// ONEDNN_MAX_CPU_ISA, when it holds a word oneDNN 2.x knows, wins (oneDNN reads it itself); a word
// it does not know oneDNN ignores, so QKV_MAX_ISA's cap applies then. Never throws: a bad
// QKV_MAX_ISA word is reported by env_cap() at the first kernel call.
bool onednn_knows_isa_word(const char* w) {
    std::string up;
    for (const char* c = w; *c; ++c) up += char(std::toupper(static_cast<unsigned char>(*c)));
    for (const char* k : {"ALL", "SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_MIC", "AVX512_MIC_4OPS", "AVX512_CORE",
                          "AVX512_CORE_VNNI", "AVX512_CORE_BF16", "AVX512_CORE_AMX"})
        if (up == k) return true;
    return false;
}
const bool g_onednn_capped = [] {
    const char* env = std::getenv("QKV_MAX_ISA");
    const char* own = std::getenv("ONEDNN_MAX_CPU_ISA");
    if (!env || !*env || (own && *own && onednn_knows_isa_word(own))) return false;
    for (const Isa cap : kAllIsas) {
        if (std::strcmp(env, isa_name(cap)) != 0) continue;
        switch (cap) {
            case Isa::scalar: return dnnl_set_max_cpu_isa(dnnl_cpu_isa_sse41) == dnnl_success;  // oneDNN's lowest
            case Isa::avx2: return dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2) == dnnl_success;
            // our avx512 tier says nothing of VNNI
            case Isa::avx512: return dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx512_core_vnni) == dnnl_success;
            case Isa::avx512_bf16: return dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx512_core_bf16) == dnnl_success;
            case Isa::amx: return false;  // no cap
        }
    }
    return false;  // a bad word
}();

// set_max_isa's cap; while unset, QKV_MAX_ISA's (read once, thread-safe).
bool g_cap_set = false;
Isa  g_cap     = Isa::amx;

Isa env_cap() {
    static const Isa cap = [] {
        const char* env = std::getenv("QKV_MAX_ISA");
        return env && *env ? parse_isa(env, "QKV_MAX_ISA") : Isa::amx;
    }();
    return cap;
}

}  // namespace

bool amx_permitted() {
    static const bool ok = [] {
        const CpuFeatures& f = cpu_features();
        if (!(f.amx_tile && f.amx_bf16)) return false;
        // Linux 5.16+: a process must ask for the AMX tile data state (XFEATURE 18) before it
        // touches the tiles; oneDNN asks too, asking twice is harmless.
        constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
        return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
    }();
    return ok;
}

const CpuFeatures& cpu_features() {
    static const CpuFeatures f = detect();
    return f;
}

Isa cpu_isa() {
    static const Isa isa = [] {
        const CpuFeatures& f = cpu_features();
        if (f.avx512_bf16 && f.amx_tile && f.amx_bf16) return Isa::amx;
        if (f.avx512_bf16) return Isa::avx512_bf16;
        if (f.avx512) return Isa::avx512;
        return f.avx2 ? Isa::avx2 : Isa::scalar;
    }();
    return isa;
}

Isa max_isa() { return g_cap_set ? g_cap : env_cap(); }

Isa set_max_isa(Isa cap) {
    const Isa old = max_isa();
    g_cap         = cap;
    g_cap_set     = true;
    return old;
}

Isa simd_isa() {
    const Isa cap = max_isa();
    return cpu_isa() < cap ? cpu_isa() : cap;
}

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::scalar: return "scalar";
        case Isa::avx2: return "avx2";
        case Isa::avx512: return "avx512";
        case Isa::avx512_bf16: return "avx512_bf16";
        case Isa::amx: return "amx";
    }
    return "?";
}

Isa parse_isa(std::string_view name, const char* what) {
    for (Isa isa : kAllIsas)
        if (name == isa_name(isa)) return isa;
    QKV_CHECK(false, what, ": unknown instruction set '", std::string(name),
              "' (expected scalar, avx2, avx512, avx512_bf16 or amx)");
    return Isa::scalar;
}

}  // namespace qkv::kernels::cpu
