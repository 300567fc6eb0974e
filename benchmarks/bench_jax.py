"""The JAX bridge (``sparse_ops.jax``) against what a JAX user has, in one process, the
contenders taking turns (``_timing.alternating``), ratios the medians of per-round ratios.
Everything runs under ``jax.jit``, float32, results blocked on.

(a) **Per-call overhead**, 4x4: a bridged op against a jitted ``jnp`` function doing the
    same arithmetic, for each path: ``elemwise_mul`` lowered to ``jnp`` (the default for a
    dense built-in) and through the Python FFI handler (lowering off: ctypes callback, NumPy
    views, our invoke path) vs ``x * y``, and ``csr_spmm`` on a 4x4 csr (the native numba
    cfunc) vs ``BCSR @ dense``.
(b) **GCN layer forward + backward**: ``sum(csr_spmm(A, H W) * G)`` and its gradient for W
    and H, A a 20,000-node graph (10 neighbours a row, int32 indices), H 20,000 x 64, W 64 x
    64, against the same function with ``jax.experimental.sparse.BCSR`` @ dense. Target:
    <= 0.6x.
(c) **FFI vs ``jax.pure_callback``**: the same two ops called through ``pure_callback``
    running ``sparse_ops`` on NumPy arrays, against the bridge's FFI paths (ratios below 1:
    the FFI is faster).
(d) **A chain of 20 dense ops** (``tanh(x * x)`` ten times, 8x8) in one ``jax.jit``: lowered
    (one fused XLA computation) and through the Python handler (20 FFI calls), against the
    same chain in ``jnp``.

Run alone with ``python -m benchmarks.bench_jax [--quick]`` (writes
``benchmarks/results/jax.md``); ``python -m benchmarks`` includes it, with n/a without jax.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ._timing import alternating, markdown_table, paired_ratio

RESULTS = Path(__file__).resolve().parent / "results"
TARGETS = {"gcn": 0.6}


def _graph(n: int, per_row: int, seed: int = 0) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, n, size=(n, per_row))
    cols.sort(axis=1)
    a = sp.csr_matrix((rng.random(n * per_row).astype(np.float32), cols.ravel().astype(np.int32),
                       np.arange(0, n * per_row + 1, per_row, dtype=np.int32)), shape=(n, n))
    a.sum_duplicates()
    return a


def run(scale: int = 1) -> dict[str, Any]:
    """All three cases; ``scale`` divides the graph's nodes and the call counts."""
    try:
        import jax
        import jax.numpy as jnp
        from jax.experimental.sparse import BCSR
    except ImportError:
        return {"skipped": "jax is not installed"}
    import sparse_ops as so
    import sparse_ops.jax as soj
    import sparse_ops_cookbook  # noqa: F401  (csr_spmm)
    from sparse_ops.jax import lowering

    def bcsr(m: sp.csr_matrix) -> Any:
        return BCSR((jnp.asarray(m.data), jnp.asarray(m.indices.astype(np.int32)),
                     jnp.asarray(m.indptr.astype(np.int32))), shape=m.shape)

    block = jax.block_until_ready
    rounds = 9 if scale == 1 else 2
    calls = max(2000 // scale, 2)

    def many(fn: Any, *args: Any) -> Any:
        def go() -> None:
            for _ in range(calls):
                r = fn(*args)
            block(r)
        return go

    # (a) and (c): small calls
    x = jnp.full((4, 4), 1.5, jnp.float32)
    y = jnp.full((4, 4), 2.0, jnp.float32)
    small = sp.csr_matrix(np.eye(4, dtype=np.float32) * 2 + np.eye(4, k=1, dtype=np.float32))
    a4 = bcsr(small)

    def callback_mul(x: Any, y: Any) -> Any:
        return jax.pure_callback(lambda a, b: so.ops.elemwise_mul(so.array(np.asarray(a)),
                                                                   so.array(np.asarray(b))).asnumpy(),
                                 jax.ShapeDtypeStruct(x.shape, x.dtype), x, y)

    def callback_spmm(a: Any, x: Any) -> Any:
        def host(d: Any, i: Any, p: Any, xx: Any) -> np.ndarray:
            m = so.csr_matrix((np.asarray(d), np.asarray(i), np.asarray(p)), shape=(4, 4))
            return so.ops.csr_spmm(m, so.array(np.asarray(xx))).asnumpy()
        return jax.pure_callback(host, jax.ShapeDtypeStruct((4, 4), x.dtype), a.data, a.indices, a.indptr, x)

    def through_handler(fn: Any, *args: Any) -> Any:
        """``jax.jit(fn)`` traced (and compiled) with lowering off: its calls take the FFI."""
        jitted = jax.jit(fn)
        lowering.disabled(True)
        try:
            block(jitted(*args))
        finally:
            lowering.disabled(False)
        return jitted

    fns = {
        "mul_bridge": jax.jit(soj.ops.elemwise_mul), "mul_jnp": jax.jit(lambda a, b: a * b),
        "mul_handler": through_handler(lambda a, b: soj.ops.elemwise_mul(a, b), x, y),
        "mul_callback": jax.jit(callback_mul),
        "spmm_bridge": jax.jit(soj.ops.csr_spmm), "spmm_bcsr": jax.jit(lambda a, b: a @ b),
        "spmm_callback": jax.jit(callback_spmm),
    }
    args = {"mul": (x, y), "spmm": (a4, x)}
    ref_mul, ref_spmm = np.asarray(x) * np.asarray(y), small @ np.asarray(x)
    same = {k: np.allclose(np.asarray(f(*args[k.split("_")[0]])), ref_mul if k.startswith("mul") else ref_spmm)
            for k, f in fns.items()}
    times = alternating({k: many(f, *args[k.split("_")[0]]) for k, f in fns.items()}, rounds=rounds)
    us = {k: float(np.median(v)) / calls * 1e6 for k, v in times.items()}
    overhead = {"us": us, "same": same,
                "mul_ratio": paired_ratio(times["mul_bridge"], times["mul_jnp"]),
                "handler_ratio": paired_ratio(times["mul_handler"], times["mul_jnp"]),
                "spmm_ratio": paired_ratio(times["spmm_bridge"], times["spmm_bcsr"]),
                "mul_vs_callback": paired_ratio(times["mul_handler"], times["mul_callback"]),
                "spmm_vs_callback": paired_ratio(times["spmm_bridge"], times["spmm_callback"]),
                "mul_path": soj.explain("elemwise_mul", x, y)["handler"].split(":")[0],
                "spmm_handler": soj.explain("csr_spmm", a4, x)["handler"].split(":")[0]}

    # (d) a chain of 20 dense ops in one jit: lowered, through the Python handler, in jnp
    def chain(mul: Any, tanh: Any, v: Any) -> Any:
        for _ in range(10):
            v = tanh(mul(v, v))
        return v

    c = jnp.asarray(np.random.default_rng(2).uniform(-1, 1, (8, 8)).astype(np.float32))
    chains = {"lowered": jax.jit(lambda v: chain(soj.ops.broadcast_mul, soj.ops.tanh, v)),
              "handler": through_handler(lambda v: chain(soj.ops.broadcast_mul, soj.ops.tanh, v), c),
              "jnp": jax.jit(lambda v: chain(jnp.multiply, jnp.tanh, v))}
    want = np.asarray(chains["jnp"](c))
    chain_same = {k: bool(np.allclose(np.asarray(f(c)), want, rtol=1e-5, atol=1e-6)) for k, f in chains.items()}
    chain_calls = max(calls // 10, 2)

    def repeat(fn: Any) -> Any:
        def go() -> None:
            for _ in range(chain_calls):
                r = fn(c)
            block(r)
        return go

    ct = alternating({k: repeat(f) for k, f in chains.items()}, rounds=rounds)
    chain_result = {"us": {k: float(np.median(v)) / chain_calls * 1e6 for k, v in ct.items()}, "same": chain_same,
                    "lowered_ratio": paired_ratio(ct["lowered"], ct["jnp"]),
                    "handler_ratio": paired_ratio(ct["handler"], ct["jnp"])}

    # (b) the GCN layer, forward + backward
    n = max(20_000 // scale, 40)
    a = _graph(n, 10)
    rng = np.random.default_rng(1)
    h = jnp.asarray(rng.standard_normal((n, 64)).astype(np.float32))
    w = jnp.asarray((rng.standard_normal((64, 64)) / 8).astype(np.float32))
    g = jnp.asarray(rng.standard_normal((n, 64)).astype(np.float32))
    ab = bcsr(a)

    # the adjacency is an argument, not a closure constant (XLA would constant-fold BCSR's scatter)
    def layer_bridge(w: Any, h: Any, a: Any, g: Any) -> Any:
        return jnp.sum(soj.ops.csr_spmm(a, h @ w) * g)

    def layer_bcsr(w: Any, h: Any, a: Any, g: Any) -> Any:
        return jnp.sum((a @ (h @ w)) * g)

    ours = jax.jit(jax.value_and_grad(layer_bridge, argnums=(0, 1)))
    ref = jax.jit(jax.value_and_grad(layer_bcsr, argnums=(0, 1)))
    got, want = ours(w, h, ab, g), ref(w, h, ab, g)
    same_gcn = all(np.allclose(np.asarray(p), np.asarray(q), rtol=2e-3, atol=2e-3 * float(np.abs(q).max()))
                   for p, q in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)))
    gt = alternating({"ours": lambda: block(ours(w, h, ab, g)), "bcsr": lambda: block(ref(w, h, ab, g))},
                     rounds=7 if scale == 1 else 2)
    gcn = {"n": n, "nnz": a.nnz, "ours_ms": float(np.median(gt["ours"])) * 1e3,
           "bcsr_ms": float(np.median(gt["bcsr"])) * 1e3, "ratio": paired_ratio(gt["ours"], gt["bcsr"]),
           "same": same_gcn}
    return {"overhead": overhead, "chain": chain_result, "gcn": gcn, "jax": jax.__version__}


def _verdict(ratio: float, target: float) -> str:
    return "met" if ratio <= target else "**NOT met**"


def report(results: dict[str, Any]) -> str:
    if "skipped" in results:
        return f"JAX bridge benchmarks: n/a ({results['skipped']})."
    o, gc, ch = results["overhead"], results["gcn"], results["chain"]
    us, same = o["us"], o["same"]

    def yes(*keys: str) -> str:
        return "yes" if all(same[k] for k in keys) else "NO"

    lines = [f"jax {results['jax']} (CPU).", "",
             markdown_table(["case", "target", "this run", "verdict"], [
                 [f"GCN layer forward+backward ({gc['n']:,} nodes, nnz {gc['nnz']:,}, 64 features) vs BCSR @ dense",
                  f"<= {TARGETS['gcn']}x", f"{gc['ratio']:.2f}x", _verdict(gc["ratio"], TARGETS["gcn"])]]), "",
             markdown_table(["case", "ours", "reference", "ours / reference", "same result"], [
                 [f"`elemwise_mul` 4x4 ({o['mul_path']}) vs jitted `x * y` (us per call)",
                  f"{us['mul_bridge']:.1f}", f"{us['mul_jnp']:.1f}", f"{o['mul_ratio']:.2f}", yes("mul_bridge")],
                 ["`elemwise_mul` 4x4 (Python FFI handler: lowering off) vs jitted `x * y` (us per call)",
                  f"{us['mul_handler']:.1f}", f"{us['mul_jnp']:.1f}", f"{o['handler_ratio']:.2f}",
                  yes("mul_handler")],
                 [f"`csr_spmm` 4x4 ({o['spmm_handler']} handler) vs jitted `BCSR @ dense` (us per call)",
                  f"{us['spmm_bridge']:.1f}", f"{us['spmm_bcsr']:.1f}", f"{o['spmm_ratio']:.2f}", yes("spmm_bridge")],
                 ["`elemwise_mul` 4x4: FFI vs `jax.pure_callback` (us per call)", f"{us['mul_handler']:.1f}",
                  f"{us['mul_callback']:.1f}", f"{o['mul_vs_callback']:.2f}", yes("mul_callback")],
                 ["`csr_spmm` 4x4: FFI vs `jax.pure_callback` (us per call)", f"{us['spmm_bridge']:.1f}",
                  f"{us['spmm_callback']:.1f}", f"{o['spmm_vs_callback']:.2f}", yes("spmm_callback")],
                 ["GCN layer forward+backward vs BCSR (ms)", f"{gc['ours_ms']:.2f}", f"{gc['bcsr_ms']:.2f}",
                  f"{gc['ratio']:.2f}", "yes" if gc["same"] else "NO"],
                 ["chain of 20 dense ops in one jit, lowered, vs the same chain in `jnp` (us per call)",
                  f"{ch['us']['lowered']:.1f}", f"{ch['us']['jnp']:.1f}", f"{ch['lowered_ratio']:.2f}",
                  "yes" if ch["same"]["lowered"] else "NO"],
                 ["chain of 20 dense ops in one jit, Python handler (lowering off), vs `jnp` (us per call)",
                  f"{ch['us']['handler']:.1f}", f"{ch['us']['jnp']:.1f}", f"{ch['handler_ratio']:.2f}",
                  "yes" if ch["same"]["handler"] else "NO"]])]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes 10x smaller")
    args = parser.parse_args()
    from ._timing import describe_machine

    results = run(scale=10 if args.quick else 1)
    text = "\n".join(["# The JAX bridge", "", report(results), "", "## Machine", ""] +
                     [f"- {k}: {v}" for k, v in describe_machine().items()])
    if not args.quick:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "jax.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
