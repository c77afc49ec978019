// The AVX-512 variants of the fp32 kernels (variants.inc); called only after the run-time check.
#define QKV_VARIANT_ISA Isa::avx512
#include "kernels/cpu/variants.inc"
