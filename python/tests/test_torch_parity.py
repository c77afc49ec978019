# PyTorch parity where python3-torch is installed (skipped cleanly otherwise): scaled dot-product
# attention and MultiHeadAttention with the same weights give PyTorch's outputs and gradients.
import numpy as np
import pytest

import qkv

torch = pytest.importorskip("torch")

# float64 on both sides: differently ordered sums of O(1) values agree to ~1e-14; 1e-10 catches
# any real difference.
TOL64 = dict(rtol=1e-10, atol=1e-10)


def test_sdpa_matches_torch_math_composition():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    w = torch.softmax(tq @ tk.transpose(-1, -2) / 2.0, -1)
    ref = w @ tv
    ref.sum().backward()
    xq, xk, xv = (qkv.tensor(x, requires_grad=True) for x in (q, k, v))
    out = qkv.scaled_dot_product_attention(xq, xk, xv)
    out.sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), **TOL64)
    for a, b in ((xq, tq), (xk, tk), (xv, tv)):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), **TOL64)


def test_dlpack_with_torch():
    t = qkv.ones(2, 3)
    pt = torch.from_dlpack(t)
    assert pt.data_ptr() == t.data_ptr()
    back = qkv.from_dlpack(pt)
    assert back.data_ptr() == pt.data_ptr()


def test_dlpack_bfloat16_with_torch():
    x = torch.tensor([[1.0, 1.0 + 3 / 256, -0.0], [float("inf"), float("nan"), 3.4e38]])
    t = qkv.tensor(x.numpy()).to("bfloat16")
    pt = torch.from_dlpack(t)
    assert pt.dtype == torch.bfloat16 and pt.data_ptr() == t.data_ptr()
    # qkv's conversion rounds as torch's does (RNE, overflow to inf, -0 kept), bit for bit; NaN
    # stays NaN (torch's vectorised conversion gives the pattern 0xffff, qkv's the quiet 0x7fc0).
    ok = ~torch.isnan(x)
    assert torch.equal(pt.view(torch.int16)[ok], x.bfloat16().view(torch.int16)[ok])
    assert torch.isnan(pt.float()).tolist() == torch.isnan(x).tolist()
    # Every tie (each bf16 pattern with the half bit set below it) and wide-range random values.
    ties = ((torch.arange(1 << 16, dtype=torch.int64) << 16) | 0x8000).to(torch.int32).view(torch.float32)
    g = torch.Generator().manual_seed(0)
    r = torch.cat([ties, torch.randn(100000, generator=g) * torch.logspace(-40, 38, 100000)])
    r = r[~torch.isnan(r)]
    q = torch.from_dlpack(qkv.from_dlpack(r).to("bfloat16"))
    assert torch.equal(q.view(torch.int16), r.bfloat16().view(torch.int16))
    back = qkv.from_dlpack(x.bfloat16())
    assert back.dtype == "bfloat16"
    np.testing.assert_array_equal(back.to("float32").numpy(), x.bfloat16().float().numpy())


# float32 on both sides, the same weights: the two differ only in summation order (q kᵀ over 4
# elements per head, the output projection over 8), a few ulp of O(1) values; 1e-5 relative /
# 1e-6 absolute is ~100 ulp, far below any real difference (a wrong mask, scale or head split
# changes outputs by O(0.1)).
TOL32 = dict(rtol=1e-5, atol=1e-6)


def d2l_multihead_attention(W, X_q, X_kv, valid_lens, num_heads):
    """D2L 11.5 in PyTorch (transpose_qkv, DotProductAttention with masked_softmax's -1e6 fill)."""
    def split(x):  # (B, T, C) -> (B*H, T, C/H)
        x = x.reshape(x.shape[0], x.shape[1], num_heads, -1).permute(0, 2, 1, 3)
        return x.reshape(-1, x.shape[2], x.shape[3])
    q, k, v = split(X_q @ W["W_q.weight"].T), split(X_kv @ W["W_k.weight"].T), split(X_kv @ W["W_v.weight"].T)
    scores = q @ k.transpose(1, 2) / q.shape[-1] ** 0.5
    vl = torch.repeat_interleave(valid_lens, num_heads)
    mask = torch.arange(scores.shape[-1])[None, None, :] < vl[:, None, None]
    w = torch.softmax(scores.masked_fill(~mask, -1e6), dim=-1)
    out = w @ v  # (B*H, Tq, C/H) -> (B, Tq, C)
    out = out.reshape(-1, num_heads, out.shape[1], out.shape[2]).permute(0, 2, 1, 3)
    return out.reshape(out.shape[0], out.shape[1], -1) @ W["W_o.weight"].T


def test_multihead_attention_matches_d2l_pytorch():
    qkv.manual_seed(3)
    mha = qkv.MultiHeadAttention(num_hiddens=8, num_heads=2)
    mha.eval()
    rng = np.random.default_rng(7)
    X_q = rng.standard_normal((2, 4, 8)).astype(np.float32)
    X_kv = rng.standard_normal((2, 6, 8)).astype(np.float32)
    valid_lens = np.array([3, 6])
    W = {k: torch.tensor(np.array(v), requires_grad=True) for k, v in mha.state_dict().items()}
    tq, tkv = torch.tensor(X_q, requires_grad=True), torch.tensor(X_kv, requires_grad=True)
    ref = d2l_multihead_attention(W, tq, tkv, torch.tensor(valid_lens), 2)
    (ref * ref).sum().backward()

    xq, xkv = qkv.tensor(X_q, requires_grad=True), qkv.tensor(X_kv, requires_grad=True)
    out = mha(xq, xkv, xkv, valid_lens)
    (out * out).sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), **TOL32)
    np.testing.assert_allclose(xq.grad.numpy(), tq.grad.numpy(), **TOL32)
    np.testing.assert_allclose(xkv.grad.numpy(), tkv.grad.numpy(), **TOL32)
    params = dict(mha.named_parameters())
    assert sorted(params) == sorted(W)
    for name, p in params.items():
        np.testing.assert_allclose(p.grad.numpy(), W[name].grad.numpy(), err_msg=name, **TOL32)


def test_positional_encoding_matches_d2l_pytorch():
    num_hiddens, max_len = 32, 60
    P = torch.zeros((1, max_len, num_hiddens))
    X = torch.arange(max_len, dtype=torch.float32).reshape(-1, 1) / torch.pow(
        10000, torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens)
    P[:, :, 0::2] = torch.sin(X)
    P[:, :, 1::2] = torch.cos(X)
    pe = qkv.PositionalEncoding(num_hiddens, 0.0, max_len)
    pe.eval()
    Z = np.zeros((1, max_len, num_hiddens), np.float32)
    # PyTorch evaluates sin/cos of float32 arguments up to 59 rad: its float32 rounding of the
    # argument (~4e-6 at 59) is the difference, so absolute 1e-5.
    np.testing.assert_allclose(pe(Z).detach().numpy(), P.numpy(), rtol=0, atol=1e-5)


def test_torch_tensors_keep_their_dtype():
    # Other array libraries come in through DLPack (copied): float64 stays float64, bfloat16 stays
    # bfloat16; a dtype qkv has no storage for is refused naming the argument.
    assert qkv.tensor(torch.ones(2, dtype=torch.float64)).dtype == "float64"
    b = torch.tensor([1.0, 1.0 + 3 / 256]).to(torch.bfloat16)
    t = qkv.tensor(b)
    assert t.dtype == "bfloat16" and t.data_ptr() != b.data_ptr()
    assert torch.equal(torch.from_dlpack(t), b)
    with pytest.raises(TypeError, match="data: cannot take this .*torch.*DLPack"):
        qkv.tensor(torch.ones(2, dtype=torch.float16))
