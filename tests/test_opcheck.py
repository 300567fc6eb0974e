"""opcheck says what it compared and fails when a check compared nothing.

Each op here is deliberately broken in one way a plugin author can break an op (a csr
kernel that never writes its output, no gradient, a wrong gradient, a None gradient, a
gradient rule that forgets an input); opcheck must fail it, name the check, and for value
mismatches the worst element with both values. The skip declarations and the NumPy
reference are the ways to make such a check honest again.
"""
import os
import re
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

import sparse_ops as so
from sparse_ops.sdk.testing import CHECKS, OpcheckError, OpcheckReport, check_gradient, opcheck


def csr(values) -> so.CSRNDArray:
    return so.array(np.asarray(values, dtype=np.float64)).tostype("csr")


X = np.array([[0.0, 1.5, 0.0, -2.0], [0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 3.0, 0.0]])


class _CsrIdentityRules(so.Op):
    """Rules of a csr -> csr op of one input, shared by the broken ops below."""

    backward_needs_inputs = ()

    def infer_storage_type(self, data):
        return [data]


@numba.njit(cache=True)
def _copy_values(src, dst):
    for j in range(src.shape[0]):
        dst[j] = src[j]


# ---- a csr kernel that never writes its output, and no dense kernel ----------------------------
@so.register("opcheck_lazy_csr", replace=True)
class LazyCsr(_CsrIdentityRules):
    """Meant to be the identity on csr; the kernel allocates nothing and writes nothing."""

    @so.kernel(device="cpu", stypes=("csr",))
    def csr(self, ctx, data, out):
        pass  # forgets to write out: out stays an empty csr

    def gradient(self, out_grads, inputs, outputs):
        return [out_grads[0]]


def test_a_csr_kernel_without_dense_kernel_or_reference_fails_with_the_reason():
    with pytest.raises(OpcheckError, match=r"opcheck_lazy_csr sample 0 \(csr\): reference: compared nothing: the csr "
                                           r"kernel ran and the op has no dense kernel and no NumPy reference"):
        opcheck("opcheck_lazy_csr", [[csr(X)]])


def test_a_numpy_reference_catches_the_kernel_that_never_writes():
    with pytest.raises(OpcheckError) as info:
        opcheck("opcheck_lazy_csr", [[csr(X)]], reference=lambda a: a)
    msg = str(info.value)
    # the worst element is the largest stored value the kernel lost: 3.0 at (2, 2)
    assert "output 0 and the NumPy reference disagree: 4 of 12 elements differ" in msg
    assert "worst at index (2, 2): kernel 0, reference 3" in msg


@so.register("opcheck_rebinding", replace=True)
class Rebinding(so.Op):
    """Meant to double its input; the kernel rebinds its output's name instead of writing into it."""

    @so.kernel(device="cpu")
    def dense(self, ctx, data, out):
        out = data * 2  # noqa: F841 - the slip under test

    def gradient(self, out_grads, inputs, outputs):
        return [out_grads[0] * 2]


def test_a_dense_kernel_that_never_writes_its_output_is_named_so_not_as_nondeterminism():
    """opcheck marks untrusted kernels' outputs before each run, as debug mode does: an output
    left unwritten is reported as such, whatever stale memory it happened to hold."""
    with pytest.raises(OpcheckError, match=r"opcheck_rebinding sample 0 \(default\): inference: .*kernel "
                                           r"Rebinding.dense produced a partly unset output 0"):
        opcheck("opcheck_rebinding", [[so.array(X + 1.0)]])


def test_a_declared_skip_passes_and_the_report_says_what_was_not_compared():
    report = opcheck("opcheck_lazy_csr", [[csr(X)]], skip={"reference": "checked in test_lazy.py", "gradient": "x"})
    assert isinstance(report, OpcheckReport) and report == 1 and int(report) == 1 and report.samples == 1
    (sample,) = report.results
    assert sample.compared == ["inference", "format", "determinism"]
    assert {o.check: (o.status, o.detail) for o in sample.not_compared} == {
        "reference": ("skipped", "checked in test_lazy.py"), "gradient": ("skipped", "x"), "gpu": ("n/a", "no gpu device")}
    assert "not compared: gradient (skipped: x); reference (skipped: checked in test_lazy.py)" in report.summary()
    assert "reference    skipped: checked in test_lazy.py" in str(report)


def test_the_skip_declared_beside_the_op_counts_too():
    @so.register("opcheck_lazy_declared", replace=True)
    class Declared(LazyCsr):
        opcheck_skip = {"reference": "compared with SciPy in the op's own tests"}

    report = opcheck("opcheck_lazy_declared", [[csr(X)]], check_grad=False)
    assert report.skipped()["reference"] == {"skipped: compared with SciPy in the op's own tests"}


def test_unknown_skip_names_are_refused():
    with pytest.raises(ValueError, match=r"unknown check\(s\) to skip \['refernce'\]; checks: inference, format"):
        opcheck("opcheck_lazy_csr", [[csr(X)]], skip={"refernce": "typo"})
    assert set(CHECKS) == {"inference", "format", "determinism", "reference", "gradient", "gpu"}


def test_a_reference_method_on_the_op_is_used():
    @so.register("opcheck_copy_csr", replace=True)
    class CopyCsr(_CsrIdentityRules):
        @so.kernel(device="cpu", stypes=("csr",))
        def csr(self, ctx, data, out):
            _copy_values(data.data, ctx.alloc_like(out, data))

        def gradient(self, out_grads, inputs, outputs):
            return [out_grads[0]]

        def reference(self, data):
            return data

    report = opcheck("opcheck_copy_csr", [[csr(X)], [so.zeros((2, 3), stype="csr", dtype="float64")]])
    assert report == 2
    assert [o.detail for r in report.results for o in r.outcomes if o.check == "reference"] == [
        "outputs vs the NumPy reference (fcompute_ex kernel)"] * 2


# ---- gradients ----------------------------------------------------------------------------------
@so.register("opcheck_cube", replace=True)
class Cube(so.Op):
    """x ** 3 (dense); its gradient is given by the subclasses below."""

    @so.kernel(device="cpu")
    def dense(self, ctx, data, out):
        np.power(data, 3, out=out)


def test_a_differentiable_op_without_gradient_fails_unless_skipped_or_declared():
    x = so.array(np.array([[0.5, -1.0], [2.0, 1.5]]))
    with pytest.raises(OpcheckError, match=r"opcheck_cube sample 0 \(default\): gradient: compared nothing: the op "
                                           r"is differentiable \(differentiable is not False\) but declares no gradient"):
        opcheck("opcheck_cube", [[x]])
    report = opcheck("opcheck_cube", [[x]], skip={"gradient": "tested by hand"})
    assert report.skipped()["gradient"] == {"skipped: tested by hand"}

    @so.register("opcheck_cube_constant", replace=True)
    class Constant(Cube):
        differentiable = False

    report = opcheck("opcheck_cube_constant", [[x]])
    assert report.skipped()["gradient"] == {"n/a: the op declares differentiable = False"}


def test_a_wrong_gradient_names_the_worst_element_and_both_values():
    @so.register("opcheck_cube_wrong", replace=True)
    class Wrong(Cube):
        def gradient(self, out_grads, inputs, outputs):  # 2 x^2 instead of 3 x^2
            return [so.elemwise_mul(out_grads[0], so.square(inputs[0]) * 2.0)]

    x = np.array([[0.5, -1.0], [2.0, 1.5]])
    with pytest.raises(OpcheckError) as info:
        opcheck("opcheck_cube_wrong", [[so.array(x)]])
    msg = str(info.value)
    # the error x^2 * head is largest where x = 2: index (1, 0); opcheck's heads are
    # standard normal draws of seed 0, so the values are exactly computable here
    head = np.random.default_rng(0).standard_normal((2, 2))
    found = re.search(r"gradient of input 0 disagrees with finite differences at index \(1, 0\): "
                      r"analytic (\S+), numeric (\S+) \(eps 1e-06, rtol 0.0001, atol 1e-06; float64; "
                      r"4 of 4 elements differ\)", msg)
    assert found, msg
    np.testing.assert_allclose(float(found[1]), 2 * 4.0 * head[1, 0], rtol=1e-5)  # the rule's 2 x^2
    np.testing.assert_allclose(float(found[2]), 3 * 4.0 * head[1, 0], rtol=1e-5)  # d(x^3)/dx = 3 x^2


def test_a_none_gradient_of_a_float_input_is_compared_with_the_numeric_one():
    @so.register("opcheck_cube_none", replace=True)
    class NoneGrad(Cube):
        def gradient(self, out_grads, inputs, outputs):
            return [None]

    with pytest.raises(OpcheckError, match=r"gradient of input 0 disagrees .* analytic 0, numeric .* \(the gradient "
                                           r"rule returned None, i.e. zero\)"):
        opcheck("opcheck_cube_none", [[so.array(np.array([1.0, 2.0]))]])
    # where the op really does not depend on the input, None (zero) is right and passes
    assert opcheck("opcheck_cube_none", [[so.array(np.array([0.0]))]], grad_atol=1e-5) == 1


def test_one_input_can_be_left_out_of_the_gradient_check():
    @so.register("opcheck_scaled_by_data", replace=True)
    class Scaled(so.Op):
        """y = w * c: w gets a gradient, c (data, by design) none."""

        arguments = ("w", "c")

        @so.kernel(device="cpu")
        def dense(self, ctx, w, c, out):
            np.multiply(w, c, out=out)

        def gradient(self, out_grads, inputs, outputs):
            return [so.elemwise_mul(out_grads[0], inputs[1]), None]

    w, c = so.array(np.array([1.0, -2.0])), so.array(np.array([0.5, 3.0]))
    with pytest.raises(OpcheckError, match="gradient of input 1 disagrees"):
        opcheck("opcheck_scaled_by_data", [[w, c]])
    report = opcheck("opcheck_scaled_by_data", [[w, c]], skip={"gradient:c": "c is data"})
    (sample,) = report.results
    assert "gradient" in sample.compared and report.skipped()["gradient:c"] == {"skipped: c is data"}


# ---- eps: a non-smooth op with near ties ---------------------------------------------------------
@so.register("opcheck_row_top1", replace=True)
class RowTop1(so.Op):
    """Keep the largest value of each row, zero the others (a top-k with k = 1)."""

    backward_needs_inputs = ("data",)

    @so.kernel(device="cpu")
    def dense(self, ctx, data, out):
        out[...] = np.where(data == data.max(axis=1, keepdims=True), data, 0)

    def gradient(self, out_grads, inputs, outputs):
        x = inputs[0].asnumpy()
        return [so.elemwise_mul(out_grads[0], so.array((x == x.max(axis=1, keepdims=True)).astype(x.dtype)))]


def test_eps_keeps_finite_differences_off_near_ties():
    x = so.array(np.array([[1.0, 1.0002, -0.5], [0.3, 2.0, 2.0004]]))  # ties 2e-4 and 4e-4 apart
    with pytest.raises(OpcheckError, match="gradient of input 0 disagrees with finite differences"):
        opcheck("opcheck_row_top1", [[x]], eps=1e-3)  # eps 1e-3 steps across the ties
    report = opcheck("opcheck_row_top1", [[x]])  # the float64 default, eps 1e-6, does not
    assert "6 elements of input(s) [0] vs finite differences (eps 1e-06) in float64" in [
        o.detail for o in report.results[0].outcomes if o.check == "gradient"]


# ---- outputs --------------------------------------------------------------------------------------
def test_a_nondeterministic_kernel_names_the_worst_element():
    @so.register("opcheck_noisy", replace=True)
    class Noisy(so.Op):
        differentiable = False

        @so.kernel(device="cpu")
        def dense(self, ctx, data, out):
            out[...] = data + np.random.rand(*data.shape)

    with pytest.raises(OpcheckError, match=r"determinism: output 0 differs between two runs: 3 of 3 elements differ; "
                                           r"worst at index \(\d,\): first [\d.]+, second [\d.]+"):
        opcheck("opcheck_noisy", [[so.array(np.zeros(3))]])


def test_opcheck_refuses_an_empty_sample_list():
    with pytest.raises(OpcheckError, match="no samples given, so nothing was compared"):
        opcheck("opcheck_lazy_csr", [])


def test_check_gradient_is_per_element_and_compares_none():
    with pytest.raises(AssertionError, match=r"opcheck_cube_none: gradient of input 0 disagrees .*at index \(1,\)"):
        check_gradient("opcheck_cube_none", [so.array(np.array([0.1, 2.0]))])


# ---- the samples every op ships --------------------------------------------------------------------
def _matches(signature: tuple, stypes: tuple) -> bool:
    return len(signature) == len(stypes) and all(k in ("*", s) for k, s in zip(signature, stypes))


def _shipped_ops() -> list:
    """The built-in ops (as a fresh process lists them: this one also holds the ops other
    tests register) and, when installed, the cookbook's."""
    code = "import sparse_ops as so; print(' '.join(so.list_ops()))"
    env = {**os.environ, "SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD": "1"}
    names = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    try:
        import sparse_ops_cookbook  # noqa: F401
    except ImportError:
        pass
    return [so.get_op(n) for n in names.split()] + [d for d in so.registry.all_ops() if d.plugin == "cookbook"]


def test_every_shipped_op_has_samples_for_each_of_its_kernels():
    """Each storage-aware cpu kernel's input storage types (``*`` matching any) occur in some
    sample, and so does all-dense input where the op has a dense kernel."""
    ops = _shipped_ops()
    assert len(ops) >= 80
    gaps = {}
    for d in ops:
        seen = set()
        for sample in d.cls.samples():
            inputs = sample[0] if isinstance(sample, tuple) and len(sample) == 2 and isinstance(sample[1], dict) \
                else sample
            seen.add(tuple(x.stype for x in inputs))
        wanted = {st for (dev, st) in d.fcompute_ex if dev == "cpu" and "..." not in st and len(st) <= 3}
        missing = [st for st in wanted if not any(_matches(st, got) for got in seen)]
        if "cpu" in d.fcompute and d.arguments and not any(set(got) == {"default"} for got in seen):
            missing.append("all dense")
        if missing:
            gaps[d.name] = missing
    assert gaps == {}


# ---- errors the op raises on a sample are the failing check's finding ------------------------------
@pytest.mark.parametrize("where, check", [("kernel", "inference"), ("rule", "inference"), ("gradient", "gradient")])
def test_an_error_of_the_op_is_an_opcheck_failure_naming_sample_and_check(isolated, where, check):
    @so.register("opcheck_raising")
    class Raising(so.Op):
        fails = so.Param(str, "none")

        def infer_shape(self, x):
            if self.fails == "rule":
                raise ValueError("the rule refuses")
            return [x]

        @so.kernel(device="cpu")
        def dense(self, ctx, x, y):
            if self.fails == "kernel":
                raise RuntimeError("the kernel broke")
            y[...] = 2 * x

        def gradient(self, out_grads, inputs, outputs):
            if self.fails == "gradient":
                raise RuntimeError("the gradient broke")
            return [so.ops._mul_scalar(out_grads[0], scalar=2.0)]

    x = so.array(np.array([1.0, -2.0, 3.0]))
    with pytest.raises(OpcheckError, match=rf"opcheck_raising sample 1 \(default; {{'fails': '{where}'}}\): {check}: "
                                           r"\w*Error: operator 'opcheck_raising'") as info:
        opcheck("opcheck_raising", [[x], ([x], {"fails": where})])
    assert isinstance(info.value.__cause__, so.OperatorError)
    assert [s.label.startswith("opcheck_raising sample 0") for s in info.value.report.results][0]


def test_a_wrong_gpu_gradient_fails_the_gpu_check_in_the_simulator(tmp_path):
    """Forward kernels that agree and a gpu backward kernel that does not: opcheck's gpu check
    compares the gradients too (here in numba's CUDA simulator, in a child process)."""
    script = tmp_path / "gpu_grad.py"
    script.write_text(textwrap.dedent('''
        import numpy as np
        import sparse_ops as so
        from sparse_ops.sdk.testing import OpcheckError, opcheck

        def make(name, factor):
            @so.register(name)
            class Triple(so.Op):
                arguments = ("x",)

                @so.kernel(device=("cpu", "gpu"))
                def dense(self, ctx, x, y):
                    ctx.xp.multiply(x, 3.0, out=y)

                @so.backward_kernel(device="cpu")
                def back_cpu(self, ctx, g, x, dx):
                    ctx.xp.multiply(g, 3.0, out=dx)

                @so.backward_kernel(device="gpu")
                def back_gpu(self, ctx, g, x, dx):
                    ctx.xp.multiply(g, factor, out=dx)

        make("good_gpu_grad", 3.0)
        make("bad_gpu_grad", 300.0)
        x = so.array(np.array([1.0, 2.0, -1.0]))
        report = opcheck("good_gpu_grad", [[x]])
        print("GOOD", *[o.detail for o in report.results[0].outcomes if o.check == "gpu"])
        try:
            opcheck("bad_gpu_grad", [[x]])
        except OpcheckError as exc:
            print("BAD", exc)
        '''))
    env = {**os.environ, "SPARSE_OPS_CUDA_SIM": "1", "SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD": "1"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "GOOD gpu outputs equal the cpu outputs, and so do the gradients of 'x'" in out.stdout
    assert re.search(r"BAD bad_gpu_grad sample 0 \(default\): gpu: cpu and gpu disagree on the gradient of 'x': "
                     r"3 of 3 elements differ; worst at index \(\d,\): gpu -?[\d.]+, cpu -?[\d.]+", out.stdout), out.stdout
