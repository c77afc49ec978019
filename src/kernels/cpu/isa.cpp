// CPU feature detection and the ISA cap (cpu/isa.h). Compiled for plain x86-64.
#include "kernels/cpu/isa.h"

#include <cstdlib>
#include <string>

#include "qkv/core/error.h"

namespace qkv::kernels::cpu {
namespace {

constexpr Isa kAllIsas[] = {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx};

CpuFeatures detect() {
    __builtin_cpu_init();
    CpuFeatures f;
    f.avx2        = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    f.avx512      = f.avx2 && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq");
    f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
    f.avx512_fp16 = f.avx512 && __builtin_cpu_supports("avx512fp16");
    f.amx_tile    = __builtin_cpu_supports("amx-tile");
    f.amx_bf16    = __builtin_cpu_supports("amx-bf16");
    return f;
}

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
