"""Plugins: discovery through entry points, run-time loading from a path, isolation of
failures (reported by name, half-registered ops rolled back), SDK version ranges, op
attribution, the allow-list, and autoload at import."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import sparse_ops as so
from sparse_ops import plugins
from sparse_ops.plugins import PluginError, PluginWarning, sdk_satisfies




def write(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def plugin_source(prefix: str, extra: str = "", sdk: str | None = ">=0.1,<0.2") -> str:
    """A plugin module registering ``{prefix}_double`` (dense, cpu) then running ``extra``."""
    declare = f"SPARSE_OPS_SDK = {sdk!r}\n" if sdk is not None else ""
    return declare + textwrap.dedent(f"""
        import sparse_ops as so

        @so.register("{prefix}_double")
        class Double(so.Op):
            '''y = 2 x'''
            @so.kernel(device=("cpu", "gpu"))
            def dense(self, ctx, x, y):
                y[...] = 2 * x
            @classmethod
            def samples(cls):
                import numpy as np
                return [[so.array(np.arange(4.0))]]
        """) + textwrap.dedent(extra)


def make_dist(site, dist: str, version: str, entries: dict[str, str], egg: bool = False):
    """A distribution's metadata folder in ``site`` declaring ``entries`` in our group."""
    folder = site / (f"{dist}.egg-info" if egg else f"{dist}-{version}.dist-info")
    lines = ["[console_scripts]", "unrelated = x:y", "", f"[{plugins.ENTRY_POINT_GROUP}]"]
    lines += [f"{k} = {v}" for k, v in entries.items()]
    write(folder / "entry_points.txt", "\n".join(lines) + "\n")
    write(folder / ("PKG-INFO" if egg else "METADATA"), f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n\n")
    return folder


# ---- SDK version ranges ----------------------------------------------------------------------------
@pytest.mark.parametrize("spec, version, ok", [
    (">=0.1,<0.2", "0.1", True), (">=0.1,<0.2", "0.2", False), (">=0.1, <0.2", "0.1.5", True),
    ("==0.1", "0.1.0", True), ("==0.1", "0.10", False), (">0.1", "0.1", False), ("<=0.1", "0.1", True),
    ("!=0.1", "0.1", False), (">=0.9", "0.10", True), (">=1.0", "0.99", False),
])
def test_sdk_range_comparator(spec, version, ok):
    assert sdk_satisfies(spec, version) is ok


@pytest.mark.parametrize("spec", ["", "0.1", "~=0.1", ">=0.1;<0.2", ">=a.b", ">= 0.1 <0.2"])
def test_malformed_sdk_ranges_are_refused(spec):
    with pytest.raises(ValueError):
        sdk_satisfies(spec, "0.1")


def test_default_version_is_the_sdk_version():
    assert so.sdk.SDK_VERSION == "0.1" and sdk_satisfies(">=0.1,<0.2")


# ---- library.load --------------------------------------------------------------------------------------
def test_library_load_file_registers_attributed_ops(tmp_path, isolated):
    path = write(tmp_path / "plg_file.py", plugin_source("plgfile", """
        @so.register("plgfile_broken")
        class Broken(so.Op):
            @so.kernel(device="cpu")
            def dense(self, ctx, x, y):
                raise RuntimeError("kaboom")
        """))
    module = so.library.load(path)
    assert module.__name__ == "plg_file" and sys.modules["plg_file"] is module
    assert {"plgfile_double", "plgfile_broken"} <= set(so.list_ops())
    assert so.get_op("plgfile_double").plugin == "plg_file"
    np.testing.assert_array_equal(so.ops.plgfile_double(so.array(np.arange(3.0))).asnumpy(), [0, 2, 4])
    info = so.plugins_info()["loaded"]["plg_file"]
    assert info["ops"] == ["plgfile_broken", "plgfile_double"] and info["sdk"] == ">=0.1,<0.2"
    assert info["source"] == str(path)
    # errors from its kernels name the op and the plugin
    with pytest.raises(so.OperatorError, match=r"plgfile_broken.*plugin plg_file.*kaboom"):
        so.ops.plgfile_broken(so.array(np.ones(2)))
    # loading again is a no-op; another file under the same name is refused
    assert so.library.load(str(path)) is module
    other = write(tmp_path / "elsewhere" / "plg_file.py", plugin_source("plgother"))
    with pytest.raises(PluginError, match="plg_file.*already loaded"):
        so.library.load(other)


def test_library_load_package_folder_with_relative_imports(tmp_path, isolated):
    pkg = tmp_path / "plgpkg"
    write(pkg / "__init__.py", "from . import ops\n__version__ = '2.3'\n")
    write(pkg / "ops.py", plugin_source("plgpkg") + "\nfrom .helpers import FACTOR\n")
    write(pkg / "helpers.py", "FACTOR = 3\n")
    module = so.library.load(pkg)
    assert module.ops.FACTOR == 3 and sys.modules["plgpkg.ops"] is module.ops
    info = so.plugins_info()["loaded"]["plgpkg"]
    assert info["version"] == "2.3" and info["ops"] == ["plgpkg_double"]
    # a project folder (pyproject + NAME/) loads the package inside it
    project = tmp_path / "plgproj"
    write(project / "pyproject.toml", "[project]\nname = 'plgproj'\n")
    write(project / "plgproj" / "__init__.py", plugin_source("plgproj"))
    assert so.library.load(project).__name__ == "plgproj" and "plgproj_double" in so.list_ops()


def test_library_load_refuses_bad_paths(tmp_path, isolated):
    with pytest.raises(PluginError, match="no such file"):
        so.library.load(tmp_path / "missing.py")
    write(tmp_path / "notes.txt", "hello")
    with pytest.raises(PluginError, match="expected a .py file"):
        so.library.load(tmp_path / "notes.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PluginError, match="needs an __init__.py"):
        so.library.load(tmp_path / "empty")
    write(tmp_path / "bad-name.py", "")
    with pytest.raises(PluginError, match="not a valid module name"):
        so.library.load(tmp_path / "bad-name.py")
    write(tmp_path / "json.py", "")  # a different module of that name is imported already
    import json  # noqa: F401

    with pytest.raises(PluginError, match="different module named 'json'"):
        so.library.load(tmp_path / "json.py")
    assert issubclass(PluginError, so.OperatorError)


def test_a_plugin_failing_part_way_leaves_nothing_registered(tmp_path, isolated):
    path = write(tmp_path / "plg_half.py", plugin_source("plghalf", """
        @so.register("plghalf_second")
        class Second(so.Op):
            @so.kernel(device="cpu")
            def dense(self, ctx, x, y):
                y[...] = x
        raise ImportError("a dependency is missing")
        """))
    with pytest.raises(PluginError, match="plugin 'plg_half' failed to load: ImportError: a dependency is missing"):
        so.library.load(path)
    assert "plghalf_double" not in so.list_ops() and "plghalf_second" not in so.list_ops()
    assert not hasattr(so.ops, "plghalf_double") and "plg_half" not in sys.modules
    failed = so.plugins_info()["failed"]["plg_half"]
    assert "a dependency is missing" in failed["reason"] and "plg_half" not in so.plugins_info()["loaded"]
    assert "Traceback" in plugins.failure_details("plg_half")
    # fixed, it loads, and leaves the failed list
    write(path, plugin_source("plghalf"))
    so.library.load(path)
    assert "plg_half" in so.plugins_info()["loaded"] and "plg_half" not in so.plugins_info()["failed"]


@pytest.mark.parametrize("raising", ["raise SystemExit(3)", "class Stop(BaseException):\n    pass\nraise Stop('stop')"])
def test_a_plugin_raising_a_base_exception_is_reported_not_fatal(tmp_path, isolated, raising):
    """sys.exit, a test framework's skip raised at import time, or any BaseException of the
    plugin's own: the load fails by name and the process goes on."""
    path = write(tmp_path / "plg_base.py", plugin_source("plgbase") + "\n" + raising + "\n")
    with pytest.raises(PluginError, match="plugin 'plg_base' failed to load: (SystemExit: 3|Stop: stop)"):
        so.library.load(path)
    assert "plgbase_double" not in so.list_ops() and "plg_base" not in sys.modules
    assert "plg_base" in so.plugins_info()["failed"]


def test_a_keyboard_interrupt_while_a_plugin_loads_stops_and_rolls_back(tmp_path, isolated):
    path = write(tmp_path / "plg_ctrlc.py", plugin_source("plgctrlc") + "\nraise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        so.library.load(path)
    assert "plgctrlc_double" not in so.list_ops() and "plg_ctrlc" not in sys.modules


# a plugin replacing the built-in negative with its own (the same values)
REPLACES_NEGATIVE = """
    import sparse_ops as so

    @so.register("negative", replace=True)
    class MyNegative(so.Op):
        @so.kernel(device="cpu")
        def dense(self, ctx, x, y):
            y[...] = -x
    """


def test_a_plugin_replacing_a_builtin_is_restored_when_it_fails(tmp_path, isolated):
    builtin = so.get_op("negative")
    path = write(tmp_path / "plg_replace.py", REPLACES_NEGATIVE + '    raise RuntimeError("boom")\n')
    with pytest.raises(PluginError, match="RuntimeError: boom"):
        so.library.load(path)
    assert so.get_op("negative") is builtin and so.get_op("negative").plugin is None


def test_an_unsupported_sdk_range_is_refused_before_the_plugin_runs(tmp_path, isolated):
    path = write(tmp_path / "plg_future.py", 'SPARSE_OPS_SDK = ">=0.2"\nraise RuntimeError("must not run")\n')
    with pytest.raises(PluginError, match=r"plugin 'plg_future' supports sparse_ops SDK >=0.2, but this is SDK 0.1"):
        so.library.load(path)
    assert "SDK >=0.2" in so.plugins_info()["failed"]["plg_future"]["reason"]


def test_a_computed_sdk_range_is_checked_after_import_and_rolled_back(tmp_path, isolated):
    path = write(tmp_path / "plg_late.py", plugin_source("plglate", sdk=None) + "\nSPARSE_OPS_SDK = '<' + '0.1'\n")
    with pytest.raises(PluginError, match="supports sparse_ops SDK <0.1"):
        so.library.load(path)
    assert "plglate_double" not in so.list_ops() and "plg_late" not in sys.modules
    bad = write(tmp_path / "plg_badspec.py", plugin_source("plgbadspec", sdk="0.1"))
    with pytest.raises(PluginError, match="plg_badspec.*bad clause"):
        so.library.load(bad)
    nonstr = write(tmp_path / "plg_nonstr.py", "SPARSE_OPS_SDK = 0.1\n")
    with pytest.raises(PluginError, match="must be a string"):
        so.library.load(nonstr)
    # no declaration at all: accepted
    so.library.load(write(tmp_path / "plg_nodecl.py", plugin_source("plgnodecl", sdk=None)))
    assert so.plugins_info()["loaded"]["plg_nodecl"]["sdk"] is None


def test_two_plugins_cannot_register_one_name(tmp_path, isolated):
    so.library.load(write(tmp_path / "plg_first.py", plugin_source("plgshared")))
    second = write(tmp_path / "plg_second.py", """
        import sparse_ops as so

        @so.register("plgsecond_own")
        class Own(so.Op):
            @so.kernel(device="cpu")
            def dense(self, ctx, x, y):
                y[...] = x

        @so.register("plgshared_double", replace=True)  # replace=True does not help across plugins
        class Mine(so.Op):
            @so.kernel(device="cpu")
            def dense(self, ctx, x, y):
                y[...] = 2 * x
        """)
    with pytest.raises(PluginError, match=r"plugin 'plg_second' cannot register operator 'plgshared_double': "
                                          r"library file .*plg_first\.py \(plugin 'plg_first'\) already "
                                          r"registered it"):
        so.library.load(second)
    assert so.get_op("plgshared_double").plugin == "plg_first"
    assert "plgsecond_own" not in so.list_ops()  # rolled back with the failure


def test_register_messages_name_the_plugins(isolated):
    from sparse_ops.registry import Owner, registering_as

    def declare(name):
        @so.register(name)
        class T(so.Op):
            @so.kernel(device="cpu")
            def dense(self, ctx, x, y):
                y[...] = x
        return T

    with registering_as(Owner("plugin", "plg_a")):
        declare("plgreg_x")
        with pytest.raises(so.OperatorError, match="plugin 'plg_a': operator 'plgreg_x' is already registered "
                                                   r"\(owner: plugin 'plg_a'\)"):
            declare("plgreg_x")
        with pytest.raises(so.OperatorError, match=r"'plg_a'.*'negative'.*\(owner: a built-in\)"):
            declare("negative")
    assert so.get_op("plgreg_x").plugin == "plg_a"
    with pytest.raises(so.OperatorError, match=r"^operator 'plgreg_x' is already registered \(owner: plugin 'plg_a'\)"):
        declare("plgreg_x")  # no plugin loading: the message names the owner only


# ---- entry points -------------------------------------------------------------------------------------
@pytest.fixture
def site(tmp_path, isolated):
    """A folder on sys.path holding plugin modules and their distributions' metadata."""
    site = tmp_path / "site"
    write(site / "plg_good.py", plugin_source("plggood") + "\n__version__ = 'from-module'\n")
    write(site / "plg_raises.py", plugin_source("plgraises", "raise ValueError('bad plugin')\n"))
    write(site / "plg_old.py", plugin_source("plgold", sdk="<0.1"))
    write(site / "plg_hooked.py", textwrap.dedent("""
        import sparse_ops as so
        CALLED = []

        def setup():
            CALLED.append(1)

            @so.register("plghooked_id")
            class Identity(so.Op):
                @so.kernel(device="cpu")
                def dense(self, ctx, x, y):
                    y[...] = x
        """))
    make_dist(site, "plg_good", "1.2.0", {"plggood": "plg_good"})
    make_dist(site, "plg-bad", "0.0.1", {"plgraises": "plg_raises", "plgold": "plg_old"})
    make_dist(site, "plg_hooked", "3.0", {"plghooked": "plg_hooked:setup"}, egg=True)
    sys.path.insert(0, str(site))
    return site


def test_fast_scan_agrees_with_importlib_metadata(site):
    from importlib.metadata import entry_points

    ours = {(ep.name, ep.value, ep.version) for ep in plugins._scan_entry_points()}
    theirs = {(ep.name, ep.value, ep.dist.version) for ep in entry_points(group=plugins.ENTRY_POINT_GROUP)}
    assert ours == theirs
    assert {("plggood", "plg_good", "1.2.0"), ("plghooked", "plg_hooked:setup", "3.0")} <= ours


def test_the_importlib_metadata_backport_keeps_the_fast_scan(site):
    """Dask imports the ``importlib_metadata`` backport, whose path finder reads sys.path as
    ours does: the fast scan still answers (it gave way to importlib.metadata before)."""
    backport = pytest.importorskip("importlib_metadata")
    assert any(type(f).__module__ == "importlib_metadata" for f in sys.meta_path)
    ours = {(ep.name, ep.value) for ep in plugins._scan_entry_points()}
    assert ours == {(ep.name, ep.value) for ep in backport.entry_points(group=plugins.ENTRY_POINT_GROUP)}


def test_a_duplicate_distribution_later_on_the_path_is_ignored(site, tmp_path):
    shadow = tmp_path / "shadow"
    make_dist(shadow, "plg_good", "9.9", {"plggood": "nowhere", "plgshadow": "nowhere"})
    sys.path.append(str(shadow))
    names = {ep.name: ep.value for ep in plugins._entry_points()}
    assert names["plggood"] == "plg_good" and "plgshadow" not in names


def test_load_plugins_loads_good_ones_and_reports_bad_ones_by_name(site):
    sys.path[:] = [str(site)]  # only our distributions (restored after the test); imports are cached
    with pytest.warns(PluginWarning) as caught:
        info = so.load_plugins()
    messages = [str(w.message) for w in caught]
    assert any("'plgraises'" in m and "ValueError: bad plugin" in m for m in messages)
    assert any("'plgold'" in m and "SDK <0.1" in m for m in messages)
    assert info["loaded"]["plggood"] == {"version": "1.2.0", "sdk": ">=0.1,<0.2",
                                         "source": "entry point 'plg_good' of plg_good 1.2.0",
                                         "ops": ["plggood_double"]}
    assert info["loaded"]["plghooked"]["ops"] == ["plghooked_id"]  # the hook ran under the plugin's name
    assert sys.modules["plg_hooked"].CALLED == [1]
    assert set(info["failed"]) >= {"plgraises", "plgold"}
    assert "plgraises_double" not in so.list_ops() and "plgold_double" not in so.list_ops()
    assert so.get_op("plggood_double").plugin == "plggood"
    # a second call leaves loaded plugins alone (no re-import, no duplicate registration)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PluginWarning)
        so.load_plugins()
    assert sys.modules["plg_hooked"].CALLED == [1]


def test_load_plugins_with_names_is_an_allow_list(site):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about
        info = so.load_plugins(["plggood"])
    assert "plggood" in info["loaded"] and "plghooked" not in info["loaded"]
    assert "plg_raises" not in sys.modules and "plghooked_id" not in so.list_ops()
    with pytest.warns(PluginWarning, match=r"'plgmissing'.*no entry point named 'plgmissing'.*plggood"):
        info = so.load_plugins(["plgmissing"])
    assert "no entry point" in info["failed"]["plgmissing"]["reason"]
    assert set(plugins.installed_plugins()) >= {"plggood", "plghooked", "plgold", "plgraises"}


def test_a_plain_import_is_adopted_by_the_plugin(site):
    import plg_good  # noqa: F401  (registered without a plugin name)

    assert so.get_op("plggood_double").plugin is None
    info = so.load_plugins(["plggood"])
    assert info["loaded"]["plggood"]["ops"] == ["plggood_double"]
    assert so.get_op("plggood_double").plugin == "plggood"


# ---- autoload at import -------------------------------------------------------------------------------
def run_python(code: str, site, **env_changes) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPARSE_OPS_CUDA_SIM", "NUMBA_ENABLE_CUDASIM", "SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD")}
    env["PYTHONPATH"] = os.pathsep.join([str(site)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(env_changes)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=300)


def test_import_autoloads_plugins_and_survives_broken_ones(site):
    result = run_python("""
        import sys, sparse_ops
        info = sparse_ops.plugins_info()
        mine = lambda names: sorted(n for n in names if n.startswith("plg"))  # other plugins may be installed
        print(mine(info["loaded"]), mine(info["failed"]))
        print("plggood_double" in sparse_ops.list_ops(), sparse_ops.get_op("plggood_double").plugin)
        print("numba" in sys.modules, "scipy" in sys.modules, "importlib.metadata" in sys.modules)
    """, site)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "['plggood', 'plghooked'] ['plgold', 'plgraises']"
    assert lines[1] == "True plggood"
    # discovery reads entry_points.txt itself: no importlib.metadata; plugins (ours, and the
    # cookbook when installed) import neither numba nor scipy
    assert lines[2] == "False False False"
    assert "plugin 'plgraises' not loaded: ValueError: bad plugin" in result.stderr


def test_autoload_can_be_disabled_and_plugins_loaded_by_name(site):
    result = run_python("""
        import sparse_ops
        print(sparse_ops.plugins_info())
        print(sorted(sparse_ops.load_plugins(["plggood"])["loaded"]))
    """, site, SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["{'loaded': {}, 'failed': {}}", "['plggood']"]
    assert result.stderr == ""


def test_a_failed_package_leaves_no_half_imported_modules(site):
    write(site / "plg_pkgfail" / "__init__.py", "from . import ops\nraise RuntimeError('late failure')\n")
    write(site / "plg_pkgfail" / "ops.py", plugin_source("plgpkgfail"))
    make_dist(site, "plg_pkgfail", "1.0", {"plgpkgfail": "plg_pkgfail"})
    with pytest.warns(PluginWarning, match="'plgpkgfail'.*RuntimeError: late failure"):
        so.load_plugins(["plgpkgfail"])
    assert "plg_pkgfail" not in sys.modules and "plg_pkgfail.ops" not in sys.modules
    assert "plgpkgfail_double" not in so.list_ops()


def test_a_plugin_replacing_a_builtin_is_said_in_a_warning(tmp_path, isolated):
    path = write(tmp_path / "plg_steal.py", REPLACES_NEGATIVE)
    with pytest.warns(PluginWarning, match=r"plugin 'plg_steal' replaced the built-in operator\(s\) 'negative'"):
        so.library.load(path)
    assert so.get_op("negative").plugin == "plg_steal"
    np.testing.assert_array_equal(so.negative(so.array(np.array([1.0, -2.0]))).asnumpy(), [-1.0, 2.0])
