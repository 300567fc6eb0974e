"""Installing scaffolded plugin projects into fresh virtual environments, offline: the
helpers of tests/test_template.py (Python plugins) and tests/test_clib_template.py (C and
CUDA plugins)."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def clean_env(**changes: str) -> dict[str, str]:
    """The environment of a child process: none of the parent's simulator, plugin, path or
    index settings, and no recording of gpu launches (CI's record is of this tree's kernels;
    the scaffolded projects compile their own with `check --gpu-compile`)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPARSE_OPS_CUDA_SIM", "NUMBA_ENABLE_CUDASIM", "SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD",
                        "PYTHONPATH", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "SPARSE_OPS_GPU_SIGNATURES")}
    env.update(changes)
    return env


def run(cmd: list, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in cmd], cwd=cwd, env=clean_env(**env), capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"
    return result


def _parent_site_packages() -> list[str]:
    paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    import site

    paths.update(site.getsitepackages())
    return sorted(p for p in paths if os.path.isdir(p))


def fresh_venv(where: Path) -> Path:
    """A venv without pip of its own that sees this environment's packages (numpy, scipy,
    numba, pip, setuptools, pytest), with sparse-ops installed editable, offline; returns
    its bin folder."""
    import importlib.metadata

    # looked up by their metadata, neither imported nor found through the import system:
    # setuptools' distutils hook, asked to find pip, hands later `import distutils` to the
    # standard library's copy, and any setuptools imported after that (torch.compile's C++
    # builder imports it) fails its own check
    for needed in ("pip", "setuptools"):
        try:
            importlib.metadata.distribution(needed)
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"needs {needed} in this environment to install offline")
    venv = where / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv])
    py = venv / "bin" / "python"
    purelib = run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    # when this interpreter is itself a venv, --system-site-packages reaches only the base
    # interpreter's packages: add ours (numpy, scipy, numba, pip, setuptools, pytest) as site
    # folders, so their own .pth files (editable installs: the cookbook) are read too
    Path(purelib, "_parent_environment.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in _parent_site_packages()))
    run([py, *PIP_OFFLINE, ROOT], PIP_DISABLE_PIP_VERSION_CHECK="1")
    return venv / "bin"


# pip without an index or build isolation: everything it needs is installed already;
# PIP_OFFLINE installs editable
PIP_INSTALL_OFFLINE = ["-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
PIP_OFFLINE = [*PIP_INSTALL_OFFLINE, "-e"]
