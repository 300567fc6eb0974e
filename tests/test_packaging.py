"""The distribution ships every package of the source tree (a wheel, not only the editable install)."""
import pathlib
import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_every_package_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapping = config["package-dir"]
    found = set()
    for import_root, folder in mapping.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base).parts
            found.add(".".join((import_root, *rel)))
    assert found == listed, f"missing from pyproject: {sorted(found - listed)}; stale: {sorted(listed - found)}"


# Import names our dependencies own. Python puts the current directory first on sys.path for
# `python -m pytest` and `python -c`, so a package folder of one of these names at the repository
# root would be imported instead of the real one (a `cuda/` folder broke CuPy and numba-cuda,
# which import NVIDIA's `cuda.bindings` and `cuda.pathfinder`, on a real GPU machine).
DEPENDENCY_IMPORT_NAMES = {"cuda", "cupy", "cupyx", "numba", "numba_cuda", "numpy", "scipy", "torch", "jax", "jaxlib",
                           "pytest", "hypothesis", "llvmlite", "setuptools", "dask", "distributed"}


def test_no_root_folder_shadows_a_dependency():
    packages_at_root = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert packages_at_root, "expected the source packages at the repository root"
    assert not packages_at_root & DEPENDENCY_IMPORT_NAMES, sorted(packages_at_root & DEPENDENCY_IMPORT_NAMES)
