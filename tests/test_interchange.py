"""Containers from other libraries' arrays: DLPack (PyTorch), ``__array__``, the CUDA array
interface; ``array`` copies, ``from_dlpack`` shares memory; what cannot convert says how."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sparse_ops as so


class OnlyArray:
    """A producer speaking only NumPy's ``__array__`` protocol."""

    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        return self.a if dtype is None else self.a.astype(dtype)


class OnlyDLPack:
    """A producer speaking only DLPack (its memory is a NumPy array's)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kwargs):
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class DeviceMemoryOnly:
    """A producer whose memory claims to be on a gpu (``__cuda_array_interface__`` only)."""

    __cuda_array_interface__ = {"shape": (2,), "typestr": "<f8", "data": (0, False), "version": 2}


def test_array_from_dlpack_and_array_protocol_producers():
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    for producer in (OnlyDLPack(a), OnlyArray(a)):
        x = so.array(producer)
        assert x.dtype == np.float64 and x.shape == (2, 3) and x.stype == "default"
        np.testing.assert_array_equal(x.asnumpy(), a)
        assert not np.shares_memory(x.data, a)  # array() copies, as np.array does
    assert so.array(OnlyArray(a), dtype="float32").dtype == np.float32
    y = so.from_dlpack(OnlyDLPack(a))
    assert np.shares_memory(y.data, a)


def test_errors_point_to_from_dlpack():
    with pytest.raises(TypeError, match="from_dlpack"):
        so.array(object())
    with pytest.raises(TypeError, match=r"from_dlpack needs an object with __dlpack__.*sparse_ops.array"):
        so.from_dlpack([1.0, 2.0])
    with pytest.raises(TypeError, match="gpu memory.*device=sparse_ops.gpu"):
        so.array(DeviceMemoryOnly(), device="cpu")


def test_torch_tensors():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    x = so.array(t)
    assert x.dtype == np.float32 and x.shape == (3, 4)
    np.testing.assert_array_equal(x.asnumpy(), t.numpy())
    t[0, 0] = 100.0
    assert x.asnumpy()[0, 0] == 0.0  # a copy
    for dtype, expected in [(torch.float16, np.float16), (torch.float64, np.float64), (torch.int32, np.int32),
                            (torch.int64, np.int64)]:
        assert so.array(torch.ones(2, dtype=dtype)).dtype == expected
    shared = so.from_dlpack(t)  # zero-copy on the cpu
    shared.data[1, 1] = -7.0
    assert t[1, 1].item() == -7.0
    # a sliced (strided) tensor keeps its values
    np.testing.assert_array_equal(so.array(t[:, ::2]).asnumpy(), t[:, ::2].numpy())
    # the result takes part in operators like any container
    np.testing.assert_array_equal((so.array(t) @ so.array(torch.eye(4))).asnumpy(), t.numpy())


def test_torch_tensors_that_cannot_convert_say_why():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"detach.*from_dlpack"):
        so.array(torch.ones(2, requires_grad=True))
    with pytest.raises(TypeError, match=r"float16, float32, float64, int32, int64"):
        so.array(torch.ones(2, dtype=torch.bfloat16))


@pytest.mark.gpu
def test_cuda_array_interface_on_the_simulated_gpu():
    env = {k: v for k, v in os.environ.items() if k not in ("SPARSE_OPS_CUDA_SIM", "NUMBA_ENABLE_CUDASIM")}
    env["SPARSE_OPS_CUDA_SIM"] = "1"
    code = textwrap.dedent("""
        import numpy as np, sparse_ops as so

        class DeviceArray:  # what numba's device arrays offer: the interface and a host copy
            def __init__(self, a):
                self.a = a
                self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str,
                                                 "data": (a.ctypes.data, False), "version": 2}
            def copy_to_host(self):
                return self.a.copy()

        a = np.arange(6.0).reshape(2, 3)
        x = so.array(DeviceArray(a))
        assert x.device == so.gpu(0) and x.dtype == np.float64, x
        np.testing.assert_array_equal(x.asnumpy(), a)
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


def test_sparse_containers_from_torch_components():
    torch = pytest.importorskip("torch")
    import scipy.sparse as sp

    m = sp.random(4, 5, density=0.4, format="csr", dtype=np.float32, random_state=0)
    data = torch.from_numpy(m.data.copy())
    c = so.csr_matrix((data, torch.from_numpy(m.indices.astype(np.int64)), torch.from_numpy(m.indptr.astype(np.int64))),
                      shape=(4, 5))
    assert c.stype == "csr" and c.dtype == np.float32 and c.aux_types == [np.int64, np.int64]
    np.testing.assert_array_equal(c.asnumpy(), m.toarray())
    data[0] = 99.0  # components of a supported dtype are shared, as with NumPy arrays
    assert c.data[0] == 99.0
    r = so.row_sparse_array((torch.ones(2, 3, dtype=torch.float64), torch.tensor([0, 2])), shape=(4, 3))
    np.testing.assert_array_equal(r.asnumpy(), np.array([[1, 1, 1], [0, 0, 0], [1, 1, 1], [0, 0, 0]], np.float64))
    with pytest.raises(so.SparseFormatError, match="integer dtype"):
        so.row_sparse_array((torch.ones(1, 3), torch.tensor([0.0])), shape=(4, 3))
