# qkv.Tensor <-> numpy without copies (data pointers compared), buffer protocol, DLPack, and the
# errors for dtypes, layouts and arrays that cannot be shared (bfloat16: DLPack only).
import gc

import numpy as np
import pytest

import qkv


def test_from_numpy_shares_memory():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = qkv.from_numpy(a)
    assert t.data_ptr() == a.ctypes.data
    assert t.shape == (3, 4) and t.dtype == "float32" and t.strides == (4, 1)
    a[1, 2] = 100.0  # a write through numpy is seen by the tensor
    assert t.numpy()[1, 2] == 100.0
    assert t.sum().item() == a.sum()


def test_strided_view_shared_not_copied():
    a = np.arange(24, dtype=np.float64).reshape(4, 6)
    v = a[1:, ::2]
    t = qkv.from_numpy(v)
    assert t.data_ptr() == v.ctypes.data
    assert t.strides == (6, 2) and not t.is_contiguous()
    np.testing.assert_array_equal(t.numpy(), v)
    assert np.shares_memory(t.numpy(), a)


def test_numpy_of_tensor_shares_memory_and_keeps_it_alive():
    t = qkv.zeros(2, 3)
    n = t.numpy()
    assert n.ctypes.data == t.data_ptr()
    n[...] = 1.5
    assert t.sum().item() == 9.0
    ptr = t.data_ptr()
    del t
    gc.collect()
    assert n.ctypes.data == ptr and n.sum() == 9.0  # the array holds the storage


def test_tensor_keeps_numpy_memory_alive():
    t = qkv.from_numpy(np.full((1000,), 3.0, dtype=np.float32))  # only the tensor refers to it
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), np.full((1000,), 3.0, dtype=np.float32))


@pytest.mark.parametrize("dtype,name", [(np.float32, "float32"), (np.float64, "float64"), (np.int64, "int64"),
                                        (np.bool_, "bool")])
def test_dtypes_round_trip(dtype, name):
    a = (np.arange(6) % 2).astype(dtype).reshape(2, 3)
    t = qkv.from_numpy(a)
    assert t.dtype == name and t.data_ptr() == a.ctypes.data
    b = t.numpy()
    assert b.dtype == a.dtype and b.ctypes.data == a.ctypes.data


def test_buffer_protocol():
    t = qkv.ones(2, 5, dtype="float64")
    m = memoryview(t)
    assert m.format == "d" and m.shape == (2, 5) and m.strides == (40, 8)
    a = np.asarray(t)
    assert a.ctypes.data == t.data_ptr()
    a[0, 0] = 7
    assert t.numpy()[0, 0] == 7


def test_dlpack_both_ways():
    a = np.arange(10, dtype=np.float32).reshape(2, 5)
    t = qkv.from_dlpack(a)
    assert t.data_ptr() == a.ctypes.data
    assert t.__dlpack_device__() == (1, 0)
    b = np.from_dlpack(t)
    assert b.ctypes.data == t.data_ptr()
    np.testing.assert_array_equal(b, a)
    c = np.from_dlpack(t.clone())  # a consumer's capsule keeps a temporary's memory alive
    gc.collect()
    np.testing.assert_array_equal(c, a)
    # A capsule that no consumer takes is freed with its tensor reference (no leak, no crash).
    cap = t.__dlpack__(max_version=(1, 0))
    del cap
    with pytest.raises(ValueError, match="stream"):
        t.__dlpack__(stream=1)
    del a, b
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), np.arange(10, dtype=np.float32).reshape(2, 5))


def test_arrays_that_cannot_be_shared_need_copy_true():
    a = np.arange(6, dtype=np.float32)
    rev = a[::-1]
    with pytest.raises(ValueError, match="copy=True"):
        qkv.from_numpy(rev)
    t = qkv.from_numpy(rev, copy=True)
    np.testing.assert_array_equal(t.numpy(), rev)
    assert t.data_ptr() != rev.ctypes.data
    ro = np.ones(3, dtype=np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        qkv.from_numpy(ro)
    sw = np.ones(3, dtype=">f4")  # byte-swapped
    with pytest.raises(ValueError):
        qkv.from_numpy(sw)
    np.testing.assert_array_equal(qkv.from_numpy(sw, copy=True).numpy(), np.ones(3, np.float32))


def test_dtype_errors_name_the_argument():
    with pytest.raises(TypeError, match=r"^a: dtype complex64"):
        qkv.from_numpy(np.ones(3, dtype=np.complex64))
    q = np.ones((1, 1, 2, 4), dtype=np.int32)
    with pytest.raises(TypeError, match=r"^q: dtype int32"):
        qkv.scaled_dot_product_attention(q, q, q)
    # a list of strings: the message says what numpy made of it, not just "got list"
    with pytest.raises(TypeError, match=r"lists of numbers or bools, got a <class 'list'> whose values numpy reads as <U1"):
        qkv.tensor(["a"])


def test_numpy_of_tensor_requiring_grad_refused():
    t = qkv.ones(2).requires_grad_()
    with pytest.raises(ValueError, match="detach"):
        t.numpy()
    assert t.detach().numpy().sum() == 2


def test_qkv_error_keeps_the_message():
    with pytest.raises(qkv.Error, match=r"matmul: .*\(2, 3\).*\(4, 5\)"):
        qkv.matmul(np.ones((2, 3), np.float32), np.ones((4, 5), np.float32))
    assert issubclass(qkv.Error, RuntimeError)


def test_bfloat16_storage_numpy_refused_dlpack_shared():
    # 1 + 3·2^-8 is a tie between 1 + 2^-7 (odd) and 1 + 2^-6: RNE rounds up.
    x = np.array([[1.0, 1.0 + 3 / 256, -0.0], [np.inf, 2.5, -3.0]], dtype=np.float32)
    t = qkv.tensor(x).to("bfloat16")
    assert t.dtype == "bfloat16"
    np.testing.assert_array_equal(t.to("float32").numpy(), np.array([[1, 1 + 1 / 64, 0], [np.inf, 2.5, -3]], np.float32))
    assert np.signbit(t.to("float32").numpy()[0, 2])
    assert "bfloat16" in repr(t)
    with pytest.raises(TypeError, match=r"numpy has no bfloat16.*to\('float32'\)"):
        t.numpy()
    with pytest.raises(TypeError, match="numpy has no bfloat16"):
        np.asarray(t)
    with pytest.raises(BufferError, match="bfloat16"):
        memoryview(t)
    with pytest.raises(qkv.Error, match=r"add: bfloat16 tensors are storage only.*Python: \.to\(\"float32\"\)"):
        t + t
    # DLPack carries bf16 (kDLBfloat, 16 bits): shared, not copied.
    u = qkv.from_dlpack(t)
    assert u.dtype == "bfloat16" and u.data_ptr() == t.data_ptr() and u.shape == (2, 3)
    np.testing.assert_array_equal(u.to("float32").numpy(), t.to("float32").numpy())
    v = t.transpose(0, 1)  # a strided view travels with its strides
    w = qkv.from_dlpack(v)
    assert w.strides == v.strides == (1, 3)
    np.testing.assert_array_equal(w.contiguous().to("float32").numpy(), t.to("float32").numpy().T)


def test_float16_shares_memory_with_numpy_both_ways():
    # 1 + 2^-11 is a tie (even below: down); 65520 rounds to inf; 2^-24 is the smallest subnormal.
    x = np.array([[1.0, 1.0 + 2.0**-11, 65520.0], [2.0**-24, -0.0, 300.0]], dtype=np.float32)
    t = qkv.tensor(x).to("float16")
    assert t.dtype == "float16" and "float16" in repr(t)
    np.testing.assert_array_equal(t.numpy(), x.astype(np.float16))  # numpy's RNE, bit for bit
    assert t.numpy().dtype == np.float16
    h = np.array([0.5, -2.0, np.inf], dtype=np.float16)
    u = qkv.from_numpy(h)  # shared, not copied
    assert u.dtype == "float16" and u.data_ptr() == h.ctypes.data
    np.testing.assert_array_equal(np.asarray(u), h)
    assert memoryview(u).format == "e"
    np.testing.assert_array_equal(u.to("float32").numpy(), h.astype(np.float32))
    assert qkv.from_dlpack(u).dtype == "float16"
    with pytest.raises(qkv.Error, match=r"add: float16 tensors are storage only"):
        u + u
    g = qkv.tensor(np.ones(2, np.float32), requires_grad=True)
    with pytest.raises(qkv.Error, match=r"to\(float16\): the tensor requires grad"):
        g.to("float16")


def test_float16_attention_computes_in_fp32_with_minus_inf_masks():
    rng = np.random.default_rng(3)
    # Entries ~300 with D = 64: logits q·k/8 reach ~7e5, past float16's 65504.
    q = (rng.uniform(250, 300, (1, 2, 5, 64))).astype(np.float16)
    k = (rng.uniform(-300, 300, (1, 2, 7, 64))).astype(np.float16)
    v = rng.standard_normal((1, 2, 7, 8)).astype(np.float16)
    mask = np.zeros((5, 7), np.float16)
    mask[:, 2] = -np.inf
    mask[3, :] = -np.inf  # a fully masked row
    out = qkv.scaled_dot_product_attention(q, k, v, mask=mask)
    assert out.dtype == "float16"
    want = qkv.scaled_dot_product_attention(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32),
                                            mask=mask.astype(np.float32)).numpy().astype(np.float16)
    np.testing.assert_array_equal(out.numpy(), want)
    assert np.isfinite(out.numpy()).all()
    assert (out.numpy()[:, :, 3] == 0).all()


def test_dtype_none_and_bfloat16_of_a_tensor_requiring_grad_are_refused():
    t = qkv.tensor(np.ones(3, np.float32))
    with pytest.raises(TypeError, match="dtype: expected a dtype name or numpy dtype, got None"):
        t.to(None)
    x = qkv.tensor(np.array([1.0, 2.0, 3.0], np.float32), requires_grad=True)
    with pytest.raises(qkv.Error, match=r"to\(bfloat16\): the tensor requires grad"):
        x.to("bfloat16")
    assert x.detach().to("bfloat16").dtype == "bfloat16"


def test_attention_argument_types():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 1, 3, 4)).astype(np.float32)
    # Lengths of any integer width are taken as int64 (numpy's int32, uint8 ...), as PyTorch does.
    want = qkv.scaled_dot_product_attention(q, q, q, valid_lens=np.array([1, 2], np.int64)).numpy()
    for dt in (np.int32, np.uint8, np.int16):
        got = qkv.scaled_dot_product_attention(q, q, q, valid_lens=np.array([1, 2], dt)).numpy()
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(qkv.masked_softmax(q, np.array([1, 2], np.int32)).numpy(),
                                  qkv.masked_softmax(q, np.array([1, 2])).numpy())
    with pytest.raises(TypeError, match=r"^scale: expected a number or None, got <class 'str'>"):
        qkv.scaled_dot_product_attention(q, q, q, scale="x")
    with pytest.raises(TypeError, match=r"^scale: expected a number or None"):
        qkv.scaled_dot_product_attention(q, q, q, scale=True)
    np.testing.assert_allclose(qkv.scaled_dot_product_attention(q, q, q, scale=np.float32(0.5)).numpy(),
                               qkv.scaled_dot_product_attention(q, q, q, scale=0.5).numpy())
    i = np.ones((1, 1, 2, 4), np.int64)
    with pytest.raises(qkv.Error, match=r"must share a float dtype \(float32, float64, bfloat16 or float16\), got q int64, k int64, v int64"):
        qkv.scaled_dot_product_attention(i, i, i)
