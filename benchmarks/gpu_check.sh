#!/usr/bin/env bash
# The real-GPU check: on a machine with an NVIDIA GPU, run the gpu-marked tests for real (no
# simulator), then benchmarks/gpu_check.py: every gpu op against the cpu (built-ins, cookbook,
# both bridges, the C examples), a side stream and a second device when present, and the
# timings only hardware gives, printed as one table. Meant to finish in under 10 minutes.
# Usage, from the repository root: bash benchmarks/gpu_check.sh
#
# Where the machine's python3 already has CuPy, numba-cuda, SciPy and pytest (a CUDA image with
# no network), the project is installed into it offline (editable, no dependencies); otherwise
# a fresh venv gets the `cuda` extra from the package index. When $OUT is set the log is
# copied there too.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${OUT:-/tmp}/gpu_check.log
exec > >(tee "$LOG") 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
unset SPARSE_OPS_CUDA_SIM NUMBA_ENABLE_CUDASIM
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
if python3 -c "import cupy, numba.cuda, scipy, pytest, hypothesis" 2>/dev/null; then
    PY=python3
    $PY -m pip install -q --no-deps --no-build-isolation --no-index -e . -e ./cookbook || exit 1
else
    python3 -m venv /tmp/sparse-ops-gpu-venv
    PY=/tmp/sparse-ops-gpu-venv/bin/python
    $PY -m pip install -q -e ".[dev,cuda]" -e ./cookbook || exit 1
fi
$PY - <<'PY'
import cupy, numba, numba.cuda, numpy, scipy, sparse_ops as so
print("python", __import__("sys").version.split()[0], "| numpy", numpy.__version__, "| scipy", scipy.__version__,
      "| numba", numba.__version__, "| cupy", cupy.__version__, "| gpus", so.num_gpus(),
      "| cuda available", numba.cuda.is_available())
PY
# one pytest worker per few cores when pytest-xdist is there: each compiles its own kernels
XDIST=$($PY -c "import xdist, os; print('-n', min(8, os.cpu_count() // 2))" 2>/dev/null || true)
status=0
# (the driver's own smoke test is left out: the driver runs at full size next)
timeout 200 $PY -m pytest -q -m gpu -p no:cacheprovider -rfE --tb=short --ignore=tests/test_gpu_check.py $XDIST || status=$?
# one table: correctness against the cpu, streams and devices, bridges, C examples, timings
timeout 360 $PY -m benchmarks.gpu_check || status=$?
echo "gpu_check exit status: $status"
exit $status
