// int8 GEMM (kernels/cpu/gemm_int8.h): oneDNN's s8 matmul on prepacked weights, or its GEMM API
// on the plain weight (s8s8s32 with VNNI, u8s8s32 on 7-bit activations without).
#include "kernels/cpu/gemm_int8.h"

#include <dnnl.h>

#include <algorithm>
#include <array>
#include <exception>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/parallel_for.h"
#include "qkv/core/error.h"

namespace qkv::kernels::cpu {

using dt   = dnnl::memory::data_type;
using tag  = dnnl::memory::format_tag;
using dims = dnnl::memory::dims;

namespace {

struct Onednn {
    dnnl::engine engine;
    bool matmul = false;  // an s8 matmul with VNNI or AMX-INT8 instructions exists for this CPU
    bool amx    = false;  // ... and it uses the AMX tiles
    std::string impl, why_not;
};

/// x (N, K) s8 row-major, y (N, O) s32 row-major, the weight (K, O) s8 in `layout`.
dnnl::matmul::desc matmul_desc(int64_t N, int64_t K, int64_t O, tag layout) {
    return dnnl::matmul::desc(dnnl::memory::desc({N, K}, dt::s8, tag::ab), dnnl::memory::desc({K, O}, dt::s8, layout),
                              dnnl::memory::desc({N, O}, dt::s32, tag::ab));
}

/// Created once: the engine and which s8 matmul oneDNN picks for a blocked-weight product here.
const Onednn& onednn() {
    static const Onednn o = [] {
        Onednn r;
        r.engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
        try {
            const dnnl::matmul::primitive_desc pd(matmul_desc(64, 256, 256, tag::any), r.engine);
            r.impl   = pd.impl_info_str();
            r.amx    = r.impl.find("amx") != std::string::npos;
            r.matmul = r.amx || r.impl.find("vnni") != std::string::npos;
            if (!r.matmul) r.why_not = "oneDNN's s8 matmul here (" + r.impl + ") has no VNNI or AMX-INT8 kernel";
        } catch (const dnnl::error&) {
            r.why_not = "oneDNN has no s8 matmul for this CPU";
        }
        return r;
    }();
    return o;
}

Int8GemmPath g_path = Int8GemmPath::automatic;

bool use_matmul() {
    if (!onednn().matmul || g_path == Int8GemmPath::gemm_api) return false;
    return g_path == Int8GemmPath::matmul_prepacked || onednn().amx;
}

/// Per-thread u8 copy of the activations for dnnl_gemm_u8s8s32, reused across calls.
std::vector<uint8_t>& u8_buffer() {
    thread_local std::vector<uint8_t> b;
    return b;
}

/// The matmul primitives this thread used, by (N, K, O), with the weight layout each asks for
/// (oneDNN's own cache still needs a primitive descriptor per call); bounded.
struct Primitive {
    dnnl::matmul matmul;
    dnnl::memory::desc weights;
};
struct PrimitiveCache {
    std::map<std::array<int64_t, 3>, Primitive> map;
    std::unique_ptr<dnnl::stream> stream;
};
PrimitiveCache& primitive_cache() {
    thread_local PrimitiveCache c;
    return c;
}

}  // namespace

class Int8PackedWeight {
public:
    Int8PackedWeight(const int8_t* q, int64_t O, int64_t K) : q_(q, q + O * K), O_(O), K_(K) {}
    const int8_t* q() const { return q_.data(); }
    int64_t out_features() const { return O_; }
    int64_t in_features() const { return K_; }

    /// Output columns [o0, o0 + layout's width) of the weight in `layout`, reordered on first
    /// request (compensation terms included where the layout carries them). A handle
    /// (reference-counted): valid whatever other threads add later.
    dnnl::memory in_layout(const dnnl::memory::desc& layout, int64_t o0, dnnl::stream& stream) const {
        const std::lock_guard<std::mutex> lock(mutex_);
        for (const auto& p : packed_)
            if (p.o0 == o0 && p.layout == layout) return p.memory;
        const dnnl::engine& e = onednn().engine;
        const int64_t width = layout.dims()[1];
        dnnl::memory plain(dnnl::memory::desc({K_, width}, dt::s8, tag::ba), e, const_cast<int8_t*>(q_.data() + o0 * K_));
        dnnl::memory m(layout, e);
        dnnl::reorder(plain, m).execute(stream, plain, m);
        stream.wait();
        packed_.push_back({layout, o0, m});
        return m;
    }

private:
    std::vector<int8_t> q_;  // (O, K) row-major, own copy
    int64_t O_, K_;
    mutable std::mutex mutex_;
    // One per layout oneDNN picks over the row counts seen, and per column block of
    // gemm_int8_nt_blocks (the blocks of one width partition the weight: one more copy in all).
    struct Packed {
        dnnl::memory::desc layout;
        int64_t o0;
        dnnl::memory memory;
    };
    mutable std::vector<Packed> packed_;
};

std::shared_ptr<Int8PackedWeight> make_int8_packed_weight(const int8_t* q, int64_t O, int64_t K) {
    return std::make_shared<Int8PackedWeight>(q, O, K);
}

int int8_activation_max() { return onednn().matmul ? 127 : 63; }

namespace {

/// The u8 copy of x (values + 64, for dnnl_gemm_u8s8s32 on 7-bit activations) in this thread's
/// buffer, or nullptr where oneDNN's s8 kernels take x as it is.
const uint8_t* u8_activations(const int8_t* x, int64_t n) {
    if (onednn().matmul) return nullptr;
    std::vector<uint8_t>& u = u8_buffer();
    if (u.size() < size_t(n)) u.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) u[size_t(i)] = uint8_t(int(x[i]) + 64);
    return u.data();
}

/// acc (N, ob), dense = x · (columns [o0, o0 + ob) of the weight)ᵀ: one oneDNN product with the
/// calling thread's primitives and stream. xu: u8_activations(x) (nullptr where not needed).
void gemm_columns(const int8_t* x, const uint8_t* xu, int64_t N, int64_t K, int64_t o0, int64_t ob,
                  const Int8PackedWeight& w, int32_t* acc) {
    if (!use_matmul()) {
        const int32_t co = 0;
        const int8_t* q = w.q() + o0 * K;
        dnnl_status_t st;
        const char* fn;
        if (!xu) {  // VNNI: s8 activations, exact
            fn = "dnnl_gemm_s8s8s32";
            st = dnnl_gemm_s8s8s32('N', 'T', 'F', N, ob, K, 1.0f, x, K, 0, q, K, 0, 0.0f, acc, ob, &co);
        } else {  // 7-bit activations as u8 in [1, 127], offset 64: no int16 pair sum saturates
            fn = "dnnl_gemm_u8s8s32";
            st = dnnl_gemm_u8s8s32('N', 'T', 'F', N, ob, K, 1.0f, xu, K, 64, q, K, 0, 0.0f, acc, ob, &co);
        }
        QKV_CHECK(st == dnnl_success, "gemm_int8_nt: ", fn, " failed with status ", int(st), " (N=", N, ", O=",
                  w.out_features(), ", K=", K, ")");
        return;
    }
    const Onednn& o = onednn();
    try {
        PrimitiveCache& cache = primitive_cache();
        if (!cache.stream) cache.stream = std::make_unique<dnnl::stream>(o.engine);
        const std::array<int64_t, 3> key{N, K, ob};
        auto it = cache.map.find(key);
        if (it == cache.map.end()) {
            if (cache.map.size() >= 512) cache.map.clear();
            const dnnl::matmul::primitive_desc pd(matmul_desc(N, K, ob, tag::any), o.engine);
            it = cache.map.emplace(key, Primitive{dnnl::matmul(pd), pd.weights_desc()}).first;
        }
        const dnnl::memory wm = w.in_layout(it->second.weights, o0, *cache.stream);
        dnnl::memory xm(dnnl::memory::desc({N, K}, dt::s8, tag::ab), o.engine, const_cast<int8_t*>(x));
        dnnl::memory ym(dnnl::memory::desc({N, ob}, dt::s32, tag::ab), o.engine, acc);
        it->second.matmul.execute(*cache.stream, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}});
        cache.stream->wait();
    } catch (const dnnl::error& e) {
        throw Error(qkv::detail::str("gemm_int8_nt: oneDNN s8 matmul failed: ", e.what(), " (N ", N, ", O ",
                                     w.out_features(), ", K ", K, ")"));
    }
}

void check_sizes(int64_t N, int64_t K, int64_t O, const Int8PackedWeight& w) {
    QKV_CHECK(N >= 1 && K >= 1 && O >= 1 && K == w.in_features() && O == w.out_features(),
              "gemm_int8_nt: bad sizes (N ", N, ", O ", O, ", K ", K, "; the packed weight is (", w.out_features(),
              ", ", w.in_features(), "))");
}

/// y[n, o0 + j] = float(acc[n, j]) · sx[n] · sw[o0 + j] + bias[o0 + j] for j < ob; y has O columns.
void dequantize_block(const int32_t* acc, int64_t n0, int64_t n1, int64_t ob, int64_t o0, int64_t O, const float* sx,
                      const float* sw, const float* bias, float* y) {
    for (int64_t n = n0; n < n1; ++n) {
        const int32_t* a = acc + n * ob;
        float* yr = y + n * O + o0;
        const float s = sx[n];
        const float* ws = sw + o0;
        if (bias) {
            const float* b = bias + o0;
            for (int64_t j = 0; j < ob; ++j) yr[j] = float(a[j]) * s * ws[j] + b[j];
        } else {
            for (int64_t j = 0; j < ob; ++j) yr[j] = float(a[j]) * s * ws[j] + 0.0f;
        }
    }
}

/// The int32 sums of one call or block, per thread, reused across calls.
std::vector<int32_t>& acc_buffer() {
    thread_local std::vector<int32_t> b;
    return b;
}

}  // namespace

void gemm_int8_nt(const int8_t* x, int64_t N, int64_t K, int64_t O, const Int8PackedWeight& w, int32_t* acc) {
    check_sizes(N, K, O, w);
    gemm_columns(x, u8_activations(x, N * K), N, K, 0, O, w, acc);
}

int64_t int8_block_columns(int64_t N, int64_t O, int64_t block_columns) {
    QKV_CHECK(block_columns >= 0, "gemm_int8_nt_blocks: block_columns must be >= 0, got ", block_columns);
    if (block_columns > 0) return std::min(block_columns, O);
    // Sums of up to 1 MB stay in a core's L2 (1 MB on Zen 5, 2 MB on Sapphire/Emerald Rapids);
    // larger ones go in blocks of about 256 KB, a multiple of 64 columns (oneDNN's blocking), up
    // to 256 rows (at least 256 columns a block); beyond that, narrower blocks measured no faster
    // than one product (bench/RESULTS.md, BM_int8_dequant).
    if (N * O <= (int64_t(1) << 18) || N > 256) return O;
    return std::min(O, ((int64_t(1) << 16) / N) / 64 * 64);
}

void gemm_int8_nt_blocks(const int8_t* x, int64_t N, int64_t K, int64_t O, const Int8PackedWeight& w,
                         int64_t block_columns, const Int8BlockEpilogue& epilogue) {
    check_sizes(N, K, O, w);
    const int64_t ob = int8_block_columns(N, O, block_columns);
    const uint8_t* xu = u8_activations(x, N * K);
    std::exception_ptr failed;  // an exception must not leave a parallel region
    std::mutex failed_mu;
    auto guarded = [&](auto&& f) {
        try {
            f();
        } catch (...) {
            const std::lock_guard<std::mutex> lock(failed_mu);
            if (!failed) failed = std::current_exception();
        }
    };
    if (ob == O) {  // one product (oneDNN's own threads), then the rows split over the threads
        std::vector<int32_t>& acc = acc_buffer();
        if (acc.size() < size_t(N * O)) acc.resize(size_t(N * O));
        gemm_columns(x, xu, N, K, 0, O, w, acc.data());
        const int32_t* a = acc.data();
        qkv::detail::parallel_for(N, N * O > (1 << 15), [&](int64_t n) { guarded([&] { epilogue(0, O, n, n + 1, a); }); });
    } else {
        // Blocks split over the threads, each making its block's products on one thread and
        // handing them on while they are in its cache.
        qkv::detail::parallel_for((O + ob - 1) / ob, true, [&](int64_t b) {
            guarded([&] {
                const int64_t o0 = b * ob, width = std::min(ob, O - o0);
                std::vector<int32_t>& acc = acc_buffer();
                if (acc.size() < size_t(N * width)) acc.resize(size_t(N * width));
                gemm_columns(x, xu, N, K, o0, width, w, acc.data());
                epilogue(o0, width, 0, N, acc.data());
            });
        });
    }
    if (failed) std::rethrow_exception(failed);
}

void gemm_int8_nt_dequant(const Int8DequantParams& p) {
    gemm_int8_nt_blocks(p.x, p.N, p.K, p.O, *p.packed, p.block_columns,
                        [&](int64_t o0, int64_t width, int64_t n0, int64_t n1, const int32_t* acc) {
                            dequantize_block(acc, n0, n1, width, o0, p.O, p.sx, p.sw, p.bias, p.y);
                        });
}

Int8GemmPath set_int8_gemm_path(Int8GemmPath p) {
    const Int8GemmPath old = g_path;
    g_path = p;
    return old;
}

bool int8_matmul_available() { return onednn().matmul; }

const char* int8_gemm_path() {
    static std::string matmul, no_matmul;
    static std::once_flag once;
    std::call_once(once, [] {
        const Onednn& o = onednn();
        matmul    = "oneDNN s8 matmul on prepacked weights (" + o.impl + ")";
        no_matmul = "oneDNN dnnl_gemm_u8s8s32, 7-bit activations (" + o.why_not + ")";
    });
    if (use_matmul()) return matmul.c_str();
    if (!onednn().matmul) return no_matmul.c_str();
    return g_path == Int8GemmPath::gemm_api ? "oneDNN dnnl_gemm_s8s8s32 (set_int8_gemm_path)"
                                            : "oneDNN dnnl_gemm_s8s8s32 (VNNI without AMX: no faster as a prepacked matmul)";
}

}  // namespace qkv::kernels::cpu
