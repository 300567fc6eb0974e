"""``apply``: run a registered operator over the row blocks of ``DistributedArray`` inputs.

The operator's declaration (``Op.partition`` / ``Op.partitioning``) says how: ``"rows"``
runs it block by block and stacks the results' rows; ``"sum"`` runs it block by block and
adds the per-block results in a tree of ``add_n`` tasks (row_sparse stays row_sparse);
None is refused. Inputs the declaration does not cut into blocks go whole to every worker,
once (``scatter(broadcast=True)``). Shapes, dtypes and storage types are inferred on the
client from the blocks' metadata, so a bad call fails before any task runs. On the
workers the operator is looked up by name in the worker's own table: the workers must
have the plugin (installed, or shipped with ``ship_library``).
"""
from __future__ import annotations

from typing import Any

from dask.base import tokenize

from ..dispatch import InferenceError, infer_dtypes, infer_shapes, infer_stypes, invoke
from ..errors import OperatorError
from ..ndarray import NDArray
from ..registry import OpDef, get_op
from . import _cluster
from .collection import BlockInfo, DistributedArray, _as_container, from_blocks, row_block

SUM_FAN_IN = 8  # add_n inputs per task of the reduction tree: log8(blocks) levels


class NotPartitionableError(OperatorError, ValueError):
    """The operator declares no way to run over row blocks for these parameters and shapes."""


class PartitionMismatchError(OperatorError, ValueError):
    """Row-partitioned inputs of one operator call are cut into different row blocks."""


class OperatorMissingOnWorkerError(OperatorError):
    """A worker's operator table has no operator of that name (its plugin is not loaded there)."""


def apply(op: str, *args: Any, **params: Any) -> DistributedArray:
    """Run operator ``op`` (built-in or plugin) with ``params`` over the row blocks of its
    inputs and return the result as a ``DistributedArray`` (one block for a summed result).

    Inputs are ``DistributedArray`` objects or local arrays (containers, SciPy, NumPy).
    Inputs the op partitions must share one row partition (local ones are cut to match);
    the others are broadcast whole. Nothing runs until ``compute()`` or ``persist()``.
    """
    opdef = get_op(op)
    inst = opdef.instance(params)
    if opdef.mutate:
        raise NotPartitionableError(f"operator {op!r} updates its input(s) {', '.join(opdef.mutate)} in place; "
                                    f"sparse_ops.dask does not distribute in-place operators: run it on the client")
    if inst.visible_output_count() != 1:
        raise NotPartitionableError(f"operator {op!r} returns {inst.visible_output_count()} outputs; "
                                    f"sparse_ops.dask.apply runs single-output operators")
    if len(args) != len(opdef.arguments) and not opdef.variadic:
        raise OperatorError(f"operator {op!r} takes {len(opdef.arguments)} input(s) "
                            f"({', '.join(opdef.arguments)}), got {len(args)}")
    names = [opdef.arguments[min(i, len(opdef.arguments) - 1)] for i in range(len(args))]
    inputs = [a if isinstance(a, DistributedArray) else _as_container(a) for a in args]
    rule, cut = _declared(opdef, inst, names, inputs)
    ref = _reference(op, names, inputs, cut)
    local_pieces = {}  # local inputs cut into the distributed inputs' row blocks
    for i in cut:
        if not isinstance(inputs[i], DistributedArray):
            if inputs[i].ndim == 0 or inputs[i].shape[0] != ref.shape[0]:
                raise PartitionMismatchError(
                    f"operator {op!r}: input {names[i]!r} of shape {inputs[i].shape} is cut into the row blocks "
                    f"of the distributed input(s), which have {ref.shape[0]} rows; if every block needs it whole "
                    f"(a weight), the op must say so ({_how_to_declare(opdef, whole=names[i])})")
            splits = ref.row_splits
            local_pieces[i] = [row_block(inputs[i], a, b) for a, b in zip(splits[:-1], splits[1:])]
    whole_infos = {i: _whole_info(x) for i, x in enumerate(inputs) if i not in cut}
    infos = []
    for b in range(ref.nblocks):  # everything checked before anything is sent
        info = _infer_block(opdef, inst, [
            whole_infos[i] if i not in cut else
            BlockInfo.of(local_pieces[i][b]) if i in local_pieces else x.block_infos[b]
            for i, x in enumerate(inputs)])
        rows = ref.block_infos[b].shape[0]
        if rule == "rows" and (not info.shape or info.shape[0] != rows):
            raise OperatorError(
                f"operator {op!r} declares partition 'rows' but gives shape {info.shape} for a block of "
                f"{rows} rows; its declaration (Op.partition / Op.partitioning) is wrong")
        infos.append(info)
    for i, pieces in local_pieces.items():
        inputs[i] = from_blocks(pieces)
    whole = {i: _whole_value(inputs[i]) for i in whole_infos}
    hint = _origin_hint(opdef)
    token = tokenize(op, sorted(params.items(), key=lambda kv: kv[0]),
                     [[b.key for b in x.blocks] if i in cut else whole[i].key for i, x in enumerate(inputs)])
    parts = [_cluster.delayed_call(_run_block, op, params, hint,
                                   *[x.blocks[b] if i in cut else whole[i] for i, x in enumerate(inputs)],
                                   name=(f"{op}-{token}", b))
             for b in range(ref.nblocks)]
    if rule == "rows":
        return DistributedArray(parts, infos)
    return _summed(op, parts, infos, hint, token)


# ---- the declaration ------------------------------------------------------------------------------
def _how_to_declare(opdef: OpDef, whole: str | None = None) -> str:
    """How the op's author declares its split, in the terms of the language it is written
    in (a C library's declaration, or an Op class); with ``whole``, how to keep that input
    whole."""
    if getattr(opdef.cls, "c_library", None):
        if whole is not None:
            return (f"so_op_decl.partition_args, ABI 1.2, lists the indices of the inputs cut into row blocks, "
                    f"leaving out {whole!r}")
        return ("so_op_decl.partition = SO_PARTITION_ROWS or SO_PARTITION_SUM, and partition_args (ABI 1.2) for "
                "the inputs cut into row blocks")
    if whole is not None:
        return f"Op.partition_args names the inputs cut into row blocks, leaving out {whole!r}"
    return "Op.partition = 'rows' or 'sum', and Op.partition_args for the inputs cut into row blocks"


def _declared(opdef: OpDef, inst: Any, names: list[str], inputs: list) -> tuple[str, list[int]]:
    """(rule, positions of the inputs cut into row blocks), or NotPartitionableError."""
    try:
        rule, part_args = inst.partitioning(*[x.shape for x in inputs])
    except (TypeError, ValueError, IndexError) as exc:
        raise InferenceError(f"operator {opdef.name!r}: partitioning failed: {exc}") from None
    if rule is None:
        raise NotPartitionableError(
            f"operator {opdef.name!r} cannot run over row blocks: it declares no partition for these parameters "
            f"and input shapes (Op.partition is None). Compute its inputs (DistributedArray.compute()) and run it "
            f"on one machine, or declare how it splits ({_how_to_declare(opdef)}) if it does")
    if rule not in ("rows", "sum"):
        raise OperatorError(f"operator {opdef.name!r}: unknown partition rule {rule!r} "
                            f"(expected 'rows', 'sum' or None)")
    cut = [i for i, n in enumerate(names) if part_args is None or n in part_args]
    if not cut:
        raise NotPartitionableError(f"operator {opdef.name!r}: no input is cut into row blocks for these shapes")
    return rule, cut


def _reference(op: str, names: list[str], inputs: list, cut: list[int]) -> DistributedArray:
    """The distributed input whose row blocks the others must share."""
    dist = [i for i in cut if isinstance(inputs[i], DistributedArray)]
    if not dist:
        listed = ", ".join(repr(names[i]) for i in cut)
        raise NotPartitionableError(f"operator {op!r}: none of the inputs it cuts into row blocks ({listed}) is a "
                                    f"DistributedArray; make one with sparse_ops.dask.from_array")
    first = inputs[dist[0]]
    for i in dist:
        x = inputs[i]
        if x.ndim == 0:
            raise PartitionMismatchError(f"operator {op!r}: input {names[i]!r} is 0-d and has no rows to cut")
        if x.row_splits != first.row_splits:
            raise PartitionMismatchError(
                f"operator {op!r}: inputs {names[dist[0]]!r} and {names[i]!r} are cut into different row blocks "
                f"(row_splits {_short(first.row_splits)} and {_short(x.row_splits)}); rebuild one with "
                f"from_array(..., row_splits=other.row_splits) so that block i of each holds the same rows")
    return first


def _short(splits: tuple[int, ...]) -> str:
    return str(splits) if len(splits) <= 8 else f"({', '.join(map(str, splits[:4]))}, ..., {splits[-1]})"


def _whole_info(x: Any) -> BlockInfo:
    """Metadata of an input every block receives whole (blocks of mixed types stack dense)."""
    if isinstance(x, DistributedArray):
        kinds = set(x.stypes)
        return BlockInfo(x.shape, kinds.pop() if len(kinds) == 1 else "default", x.dtype)
    return BlockInfo.of(x)


def _whole_value(x: Any) -> Any:
    """The Dask value of an input every block receives whole: a local array is broadcast to
    every worker once; a distributed one is stacked by a task on the cluster."""
    return x.whole() if isinstance(x, DistributedArray) else _cluster.broadcast(x)


def _infer_block(opdef: OpDef, inst: Any, infos: list[BlockInfo]) -> BlockInfo:
    shape = infer_shapes(opdef, inst, [i.shape for i in infos])[0]
    dtype = infer_dtypes(opdef, inst, [i.dtype for i in infos])[0]
    stype = infer_stypes(opdef, inst, [i.stype for i in infos], [shape])[0]
    return BlockInfo(shape, stype, dtype)


# ---- summed results -------------------------------------------------------------------------------
def _summed(op: str, parts: list, infos: list[BlockInfo], hint: str, token: str) -> DistributedArray:
    """One block: the per-block results added in a tree of ``add_n`` tasks."""
    first = infos[0]
    for info in infos[1:]:
        if info.shape != first.shape:
            raise OperatorError(f"operator {op!r} declares partition 'sum' but its per-block results differ in "
                                f"shape ({first.shape} and {info.shape}); its declaration is wrong")
    add_n = get_op("add_n")
    stypes = [i.stype for i in infos]
    level = 0
    while len(parts) > 1:
        groups = [range(j, min(j + SUM_FAN_IN, len(parts))) for j in range(0, len(parts), SUM_FAN_IN)]
        parts = [parts[g[0]] if len(g) == 1 else
                 _cluster.delayed_call(_run_block, "add_n", {}, hint, *[parts[k] for k in g],
                                       name=(f"add_n-{op}-{token}-{level}", n))
                 for n, g in enumerate(groups)]
        stypes = [stypes[g[0]] if len(g) == 1 else
                  infer_stypes(add_n, add_n.instance({}), [stypes[k] for k in g], None)[0] for g in groups]
        level += 1
    return DistributedArray(parts, [BlockInfo(first.shape, stypes[0], first.dtype)])


# ---- on the workers ---------------------------------------------------------------------------------
def _run_block(op: str, params: dict, hint: str, *inputs: NDArray) -> NDArray:
    """Runs on a worker: operator ``op`` from this process's table on one block's inputs."""
    try:
        opdef = get_op(op)
    except OperatorError:
        raise OperatorMissingOnWorkerError(f"operator {op!r} is not registered on {_cluster.where()}: {hint}") from None
    return invoke(opdef, list(inputs), params)


def _origin_hint(opdef: OpDef) -> str:
    """Where the client got the operator from, and how the workers can get it."""
    from .. import plugins

    name = opdef.plugin
    if name is None:
        module = getattr(opdef.cls, "__module__", "?")
        if module.startswith("sparse_ops."):
            return "it is a built-in on the client: the worker runs another sparse_ops version"
        return (f"the client registered it from module {module!r} (a plain import or an interactive session); "
                f"make it a plugin the workers load: an installed distribution with a 'sparse_ops.plugins' entry "
                f"point, or a file shipped with sparse_ops.dask.ship_library(path)")
    record = plugins._LOADED.get(name)
    if record is not None and record.origin is not None:
        return (f"it comes from plugin {name!r}, which the client loaded with "
                f"sparse_ops.library.load({record.source!r}); ship it to the workers with sparse_ops.dask.ship_library({record.source!r})")
    source = record.source if record is not None else "an entry point"
    return (f"it comes from plugin {name!r} ({source}); install that distribution on every worker (its "
            f"'sparse_ops.plugins' entry point loads at import unless SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD=1)")
