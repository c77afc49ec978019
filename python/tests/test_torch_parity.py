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
