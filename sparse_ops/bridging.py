"""What the PyTorch and JAX bridges share: how an array splits into component arrays, the
names of a call's inputs, a gradient laid out on its input's components, and the call of
an op's gradient rule from a framework's autograd.

Both bridges hand each op component arrays (a dense array is one part; a csr array its
values, column indices and row pointer; a row_sparse array its values and row indices) and
receive gradients the same way: dense for a dense input, one value per stored value for a
sparse input (the gradient keeps its input's structure, as the framework's own sparse
gradients do).
"""
from __future__ import annotations

from typing import Any, Sequence

from .errors import OperatorError
from .gradients import call_gradient
from .ndarray import NDArray
from .registry import Op, OpDef
from .tape import _scope

PARTS = {"default": 1, "csr": 3, "row_sparse": 2}  # component arrays per storage type


def arg_names(opdef: OpDef, n: int) -> list[str]:
    """The names of a call's ``n`` inputs, as errors name them: a fixed-arity op's argument
    names; a variadic op's ``<first>0, <first>1, ...`` (its leading fixed names where it has
    several and ``n`` does not exceed them)."""
    fixed = list(opdef.arguments)
    if not opdef.variadic:
        return fixed[:n] + [f"input {i}" for i in range(len(fixed), n)]
    if len(fixed) > 1 and n <= len(fixed):
        return fixed[:n]
    return [f"{fixed[0]}{i}" for i in range(n)]


def aligned(g: NDArray | None, x: NDArray) -> Any:
    """Gradient ``g`` of input ``x`` as an array laid out like ``x``'s values component:
    dense for a dense ``x`` (row_sparse and csr gradients densified); for a sparse ``x`` the
    gradient of each stored value (``g``'s own values when it has ``x``'s structure, else
    gathered at ``x``'s structure)."""
    if g is None:
        return None
    xp = x.device.xp
    if x.stype == "default":
        return (g if g.stype == "default" else g.tostype("default"))._data
    if g.stype == x.stype:
        if all(a is b or (a.shape == b.shape and bool((a == b).all())) for a, b in zip(g._aux(), x._aux())):
            return g._data
    dense = (g if g.stype == "default" else g.tostype("default"))._data
    if x.stype == "row_sparse":
        return dense[x._indices]
    rows = xp.repeat(xp.arange(x.shape[0]), xp.diff(x._indptr))
    return dense[rows, x._indices]


def framework_gradient(op: Op, out_grads: Sequence[NDArray], inputs: Sequence[NDArray],
                       outputs: Sequence[NDArray], needs: Sequence[bool], *, face: str, prefix: str,
                       error: type[OperatorError], record: bool = False) -> list:
    """The op's gradient rule called from a framework's autograd (``call_gradient``), only for
    ``needs`` (``None`` elsewhere). With ``record`` our tape records it, so a framework's
    second-order request differentiates the rule with our engine; a rule that cannot be
    differentiated then says so."""
    with _scope(record, None):
        try:
            grads = call_gradient(op, out_grads, inputs, outputs, needs, face=face, prefix=prefix, error=error)
        except error:
            raise
        except OperatorError as exc:
            if record:
                raise error(f"{prefix}{op._opdef.label}: its gradient rule cannot be differentiated, so a "
                            f"second-order gradient is not available here: {exc}") from exc
            raise
    return [g if n else None for g, n in zip(grads, needs)]
