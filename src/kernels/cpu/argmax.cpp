// Each row's best column of an output-layer block (cpu/argmax.h): the ISA's variant of
// cpu/argmax_simd.h, or its portable (scalar) build.
#include "kernels/cpu/argmax.h"

#include "kernels/cpu/argmax_simd.h"
#include "kernels/cpu/variants.h"

namespace qkv::kernels::cpu {

void argmax_block(const ArgmaxBlockParams& p) {
    QKV_ISA_DISPATCH(simd::argmax_block, simd::argmax_block<Isa::scalar>(p), p);
}

}  // namespace qkv::kernels::cpu
