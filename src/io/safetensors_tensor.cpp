// Tensor adapters for safetensors (io/safetensors.h). Kept in their own file so the byte-level
// code links without the Tensor implementation.
#include <cstring>

#include "qkv/core/tensor.h"
#include "qkv/io/safetensors.h"

namespace qkv::io {
namespace {

const char* st_dtype(DType t) {
    switch (t) {
        case DType::f32: return "F32";
        case DType::f64: return "F64";
        case DType::i64: return "I64";
        case DType::b8: return "BOOL";
        case DType::bf16: return "BF16";
        case DType::f16: return "F16";
    }
    return "?";
}

}  // namespace

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
    std::vector<Tensor> keep;  // contiguous copies must outlive the write
    std::vector<SafeTensorView> views;
    keep.reserve(tensors.size());
    for (const auto& [name, t] : tensors) {
        QKV_CHECK(t.defined(), "save_safetensors: '", path, "': tensor '", name, "' is undefined");
        keep.push_back(t.contiguous());
        const Tensor& c = keep.back();
        views.push_back({name, st_dtype(c.dtype()), c.shape(), c.numel() ? c.raw_data() : nullptr,
                         size_t(c.numel() * dtype_size(c.dtype()))});
    }
    write_safetensors(path, views, metadata);
}

std::map<std::string, Tensor> load_safetensors(const std::string& path, DType bf16_as, DType f16_as) {
    QKV_CHECK(bf16_as == DType::f32 || bf16_as == DType::bf16, "load_safetensors: '", path,
              "': bf16_as must be float32 or bfloat16, got ", dtype_name(bf16_as));
    QKV_CHECK(f16_as == DType::f32 || f16_as == DType::f16, "load_safetensors: '", path,
              "': f16_as must be float32 or float16, got ", dtype_name(f16_as));
    const SafeTensorsFile f(path);
    std::map<std::string, Tensor> out;
    for (const SafeTensorInfo& e : f.entries()) {
        const auto bytes = f.bytes(e.name);
        const int64_t n  = e.numel();
        Tensor t;
        if (e.dtype == "F32" || e.dtype == "F64" || e.dtype == "I64") {
            const DType dt = e.dtype == "F32" ? DType::f32 : e.dtype == "F64" ? DType::f64 : DType::i64;
            t = Tensor::empty(e.shape, dt);
            if (n) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
        } else if (e.dtype == "BOOL") {
            t = Tensor::empty(e.shape, DType::b8);
            bool* d = t.data<bool>();
            for (int64_t i = 0; i < n; ++i) d[i] = bytes[size_t(i)] != 0;
        } else if ((e.dtype == "BF16" && bf16_as == DType::bf16) || (e.dtype == "F16" && f16_as == DType::f16)) {
            t = Tensor::empty(e.shape, e.dtype == "F16" ? DType::f16 : DType::bf16);
            if (n) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
        } else if (e.dtype == "F16") {
            // Every float16 is a float32: widening is exact (through the F16C conversion of copy_).
            Tensor h = Tensor::empty(e.shape, DType::f16);
            if (n) std::memcpy(h.raw_data(), bytes.data(), bytes.size());
            t = h.to(DType::f32);
        } else if (e.dtype == "BF16") {
            // bfloat16 is the top half of an IEEE float32: widening is exact.
            t = Tensor::empty(e.shape, DType::f32);
            float* d = t.data<float>();
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, bytes.data() + 2 * i, 2);
                const uint32_t u = uint32_t(h) << 16;
                std::memcpy(d + i, &u, 4);
            }
        } else {
            throw Error(detail::str("load_safetensors: '", path, "': tensor '", e.name,
                                    "' has dtype ", e.dtype,
                                    ", which qkv cannot load (F32, F64, I64, BOOL, BF16, F16)"));
        }
        out.emplace(e.name, std::move(t));
    }
    return out;
}

}  // namespace qkv::io
