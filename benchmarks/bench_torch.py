"""The PyTorch bridge (``sparse_ops.torch``) next to PyTorch doing the same work, in one
process, the contenders taking turns (``_timing.alternating``), ratios the medians of
per-round ratios (below 1: the bridge is faster).

(a) **GCN layer**, forward + backward: ``relu(A @ (X @ W))`` on a 100,000-node graph with
    ~1.1M stored values (500,000 random undirected edges both ways plus self loops,
    symmetrically normalised, float32) and 64 features; X and W need gradients, A is a
    constant (a GCN's adjacency is). Ours: ``sparse_ops.torch.ops.csr_spmm(A, X @ W)`` on A
    as a ``torch.sparse_csr`` tensor (the matmul and relu are torch's). References:
    ``torch.sparse.mm(A, X @ W)`` with the same sparse csr A, and a gather/scatter layer
    (``h[col] * val`` summed into rows with ``index_add_``, the message passing of PyG-style
    libraries), both through torch autograd. Target: <= 0.6x the faster reference.
(b) **Embedding-bag training step**: 4,096 bags of 20 ids (Zipf, exponent 1.2, folded into
    the table) on a 1,000,000 x 64 float32 table; forward (sum pooling), backward with a
    fixed head gradient, optimizer step. Ours: ``ops.embedding_bag`` on the bags as a csr
    (repeated ids merged, their count the value) with an ``nn.Parameter`` table, whose
    gradient arrives as a coalesced sparse COO tensor. Reference:
    ``nn.EmbeddingBag(mode="sum", sparse=True)`` on the flat ids and offsets. Both with
    the same torch optimizer (``SparseAdam``; ``SGD`` too). Target: <= 0.8x.
(c) **Per-call overhead** on 4x4 float32: ``ops.elemwise_mul(x, y)`` against a plain
    ``torch.library.custom_op`` returning ``x * y`` (and, for scale, ``torch.mul``), both
    forward only and forward + backward. Target: <= 1.5x the custom op.
(d) **Conversions**: ``to_torch`` / ``from_torch`` of dense, csr and row_sparse arrays at
    two sizes 100x apart: the time per call stays flat (O(1)) and the result shares the
    source's memory (no copy; checked on every component).
(e) **Per-call cost** of ``sparse_ops.torch.ops.relu(x)`` on 4x4 float32 against
    ``torch.relu(x)``, forward and forward + backward (issue 38 item 4). Target: forward
    <= 2 us where ``torch.relu`` takes 0.9 us, judged as that ratio (2.2x ``torch.relu``
    timed beside it), since the same call takes 0.9-3 us from one machine or load to another.
(f) **Recommender step**: a plugin author's embedding-bag op (``bench_bag_sum``, defined
    here as the author's guide (docs/author/) shows: a kernel-first op, row kernels forward and backward, a
    row_sparse table gradient) on csr bags of ~20 zipf(1.2) ids, the table marked
    ``sparse_grad``, feeding an MLP with a binary cross-entropy loss (or the pooled rows'
    sum as the loss); ``SparseAdam`` for the table, ``Adam`` for the MLP. Reference:
    ``nn.EmbeddingBag(mode="sum", sparse=True)``, the same MLP and optimizers. Targets:
    <= 1.0x at batch 64 (100,000 x 32 table), <= 0.8x at batch 4,096 (1,000,000 x 64).

Each case first checks that ours and the references compute the same (outputs and
gradients, or updated weights) from the same inputs. PyTorch runs with its faster thread
count, 1 or numba's (``_timing.torch_best_threads``). Run alone with ``python -m
benchmarks.bench_torch [--quick]``, which writes ``benchmarks/results/torch.md``; ``python
-m benchmarks`` includes it. Needs PyTorch, the bridge and the cookbook (``csr_spmm``,
``embedding_bag``).
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import scipy.sparse as sp

import sparse_ops as so

from ._timing import alternating, markdown_table, paired_ratio, torch_best_threads, torch_threads
from .bench_overhead import torch_custom_mul

RESULTS = Path(__file__).resolve().parent / "results"
TARGETS = {"gcn": 0.6, "embedding": 0.8, "overhead": 1.5}


def available() -> str | None:
    """None when PyTorch, the bridge and the cookbook are all importable, else what is missing."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return "PyTorch is not installed"
    try:
        import sparse_ops.torch  # noqa: F401
    except ImportError as exc:
        return f"the bridge sparse_ops.torch does not import ({exc})"
    missing = [name for name in ("csr_spmm", "embedding_bag") if name not in so.list_ops()]
    if missing:
        return f"no operator {', '.join(missing)} (install the cookbook: pip install -e ./cookbook)"
    return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Hide PyTorch's UserWarnings ("sparse CSR support is in beta", the sparse-invariant
    checks note): they would be printed once per benchmark case and say nothing here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


def _close(a: Any, b: Any, rtol: float = 1e-4, atol: float = 1e-4) -> bool:
    return bool(np.allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol))


# ---- (a) a GCN layer -----------------------------------------------------------------------------------
@dataclass
class Graph:
    """A normalised adjacency (SciPy csr, float32, int32 indices), node features, the layer's
    weight and a head gradient."""

    a: sp.csr_matrix
    x: np.ndarray
    w: np.ndarray
    g: np.ndarray


def make_graph(nodes: int = 100_000, edges: int = 500_000, features: int = 64, seed: int = 0) -> Graph:
    """``edges`` random undirected edges stored both ways, duplicates merged, plus self
    loops, scaled to D^-1/2 (A + I) D^-1/2 (what ``gcn_norm`` gives), indices sorted."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, nodes, edges), rng.integers(0, nodes, edges)
    rows, cols = np.concatenate([src, dst, np.arange(nodes)]), np.concatenate([dst, src, np.arange(nodes)])
    a = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(nodes, nodes))
    a.sum_duplicates()
    a.data[:] = 1.0
    d = (1.0 / np.sqrt(np.diff(a.indptr))).astype(np.float32)
    a.data *= d[np.repeat(np.arange(nodes), np.diff(a.indptr))] * d[a.indices]
    a.sort_indices()
    x = rng.standard_normal((nodes, features), dtype=np.float32)
    w = (rng.standard_normal((features, features), dtype=np.float32) / np.sqrt(features)).astype(np.float32)
    g = rng.standard_normal((nodes, features), dtype=np.float32)
    return Graph(a, x, w, g)


def _layer_inputs(torch, p: Graph) -> tuple[Any, Any, Any]:
    x = torch.from_numpy(p.x.copy()).requires_grad_(True)
    w = torch.from_numpy(p.w.copy()).requires_grad_(True)
    return x, w, torch.from_numpy(p.g)


def gcn_contenders(p: Graph) -> dict[str, dict[str, Any]]:
    """name -> {"step": one forward+backward, "x", "w" (leaves with .grad), "y": the output}
    for ours (the bridge) and the two PyTorch layers."""
    import torch

    import sparse_ops.torch as sot

    out = {}
    with _quiet():
        a_ours = sot.to_torch(so.csr_matrix(p.a))  # zero-copy, int32 indices kept
        a_torch = torch.sparse_csr_tensor(torch.from_numpy(p.a.indptr.astype(np.int64)),
                                          torch.from_numpy(p.a.indices.astype(np.int64)),
                                          torch.from_numpy(p.a.data), size=p.a.shape)
    rows = torch.from_numpy(np.repeat(np.arange(p.a.shape[0]), np.diff(p.a.indptr)).astype(np.int64))
    cols = torch.from_numpy(p.a.indices.astype(np.int64))
    vals = torch.from_numpy(p.a.data)[:, None]
    n, k = p.a.shape[0], p.w.shape[1]

    layers: dict[str, Callable[[Any], Any]] = {
        "ours": lambda h: sot.ops.csr_spmm(a_ours, h),
        "torch.sparse.mm": lambda h: torch.sparse.mm(a_torch, h),
        "index_add_": lambda h: torch.zeros(n, k, dtype=h.dtype).index_add_(0, rows, h[cols] * vals),
    }
    for name, aggregate in layers.items():
        x, w, g = _layer_inputs(torch, p)

        def step(x=x, w=w, g=g, aggregate=aggregate) -> Any:
            x.grad = w.grad = None
            with _quiet():
                y = torch.relu(aggregate(x @ w))
                y.backward(g)
            return y

        out[name] = {"step": step, "x": x, "w": w}
    return out


def gcn_same(contenders: dict[str, dict[str, Any]], p: Graph) -> bool:
    """One step of each: the output agrees with SciPy's forward, and both gradients with
    float64 ones through the relu mask of that contender's own output (where the
    pre-activation is within rounding of 0, float32 contenders may take either side of the
    kink, and the gradients then differ by far more than rounding)."""
    a64, w64 = p.a.astype(np.float64), p.w.astype(np.float64)
    z = a64 @ (p.x.astype(np.float64) @ w64)
    ok = True
    for c in contenders.values():
        y = c["step"]().detach().numpy()
        gh = a64.T @ (p.g * (y > 0))  # the gradient at the aggregation's input, through this mask
        ok = ok and _close(y, np.maximum(z, 0)) and _close(c["x"].grad.numpy(), gh @ w64.T, rtol=1e-3, atol=1e-3) \
            and _close(c["w"].grad.numpy(), p.x.T.astype(np.float64) @ gh, rtol=1e-3, atol=1e-3)
    return bool(ok)


@dataclass
class GCNResult:
    size: str
    torch_threads: int
    times: dict[str, float]  # median seconds per step
    vs: dict[str, float]  # ours / each reference (median of per-round ratios)
    vs_faster: float  # ours / the faster reference, round by round
    same: bool


def run_gcn(scale: int = 1, rounds: int = 5) -> GCNResult:
    import numba

    p = make_graph(nodes=max(100_000 // scale, 50), edges=max(500_000 // scale, 100))
    c = gcn_contenders(p)
    same = gcn_same(c, p)
    threads = torch_best_threads(c["torch.sparse.mm"]["step"], (1, numba.get_num_threads()))
    t = alternating({name: v["step"] for name, v in c.items()}, rounds=rounds)
    refs = [name for name in t if name != "ours"]
    faster = [min(t[r][i] for r in refs) for i in range(rounds)]
    size = (f"{p.a.shape[0]:,} nodes, {p.a.nnz:,} stored values, {p.x.shape[1]} features "
            f"(relu(A @ (X @ W)), grads for X and W)")
    return GCNResult(size, threads, {k: statistics.median(v) for k, v in t.items()},
                     {r: paired_ratio(t["ours"], t[r]) for r in refs}, paired_ratio(t["ours"], faster), same)


# ---- (b) an embedding-bag training step ----------------------------------------------------------------
@dataclass
class Bags:
    """Bags of ids for an embedding table: flat ids with offsets (PyTorch's input) and the
    same bags as csr parts (ids merged per bag, their counts the values)."""

    rows: int
    dim: int
    ids: np.ndarray
    offsets: np.ndarray
    csr: sp.csr_matrix
    weight: np.ndarray
    head: np.ndarray


def make_bags(rows: int = 1_000_000, dim: int = 64, bags: int = 4096, per_bag: int = 20, seed: int = 0) -> Bags:
    rng = np.random.default_rng(seed)
    ids = ((rng.zipf(1.2, bags * per_bag) - 1) % rows).astype(np.int64)
    offsets = np.arange(0, bags * per_bag, per_bag, dtype=np.int64)
    bag_of = np.repeat(np.arange(bags), per_bag)
    m = sp.csr_matrix((np.ones(len(ids), np.float32), (bag_of, ids)), shape=(bags, rows))
    m.sum_duplicates()  # a repeated id counts twice: value 2
    m.sort_indices()
    weight = (0.01 * rng.standard_normal((rows, dim), dtype=np.float32)).astype(np.float32)
    head = rng.standard_normal((bags, dim), dtype=np.float32)
    return Bags(rows, dim, ids, offsets, m, weight, head)


OPTIMIZERS = {"SparseAdam": {"lr": 1e-3}, "SGD": {"lr": 0.05}}


def embedding_contenders(b: Bags, optimizer: str) -> dict[str, dict[str, Any]]:
    """name -> {"step", "weight"}: ours (the bridge's ``embedding_bag``) and
    ``nn.EmbeddingBag(sparse=True)``, each with its own copy of the table and optimizer."""
    import torch

    import sparse_ops.torch as sot

    make_opt = getattr(torch.optim, optimizer)
    head = torch.from_numpy(b.head)
    with _quiet():
        bags = sot.to_torch(so.csr_matrix(b.csr))
    # sparse gradients asked for, as nn.EmbeddingBag(sparse=True) asks (the bridge's default is dense)
    weight = sot.sparse_grad(torch.nn.Parameter(torch.from_numpy(b.weight.copy())))
    opt = make_opt([weight], **OPTIMIZERS[optimizer])

    def ours() -> None:
        opt.zero_grad(set_to_none=True)
        with _quiet():
            sot.ops.embedding_bag(bags, weight, mode="sum").backward(head)
            opt.step()

    emb = torch.nn.EmbeddingBag(b.rows, b.dim, mode="sum", sparse=True)
    with torch.no_grad():
        emb.weight.copy_(torch.from_numpy(b.weight))
    ref_opt = make_opt(emb.parameters(), **OPTIMIZERS[optimizer])
    ids, offsets = torch.from_numpy(b.ids), torch.from_numpy(b.offsets)

    def reference() -> None:
        ref_opt.zero_grad(set_to_none=True)
        with _quiet():
            emb(ids, offsets).backward(head)
            ref_opt.step()

    return {"ours": {"step": ours, "weight": weight}, "nn.EmbeddingBag": {"step": reference, "weight": emb.weight}}


def embedding_same(b: Bags, optimizer: str) -> bool:
    """One step of each from the same table: the updated tables agree (SGD: also with the
    NumPy update), the untouched rows are unchanged, ours's gradient is a sparse COO with
    one row per distinct id."""
    import torch

    c = embedding_contenders(b, optimizer)
    for v in c.values():
        v["step"]()
    ours, ref = (v["weight"].detach().numpy() for v in c.values())
    grad = c["ours"]["weight"].grad
    # the stored rows unique and sorted (torch's gradient accumulation drops the tensor's
    # coalesced flag on the way to .grad, so the flag itself is not checked)
    rows = grad._indices()[0].numpy() if grad is not None and grad.layout == torch.sparse_coo else None
    layout_ok = rows is not None and grad.sparse_dim() == 1 and bool(np.all(np.diff(rows) > 0))
    touched = np.unique(b.ids)
    untouched = np.ones(b.rows, dtype=bool)
    untouched[touched] = False
    # float32 sums of up to hundreds of head-gradient rows, added in different orders
    ok = (layout_ok and _close(ours[touched], ref[touched], rtol=1e-4, atol=1e-5)
          and np.array_equal(ours[untouched], b.weight[untouched]) and np.array_equal(ref[untouched], ours[untouched]))
    if optimizer == "SGD":
        expected = b.weight - OPTIMIZERS["SGD"]["lr"] * (b.csr.T @ b.head)
        ok = ok and _close(ours[touched], expected[touched], rtol=1e-4, atol=1e-5)
    return ok


@dataclass
class EmbeddingResult:
    size: str
    optimizer: str
    torch_threads: int
    ours_s: float
    torch_s: float
    ratio: float
    same: bool


def run_embedding(scale: int = 1, rounds: int = 20, calls: int = 5) -> list[EmbeddingResult]:
    import numba

    b = make_bags(rows=max(1_000_000 // scale, 1000), bags=max(4096 // scale, 8))
    results = []
    for optimizer in OPTIMIZERS:
        same = embedding_same(b, optimizer)
        c = embedding_contenders(b, optimizer)
        threads = torch_best_threads(c["nn.EmbeddingBag"]["step"], (1, numba.get_num_threads()))
        t = alternating({k: v["step"] for k, v in c.items()}, rounds=rounds, calls=calls)
        size = (f"{b.rows:,} x {b.dim} float32 table, {len(b.offsets):,} bags of {len(b.ids) // len(b.offsets)} "
                f"zipf(1.2) ids ({len(np.unique(b.ids)):,} distinct)")
        results.append(EmbeddingResult(size, optimizer, threads, statistics.median(t["ours"]),
                                       statistics.median(t["nn.EmbeddingBag"]),
                                       paired_ratio(t["ours"], t["nn.EmbeddingBag"]), same))
        del c
    return results


# ---- (c) per-call overhead -----------------------------------------------------------------------------
@dataclass
class OverheadRow:
    case: str
    ours_us: float
    custom_us: float
    mul_us: float
    same: bool

    @property
    def ratio(self) -> float:
        return self.ours_us / self.custom_us


def _forward_backward(fn: Callable[[Any], Any], leaf: Any) -> Callable[[], Any]:
    """One step: ``fn(leaf).backward(ones)`` with ``leaf.grad`` reset first; returns the gradient."""
    import torch

    ones = torch.ones_like(leaf)

    def step() -> Any:
        leaf.grad = None
        fn(leaf).backward(ones)
        return leaf.grad
    return step


def run_overhead(scale: int = 1) -> list[OverheadRow]:
    import torch

    import sparse_ops.torch as sot

    from .bench_overhead import paired_us

    n = max(20000 // scale, 16)
    custom = torch_custom_mul()
    bridged = sot.ops.elemwise_mul
    x, y = torch.rand(4, 4), torch.rand(4, 4)
    previous = torch_threads(1)
    rows = []
    try:
        same = torch.equal(bridged(x, y), custom(x, y)) and torch.equal(bridged(x, y), x * y)
        ours, ref = paired_us(lambda: bridged(x, y), lambda: custom(x, y), n)
        _, plain = paired_us(lambda: None, lambda: torch.mul(x, y), n)
        rows.append(OverheadRow("forward, 4x4 float32", ours, ref, plain, same))

        xg = torch.rand(4, 4, requires_grad=True)

        def fb(fn: Callable[[Any, Any], Any]) -> Callable[[], Any]:
            return _forward_backward(lambda t: fn(t, y), xg)

        same = torch.equal(fb(bridged)(), fb(custom)()) and torch.equal(fb(bridged)(), y)
        ours, ref = paired_us(fb(bridged), fb(custom), n // 4)
        _, plain = paired_us(lambda: None, fb(torch.mul), n // 4)
        rows.append(OverheadRow("forward + backward, 4x4 float32", ours, ref, plain, same))
    finally:
        torch_threads(previous)
    return rows


# ---- (e) per-call cost of a small all-dense op: relu on 4x4 --------------------------------------------
# bridged relu forward on 4x4 float32: issue 38 item 4 asks for 2 us where torch.relu takes 0.9 us; machines
# differ (torch.relu itself takes 0.9-3 us on this project's shared machine), so the verdict is the same
# budget as a ratio to torch.relu timed beside it in the same run
PERCALL_TARGET_US, PERCALL_TORCH_US = 2.0, 0.9
PERCALL_TARGET_RATIO = PERCALL_TARGET_US / PERCALL_TORCH_US


@dataclass
class PerCallRow:
    case: str
    ours_us: float
    torch_us: float
    same: bool

    @property
    def ratio(self) -> float:
        return self.ours_us / self.torch_us


def run_percall(scale: int = 1) -> list[PerCallRow]:
    """``sparse_ops.torch.ops.relu(x)`` (written out in each call, as a user writes it) against
    ``torch.relu(x)`` on a 4x4 float32 tensor, one thread, in alternation: forward, and forward
    + backward (``.backward(ones)``, the input's ``.grad`` reset each time)."""
    import torch

    import sparse_ops.torch as sot

    from .bench_overhead import paired_us

    n = max(20000 // scale, 16)
    x, xg = torch.rand(4, 4) - 0.5, (torch.rand(4, 4) - 0.5).requires_grad_(True)
    previous = torch_threads(1)
    rows = []
    try:
        same = torch.equal(sot.ops.relu(x), torch.relu(x))
        ours, ref = paired_us(lambda: sot.ops.relu(x), lambda: torch.relu(x), n)
        rows.append(PerCallRow("forward, 4x4 float32", ours, ref, same))
        ours_fb, torch_fb = _forward_backward(lambda t: sot.ops.relu(t), xg), _forward_backward(torch.relu, xg)
        same = torch.equal(ours_fb(), torch_fb())
        ours, ref = paired_us(ours_fb, torch_fb, n // 4)
        rows.append(PerCallRow("forward + backward, 4x4 float32", ours, ref, same))
    finally:
        torch_threads(previous)
    return rows


# ---- (f) a recommender step: a plugin author's embedding bag, an MLP, SparseAdam ---------------------
# The op below is written as the author's guide shows a plugin author: a kernel-first Op, its forward a
# row kernel over the bags, its backward declared on the op (a row kernel over the ids present,
# giving the table a row_sparse gradient). It is registered when the case runs (bag_sum_op), not
# when this module is imported, so importing the benchmarks adds nothing to the table.
from sparse_ops.sdk import jit  # noqa: E402
from sparse_ops.sdk.rowkernel import row_kernel  # noqa: E402


@row_kernel
def _bag_sum_row(r, indptr, ids, weights, table, out):
    """out[r] = the sum over bag r's stored entries j of weights[j] * table[ids[j]]."""
    for f in range(out.shape[1]):
        out[r, f] = 0.0
    for j in range(indptr[r], indptr[r + 1]):
        w = weights[j]
        i = ids[j]
        for f in range(out.shape[1]):
            out[r, f] += w * table[i, f]


@row_kernel
def _id_grad_row(u, starts, entries, bag_of, weights, out_grad, grad):
    """grad[u] = the sum over the stored entries k of the u-th id present (entries[starts[u]]
    .. entries[starts[u + 1] - 1], in the order they are stored) of weights[k] * out_grad[bag_of[k]]."""
    for f in range(grad.shape[1]):
        grad[u, f] = 0.0
    for p in range(starts[u], starts[u + 1]):
        k = entries[p]
        w = weights[k]
        b = bag_of[k]
        for f in range(grad.shape[1]):
            grad[u, f] += w * out_grad[b, f]


@jit()
def _group_by_id(ids):
    """(the distinct ids sorted, where each one's stored entries start in the third array
    (and where the last ends), the stored entries ordered by id, then by position): a stable
    radix sort of the positions by id, one byte of the id a pass (as many passes as the
    largest id has bytes: O(nnz) each, no comparison sort)."""
    nnz = ids.shape[0]
    order = np.arange(nnz)
    spare = np.empty(nnz, np.int64)
    count = np.empty(257, np.int64)
    largest = 0
    for k in range(nnz):
        largest = max(largest, np.int64(ids[k]))
    shift = 0
    while shift == 0 or (largest >> shift) > 0:
        count[:] = 0
        for k in range(nnz):
            count[((np.int64(ids[order[k]]) >> shift) & 255) + 1] += 1
        for d in range(256):
            count[d + 1] += count[d]
        for k in range(nnz):
            d = (np.int64(ids[order[k]]) >> shift) & 255
            spare[count[d]] = order[k]
            count[d] += 1
        order, spare = spare, order
        shift += 8
    distinct = np.empty(nnz, np.int64)
    starts = np.empty(nnz + 1, np.int64)
    n = 0
    for p in range(nnz):
        i = np.int64(ids[order[p]])
        if n == 0 or i != distinct[n - 1]:
            distinct[n] = i
            starts[n] = p
            n += 1
    starts[n] = nnz
    return distinct[:n], starts[:n + 1], order


BAG_OP = "bench_bag_sum"


def bag_sum_op() -> str:
    """Register (once) and return the name of the benchmark's own embedding-bag op."""
    if BAG_OP in so.list_ops():
        return BAG_OP

    from sparse_ops.sdk.csr import row_ids

    @so.register(BAG_OP)
    class BagSum(so.Op):
        """out[b] = sum over the ids i of bag b of w_i * table[i]: ``bags`` a csr (n_bags,
        vocab) of per-id weights, ``table`` (vocab, dim) dense, float32 or float64. The
        table's gradient is row_sparse, one row per id present in the bags; the bags get none."""

        arguments = ("bags", "table")
        backward_needs_inputs = ("bags", "table")  # the table for its gradient's shape
        backward_grads = ("table",)

        def infer_shape(self, bags, table):
            if len(bags) != 2 or len(table) != 2 or bags[1] != table[0]:
                raise ValueError(f"bags (n_bags, vocab) and table (vocab, dim) do not match: {bags}, {table}")
            return [(bags[0], table[1])]

        def infer_type(self, bags, table):
            if table not in (np.float32, np.float64) or bags != table:
                raise TypeError(f"bags and table must share a float32 or float64 dtype, got {bags}, {table}")
            return [table]

        @so.kernel(device="cpu", stypes=("csr", "default"))
        def forward(self, ctx, bags, table, out):
            _bag_sum_row(ctx, bags.shape[0], bags.indptr, bags.indices, bags.data, table.data, out.data,
                         work=bags.indices.shape[0] * table.shape[1])

        def backward_storage_type(self, output_grad, bags, table):
            return ["row_sparse"]

        @so.backward_kernel(device="cpu", stypes=("default", "csr", "default"))
        def backward(self, ctx, output_grad, bags, table, table_grad):
            ids, starts, entries = _group_by_id(bags.indices)
            values, rows = ctx.alloc_row_sparse(table_grad, ids.shape[0])
            rows[:] = ids
            _id_grad_row(ctx, ids.shape[0], starts, entries, row_ids(ctx, bags.indptr), bags.data, output_grad.data,
                         values, work=bags.indices.shape[0] * values.shape[1])

    return BAG_OP


RECOMMENDER_TARGETS = {64: 1.0, 4096: 0.8}  # ours / torch per batch size (issue 38 item 4)
RECOMMENDER_SIZES = {64: (100_000, 32), 4096: (1_000_000, 64)}  # batch -> (table rows, dim)


@dataclass
class RecommenderResult:
    batch: int
    size: str
    head: str
    ours_s: float
    torch_s: float
    ratio: float
    same: bool


def recommender_contenders(b: Bags, head: str) -> dict[str, dict[str, Any]]:
    """name -> {"step", "table", "mlp"}: one training step of a recommender, ours (the bags
    as a csr into the plugin op, the table marked ``sparse_grad``) and PyTorch's
    (``nn.EmbeddingBag(mode="sum", sparse=True)`` on flat ids and offsets), from the same
    table and MLP. ``head``: "mlp" (Linear(dim, 32), ReLU, Linear(32, 1), a binary
    cross-entropy loss on fixed labels) or "sum" (the pooled embeddings' sum as the loss).
    The table trains with ``SparseAdam``, the MLP with ``Adam``, on both sides."""
    import torch

    import sparse_ops.torch as sot

    op = getattr(sot.ops, bag_sum_op())
    with _quiet():
        bags = sot.to_torch(so.csr_matrix(b.csr))
    ids, offsets = torch.from_numpy(b.ids), torch.from_numpy(b.offsets)
    labels = torch.from_numpy((np.arange(len(b.offsets)) % 3 == 0).astype(np.float32))
    torch.manual_seed(0)
    mlp0 = torch.nn.Sequential(torch.nn.Linear(b.dim, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    bce = torch.nn.functional.binary_cross_entropy_with_logits

    def make(pool: Callable[[Any], Any], table: Any, sparse_opt: Any) -> dict[str, Any]:
        mlp = __import__("copy").deepcopy(mlp0)
        dense_opt = torch.optim.Adam(mlp.parameters(), lr=1e-3)

        def step() -> Any:
            sparse_opt.zero_grad(set_to_none=True)
            dense_opt.zero_grad(set_to_none=True)
            with _quiet():
                h = pool(table)
                loss = bce(mlp(h).squeeze(1), labels) if head == "mlp" else h.sum()
                loss.backward()
                sparse_opt.step()
                dense_opt.step()
            return loss
        return {"step": step, "table": table, "mlp": mlp}

    table = sot.sparse_grad(torch.nn.Parameter(torch.from_numpy(b.weight.copy())))
    ours = make(lambda t: op(bags, t), table, torch.optim.SparseAdam([table], lr=1e-3))
    emb = torch.nn.EmbeddingBag(b.rows, b.dim, mode="sum", sparse=True)
    with torch.no_grad():
        emb.weight.copy_(torch.from_numpy(b.weight))
    ref = make(lambda t: emb(ids, offsets), emb.weight, torch.optim.SparseAdam(emb.parameters(), lr=1e-3))
    return {"ours": ours, "nn.EmbeddingBag": ref}


def recommender_same(b: Bags, head: str) -> bool:
    """Two steps of each from the same table and MLP: losses, updated tables (touched rows
    close, untouched rows unchanged) and MLP weights agree; ours's table gradient is a
    coalesced sparse COO gradient with one row per distinct id."""
    import torch

    c = recommender_contenders(b, head)
    losses = {k: [float(v["step"]().detach()) for _ in range(2)] for k, v in c.items()}
    ours, ref = (v["table"].detach().numpy() for v in c.values())
    grad = c["ours"]["table"].grad
    touched = np.unique(b.ids)
    untouched = np.ones(b.rows, dtype=bool)
    untouched[touched] = False
    ok = (grad is not None and grad.layout == torch.sparse_coo and grad.is_coalesced()
          and np.array_equal(grad._indices()[0].numpy(), touched)
          and np.allclose(losses["ours"], losses["nn.EmbeddingBag"], rtol=1e-4, atol=1e-5)
          and _close(ours[touched], ref[touched], rtol=1e-4, atol=1e-5)
          and np.array_equal(ours[untouched], b.weight[untouched]) and np.array_equal(ref[untouched], ours[untouched]))
    for p, q in zip(c["ours"]["mlp"].parameters(), c["nn.EmbeddingBag"]["mlp"].parameters()):
        ok = ok and _close(p.detach(), q.detach(), rtol=1e-4, atol=1e-5)
    return bool(ok)


def run_recommender(scale: int = 1, rounds: int = 15) -> list[RecommenderResult]:
    """The recommender step at batch 64 (a 100,000 x 32 table) and 4,096 (1,000,000 x 64),
    ~20 zipf(1.2) ids a bag, each with the MLP head and with the sum loss; PyTorch with one
    thread (or numba's count, whichever is faster), ours / torch the median of paired rounds."""
    import numba

    out = []
    for batch, (rows, dim) in RECOMMENDER_SIZES.items():
        b = make_bags(rows=max(rows // scale, 1000), dim=dim, bags=max(batch // scale, 8))
        for head in ("mlp", "sum"):
            same = recommender_same(b, head)
            c = recommender_contenders(b, head)
            torch_best_threads(c["nn.EmbeddingBag"]["step"], (1, numba.get_num_threads()))
            calls = max(1, (200 if batch <= 64 else 5) // scale)
            t = alternating({k: v["step"] for k, v in c.items()}, rounds=rounds, calls=calls)
            size = (f"batch {len(b.offsets):,}, {b.rows:,} x {b.dim} float32 table, ~{len(b.ids) // len(b.offsets)} "
                    f"ids a bag ({len(np.unique(b.ids)):,} distinct)")
            out.append(RecommenderResult(batch, size, head, statistics.median(t["ours"]),
                                         statistics.median(t["nn.EmbeddingBag"]),
                                         paired_ratio(t["ours"], t["nn.EmbeddingBag"]), same))
            del c
    return out


# ---- (d) to_torch / from_torch -------------------------------------------------------------------------
@dataclass
class ConversionRow:
    case: str
    small: str
    large: str
    small_us: float
    large_us: float
    shared: bool  # every component of the result shares the source's memory, at both sizes

    @property
    def growth(self) -> float:
        return self.large_us / self.small_us


def _arrays(stype: str, rows: int, seed: int = 0) -> so.NDArray:
    rng = np.random.default_rng(seed)
    if stype == "default":
        return so.array(rng.standard_normal((rows, 64), dtype=np.float32))
    if stype == "csr":
        from .bench_conversions import random_csr

        return so.csr_matrix(random_csr(rows, 10_000, 10, seed=seed))
    keep = np.sort(rng.choice(10 * rows, rows, replace=False))
    return so.row_sparse_array((rng.standard_normal((rows, 64), dtype=np.float32), keep), shape=(10 * rows, 64))


def _components(x: Any) -> list[Any]:
    """The NumPy arrays a sparse_ops array is made of."""
    if x.stype == "csr":
        return [x.data, x.indices, x.indptr]
    if x.stype == "row_sparse":
        return [x.data, x.indices]
    return [x.data]


def _torch_components(t: Any) -> list[Any]:
    import torch

    if t.layout == torch.sparse_csr:
        return [t.values(), t.col_indices(), t.crow_indices()]
    if t.layout == torch.sparse_coo:
        return [t._values(), t._indices()[0]]
    return [t]


def _shares(x: Any, t: Any) -> bool:
    """Every component of the torch tensor starts where the sparse_ops component does."""
    ours, theirs = _components(x), _torch_components(t)
    return len(ours) == len(theirs) and all(
        a.size == 0 or a.__array_interface__["data"][0] == b.data_ptr() for a, b in zip(ours, theirs))


def per_call_us(fn: Callable[[], Any], most: int, budget_s: float = 0.05, repeat: int = 7) -> float:
    """Median over ``repeat`` runs of the mean time of one call (us), each run as many calls
    as fit in ``budget_s`` (at most ``most``, at least one): a conversion that copies or
    checks every value must not make the case take minutes."""
    import time
    import timeit

    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    number = max(1, min(most, int(budget_s / max(first, 1e-7))))
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def run_conversions(scale: int = 1) -> list[ConversionRow]:
    import sparse_ops.torch as sot

    n = max(5000 // scale, 16)
    small_rows, large_rows = max(10_000 // scale, 10), max(1_000_000 // scale, 1000)
    out = []
    with _quiet():
        for stype in ("default", "csr", "row_sparse"):
            small, large = _arrays(stype, small_rows), _arrays(stype, large_rows)
            ts, tl = sot.to_torch(small), sot.to_torch(large)
            shared = _shares(small, ts) and _shares(large, tl)
            back_s, back_l = sot.from_torch(ts), sot.from_torch(tl)
            shared_back = back_s.stype == stype and _shares(back_s, ts) and _shares(back_l, tl)
            desc = {"default": "{:,} x 64 float32", "csr": "nnz {:,}", "row_sparse": "{:,} stored rows x 64"}[stype]
            count = (lambda a: a.nnz) if stype == "csr" else (lambda a: a.data.shape[0])
            sizes = desc.format(count(small)), desc.format(count(large))
            out.append(ConversionRow(f"to_torch({stype})", *sizes, per_call_us(lambda: sot.to_torch(small), n),
                                     per_call_us(lambda: sot.to_torch(large), n), shared))
            out.append(ConversionRow(f"from_torch({stype})", *sizes, per_call_us(lambda: sot.from_torch(ts), n),
                                     per_call_us(lambda: sot.from_torch(tl), n), shared_back))
    return out


# ---- the whole case and its report ---------------------------------------------------------------------
@dataclass
class Result:
    gcn: GCNResult | None = None
    embedding: list[EmbeddingResult] = field(default_factory=list)
    overhead: list[OverheadRow] = field(default_factory=list)
    conversions: list[ConversionRow] = field(default_factory=list)
    percall: list[PerCallRow] = field(default_factory=list)
    recommender: list[RecommenderResult] = field(default_factory=list)
    skipped: str | None = None
    scale: int = 1


def run(quick: bool = False, scale: int | None = None) -> Result:
    """Every case at full size, or sizes divided by ``scale`` (``quick``: 10). Without
    PyTorch, the bridge or the cookbook, a result saying what is missing."""
    scale = scale or (10 if quick else 1)
    missing = available()
    if missing:
        return Result(skipped=missing, scale=scale)
    previous = torch_threads()
    try:
        small = scale > 1
        return Result(gcn=run_gcn(scale, rounds=3 if small else 5),
                      embedding=run_embedding(scale, rounds=3 if small else 20, calls=1 if small else 5),
                      overhead=run_overhead(scale), conversions=run_conversions(scale),
                      percall=run_percall(scale), recommender=run_recommender(scale, rounds=3 if small else 15),
                      scale=scale)
    finally:
        torch_threads(previous)


def _verdict(value: float, target: float) -> str:
    return "met" if value <= target else "**NOT met**"


def _yes(flag: bool) -> str:
    return "yes" if flag else "**NO**"


def targets(result: Result) -> list[list[str]]:
    """Rows of the targets table: case, target, measured, verdict."""
    if result.skipped:
        return []
    rows = []
    g = result.gcn
    rows.append(["GCN layer forward+backward (bridge `csr_spmm`)", f"<= {TARGETS['gcn']}x the faster of "
                 "`torch.sparse.mm` and `index_add_`", f"{g.vs_faster:.2f}x", _verdict(g.vs_faster, TARGETS["gcn"])])
    for e in result.embedding:
        rows.append([f"embedding-bag step + `{e.optimizer}`", f"<= {TARGETS['embedding']}x `nn.EmbeddingBag`",
                     f"{e.ratio:.2f}x", _verdict(e.ratio, TARGETS["embedding"])])
    for o in result.overhead:
        rows.append([f"bridged `elemwise_mul` {o.case}", f"<= {TARGETS['overhead']}x `torch.library.custom_op`",
                     f"{o.ratio:.2f}x", _verdict(o.ratio, TARGETS["overhead"])])
    for p in result.percall:
        if p.case.startswith("forward,"):
            rows.append([f"bridged `relu` {p.case} (written `st.ops.relu(x)`)",
                         f"<= {PERCALL_TARGET_US:g} us where `torch.relu` takes {PERCALL_TORCH_US:g} us: "
                         f"<= {PERCALL_TARGET_RATIO:.1f}x `torch.relu`",
                         f"{p.ratio:.2f}x ({p.ours_us:.2f} us; `torch.relu` {p.torch_us:.2f} us)",
                         _verdict(p.ratio, PERCALL_TARGET_RATIO)])
        else:  # no number set: reported beside torch.relu's
            rows.append([f"bridged `relu` {p.case}", "as low as it goes (reported)",
                         f"{p.ours_us:.1f} us ({p.ratio:.1f}x `torch.relu`)", "reported"])
    for r in result.recommender:
        rows.append([f"recommender step, batch {r.batch} ({r.head} loss; plugin op + `SparseAdam`)",
                     f"<= {RECOMMENDER_TARGETS[r.batch]}x `nn.EmbeddingBag`", f"{r.ratio:.2f}x",
                     _verdict(r.ratio, RECOMMENDER_TARGETS[r.batch])])
    for direction in ("to_torch", "from_torch"):
        calls = [c for c in result.conversions if c.case.startswith(direction + "(")]
        worst = max(calls, key=lambda c: c.growth)
        shared = all(c.shared for c in calls)
        # O(1): a 100x larger input may cost noise more (3x), not an O(n) pass (~100x)
        rows.append([f"`{direction}` (dense, csr, row_sparse)", "O(1), no copy",
                     f"100x larger input: at most {worst.growth:.2f}x the time ({worst.case}); memory shared: "
                     + ("all" if shared else "**not all**"), "met" if worst.growth < 3 and shared else "**NOT met**"])
    return rows


def report(result: Result) -> str:
    if result.skipped:
        return f"Skipped: {result.skipped}."
    g = result.gcn
    parts = []
    if result.scale != 1:
        parts += [f"Sizes divided by {result.scale} in this run: the targets are set for the full sizes.", ""]
    parts += [markdown_table(["case", "target", "this run", "verdict"], targets(result)), "",
              f"**(a) GCN layer**, {g.size}; PyTorch threads {g.torch_threads}; median of alternating rounds.", "",
              markdown_table(["contender", "forward+backward (ms)", "ours / it", "same result"],
                             [[name, f"{s * 1e3:.1f}", "1.00" if name == "ours" else f"{g.vs[name]:.2f}",
                               _yes(g.same)] for name, s in g.times.items()]), "",
              "**(b) Embedding-bag training step** (forward, backward, optimizer step).", "",
              markdown_table(["size", "optimizer", "PyTorch threads", "ours (ms)", "nn.EmbeddingBag (ms)",
                              "ours / PyTorch", "same result"],
                             [[e.size, e.optimizer, str(e.torch_threads), f"{e.ours_s * 1e3:.2f}",
                               f"{e.torch_s * 1e3:.2f}", f"{e.ratio:.2f}", _yes(e.same)] for e in result.embedding]),
              "",
              "**(c) Per-call overhead**, one thread, measured in alternation (median of 9 runs of many calls).", "",
              markdown_table(["case", "bridged `elemwise_mul` (us)", "`torch.library.custom_op` (us)",
                              "ours / custom op", "`torch.mul` (us)", "same result"],
                             [[o.case, f"{o.ours_us:.2f}", f"{o.custom_us:.2f}", f"{o.ratio:.2f}", f"{o.mul_us:.2f}",
                               _yes(o.same)] for o in result.overhead]), "",
              "**(d) Conversions**: time per call at two sizes 100x apart, and whether every component of "
              "the result shares the source's memory (data pointers compared).", "",
              markdown_table(["call", "small", "large", "small (us)", "large (us)", "large / small", "no copy"],
                             [[c.case, c.small, c.large, f"{c.small_us:.2f}", f"{c.large_us:.2f}", f"{c.growth:.2f}",
                               _yes(c.shared)] for c in result.conversions]), "",
              "**(e) Per-call cost of a small all-dense op**: `sparse_ops.torch.ops.relu(x)` (the attribute "
              "looked up in each call, as written) against `torch.relu(x)` on 4x4 float32, one thread, measured in "
              "alternation (median of 9 runs of many calls); forward + backward is `.backward(ones)` with `.grad` "
              "reset each time.", "",
              markdown_table(["case", "bridged `relu` (us)", "`torch.relu` (us)", "ours / torch", "same result"],
                             [[p.case, f"{p.ours_us:.2f}", f"{p.torch_us:.2f}", f"{p.ratio:.2f}", _yes(p.same)]
                              for p in result.percall]), "",
              "**(f) Recommender training step**: a plugin author's embedding-bag op (`bench_bag_sum`, this file: "
              "a kernel-first op whose forward is a row kernel over the bags and whose backward, declared on the op, "
              "a row kernel over the ids present) on the bags as a csr, the table marked `sparse_grad`, feeding an "
              "MLP (Linear(dim, 32), ReLU, Linear(32, 1), binary cross-entropy) or the sum of the pooled rows as the "
              "loss; the table trained with `SparseAdam`, the MLP with `Adam`. Reference: `nn.EmbeddingBag(mode="
              "\"sum\", sparse=True)` on flat ids and offsets, the same MLP, loss and optimizers. Same result: two "
              "steps give the same losses, tables and MLP weights.", "",
              markdown_table(["size", "loss", "ours (ms)", "nn.EmbeddingBag (ms)", "ours / PyTorch", "same result"],
                             [[r.size, r.head, f"{r.ours_s * 1e3:.3f}", f"{r.torch_s * 1e3:.3f}", f"{r.ratio:.2f}",
                               _yes(r.same)] for r in result.recommender])]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    import datetime
    import os

    from ._timing import describe_machine

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_torch", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every case 10x smaller (writes torch-quick.md)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for torch.md")
    args = parser.parse_args(argv)
    def load() -> str:
        return f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"

    when, before = datetime.datetime.now().isoformat(timespec="seconds"), load()
    policy = os.environ.get("OMP_WAIT_POLICY")  # before sparse_ops.kernels sets it (passive) when unset
    result = run(quick=args.quick)
    lines = ["# The PyTorch bridge vs PyTorch", "",
             f"Run {when} with `python -m benchmarks.bench_torch{' --quick' if args.quick else ''}`; 1-minute load "
             f"average {before} before the run and {load()} after it (2 cores shared with other users); "
             f"OMP_WAIT_POLICY {policy or 'unset (so passive for numba: sparse_ops.kernels sets it)'}. Ratios are "
             "ours / reference (below 1: the bridge is faster).", "",
             "`from_torch` of csr and row_sparse tensors runs the O(1) checks of the components and defers the "
             "O(nnz) ones (index ranges, order) to the container's first use, which every operator and conversion "
             "makes. With other users' jobs on the 2 cores, ratios move between runs: the embedding-bag ratios by up to "
             "~0.3 (see the paired rounds in `_timing.alternating`).", "", "## Machine", ""]
    lines += [f"- {k}: {v}" for k, v in describe_machine().items()]
    lines += ["", "## Results", "", report(result), ""]
    text = "\n".join(lines)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / ("torch-quick.md" if args.quick else "torch.md")
    path.write_text(text)
    print(text)
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
