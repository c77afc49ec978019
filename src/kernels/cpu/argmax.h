#pragma once
// Each row's best column of a block of output-layer values, for greedy decoding's fused output
// layer (ops: linear_argmax, linear_int8_argmax): the values made and scanned in one pass while
// the block is in the cache, never written out as logits.
#include <cstdint>

namespace qkv::kernels::cpu {

/// The operands of argmax_block. Row n's value at column j is
///   int8 (acc set):     float(acc[n·width + j]) · sx[n] · sw[j] + (bias ? bias[j] : 0)
///   fp32 (acc null):    logits[n·width + j] + bias[j] (logits[...] alone when bias is null)
/// in that order of fp32 operations (no fused multiply-add), as linear_int8 and linear write them.
struct ArgmaxBlockParams {
    int64_t        rows = 0, width = 0;
    const int32_t* acc    = nullptr;  // int8: (rows, width) int32 sums, dense
    const float*   logits = nullptr;  // fp32: (rows, width), dense; read when acc is null
    const float*   sx     = nullptr;  // int8: (rows) activation scales
    const float*   sw     = nullptr;  // int8: (width) weight scales
    const float*   bias   = nullptr;  // (width) or null
    const char*    banned = nullptr;  // (width) flags, nonzero = skip the column; or null
    float*         best   = nullptr;  // out (rows): the winning value (0 where index is -1)
    int64_t*       index  = nullptr;  // out (rows): its column in [0, width), -1 if all are banned
};

/// For each row, the column argmax_better (core/argmax_rule.h) picks among the columns not
/// banned: the first NaN, else the largest value, ties to the smaller column. The AVX-512 and AVX2
/// builds make each value with the same fp32 operations as the scalar build, take the row maximum
/// in vectors and then its first column; a row with a NaN or whose maximum is -inf is scanned
/// again with the scalar rule, so every tier gives the same result. One thread.
void argmax_block(const ArgmaxBlockParams& p);

}  // namespace qkv::kernels::cpu
