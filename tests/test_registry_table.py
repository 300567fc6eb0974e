"""The operator table's own API: who owns each op and what a refused registration says
(built-in, plugin, library file, user code), ``replace=True``, re-running user code,
``snapshot`` / ``restore`` / ``unregister``, ``library.reload`` and ``library.load`` of an
edited file, and the registry standing below ``custom`` and ``dispatch``."""
from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import sparse_ops as so
from sparse_ops import registry
from sparse_ops.plugins import PluginError
from sparse_ops.registry import Owner, registering_as


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def op_source(name: str, factor: float) -> str:
    """Source registering op ``name``: y = factor * x (a dense cpu kernel)."""
    return textwrap.dedent(f"""
        import sparse_ops as so

        @so.register({name!r})
        class Times(so.Op):
            @so.kernel(device="cpu")
            def dense(self, ctx, x, y):
                y[...] = {factor} * x
        """)


def declare(name: str, factor: float = 1.0, **kwargs):
    """Register ``name`` from this test module (user code): y = factor * x."""
    @so.register(name, **kwargs)
    class Scaled(so.Op):
        @so.kernel(device="cpu")
        def dense(self, ctx, x, y):
            y[...] = factor * x
    return Scaled


def run_op(name: str) -> list:
    return so.ops.__dict__[name](so.array(np.arange(3.0))).asnumpy().tolist()


# ---- owners and refusals --------------------------------------------------------------------------------
def test_refusing_a_builtin_name_says_it_is_a_builtin(isolated):
    with pytest.raises(so.OperatorError, match=r"^operator 'negative' is already registered \(owner: a built-in\); "
                                               r"pass replace=True"):
        declare("negative")
    assert registry.owner_of("negative") == Owner("built-in")
    assert registry.get_op("negative").cls.__module__.startswith("sparse_ops.")


def test_refusing_a_plugins_name_names_the_plugin(isolated):
    declare("regt_plugged", plugin="regt_plug")
    assert registry.owner_of("regt_plugged") == Owner("plugin", "regt_plug")
    with pytest.raises(so.OperatorError, match=r"^operator 'regt_plugged' is already registered "
                                               r"\(owner: plugin 'regt_plug'\)"):
        declare("regt_plugged")
    with registering_as(Owner("plugin", "regt_other")):  # another plugin: refused even with replace=True
        with pytest.raises(so.OperatorError, match=r"plugin 'regt_other' cannot register operator 'regt_plugged': "
                                                   r"plugin 'regt_plug' already registered it"):
            declare("regt_plugged", replace=True)
    assert registry.owner_of("regt_plugged").plugin == "regt_plug"


def test_refusing_a_library_files_name_names_the_file(tmp_path, isolated):
    path = write(tmp_path / "regt_lib.py", op_source("regt_libop", 2.0))
    so.library.load(path)
    assert registry.owner_of("regt_libop") == Owner("library", "regt_lib", where=str(path))
    with pytest.raises(so.OperatorError, match=rf"^operator 'regt_libop' is already registered \(owner: library file "
                                               rf"{path} \(plugin 'regt_lib'\)\)"):
        declare("regt_libop")


def test_refusing_user_codes_name_names_the_class_and_its_file(tmp_path, isolated):
    """The message says where the owning class was defined (a module file, ``__main__``, a
    notebook cell's pseudo-file) instead of calling it a built-in."""
    namespace = {"__name__": "__main__"}
    exec(compile(op_source("row_topk_t", 1.0), "<ipython-input-3-5a1f>", "exec"), namespace)
    owner = registry.owner_of("row_topk_t")
    assert owner == Owner("user", where="__main__", qualname="Times", file="<ipython-input-3-5a1f>")
    with pytest.raises(so.OperatorError, match=r"^operator 'row_topk_t' is already registered \(owner: user code: "
                                               r"class __main__\.Times in <ipython-input-3-5a1f>\); "
                                               r"pass replace=True to replace it"):
        declare("row_topk_t")  # from this test module: another place
    assert run_op("row_topk_t") == [0.0, 1.0, 2.0]


def test_rerunning_a_cell_replaces_its_own_op(isolated):
    """A notebook cell defining an op runs again (IPython gives each run its own file name):
    same module and class name, so the new code replaces the old, with no error."""
    for run, factor in enumerate((2.0, 3.0), start=1):
        exec(compile(op_source("regt_cell", factor), f"<ipython-input-{run}-0b3c>", "exec"), {"__name__": "__main__"})
        assert run_op("regt_cell") == [0.0, factor, 2 * factor]
    assert registry.owner_of("regt_cell").file == "<ipython-input-2-0b3c>"


def test_registering_the_same_class_twice_is_refused(isolated):
    cls = declare("regt_twice")
    with pytest.raises(so.OperatorError, match=r"'regt_twice' is already registered \(owner: user code: class "
                                               r"test_registry_table\.declare\.<locals>\.Scaled in .*test_registry_table\.py\)"):
        so.register("regt_twice")(cls)


def test_replace_true_replaces_and_a_refusal_changes_nothing(isolated):
    declare("regt_repl", 2.0)
    before = registry.get_op("regt_repl")
    with pytest.raises(so.OperatorError):
        declare("negative")
    with pytest.raises(ValueError, match="mutated input"):  # a bad declaration: refused before the table
        @so.register("regt_repl", replace=True)
        class Bad(so.Op):
            mutate = ("nope",)
    assert registry.get_op("regt_repl") is before and so.get_op("negative").plugin is None
    declare("regt_repl", 5.0, replace=True)
    assert registry.get_op("regt_repl") is not before and run_op("regt_repl") == [0.0, 5.0, 10.0]


def test_the_ops_table_that_gradients_use_follows_replacements(isolated):
    from sparse_ops.ops._util import T

    declare("regt_T", 2.0)
    x = so.array(np.arange(3.0))
    assert T.regt_T(x).asnumpy().tolist() == [0.0, 2.0, 4.0]  # looked up once, then kept
    declare("regt_T", 3.0, replace=True)
    assert T.regt_T(x).asnumpy().tolist() == [0.0, 3.0, 6.0]
    registry.unregister("regt_T")
    with pytest.raises(so.OperatorError, match="regt_T"):
        T.regt_T(x)


def test_a_replaced_built_in_is_what_every_name_of_it_runs(isolated):
    """After ``register("relu", replace=True)``, ``sparse_ops.relu``, the fluent
    ``x.relu()``, ``sparse_ops.ops.relu``, ``invoke`` and ``explain`` all take the
    replacement (the top-level function and the method kept the built-in before); a
    restore brings the built-in back everywhere."""
    x = so.array(np.array([-1.0, 2.0]))
    saved = registry.snapshot()

    @so.register("relu", replace=True)
    class Sevens(so.Op):
        arguments = ("data",)

        @so.kernel(device="cpu")
        def dense(self, ctx, data, out):
            out[...] = 7

    for got in (so.relu(x), x.relu(), so.ops.relu(x), so.invoke("relu", [x])):
        assert got.asnumpy().tolist() == [7.0, 7.0]
    assert so.explain("relu", x)["kernel"].endswith("Sevens.dense")
    registry.restore(saved)
    for got in (so.relu(x), x.relu(), so.ops.relu(x)):
        assert got.asnumpy().tolist() == [0.0, 2.0]


def test_functions_held_from_before_a_replacement_run_the_replacement(isolated):
    """``f = sparse_ops.ops.x`` (or the torch, JAX and MXNet faces' ``x``) taken before ``x``
    is registered again runs the new kernel, forward and backward, after a repeated call
    made a plan; after ``x`` is removed it names the op; a restore brings the old one back."""
    torch = pytest.importorskip("torch")
    jnp = pytest.importorskip("jax.numpy")
    import sparse_ops.jax as soj
    import sparse_ops.torch as st
    from sparse_ops.compat import mxnet as mx

    def scaled(factor):
        @so.register("regt_held", replace=True)
        class Scaled(so.Op):
            @so.kernel(device="cpu")
            def dense(self, ctx, x, y):
                y[...] = factor * x

            def gradient(self, out_grads, inputs, outputs):
                return [out_grads[0] * factor]

    scaled(2.0)
    saved = registry.snapshot()
    native, bridged, jaxed, mxnet = so.ops.regt_held, st.ops.regt_held, soj.ops.regt_held, mx.nd.regt_held
    faces = {"native": lambda: native(so.array(np.ones(2))).asnumpy(),
             "torch": lambda: bridged(torch.ones(2)).numpy(),
             "jax": lambda: np.asarray(jaxed(jnp.ones(2))),
             "mxnet": lambda: mxnet(mx.nd.ones(2)).asnumpy()}
    for run in faces.values():
        for _ in range(2):  # the second call takes the planned path
            np.testing.assert_array_equal(run(), [2.0, 2.0])
    scaled(3.0)
    for run in faces.values():
        np.testing.assert_array_equal(run(), [3.0, 3.0])
    x = torch.ones(2, requires_grad=True)
    bridged(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])
    a = so.array(np.ones(2))
    a.attach_grad()
    with so.autograd.record():
        y = native(a)
    y.backward()
    np.testing.assert_array_equal(a.grad.asnumpy(), [3.0, 3.0])
    registry.unregister("regt_held")
    for name, run in faces.items():
        with pytest.raises((so.OperatorError, AttributeError), match="regt_held"):
            run()
    registry.restore(saved)
    for run in faces.values():
        np.testing.assert_array_equal(run(), [2.0, 2.0])


# ---- snapshot / restore / unregister -------------------------------------------------------------------------
def test_unregister_removes_the_op_and_its_function(isolated):
    declare("regt_gone")
    opdef = registry.get_op("regt_gone")
    assert registry.unregister("regt_gone") is opdef
    assert "regt_gone" not in so.list_ops() and not hasattr(so.ops, "regt_gone")
    with pytest.raises(so.OperatorError, match="no operator named 'regt_gone' to unregister"):
        registry.unregister("regt_gone")


def test_restore_undoes_additions_replacements_and_removals(isolated):
    negative, fn = so.get_op("negative"), so.ops.negative
    saved = registry.snapshot()
    declare("regt_added")
    declare("negative", 7.0, replace=True)
    registry.unregister("sqrt")
    assert so.ops.negative is not fn and not hasattr(so.ops, "sqrt")
    assert registry.restore(saved) == ["negative", "regt_added", "sqrt"]
    assert "regt_added" not in so.list_ops() and not hasattr(so.ops, "regt_added")
    assert so.get_op("negative") is negative and so.ops.negative is fn and registry.owner_of("negative").kind == "built-in"
    assert so.ops.sqrt(so.array(np.array([4.0]))).asnumpy().tolist() == [2.0]
    assert registry.restore(saved) == []  # nothing left to undo


def test_restore_of_some_names_leaves_the_others(isolated):
    saved = registry.snapshot()
    declare("regt_mine")
    declare("regt_theirs")
    assert registry.restore(saved, ["regt_mine"]) == ["regt_mine"]
    assert "regt_mine" not in so.list_ops() and "regt_theirs" in so.list_ops()


# ---- library.reload and load of an edited file ---------------------------------------------------------------
def two_ops(prefix: str, factor: float, dropped: bool = False, added: bool = False) -> str:
    text = op_source(f"{prefix}_a", factor)
    if not dropped:
        text += op_source(f"{prefix}_b", 1.0).replace("class Times", "class TimesB")
    if added:
        text += op_source(f"{prefix}_c", -1.0).replace("class Times", "class TimesC")
    return text


def test_reload_replaces_exactly_that_librarys_ops(tmp_path, isolated):
    path = write(tmp_path / "regt_rel.py", two_ops("regtrel", 2.0))
    other = write(tmp_path / "regt_keep.py", op_source("regtkeep_a", 4.0))
    so.library.load(path)
    so.library.load(other)
    declare("regtrel_user", 6.0)  # user code beside it
    keep, negative = so.get_op("regtkeep_a"), so.get_op("negative")

    write(path, two_ops("regtrel", 3.0, dropped=True, added=True))
    with pytest.raises(PluginError, match=r"plugin 'regt_rel': .*regt_rel\.py changed since it was loaded; "
                                          r"sparse_ops\.library\.reload\(.*\) loads the new code"):
        so.library.load(path)
    assert run_op("regtrel_a") == [0.0, 2.0, 4.0]  # the refused load changed nothing

    module = so.library.reload(path)
    assert module is sys.modules["regt_rel"]
    assert run_op("regtrel_a") == [0.0, 3.0, 6.0] and run_op("regtrel_c") == [0.0, -1.0, -2.0]
    assert "regtrel_b" not in so.list_ops() and not hasattr(so.ops, "regtrel_b")
    assert so.plugins_info()["loaded"]["regt_rel"]["ops"] == ["regtrel_a", "regtrel_c"]
    assert so.get_op("regtkeep_a") is keep and so.get_op("negative") is negative
    assert run_op("regtrel_user") == [0.0, 6.0, 12.0]
    assert so.library.load(path) is module  # unchanged since the reload: a no-op again


def test_a_failed_reload_keeps_the_version_loaded_before(tmp_path, isolated):
    path = write(tmp_path / "regt_relbad.py", two_ops("regtrelbad", 2.0))
    module = so.library.load(path)
    ops = so.plugins_info()["loaded"]["regt_relbad"]["ops"]
    write(path, two_ops("regtrelbad", 3.0, added=True) + "\nraise RuntimeError('half-edited')\n")
    with pytest.raises(PluginError, match=r"plugin 'regt_relbad': reloading .* failed, the version loaded before "
                                          r"stays: .*RuntimeError: half-edited"):
        so.library.reload(path)
    assert sys.modules["regt_relbad"] is module and run_op("regtrelbad_a") == [0.0, 2.0, 4.0]
    assert so.plugins_info()["loaded"]["regt_relbad"]["ops"] == ops and "regtrelbad_c" not in so.list_ops()
    assert "regt_relbad" not in so.plugins_info()["failed"]


def test_reload_of_a_package_folder_and_of_what_was_never_loaded(tmp_path, isolated):
    pkg = tmp_path / "regt_pkg"
    write(pkg / "__init__.py", "from . import ops\n")
    write(pkg / "ops.py", op_source("regtpkg_a", 2.0))
    so.library.load(pkg)
    write(pkg / "ops.py", op_source("regtpkg_a", 9.0))  # an edit in a submodule counts too
    with pytest.raises(PluginError, match="changed since it was loaded"):
        so.library.load(pkg)
    so.library.reload(pkg)
    assert run_op("regtpkg_a") == [0.0, 9.0, 18.0] and sys.modules["regt_pkg.ops"].__file__ == str(pkg / "ops.py")
    with pytest.raises(PluginError, match=r"cannot reload plugin 'regt_never' .*it is not loaded; library\.reload"):
        so.library.reload(write(tmp_path / "regt_never.py", op_source("regtnever_a", 1.0)))
    assert "regtnever_a" not in so.list_ops()


def test_reload_sees_an_edit_made_within_the_same_second(tmp_path):
    """Python's bytecode cache trusts a .pyc whose source kept its size and modification
    second; reload drops the plugin's cached bytecode, so a quick same-size edit is seen."""
    import os
    import subprocess

    pkg = write(tmp_path / "regt_quick" / "__init__.py", "from . import ops\n").parent
    write(pkg / "ops.py", op_source("regtquick_a", 2.0))
    code = textwrap.dedent(f"""
        import numpy as np, sparse_ops as so
        so.library.load({str(pkg)!r})
        source = open({str(pkg / "ops.py")!r}).read()
        open({str(pkg / "ops.py")!r}, "w").write(source.replace("2.0", "9.0"))  # same size, same second
        so.library.reload({str(pkg)!r})
        print(so.ops.regtquick_a(so.array(np.ones(1))).asnumpy().tolist())
        """)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "SPARSE_OPS_CUDA_SIM")}
    env["SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[9.0]"
    assert (pkg / "__pycache__").is_dir()  # bytecode was written: the case that needs the care


# ---- layering ----------------------------------------------------------------------------------------------
def test_the_registry_imports_neither_custom_nor_dispatch():
    """Top-level and function-local imports alike: the MXNet adapter hooks itself in
    (``add_class_adapter``) and ``sparse_ops.ops`` subscribes to publish functions."""
    tree = ast.parse(Path(registry.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.add(("." * node.level) + (node.module or ""))
            imported.update(f"{'.' * node.level}{node.module or ''}.{a.name}".replace("..", ".") for a in node.names)
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
    assert not {m for m in imported if m.split(".")[-1] in ("custom", "dispatch", "ops", "plugins")}, imported
    assert not any("import_module" in ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call))


def test_custom_op_props_still_register_through_the_hook(isolated):
    class Doubler(so.CustomOpProp):
        def list_arguments(self):
            return ["data"]

        def create_operator(self, ctx, shapes, dtypes):
            class Op(so.CustomOp):
                def forward(self, is_train, req, in_data, out_data, aux):
                    self.assign(out_data[0], req[0], in_data[0] * 2)
            return Op()

    assert so.register("regt_prop")(Doubler) is Doubler
    assert run_op("regt_prop") == [0.0, 2.0, 4.0]
    assert registry.owner_of("regt_prop").qualname.endswith("Doubler")  # the Prop's place, not the adapter's
    with pytest.raises(so.OperatorError, match=r"already registered \(owner: user code: class "
                                               r"test_registry_table\..*Doubler"):
        so.register("regt_prop")(Doubler)
