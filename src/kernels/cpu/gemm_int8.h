#pragma once
// int8 GEMM with exact int32 sums for the int8 linear layers (ops/quantize.h), through oneDNN:
// its s8 matmul on weights reordered once into the layout it asks for (VNNI / AMX-INT8 blocking),
// or its GEMM API on the plain weight.
// Dim legend: N rows of x, K in_features, O out_features.
#include <cstdint>
#include <functional>
#include <memory>

namespace qkv::kernels::cpu {

/// One (O, K) int8 weight for gemm_int8_nt: a copy of the plain weight and the prepacked copies,
/// one per weight layout oneDNN's matmul asked for (made on the first call that needs it, under a
/// lock; later calls from any thread reuse it).
class Int8PackedWeight;

/// The cache for the row-major (O, K) weight `q` (copied; no prepacked copy yet).
std::shared_ptr<Int8PackedWeight> make_int8_packed_weight(const int8_t* q, int64_t O, int64_t K);

/// The largest |activation| gemm_int8_nt takes: 127 where oneDNN's int8 kernels for this CPU use
/// VNNI or AMX-INT8 (exact int32 sums of s8·s8 products), else 63. Without VNNI oneDNN sums pairs
/// of u8·s8 products in int16 (vpmaddubsw), which saturates for activations beyond 7 bits (it
/// shifts s8 activations to u8, so 255·127·2 > 32,767); 7-bit activations (u8 in [1, 127] with
/// offset 64) keep every pair below it, as PyTorch's reduce_range does on fbgemm without VNNI.
/// Fixed per process: depends on the CPU and oneDNN's cap (QKV_MAX_ISA, ONEDNN_MAX_CPU_ISA), not
/// on set_int8_gemm_path (with VNNI both paths are exact on 8-bit activations).
int int8_activation_max();

/// acc (N, O) = x (N, K) · qᵀ with q the (O, K) weight behind `packed`, every sum exact in int32
/// (the caller bounds K·127² < 2³¹). x holds integers in [-int8_activation_max(), +that]; x and
/// acc are row-major and dense. N, O, K >= 1. Throws qkv::Error (naming N, O, K) for sizes that do
/// not match the packed weight's or when oneDNN fails.
void gemm_int8_nt(const int8_t* x, int64_t N, int64_t K, int64_t O, const Int8PackedWeight& packed, int32_t* acc);

/// Receives the int32 sums of output columns [o0, o0 + width) for rows [n0, n1): acc is (N,
/// width), dense, and only its rows n0..n1-1 are this call's. Called from several threads at once
/// (distinct blocks or rows); the sums are valid during the call only.
using Int8BlockEpilogue =
    std::function<void(int64_t o0, int64_t width, int64_t n0, int64_t n1, const int32_t* acc)>;

/// The column width gemm_int8_nt_blocks uses: block_columns (clamped to O) if > 0, else O when the
/// (N, O) int32 sums fit in 1 MB or N > 256, else about 256 KB of sums per block (a multiple of
/// 64 columns, at least 256). Throws qkv::Error for block_columns < 0.
int64_t int8_block_columns(int64_t N, int64_t O, int64_t block_columns = 0);

/// x · qᵀ as gemm_int8_nt computes it, handed to `epilogue` in blocks of int8_block_columns
/// output columns while the block's sums are in the core's cache, instead of an (N, O) int32 array
/// written to memory and read back (7 MB at 100 × 17,496). The blocks are split over the OpenMP
/// threads, each making its products with oneDNN on one thread; at full width oneDNN's threads
/// make the one product and the rows are split over the threads for the epilogue. Same sizes and
/// throws as gemm_int8_nt; an exception thrown by epilogue is rethrown here (the first one).
void gemm_int8_nt_blocks(const int8_t* x, int64_t N, int64_t K, int64_t O, const Int8PackedWeight& packed,
                         int64_t block_columns, const Int8BlockEpilogue& epilogue);

/// The operands of gemm_int8_nt_dequant: x (N, K) int8 activations, the packed weight (O, K), the
/// scales sx (N) and sw (O), bias (O) or null, y (N, O) row-major and dense; block_columns as
/// gemm_int8_nt_blocks's.
struct Int8DequantParams {
    const int8_t*           x = nullptr;
    int64_t                 N = 0, K = 0, O = 0;
    const Int8PackedWeight* packed        = nullptr;
    const float*            sx            = nullptr;
    const float*            sw            = nullptr;
    const float*            bias          = nullptr;
    float*                  y             = nullptr;
    int64_t                 block_columns = 0;
};

/// y (N, O) = float(acc[n, o]) · sx[n] · sw[o] + bias[o] (in that order; bias may be null) with
/// acc = x · qᵀ, through gemm_int8_nt_blocks; bit-identical for every block width. Throws as
/// gemm_int8_nt_blocks.
void gemm_int8_nt_dequant(const Int8DequantParams& p);

enum class Int8GemmPath { automatic, matmul_prepacked, gemm_api };
/// The paths: matmul_prepacked (oneDNN's s8 matmul on prepacked weights; needs VNNI or AMX-INT8
/// in oneDNN's kernel for this CPU) and gemm_api (dnnl_gemm_s8s8s32 with VNNI, else
/// dnnl_gemm_u8s8s32 on 7-bit activations). `automatic` (the default) takes matmul_prepacked where
/// oneDNN's s8 matmul uses AMX-INT8 (the GEMM API ran int8 translation 2x slower than fp32 on an
/// AMX Xeon; the matmul there is not measured yet), gemm_api elsewhere (with VNNI on a Zen 5 the
/// GEMM API is up to 2.4x faster for one row, the matmul up to 1.7x faster for 20 rows, and they
/// are within 17 % from 100 rows: bench/RESULTS.md). Forces a path for later calls (tests and
/// benchmarks run both); matmul_prepacked falls back to gemm_api where it does not exist. Not
/// thread-safe: call between kernel calls. Returns the previous setting.
Int8GemmPath set_int8_gemm_path(Int8GemmPath p);

/// The path int8 products take now, e.g. "oneDNN s8 matmul on prepacked weights
/// (brg:avx512_core_vnni)" or "oneDNN dnnl_gemm_u8s8s32, 7-bit activations (<why>)".
const char* int8_gemm_path();

/// Whether oneDNN's int8 kernels here use VNNI or AMX-INT8 (the matmul_prepacked path exists).
bool int8_matmul_available();

}  // namespace qkv::kernels::cpu
