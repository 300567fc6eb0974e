"""The C and CUDA plugin templates (``sparse-ops new-plugin --lang c`` / ``--lang cuda``): the
projects are complete; pip compiles their libraries at install with the system compiler
(nvcc for the CUDA one) against the installed sparse-ops' header; installed into a fresh
virtual environment (offline) the plugin is found through its entry point, ``sparse-ops
check`` passes and the project's own tests pass. The C project is installed as a wheel,
the CUDA one editable, by the next step ``new-plugin`` prints: the library lands beside
``__init__.py`` both ways. Without nvcc the CUDA build stops with a message saying so."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from plugin_venv import PIP_INSTALL_OFFLINE, ROOT, clean_env, fresh_venv, run

import sparse_ops as so
from sparse_ops.sdk import SDK_VERSION
from sparse_ops.sdk.cbuild import c_compiler, nvcc
from sparse_ops.sdk.scaffold import LANG_FILES, TEMPLATE, create, next_step

try:
    import tomllib  # Python 3.11+
except ImportError:  # pragma: no cover
    tomllib = None

NAMES = {"c": "myclib", "cuda": "mycuda"}


def op(lang: str) -> str:
    return f"{NAMES[lang]}_scaled_mul"


@pytest.fixture(scope="module")
def projects(tmp_path_factory) -> dict[str, Path]:
    parent = tmp_path_factory.mktemp("clib_plugins")
    return {lang: create(name, parent, lang=lang) for lang, name in NAMES.items()}


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """One fresh venv (sparse-ops editable) that both plugins are installed into; its bin folder."""
    return fresh_venv(tmp_path_factory.mktemp("clib_venv"))


def test_the_templates_ship(projects):
    for lang in NAMES:
        assert all((TEMPLATE / src).is_file() for src in LANG_FILES[lang])
    if tomllib is not None:  # the package data patterns of sparse_ops.sdk cover them
        patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
        shipped = {p for pattern in patterns["sparse_ops.sdk"] for p in TEMPLATE.parent.glob(pattern)}
        assert {TEMPLATE / src for lang in NAMES for src in LANG_FILES[lang]} <= shipped
    with pytest.raises(ValueError, match="unknown plugin language 'fortran'"):
        create("myfortran", projects["c"].parent, lang="fortran")


def test_the_c_template_compiles_clean_under_wall_wextra(projects, tmp_path):
    """The generated source follows the header's advice (SO_INIT, never a partial
    ``{SO_HEADER(...)}`` initialiser), so it builds under the strictest usual warnings."""
    source = projects["c"] / "csrc" / f"{NAMES['c']}.c"
    result = subprocess.run([c_compiler(), "-std=c99", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
                             f"-I{so.sdk.include_dir()}", str(source), "-o", str(tmp_path / "lib.so")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("lang", list(NAMES))
def test_the_project_is_complete(projects, lang):
    name, root = NAMES[lang], projects[lang]
    source = f"csrc/{name}.{'c' if lang == 'c' else 'cu'}"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == sorted(["README.md", "pyproject.toml", "setup.py", source, f"src/{name}/__init__.py",
                            f"tests/test_{name}.py"])
    for f in root.rglob("*"):
        if f.is_file():
            text = f.read_text()
            assert not re.search(r"\{\{\w+\}\}", text), f  # every placeholder filled
            if f.suffix == ".py":
                compile(text, str(f), "exec")
    pyproject = (root / "pyproject.toml").read_text()
    assert f'[project.entry-points."sparse_ops.plugins"]\n{name} = "{name}"' in pyproject
    if tomllib is not None:
        meta = tomllib.loads(pyproject)
        assert f"sparse-ops>={SDK_VERSION}" in meta["build-system"]["requires"]  # its header builds the library
        assert meta["tool"]["setuptools"]["package-dir"] == {"": "src"}
    assert "compile_library" in (root / "setup.py").read_text() and f'SOURCES = ["{source}"]' in (
        root / "setup.py").read_text()
    assert "so.library.register_shared(LIBRARY_PATH)" in (root / "src" / name / "__init__.py").read_text()
    code = (root / source).read_text()
    assert f'op.name = "{op(lang)}"' in code and "sparse_ops_library_init" in code
    if lang == "cuda":
        assert "__global__ void" in code and "static_cast<cudaStream_t>(ctx->stream)" in code
        assert "SO_DEVICE_GPU" in code
    assert "opcheck" in (root / "tests" / f"test_{name}.py").read_text()
    assert "--no-build-isolation" in next_step(name, root, lang)


def _installed_probe(lang: str) -> str:
    """Python run in a fresh process of the venv: the op was found through the entry point,
    belongs to the plugin, comes from the library beside the package's __init__.py, and
    computes alpha * x * y on the cpu. Prints the library's path."""
    name = NAMES[lang]
    return f"""
import numpy as np, sparse_ops as so
assert {op(lang)!r} in so.list_ops(), so.plugins_info()
info = so.plugins_info()["loaded"][{name!r}]
assert info["ops"] == [{op(lang)!r}] and info["version"] == "0.1.0" and info["sdk"] == ">=0.1,<0.2", info
opdef = so.get_op({op(lang)!r})
assert opdef.plugin == {name!r}
assert sorted(opdef.fcompute) == {['cpu'] if lang == 'c' else ['cpu', 'gpu']!r}, opdef.fcompute
import {name}
assert {name}.library.path == str({name}.LIBRARY_PATH)  # the library beside {name}/__init__.py
x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
y = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
out = so.ops.{op(lang)}(so.array(x), so.array(y), alpha=0.5)
np.testing.assert_allclose(out.asnumpy(), 0.5 * x * y, rtol=1e-6)
assert out.dtype == np.float32
print({name}.library.path)
"""


@pytest.mark.slow
def test_the_c_plugin_builds_at_install_and_is_discovered(projects, venv):
    """`pip install` (not editable) compiles csrc/myclib.c into the wheel; in a fresh process
    sparse_ops finds the plugin, `sparse-ops check` passes and the project's tests pass."""
    root, name = projects["c"], NAMES["c"]
    py = venv / "python"
    run([py, *PIP_INSTALL_OFFLINE, root], PIP_DISABLE_PIP_VERSION_CHECK="1")
    # the probe, then `sparse-ops check myclib` in the same fresh process
    probe = _installed_probe("c") + f"from sparse_ops.cli import main\nassert main(['check', {name!r}]) == 0\n"
    out = run([py, "-c", probe], cwd=root.parent).stdout.splitlines()
    library = Path(out[0])
    assert library.name == f"lib{name}.so" and "site-packages" in library.parts, library  # in the installed package
    assert not (root / "src" / name / library.name).exists()  # a wheel install leaves the sources alone
    assert f"  ok   {op('c')}: 2 samples; compared: determinism, gradient, inference" in out, out
    out = run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=root)
    assert "6 passed, 1 skipped" in out.stdout, out.stdout  # skipped: the gpu test


@pytest.mark.slow
def test_the_cuda_plugin_builds_with_nvcc_editable_and_its_cpu_kernel_runs(projects, venv):
    """The next step `new-plugin --lang cuda` prints (pip install --no-build-isolation -e,
    sparse-ops check, pytest) runs verbatim: nvcc compiles csrc/mycuda.cu into
    src/mycuda/libmycuda.so, whose cpu kernel runs on this gpu-less machine."""
    if nvcc() is None:
        pytest.skip("needs nvcc (CUDA_HOME or PATH)")
    root, name = projects["cuda"], NAMES["cuda"]
    env = {"PATH": f"{venv}{os.pathsep}{os.environ.get('PATH', '')}", "VIRTUAL_ENV": str(venv.parent),
           "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    out = run(["bash", "-c", next_step(name, root, "cuda")], cwd=root.parent, **env)
    assert f"ok   {op('cuda')}: 2 samples; compared: determinism, gradient, inference" in out.stdout
    assert re.search(r"=+ 6 passed, 1 skipped", out.stdout), out.stdout  # skipped: the gpu test (no gpu here)
    library = Path(run(["python", "-c", _installed_probe("cuda")], cwd=root.parent, **env).stdout.strip())
    assert library == root / "src" / name / f"lib{name}.so"  # the editable install builds it in place
    # nvcc embedded the gpu kernel's device code: an ELF section .nv_fatbin holding a fat
    # binary (magic 0xBA55ED50)
    data = library.read_bytes()
    assert b".nv_fatbin" in data and (0xBA55ED50).to_bytes(4, "little") in data


def test_without_nvcc_the_cuda_build_stops_and_says_why(tmp_path):
    """No nvcc on PATH and none in CUDA_HOME: building the CUDA plugin fails, and pip's
    output carries the reason and what to do (there is no silent cpu-only build)."""
    root = create("nonvcc", tmp_path, lang="cuda")
    path = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                           if d and not os.path.exists(os.path.join(d, "nvcc")))
    env = clean_env(PATH=path, PIP_DISABLE_PIP_VERSION_CHECK="1", CUDA_HOME=str(tmp_path / "no-cuda"))
    env.pop("CUDA_PATH", None)
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                             "--no-index", "-w", tmp_path / "wheels", root], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode != 0
    assert ("nonvcc: cannot build libnonvcc.so: no CUDA compiler (nvcc) found: set CUDA_HOME or put nvcc "
            "on PATH") in result.stdout + result.stderr, result.stdout + result.stderr
    assert not (tmp_path / "wheels").exists() or not list((tmp_path / "wheels").iterdir())


def test_the_sdk_guide_example_library_builds_and_loads_as_written(tmp_path):
    """docs/author/c-libraries.md, "C, C++ and CUDA libraries": its C library, compiled by the guide's
    own `cc` line, loads and runs the guide's Python lines (a fresh process), and `sparse-ops
    check ./libscale.so` checks it."""
    section = (ROOT / "docs" / "author" / "c-libraries.md").read_text()
    (tmp_path / "scale.c").write_text(re.search(r"```c\n(.*?)```", section, re.S).group(1))
    cc_line = re.search(r"```bash\n(cc [^\n]*?)\s+# C\n", section).group(1)
    bin_dir = Path(sys.executable).parent  # where `sparse-ops` is installed
    run(["bash", "-c", cc_line], cwd=tmp_path, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    python = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    check = python + textwrap.dedent("""
        assert lib.library.ops == ["scale"] and lib.__version__ == "scale 1.0"
        assert (so.ops.scale(x, alpha=3.0).asnumpy() == 3.0).all()
        from sparse_ops.cli import main
        assert main(["check", "./libscale.so"]) == 0  # as the guide says
        """)
    assert "  ok   scale: 1 samples" in run([sys.executable, "-c", check], cwd=tmp_path).stdout
