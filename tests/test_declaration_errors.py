"""A malformed ``Op`` declaration is refused when it is registered (at the plugin's import),
with a message naming the operator, the class attribute and what is allowed, never a bare
Python error such as ``tuple.index(x): x not in tuple``. And re-registering an installed
plugin's op (``importlib.reload`` of its module) is refused with a pointer to
``sparse_ops.library.reload``, which then loads the edited code."""
from __future__ import annotations

import importlib
import sys
import textwrap
import warnings

import numpy as np
import pytest

import sparse_ops as so
from sparse_ops import registry


def refusal(name: str, **attrs) -> str:
    """The message ``register(name)`` refuses an ``Op`` subclass with ``attrs`` with."""
    cls = type("Declared", (so.Op,), {"__module__": __name__, **attrs})
    with pytest.raises(ValueError) as info:
        so.register(name)(cls)
    assert name not in registry.list_ops()  # refused before the table
    return str(info.value)


CASES = [
    ({"backward_needs_outputs": ("out",)},
     "operator 'de_op': backward_needs_outputs: output 'out' is not an output; allowed: the outputs ('output',) "
     "(the default: the class declares no `outputs`)"),
    ({"outputs": ("out", "mask"), "backward_needs_outputs": ("output",)},
     "operator 'de_op': backward_needs_outputs: output 'output' is not an output; allowed: the outputs "
     "('out', 'mask')"),
    ({"backward_needs_inputs": ("x",)},
     "operator 'de_op': backward_needs_inputs: input 'x' is not an argument; allowed: the arguments ('data',)"),
    ({"arguments": ("lhs", "rhs"), "mutate": ("state",)},
     "operator 'de_op': mutate: mutated input 'state' is not an argument; allowed: the arguments ('lhs', 'rhs')"),
    ({"partition": "rows", "partition_args": ("rhs",)},
     "operator 'de_op': partition_args: partitioned input 'rhs' is not an argument; allowed: the arguments "
     "('data',)"),
    ({"partition": "columns"},
     "operator 'de_op': partition = 'columns'; allowed: partition must be one of ('rows', 'sum', None)"),
    ({"outputs": ("out", "mask"), "num_visible_outputs": 3},
     "operator 'de_op': num_visible_outputs = 3; allowed: None (every output) or an int from 1 to 2, the number "
     "of outputs ('out', 'mask')"),
    ({"num_visible_outputs": 0},
     "operator 'de_op': num_visible_outputs = 0; allowed: None (every output) or an int from 1 to 1, the number "
     "of outputs ('output',)"),
    ({"num_visible_outputs": True},
     "operator 'de_op': num_visible_outputs = True; allowed: None (every output) or an int from 1 to 1, the "
     "number of outputs ('output',)"),
    ({"arguments": "data"},
     "operator 'de_op': arguments = 'data' (a bare string is not a tuple: write ('data',)); allowed: a tuple of "
     "names (str), such as ('data',)"),
    ({"outputs": ("out", 1)},
     "operator 'de_op': outputs = ('out', 1); allowed: a tuple of names (str), such as ('data',)"),
    ({"backward_needs_outputs": "output"},
     "operator 'de_op': backward_needs_outputs = 'output' (a bare string is not a tuple: write ('output',)); "
     "allowed: a tuple of names (str), such as ('data',)"),
    ({"mutate": None},
     "operator 'de_op': mutate = None; allowed: a tuple of names (str), such as ('data',)"),
    ({"resources": ("gpu_memory",)},
     "operator 'de_op': resources: resource 'gpu_memory' is not a resource; allowed: the resources "
     "('workspace', 'random') a kernel may ask for"),
    ({"params_dict": so.Param(int, 1)},
     "operator 'de_op': parameter 'params_dict' would hide the Op method of that name; allowed: any name no Op "
     "method has"),
    ({"arguments": ("x", "y", "x")},
     "operator 'de_op': arguments: names repeat ('x'); allowed: distinct names"),
    ({"arguments": ("data", "out")},
     "operator 'de_op': arguments: 'out' is reserved (every call takes out, req); allowed: any other name"),
    ({"arguments": ("in",)},
     "operator 'de_op': arguments: 'in' is not an ASCII identifier or is a Python keyword; allowed: a name a Python "
     "function may take as an argument, in ASCII (as torch's operator schemas)"),
    ({"outputs": ("y", "y")},
     "operator 'de_op': outputs: names repeat ('y'); allowed: distinct names"),
    ({"negate": so.Param(int, "abc")},
     "operator 'de_op': bad value 'abc' for parameter 'negate': invalid literal for int() with base 10: 'abc' (the "
     "parameter's declared default); allowed: a default that parses as the parameter's type and lies in its "
     "choices"),
    ({"mode": so.Param(str, "z", choices=("a", "b"))},
     "operator 'de_op': parameter 'mode' must be one of ('a', 'b'), got 'z' (the parameter's declared default); "
     "allowed: a default that parses as the parameter's type and lies in its choices"),
    ({"k": so.kernel(stypes=("default", "csr"))(lambda self, ctx, x, y: None)},
     "operator 'de_op': kernel k: stypes ('default', 'csr') lists 2 storage type(s) for 1 input(s) ('data',); "
     "allowed: one per input, in order"),
    ({"k": so.kernel(stypes=[("csr",), ("coo",)])(lambda self, ctx, x, y: None)},
     "operator 'de_op': kernel k: stypes ('coo',) names 'coo'; allowed: 'default', 'row_sparse', 'csr', '*', or "
     "('...',) for any inputs"),
    ({"arguments": ()},
     "operator 'de_op' takes no inputs, so its outputs' shapes and dtypes follow none: declare infer_shape and "
     "infer_type"),
    ({"arguments": (), "infer_shape": lambda self: [(2,)]},
     "operator 'de_op' takes no inputs, so its outputs' shapes and dtypes follow none: declare infer_shape and "
     "infer_type"),
]


@pytest.mark.parametrize("attrs,message", CASES, ids=[", ".join(c[0]) + f" {i}" for i, c in enumerate(CASES)])
def test_each_declaration_error_names_the_op_the_attribute_and_what_is_allowed(isolated, attrs, message):
    assert refusal("de_op", **attrs) == message


def test_parameter_defaults_are_parsed_as_passed_values_are(isolated):
    """``Param(bool, "False")`` is False in the kernel, as ``negate="False"`` passed is; an
    int default written as text is an int."""
    @so.register("de_defaults")
    class Defaults(so.Op):
        negate = so.Param(bool, "False")
        k = so.Param(int, "3")

        @so.kernel(device="cpu")
        def dense(self, ctx, x, y):
            y[...] = (-x if self.negate else x) * self.k

    x = so.array(np.ones(2))
    np.testing.assert_array_equal(so.ops.de_defaults(x).asnumpy(), [3.0, 3.0])
    np.testing.assert_array_equal(so.ops.de_defaults(x, negate="True", k="1").asnumpy(), [-1.0, -1.0])


def test_the_default_output_is_named_output(isolated):
    """What the messages call the default: one output, ``output``, which backward_needs_outputs may name."""
    @so.register("de_square")
    class Square(so.Op):
        backward_needs_outputs = ("output",)

        @so.kernel(device="cpu")
        def dense(self, ctx, x, y):
            y[...] = x * x

    opdef = so.get_op("de_square")
    assert (opdef.arguments, opdef.outputs, opdef.backward_outputs) == (("data",), ("output",), (0,))
    np.testing.assert_array_equal(so.ops.de_square(so.array([3.0])).asnumpy(), [9.0])


def test_lists_of_names_are_still_accepted(isolated):
    @so.register("de_listed")
    class Listed(so.Op):
        arguments, outputs, backward_needs_inputs = ["lhs", "rhs"], ["out"], ["rhs"]

    opdef = so.get_op("de_listed")
    assert (opdef.arguments, opdef.outputs, opdef.backward_inputs) == (("lhs", "rhs"), ("out",), (1,))


# ---- editing an installed plugin ------------------------------------------------------------------------
PLUGIN = '''
import sparse_ops as so

@so.register("dereload_scale")
class Scale(so.Op):
    """y = {factor} x"""
    @so.kernel(device="cpu")
    def dense(self, ctx, x, y):
        y[...] = {factor} * x
'''


def test_reimporting_an_installed_plugin_points_to_library_reload_which_loads_the_edit(tmp_path, isolated):
    site = tmp_path / "site"
    package = site / "dereload"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(PLUGIN.format(factor=2.0)))
    dist = site / "dereload-1.0.dist-info"
    dist.mkdir()
    (dist / "entry_points.txt").write_text("[sparse_ops.plugins]\ndereload = dereload\n")
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: dereload\nVersion: 1.0\n\n")
    sys.path.insert(0, str(site))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert "dereload" in so.load_plugins(["dereload"])["loaded"]
    x = so.array(np.arange(3.0))
    np.testing.assert_array_equal(so.ops.dereload_scale(x).asnumpy(), [0.0, 2.0, 4.0])

    (package / "__init__.py").write_text(textwrap.dedent(PLUGIN.format(factor=5.0)))
    with pytest.raises(so.OperatorError) as info:
        importlib.reload(sys.modules["dereload"])
    assert str(info.value) == (
        f"operator 'dereload_scale' is already registered (owner: plugin 'dereload'); to load the edited code of "
        f"plugin 'dereload', call sparse_ops.library.reload({str(package)!r}) instead: it replaces all of the "
        f"plugin's ops together; to put another class in its place, pass replace=True")

    module = so.library.reload(package)
    assert module is sys.modules["dereload"]
    np.testing.assert_array_equal(so.ops.dereload_scale(x).asnumpy(), [0.0, 5.0, 10.0])
    assert registry.owner_of("dereload_scale").kind == "plugin"
    assert so.plugins_info()["loaded"]["dereload"]["ops"] == ["dereload_scale"]
    assert so.get_op("dereload_scale").doc == "y = 5.0 x"


def test_reloading_a_path_nothing_was_loaded_from_says_what_reload_takes(tmp_path, isolated):
    path = tmp_path / "de_never.py"
    path.write_text(textwrap.dedent(PLUGIN.format(factor=1.0)))
    with pytest.raises(so.plugins.PluginError) as info:
        so.library.reload(path)
    assert str(info.value) == (
        f"cannot reload plugin 'de_never' from {path}: it is not loaded; library.reload reloads what "
        f"sparse_ops.library.load loaded from that path, or the module file or package folder of a plugin loaded "
        f"through its entry point")


def test_names_are_ascii_identifiers(isolated):
    """torch's operator schemas (and the C ABI) take ASCII names only: a non-ASCII op,
    argument or parameter name is refused at registration, not at the first torch call."""
    cls = type("Declared", (so.Op,), {"__module__": __name__})
    for bad in ("dbl_ünï", "lambda"):
        with pytest.raises(ValueError, match=f"operator names are ASCII identifiers and no Python keywords .* got "
                                             f"'{bad}'"):
            so.register(bad)(cls)
    assert "dbl_ünï" not in registry.list_ops()
    assert "'dätä' is not an ASCII identifier" in refusal("de_op", arguments=("dätä",))
    assert "parameter 'γ' is not an ASCII identifier" in refusal("de_op", **{"γ": so.Param(float, 1.0)})
