"""The JAX bridge on a real gpu (run by benchmarks/gpu_check.sh; needs jax with CUDA and
CuPy): bridged ops under ``jax.jit`` on gpu arrays through the gpu FFI handler (XLA's
buffers as CuPy arrays on XLA's stream), gradients through the op's own rule, a malformed
csr refused with an FFI error naming the op, and the per-call time against
``jax.experimental.sparse.BCSR @ dense``. Prints one line per check and exits non-zero on
the first failure. ``--cpu`` runs the same checks on jax's cpu device (to try the script
where there is no gpu)."""
from __future__ import annotations

import statistics
import sys
import time
from typing import Iterator


def _gpu(jax) -> object | None:
    return next((d for d in jax.devices() if d.platform == "gpu"), None)


def _default_pool_bytes(dev) -> int:
    """Bytes CuPy's default pool holds on ``dev`` (0 off a gpu)."""
    if dev.platform != "gpu":
        return 0
    import cupy

    with cupy.cuda.Device(dev.id):
        return cupy.get_default_memory_pool().total_bytes()


def _per_call_us(fn, *args, calls: int = 200) -> float:
    fn(*args).block_until_ready()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            out = fn(*args)
        out.block_until_ready()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def checks(dev) -> Iterator[tuple[str, tuple[float, float] | None]]:
    """(what a check showed, None) per check passed, in order, then (what was timed,
    (bridged us, BCSR us)) last; a failed check raises. ``dev``: the jax device to run on."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import scipy.sparse as sp
    from jax.experimental.sparse import BCSR

    import sparse_ops.jax as soj
    import sparse_ops_cookbook  # noqa: F401

    m = sp.random(2000, 300, density=0.02, format="csr", dtype=np.float32, random_state=0)
    x_host = np.random.default_rng(1).standard_normal((300, 64)).astype(np.float32)
    a = jax.device_put(BCSR((m.data, m.indices, m.indptr), shape=m.shape), dev)
    x = jax.device_put(x_host, dev)
    spmm = jax.jit(soj.ops.csr_spmm)
    default_pool = _default_pool_bytes(dev)
    y = spmm(a, x)
    assert dev in y.devices(), f"result on {y.devices()}, not on {dev}"
    np.testing.assert_allclose(np.asarray(y), m @ x_host, rtol=1e-4, atol=1e-4)
    yield f"csr_spmm under jit on {dev.platform} matches SciPy; the result stays on {dev}", None
    if dev.platform == "gpu":
        from sparse_ops.jax import handlers

        pool = handlers._POOLS.get(dev.id)
        assert pool is not None and pool.total_bytes() > 0, "the handler did not allocate from its capped pool"
        assert pool.get_limit() > 0 and pool.total_bytes() <= pool.get_limit()
        assert _default_pool_bytes(dev) == default_pool, "the handler grew CuPy's default pool beside XLA's"
        yield (f"the handler's temporaries came from its pool on gpu({dev.id}) ({pool.total_bytes():,} bytes held, "
               f"cap {pool.get_limit():,}), CuPy's default pool untouched"), None

    g = jax.jit(jax.grad(lambda x: jnp.sum(soj.ops.csr_spmm(a, x) ** 2)))(x)
    np.testing.assert_allclose(np.asarray(g), m.T @ (2 * (m @ x_host)), rtol=1e-3, atol=1e-3)
    yield f"X's gradient on {dev.platform} through the op's gradient rule matches SciPy", None

    z = jax.jit(soj.ops.relu)(jax.device_put(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8), dev))
    assert dev in z.devices() and bool((z >= 0).all())
    yield f"a dense op (relu) on {dev.platform}", None

    bad = BCSR((a.data, a.indices.at[1].set(10 ** 6), a.indptr), shape=a.shape)
    try:
        jax.block_until_ready(spmm(bad, x))
    except Exception as exc:  # an FFI error, raised by jax as its runtime error
        assert "csr_spmm" in str(exc), f"the error does not name the op: {exc}"
        refusal = str(exc).splitlines()[0][:120]
    else:
        raise AssertionError("a malformed csr on gpu was not refused")
    yield f"a malformed csr on {dev.platform} is refused naming the op: {refusal}", None
    y = spmm(a, x)  # the process and the bridge still work after the error
    np.testing.assert_allclose(np.asarray(y), m @ x_host, rtol=1e-4, atol=1e-4)
    yield "the bridge works again after the error", None

    bcsr = jax.jit(lambda a, x: a @ x)
    yield (f"csr_spmm 2000x300 (2% stored) @ 300x64 float32 under jit on {dev.platform}",
           (_per_call_us(spmm, a, x), _per_call_us(bcsr, a, x)))


def main() -> int:
    import jax

    dev = jax.devices("cpu")[0] if "--cpu" in sys.argv else _gpu(jax)
    if dev is None:
        print("jax_gpu_check: jax sees no gpu here; skipped")
        return 0
    for line, times in checks(dev):
        if times is None:
            print("ok  ", line)
        else:
            ours, ref = times
            print(f"time {line}: bridged {ours:.1f} us, BCSR @ dense {ref:.1f} us ({ours / ref:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
