"""Operator libraries in C (``sparse_ops.h``): loading, every part of a declaration, errors.

The libraries are compiled here with the system C compiler, as users build them
(``tests/clib/*.c``). ``testops.c`` exercises the whole header; ``badlib.c`` is wrong in one
way per ``-D`` flag; ``factor.c`` is built twice to test reloading (and gradients across it).
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so
from sparse_ops import plugins, registry
from sparse_ops.errors import OperatorError, StorageFallbackWarning
from sparse_ops.sdk.cbuild import c_compiler, compile_library
from sparse_ops.sdk.testing import check_gradient, opcheck

HERE = Path(__file__).resolve().parent / "clib"
pytestmark = pytest.mark.skipif(c_compiler() is None, reason="no C compiler")


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clib")

    def build(source: str, name: str, *flags: str) -> Path:
        out = folder / name
        if not out.exists():
            compile_library([HERE / source], out, flags=["-Wall", "-Werror", "-Wno-unused-parameter",
                                                         "-Wno-unused-variable", "-Wno-unused-function", *flags])
        return out

    return build


@pytest.fixture(scope="module")
def testops(build):
    """libtestops.so loaded for this module's tests, and the table as it was afterwards."""
    table, loaded = registry.snapshot(), dict(plugins._LOADED)
    attrs = set(vars(so.ops))
    module = so.library.load(build("testops.c", "libtestops.so"))
    yield module
    registry.restore(table)
    plugins._LOADED.clear()
    plugins._LOADED.update(loaded)
    for attr in set(vars(so.ops)) - attrs:
        delattr(so.ops, attr)


def install(built: Path, target: Path) -> None:
    """Put a build at ``target`` as compilers and ``install`` do: a new file renamed over the old
    one (writing into a loaded library's file would change code the process is running)."""
    fresh = target.with_name(target.name + ".new")
    fresh.write_bytes(built.read_bytes())
    os.replace(fresh, target)


def dense(shape, dtype="float64", seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ---- the ABI itself ---------------------------------------------------------------------------------
def test_ctypes_mirror_matches_the_header_layout(tmp_path):
    """Every struct's size and every field's offset, as the C compiler lays them out, equal the
    ctypes mirror in sparse_ops.clib.abi; and the codes agree."""
    from sparse_ops.clib import abi

    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "sparse_ops.h"', "int main(void) {"]
    for cname, struct in abi.STRUCTS.items():
        lines.append(f'printf("{cname} size %zu\\n", sizeof({cname}));')
        for field, _ in struct._fields_:
            lines.append(f'printf("{cname}.{field} %zu\\n", offsetof({cname}, {field}));')
    codes = {"SPARSE_OPS_ABI_VERSION": abi.ABI_VERSION, "SO_DTYPE_FLOAT32": 0, "SO_DTYPE_FLOAT64": 1,
             "SO_DTYPE_FLOAT16": 2, "SO_DTYPE_INT32": 4, "SO_DTYPE_INT64": 6, "SO_STYPE_CSR": 2,
             "SO_STYPE_ROW_SPARSE": 1, "SO_STYPE_ANY": -1, "SO_MAX_NDIM": abi.MAX_NDIM,
             "SO_ERROR_MESSAGE_SIZE": abi.ERROR_MESSAGE_SIZE, "SO_OUT_GRAD(3)": (abi.REF_OUT_GRAD << 16) | 3,
             "SO_OUTPUT(1)": (abi.REF_OUTPUT << 16) | 1, "SO_PARTITION_SUM": 2, "SO_RESOURCE_RANDOM": 2}
    for name in codes:
        lines.append(f'printf("{name} %lld\\n", (long long)({name}));')
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines + ["return 0; }"]))
    exe = tmp_path / "layout"
    subprocess.run([c_compiler(), f"-I{so.sdk.include_dir()}", str(source), "-o", str(exe)], check=True)
    printed = dict(line.rsplit(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                                   check=True).stdout.splitlines())
    for cname, struct in abi.STRUCTS.items():
        assert int(printed[f"{cname} size"]) == ctypes.sizeof(struct), cname
        for field, _ in struct._fields_:
            assert int(printed[f"{cname}.{field}"]) == getattr(struct, field).offset, f"{cname}.{field}"
    for name, value in codes.items():
        assert int(printed[name]) == value, name


def test_the_header_compiles_as_c89_free_c99_and_as_cplusplus(tmp_path):
    source = tmp_path / "only.c"
    source.write_text('#include "sparse_ops.h"\nint main(void) { return SO_OK; }\n')
    for compiler, std in ((c_compiler(), "-std=c99"), ("g++", "-std=c++11")):
        if compiler == "g++" and not any(os.access(os.path.join(p, "g++"), os.X_OK)
                                         for p in os.environ.get("PATH", "").split(os.pathsep)):
            continue
        lang = ["-x", "c++"] if compiler == "g++" else []
        subprocess.run([compiler, *lang, std, "-Wall", "-Wextra", "-Werror", "-pedantic",
                        f"-I{so.sdk.include_dir()}", str(source), "-o", str(tmp_path / "only")], check=True)


def test_include_dir_holds_the_header():
    assert (Path(so.sdk.include_dir()) / "sparse_ops.h").is_file()


# ---- loading -------------------------------------------------------------------------------------------
def test_a_loaded_library_is_a_plugin_of_the_table(testops):
    info = so.plugins_info()["loaded"]["testops"]
    assert info["version"] == "testops 1.2"
    assert info["ops"] == ["t_axpy", "t_badcsr", "t_badinfer", "t_count", "t_fail", "t_scale", "t_sum",
                           "t_threshold", "t_uniform"]
    owner = registry.owner_of("t_axpy")
    assert owner.kind == "library" and owner.plugin == "testops"
    assert sorted(testops.library.ops) == info["ops"]  # (in declaration order)
    assert "alpha: float, default 1.0 — the factor of x" in so.get_op("t_axpy").describe()
    assert so.get_op("t_axpy").doc == "alpha * x + y"


def test_loading_again_is_a_no_op_and_an_edit_needs_reload(build, isolated, tmp_path):
    lib = tmp_path / "libfactor.so"
    install(build("factor.c", "libfactor2.so", "-DFACTOR=2"), lib)
    first = so.library.load(lib)
    assert so.library.load(lib) is first
    x = so.array(np.arange(4.0))
    np.testing.assert_array_equal(so.ops.factor_times(x).asnumpy(), 2 * np.arange(4.0))
    install(build("factor.c", "libfactor3.so", "-DFACTOR=3"), lib)
    with pytest.raises(plugins.PluginError, match=r"changed since it was loaded; sparse_ops.library.reload"):
        so.library.load(lib)
    second = so.library.reload(lib)
    assert second.__version__ == "factor 3" and first.__version__ == "factor 2"
    np.testing.assert_array_equal(so.ops.factor_times(x).asnumpy(), 3 * np.arange(4.0))


def test_the_same_file_by_another_path_is_the_module_loaded_first(build, isolated, tmp_path):
    """A symlink to a loaded library does not run its init again (which would refuse its own
    ops as registered by another plugin); the same file under another name= is refused,
    saying the name its ops carry, and leaves the plugin as it was."""
    lib = tmp_path / "libfactor.so"
    install(build("factor.c", "libfactor2.so", "-DFACTOR=2"), lib)
    first = so.library.load(lib)
    link = tmp_path / "libfactorlink.so"
    link.symlink_to(lib)
    assert so.library.load(link) is first
    assert so.library.load(lib, name="factor") is first
    with pytest.raises(plugins.PluginError, match=r"already loaded as plugin 'factor'; .* cannot be loaded as 'other'"):
        so.library.load(lib, name="other")
    assert "factorlink" not in so.plugins_info()["failed"] and "other" not in so.plugins_info()["loaded"]
    np.testing.assert_array_equal(so.ops.factor_times(so.array(np.arange(3.0))).asnumpy(), 2 * np.arange(3.0))


def test_check_and_info_name_so_sample_for_a_c_op(build, isolated, tmp_path, capsys):
    """A C op without samples is reported in the C author's terms (its so_op_decl), not as a
    missing Python classmethod."""
    from sparse_ops.cli import main

    lib = tmp_path / "libfactor.so"
    install(build("factor.c", "libfactor2.so", "-DFACTOR=2"), lib)
    assert main(["check", str(lib)]) == 1
    out = capsys.readouterr().out
    assert ("FAIL factor_times: its so_op_decl declares no samples (n_samples, samples: so_sample), so nothing "
            "was checked") in out
    assert main(["info", "factor_times"]) == 0
    assert "sample inputs: none" in capsys.readouterr().out


def test_a_failed_reload_keeps_the_loaded_version(build, isolated, tmp_path):
    lib = tmp_path / "libfactor.so"
    install(build("factor.c", "libfactor2.so", "-DFACTOR=2"), lib)
    so.library.load(lib)
    install(build("badlib.c", "libbad_init.so", "-DINIT_FAILS"), lib)
    with pytest.raises(plugins.PluginError, match="the version loaded before stays.*could not find the license"):
        so.library.reload(lib)
    np.testing.assert_array_equal(so.ops.factor_times(so.array(np.ones(2))).asnumpy(), [2.0, 2.0])


BAD = [
    ("NO_INIT", r"no entry point sparse_ops_library_init"),
    ("NO_VERSION", r"missing symbol sparse_ops_library_abi_version"),
    ("WRONG_MAJOR", r"built for sparse_ops ABI 2\.0, but this sparse_ops speaks ABI 1\.2"),
    ("NEWER_MINOR", r"built for sparse_ops ABI 1\.7, newer than this sparse_ops \(ABI 1\.2\)"),
    ("TAKEN", r"operator 'elemwise_add' is already registered \(owner: a built-in\); a C library cannot replace "
              r"an operator: give its so_op_decl another name"),
    ("NO_HEADER", r"so_op_decl has struct_size 0, but an ABI 1\.2 so_op_decl has \d+ bytes \(at least \d+ in "
                  r"ABI 1\.0\)"),
    ("BAD_NAME", r"operator name 'not an identifier' is not an ASCII identifier or is a Python keyword"),
    ("NO_KERNEL", r"operator 'bad_no_kernel': kernels\[0\]\.fn is NULL"),
    ("BAD_GRADIENT_OP", r"operator 'bad_gradient': its gradient names operator 'no_such_op'"),
    ("IGNORES_REFUSAL", r"operator 'bad_first' is already registered"),
    ("REPEATED_PARAM", r"operator 'bad_repeated_param': parameter name 'alpha' repeats another parameter"),
    ("UNKNOWN_FLAGS", r"operator 'bad_unknown_flags': flags 0xff sets bits no flag has; allowed: SO_OP_CONSTANT"),
    ("UNKNOWN_RESOURCES", r"operator 'bad_unknown_resources': resources 0xf0 sets bits no resource has; allowed: "
                          r"SO_RESOURCE_WORKSPACE, SO_RESOURCE_RANDOM"),
    ("INIT_FAILS", r"sparse_ops_library_init returned SO_ERR_INTERNAL: could not find the license file"),
    ("NOTHING", r"sparse_ops_library_init registered no operators"),
    ("SAMPLE_DENSE_NNZ", r"operator 'bad_sample': samples\[0\]\.inputs\[0\]: a dense sample's nnz \(6\) must be its "
                         r"number of elements, 1000000 for shape \(1000, 1000\)"),
    ("SAMPLE_RSP_NNZ", r"operator 'bad_sample': samples\[0\]\.inputs\[0\]: a row_sparse sample of shape \(2, 3\) "
                       r"stores at most 2 rows, its nnz is 10000000"),
    ("SAMPLE_CSR_END", r"operator 'bad_sample': samples\[0\]\.inputs\[0\]: indptr\[3\] = 5, but nnz is 6"),
    ("SAMPLE_COUNT", r"operator 'bad_sample': samples\[0\]: n_inputs is 3, but the op takes 1 input\(s\) \(x: its "
                     r"arguments, then its aux states\)"),
    ("NO_INPUT_RULES", r"operator 'bad_no_inputs' takes no inputs, so its outputs' shapes and dtypes follow none: "
                       r"declare infer_shape and infer_type"),
]


@pytest.mark.parametrize("flag,message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_library_is_refused_by_name_and_leaves_the_table_as_it_was(build, isolated, flag, message):
    before = registry.list_ops()
    lib = build("badlib.c", f"libbad_{flag.lower()}.so", f"-D{flag}")
    with pytest.raises(plugins.PluginError) as info:
        so.library.load(lib)
    assert f"library {lib}" in str(info.value)
    assert info.match(message)
    assert registry.list_ops() == before
    assert f"bad_{flag.lower()}" in so.plugins_info()["failed"]
    np.testing.assert_array_equal(so.elemwise_add(so.array([1.0]), so.array([2.0])).asnumpy(), [3.0])


def test_a_file_that_is_not_a_library(isolated, tmp_path):
    fake = tmp_path / "libfake.so"
    fake.write_text("not an ELF file")
    with pytest.raises(plugins.PluginError, match=r"library .*libfake\.so: cannot be opened"):
        so.library.load(fake)


def test_register_shared_attributes_ops_to_the_loading_plugin(build, isolated, tmp_path):
    lib = build("factor.c", "libfactor2.so", "-DFACTOR=2")
    pkg = tmp_path / "cfactor"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(f"import sparse_ops\nlibrary = sparse_ops.library.register_shared({str(lib)!r})\n")
    module = so.library.load(pkg)
    ops = ["factor_times", "factor_scaled", "factor_axpy"]
    assert module.library.ops == ops
    assert so.plugins_info()["loaded"]["cfactor"]["ops"] == sorted(ops)


# ---- calling ops -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_dense_kernel_values_and_parameters(testops, dtype):
    x, y = dense((3, 5), dtype, 1), dense((3, 5), dtype, 2)
    got = so.ops.t_axpy(so.array(x), so.array(y), alpha=2.5)
    assert got.dtype == np.dtype(dtype) and got.stype == "default"
    np.testing.assert_allclose(got.asnumpy(), (2.5 * x.astype(np.float64) + y).astype(dtype), rtol=1e-6)
    np.testing.assert_array_equal(so.ops.t_axpy(so.array(x), so.array(y)).asnumpy(),
                                  (x.astype(np.float64) + y).astype(dtype))


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_dtypes_the_c_abi_does_not_carry_are_refused_by_name(testops, dtype):
    """The MXNet face holds int8 and uint8, which the C ABI has no code for: refused at type
    inference naming the op and the input (a KeyError escaped from the call before)."""
    import sparse_ops.compat.mxnet as mx

    x = mx.nd.array(np.arange(3), dtype=dtype)
    for call in (lambda: so.ops.t_axpy(x, x), lambda: mx.nd.t_axpy(x, x)):
        with pytest.raises(OperatorError, match=rf"operator 't_axpy'.*input 0 \('x'\) has dtype {dtype}, which a C "
                                                r"library's kernels do not take"):
            call()
    y = mx.nd.array(np.arange(3), dtype="float64")
    np.testing.assert_array_equal(so.ops.t_axpy(y, y).asnumpy(), 2 * np.arange(3.0))


def test_a_kernel_error_names_op_library_and_message_and_nothing_breaks(testops):
    x = so.array(np.ones(3, np.float16))
    with pytest.raises(OperatorError) as info:
        so.ops.t_axpy(x, x)
    text = str(info.value)
    assert "operator 't_axpy'" in text and "libtestops.so" in text
    assert "SO_ERR_UNSUPPORTED: float16 is not supported" in text
    a = so.array(np.arange(3.0))
    a.attach_grad()
    for code, name in ((1, "SO_ERR_INVALID_ARGUMENT"), (4, "SO_ERR_INTERNAL"), (77, "status 77")):
        with so.autograd.record():
            with pytest.raises(OperatorError, match=f"{name}: asked to fail with {code}"):
                so.ops.t_fail(a, code=code)
    with so.autograd.record():
        b = so.ops.t_fail(a)
    b.backward(so.array(np.full(3, 2.0)))
    np.testing.assert_array_equal(a.grad.asnumpy(), [2.0, 2.0, 2.0])


def test_an_int_parameter_past_int64_is_refused_before_c_reads_it(testops):
    """``so_param_int`` reads an SO_PARAM_INT with strtoll, which clamps what does not fit
    int64: such a value is refused naming the op and the parameter, not handed over."""
    a = so.array(np.arange(3.0))
    for big in (2**63, -2**63 - 1, 2**64 + 1):
        with pytest.raises(so.registry.ParameterError, match=r"t_fail.*code.*does not fit the C library's int64"):
            so.ops.t_fail(a, code=big)
    with pytest.raises(OperatorError, match="asked to fail with 4"):
        so.ops.t_fail(a, code=4)


def test_a_shape_parameter_entry_past_int64_is_refused_as_an_int_parameter_is():
    """An SO_PARAM_SHAPE value reaches C as text each entry of which ``strtoll`` would clamp:
    the parameter that ``sparse_ops.library`` declares for it refuses such an entry."""
    from sparse_ops.clib import abi
    from sparse_ops.clib.declare import ParamSpec, make_param

    dims = make_param(ParamSpec("dims", abi.PARAM_SHAPE, "(2, 3)", ""), "t_shape")
    dims.name = "dims"
    assert dims.default == (2, 3) and dims.parse((2**62, 1), "operator 't_shape'") == (2**62, 1)
    for big in ((2**70, 3), (1, 2**63)):
        with pytest.raises(so.registry.ParameterError, match=r"t_shape.*dims.*does not fit the C library's int64"):
            dims.parse(big, "operator 't_shape'")


def test_non_contiguous_inputs_reach_the_kernel_as_contiguous_copies(testops):
    from sparse_ops.clib.trampoline import NOT_CONTIGUOUS, call_dense

    x = dense((4, 6))
    out = np.empty((4, 3))
    assert call_dense(np.array([0, 0, 0, 0, 1], np.int64), x[:, ::2], out) == NOT_CONTIGUOUS
    inst, ctx = so.get_op("t_scale").instance({"alpha": 3.0}), so.dispatch.OpContext(so.cpu(), False, so.get_op("t_scale"))
    so.get_op("t_scale").fcompute["cpu"](inst, ctx, x[:, ::2], out)
    np.testing.assert_array_equal(out, 3.0 * x[:, ::2])


def test_gradients_are_the_declared_ops(testops):
    x, y = so.array(dense((2, 3), seed=3)), so.array(dense((2, 3), seed=4))
    x.attach_grad()
    y.attach_grad()
    g = dense((2, 3), seed=5)
    with so.autograd.record():
        z = so.ops.t_axpy(x, y, alpha=-1.5)
    z.backward(so.array(g))
    np.testing.assert_allclose(x.grad.asnumpy(), -1.5 * g)
    np.testing.assert_allclose(y.grad.asnumpy(), g)
    check_gradient("t_axpy", [x, y], {"alpha": 0.75})
    check_gradient("t_scale", [so.array(dense((3, 3), seed=6)).tostype("csr")], {"alpha": 2.0})
    kept = so.get_op("t_axpy")
    assert kept.backward_inputs == () and kept.backward_outputs == ()  # gradients read only the head gradient


def test_opcheck_runs_the_declared_samples(testops):
    for op, n in (("t_axpy", 2), ("t_scale", 2), ("t_threshold", 1)):
        samples = so.get_op(op).cls.samples()
        assert opcheck(op, samples) == n


def test_storage_aware_kernel_and_storage_inference(testops):
    a = sp.random(40, 30, density=0.1, format="csr", random_state=7, dtype=np.float64)
    for index in (np.int32, np.int64):
        x = so.csr_matrix((a.data, a.indices.astype(index), a.indptr.astype(index)), shape=a.shape)
        plan = so.explain("t_scale", x, alpha=-2.0)
        assert plan["dispatch_mode"] == "fcompute_ex" and plan["out_stypes"] == ["csr"]
        got = so.ops.t_scale(x, alpha=-2.0)
        assert got.stype == "csr" and got.indices.dtype == index
        np.testing.assert_array_equal(got.asscipy().toarray(), -2.0 * a.toarray())
    r = so.array(a.toarray()).tostype("row_sparse")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = so.ops.t_scale(r, alpha=0.5)
    assert any(issubclass(w.category, StorageFallbackWarning) for w in caught)
    assert got.stype == "default"
    np.testing.assert_array_equal(got.asnumpy(), 0.5 * a.toarray())


def test_workspace_resource(testops):
    x = dense((37, 11), seed=8)
    got = so.ops.t_sum(so.array(x))
    assert got.shape == (1,)
    np.testing.assert_allclose(got.asnumpy(), [x.sum()])


def test_a_constant_c_op_is_named_by_its_flag_not_the_python_attribute(testops):
    """An SO_OP_CONSTANT op's constant outputs, and explain's account of them, name the C flag
    the author wrote."""
    x = so.array(dense((3, 4), seed=2))
    x.attach_grad()
    with so.autograd.record():
        total = so.sum(so.ops.t_sum(x))
    with pytest.raises(OperatorError, match=r"the output of operator 't_sum': it is declared SO_OP_CONSTANT, so its "
                                            r"outputs are constants"):
        total.backward()
    described = so.explain("t_sum", x)
    assert described["backward"]["gradient"] == "none: the outputs are constants (SO_OP_CONSTANT)"
    assert described["faces"]["torch.grad"].startswith("its outputs are constants (SO_OP_CONSTANT)")


def test_the_seed_follows_sparse_ops_random(testops):
    x = so.array(np.zeros((50, 4)))
    so.random.seed(11)
    a = so.ops.t_uniform(x).asnumpy()
    b = so.ops.t_uniform(x).asnumpy()
    so.random.seed(11)
    c = so.ops.t_uniform(x).asnumpy()
    assert a.dtype == np.float64 and ((0 <= a) & (a < 1)).all() and np.unique(a).size == a.size
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    assert so.ops.t_uniform(so.array(np.zeros(3, np.int32))).dtype == np.float32


@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_an_output_of_unknown_nnz_through_alloc_output(testops, index):
    a = sp.random(60, 25, density=0.2, format="csr", random_state=9, dtype=np.float64)
    a.data -= 0.5
    x = so.csr_matrix((a.data, a.indices.astype(index), a.indptr.astype(index)), shape=a.shape)
    got = so.ops.t_threshold(x, threshold=0.25)
    want = a.copy()
    want.data[np.abs(want.data) <= 0.25] = 0
    want.eliminate_zeros()
    assert got.stype == "csr" and got.nnz == want.nnz
    got.check_format(full_check=True)
    np.testing.assert_array_equal(got.asscipy().toarray(), want.toarray())
    empty = so.ops.t_threshold(so.zeros((5, 4), stype="csr", dtype="float64"), threshold=0.1)
    assert empty.nnz == 0 and empty.shape == (5, 4)
    with pytest.raises(so.registry.ParameterError, match="missing required parameter 'threshold'"):
        so.ops.t_threshold(x)


def test_aux_states_are_updated_in_place(testops):
    x, state = so.array(np.arange(4.0)), so.array(np.full(4, 10.0))
    out = so.ops.t_count(x, state)
    np.testing.assert_array_equal(out.asnumpy(), np.arange(4.0) + 10.0)
    np.testing.assert_array_equal(state.asnumpy(), np.full(4, 11.0))


def test_malformed_csr_outputs_are_refused(testops):
    x = so.array(np.zeros((4, 3)))
    with pytest.raises(OperatorError, match=r"operator 't_badcsr' \(library .*libtestops\.so\): the kernel produced "
                                            r"a malformed csr output 0"):  # the op and the library, as C errors
        so.ops.t_badcsr(x, mode=1)
    assert so.ops.t_badcsr(x, mode=0).nnz == 4


def test_boundscheck_mode_checks_c_outputs_fully(build, tmp_path):
    lib = build("testops.c", "libtestops.so")
    script = textwrap.dedent(f"""
        import numpy as np, sparse_ops as so
        so.library.load({str(lib)!r})
        x = so.array(np.zeros((4, 3)))
        for mode in (2, 3):
            try:
                so.ops.t_badcsr(x, mode=mode)
            except so.OperatorError as exc:
                print("refused", mode, exc)
        print("fine", so.ops.t_badcsr(x, mode=0).nnz)
    """)
    env = dict(os.environ, SPARSE_OPS_BOUNDSCHECK="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("refused 2") and "t_badcsr" in lines[0] and "column" in lines[0].lower()
    assert lines[1].startswith("refused 3") and "t_badcsr" in lines[1]
    assert lines[2] == "fine 4"


@pytest.mark.parametrize("mode,message", [
    (1, r"infer_shape gave output 0 the negative shape \(-4, 2\)"),
    (2, r"infer_shape gave output 0 ndim -1"),
    (3, r"infer_shape returned SO_ERR_INVALID_ARGUMENT: x must be 2-D, got 1-D"),
    (4, r"infer_storage_type gave output 0 the unknown storage type code 7"),
    (5, r"infer_type gave output 0 the unknown dtype code 42"),
])
def test_inference_callbacks_returning_garbage(testops, mode, message):
    x = so.array(np.ones(3))
    with pytest.raises(OperatorError, match=message) as info:
        so.ops.t_badinfer(x, mode=mode)
    assert "operator 't_badinfer'" in str(info.value) and "libtestops.so" in str(info.value)
    np.testing.assert_array_equal(so.ops.t_badinfer(x).asnumpy(), np.ones(3))


def test_the_simulated_gpu_refuses_c_kernels_clearly(build, tmp_path):
    lib = build("testops.c", "libtestops.so")
    script = textwrap.dedent(f"""
        import numpy as np, sparse_ops as so
        so.library.load({str(lib)!r})
        x = so.array(np.ones(3), device=so.gpu(0))
        try:
            so.ops.t_scale(x)
        except so.OperatorError as exc:
            print(exc)
    """)
    env = dict(os.environ, SPARSE_OPS_CUDA_SIM="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "t_scale" in out.stdout and ("no kernel" in out.stdout or "real GPU" in out.stdout), out.stdout


# ---- the other faces -------------------------------------------------------------------------------------
def test_cli_lists_and_describes_c_ops(testops, capsys):
    from sparse_ops.cli import main

    assert main(["info", "t_axpy"]) == 0
    text = capsys.readouterr().out
    assert "testops" in text and "alpha" in text


def test_dask_runs_a_c_op_over_row_blocks(testops):
    pytest.importorskip("distributed")
    import sparse_ops.dask as sd

    x, y = dense((12, 3), seed=12), dense((12, 3), seed=13)
    got = sd.apply("t_axpy", sd.from_array(so.array(x), 3), sd.from_array(so.array(y), 3), alpha=2.0).compute()
    np.testing.assert_allclose(got.asnumpy(), 2.0 * x + y)


def test_dask_keeps_whole_the_inputs_a_c_op_does_not_cut(build, isolated):
    """partition_args (ABI 1.2): rm_matmul cuts x into row blocks and sends w whole to each;
    rm_matmul_cut_all, declared without it, has w cut too, which Dask refuses naming the
    C field to set."""
    pytest.importorskip("distributed")
    import sparse_ops.dask as sd

    so.library.load(build("rowmatmul.c", "librowmatmul.so"))
    assert registry.get_op("rm_matmul").partition_args == ("x",)
    assert registry.get_op("rm_matmul_cut_all").partition_args is None
    x, w = dense((12, 4), seed=16), dense((4, 3), seed=17)
    got = sd.apply("rm_matmul", sd.from_array(so.array(x), 3), so.array(w)).compute()
    np.testing.assert_allclose(got.asnumpy(), x @ w)
    with pytest.raises(sd.PartitionMismatchError, match=r"input 'w' of shape \(4, 3\) is cut into the row blocks.*"
                                                        r"so_op_decl\.partition_args, ABI 1\.2, lists the indices"):
        sd.apply("rm_matmul_cut_all", sd.from_array(so.array(x), 3), so.array(w))


@pytest.mark.parametrize("flag,message", [
    ("BAD_INDEX", r"operator 'rm_matmul': partition_args\[0\] is 2; allowed: each input index 0\.\.1 at most once"),
    ("NO_RULE", r"operator 'rm_matmul': partition_args needs a partition rule .*it is SO_PARTITION_NONE")])
def test_a_bad_partition_args_declaration_is_refused(build, isolated, flag, message):
    before = registry.list_ops()
    with pytest.raises(plugins.PluginError, match=message):
        so.library.load(build("rowmatmul.c", f"librowmatmul_{flag.lower()}.so", f"-D{flag}"))
    assert registry.list_ops() == before


def test_a_library_built_for_abi_1_1_loads_without_partition_args(build, isolated):
    """A library built for ABI 1.1 (its so_op_decl ends before partition_args) loads: every
    input is cut, as before."""
    so.library.load(build("factor.c", "libfactor_abi11.so", "-DSPARSE_OPS_TARGET_MINOR=1"))
    assert registry.get_op("factor_times").partition_args is None
    np.testing.assert_array_equal(so.ops.factor_times(so.array(np.ones(2))).asnumpy(), [2.0, 2.0])


def test_the_torch_bridge_runs_c_ops_with_autograd(testops):
    torch = pytest.importorskip("torch")
    import sparse_ops.torch as st

    x = torch.tensor(dense((3, 4), seed=14), requires_grad=True)
    y = torch.tensor(dense((3, 4), seed=15), requires_grad=True)
    z = st.ops.t_axpy(x, y, alpha=3.0)
    z.sum().backward()
    np.testing.assert_allclose(z.detach().numpy(), 3.0 * x.detach().numpy() + y.detach().numpy())
    np.testing.assert_allclose(x.grad.numpy(), np.full((3, 4), 3.0))
    np.testing.assert_allclose(y.grad.numpy(), np.ones((3, 4)))
    assert torch.autograd.gradcheck(lambda a, b: st.ops.t_axpy(a, b, alpha=0.5), (x.detach().requires_grad_(),
                                                                                   y.detach().requires_grad_()))


# ---- numba speaks the same ABI ------------------------------------------------------------------------
def test_numba_cfunc_kernels_register_through_the_c_path(testops, isolated):
    """A numba.cfunc so_kernel_fn (dense and csr) declared through the C ABI runs like a C
    library's kernel; its gradient is a C library op, and a C op's gradient can be it."""
    import numba

    from sparse_ops.clib.python import ref_input, ref_out_grad, register_op
    from sparse_ops.sdk import cabi

    @numba.cfunc(cabi.KERNEL)
    def mul(ctx, params, n_in, ins, n_out, outs, err):
        if cabi.dtype_code(ins, 0) != 1 or cabi.dtype_code(ins, 1) != 1:
            return cabi.ERR_UNSUPPORTED
        x, y, o = cabi.values(ins, 0, numba.float64), cabi.values(ins, 1, numba.float64), \
            cabi.values(outs, 0, numba.float64)
        for i in range(o.size):
            o[i] = x[i] * y[i]
        return cabi.OK

    @numba.njit
    def sum_rows(v, ptr, o):
        for r in range(o.size):
            total = 0.0
            for j in range(ptr[r], ptr[r + 1]):
                total += v[j]
            o[r] = total

    @numba.cfunc(cabi.KERNEL)
    def row_sums(ctx, params, n_in, ins, n_out, outs, err):  # csr (n, m) -> dense (n, 1)
        if cabi.dtype_code(ins, 0) != 1:
            return cabi.ERR_UNSUPPORTED
        v, o = cabi.values(ins, 0, numba.float64), cabi.values(outs, 0, numba.float64)
        if cabi.index_code(ins, 0) == 4:  # int32 index arrays (SciPy's default)
            sum_rows(v, cabi.indptr(ins, 0, numba.int32), o)
        else:
            sum_rows(v, cabi.indptr(ins, 0, numba.int64), o)
        return cabi.OK

    register_op("nb_mul", arguments=("x", "y"), kernels=[("cpu", None, mul)],
                gradients=[(0, "nb_mul", (ref_out_grad(0), ref_input(1))),
                           (1, "t_axpy", (ref_out_grad(0), ref_input(0)))], doc="x * y")
    x, y = so.array(dense((3, 4), seed=20)), so.array(dense((3, 4), seed=21))
    np.testing.assert_array_equal(so.ops.nb_mul(x, y).asnumpy(), x.asnumpy() * y.asnumpy())
    x.attach_grad()
    with so.autograd.record():
        z = so.ops.nb_mul(x, y)
    z.backward(so.array(np.ones((3, 4))))
    np.testing.assert_array_equal(x.grad.asnumpy(), y.asnumpy())
    with pytest.raises(OperatorError, match=r"operator 'nb_mul'.*SO_ERR_UNSUPPORTED"):
        so.ops.nb_mul(so.array(np.ones(2, np.float32)), so.array(np.ones(2, np.float32)))

    @numba.cfunc(cabi.INFER_SHAPE)
    def column(params, n_in, shapes, n_out, out, err):  # (n, m) -> (n, 1)
        cabi.set_shape(out, 0, 2, 0, cabi.shape_dim(shapes, 0, 0))
        cabi.set_shape(out, 0, 2, 1, 1)
        return cabi.OK

    sums = register_op("nb_row_sums", arguments=("a",), kernels=[("cpu", ("csr",), row_sums)],
                       infer_shape=column, constant=True)
    assert sums.ops == ["nb_row_sums"]
    a = sp.random(5, 7, density=0.4, format="csr", random_state=3)
    for index in (np.int32, np.int64):
        got = so.ops.nb_row_sums(so.csr_matrix((a.data, a.indices.astype(index), a.indptr.astype(index)),
                                               shape=a.shape))
        assert got.shape == (5, 1) and got.stype == "default"
        np.testing.assert_allclose(got.asnumpy(), a.sum(axis=1))


def test_threads_get_their_own_results_and_messages(testops):
    """Kernels and their error messages never mix between threads (one so_error per thread)."""
    from concurrent.futures import ThreadPoolExecutor

    def work(k: int) -> list:
        x = so.array(np.full(5, float(k)))
        seen = []
        for _ in range(200):
            np.testing.assert_array_equal(so.ops.t_axpy(x, x, alpha=2.0).asnumpy(), np.full(5, 3.0 * k))
            try:
                so.ops.t_fail(x, code=10 + k)
            except OperatorError as exc:
                seen.append(str(exc).rsplit(" ", 1)[-1])
        return seen

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, range(4)))
    for k, seen in enumerate(results):
        assert seen == [str(10 + k)] * 200


def test_string_and_reserved_parameter_declarations():
    """A string parameter holding a NUL is refused (the C side would read it cut short), and
    a parameter named out or req (keywords of every call) is refused at declaration."""
    from sparse_ops.clib import abi
    from sparse_ops.clib.declare import RESERVED_NAMES, ParamSpec, make_param

    p = make_param(ParamSpec("s", abi.PARAM_STRING, None, "a string"), "t_op")
    assert p.parse_value("a b") == "a b"
    with pytest.raises(ValueError, match="NUL character"):
        p.parse_value("a\x00b")
    with pytest.raises(ValueError, match="has no UTF-8 form"):  # a lone surrogate: no bytes to hand C
        p.parse_value("a\ud800b")
    assert {"out", "req"} <= RESERVED_NAMES


@pytest.mark.parametrize("forgive", [True, False])
def test_a_refused_callback_is_reported_on_every_path(build, isolated, forgive):
    """A kernel asking for a workspace its op does not declare gets NULL and the host's reason
    on the compiled fast path (a dense cpu kernel of an op declaring no resources) as on the
    general one: an SO_OK after the refusal is refused, and SO_ERR_RESOURCE carries the
    host's message."""
    name = "ws_forgive" if forgive else "ws_strict"
    flags = [f"-DOP_NAME=\"{name}\""] + (["-DFORGIVE"] if forgive else [])
    so.library.load(build("undeclared.c", f"lib{name}.so", *flags))
    fn = getattr(so.ops, name)
    expected = "returned SO_OK after a host callback failed" if forgive else "returned SO_ERR_RESOURCE"
    for _ in range(2):  # the refusal is reported each time, not only once
        with pytest.raises(OperatorError, match=f"{expected}.*does not declare SO_RESOURCE_WORKSPACE"):
            fn(so.array(np.arange(6.0)))
    np.testing.assert_array_equal(so.ops.relu(so.array(np.arange(3.0))).asnumpy(), np.arange(3.0))


def test_a_graph_recorded_before_a_reload_is_differentiated_by_the_version_it_ran(build, isolated, tmp_path):
    """The gradient ops a library names are bound when it loads: a reload (the library is
    never unloaded) changes later calls, not what a recorded graph differentiates."""
    lib = tmp_path / "libfactor.so"
    install(build("factor.c", "libfactor2.so", "-DFACTOR=2"), lib)
    so.library.load(lib)
    x = so.array(np.array([1.0, -2.0]))
    x.attach_grad()
    with so.autograd.record():
        y = so.sum(so.ops.factor_scaled(x))
    install(build("factor.c", "libfactor3.so", "-DFACTOR=3"), lib)
    so.library.reload(lib)
    y.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), [2.0, 2.0])  # the version recorded, not the reloaded one
    with so.autograd.record():
        z = so.sum(so.ops.factor_scaled(x))
    z.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), [3.0, 3.0])


def test_an_input_without_a_gradient_term_has_a_zero_gradient_and_opcheck_finds_it_missing(build, isolated,
                                                                                          tmp_path):
    """The header's rule: an input no so_gradient term names gets a zero gradient (right for
    a relu backward's data, a mask); where its derivative is not zero, opcheck says so."""
    so.library.load(build("factor.c", "libfactor2.so", "-DFACTOR=2"))
    x, y = so.array(np.array([1.0, 2.0])), so.array(np.array([3.0, 4.0]))
    x.attach_grad()
    y.attach_grad()
    with so.autograd.record():
        out = so.sum(so.ops.factor_axpy(x, y))
    out.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), [2.0, 2.0])
    np.testing.assert_array_equal(y.grad.asnumpy(), [0.0, 0.0])
    from sparse_ops.sdk.testing import OpcheckError

    with pytest.raises(OpcheckError, match=r"factor_axpy sample 0 \(default, default\): gradient: .*input 1"):
        opcheck("factor_axpy", [[x, y]])


def test_debug_mode_checks_sparse_inputs_again_before_a_c_kernel(build, tmp_path):
    """Index arrays shared with NumPy and written after validation: under
    SPARSE_OPS_BOUNDSCHECK=1 the inputs are checked again before the C kernel reads them."""
    lib = build("testops.c", "libtestops.so")
    script = textwrap.dedent(f"""
        import numpy as np, sparse_ops as so
        so.library.load({str(lib)!r})
        cols = np.array([0, 2, 1])
        a = so.csr_matrix((np.ones(3), cols, np.array([0, 2, 3])), shape=(2, 4))
        cols[1] = 10**9
        try:
            so.ops.t_scale(a, alpha=2.0)
        except so.SparseFormatError as exc:
            print("refused", exc)
        cols[1] = 3
        print("fine", so.ops.t_scale(a, alpha=2.0).asnumpy().sum())
    """)
    env = dict(os.environ, SPARSE_OPS_BOUNDSCHECK="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("refused operator 't_scale'") and "argument 'x' (csr)" in lines[0], lines
    assert "out of range" in lines[0] and "written since it was validated" in lines[0]
    assert lines[1] == "fine 6.0"


def test_opcheck_on_the_simulated_gpu_passes_over_compiled_gpu_kernels(build, tmp_path):
    """Compiled gpu kernels cannot run on numba's simulated gpu: opcheck says so (n/a)
    instead of failing the library."""
    lib = build("factor.c", "libfactorgpu.so", "-DWITH_GPU")
    script = textwrap.dedent(f"""
        import numpy as np, sparse_ops as so
        from sparse_ops.sdk.testing import opcheck
        so.library.load({str(lib)!r})
        report = opcheck("factor_scaled", [[so.array(np.array([1.0, -2.0]))]])
        print(*[o.status + ": " + o.detail for o in report.results[0].outcomes if o.check == "gpu"])
    """)
    env = dict(os.environ, SPARSE_OPS_CUDA_SIM="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("n/a: compiled (C/CUDA) gpu kernels need a real GPU; the simulated one "
                                  "(SPARSE_OPS_CUDA_SIM=1) runs numba kernels only"), out.stdout


def test_the_sdk_submodules_are_reached_as_attributes_after_import_sparse_ops():
    """As the C-library guide writes it: sparse_ops.sdk.cbuild.compile_library(...) after
    import sparse_ops alone (the submodules load when first touched)."""
    code = ("import sys, sparse_ops; assert 'sparse_ops.sdk.cbuild' not in sys.modules; "
            "print(sparse_ops.sdk.cbuild.compile_library.__name__, sparse_ops.sdk.testing.opcheck.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["compile_library", "opcheck"]
