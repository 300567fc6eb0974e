"""`sparse-ops check` on a C library that declares honestly what opcheck cannot check.

The library below (compiled with the system C compiler through ``sdk.cbuild``, warning-free
under ``-Wall -Wextra``) has

- ``ck_sign``: no gradient terms and no ``SO_OP_CONSTANT``: the header's "not
  differentiable". Differentiating through it is an error naming it, and opcheck skips its
  gradient check saying "not differentiable (no gradients declared)";
- ``ck_cube`` and its gradient helper ``ck_cube_grad``, which declares no gradient of its own
  and skips the gradient check with its own reason (an ``so_opcheck_skip``, ABI 1.1);
- ``ck_matmul``, which names the built-in ``dot`` as its reference (ABI 1.1): opcheck
  compares its outputs with dot's, and a wrong kernel fails there.

Built with ``-DSPARSE_OPS_TARGET_MINOR=0`` the same source gives the structs of ABI 1.0
(without the 1.1 fields, and followed in memory by bytes that are not those fields): such a
library still loads. ``-DCK_*`` flags make it wrong in one way each.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import sparse_ops as so
from sparse_ops import plugins, registry
from sparse_ops.cli import main
from sparse_ops.clib import abi
from sparse_ops.errors import OperatorError
from sparse_ops.sdk.cbuild import c_compiler, compile_library
from sparse_ops.sdk.testing import CHECKS, opcheck

pytestmark = pytest.mark.skipif(c_compiler() is None, reason="no C compiler")

NOT_DIFFERENTIABLE = "not differentiable (no gradients declared)"
HELPER_REASON = "a gradient helper: its own derivative (a second derivative of ck_cube) is not declared"

SOURCE = r"""
#include "sparse_ops.h"

SPARSE_OPS_LIBRARY("ckops 1.0");

#define KERNEL_ARGS const so_context* ctx, const so_params* params, int32_t n_in, const so_array* in, \
                    int32_t n_out, so_array* out, so_error* err
#define UNUSED (void)ctx; (void)params; (void)n_out

static int32_t float64_only(int32_t n_in, const so_array* in, so_error* err) {
  for (int32_t i = 0; i < n_in; ++i)
    if (in[i].dtype != SO_DTYPE_FLOAT64)
      return so_error_set(err, SO_ERR_UNSUPPORTED, "float64 only, input %d has dtype code %d", (int)i,
                          (int)in[i].dtype);
  return SO_OK;
}

static int32_t sign(KERNEL_ARGS) { /* ck_sign(x): -1, 0 or 1 */
  const double* x = (const double*)in[0].data;
  double* o = (double*)out[0].data;
  UNUSED;
  if (float64_only(n_in, in, err)) return SO_ERR_UNSUPPORTED;
  for (int64_t i = 0; i < out[0].nnz; ++i) o[i] = (x[i] > 0) - (x[i] < 0);
  return SO_OK;
}

static int32_t cube(KERNEL_ARGS) { /* ck_cube(x) = x^3 */
  const double* x = (const double*)in[0].data;
  double* o = (double*)out[0].data;
  UNUSED;
  if (float64_only(n_in, in, err)) return SO_ERR_UNSUPPORTED;
  for (int64_t i = 0; i < out[0].nnz; ++i) o[i] = x[i] * x[i] * x[i];
  return SO_OK;
}

static int32_t cube_grad(KERNEL_ARGS) { /* ck_cube_grad(g, x) = 3 x^2 g */
  const double* g = (const double*)in[0].data;
  const double* x = (const double*)in[1].data;
  double* o = (double*)out[0].data;
  UNUSED;
  if (float64_only(n_in, in, err)) return SO_ERR_UNSUPPORTED;
  for (int64_t i = 0; i < out[0].nnz; ++i) o[i] = 3.0 * x[i] * x[i] * g[i];
  return SO_OK;
}

static int32_t matmul_shape(const so_params* params, int32_t n_in, const so_shape* in, int32_t n_out,
                            so_shape* out, so_error* err) {
  (void)params; (void)n_in; (void)n_out;
  if (in[0].ndim != 2 || in[1].ndim != 2 || in[0].dims[1] != in[1].dims[0])
    return so_error_set(err, SO_ERR_INVALID_ARGUMENT, "ck_matmul takes (m, k) and (k, n) matrices");
  out[0].ndim = 2;
  out[0].dims[0] = in[0].dims[0];
  out[0].dims[1] = in[1].dims[1];
  return SO_OK;
}

static int32_t matmul(KERNEL_ARGS) { /* ck_matmul(a, b) = a @ b */
  const double* a = (const double*)in[0].data;
  const double* b = (const double*)in[1].data;
  double* o = (double*)out[0].data;
  int64_t m = in[0].shape[0], k = in[0].shape[1], n = in[1].shape[1];
  UNUSED;
  if (float64_only(n_in, in, err)) return SO_ERR_UNSUPPORTED;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) s += a[i * k + l] * b[l * n + j];
      o[i * n + j] = s;
    }
#ifdef CK_WRONG_MATMUL
  o[m * n - 1] += 1.0; /* a bug the reference must catch */
#endif
  return SO_OK;
}

static so_array dense(const double* values, int64_t rows, int64_t cols) {
  so_array a;
  SO_INIT(a);
  a.stype = SO_STYPE_DEFAULT;
  a.dtype = SO_DTYPE_FLOAT64;
  a.index_dtype = -1;
  a.ndim = 2;
  a.shape[0] = rows;
  a.shape[1] = cols;
  a.nnz = rows * cols;
  a.data = (void*)values;
  a.device_type = SO_DEVICE_CPU;
  return a;
}

/* The declaration, followed in memory by bytes that are no so_op_decl field: a host reading
   past struct_size (fields a library built for an older ABI minor does not have) reads these. */
typedef struct {
  so_op_decl op;
  unsigned char after[64];
} followed_decl;

static int32_t declare(const so_registrar* reg, so_error* err, const so_op_decl* op) {
  followed_decl d;
  d.op = *op;
  memset(d.after, 0xAB, sizeof d.after);
  return reg->register_op(reg->host, &d.op, err);
}

static so_kernel cpu_kernel(so_kernel_fn fn) {
  so_kernel k;
  SO_INIT(k);
  k.device_type = SO_DEVICE_CPU; /* stypes NULL: a dense kernel */
  k.fn = fn;
  return k;
}

SO_EXPORT int32_t sparse_ops_library_init(uint32_t host_abi_version, const so_registrar* reg, so_error* err) {
  static const char* const x_only[] = {"x"};
  static const char* const g_x[] = {"g", "x"};
  static const char* const a_b[] = {"a", "b"};
  static const char* const outs[] = {"out"};
  static const double X[] = {1.5, -2.0, 0.0, 0.75, -0.5, 3.0};
  static const double G[] = {0.5, 1.0, -1.5, 2.0, -0.25, 1.25};
  static const double B[] = {1.0, -1.0, 0.5, 2.0, -0.5, 0.25};
  so_array x = dense(X, 2, 3), g = dense(G, 2, 3), a = dense(X, 2, 3), b = dense(B, 3, 2);
  so_array gx[2], ab[2];
  so_sample one, two;
  so_kernel kernel;
  so_op_decl op;
  int32_t status;
  (void)host_abi_version;
  gx[0] = g; gx[1] = x;
  ab[0] = a; ab[1] = b;
  SO_INIT(one);
  one.n_inputs = 1;
  one.inputs = &x;
  SO_INIT(two);
  two.n_inputs = 2;

  /* ck_sign: no gradient terms, no SO_OP_CONSTANT: not differentiable */
  kernel = cpu_kernel(sign);
  SO_INIT(op);
  op.name = "ck_sign";
  op.doc = "-1, 0 or 1 by the sign of x";
  op.n_arguments = 1; op.arguments = x_only;
  op.n_outputs = 1; op.outputs = outs;
  op.n_kernels = 1; op.kernels = &kernel;
  op.n_samples = 1; op.samples = &one;
  if ((status = declare(reg, err, &op)) != SO_OK) return status;

  /* ck_cube: its gradient is ck_cube_grad(out_grad, x) */
  static const int32_t cube_grad_args[] = {SO_OUT_GRAD(0), SO_INPUT(0)};
  so_gradient grad;
  SO_INIT(grad);
  grad.input = 0;
  grad.op = "ck_cube_grad";
  grad.n_args = 2;
  grad.args = cube_grad_args;
  kernel = cpu_kernel(cube);
  op.name = "ck_cube";
  op.doc = "x ** 3";
  op.n_gradients = 1; op.gradients = &grad;
  if ((status = declare(reg, err, &op)) != SO_OK) return status;

  /* ck_cube_grad: a gradient helper, whose own gradient is not declared: says so */
  kernel = cpu_kernel(cube_grad);
  two.inputs = gx;
  op.name = "ck_cube_grad";
  op.doc = "3 x**2 g, the gradient of ck_cube";
  op.n_arguments = 2; op.arguments = g_x;
  op.n_gradients = 0; op.gradients = NULL;
  op.samples = &two;
#if SPARSE_OPS_TARGET_MINOR >= 1
  so_opcheck_skip skip = {SO_HEADER(so_opcheck_skip), "gradient",
                          "a gradient helper: its own derivative (a second derivative of ck_cube) is not declared"};
#if defined(CK_BAD_SKIP)
  skip.check = "gradients";
#elif defined(CK_EMPTY_REASON)
  skip.reason = "  ";
#endif
  op.n_opcheck_skips = 1; op.opcheck_skips = &skip;
#endif
  if ((status = declare(reg, err, &op)) != SO_OK) return status;

  /* ck_matmul: opcheck compares it with the built-in dot; gradients are dots too */
  static const int32_t grad_a_args[] = {SO_OUT_GRAD(0), SO_INPUT(1)};
  static const int32_t grad_b_args[] = {SO_INPUT(0), SO_OUT_GRAD(0)};
  static const char* const transpose_b[] = {"transpose_b"};
  static const char* const transpose_a[] = {"transpose_a"};
  static const char* const yes[] = {"1"};
  so_gradient grads[2];
  SO_INIT(grads[0]);
  grads[0].input = 0; grads[0].op = "dot"; grads[0].n_args = 2; grads[0].args = grad_a_args;
  grads[0].n_params = 1; grads[0].param_keys = transpose_b; grads[0].param_values = yes;
  grads[1] = grads[0];
  grads[1].input = 1; grads[1].args = grad_b_args; grads[1].param_keys = transpose_a;
  kernel = cpu_kernel(matmul);
  two.inputs = ab;
  op.name = "ck_matmul";
  op.doc = "a @ b for float64 matrices";
  op.arguments = a_b;
  op.infer_shape = matmul_shape;
  op.n_gradients = 2; op.gradients = grads;
#if SPARSE_OPS_TARGET_MINOR >= 1
  op.n_opcheck_skips = 0; op.opcheck_skips = NULL;
#if defined(CK_AWARE_ONLY)
  static const int32_t both_dense[] = {SO_STYPE_DEFAULT, SO_STYPE_DEFAULT};
  kernel.stypes = both_dense; kernel.n_stypes = 2; /* storage-aware only, nothing to compare it with */
  op.reference = NULL;
#elif defined(CK_BAD_REFERENCE)
  op.reference = "no_such_op";
#elif defined(CK_SELF_REFERENCE)
  op.reference = "ck_matmul";
#else
  op.reference = "dot";
#endif
#if defined(CK_BAD_CAPACITY)
  static const int32_t capacity_like[] = {2}; /* ck_matmul has inputs 0 and 1 only */
  op.capacity_like = capacity_like;
#endif
#endif
  return declare(reg, err, &op);
}
"""

STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """build(name, *flags): the library compiled as lib<name>.so (plugin <name>), once per module."""
    folder = tmp_path_factory.mktemp("clib_check")
    source = folder / "ckops.c"
    source.write_text(SOURCE)

    def build(name: str, *flags: str) -> Path:
        out = folder / f"lib{name}.so"
        if not out.exists():
            compile_library([source], out, flags=[*STRICT, *flags])
        return out

    return build


def check(capsys, target: Path) -> tuple[int, str]:
    """``sparse-ops check <target>``: the exit code and what it printed."""
    code = main(["check", str(target)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def line_of(output: str, op: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(f"  ok   {op}:") or
                line.startswith(f"  FAIL {op}:"))


# ---- the checker ---------------------------------------------------------------------------------------
def test_the_library_passes_sparse_ops_check_and_the_reasons_are_printed(build, isolated, capsys):
    code, out = check(capsys, build("ckops"))
    assert code == 0, out
    assert "4 operators checked (4 samples), 0 whose samples() raised, 0 failed, 0 without samples" in out
    assert line_of(out, "ck_sign") == ("  ok   ck_sign: 1 samples; compared: determinism, inference; "
                                       f"not compared: gradient (skipped: {NOT_DIFFERENTIABLE})")
    assert line_of(out, "ck_cube_grad") == ("  ok   ck_cube_grad: 1 samples; compared: determinism, inference; "
                                            f"not compared: gradient (skipped: {HELPER_REASON})")
    assert line_of(out, "ck_cube") == "  ok   ck_cube: 1 samples; compared: determinism, gradient, inference"
    assert line_of(out, "ck_matmul") == ("  ok   ck_matmul: 1 samples; compared: determinism, gradient, inference, "
                                         "reference")


def test_the_reference_op_is_what_opcheck_compares_with(build, isolated):
    so.library.load(build("ckops"))
    cls = so.get_op("ck_matmul").cls
    assert cls.reference_op == "dot"
    a, b = np.arange(6.0).reshape(2, 3), np.arange(6.0).reshape(3, 2) - 2
    np.testing.assert_array_equal(cls.reference(so.get_op("ck_matmul").instance({}), a, b)[0], a @ b)
    report = opcheck("ck_matmul", cls.samples())
    [outcome] = [o for o in report.results[0].outcomes if o.check == "reference"]
    assert (outcome.status, outcome.detail) == ("passed", "outputs vs its reference op 'dot' (fcompute kernel)")


def test_a_c_op_with_nothing_to_compare_is_told_the_c_declarations(build, isolated, capsys):
    """A storage-aware C kernel with no dense kernel and no reference: the advice names the
    so_op_decl fields a C author sets, not a Python method."""
    code, out = check(capsys, build("ckaware", "-DCK_AWARE_ONLY"))
    assert code == 1
    assert ("reference: compared nothing: the default,default kernel ran and the op has no dense kernel and no "
            "NumPy reference to compare it with; give a reference (so_op_decl.reference naming an op that computes "
            "the same outputs or opcheck(..., reference=fn)) or a dense kernel, or skip it with a reason "
            "(opcheck(..., skip={'reference': 'why'}) or so_opcheck_skip {\"reference\", \"why\"} in the op's "
            "declaration)") in out


def test_a_kernel_that_disagrees_with_its_reference_fails_the_check(build, isolated, capsys):
    code, out = check(capsys, build("ckwrong", "-DCK_WRONG_MATMUL"))
    assert code == 1
    assert ("  FAIL ck_matmul: OpcheckError: ck_matmul sample 0 (default, default): reference: output 0 and its "
            "reference op 'dot' disagree: 1 of 4 elements differ; worst at index (1, 1)") in out
    assert "1 failed" in out


# ---- not differentiable --------------------------------------------------------------------------------
def test_an_op_without_gradients_is_not_differentiable_and_says_so(build, isolated):
    so.library.load(build("ckops"))
    opdef = so.get_op("ck_sign")
    assert (opdef.constant, opdef.differentiable) == (False, False)
    assert opdef.cls.opcheck_skip == {"gradient": NOT_DIFFERENTIABLE}
    report = opcheck("ck_sign", opdef.cls.samples())
    assert report.summary() == f"1 samples; compared: determinism, inference; not compared: gradient (skipped: " \
                               f"{NOT_DIFFERENTIABLE})"
    x = so.array(np.array([[1.5, -2.0], [0.0, 4.0]]))
    x.attach_grad()
    with so.autograd.record():
        y = so.ops.ck_sign(x)
    np.testing.assert_array_equal(y.asnumpy(), [[1.0, -1.0], [0.0, 1.0]])
    with pytest.raises(OperatorError, match=r"operator 'ck_sign' \(plugin ckops\) declares no gradient, so "
                                            r"autograd cannot differentiate through it to input 0 \('x'\); "
                                            r"declare so_gradient terms, or SO_OP_CONSTANT"):
        y.backward()


def test_a_declared_skip_reason_wins_and_gradients_through_the_helper_work(build, isolated):
    so.library.load(build("ckops"))
    assert so.get_op("ck_cube_grad").cls.opcheck_skip == {"gradient": HELPER_REASON}
    assert not hasattr(so.get_op("ck_cube").cls, "opcheck_skip")  # differentiable: nothing skipped
    x = so.array(np.array([1.0, -2.0, 0.5]))
    x.attach_grad()
    with so.autograd.record():
        y = so.ops.ck_cube(x)
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 3 * np.array([1.0, -2.0, 0.5]) ** 2)


# ---- ABI 1.0 libraries ---------------------------------------------------------------------------------
def test_a_library_built_for_abi_1_0_still_loads(build, isolated, capsys):
    """The 1.0 so_op_decl is smaller and followed by 0xAB bytes: the host reads none of them."""
    path = build("ckold", "-DSPARSE_OPS_TARGET_MINOR=0")
    module = so.library.load(path)
    assert module.library.abi_version == (1 << 16) | 0
    assert sorted(module.library.ops) == ["ck_cube", "ck_cube_grad", "ck_matmul", "ck_sign"]
    assert not hasattr(so.get_op("ck_matmul").cls, "reference")  # 1.0 has no reference field
    # ABI 1.0 had no skips: the helper is "not differentiable" like any op without gradients
    assert so.get_op("ck_cube_grad").cls.opcheck_skip == {"gradient": NOT_DIFFERENTIABLE}
    code, out = check(capsys, path)
    assert code == 0, out
    assert line_of(out, "ck_matmul") == "  ok   ck_matmul: 1 samples; compared: determinism, gradient, inference"


def test_each_older_abi_so_op_decl_is_a_prefix_of_the_newer_one(tmp_path):
    """Compiled with SPARSE_OPS_TARGET_MINOR=m the header gives ABI 1.m's layout: 1.0's is the
    size the host accepts as the smallest, 1.1's ends where the host's 1.2 fields begin,
    1.2's is the host's whole struct; each with its version."""
    source = tmp_path / "sizes.c"
    source.write_text('#include <stdio.h>\n#include "sparse_ops.h"\n'
                      'int main(void) { printf("%u %u\\n", (unsigned)sizeof(so_op_decl), '
                      '(unsigned)SPARSE_OPS_ABI_VERSION); return 0; }\n')
    printed = {}
    for minor in (0, 1, 2):
        exe = tmp_path / f"sizes{minor}"
        subprocess.run([c_compiler(), f"-DSPARSE_OPS_TARGET_MINOR={minor}", f"-I{so.sdk.include_dir()}",
                        str(source), "-o", str(exe)], check=True)
        printed[minor] = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    assert printed[0] == [str(abi.minimum_size(abi.OpDecl)), str(1 << 16)]
    assert printed[1] == [str(abi.OpDecl.n_partition_args.offset), str((1 << 16) | 1)]
    assert printed[2] == [str(ctypes.sizeof(abi.OpDecl)), str((1 << 16) | 2)]
    assert abi.minimum_size(abi.OpDecl) < abi.OpDecl.n_partition_args.offset < ctypes.sizeof(abi.OpDecl)
    assert not abi.has_field(abi.OpDecl, int(printed[1][0]), "partition_args")
    assert abi.has_field(abi.OpDecl, int(printed[1][0]), "capacity_like")


# ---- refusals ------------------------------------------------------------------------------------------
BAD = [
    ("CK_BAD_SKIP", r"operator 'ck_cube_grad': opcheck_skips\[0\]\.check is 'gradients', not a check of "
                    r"opcheck; allowed: inference, format, determinism, reference, gradient, gpu, gradient:g, "
                    r"gradient:x"),
    ("CK_EMPTY_REASON", r"operator 'ck_cube_grad': opcheck_skips\[0\]\.reason is empty: say why 'gradient' is "
                        r"skipped"),
    ("CK_BAD_REFERENCE", r"operator 'ck_matmul': its reference names operator 'no_such_op', which is neither in "
                         r"the library \(ck_sign, ck_cube, ck_cube_grad, ck_matmul\) nor in the table; allowed: an "
                         r"op of the library or a registered op"),
    ("CK_SELF_REFERENCE", r"operator 'ck_matmul': reference is 'ck_matmul'; allowed: NULL or the name of another "
                          r"op"),
    ("CK_BAD_CAPACITY", r"operator 'ck_matmul': capacity_like\[0\] \(output 'out'\) is 2; allowed: "
                        r"SO_CAPACITY_NONE \(-1\) or an input index 0..1"),
]


@pytest.mark.parametrize("flag,message", BAD, ids=[b[0] for b in BAD])
def test_a_wrong_skip_or_reference_refuses_the_library_naming_it_the_op_and_what_is_allowed(
        build, isolated, flag, message):
    before = registry.list_ops()
    path = build(flag.lower(), f"-D{flag}")
    with pytest.raises(plugins.PluginError, match=message) as info:
        so.library.load(path)
    assert f"library {path}" in str(info.value)
    assert registry.list_ops() == before


def test_the_skippable_checks_are_opchecks_own():
    """The names the loader accepts (a copy: sparse_ops.clib cannot import sdk.testing without
    an import cycle) are opcheck's, and the header lists the same."""
    assert abi.OPCHECK_CHECKS == tuple(CHECKS)
    header = (Path(so.sdk.include_dir()) / "sparse_ops.h").read_text()
    assert '"inference", "format",\n   "determinism", "reference", "gradient", "gpu"' in header


# ---- the header's own example ----------------------------------------------------------------------------
def test_the_headers_example_compiles_warning_free_and_passes_the_check(tmp_path, isolated, capsys):
    source = tmp_path / "example.c"
    source.write_text('#define SPARSE_OPS_HEADER_EXAMPLE\n#include "sparse_ops.h"\n')
    library = compile_library([source], tmp_path / "libheader_example.so", flags=STRICT)
    cxx = subprocess.run(["g++", "-x", "c++", "-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic",
                          f"-I{so.sdk.include_dir()}", "-c", str(source), "-o", str(tmp_path / "example.o")],
                         capture_output=True, text=True) if shutil.which("g++") else None
    assert cxx is None or cxx.returncode == 0, cxx.stderr
    code, out = check(capsys, library)
    assert code == 0, out
    assert line_of(out, "ex_negate") == ("  ok   ex_negate: 1 samples; compared: determinism, gradient, inference, "
                                         "reference")
    assert line_of(out, "ex_step").endswith(f"not compared: gradient (skipped: {NOT_DIFFERENTIABLE})")


@pytest.mark.parametrize("minor", [0, 1])
def test_the_headers_example_builds_for_each_older_abi_minor(tmp_path, minor):
    """The guide says `#define SPARSE_OPS_TARGET_MINOR 0` builds for ABI 1.0: the example's
    fields of later minors are guarded as the structs' are."""
    source = tmp_path / "example.c"
    source.write_text(f'#define SPARSE_OPS_TARGET_MINOR {minor}\n#define SPARSE_OPS_HEADER_EXAMPLE\n'
                      '#include "sparse_ops.h"\n')
    compile_library([source], tmp_path / f"libheader_example_{minor}.so", flags=STRICT)


def test_a_partial_initialiser_warns_under_wextra_and_so_init_does_not(tmp_path):
    """Why the header documents SO_INIT: ``{SO_HEADER(so_op_decl)}`` leaves fields to the
    compiler's zeroing, which -Wextra reports."""
    source = tmp_path / "init.c"
    for body, warns in (("so_op_decl op = {SO_HEADER(so_op_decl)};", True), ("so_op_decl op; SO_INIT(op);", False)):
        source.write_text('#include "sparse_ops.h"\nint f(void);\n'
                          f'int f(void) {{ {body} return (int)op.struct_size; }}\n')
        result = subprocess.run([c_compiler(), "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{so.sdk.include_dir()}",
                                 "-c", str(source), "-o", str(tmp_path / "init.o")], capture_output=True, text=True)
        assert (result.returncode != 0) == warns, result.stderr
        if warns:
            assert "missing-field-initializers" in result.stderr


# ---- the same fields declared from Python (numba cfunc kernels) -------------------------------------------
def test_register_op_from_python_takes_a_reference_and_skips(isolated):
    import numba

    from sparse_ops.clib.load import LibraryError
    from sparse_ops.clib.python import register_op
    from sparse_ops.sdk import cabi

    @numba.cfunc(cabi.KERNEL)
    def negate(ctx, params, n_in, ins, n_out, outs, err):
        if cabi.dtype_code(ins, 0) != 1:
            return cabi.ERR_UNSUPPORTED
        x, o = cabi.values(ins, 0, numba.float64), cabi.values(outs, 0, numba.float64)
        for i in range(o.size):
            o[i] = -x[i]
        return cabi.OK

    reason = "checked against the C library's own tests"
    register_op("ck_py_negate", kernels=[("cpu", None, negate)], reference="negative",
                opcheck_skip={"gradient": reason})
    sample = [([so.array(np.array([[1.0, -2.0], [0.5, 3.0]]))], {})]
    assert opcheck("ck_py_negate", sample).summary() == ("1 samples; compared: determinism, inference, reference; "
                                                         f"not compared: gradient (skipped: {reason})")
    with pytest.raises(LibraryError, match=r"operator 'ck_py_nowhere': its reference names operator 'no_such_op', "
                                           r"which is neither in the library \(ck_py_nowhere\) nor in the table"):
        register_op("ck_py_nowhere", kernels=[("cpu", None, negate)], reference="no_such_op")
    with pytest.raises(LibraryError, match=r"operator 'ck_py_badskip': opcheck_skips\[0\]\.check is 'speed', not a "
                                           r"check of opcheck; allowed: inference, format"):
        register_op("ck_py_badskip", kernels=[("cpu", None, negate)], opcheck_skip={"speed": "slow"})
    assert "ck_py_nowhere" not in registry.list_ops() and "ck_py_badskip" not in registry.list_ops()
