// embedding op: row gather forward; backward scatter-adds rows of dy into a dense dW in index
// order (deterministic). fp32 in KernelMode::fast runs kernels::cpu::embedding_backward (zeroing
// and scatter-add split over the threads by columns, bit-identical to this file's loop); the
// rest runs the single-threaded loop here.
#include "qkv/ops/embedding.h"

#include <cstring>

#include "kernels/cpu/embedding.h"
#include "ops/dispatch.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/kernel_mode.h"

namespace qkv {

using detail::ptr;

Tensor embedding(const Tensor& ids, const Tensor& weight) {
    QKV_CHECK(ids.defined() && ids.dtype() == DType::i64, "embedding: ids must be int64, got ",
              ids.defined() ? dtype_name(ids.dtype()) : "undefined");
    QKV_CHECK(weight.defined() && weight.dim() == 2, "embedding: weight must be (V, C), got ",
              weight.defined() ? weight.shape() : Shape{});
    const int64_t V = weight.shape()[0], C = weight.shape()[1];
    const Tensor ic = ids.contiguous();
    const int64_t n = ic.numel();
    const int64_t* pi = ptr<int64_t>(ic);
    for (int64_t i = 0; i < n; ++i)
        QKV_CHECK(pi[i] >= 0 && pi[i] < V, "embedding: id ", pi[i], " at position ", i,
                  " is out of range for a vocabulary of ", V, " (ids shape ", ids.shape(), ")");
    const Tensor wc = weight.detach().contiguous();
    Shape out_shape = ids.shape();
    out_shape.push_back(C);
    Tensor out = Tensor::empty(out_shape, weight.dtype());
    const int64_t row_bytes = C * dtype_size(weight.dtype());
    const char* pw = static_cast<const char*>(wc.raw_data());
    char* po = static_cast<char*>(out.raw_data());
#pragma omp parallel for if (n * C > 65536) schedule(static)
    for (int64_t i = 0; i < n; ++i) std::memcpy(po + i * row_bytes, pw + pi[i] * row_bytes, size_t(row_bytes));
    record(out, "EmbeddingBackward", {ids, weight}, [ic, V, C](const Tensor& g) {
        const Tensor gc = g.contiguous();
        const int64_t* ip = ptr<int64_t>(ic);
        if (g.dtype() == DType::f32 && kernel_mode() == KernelMode::fast) {
            // The anchor's 17,496 × 256 target table: zeroing its gradient alone took ~1 % of a
            // training step on one thread.
            Tensor dw = Tensor::empty({V, C}, DType::f32);
            kernels::cpu::embedding_backward(ptr<float>(dw), ptr<float>(gc), ip, ic.numel(), V, C);
            return std::vector<Tensor>{Tensor(), dw};
        }
        Tensor dw = zeros({V, C}, g.dtype());
        QKV_DISPATCH_FLOAT(g.dtype(), "embedding_backward", {
            const scalar_t* pg = ptr<scalar_t>(gc);
            scalar_t* pd = ptr<scalar_t>(dw);
            for (int64_t i = 0, n_ids = ic.numel(); i < n_ids; ++i) {
                scalar_t* row = pd + ip[i] * C;
                const scalar_t* src = pg + i * C;
                for (int64_t j = 0; j < C; ++j) row[j] += src[j];
            }
        });
        return std::vector<Tensor>{Tensor(), dw};
    });
    return out;
}

}  // namespace qkv
