// The AVX2 + FMA variants of the fp32 kernels (variants.inc); called only after the run-time check.
#define QKV_VARIANT_ISA Isa::avx2
#include "kernels/cpu/variants.inc"
