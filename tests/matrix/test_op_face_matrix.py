"""Every registered op (built-ins, cookbook ops, an MXNet-form CustomOp, a C-ABI op and an op
registered here) through every face, compared with the native call. A face that cannot serve
an op is declared by the op (``sparse_ops.faces``, shown by ``explain``); anything else that
differs or raises is a failure. The matrix is printed after the run (``conftest.py``)."""
from __future__ import annotations

import numpy as np
import pytest

import sparse_ops as so
import sparse_ops_cookbook  # noqa: F401  (registers the cookbook ops)
from sparse_ops import faces, registry
from sparse_ops.ops._samples import array as sample_array
from sparse_ops.sdk.testing import table_restored

import op_face_matrix as M  # noqa: E402

pytest.importorskip("torch")
pytest.importorskip("jax")


@so.register("_matrix_scaled_square", replace=True)
class ScaledSquare(so.Op):
    """scale * x**2, registered by this test: dense and csr kernels, a gradient rule."""

    scale = so.Param(float, 2.0, "the factor")
    trusted = False

    @so.kernel(device="cpu")
    def dense(self, ctx, x, out):
        np.multiply(np.square(x), self.scale, out=out)

    @so.kernel(device="cpu", stypes=("csr",))
    def csr(self, ctx, x, out):
        ctx.set_csr(out, x.data.asnumpy() ** 2 * self.scale if hasattr(x.data, "asnumpy") else
                    np.square(x.data) * self.scale, x.indices, x.indptr)

    def infer_storage_type(self, stype):
        return [stype if stype == "csr" else "default"]

    def gradient(self, out_grads, inputs, outputs):
        return [so.elemwise_mul(out_grads[0], inputs[0] * (2.0 * self.scale))]

    @classmethod
    def samples(cls):
        return [([sample_array((4, 3), "csr")], {"scale": 3.0}), ([sample_array((4, 3))], {})]


@so.register("_matrix_mx_cube", replace=True)
class CubeProp(so.CustomOpProp):
    """An MXNet-form custom op: x**3, keeping the input's storage type (dense or csr)."""

    def __init__(self):
        super().__init__(need_top_grad=True)

    def list_arguments(self):
        return ["data"]

    def infer_storage_type(self, in_stype):
        return in_stype, [in_stype[0]], []

    def infer_storage_type_backward(self, ograd_stype, in_stype, out_stype, igrad_stype, aux_stype):
        return ograd_stype, in_stype, out_stype, [in_stype[0]], aux_stype

    def create_operator(self, ctx, shapes, dtypes):
        return Cube()

    @classmethod
    def samples(cls):
        return [[sample_array((4, 3), "csr")], [sample_array((3, 2))]]


class Cube(so.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0]
        self.assign(out_data[0], req[0], x * x * x)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        x = in_data[0]
        self.assign(in_grad[0], req[0], out_grad[0] * (x * x * 3.0))


# the C examples of cookbook/clib (built with the system compiler, loaded for this module)
C_LIBS = ("gemm", "relu", "transpose_csr", "transpose_row_sparse", "threshold")
C_OPS = ("c_gemm", "c_relu", "c_transpose_csr", "c_transpose_row_sparse", "c_csr_threshold")


@pytest.fixture(scope="module")
def c_ops():
    """The C example libraries built and loaded; the table put back afterwards."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cookbook" / "tests"))
    try:
        from clib_build import build
    finally:
        sys.path.pop(0)
    with table_restored():
        for name in C_LIBS:
            so.library.load(str(build(name)))
        yield


NAMES = sorted(d.name for d in registry.all_ops() if M.samples_of(d) is not None)
HOST_FACES = [f for f in faces.FACES if f != "gpu"]


def _check(name: str, face_list: list[str]) -> None:
    opdef = registry.get_op(name)
    sample, cache = M.samples_of(opdef), {}
    failed = []
    for face in face_list:
        cell = M.run_cell(opdef, face, sample, cache)
        M.CELLS[(name, face)] = cell
        if cell.startswith("FAIL"):
            failed.append(f"{face}: {cell}")
    assert not failed, f"{name}: " + "; ".join(failed)


@pytest.mark.parametrize("name", NAMES)
def test_op_through_every_face(name):
    _check(name, HOST_FACES)


@pytest.mark.parametrize("name", C_OPS)
def test_c_op_through_every_face(name, c_ops):
    _check(name, HOST_FACES)


@pytest.mark.gpu
@pytest.mark.skipif(so.num_gpus() == 0, reason="no gpu (CI runs this with SPARSE_OPS_CUDA_SIM=1)")
@pytest.mark.parametrize("name", NAMES)
def test_op_on_the_gpu(name):
    _check(name, ["gpu"])


def test_the_matrix_covers_every_kind_of_op():
    """Built-ins, cookbook ops, MXNet-form custom ops, C-ABI ops and an op registered in a test
    all carry samples and are in the matrix."""
    plugins = {registry.get_op(n).plugin for n in NAMES}
    assert {None, "cookbook"} <= plugins
    assert {"_matrix_scaled_square", "_matrix_mx_cube"} <= set(NAMES)
    assert len(NAMES) >= 190


def test_explain_shows_the_declared_reasons():
    x = so.array(np.ones((2, 2)))
    shown = so.explain("adam_update", x, x, x, x, lr=0.1)["faces"]
    assert shown["native"] == "yes"
    assert "in place" in shown["dask"]
    assert "constants" in shown["jax.grad"]
    assert "in place" in shown["jax.vmap"]
    assert set(shown) == set(faces.FACES)
    csr = so.array(np.eye(3)).tostype("csr")
    assert "dense arrays only" in so.explain("relu", csr)["faces"]["jax.vmap"]
    assert so.explain("relu", so.array(np.eye(3)))["faces"]["jax.vmap"] == "yes"
