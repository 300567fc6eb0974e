"""The distribution ships every package of the source tree (a wheel, not only the editable
install), and no folder at the repository root shadows a dependency: the GPU backend's
``cuda/`` is a namespace portion (no ``__init__.py``), so from the root ``import cuda.bindings``
and ``numba.cuda`` find NVIDIA's packages while ``sparse_ops.cuda`` is ours."""
import json
import os
import pathlib
import subprocess
import sys
import zipfile

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_is_listed_in_pyproject():
    config = _config()
    listed = set(config["packages"])
    mapping = config["package-dir"]
    found = set()
    for import_root, folder in mapping.items():
        base = ROOT / folder
        if not (base / "__init__.py").exists():  # a namespace portion (cuda/): its modules are the package
            assert any(base.glob("*.py")), f"{folder}/ holds no modules"
            found.add(import_root)
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base).parts
            found.add(".".join((import_root, *rel)))
    assert found == listed, f"missing from pyproject: {sorted(found - listed)}; stale: {sorted(listed - found)}"


# Import names our dependencies own. Python puts the current directory first on sys.path for
# `python -m pytest` and `python -c`, so a package folder (one with __init__.py) of one of these
# names at the repository root would be imported instead of the real one (a `cuda/` package broke
# CuPy and numba-cuda, which import NVIDIA's `cuda.bindings` and `cuda.pathfinder`, on a real GPU
# machine). A folder without __init__.py is a namespace portion, merged with the real one.
DEPENDENCY_IMPORT_NAMES = {"cuda", "cupy", "cupyx", "numba", "numba_cuda", "numpy", "scipy", "torch", "jax", "jaxlib",
                           "pytest", "hypothesis", "llvmlite", "setuptools", "dask", "distributed"}


def test_no_root_folder_shadows_a_dependency():
    packages_at_root = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert packages_at_root, "expected the source packages at the repository root"
    assert not packages_at_root & DEPENDENCY_IMPORT_NAMES, sorted(packages_at_root & DEPENDENCY_IMPORT_NAMES)
    assert (ROOT / "cuda").is_dir() and not (ROOT / "cuda" / "__init__.py").exists()
    assert _config()["package-dir"]["sparse_ops.cuda"] == "cuda"


def test_from_the_repository_root_numba_cuda_cuda_bindings_and_sparse_ops_cuda_all_import():
    code = """
import importlib.util, json, os
import numba.cuda, sparse_ops, sparse_ops.cuda.kernels
out = {"numba.cuda": numba.cuda.__file__, "kernels": os.path.realpath(sparse_ops.cuda.kernels.__file__),
       "available": sparse_ops.cuda.is_available(), "simulator": sparse_ops.cuda.is_simulator()}
if importlib.util.find_spec("cuda.bindings") is not None:
    import cuda.bindings
    out["cuda.bindings"] = cuda.bindings.__file__
print(json.dumps(out))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("SPARSE_OPS_CUDA_SIM", "NUMBA_ENABLE_CUDASIM")}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    ours = str(ROOT / "cuda") + os.sep
    assert not out["numba.cuda"].startswith(ours), out  # numba's (numba-cuda's when installed)
    assert out["kernels"] == str(ROOT / "cuda" / "kernels.py")
    assert out["available"] is False and out["simulator"] is False  # no GPU on this machine, none simulated
    if "cuda.bindings" in out:  # NVIDIA's namespace package, not shadowed by the root's cuda/
        assert not out["cuda.bindings"].startswith(ours) and "site-packages" in out["cuda.bindings"], out


@pytest.mark.slow
def test_the_wheel_ships_the_gpu_backend_as_sparse_ops_cuda(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                             "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    [wheel] = tmp_path.glob("sparse_ops-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    backend = {n for n in names if n.startswith("sparse_ops/cuda/")}
    assert {"sparse_ops/cuda/kernels.py", "sparse_ops/cuda/spgemm.py"} <= backend
    assert "sparse_ops/cuda/__init__.py" not in names and not any(n.startswith("cuda/") for n in names)
    assert "sparse_ops/sdk/gpu_compile.py" in names and "sparse_ops/sdk/include/sparse_ops.h" in names
