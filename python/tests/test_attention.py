# Attention and its gradients against a float64 numpy reference, the (B, H, T, D) layout check,
# masked softmax, positional encoding, Nadaraya–Watson pooling, modules and optimizers.
import numpy as np
import pytest

import qkv

# float64 against float64: both sides do the same O(T·D) sums in another order, so they agree to a
# few ulps of O(1) values; 1e-10 leaves room for that and still catches any wrong term.
TOL64 = dict(rtol=1e-10, atol=1e-10)
# float32 kernels vs the float64 reference: sums of <= 16 terms of O(1) values (tests/README.md's
# element-wise fast-vs-ref rule, atol 1e-6 rtol 1e-5, widened by the D-term dot products).
TOL32 = dict(rtol=1e-4, atol=1e-5)


def ref_attention(q, k, v, lens=None, causal=False, scale=None):
    """float64 numpy reference: out, and a function giving (dq, dk, dv) for d(sum(out * G))."""
    B, H, Tq, D = q.shape
    Tk = k.shape[2]
    s = 1 / np.sqrt(D) if scale is None else scale
    S = np.einsum("bhqd,bhkd->bhqk", q, k) * s
    keep = np.ones((B, H, Tq, Tk), bool)
    if lens is not None:
        keep &= (np.arange(Tk)[None, None, None, :] < np.asarray(lens)[:, None, None, None])
    if causal:
        keep &= np.tril(np.ones((Tq, Tk), bool))[None, None]
    S = np.where(keep, S, -np.inf)
    m = S.max(-1, keepdims=True)
    E = np.where(keep, np.exp(S - m), 0)
    P = E / E.sum(-1, keepdims=True)
    out = np.einsum("bhqk,bhkd->bhqd", P, v)

    def grads(G):
        dv = np.einsum("bhqk,bhqd->bhkd", P, G)
        dP = np.einsum("bhqd,bhkd->bhqk", G, v)
        dS = P * (dP - (dP * P).sum(-1, keepdims=True))
        return np.einsum("bhqk,bhkd->bhqd", dS, k) * s, np.einsum("bhqk,bhqd->bhkd", dS, q) * s, dv
    return out, P, grads


def rand(rng, *shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("backend", ["math", "auto"])
@pytest.mark.parametrize("masking", ["none", "valid_lens", "causal"])
def test_sdpa_forward_and_gradients_float64(backend, masking):
    rng = np.random.default_rng(0)
    q, k, v = rand(rng, 2, 3, 5, 4), rand(rng, 2, 3, 5, 4), rand(rng, 2, 3, 5, 6)
    G = rand(rng, 2, 3, 5, 6)
    lens = np.array([3, 5]) if masking == "valid_lens" else None
    causal = masking == "causal"
    want, _, grads = ref_attention(q, k, v, lens, causal)
    tq, tk, tv = (qkv.tensor(x, requires_grad=True) for x in (q, k, v))
    out = qkv.scaled_dot_product_attention(tq, tk, tv, valid_lens=lens, causal=causal or None, backend=backend)
    assert out.shape == (2, 3, 5, 6) and out.dtype == "float64"
    np.testing.assert_allclose(out.detach().numpy(), want, **TOL64)
    (out * qkv.tensor(G)).sum().backward()
    for t, g in zip((tq, tk, tv), grads(G)):
        np.testing.assert_allclose(t.grad.numpy(), g, **TOL64)


def test_sdpa_float32_flash_vs_float64_reference():
    rng = np.random.default_rng(1)
    q, k, v = rand(rng, 2, 2, 16, 8), rand(rng, 2, 2, 16, 8), rand(rng, 2, 2, 16, 8)
    want, _, grads = ref_attention(q, k, v, causal=True)
    tq, tk, tv = (qkv.tensor(x, dtype="float32", requires_grad=True) for x in (q, k, v))
    out = qkv.scaled_dot_product_attention(tq, tk, tv, causal=True, backend="flash")
    np.testing.assert_allclose(out.detach().numpy(), want, **TOL32)
    out.sum().backward()
    for t, g in zip((tq, tk, tv), grads(np.ones_like(want))):
        np.testing.assert_allclose(t.grad.numpy(), g, **TOL32)


def test_sdpa_returns_weights_and_takes_scale_and_mask():
    rng = np.random.default_rng(2)
    q, k, v = rand(rng, 1, 2, 3, 4), rand(rng, 1, 2, 4, 4), rand(rng, 1, 2, 4, 2)
    want, P, _ = ref_attention(q, k, v, scale=0.5)
    out, w = qkv.scaled_dot_product_attention(q, k, v, scale=0.5, return_weights=True)
    np.testing.assert_allclose(out.numpy(), want, **TOL64)
    np.testing.assert_allclose(w.numpy(), P, **TOL64)
    mask = np.ones((3, 4), bool)
    mask[:, 3] = False  # a bool mask: True attends
    out_m = qkv.scaled_dot_product_attention(q, k, v, mask=mask)
    want_m, _, _ = ref_attention(q[..., :, :], k[:, :, :3], v[:, :, :3])
    np.testing.assert_allclose(out_m.numpy(), want_m, **TOL64)


def test_layout_bthd_is_checked_and_supported():
    rng = np.random.default_rng(3)
    B, T_q, T_k, H, D = 2, 5, 7, 3, 4
    q, k, v = rand(rng, B, T_q, H, D), rand(rng, B, T_k, H, D), rand(rng, B, T_k, H, D)
    with pytest.raises(ValueError, match=r"read as \(B, H, T, D\).*layout='BTHD'"):
        qkv.scaled_dot_product_attention(q, k, v)  # (B, T, H, D) arrays are not silently misread
    out = qkv.scaled_dot_product_attention(q, k, v, layout="BTHD")
    want, _, _ = ref_attention(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3))
    assert out.shape == (B, T_q, H, D)
    np.testing.assert_allclose(out.numpy(), want.transpose(0, 2, 1, 3), **TOL64)
    with pytest.raises(ValueError, match="all be"):
        qkv.scaled_dot_product_attention(q[0], k, v)
    with pytest.raises(ValueError, match="layout"):
        qkv.scaled_dot_product_attention(q, k, v, layout="TBHD")


def test_sdpa_bad_valid_lens_names_it():
    q = np.ones((2, 1, 3, 4))
    with pytest.raises(qkv.Error, match="valid_lens"):
        qkv.scaled_dot_product_attention(q, q, q, valid_lens=np.array([1, 2, 3]))
    with pytest.raises(ValueError, match="scale"):
        qkv.scaled_dot_product_attention(q, q, q, scale=0.0)


def test_masked_softmax_d2l_example():
    X = np.random.default_rng(4).random((2, 2, 4)).astype(np.float32)
    out = qkv.masked_softmax(X, np.array([2, 3])).numpy()
    assert (out[0, :, 2:] == 0).all() and (out[1, :, 3:] == 0).all()
    np.testing.assert_allclose(out.sum(-1), 1, rtol=1e-6)
    e = np.exp(X[0, :, :2] - X[0, :, :2].max(-1, keepdims=True))
    np.testing.assert_allclose(out[0, :, :2], e / e.sum(-1, keepdims=True), rtol=1e-6)


def test_positional_encoding_table():
    P = qkv.positional_encoding(10, 8).numpy()
    assert P.shape == (10, 8)
    np.testing.assert_array_equal(P[0], [0, 1, 0, 1, 0, 1, 0, 1])
    i, j = np.arange(10)[:, None], np.arange(4)[None, :]
    np.testing.assert_allclose(P[:, 0::2], np.sin(i / 10000 ** (2 * j / 8)), atol=1e-6)
    np.testing.assert_allclose(P[:, 1::2], np.cos(i / 10000 ** (2 * j / 8)), atol=1e-6)


def test_nadaraya_watson_pooling_and_gradient():
    rng = np.random.default_rng(5)
    x_train = np.sort(rng.random(20) * 5)
    y_train = 2 * np.sin(x_train) + x_train ** 0.8
    x_test = np.arange(0, 5, 0.5)
    pred, w = qkv.nadaraya_watson(x_test, x_train, y_train)
    d = x_test[:, None] - x_train[None, :]
    a = np.exp(-d ** 2 / 2)
    a /= a.sum(1, keepdims=True)
    np.testing.assert_allclose(w.numpy(), a, **TOL64)
    np.testing.assert_allclose(pred.numpy(), a @ y_train, **TOL64)
    vals = qkv.tensor(y_train, requires_grad=True)
    p, _ = qkv.nadaraya_watson(x_test, x_train, vals)
    p.sum().backward()
    np.testing.assert_allclose(vals.grad.numpy(), a.sum(0), **TOL64)  # d(sum a·v)/dv = column sums
    model = qkv.NWKernelRegression(1.0)
    data = qkv.nw_data("seed", 50, seed=0)
    hist = model.fit(data["x_train"], data["y_train"], epochs=5)
    assert len(hist) == 5 and hist[-1][1] < hist[0][1]  # the loss falls


def test_autograd_basics():
    x = qkv.tensor([[1.0, 2.0], [3.0, 4.0]]).requires_grad_()
    assert x.requires_grad and x.is_leaf and x.grad is None
    y = (x * x).sum()
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[2, 4], [6, 8]])
    x.zero_grad()
    assert x.grad is None


def test_multihead_attention_state_dict_round_trip(tmp_path):
    qkv.manual_seed(0)
    mha = qkv.MultiHeadAttention(num_hiddens=8, num_heads=2)
    sd = mha.state_dict()
    assert sorted(sd) == ["W_k.weight", "W_o.weight", "W_q.weight", "W_v.weight"]
    X = np.random.default_rng(6).standard_normal((2, 3, 8)).astype(np.float32)
    mha.eval()
    out = mha(X, X, X, np.array([2, 3])).detach().numpy()
    with qkv.no_grad():
        assert not mha(X, X, X).requires_grad
    assert out.shape == (2, 3, 8)
    other = qkv.MultiHeadAttention(num_hiddens=8, num_heads=2)
    other.eval()
    other.load_state_dict({k: np.asarray(v) for k, v in sd.items()})
    np.testing.assert_array_equal(other(X, X, X, np.array([2, 3])).detach().numpy(), out)
    path = tmp_path / "mha.safetensors"
    mha.save(str(path))
    third = qkv.MultiHeadAttention(num_hiddens=8, num_heads=2)
    third.eval()
    third.load_state_dict(str(path))
    np.testing.assert_array_equal(third(X, X, X, np.array([2, 3])).detach().numpy(), out)
    with pytest.raises(qkv.Error, match="W_q.weight"):
        other.load_state_dict({**{k: np.asarray(v) for k, v in sd.items()}, "W_q.weight": np.zeros((3, 3), np.float32)})


def test_sgd_and_adam_steps():
    p = qkv.tensor([1.0, -2.0]).requires_grad_()
    opt = qkv.SGD([p], lr=0.1)
    (p * p).sum().backward()
    opt.step()
    np.testing.assert_allclose(p.detach().numpy(), [1 - 0.1 * 2, -2 + 0.1 * 4], rtol=1e-6)
    q = qkv.tensor([1.0]).requires_grad_()
    adam = qkv.Adam([q], lr=0.01)
    (q * 3.0).sum().backward()
    adam.step()
    np.testing.assert_allclose(q.detach().numpy(), [1 - 0.01], rtol=1e-6)  # first Adam step moves by lr


def test_transformer_forward_and_gradients():
    qkv.manual_seed(0)
    m = qkv.Transformer(src_vocab_size=11, tgt_vocab_size=13, num_hiddens=8, num_blks=1, num_heads=2,
                        ffn_num_hiddens=16, dropout=0.0)
    src = np.array([[3, 4, 2, 1], [5, 2, 1, 1]], dtype=np.int64)
    dec = np.array([[2, 6, 7], [2, 8, 1]], dtype=np.int64)
    logits = m(src, np.array([3, 2]), dec)
    assert logits.shape == (2, 3, 13)
    logits.sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    # The encoder and decoder as separate modules, loaded with the model's weights, give its logits.
    m.eval()
    enc, dec_m = qkv.TransformerEncoder(11, 8, 1, 2, 16, 0.0), qkv.TransformerDecoder(13, 8, 1, 2, 16, 0.0)
    sd = m.state_dict()
    enc.load_state_dict({k[len("encoder."):]: v for k, v in sd.items() if k.startswith("encoder.")})
    dec_m.load_state_dict({k[len("decoder."):]: v for k, v in sd.items() if k.startswith("decoder.")})
    enc.eval()
    dec_m.eval()
    with qkv.no_grad():
        want = m(src, np.array([3, 2]), dec).numpy()
        got = dec_m(dec, enc(src, np.array([3, 2])), np.array([3, 2])).numpy()
    # float32: the model may take its pad-free path (models/transformer.h), summing in another order.
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
