"""The GPU backend (``sparse_ops.cuda``): CuPy device arrays and numba-CUDA kernels.

Availability is decided in ``sparse_ops.device``. The numba.cuda kernels of the built-ins
are in ``sparse_ops.cuda.kernels``, imported lazily by the operators' gpu kernels (this
package imports neither numba nor CuPy). ``SPARSE_OPS_CUDA_SIM=1`` (set before importing
sparse_ops) simulates ``gpu(0)`` with NumPy memory and numba's CUDA simulator; README.md
here says what the simulator can and cannot show.
"""
from ..device import SIMULATED_GPU, num_gpus


def is_available() -> bool:
    """Whether a gpu device (real or simulated) can be used."""
    return num_gpus() > 0


def is_simulator() -> bool:
    """Whether gpu devices are simulated on the cpu."""
    return SIMULATED_GPU


__all__ = ["is_available", "is_simulator", "SIMULATED_GPU"]
