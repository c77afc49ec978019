// The one ISA layer (kernels/cpu/isa.h): names, parsing, the cap and what it selects, and flash
// attention's table of entry points per tier (kernels/cpu/flash_kernels.h). That every kernel
// honours the cap is shown by each kernel test, which runs its fast kernel under IsaGuard for
// every tier in available_isas() against the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "kernels/cpu/flash_kernels.h"
#include "kernels/cpu/isa.h"
#include "kernels/kernel_test_util.h"
#include "qkv/core/error.h"

namespace {

using namespace qkv::test;
namespace cpu = qkv::kernels::cpu;
using cpu::Isa;

TEST(Isa, NamesRoundTripAndBadNamesThrowNamingTheSource) {
    for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx})
        EXPECT_EQ(cpu::parse_isa(cpu::isa_name(isa), "test"), isa);
    try {
        cpu::parse_isa("avx9", "QKV_MAX_ISA");
        FAIL() << "no throw";
    } catch (const qkv::Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("QKV_MAX_ISA"), std::string::npos) << what;
        EXPECT_NE(what.find("avx9"), std::string::npos) << what;
    }
}

TEST(Isa, DetectionIsConsistent) {
    const cpu::CpuFeatures& f = cpu::cpu_features();
    EXPECT_EQ(f.avx2, cpu::cpu_isa() >= Isa::avx2);
    EXPECT_EQ(f.avx512, cpu::cpu_isa() >= Isa::avx512);
    EXPECT_EQ(f.avx512_bf16, cpu::cpu_isa() >= Isa::avx512_bf16);
    if (cpu::cpu_isa() == Isa::amx) {
        EXPECT_TRUE(f.amx_tile && f.amx_bf16);
    }
}

TEST(Isa, CapSelectsTheTierAndTheVariant) {
    for (Isa cap : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx}) {
        IsaGuard guard(cap);
        EXPECT_EQ(cpu::max_isa(), cap);
        const Isa want = cpu::cpu_isa() < cap ? cpu::cpu_isa() : cap;
        EXPECT_EQ(cpu::simd_isa(), want) << cpu::isa_name(cap);
        // No bf16/AMX variants yet: those tiers run the avx512 ones.
        EXPECT_EQ(cpu::fp32_variant_isa(), want > Isa::avx512 ? Isa::avx512 : want);
    }
    // available_isas() (what every kernel test loops over) lists each fp32 variant this CPU has.
    const auto isas = available_isas();
    ASSERT_FALSE(isas.empty());
    EXPECT_EQ(isas.front(), Isa::scalar);
    EXPECT_EQ(isas.back(), std::min(cpu::cpu_isa(), Isa::avx512));
}

TEST(FlashKernelTable, EachTierHasItsBuildsAndTheTierBelowsForTheRest) {
    using cpu::detail::FlashKernels;
    const Isa tiers[] = {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx};
    FlashKernels row[5];
    for (Isa t : tiers) {
        if (t > cpu::cpu_isa()) break;
        IsaGuard guard(t);
        const FlashKernels& k = cpu::detail::flash_kernels();
        row[int(t)]           = k;
        const char* name      = cpu::isa_name(t);
        EXPECT_TRUE(k.forward && k.backward && k.tile_gemm) << name;
        const bool bf16 = t >= Isa::avx512_bf16;
        EXPECT_EQ(k.forward_dot != nullptr, bf16) << name;
        EXPECT_EQ(k.backward_dot != nullptr, bf16) << name;
        EXPECT_EQ(k.forward_amx_emulated != nullptr, bf16) << name;
        EXPECT_EQ(k.backward_amx_emulated != nullptr, bf16) << name;
        EXPECT_EQ(k.forward_amx_untimed_tiles != nullptr, bf16) << name;
        EXPECT_EQ(k.forward_amx != nullptr, t == Isa::amx) << name;
        EXPECT_EQ(k.backward_amx != nullptr, t == Isa::amx) << name;
    }
    // The fp32 builds differ per tier up to avx512; the bf16 tiers run avx512's, amx runs
    // avx512_bf16's dot build.
    if (cpu::cpu_isa() >= Isa::avx2) {
        EXPECT_NE(row[1].forward, row[0].forward);
    }
    if (cpu::cpu_isa() >= Isa::avx512) {
        EXPECT_NE(row[2].backward, row[1].backward);
    }
    if (cpu::cpu_isa() >= Isa::avx512_bf16) {
        EXPECT_EQ(row[3].forward, row[2].forward);
        EXPECT_EQ(row[3].backward, row[2].backward);
        EXPECT_EQ(row[3].tile_gemm, row[2].tile_gemm);
    }
    if (cpu::cpu_isa() == Isa::amx) {
        EXPECT_EQ(row[4].forward_dot, row[3].forward_dot);
    }
}

}  // namespace
