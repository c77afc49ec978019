// int8 GEMM (kernels/cpu/gemm_int8.h): oneDNN's s8 matmul on prepacked weights, or its GEMM API
// on the plain weight (s8s8s32 with VNNI, u8s8s32 on 7-bit activations without).
#include "kernels/cpu/gemm_int8.h"

#include <dnnl.h>

#include <array>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <utility>
#include <vector>

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

    /// The weight in `layout`, reordered on first request (compensation terms included where the
    /// layout carries them). A handle (reference-counted): valid whatever other threads add later.
    dnnl::memory in_layout(const dnnl::memory::desc& layout, dnnl::stream& stream) const {
        const std::lock_guard<std::mutex> lock(mutex_);
        for (const auto& [d, m] : packed_)
            if (d == layout) return m;
        const dnnl::engine& e = onednn().engine;
        dnnl::memory plain(dnnl::memory::desc({K_, O_}, dt::s8, tag::ba), e, const_cast<int8_t*>(q_.data()));
        dnnl::memory m(layout, e);
        dnnl::reorder(plain, m).execute(stream, plain, m);
        stream.wait();
        packed_.emplace_back(layout, m);
        return m;
    }

private:
    std::vector<int8_t> q_;  // (O, K) row-major, own copy
    int64_t O_, K_;
    mutable std::mutex mutex_;
    // A handful at most: one per layout oneDNN picks over the row counts seen.
    mutable std::vector<std::pair<dnnl::memory::desc, dnnl::memory>> packed_;
};

std::shared_ptr<Int8PackedWeight> make_int8_packed_weight(const int8_t* q, int64_t O, int64_t K) {
    return std::make_shared<Int8PackedWeight>(q, O, K);
}

int int8_activation_max() { return onednn().matmul ? 127 : 63; }

void gemm_int8_nt(const int8_t* x, int64_t N, int64_t K, int64_t O, const Int8PackedWeight& w, int32_t* acc) {
    QKV_CHECK(N >= 1 && K >= 1 && O >= 1 && K == w.in_features() && O == w.out_features(),
              "gemm_int8_nt: bad sizes (N ", N, ", O ", O, ", K ", K, "; the packed weight is (", w.out_features(),
              ", ", w.in_features(), "))");
    if (!use_matmul()) {
        const int32_t co = 0;
        dnnl_status_t st;
        const char* fn;
        if (onednn().matmul) {  // VNNI: s8 activations, exact
            fn = "dnnl_gemm_s8s8s32";
            st = dnnl_gemm_s8s8s32('N', 'T', 'F', N, O, K, 1.0f, x, K, 0, w.q(), K, 0, 0.0f, acc, O, &co);
        } else {  // 7-bit activations as u8 in [1, 127], offset 64: no int16 pair sum saturates
            fn = "dnnl_gemm_u8s8s32";
            std::vector<uint8_t>& u = u8_buffer();
            if (u.size() < size_t(N * K)) u.resize(size_t(N * K));
            for (int64_t i = 0; i < N * K; ++i) u[size_t(i)] = uint8_t(int(x[i]) + 64);
            st = dnnl_gemm_u8s8s32('N', 'T', 'F', N, O, K, 1.0f, u.data(), K, 64, w.q(), K, 0, 0.0f, acc, O, &co);
        }
        QKV_CHECK(st == dnnl_success, "gemm_int8_nt: ", fn, " failed with status ", int(st), " (N=", N, ", O=", O,
                  ", K=", K, ")");
        return;
    }
    const Onednn& o = onednn();
    try {
        PrimitiveCache& cache = primitive_cache();
        if (!cache.stream) cache.stream = std::make_unique<dnnl::stream>(o.engine);
        const std::array<int64_t, 3> key{N, K, O};
        auto it = cache.map.find(key);
        if (it == cache.map.end()) {
            if (cache.map.size() >= 512) cache.map.clear();
            const dnnl::matmul::primitive_desc pd(matmul_desc(N, K, O, tag::any), o.engine);
            it = cache.map.emplace(key, Primitive{dnnl::matmul(pd), pd.weights_desc()}).first;
        }
        const dnnl::memory wm = w.in_layout(it->second.weights, *cache.stream);
        dnnl::memory xm(dnnl::memory::desc({N, K}, dt::s8, tag::ab), o.engine, const_cast<int8_t*>(x));
        dnnl::memory ym(dnnl::memory::desc({N, O}, dt::s32, tag::ab), o.engine, acc);
        it->second.matmul.execute(*cache.stream, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}});
        cache.stream->wait();
    } catch (const dnnl::error& e) {
        throw Error(qkv::detail::str("gemm_int8_nt: oneDNN s8 matmul failed: ", e.what(), " (N ", N, ", O ", O,
                                     ", K ", K, ")"));
    }
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
