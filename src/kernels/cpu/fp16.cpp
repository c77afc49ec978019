// float <-> float16 array conversions (cpu/fp16.h): the capped tier's variant per block.
#include "kernels/cpu/fp16.h"

#include <algorithm>

#include "core/parallel_for.h"
#include "kernels/cpu/fp16_simd.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/variants.h"

namespace qkv::kernels::cpu {
namespace {

constexpr int64_t kBlock = 1 << 14;  // elements per task: 64 KiB of floats, cache-sized
constexpr int64_t kThreadFrom = 1 << 16;

/// f(begin, count) over blocks of kBlock, threaded for large n.
template <class F>
void blocks(int64_t n, F&& f) {
    const int64_t nb = (n + kBlock - 1) / kBlock;
    ::qkv::detail::parallel_for(nb, n >= kThreadFrom, [&](int64_t b) {
        const int64_t i = b * kBlock;
        f(i, std::min(kBlock, n - i));
    });
}

void to_fp16_block(const float* src, uint16_t* dst, int64_t n) {
    QKV_ISA_DISPATCH(simd::convert_to_fp16, simd::convert_to_fp16<Isa::scalar>(dst, src, n), dst, src, n);
}
void from_fp16_block(const uint16_t* src, float* dst, int64_t n) {
    QKV_ISA_DISPATCH(simd::convert_from_fp16, simd::convert_from_fp16<Isa::scalar>(dst, src, n), dst, src, n);
}

}  // namespace

void convert_to_fp16(const float* src, uint16_t* dst, int64_t n) {
    blocks(n, [&](int64_t i, int64_t m) { to_fp16_block(src + i, dst + i, m); });
}

void convert_from_fp16(const uint16_t* src, float* dst, int64_t n) {
    blocks(n, [&](int64_t i, int64_t m) { from_fp16_block(src + i, dst + i, m); });
}

}  // namespace qkv::kernels::cpu
