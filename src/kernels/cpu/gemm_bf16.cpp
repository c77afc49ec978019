// bf16 GEMM with fp32 accumulation (kernels/cpu/gemm.h gemm_bf16_batched): oneDNN's bf16 matmul
// where this CPU has one (AMX, AVX-512-BF16), else the fp32 GEMM on bf16-rounded inputs.
#include <omp.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "core/parallel_for.h"
#include "kernels/cpu/bf16_simd.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/variants.h"
#include "qkv/core/bf16.h"
#include "qkv/core/error.h"

namespace qkv::kernels::cpu {
namespace {

using dt = dnnl::memory::data_type;

struct Onednn {
    dnnl::engine engine;
    bool has_bf16 = false;     // a non-reference bf16 matmul exists for this CPU
    std::string impl, why_not;
};

/// Created once: the engine and whether oneDNN has a real (non-"ref") bf16 matmul here.
const Onednn& onednn() {
    static const Onednn o = [] {
        Onednn r;
        r.engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
        try {
            const dnnl::memory::desc a({64, 64}, dt::bf16, dnnl::memory::format_tag::ab);
            const dnnl::memory::desc c({64, 64}, dt::f32, dnnl::memory::format_tag::ab);
            const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), r.engine);
            r.impl = pd.impl_info_str();
            r.has_bf16 = r.impl.rfind("ref", 0) != 0;
            if (!r.has_bf16) r.why_not = "oneDNN has only its reference bf16 matmul for this CPU";
        } catch (const dnnl::error&) {
            r.why_not = "oneDNN has no bf16 matmul for this CPU";
        }
        return r;
    }();
    return o;
}

Bf16GemmPath g_path = Bf16GemmPath::automatic;

bool use_onednn(double flops) {
    if (g_path == Bf16GemmPath::rounded_fp32 || !onednn().has_bf16 || simd_isa() < Isa::avx512_bf16) return false;
    if (g_path == Bf16GemmPath::onednn) return true;
    const bool tiles = simd_isa() == Isa::amx && amx_permitted();
    return (tiles || cpu_features().bf16_dot_full_rate) && flops >= kBf16OnednnMinFlops;
}

/// The matmul primitives this thread used, by shape and layout (oneDNN's own cache still needs a
/// primitive descriptor per call, which costs microseconds); bounded.
struct PrimitiveCache {
    std::map<std::array<int64_t, 8>, dnnl::matmul> map;
    std::unique_ptr<dnnl::stream> stream;
};
PrimitiveCache& primitive_cache() {
    thread_local PrimitiveCache c;
    return c;
}

/// Per-thread conversion buffers, reused across calls (first touch of fresh memory is slow).
struct Buffers {
    std::vector<uint16_t> a16, b16;
    std::vector<float> a32, b32;
};
Buffers& buffers() {
    thread_local Buffers b;
    return b;
}

/// Copies `batch` (rows × cols) blocks (leading dimension ld, batch stride `stride`) into a dense
/// (batch, rows, cols) buffer of bf16 bits (D = uint16_t) or bf16-rounded floats (D = float).
template <class D>
void pack(const float* src, int64_t batch, int64_t rows, int64_t cols, int64_t ld, int64_t stride, std::vector<D>& dst) {
    const size_t n = size_t(batch * rows * cols);
    if (dst.size() < n) dst.resize(n);
    D* out = dst.data();
    const int64_t total = batch * rows;
    ::qkv::detail::parallel_for(total, total * cols > (1 << 15), [&](int64_t r) {
        const int64_t b = r / rows, i = r % rows;
        const float* s = src + b * stride + i * ld;
        D* d = out + r * cols;
        if constexpr (std::is_same_v<D, uint16_t>) convert_bf16(s, d, nullptr, cols);
        else convert_bf16(s, nullptr, d, cols);
    });
}

}  // namespace

void convert_bf16(const float* src, uint16_t* bits, float* rounded, int64_t n) {
    QKV_ISA_DISPATCH(simd::convert_bf16, simd::convert_bf16<Isa::scalar>(bits, rounded, src, n), bits, rounded, src, n);
}

Bf16GemmPath set_bf16_gemm_path(Bf16GemmPath p) {
    const Bf16GemmPath old = g_path;
    g_path = p;
    return old;
}

const char* bf16_gemm_path() {
    static std::string onednn_text, capped, cpu, no_amx, forced;
    static std::once_flag once;
    std::call_once(once, [] {
        const Onednn& o = onednn();
        onednn_text = "oneDNN bf16 matmul (" + o.impl + ")";
        capped      = "fp32 GEMM on bf16-rounded inputs (the ISA cap is below avx512_bf16)";
        cpu         = "fp32 GEMM on bf16-rounded inputs (" + o.why_not + ")";
        no_amx      = "fp32 GEMM on bf16-rounded inputs (no usable AMX, and vdpbf16ps at half rate: oneDNN's bf16 "
                      "matmul (" + o.impl + ") is slower than the fp32 GEMM here)";
        forced = "fp32 GEMM on bf16-rounded inputs (set_bf16_gemm_path)";
    });
    if (use_onednn(kBf16OnednnMinFlops)) return onednn_text.c_str();
    if (!onednn().has_bf16) return cpu.c_str();
    if (simd_isa() < Isa::avx512_bf16) return capped.c_str();
    return g_path == Bf16GemmPath::rounded_fp32 ? forced.c_str() : no_amx.c_str();
}

void gemm_bf16_batched(const GemmBatchedParams<float>& p) {
    QKV_CHECK(p.alpha == 1.0f && p.beta == 0.0f, "gemm_bf16_batched: alpha must be 1 and beta 0, got ", p.alpha, " and ",
              p.beta);
    QKV_CHECK(p.batch >= 0 && p.M >= 0 && p.N >= 0 && p.K >= 0, "gemm_bf16_batched: bad sizes (batch ", p.batch, ", M ",
              p.M, ", N ", p.N, ", K ", p.K, ")");
    if (p.batch == 0 || p.M == 0 || p.N == 0) return;
    if (p.K == 0) {
        for (int64_t b = 0; b < p.batch; ++b)
            for (int64_t i = 0; i < p.M; ++i)
                for (int64_t j = 0; j < p.N; ++j) p.C[b * p.stride_c + i * p.ldc + j] = 0.0f;
        return;
    }
    // Stored layouts: A is (M, K) or, transposed, (K, M); B is (K, N) or (N, K).
    const int64_t a_rows = p.trans_a ? p.K : p.M, a_cols = p.trans_a ? p.M : p.K;
    const int64_t b_rows = p.trans_b ? p.N : p.K, b_cols = p.trans_b ? p.K : p.N;
    const int64_t b_batch = p.stride_b == 0 ? 1 : p.batch;
    Buffers& buf = buffers();
    if (!use_onednn(2.0 * double(p.M) * double(p.N) * double(p.K))) {
        pack(p.A, p.batch, a_rows, a_cols, p.lda, p.stride_a, buf.a32);
        pack(p.B, b_batch, b_rows, b_cols, p.ldb, p.stride_b, buf.b32);
        GemmBatchedParams<float> q = p;
        q.A = buf.a32.data(), q.lda = a_cols, q.stride_a = a_rows * a_cols;
        q.B = buf.b32.data(), q.ldb = b_cols, q.stride_b = b_batch == 1 ? 0 : b_rows * b_cols;
        return q.batch == 1 ? gemm(q.trans_a, q.trans_b, q.M, q.N, q.K, 1.0f, q.A, q.lda, q.B, q.ldb, 0.0f, q.C, q.ldc)
                            : gemm_batched(q);
    }
    pack(p.A, p.batch, a_rows, a_cols, p.lda, p.stride_a, buf.a16);
    pack(p.B, b_batch, b_rows, b_cols, p.ldb, p.stride_b, buf.b16);
    using dims = dnnl::memory::dims;
    const int64_t M = p.M, N = p.N, K = p.K;
    const dnnl::memory::desc a_md(dims{p.batch, M, K}, dt::bf16,
                                  p.trans_a ? dims{M * K, 1, M} : dims{M * K, K, 1});
    const dnnl::memory::desc b_md(dims{b_batch, K, N}, dt::bf16,
                                  p.trans_b ? dims{K * N, 1, K} : dims{K * N, N, 1});
    const dnnl::memory::desc c_md(dims{p.batch, M, N}, dt::f32, dims{p.batch == 1 ? M * p.ldc : p.stride_c, p.ldc, 1});
    const Onednn& o = onednn();
    try {
        PrimitiveCache& cache = primitive_cache();
        if (!cache.stream) cache.stream = std::make_unique<dnnl::stream>(o.engine);
        const std::array<int64_t, 8> key{p.batch, b_batch, M, N, K, p.trans_a + 2 * p.trans_b, p.ldc,
                                         p.batch == 1 ? 0 : p.stride_c};
        auto it = cache.map.find(key);
        if (it == cache.map.end()) {
            if (cache.map.size() >= 512) cache.map.clear();
            const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), o.engine);
            it = cache.map.emplace(key, dnnl::matmul(pd)).first;
        }
        dnnl::memory am(a_md, o.engine, buf.a16.data()), bm(b_md, o.engine, buf.b16.data()), cm(c_md, o.engine, p.C);
        it->second.execute(*cache.stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
        cache.stream->wait();
    } catch (const dnnl::error& e) {
        throw Error(qkv::detail::str("gemm_bf16_batched: oneDNN bf16 matmul failed: ", e.what(), " (batch ", p.batch, ", M ", M,
                                ", N ", N, ", K ", K, ", ldc ", p.ldc, ")"));
    }
}

}  // namespace qkv::kernels::cpu
