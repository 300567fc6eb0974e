#!/usr/bin/env bash
# The real-GPU check: on a machine with an NVIDIA GPU, install the cuda extra and run the
# gpu-marked tests for real (no simulator), then the gpu benchmarks. Meant to finish in
# under 8 minutes. Usage, from the repository root: bash benchmarks/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -m venv /tmp/sparse-ops-gpu-venv
. /tmp/sparse-ops-gpu-venv/bin/activate
pip install -q -e ".[dev,cuda]" -e ./cookbook
python -c "import cupy, sparse_ops as so; print('cupy', cupy.__version__, 'gpus', so.num_gpus())"
unset SPARSE_OPS_CUDA_SIM NUMBA_ENABLE_CUDASIM
timeout 360 python -m pytest -q -m gpu -x
timeout 120 python -m benchmarks.bench_gpu
