"""The op x face matrix: every registered op's own first sample run through every face and
compared with the native result (values, storage types, the new values of inputs updated
in place, and the gradients of a fixed random linear loss), in the spirit of PyTorch's
OpInfo tests across frameworks.

Each face returns a ``Result``: the visible outputs (storage type, dense values), the new
values of mutated inputs, and the gradient of ``L = sum_j <dense(out_j), W_j>`` for each
float input, laid out on the input's components (dense, or one value per stored value of
a sparse input), ``None`` for inputs that get none. A cell is ``pass``, ``declared: why``
(``sparse_ops.faces``: what ``explain`` shows) or ``FAIL: what``.

The torch.compile face compiles the op once (``dynamic=True``) and calls it at the sample's
size and at a second one (``second_size``: twice the rows of a row-partitioned op, else a smaller sample): ``SECOND_SIZE`` records how each op went there
and the summary (``two_sizes``) lists the ops without one and why.
"""
from __future__ import annotations

import dataclasses
import traceback
import warnings
from typing import Any, Callable

import numpy as np

import sparse_ops as so
from sparse_ops import autograd, faces, registry
from sparse_ops.bridging import aligned

RTOL, ATOL = 1e-5, 1e-7


@dataclasses.dataclass
class Result:
    outputs: list  # (stype, dense ndarray) per visible output
    states: list  # dense ndarray per mutated input, after the call
    grads: list | None = None  # per input: ndarray laid out on its components, or None


def samples_of(opdef: registry.OpDef) -> tuple[list, dict] | None:
    make = getattr(opdef.cls, "samples", None)
    if not callable(make):
        return None
    first = list(make())[0]
    xs, params = first if isinstance(first, tuple) else (first, {})
    return list(xs), dict(params)


def _copies(xs: list) -> list:
    return [x.copy() for x in xs]


def _float(x: so.NDArray) -> bool:
    return np.issubdtype(x.dtype, np.floating)


def _as_list(outs: Any) -> list:
    """A call's outputs as a list (CSRParts / RowSparseParts are one output, though tuples)."""
    return list(outs) if isinstance(outs, (list, tuple)) and not hasattr(outs, "stype") else [outs]


def head_weights(outputs: list, seed: int = 7) -> list[np.ndarray]:
    """The fixed random W_j of the loss, one dense array per visible output."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, size=v.shape) for _, v in outputs]


def _mutated(opdef: registry.OpDef) -> list[int]:
    return [opdef.arguments.index(m) for m in opdef.mutate] if not opdef.variadic else []


# ---- faces -------------------------------------------------------------------------------------------
def native(opdef, xs, params) -> Result:
    xs = _copies(xs)
    outs = _as_list(so.invoke(opdef, xs, params))
    return Result([(o.stype, o.asnumpy()) for o in outs], [xs[i].asnumpy() for i in _mutated(opdef)])


def native_grad(opdef, xs, params, weights) -> Result:
    xs = _copies(xs)
    for x in xs:
        if _float(x):
            x.attach_grad()
    with autograd.record():
        outs = _as_list(so.invoke(opdef, xs, params))
    heads = [so.array(w.astype(o.dtype)) if o.stype == "default" else
             o._with_values(aligned(so.array(w.astype(o.dtype)), o), copy_aux=False) for o, w in zip(outs, weights)]
    autograd.backward(outs, heads)
    grads = [np.asarray(aligned(x.grad, x)) if _float(x) and x.grad is not None else None for x in xs]
    return Result([(o.stype, o.asnumpy()) for o in outs], [], grads)


def _torch_inputs(xs):
    import sparse_ops.torch as st

    ts = []
    for x in xs:
        t = st.to_torch(x.copy())
        if x.stype == "row_sparse":
            t = t.coalesce()
        ts.append(t)
    return ts


def _torch_dense(t) -> np.ndarray:
    import torch

    if t.layout != torch.strided:
        t = t.to_dense()
    return t.detach().cpu().numpy()


def torch_values(opdef, xs, params) -> Result:
    import sparse_ops.torch as st

    ts = _torch_inputs(xs)
    outs = _as_list(getattr(st.ops, opdef.name)(*ts, **params))
    return Result([(_torch_stype(o), _torch_dense(o)) for o in outs], [_torch_dense(ts[i]) for i in _mutated(opdef)])


def _torch_stype(t) -> str:
    import torch

    return {torch.strided: "default", torch.sparse_csr: "csr", torch.sparse_coo: "row_sparse"}[t.layout]


def torch_grad(opdef, xs, params, weights) -> Result:
    import torch
    import sparse_ops.torch as st

    ts = _torch_inputs(xs)
    leaves = []
    for x, t in zip(xs, ts):
        if _float(x):
            t.requires_grad_(True)
        leaves.append(t)
    outs = _as_list(getattr(st.ops, opdef.name)(*ts, **params))
    loss = sum((o.to_dense() if o.layout != torch.strided else o).mul(torch.from_numpy(w).to(o.dtype)).sum()
               for o, w in zip(outs, weights))
    loss.backward()
    grads = []
    for x, t in zip(xs, leaves):
        if not _float(x) or t.grad is None:
            grads.append(None)
            continue
        g = so.array(_torch_dense(t.grad))
        grads.append(np.asarray(aligned(g, x)))
    return Result([(_torch_stype(o), _torch_dense(o)) for o in outs], [], grads)


def _parts(x):
    """A container as what compiled torch code passes: a tensor, CSRParts or RowSparseParts."""
    import torch
    from sparse_ops.torch import CSRParts, RowSparseParts

    t = [torch.from_numpy(np.array(a.asnumpy())) for a in ((x,) if x.stype == "default" else
                                                            (x.data, x.indices, x.indptr) if x.stype == "csr"
                                                            else (x.data, x.indices))]
    if x.stype == "default":
        return t[0]
    return CSRParts(*t, tuple(x.shape)) if x.stype == "csr" else RowSparseParts(*t, tuple(x.shape))


def _parts_result(o) -> tuple[str, np.ndarray]:
    import torch

    if isinstance(o, torch.Tensor):
        return "default", o.detach().numpy()
    return o.stype, _torch_dense(o.to_torch())


def other_batch(opdef: registry.OpDef, xs: list, params: dict) -> list | None:
    """The sample with twice the rows in the inputs a row-partitioned op cuts into row blocks
    (its batch dimension; the rows repeated, so still a valid input), or None for ops
    without one. Larger, not smaller: a batch of one row would meet torch's own
    specialisation of sizes 0 and 1, which says nothing of the op."""
    from sparse_ops.dask.collection import concat_rows

    inst = opdef.instance(params)
    rule, cut = inst.partitioning(*[x.shape for x in xs])
    if rule != "rows" or not xs:
        return None
    names = opdef.arguments
    idx = [i for i in range(len(xs)) if cut is None or (i < len(names) and names[i] in cut)]
    if not idx or any(xs[i].ndim == 0 or xs[i].shape[0] < 1 for i in idx):
        return None
    return [concat_rows([x, x], (2 * x.shape[0], *x.shape[1:])) if i in idx else x for i, x in enumerate(xs)]


def _fewer_rows(x: so.NDArray) -> so.NDArray:
    """``x`` less its last row, in its storage type."""
    from sparse_ops.dask.collection import row_block

    return row_block(x, 0, x.shape[0] - 1)


def _np(a) -> np.ndarray:
    return np.asarray(a.asnumpy() if hasattr(a, "asnumpy") else a)


def _fewer_columns(x: so.NDArray) -> so.NDArray:
    """``x`` less its last index along the last axis, in its storage type (csr: the values
    stored in that column dropped; row_sparse: its stored rows cut)."""
    from sparse_ops.ndarray.sparse import CSRNDArray, RowSparseNDArray

    if x.ndim == 1:
        return _fewer_rows(x)
    stop = x.shape[-1] - 1
    if x.stype == "csr":
        data, indices, indptr = _np(x.data), _np(x.indices), _np(x.indptr)
        keep = indices < stop
        rows = np.repeat(np.arange(x.shape[0]), np.diff(indptr))
        counts = np.bincount(rows[keep], minlength=x.shape[0])
        new_indptr = np.concatenate([[0], np.cumsum(counts)]).astype(indptr.dtype)
        return CSRNDArray(data[keep], indices[keep], new_indptr, (x.shape[0], stop))
    if x.stype == "row_sparse":
        return RowSparseNDArray(np.ascontiguousarray(_np(x.data)[..., :stop]), _np(x.indices).copy(),
                                (*x.shape[:-1], stop))
    return so.array(np.ascontiguousarray(x.asnumpy()[..., :stop]))


def _fewer_everywhere(x: so.NDArray) -> so.NDArray:
    """``x`` less one index along every axis (a square matrix stays square), in its storage type."""
    from sparse_ops.ndarray.sparse import RowSparseNDArray

    if x.ndim == 1:
        return _fewer_rows(x)
    if x.stype == "default":
        return so.array(np.ascontiguousarray(x.asnumpy()[tuple(slice(0, n - 1) for n in x.shape)]))
    if x.stype == "row_sparse":
        inner = (slice(None),) + tuple(slice(0, n - 1) for n in x.shape[1:])
        x = RowSparseNDArray(np.ascontiguousarray(_np(x.data)[inner]), _np(x.indices).copy(),
                             (x.shape[0], *(n - 1 for n in x.shape[1:])))
        return _fewer_rows(x)
    return _fewer_rows(_fewer_columns(x))


def _can_lose(x: so.NDArray, axes: str) -> bool:
    """Whether ``x`` can lose an index along ``axes`` ('first', 'last', 'every') and keep one."""
    if x.ndim == 0:
        return False
    return all(n >= 2 for n in {"first": x.shape[:1], "last": x.shape[-1:], "every": x.shape}[axes])


_CUTS = {"first": (_fewer_rows, "one row fewer"), "last": (_fewer_columns, "one fewer along the last axis"),
         "every": (_fewer_everywhere, "one fewer along every axis")}


def smaller_variants(xs: list) -> list[tuple[str, list]]:
    """Generic smaller versions of a sample, in the order to try them: (what, make the inputs).
    Per kind of cut (a row; the last axis; every axis): every input that can lose one first,
    then (rows) every smaller set of them, largest first, or (the axes) each one alone and all
    but the first; last, for up to three inputs, each input cut its own way."""
    from itertools import combinations, product

    out, seen = [], set()

    def add(axes: str, picked: tuple[int, ...], what: str) -> None:
        if not picked or (axes, picked) in seen:
            return
        seen.add((axes, picked))
        cut, name = _CUTS[axes]
        out.append((f"{name} in {what}", lambda: [cut(x) if i in picked else x for i, x in enumerate(xs)]))

    able = {axes: tuple(i for i, x in enumerate(xs) if _can_lose(x, axes)) for axes in _CUTS}
    for axes in _CUTS:
        add(axes, able[axes], "every input" if len(able[axes]) == len(xs) else
            "input" + ("s " if len(able[axes]) > 1 else " ") + ", ".join(map(str, able[axes])))
    rows = able["first"]
    for k in range(len(rows) - 1, 0, -1):
        for picked in combinations(rows, k):
            add("first", picked, "input" + ("s " if k > 1 else " ") + ", ".join(map(str, picked)))
    for axes in ("last", "every"):
        for i in able[axes]:
            add(axes, (i,), f"input {i}")
    add("every", tuple(i for i in able["every"] if i > 0), "every input but the first")
    if len(xs) <= 3:  # last: each input cut its own way (reshape_like's lhs and rhs keep one size)
        for kinds in product((None, *_CUTS), repeat=len(xs)):
            if len({k for k in kinds if k}) < 2 or any(k and i not in able[k] for i, k in enumerate(kinds)):
                continue
            what = "; ".join(f"{_CUTS[k][1]} in input {i}" for i, k in enumerate(kinds) if k)
            out.append((what, lambda kinds=kinds: [_CUTS[k][0](x) if k else x for x, k in zip(xs, kinds)]))
    return out


# errors of a native call that mean "this variant is no valid sample of the op"
_NOT_A_SAMPLE = (so.OperatorError, so.SparseFormatError, ValueError)
ROWS_RULE = "twice the rows in the inputs it partitions by rows"


def second_size(opdef: registry.OpDef, xs: list, params: dict) -> tuple[list | None, str, Result | None]:
    """(a sample of another size, how it was made, native's result on it or None), or (None, why there
    is none, None): the rows an op partitions into row blocks (Dask's rule) first, then the
    first of ``smaller_variants`` the native op accepts."""
    small = other_batch(opdef, xs, params)
    if small is not None:
        return small, ROWS_RULE, None
    fixed = [f"{k}={v}" for k, v in params.items() if k == "shape" or k.endswith("_shape")]
    if not xs:
        return None, "no array inputs: its sizes are parameters" + (f" ({', '.join(fixed)})" if fixed else "") + \
            ", fixed in the compiled function", None
    first_error = None
    for what, make in smaller_variants(xs):
        try:
            cand = make()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return cand, what, native(opdef, cand, params)
        except _NOT_A_SAMPLE as exc:
            first_error = first_error or str(exc).splitlines()[0].replace(f"operator '{opdef.name}': ", "")
    if first_error is None:
        return None, "no input has an axis of length 2 or more to shorten", None
    if fixed:
        return None, f"native refuses every smaller input with the fixed {', '.join(fixed)}", None
    if len(first_error) > 100:
        first_error = first_error[:100].rsplit(" ", 1)[0] + " ..."
    return None, f"native refuses every smaller input tried (first: {first_error})", None


def _shape_slip(opdef, xs, params, first: Result, ref: Result, got: Result) -> str | None:
    """An output whose shape matches native's at the sample's size but not at the second
    (``compare`` lets equal-sized shapes pass: some faces give a scalar as shape (1,))."""
    for j, ((_, rv), (_, gv)) in enumerate(zip(ref.outputs, got.outputs)):
        if np.shape(rv) != np.shape(gv):
            if np.shape(first.outputs[j][1]) == np.shape(native(opdef, xs, params).outputs[j][1]):
                return f"output {j} has shape {np.shape(gv)}, native {np.shape(rv)}"
    return None


@dataclasses.dataclass
class SecondSize:
    """How an op's torch.compile cell went at a second size."""
    ran: bool  # compiled once, called at both sizes, agreed with native at both
    how: str  # how the second sample was made, or why there is none / what failed
    recompiled: bool = False  # the second call compiled a new graph (a guard specialised a size)


SECOND_SIZE: dict[str, SecondSize] = {}  # op -> its torch.compile cell's second size, filled by torch_compiled


def torch_compiled(opdef, xs, params) -> Result:
    """``torch.compile(fullgraph=True, dynamic=True)`` of the bridged op, compiled once and run
    on the sample and at a second size (``second_size``), each compared with the native call
    (random ops: their outputs' storage types and shapes only)."""
    import torch
    import sparse_ops.torch as st
    from torch._dynamo.utils import counters

    SECOND_SIZE.pop(opdef.name, None)
    torch._dynamo.reset()  # each op compiles its own graph (one lambda code object serves them all)
    # no duck sizing: sizes that are equal by the sample's coincidence stay separate symbols
    # (else a second size breaking the coincidence recompiles, which says nothing of the op)
    with torch.fx.experimental._config.patch(use_duck_shape=False):
        return _torch_compiled(opdef, xs, params, torch, st, counters)


def _torch_compiled(opdef, xs, params, torch, st, counters) -> Result:
    f = getattr(st.ops, opdef.name)
    compiled = torch.compile(lambda *a: f(*a, **params), fullgraph=True, dynamic=True)
    args = [_parts(x) for x in xs]
    outs = _as_list(compiled(*args))
    states = [_parts_result(args[i])[1] for i in _mutated(opdef)]
    result = Result([_parts_result(o) for o in outs], states)
    small, how, ref = second_size(opdef, xs, params)
    if small is None:
        SECOND_SIZE[opdef.name] = SecondSize(False, how)
        return result
    sizes = f"{', '.join(str(tuple(x.shape)) for x in xs)} -> {', '.join(str(tuple(x.shape)) for x in small)}"
    if ref is None:
        ref = native(opdef, small, params)
    graphs = counters["stats"]["unique_graphs"]
    small_args = [_parts(x) for x in small]
    got_outs = _as_list(compiled(*small_args))
    got = Result([_parts_result(o) for o in got_outs], [_parts_result(small_args[i])[1] for i in _mutated(opdef)])
    recompiled = counters["stats"]["unique_graphs"] > graphs
    problem = compare(ref, got, "random" in opdef.resources) or _shape_slip(opdef, xs, params, result, ref, got)
    # any batch size, one graph for all: unless the op's shape rule needs concrete sizes
    # (symbolic_shapes = False: a C library's callbacks), which torch then specialises per size
    if problem is None and recompiled and how == ROWS_RULE and opdef.cls.symbolic_shapes:
        problem = "compiled a second graph for the other batch size (a rule or kernel fixed a size)"
    if problem is not None:
        SECOND_SIZE[opdef.name] = SecondSize(False, f"FAIL at the second size ({how}: {sizes}): {problem}", recompiled)
        raise AssertionError(f"at the second size ({how}: {sizes}): {problem}")
    SECOND_SIZE[opdef.name] = SecondSize(True, how, recompiled)
    return result


def _stored_loss(o, w):
    """<dense(o), w> for a compiled sparse result (CSRParts / RowSparseParts): its stored
    values against w at their positions."""
    import torch

    if o.stype == "csr":
        rows = torch.repeat_interleave(torch.arange(o.shape[0]), torch.diff(o.indptr))
        return (o.values * w.to(o.values.dtype)[rows, o.indices]).sum()
    return (o.values * w.to(o.values.dtype)[o.indices]).sum()


def torch_compiled_grad(opdef, xs, params, weights) -> Result:
    """The gradients of the loss through ``torch.compile(fullgraph=True, dynamic=True)``: the
    compiled forward and the backward graph AOTAutograd makes from the op's gradient rule."""
    import torch
    import sparse_ops.torch as st

    torch._dynamo.reset()
    f = getattr(st.ops, opdef.name)
    args = [_parts(x) for x in xs]
    leaves = [a if isinstance(a, torch.Tensor) else a.values for a in args]
    for x, t in zip(xs, leaves):
        if _float(x):
            t.requires_grad_(True)
    ws = [torch.from_numpy(w) for w in weights]

    def loss(*a):
        total = 0
        for o, w in zip(_as_list(f(*a, **params)), ws):
            total = total + ((o * w.to(o.dtype)).sum() if isinstance(o, torch.Tensor) else _stored_loss(o, w))
        return total

    torch.compile(loss, fullgraph=True, dynamic=True)(*args).backward()
    grads = [t.grad.detach().numpy() if _float(x) and t.grad is not None else None for x, t in zip(xs, leaves)]
    return Result([], [], grads)


def _jax_inputs(xs):
    import jax.numpy as jnp
    from jax.experimental.sparse import BCSR
    from sparse_ops.jax import RowSparse

    out = []
    for x in xs:
        if x.stype == "default":
            out.append(jnp.asarray(x.asnumpy()))
        elif x.stype == "csr":
            out.append(BCSR((jnp.asarray(x.data.asnumpy()), jnp.asarray(x.indices.asnumpy()),
                             jnp.asarray(x.indptr.asnumpy())), shape=x.shape))
        else:
            out.append(RowSparse(jnp.asarray(x.data.asnumpy()), jnp.asarray(x.indices.asnumpy()), x.shape))
    return out


def _jax_result(o) -> tuple[str, np.ndarray]:
    from jax.experimental.sparse import BCSR
    from sparse_ops.jax import RowSparse

    if isinstance(o, BCSR):
        return "csr", np.asarray(o.todense())
    if isinstance(o, RowSparse):
        return "row_sparse", np.asarray(o.todense())
    return "default", np.asarray(o)


def _x64(run: Callable) -> Callable:
    """``run`` with JAX's 64-bit types on (the samples are float64 and int64)."""
    def wrapped(*args):
        import jax

        with jax.enable_x64(True):
            return run(*args)

    return wrapped


@_x64
def jax_values(opdef, xs, params) -> Result:
    import jax
    import sparse_ops.jax as soj

    f = getattr(soj.ops, opdef.name)
    outs = _as_list(jax.jit(lambda *a: f(*a, **params))(*_jax_inputs(xs)))
    nvis = len(outs) - len(_mutated(opdef))
    return Result([_jax_result(o) for o in outs[:nvis]], [_jax_result(o)[1] for o in outs[nvis:]])


def _values_leaf(a):
    from jax.experimental.sparse import BCSR
    from sparse_ops.jax import RowSparse

    return a.data if isinstance(a, BCSR) else a.values if isinstance(a, RowSparse) else a


def _with_leaf(a, v):
    from jax.experimental.sparse import BCSR
    from sparse_ops.jax import RowSparse

    if isinstance(a, BCSR):
        return BCSR((v, a.indices, a.indptr), shape=a.shape)
    if isinstance(a, RowSparse):
        return RowSparse(v, a.indices, a.shape)
    return v


@_x64
def jax_grad(opdef, xs, params, weights) -> Result:
    import jax
    import jax.numpy as jnp
    import sparse_ops.jax as soj

    f = getattr(soj.ops, opdef.name)
    args = _jax_inputs(xs)
    wrt = [i for i, x in enumerate(xs) if _float(x)]

    def loss(*leaves):
        a = list(args)
        for i, v in zip(wrt, leaves):
            a[i] = _with_leaf(a[i], v)
        outs = _as_list(f(*a, **params))
        total = 0.0
        for o, w in zip(outs, weights):
            dense = o if not hasattr(o, "todense") else o.todense()
            total = total + jnp.sum(dense * jnp.asarray(w, dense.dtype))
        return total

    got = jax.jit(jax.grad(loss, argnums=tuple(range(len(wrt)))))(*[_values_leaf(args[i]) for i in wrt])
    grads = [None] * len(xs)
    for i, g in zip(wrt, got):
        grads[i] = np.asarray(g)
    outs = _as_list(jax.jit(lambda *a: f(*a, **params))(*args))
    return Result([_jax_result(o) for o in outs], [], grads)


@_x64
def jax_vmapped(opdef, xs, params) -> Result:
    """``jax.jit(jax.vmap(...))`` of the bridged op applied to one example (one row of each
    input the op cuts into row blocks) at a time; the rows stacked are the batch's result.
    An op that cuts no rows (its partition rule is not 'rows') is mapped over a batch of two
    copies of the sample (every input stacked twice): each must give the native result."""
    import jax
    import jax.numpy as jnp
    import sparse_ops.jax as soj

    f = getattr(soj.ops, opdef.name)
    rule, cut = opdef.instance(params).partitioning(*[x.shape for x in xs])
    if rule != "rows":
        twice = [jnp.stack([a, a]) for a in _jax_inputs(xs)]
        outs = _as_list(jax.jit(jax.vmap(lambda *a: f(*a, **params)))(*twice))
        first, second = [_jax_result(o[0]) for o in outs], [_jax_result(o[1]) for o in outs]
        if "random" not in opdef.resources:
            for (s0, v0), (s1, v1) in zip(first, second):
                np.testing.assert_array_equal(v0, v1)  # (the two examples are one)
        return Result(first, [])
    names = opdef.arguments
    mapped = [cut is None or names[min(i, len(names) - 1)] in cut for i in range(len(xs))]
    args = _jax_inputs(xs)
    batch = [a for a, m in zip(args, mapped) if m]
    fixed = [a for a, m in zip(args, mapped) if not m]

    def one(*rows):
        it_rows, it_fixed = iter(rows), iter(fixed)
        call = [next(it_rows)[None] if m else next(it_fixed) for m in mapped]
        return [o[0] for o in _as_list(f(*call, **params))]

    outs = jax.jit(jax.vmap(one))(*batch)
    return Result([_jax_result(o) for o in outs], [])


def mxnet_values(opdef, xs, params) -> Result:
    import sparse_ops.compat.mxnet as mx

    xs = _copies(xs)
    outs = _as_list(getattr(mx.nd, opdef.name)(*xs, **params))
    return Result([(o.stype, o.asnumpy()) for o in outs], [xs[i].asnumpy() for i in _mutated(opdef)])


def dask_values(opdef, xs, params) -> Result:
    import sparse_ops.dask as sd

    args = list(_copies(xs))
    _, cut = opdef.instance(params).partitioning(*[x.shape for x in xs])
    names = opdef.arguments
    for i, x in enumerate(args):  # the inputs the op cuts into row blocks, in two blocks
        if (cut is None or names[min(i, len(names) - 1)] in cut) and x.ndim and x.shape[0] >= 2:
            args[i] = sd.from_array(x, nblocks=2)
    out = sd.apply(opdef.name, *args, **params).compute()
    return Result([(out.stype, out.asnumpy())], [])


def gpu_values(opdef, xs, params) -> Result:
    gpu = so.gpu(0)
    xs = [x.copy().to(gpu) for x in xs]
    outs = _as_list(so.invoke(opdef, xs, params))
    return Result([(o.stype, o.asnumpy()) for o in outs], [xs[i].asnumpy() for i in _mutated(opdef)])


# ---- comparing ------------------------------------------------------------------------------------------
def _close(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        a = a.reshape(b.shape) if a.size == b.size else a
    return a.shape == b.shape and np.allclose(a.astype(np.float64), b.astype(np.float64), rtol=RTOL, atol=ATOL,
                                               equal_nan=True)


def compare(ref: Result, got: Result, random: bool, stypes: bool = True) -> str | None:
    """What differs (None: nothing)."""
    if len(ref.outputs) != len(got.outputs):
        return f"{len(got.outputs)} outputs, native gives {len(ref.outputs)}"
    for j, ((rs, rv), (gs, gv)) in enumerate(zip(ref.outputs, got.outputs)):
        if stypes and rs != gs:
            return f"output {j} is {gs}, native gives {rs}"
        if np.shape(rv) != np.shape(gv) and np.size(rv) != np.size(gv):
            return f"output {j} has shape {np.shape(gv)}, native {np.shape(rv)}"
        if not random and not _close(gv, rv):
            return f"output {j} differs from native (max abs diff {np.max(np.abs(np.subtract(gv, rv, dtype=float)))})"
    for i, (r, g) in enumerate(zip(ref.states, got.states)):
        if not random and not _close(g, r):
            return f"mutated input state {i} differs from native"
    if len(ref.states) != len(got.states):
        return f"{len(got.states)} mutated states, native gives {len(ref.states)}"
    if ref.grads is not None and got.grads is not None:
        for i, (r, g) in enumerate(zip(ref.grads, got.grads)):
            if (r is None) != (g is None):
                if r is None and g is not None and not np.any(g):
                    continue  # an explicit zero gradient where native gives none
                if g is None and r is not None and not np.any(r):
                    continue
                return f"input {i}: gradient {'missing' if g is None else 'given'} where native gives " \
                       f"{'one' if r is not None else 'none'}"
            if r is not None and not random and not _close(g, r):
                return f"input {i}: gradient differs from native's"
    return None


FACE_RUNNERS: dict[str, Callable] = {
    "torch": torch_values, "jax": jax_values, "mxnet": mxnet_values, "dask": dask_values, "gpu": gpu_values,
    "torch.compile": torch_compiled, "jax.vmap": jax_vmapped,
}
GRAD_RUNNERS: dict[str, Callable] = {"torch.grad": torch_grad, "torch.compile.grad": torch_compiled_grad,
                                     "jax.grad": jax_grad}


def run_cell(opdef: registry.OpDef, face: str, sample: tuple[list, dict], cache: dict) -> str:
    """One cell: 'pass', 'declared: why' or 'FAIL: what'."""
    xs, params = sample
    reasons = faces.unsupported(opdef, opdef.instance(params), [x.shape for x in xs], [x.stype for x in xs])
    if face in reasons:
        return f"declared: {reasons[face]}"
    random = "random" in opdef.resources
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if "native" not in cache:
                cache["native"] = native(opdef, xs, params)
            ref = cache["native"]
            if face == "native":
                return "pass"
            weights = head_weights(ref.outputs)
            if face == "autograd" or face in GRAD_RUNNERS:
                if "autograd" not in cache:
                    cache["autograd"] = native_grad(opdef, xs, params, weights)
                gref = cache["autograd"]
                if face == "autograd":
                    problem = compare(ref, gref, random)
                else:
                    got = GRAD_RUNNERS[face](opdef, xs, params, weights)
                    # a face that gives gradients only (its outputs stay inside a compiled loss)
                    problem = compare(gref if got.outputs else Result([], [], gref.grads), got, random)
            else:
                problem = compare(ref, FACE_RUNNERS[face](opdef, xs, params), random)
    except Exception as exc:  # noqa: BLE001 - a cell records what failed; the matrix reports it
        last = traceback.extract_tb(exc.__traceback__)[-1]
        return f"FAIL: {type(exc).__name__}: {str(exc)[:300]} ({last.filename.rsplit('/', 1)[-1]}:{last.lineno})"
    return "pass" if problem is None else f"FAIL: {problem}"


# ---- the run's cells, and the table for the docs ----------------------------------------------------------
CELLS: dict[tuple[str, str], str] = {}  # (op, face) -> cell, filled by the tests


def two_sizes() -> tuple[str, list[tuple[str, str]]]:
    """The torch.compile column at two sizes: a sentence with the counts, and (op, why) for
    each op that did not run at a second size (or failed there)."""
    ops = sorted(o for o, f in CELLS if f == "torch.compile")
    ran = [o for o in ops if CELLS[(o, "torch.compile")] == "pass" and o in SECOND_SIZE and SECOND_SIZE[o].ran]
    by_rows = sum(SECOND_SIZE[o].how == ROWS_RULE for o in ran)
    recompiled = sum(SECOND_SIZE[o].recompiled for o in ran)
    others = []
    for o in ops:
        if o in ran:
            continue
        cell, second = CELLS[(o, "torch.compile")], SECOND_SIZE.get(o)
        if cell.startswith("declared: "):
            others.append((o, f"torch.compile declared unsupported: {cell[len('declared: '):]}"))
        elif second is not None and second.how.startswith("FAIL"):
            others.append((o, second.how))
        elif cell.startswith("FAIL"):
            others.append((o, "the torch.compile cell failed at the sample's size"))
        else:
            others.append((o, second.how if second is not None else "not run"))
    head = (f"{len(ran)} of {len(ops)} ops ran torch.compile at two sizes: compiled once (`dynamic=True`), called "
            f"on the sample and at a second size, each compared with the native call (random ops: storage types "
            f"and shapes). The second sample: {by_rows} with twice the rows in the inputs the op partitions by rows "
            f"(Dask's rule; a second graph there fails the cell), {len(ran) - by_rows} with the first generic smaller variant the native op accepts "
            f"(one row, or one index along the last or every axis, fewer in all or some inputs); {recompiled} of "
            f"them compiled a second graph for it (a guard had specialised a size).")
    return head, others


def table() -> str:
    """The matrix as Markdown: one row per op, one column per face; declared reasons as footnotes."""
    face_list = [f for f in faces.FACES if any(k[1] == f for k in CELLS)]
    notes: dict[str, int] = {}
    lines = ["# Operators x faces", "",
             "Generated by `SPARSE_OPS_CUDA_SIM=1 SPARSE_OPS_MATRIX_TABLE=docs/op_face_matrix.md python -m pytest "
             "tests/matrix` (the gpu column in numba's CUDA simulator): each op's first sample through each face, "
             "compared with the native call's values, storage types, updated inputs and gradients. "
             "`yes`: ran and agreed; a number: not served, for the reason in that note (the op's declaration, "
             "as `sparse_ops.explain` shows it); `-`: not run in this table's passes. torch.compile runs at two "
             "sizes where the op takes a second sample: see the section after the notes.", "",
             "| op | " + " | ".join(face_list) + " |", "|---|" + "---|" * len(face_list)]
    for op in sorted({k[0] for k in CELLS}):
        row = []
        for f in face_list:
            cell = CELLS.get((op, f))
            if cell is None:
                row.append("-")
            elif cell == "pass":
                row.append("yes")
            elif cell.startswith("declared: "):
                n = notes.setdefault(cell[len("declared: "):], len(notes) + 1)
                row.append(f"[{n}]")
            else:
                row.append("**FAIL**")
        lines.append(f"| `{op}` | " + " | ".join(row) + " |")
    lines += ["", "Notes:", ""] + [f"{n}. {why}" for why, n in notes.items()]
    if any(f == "torch.compile" for _, f in CELLS):
        head, others = two_sizes()
        lines += ["", "## torch.compile at two sizes", "", head]
        if others:
            lines += ["", "Not run at a second size:", ""] + [f"- `{op}`: {why}" for op, why in others]
    return "\n".join(lines) + "\n"
