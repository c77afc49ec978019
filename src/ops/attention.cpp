// scaled_dot_product_attention: argument checks, backend selection (a filter chain like
// PyTorch's sdp_utils), the math path (composition of differentiable ops) and the flash path
// (fused kernel with its own backward node).
#include "qkv/ops/attention.h"

#include <cmath>
#include <limits>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/flash_attention.h"
#include "kernels/params.h"
#include "kernels/ref/attention.h"
#include "ops/dispatch.h"
#include "ops/valid_lens.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/dropout.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/kernel_mode.h"
#include "qkv/ops/masked_softmax.h"
#include "qkv/ops/matmul.h"
#include "qkv/ops/precision.h"
#include "qkv/ops/shape_ops.h"

namespace qkv {

using detail::ptr;

namespace {

AttentionBackend g_override = AttentionBackend::automatic;

AttentionBackend env_backend() {
    const char* e = std::getenv("QKV_ATTENTION");
    if (!e || !*e) return AttentionBackend::automatic;
    return parse_attention_backend(e);
}

/// Shapes normalised to rank 4.
struct Call {
    Tensor q, k, v;  // (B, H, Tq, D), (B, Hkv, Tk, D), (B, Hkv, Tk, Dv)
    bool rank3 = false;
    int64_t B = 0, H = 0, Hkv = 0, Tq = 0, Tk = 0, D = 0, Dv = 0;
};

Call normalise(const Tensor& q, const Tensor& k, const Tensor& v) {
    QKV_CHECK(q.defined() && k.defined() && v.defined(), "scaled_dot_product_attention: undefined q, k or v");
    QKV_CHECK(q.dim() == k.dim() && q.dim() == v.dim() && (q.dim() == 3 || q.dim() == 4),
              "scaled_dot_product_attention: q, k, v must all be (B, H, T, D) or (B, T, D), got q ",
              q.shape(), ", k ", k.shape(), ", v ", v.shape());
    QKV_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype() && is_floating(q.dtype()),
              "scaled_dot_product_attention: q, k, v must share a float dtype (float32, float64, bfloat16 or float16), got q ",
              dtype_name(q.dtype()), ", k ", dtype_name(k.dtype()), ", v ", dtype_name(v.dtype()));
    Call c;
    c.rank3 = q.dim() == 3;
    c.q = c.rank3 ? q.unsqueeze(1) : q;
    c.k = c.rank3 ? k.unsqueeze(1) : k;
    c.v = c.rank3 ? v.unsqueeze(1) : v;
    c.B = c.q.shape()[0], c.H = c.q.shape()[1], c.Tq = c.q.shape()[2], c.D = c.q.shape()[3];
    c.Hkv = c.k.shape()[1], c.Tk = c.k.shape()[2], c.Dv = c.v.shape()[3];
    QKV_CHECK(c.k.shape()[0] == c.B && c.v.shape()[0] == c.B, "scaled_dot_product_attention: batch sizes "
              "differ: q ", q.shape(), ", k ", k.shape(), ", v ", v.shape());
    QKV_CHECK(c.k.shape()[3] == c.D, "scaled_dot_product_attention: q and k head dims differ: q ", q.shape(),
              ", k ", k.shape());
    QKV_CHECK(c.v.shape()[1] == c.Hkv && c.v.shape()[2] == c.Tk, "scaled_dot_product_attention: k and v "
              "must agree in heads and length: k ", k.shape(), ", v ", v.shape());
    QKV_CHECK(c.Hkv > 0 && c.H % c.Hkv == 0, "scaled_dot_product_attention: key/value heads (", c.Hkv,
              ") must divide query heads (", c.H, ")");
    return c;
}

/// valid_lens as int64 of shape (B) or (B, Tq), clamped to [0, Tk] (NaN throws).
Tensor check_valid_lens(const Call& c, const Tensor& vl) {
    if (!vl.defined()) return vl;
    QKV_CHECK((vl.dim() == 1 && vl.shape()[0] == c.B) || (vl.dim() == 2 && vl.shape()[0] == c.B &&
              vl.shape()[1] == c.Tq), "scaled_dot_product_attention: valid_lens must be (B) = (", c.B,
              ") or (B, Tq) = (", c.B, ", ", c.Tq, "), got ", vl.shape());
    return from_vector(detail::valid_lens_to_int(vl, c.Tk, "scaled_dot_product_attention"), vl.shape());
}

/// Per-row key prefix lengths (B, H, Tq) from valid_lens and causal masking.
Tensor row_lengths(const Call& c, const Tensor& vl, CausalAlign causal) {
    if (!vl.defined() && causal == CausalAlign::none) return Tensor();
    std::vector<int64_t> lens(static_cast<size_t>(c.B * c.H * c.Tq), c.Tk);
    const std::vector<int64_t> v = vl.defined() ? vl.to_vector<int64_t>() : std::vector<int64_t>();
    const int64_t shift = causal == CausalAlign::bottom_right ? c.Tk - c.Tq : 0;
    for (int64_t b = 0; b < c.B; ++b)
        for (int64_t h = 0; h < c.H; ++h)
            for (int64_t i = 0; i < c.Tq; ++i) {
                int64_t len = c.Tk;
                if (vl.defined()) len = vl.dim() == 1 ? v[size_t(b)] : v[size_t(b * c.Tq + i)];
                if (causal != CausalAlign::none) len = std::min(len, i + 1 + shift);
                lens[size_t((b * c.H + h) * c.Tq + i)] = std::clamp<int64_t>(len, 0, c.Tk);
            }
    return from_vector(lens, {c.B, c.H, c.Tq});
}

/// The sliding window as a bool mask (1, 1, Tq, Tk): true where key j lies in query i's window.
Tensor window_mask(const Call& c, const SlidingWindow& w) {
    const int64_t shift = w.align == CausalAlign::bottom_right ? c.Tk - c.Tq : 0;
    std::vector<uint8_t> m(static_cast<size_t>(c.Tq * c.Tk));
    for (int64_t i = 0; i < c.Tq; ++i)
        for (int64_t j = 0; j < c.Tk; ++j) {
            const int64_t d = j - (i + shift);
            m[size_t(i * c.Tk + j)] = (w.left < 0 || d >= -w.left) && (w.right < 0 || d <= w.right);
        }
    Tensor t = Tensor::empty({1, 1, c.Tq, c.Tk}, DType::b8);
    std::copy(m.begin(), m.end(), ptr<uint8_t>(t));
    return t;
}

/// ALiBi's bias (1, H, Tq, Tk) in `dtype`: −m_h · |i + Tk − Tq − j|.
Tensor alibi_bias(const Call& c, const Tensor& slopes, DType dtype) {
    const auto m = slopes.to(DType::f64).contiguous().to_vector<double>();
    std::vector<double> b(static_cast<size_t>(c.H * c.Tq * c.Tk));
    for (int64_t h = 0; h < c.H; ++h)
        for (int64_t i = 0; i < c.Tq; ++i)
            for (int64_t j = 0; j < c.Tk; ++j)
                b[size_t((h * c.Tq + i) * c.Tk + j)] = -m[size_t(h)] * double(std::abs(i + c.Tk - c.Tq - j));
    return from_vector(b, {1, c.H, c.Tq, c.Tk}).to(dtype);
}

/// Where x (B, Hk, Tk, X) holds a NaN or an infinity, b8: per row (B, Hk, Tk, 1) or per element
/// (x's shape); undefined when every value is finite (the usual case, found in one pass).
Tensor nonfinite(const Tensor& x, bool per_row) {
    const int64_t X = x.size(-1), rows = X > 0 ? x.numel() / X : 0;
    std::vector<bool> bad(static_cast<size_t>(per_row ? rows : x.numel()), false);
    bool any = false;
    auto scan = [&](const auto& vals) {
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t e = 0; e < X; ++e)
                if (!std::isfinite(double(vals[size_t(r * X + e)]))) bad[size_t(per_row ? r : r * X + e)] = any = true;
    };
    if (x.dtype() == DType::f32) scan(x.contiguous().to_vector<float>());
    else scan(x.contiguous().to(DType::f64).to_vector<double>());
    if (!any) return Tensor();
    Shape s = x.shape();
    if (per_row) s.back() = 1;
    return from_vector<bool>(bad, s);
}

Tensor math_attention(const Call& c, const Tensor& vl, const AttentionMask& mask, const AttentionOptions& opt,
                      double scale, Tensor* weights) {
    Tensor k = c.k, v = c.v;
    // A key or value row that the masks hide is never read (ops/attention.h): non-finite rows enter
    // the products as 0, then a seen non-finite key makes its scores NaN and a seen non-finite value
    // makes the outputs that read it NaN.
    Tensor kbad = nonfinite(k, true), vbad = nonfinite(v, false);
    if (kbad.defined()) k = masked_fill(k, kbad, 0.0);
    if (vbad.defined()) v = masked_fill(v, vbad, 0.0);
    if (c.Hkv != c.H) {
        k = repeat_interleave(k, c.H / c.Hkv, 1);
        v = repeat_interleave(v, c.H / c.Hkv, 1);
        if (kbad.defined()) kbad = repeat_interleave(kbad, c.H / c.Hkv, 1);
        if (vbad.defined()) vbad = repeat_interleave(vbad, c.H / c.Hkv, 1);
    }
    Tensor scores = mul(matmul(c.q, k.transpose(-1, -2)), scale);  // (B, H, Tq, Tk)
    if (kbad.defined()) scores = masked_fill(scores, kbad.transpose(-1, -2), NAN);
    if (opt.softcap > 0) scores = mul(tanh(mul(scores, 1.0 / opt.softcap)), opt.softcap);
    if (opt.alibi_slopes.defined()) scores = add(scores, alibi_bias(c, opt.alibi_slopes, scores.dtype()));
    if (mask.mask.defined()) {
        Tensor m = mask.mask;
        if (c.rank3 && m.dim() == 3) m = m.unsqueeze(1);
        if (m.dtype() == DType::b8) {
            scores = masked_fill(scores, logical_not(m), -INFINITY);
        } else {
            QKV_CHECK(m.dtype() == scores.dtype(), "scaled_dot_product_attention: additive mask dtype ",
                      dtype_name(m.dtype()), " differs from q's ", dtype_name(scores.dtype()));
            scores = masked_fill(add(scores, m), eq(m, from_vector(std::vector<double>{-INFINITY}, {1}).to(m.dtype())),
                                 -INFINITY);  // -inf hides a NaN score too
        }
    }
    if (mask.window.active()) scores = masked_fill(scores, logical_not(window_mask(c, mask.window)), -INFINITY);
    Tensor w = masked_softmax_rows(scores, row_lengths(c, vl, mask.causal));
    if (weights) *weights = c.rank3 ? w.squeeze(1) : w;
    Tensor wd = opt.training && opt.dropout > 0 ? dropout(w, opt.dropout, true, opt.gen) : w;
    Tensor out = matmul(wd, v);
    if (vbad.defined()) {
        // (B, H, Tq, Dv): the outputs that read a non-finite value with a nonzero weight.
        const Tensor zero = from_vector(std::vector<double>{0.0}, {1}).to(wd.dtype());
        const Tensor seen = matmul(lt(zero, wd.detach()).to(wd.dtype()), vbad.to(wd.dtype()));
        out = masked_fill(out, lt(zero, seen), NAN);
    }
    return out;
}

// ---- the flash path ----

using FlashFilter = bool (*)(const Call&, const AttentionMask&, const AttentionOptions&, bool, std::string*);

bool note(std::string* why, const char* msg) {
    if (why) *why += std::string(msg) + "\n";
    return false;
}
bool check_dtype_f32(const Call& c, const AttentionMask&, const AttentionOptions&, bool, std::string* why) {
    return c.q.dtype() == DType::f32 || note(why, "flash: inputs are not float32 (float64 uses the math path)");
}
bool check_no_weights(const Call&, const AttentionMask&, const AttentionOptions&, bool need, std::string* why) {
    return !need || note(why, "flash: attention weights were requested (the fused kernel never forms them)");
}
bool check_kernel_mode(const Call&, const AttentionMask&, const AttentionOptions&, bool, std::string* why) {
    return kernel_mode() == KernelMode::fast || note(why, "flash: QKV_KERNELS=ref selects reference kernels");
}
bool check_head_dim(const Call& c, const AttentionMask&, const AttentionOptions&, bool, std::string* why) {
    if (c.D >= 1 && c.D <= 256 && c.Dv >= 1 && c.Dv <= 256) return true;
    // The width names the model's flags: a Transformer's head width is num_hiddens / num_heads.
    return note(why, detail::str("flash: head dims must be in 1..256, got ", c.D, " (queries and keys) and ", c.Dv,
                                 " (values); a Transformer's head width is num_hiddens / num_heads (--num-hiddens, "
                                 "--num-heads), or leave the backend to auto / math")
                         .c_str());
}
bool check_mask_kind(const Call&, const AttentionMask& m, const AttentionOptions&, bool, std::string* why) {
    return !m.mask.defined() || m.mask.dim() <= 4 || note(why, "flash: mask has more than 4 dims");
}
constexpr FlashFilter kFlashFilters[] = {check_dtype_f32, check_no_weights, check_kernel_mode,
                                         check_head_dim, check_mask_kind};

bool use_flash(const Call& c, const AttentionMask& m, const AttentionOptions& o, bool need, std::string* why) {
    bool ok = true;
    for (FlashFilter f : kFlashFilters) ok = f(c, m, o, need, why) && ok;
    return ok;
}

/// A view whose last dim is contiguous (copy otherwise).
Tensor last_dim_contiguous(const Tensor& t) { return t.strides().back() == 1 ? t : t.contiguous(); }

/// A fresh float32 (B, H, T, D) tensor laid out as x is when x is (B, T, H, D) memory seen
/// through a permute (the head split), else contiguous. The last dim is always contiguous.
Tensor empty_like_layout(const Tensor& x) {
    const Shape& sh = x.shape();
    const Shape& st = x.strides();
    const bool split_heads = st[3] == 1 && st[1] == sh[3] && st[2] == sh[1] * sh[3] && st[0] == sh[2] * st[2];
    if (split_heads && sh[1] > 1 && sh[2] > 1)
        return Tensor::empty({sh[0], sh[2], sh[1], sh[3]}, DType::f32).permute({0, 2, 1, 3});
    return Tensor::empty(sh, DType::f32);
}

struct FlashSaved {
    Tensor q, k, v, out, lse, valid_lens, mask, alibi;
    kernels::AttentionParams<float> p;
};

void fill_params(kernels::AttentionParams<float>& p, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& out, const Tensor& lse, const Tensor& vl, const AttentionMask& mask,
                 const Tensor& mk, double scale) {
    p.q = ptr<float>(q), p.k = ptr<float>(k), p.v = ptr<float>(v), p.out = ptr<float>(out);
    p.lse = ptr<float>(lse);
    p.B = q.shape()[0], p.H = q.shape()[1], p.Tq = q.shape()[2], p.D = q.shape()[3];
    p.Hkv = k.shape()[1], p.Tk = k.shape()[2], p.Dv = v.shape()[3];
    p.q_stride_b = q.strides()[0], p.q_stride_h = q.strides()[1], p.q_stride_t = q.strides()[2];
    p.k_stride_b = k.strides()[0], p.k_stride_h = k.strides()[1], p.k_stride_t = k.strides()[2];
    p.v_stride_b = v.strides()[0], p.v_stride_h = v.strides()[1], p.v_stride_t = v.strides()[2];
    p.o_stride_b = out.strides()[0], p.o_stride_h = out.strides()[1], p.o_stride_t = out.strides()[2];
    if (vl.defined()) {
        p.valid_lens = ptr<int64_t>(vl);
        p.valid_lens_rank = int(vl.dim());
    }
    p.causal = mask.causal == CausalAlign::none       ? kernels::CausalAlign::none
               : mask.causal == CausalAlign::top_left ? kernels::CausalAlign::top_left
                                                      : kernels::CausalAlign::bottom_right;
    if (mk.defined()) {
        if (mk.dtype() == DType::b8) p.bool_mask = ptr<uint8_t>(mk);
        else p.additive_mask = ptr<float>(mk);
        p.m_stride_b = mk.strides()[0], p.m_stride_h = mk.strides()[1];
        p.m_stride_q = mk.strides()[2], p.m_stride_k = mk.strides()[3];
    }
    if (mask.window.active()) {
        p.window_left  = mask.window.left;
        p.window_right = mask.window.right;
        p.window_shift = mask.window.align == CausalAlign::bottom_right ? p.Tk - p.Tq : 0;
    }
    p.scale = float(scale);
}

Tensor flash_attention(const Call& c, const Tensor& vl, const AttentionMask& mask, const AttentionOptions& opt,
                       double scale) {
    auto s = std::make_shared<FlashSaved>();
    // bf16 compute (ops/precision.h): the kernel rounds q, k, v, dO, P and dS into its workspace
    // (kernels/params.h: AttentionParams::bf16). Read here: the setting is thread-local.
    const bool bf16 = matmul_precision() == MatmulPrecision::bf16;
    s->q = last_dim_contiguous(c.q.detach());
    s->k = last_dim_contiguous(c.k.detach());
    s->v = last_dim_contiguous(c.v.detach());
    s->valid_lens = vl;
    if (mask.mask.defined()) {
        Tensor m = mask.mask;
        if (c.rank3 && m.dim() == 3) m = m.unsqueeze(1);
        QKV_CHECK(m.dtype() == DType::b8 || m.dtype() == DType::f32, "scaled_dot_product_attention: mask "
                  "must be bool or float32, got ", dtype_name(m.dtype()));
        s->mask = m.detach().expand({c.B, c.H, c.Tq, c.Tk});  // broadcast by stride 0, no copy
    }
    // out is (B, H, Tq, Dv) over (B, Tq, H, Dv) memory (as PyTorch's CPU flash attention lays it
    // out): merging the heads back, (B, Tq, H * Dv), is then a view, and the gradient arriving
    // through that merge has out's strides (no copy on either side).
    Tensor out = Tensor::empty({c.B, c.Tq, c.H, c.Dv}, DType::f32).permute({0, 2, 1, 3});
    Tensor lse = Tensor::empty({c.B, c.H, c.Tq}, DType::f32);
    fill_params(s->p, s->q, s->k, s->v, out, lse, vl, mask, s->mask, scale);
    s->p.softcap = float(opt.softcap);
    s->p.bf16    = bf16;
    if (opt.alibi_slopes.defined()) {
        s->alibi          = opt.alibi_slopes.to(DType::f32).contiguous();
        s->p.alibi_slopes = ptr<float>(s->alibi);
    }
    if (opt.training && opt.dropout > 0) {
        QKV_CHECK(opt.dropout < 1, "scaled_dot_product_attention: dropout must be in [0, 1), got ", opt.dropout);
        Generator& g = opt.gen ? *opt.gen : default_generator();
        s->p.dropout_p = float(opt.dropout);
        s->p.dropout_seed = g.seed();
        s->p.dropout_offset = g.reserve(uint64_t(c.B * c.H * c.Tq * c.Tk));
    }
    kernels::cpu::flash_attention_forward(s->p);
    s->out = out.detach();
    s->lse = lse;
    record(out, "FlashAttentionBackward", {c.q, c.k, c.v}, [s](const Tensor& g) {
        Tensor dout = last_dim_contiguous(g);
        // Each gradient in its input's layout: q, k, v split from (B, T, H, D) rows give dq, dk,
        // dv that the head split's backward reshapes without a copy.
        Tensor dq = empty_like_layout(s->q), dk = empty_like_layout(s->k), dv = empty_like_layout(s->v);
        kernels::AttentionParams<float> p = s->p;
        // dout may have other strides than out: the kernel reads dout with o_stride_*, so copy
        // it into out's layout.
        bool same = true;  // strides of size-1 dims are never used
        for (size_t d = 0; d < 4; ++d)
            same = same && (dout.shape()[d] == 1 || dout.strides()[d] == s->out.strides()[d]);
        if (!same) dout = dout.permute({0, 2, 1, 3}).contiguous().permute({0, 2, 1, 3});
        kernels::AttentionGradParams<float> gp;
        gp.dout = ptr<float>(dout), gp.dq = ptr<float>(dq), gp.dk = ptr<float>(dk), gp.dv = ptr<float>(dv);
        gp.dq_stride_b = dq.strides()[0], gp.dq_stride_h = dq.strides()[1], gp.dq_stride_t = dq.strides()[2];
        gp.dk_stride_b = dk.strides()[0], gp.dk_stride_h = dk.strides()[1], gp.dk_stride_t = dk.strides()[2];
        gp.dv_stride_b = dv.strides()[0], gp.dv_stride_h = dv.strides()[1], gp.dv_stride_t = dv.strides()[2];
        kernels::cpu::flash_attention_backward(p, gp);
        return std::vector<Tensor>{dq, dk, dv};
    });
    return out;
}

}  // namespace

Tensor varlen_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                        const Tensor& cu_seqlens_k, const AttentionMask& mask, const AttentionOptions& opt) {
    QKV_CHECK(q.defined() && k.defined() && v.defined() && q.dim() == 3 && k.dim() == 3 && v.dim() == 3,
              "varlen_attention: q, k, v must be packed (N, H, D), got q ", q.defined() ? q.shape() : Shape{}, ", k ",
              k.defined() ? k.shape() : Shape{}, ", v ", v.defined() ? v.shape() : Shape{});
    QKV_CHECK(!mask.valid_lens.defined() && !mask.mask.defined(), "varlen_attention: valid_lens and mask tensors do not "
              "apply (the offsets are the lengths); causal and window do");
    auto offsets = [](const Tensor& cu, int64_t n, const char* name) {
        QKV_CHECK(cu.defined() && cu.dim() == 1 && cu.dtype() == DType::i64 && cu.size(0) >= 2, "varlen_attention: ",
                  name, " must be int64 (B + 1) with B >= 1, got ", cu.defined() ? cu.shape() : Shape{});
        const auto o = cu.contiguous().to_vector<int64_t>();
        QKV_CHECK(o.front() == 0 && o.back() == n, "varlen_attention: ", name, " must start at 0 and end at ", n,
                  " (the packed rows), got ", o.front(), " ... ", o.back());
        for (size_t b = 1; b < o.size(); ++b)
            QKV_CHECK(o[b] >= o[b - 1], "varlen_attention: ", name, " decreases at ", b, " (", o[b - 1], " then ", o[b],
                      ")");
        return o;
    };
    const auto oq = offsets(cu_seqlens_q, q.size(0), "cu_seqlens_q");
    const auto ok = offsets(cu_seqlens_k, k.size(0), "cu_seqlens_k");
    QKV_CHECK(oq.size() == ok.size(), "varlen_attention: cu_seqlens_q and cu_seqlens_k hold different batch sizes (",
              oq.size() - 1, " and ", ok.size() - 1, ")");
    QKV_CHECK(k.size(0) == v.size(0), "varlen_attention: k and v must have the same rows, got ", k.shape(), " and ",
              v.shape());
    // Each sequence as a batch of one, (1, H, T, D) views of the packed rows (last dim contiguous
    // when the packed tensor is, so the flash kernel reads them in place).
    auto view = [](const Tensor& x, int64_t a, int64_t b) { return x.slice(0, a, b).unsqueeze(0).transpose(1, 2); };
    std::vector<Tensor> outs;
    for (size_t b = 0; b + 1 < oq.size(); ++b) {
        const Tensor o = scaled_dot_product_attention(view(q, oq[b], oq[b + 1]), view(k, ok[b], ok[b + 1]),
                                                      view(v, ok[b], ok[b + 1]), mask, opt);
        outs.push_back(o.transpose(1, 2).squeeze(0));  // (T_b, H, Dv)
    }
    return concat(outs, 0);
}

Tensor alibi_slopes(int64_t num_heads) {
    QKV_CHECK(num_heads >= 1, "alibi_slopes: num_heads must be >= 1, got ", num_heads);
    auto power_of_two = [](int64_t n) {  // 2^(-8 (i + 1) / n), i = 0..n-1
        std::vector<double> s;
        for (int64_t i = 0; i < n; ++i) s.push_back(std::exp2(-8.0 * double(i + 1) / double(n)));
        return s;
    };
    int64_t closest = 1;
    while (closest * 2 <= num_heads) closest *= 2;
    std::vector<double> s = power_of_two(closest);
    const std::vector<double> extra = power_of_two(2 * closest);
    for (int64_t i = 0; int64_t(s.size()) < num_heads; i += 2) s.push_back(extra[size_t(i)]);
    return from_vector(s, {num_heads}).to(DType::f32);
}

AttentionBackend parse_attention_backend(const std::string& s) {
    if (s == "auto" || s == "automatic") return AttentionBackend::automatic;
    if (s == "math") return AttentionBackend::math;
    if (s == "flash") return AttentionBackend::flash;
    throw Error("attention backend must be auto, math or flash, got '" + s + "'");
}

void set_attention_backend(AttentionBackend b) { g_override = b; }
AttentionBackend attention_backend_override() { return g_override; }
AttentionBackend default_attention_backend() {
    return g_override != AttentionBackend::automatic ? g_override : env_backend();
}

AttentionBackend select_attention_backend(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const AttentionMask& mask, const AttentionOptions& opt,
                                          bool need_weights, std::string* why) {
    const Call c = normalise(q, k, v);
    return use_flash(c, mask, opt, need_weights, why) ? AttentionBackend::flash : AttentionBackend::math;
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                                    const AttentionOptions& opt, Tensor* weights) {
    if (q.defined() && k.defined() && v.defined() &&
        (is_half_storage(q.dtype()) || is_half_storage(k.dtype()) || is_half_storage(v.dtype()))) {
        QKV_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(),
                  "scaled_dot_product_attention: q, k, v must share a dtype, got ", dtype_name(q.dtype()), ", ",
                  dtype_name(k.dtype()), ", ", dtype_name(v.dtype()));
        // bf16 / f16 storage: exact float32 values, the output rounded back (header). bf16 computes
        // its products in bf16 (as PyTorch's bf16 attention); f16 computes in fp32 whatever the
        // thread's matmul precision: rounding its 11-bit operands to bf16 would lose 3 bits, and
        // fp32 logits cannot overflow where half arithmetic would (q·k beyond 65504).
        const DType half = q.dtype();
        AttentionMask m = mask;
        if (m.mask.defined() && is_half_storage(m.mask.dtype())) m.mask = m.mask.to(DType::f32);
        const MatmulPrecisionGuard precision(half == DType::bf16 ? MatmulPrecision::bf16 : MatmulPrecision::fp32);
        return scaled_dot_product_attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), m, opt, weights)
            .to(half);
    }
    const Call c = normalise(q, k, v);
    QKV_CHECK(opt.dropout >= 0 && opt.dropout < 1, "scaled_dot_product_attention: dropout must be in [0, 1), got ",
              opt.dropout);
    const Tensor vl = check_valid_lens(c, mask.valid_lens);
    QKV_CHECK(mask.window.left >= -1 && mask.window.right >= -1, "scaled_dot_product_attention: window (left, right) "
              "must be >= 0 (or -1: unbounded), got (", mask.window.left, ", ", mask.window.right, ")");
    if (mask.mask.defined()) {
        Shape full4{c.B, c.H, c.Tq, c.Tk};
        Shape ms = mask.mask.shape();
        if (c.rank3 && ms.size() == 3) ms.insert(ms.begin() + 1, 1);
        QKV_CHECK(broadcasts_to(ms, full4),
                  "scaled_dot_product_attention: mask of shape ", mask.mask.shape(), " does not broadcast to ",
                  full4);
    }
    QKV_CHECK(std::isfinite(opt.softcap) && opt.softcap >= 0 && opt.softcap <= double(std::numeric_limits<float>::max()),
              "scaled_dot_product_attention: softcap must be finite and >= 0 (0: off), got ", opt.softcap);
    if (opt.alibi_slopes.defined()) {
        QKV_CHECK(opt.alibi_slopes.dim() == 1 && opt.alibi_slopes.shape()[0] == c.H &&
                      is_floating(opt.alibi_slopes.dtype()),
                  "scaled_dot_product_attention: alibi_slopes must be a float (H) = (", c.H, ") tensor, got ",
                  opt.alibi_slopes.shape(), " ", dtype_name(opt.alibi_slopes.dtype()));
        for (double m : opt.alibi_slopes.to(DType::f64).contiguous().to_vector<double>())
            QKV_CHECK(std::isfinite(m), "scaled_dot_product_attention: alibi_slopes must be finite, got ", m);
    }
    QKV_CHECK(std::isfinite(opt.scale) && std::abs(opt.scale) <= double(std::numeric_limits<float>::max()),
              "scaled_dot_product_attention: scale must be finite and within float range (0 means "
              "1/sqrt(D)), got ", opt.scale);
    const double scale = opt.scale != 0 ? opt.scale : 1.0 / std::sqrt(double(c.D));
    AttentionBackend want = opt.backend;
    if (want == AttentionBackend::automatic) want = default_attention_backend();
    Tensor out;
    if (want == AttentionBackend::math || weights) {
        QKV_CHECK(want != AttentionBackend::flash || !weights, "scaled_dot_product_attention: the flash "
                  "backend was forced but attention weights were requested");
        out = math_attention(c, vl, mask, opt, scale, weights);
    } else {
        std::string why;
        const bool ok = use_flash(c, mask, opt, weights != nullptr, &why);
        QKV_CHECK(ok || want != AttentionBackend::flash, "scaled_dot_product_attention: the flash backend "
                  "was forced but cannot run:\n", why);
        out = ok ? flash_attention(c, vl, mask, opt, scale) : math_attention(c, vl, mask, opt, scale, nullptr);
    }
    return c.rank3 ? out.squeeze(1) : out;
}

}  // namespace qkv
