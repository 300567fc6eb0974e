"""The plugin template (``sparse-ops new-plugin``): the project it writes is complete, its
op passes ``opcheck`` (cpu, and the numba.cuda kernel in the CUDA simulator), and once
``pip install``ed into a fresh virtual environment it is discovered through its entry
point and its own tests pass there; the next step ``new-plugin`` prints runs verbatim from
the folder where the project was created. Everything runs offline."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from plugin_venv import PIP_OFFLINE, ROOT, fresh_venv, run

from sparse_ops.sdk import SDK_VERSION
from sparse_ops.sdk.scaffold import FILES, TEMPLATE, create, next_step, render, sdk_range, validate_name

try:
    import tomllib  # Python 3.11+
except ImportError:  # pragma: no cover
    tomllib = None

NAME = "myops"
OP = f"{NAME}_scale_rows"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return create(NAME, tmp_path_factory.mktemp("plugin"))


def test_the_template_ships_its_files():
    if tomllib is None:
        pytest.skip("needs tomllib (Python 3.11+)")
    assert all((TEMPLATE / src).is_file() for src in FILES)
    # no __init__.py under sdk/: the template is data, not a subpackage of sparse_ops.sdk
    assert not list(TEMPLATE.rglob("*.py"))
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = config["package-data"]["sparse_ops.sdk"]
    shipped = {p.relative_to(TEMPLATE.parent) for pattern in patterns for p in TEMPLATE.parent.glob(pattern)}
    assert {Path("template") / src for src in FILES} <= shipped


def test_names_and_ranges():
    assert validate_name("myops") == "myops"
    for bad in ("MyOps", "my-ops", "1ops", "class", "", "sparse_ops", "os"):
        with pytest.raises(ValueError):
            validate_name(bad)
    assert sdk_range("0.1") == ">=0.1,<0.2" and sdk_range("1.3") == ">=1.3,<2"
    assert render("{{a}}-{{b}}", {"a": "x", "b": "y"}) == "x-y"
    with pytest.raises(KeyError):
        render("{{missing}}", {})


def test_the_project_is_complete(project):
    files = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    assert files == ["README.md", "pyproject.toml", "src/myops/__init__.py", "src/myops/kernels.py",
                     "tests/test_myops.py"]
    for f in project.rglob("*"):
        if f.is_file():
            text = f.read_text()
            assert "{{" not in text and "}}" not in text, f
            if f.suffix == ".py":
                compile(text, str(f), "exec")
    pyproject = (project / "pyproject.toml").read_text()
    assert f'[project.entry-points."sparse_ops.plugins"]\n{NAME} = "{NAME}"' in pyproject
    if tomllib is not None:
        meta = tomllib.loads(pyproject)
        assert meta["project"]["entry-points"]["sparse_ops.plugins"] == {NAME: NAME}
        assert meta["tool"]["setuptools"]["package-dir"] == {"": "src"}  # see test_the_printed_next_step...
    init = (project / "src" / NAME / "__init__.py").read_text()
    assert f'SPARSE_OPS_SDK = ">={SDK_VERSION},<0.2"' in init and f'@so.register("{OP}")' in init
    assert '@so.kernel(device=("cpu", "gpu"), stypes=("csr", "default"))' in init
    assert "@row_kernel" in (project / "src" / NAME / "kernels.py").read_text()  # one body for both devices
    assert "opcheck" in (project / "tests" / "test_myops.py").read_text()
    with pytest.raises(Exception, match="already exists"):
        create(NAME, project.parent)


def test_sparse_ops_check_passes_on_cpu_and_on_the_simulated_gpu(project):
    """`sparse-ops check <folder>` loads the plugin from its folder and runs opcheck over its
    samples; with SPARSE_OPS_CUDA_SIM=1 opcheck also runs the numba.cuda kernel and compares."""
    out = run([sys.executable, "-m", "sparse_ops", "check", project], cwd=project)
    assert f"ok   {OP}: 5 samples" in out.stdout and "gpu: no" in out.stdout
    out = run([sys.executable, "-m", "sparse_ops", "check", project], cwd=project, SPARSE_OPS_CUDA_SIM="1")
    assert f"ok   {OP}: 5 samples" in out.stdout and "gpu: simulated" in out.stdout


def test_the_gpu_kernel_compiles_for_the_real_cuda_target(project):
    """`sparse-ops check --gpu-compile <folder>`: the checks in the simulator, then the
    template's numba.cuda kernel compiled to PTX for every signature they launched."""
    pytest.importorskip("numba_cuda", reason="needs the gpu-compile extra (numba-cuda, NVVM)")
    out = run([sys.executable, "-m", "sparse_ops", "check", "--gpu-compile", project], cwd=project)
    assert f"ok   {OP}: 5 samples" in out.stdout and "gpu: simulated" in out.stdout
    summary = out.stdout.strip().splitlines()[-1]
    assert re.match(r"gpu-compile \(sm_80\): \d+ row kernels, [1-9]\d* signatures compiled .* 0 refused, 0 not found",
                    summary), summary


def test_the_gpu_kernel_runs_in_the_cuda_simulator(project):
    code = f"""
import numpy as np, sparse_ops as so
so.library.load({str(project)!r})
for (x, scale), params in so.get_op({OP!r}).cls.samples():
    if x.stype != "csr":
        continue
    xg, sg = x.to(so.gpu(0)), scale.to(so.gpu(0))
    plan = so.explain({OP!r}, xg, sg, **params)
    assert plan["dispatch_mode"] == "fcompute_ex" and plan["kernel"].endswith(".csr"), plan
    y = so.ops.{OP}(xg, sg, **params)
    want = params.get("alpha", 1.0) * scale.asnumpy()[:, None] * x.asnumpy()
    np.testing.assert_allclose(y.asnumpy(), want, rtol=1e-6)
    assert y.stype == "csr" and y.device == so.gpu(0)
import numba
print("simulated" if numba.config.ENABLE_CUDASIM else "hardware")
"""
    out = run([sys.executable, "-c", code], cwd=project, SPARSE_OPS_CUDA_SIM="1")
    assert out.stdout.strip() == "simulated"


@pytest.mark.slow
def test_the_printed_next_step_runs_verbatim_from_where_the_project_was_created(tmp_path):
    """`sparse-ops new-plugin myops` prints `python -m pip install -e ... && sparse-ops check myops
    && python -m pytest .../tests`; pasted into a shell in the folder where it ran (with the
    venv's bin first on PATH, as an activated venv has it, and pip told to stay offline) it
    exits 0: `check myops` takes the name for the installed plugin, not the folder ./myops,
    and pytest imports the installed package, which the project folder does not shadow."""
    bin_dir = fresh_venv(tmp_path)
    parent = tmp_path / "work"
    parent.mkdir()
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "VIRTUAL_ENV": str(bin_dir.parent),
           "PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0",  # (pip reads "0" as: no isolation)
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    created = run(["sparse-ops", "new-plugin", NAME], cwd=parent, **env)
    line = created.stdout.strip().splitlines()[-1]
    assert line.startswith("next: ") and line[len("next: "):] == next_step(NAME, parent / NAME)
    out = run(["bash", "-c", line[len("next: "):]], cwd=parent, **env)
    assert f"ok   {OP}: " in out.stdout and re.search(r"\n=+ \d+ passed", out.stdout), out.stdout
    # the installed package is the project's src/myops, and the folder ./myops (a would-be
    # namespace package) does not hide it from Python run in `parent`
    where = run(["python", "-c", f"import {NAME}; print({NAME}.__file__)"], cwd=parent, **env).stdout.strip()
    assert where == str(parent / NAME / "src" / NAME / "__init__.py")
    # the folder, written as a path, is the same plugin, checked from its source
    for argv in (["sparse-ops", "check", f"./{NAME}"], ["sparse-ops", "check", "--path", NAME]):
        assert f"ok   {OP}: " in run(argv, cwd=parent, **env).stdout


@pytest.mark.slow
def test_pip_installed_plugin_is_discovered_and_its_tests_pass(project, tmp_path):
    """The plugin and sparse-ops installed (editable, offline) into a fresh venv that sees this
    environment's numpy/scipy/numba: sparse_ops finds the op through the entry point at import,
    `sparse-ops check` passes, and the plugin's own tests pass (the gpu one in the simulator)."""
    bin_dir = fresh_venv(tmp_path)
    py = bin_dir / "python"
    run([py, *PIP_OFFLINE, project], PIP_DISABLE_PIP_VERSION_CHECK="1")

    out = run([py, "-c", f"""
import sys, sparse_ops
assert sparse_ops.__file__.startswith({str(ROOT)!r}), sparse_ops.__file__
assert {OP!r} in sparse_ops.list_ops()
info = sparse_ops.plugins_info()["loaded"][{NAME!r}]
assert info["ops"] == [{OP!r}] and info["version"] == "0.1.0" and info["sdk"] == ">=0.1,<0.2", info
assert sparse_ops.get_op({OP!r}).plugin == {NAME!r}
if sparse_ops.plugins.installed_plugins() == [{NAME!r}]:  # other plugins may import numba
    assert "numba" not in sys.modules  # the plugin imports its kernels lazily
print("discovered")
"""], cwd=tmp_path)
    assert out.stdout.strip() == "discovered"
    off = run([py, "-c", f"import sparse_ops; print({OP!r} in sparse_ops.list_ops())"], cwd=tmp_path,
              SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD="1")
    assert off.stdout.strip() == "False"

    out = run([bin_dir / "sparse-ops", "check", NAME], cwd=tmp_path)
    assert f"ok   {OP}: 5 samples" in out.stdout
    out = run([bin_dir / "sparse-ops", "plugins"], cwd=tmp_path)
    assert f"{NAME} 0.1.0, SDK >=0.1,<0.2 — entry point '{NAME}' of {NAME} 0.1.0" in out.stdout

    pytest_cmd = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    out = run(pytest_cmd, cwd=project)
    assert "6 passed, 1 skipped" in out.stdout, out.stdout
    out = run(pytest_cmd, cwd=project, SPARSE_OPS_CUDA_SIM="1")
    assert "7 passed" in out.stdout, out.stdout


@pytest.mark.gpu
def test_template_op_on_the_gpu_device(project):
    """In the gpu run (SPARSE_OPS_CUDA_SIM=1 or hardware): the scaffolded plugin, loaded at
    run time, passes opcheck, which compares its numba.cuda kernel with the cpu kernels."""
    import sparse_ops as so
    from sparse_ops.sdk.testing import opcheck

    if so.num_gpus() == 0:
        pytest.skip("no gpu (set SPARSE_OPS_CUDA_SIM=1 to simulate one)")
    module = so.library.load(project / "src" / NAME)
    op = so.get_op(OP)
    assert op.plugin is not None and ("gpu" in op.fcompute or any(d == "gpu" for d, _ in op.fcompute_ex))
    samples = op.cls.samples()
    assert opcheck(OP, samples) == len(samples)
    gpu_inputs = [x.to(so.gpu(0)) for x in (samples[0][0] if isinstance(samples[0], tuple) else samples[0])]
    assert so.explain(OP, *gpu_inputs)["device"] == "gpu(0)"
    del module
