"""One kernel body, two devices: ``row_kernel`` builds the cpu and gpu drivers of a
per-row (or per-value, per-element) body the author writes once as plain numba Python.

Write the body for one row ``r`` (any loop index: a row of a csr matrix, a stored value,
a row of a dense array) and decorate it::

    from sparse_ops.sdk.rowkernel import row_kernel

    @row_kernel
    def scale_rows(r, indptr, data, scale, out):
        for p in range(indptr[r], indptr[r + 1]):
            out[p] = data[p] * scale[r]

    scale_rows(ctx, n_rows, indptr, data, scale, out)   # ctx: the op context (or None: cpu)

and the SDK builds, on first use:

- the cpu drivers: a serial loop over the rows, and a ``numba.prange`` loop over tasks,
  blocks of rows (``task_rows``: at least ``ROWS_PER_TASK``, at most ``TASKS_PER_THREAD``
  tasks a thread, and fewer rows while that would leave a thread without a task, so a few
  heavy rows, such as ranges a caller cut one per thread, still run in parallel); the
  call runs the parallel one only when ``parallel_worth`` says the work (``work=``,
  default: the number of rows) pays for waking numba's threads (``PARALLEL_MIN_WORK``:
  the one parallel-size policy of the project);
- the gpu driver: a numba.cuda kernel with one thread per row, launched on the op
  context's stream (``sparse_ops.sdk.launch.launch``), CuPy arrays on a GPU and NumPy
  arrays under the simulator (``SPARSE_OPS_CUDA_SIM=1``).

``@row_kernel(lanes=True)`` is the warp-per-row form: the body takes ``(r, lane, lanes,
...)`` and strides its inner loop by ``lanes`` from ``lane`` (``for f in range(lane, k,
lanes)``). On the gpu a warp serves each row (``lanes`` = 32, reads of a row coalesced);
on the cpu the drivers pass ``lane = 0, lanes = 1``, so the loop is the plain one. Each
lane must write outputs no other lane writes (the lanes do not synchronise).

``@row_kernel(total="int64")`` (or another integer or float dtype) is the reducing form:
the body ends with ``return <number>``, its row's share, and the call returns the sum over
the rows (a count of invalid ids, a sum of squares): each cpu task sums its rows, the
parallel driver adds the tasks' sums; on the gpu each row adds its share atomically and the
call copies the total back to the host.

The body must be numba code that compiles for both targets: scalars and array indexing,
``math``, ``range``, calls to other such functions; no allocation (``np.empty``) and no
NumPy array functions (the CUDA target has none). Python float literals and scalars are
float64: ``acc = 0.0``, ``1.0 - beta``, or ``lr * g`` with ``lr`` a Python float make a
float32 kernel compute in float64, which most GPUs run at 1/32-1/64 of the float32 rate.
Write ``out.dtype.type(0.0)`` for a literal and pass scalars in the arrays' dtype (the
host wrapper's ``weight.dtype.type(lr)``); ``row_kernel(float64="why")`` declares a body
that means it. It writes into arrays the caller
allocated; rows must not write each other's outputs (the parallel and gpu drivers run
rows in any order).

The cpu drivers paste the body's statements into their row loop (so a short row pays no
call and no reference counting of the array arguments, and a ``total`` body's final
``return`` becomes an addition to the task's sum); a body that ``return``s early is called
instead, inlined by numba, which costs up to ~25% on rows of a few values.

Errors: the drivers' own names start with a prefix no name of the body starts with
(``driver_prefix``), so the body's locals cannot collide with them; a body numba cannot
compile is reported at the author's file, function and line (the body compiled alone for
the same argument types: ``RowKernel.locate``). ``sparse_ops.sdk.gpu_compile`` compiles the
gpu drivers for the real CUDA target without a GPU, with argument types recorded from runs
(``SPARSE_OPS_GPU_SIGNATURES``, ``record_launch``).

Compilation and caching: nothing compiles at import, and this module imports no numba
until a kernel first runs. Each driver is generated as Python source into a cache folder
(``driver_dir()``), named by the body's module, name and a hash of its source, and loaded
from that file; numba's on-disk cache (``cache=True``) then keeps the machine code in the
project's kernel cache folder (named by a hash of every kernel source, so an edit to a
module a driver inlines never runs stale code: ``sparse_ops._numba_env``), so a second
process loads the driver instead of compiling it (numba cannot cache a
function built by ``exec`` from a string; a closure over the body would hash a
per-process object into numba's cache key). The cpu drivers get the project's numba
settings (``sparse_ops.kernels.jit``: nogil, bounds checking under
``SPARSE_OPS_BOUNDSCHECK=1``, whose cache lives in a folder of its own).
"""
from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import inspect
import os
import sys
import textwrap
import threading
import types
from typing import Any, Callable

# Below this much work a kernel runs its serial cpu form: waking numba's worker threads
# costs ~50-100 us on a quiet machine and milliseconds on a loaded one. Work is counted in
# multiply-adds (products), values touched (gathers, softmax), or values times a per-value
# cost (``cost=`` of the kernel: the optimizers' sqrt and division count 4). One number for
# the whole project; measured on 2 threads, gathers from large tables pay from ~128k.
PARALLEL_MIN_WORK = 1 << 17
ROWS_PER_TASK = 64  # rows per task of the parallel cpu driver, at least (``task_rows``)
TASKS_PER_THREAD = 8  # tasks per thread of the parallel cpu driver, at most
CPU_INLINE = "always"  # numba's ``inline`` option for bodies in the cpu drivers


def parallel_worth(work: int) -> bool:
    """Whether a cpu kernel doing ``work`` units of work should run its parallel form:
    at least ``PARALLEL_MIN_WORK`` and more than one numba thread."""
    if work < PARALLEL_MIN_WORK:
        return False
    import numba

    return numba.get_num_threads() > 1


def task_rows(n: int) -> int:
    """Rows per task of the parallel cpu driver for ``n`` rows: ``ROWS_PER_TASK``, or more
    so that a thread's share is cut into at most ``TASKS_PER_THREAD`` tasks (each task's
    loop has a start-up cost, which tasks of a few cheap rows, such as a count over ids,
    do not repay), or fewer while that would leave one of numba's threads without a task (a
    few heavy rows, or ranges a caller cut one per thread)."""
    import numba

    threads = numba.get_num_threads()
    return max(1, min(-(-n // threads), max(ROWS_PER_TASK, -(-n // (threads * TASKS_PER_THREAD)))))


def driver_dir() -> str | None:
    """The folder generated drivers (and, beside them, numba's cache of their machine code)
    are written to: ``$NUMBA_CACHE_DIR/sparse_ops-rowkernels`` when numba's cache folder is
    set (the bounds-check mode sets its own), else ``$XDG_CACHE_HOME/sparse_ops/rowkernels``
    (``~/.cache/...``), else one under the temporary folder; None when none is writable."""
    from sparse_ops import _numba_env

    user = os.environ.get("NUMBA_CACHE_DIR")
    candidates = [os.path.join(user, "sparse_ops-rowkernels") if user else _numba_env.user_cache_dir("rowkernels")]
    return _numba_env.first_writable(candidates, "sparse_ops-rowkernels")


# Bodies by key, for the generated driver modules to find theirs (they import this module).
_BODIES: dict[str, "RowKernel"] = {}
_BUILD_LOCK = threading.Lock()

_TEMPLATE = '''\
"""Drivers of {where}, generated by sparse_ops.sdk.rowkernel (body source sha256 {sha}).

The drivers' own names start with {P!r}, a prefix no name of the body starts with."""
from sparse_ops.sdk.rowkernel import _BODIES as {P}bodies

{P}kernel = {P}bodies[{key!r}]
# the cpu drivers hold the body's statements (below), so they see the body's globals
globals().update({{k: v for k, v in {P}kernel.body.__globals__.items() if not k.startswith("__")}})

import numba as {P}numba  # noqa: E402
from sparse_ops.kernels import jit as {P}jit  # noqa: E402
from sparse_ops.kernels.assume import nonneg as {P}nonneg  # noqa: E402  (rows are 0 .. n-1: no wraparound)

{P}body = {P}kernel.cpu_body(inline={inline!r})  # for bodies that cannot be pasted in (they ``return``)
{total_type}

@{P}jit(cache={cache}, error_model="numpy")
def cpu_serial({P}start, {P}stop, {params}):
{serial_start}    for {P}i in range({P}start, {P}stop):
{row_code}
{serial_end}

@{P}jit(parallel=True, cache={cache}, error_model="numpy")
def cpu_parallel({P}n, {P}block, {params}):
{parallel_start}    for {P}t in {P}numba.prange(({P}n + {P}block - 1) // {P}block):
{task_start}        for {P}i in range({P}t * {P}block, min({P}n, ({P}t + 1) * {P}block)):
{row_code}
{task_end}{parallel_end}

def gpu():
    """The numba.cuda driver (built on first gpu use: importing numba.cuda is slow)."""
    # module globals, not closure cells: numba's CUDA simulator swaps the module's globals
    # that hold ``numba.cuda``, and a closure cell would put a per-process object into
    # numba's cache key
    global {P}cuda, {P}gpu_body
    from numba import cuda as {P}cuda

    {P}gpu_body = {P}cuda.jit(device=True)({P}kernel.body)

    @{P}cuda.jit(cache={cache})
    def gpu_rows({P}n, {gpu_total}{params}):
{gpu_index}
        if {P}i < {P}n:
            {gpu_row}

    return gpu_rows
'''

# the drivers' lines that a body with a ``total`` adds: a running sum per driver and per task
_TOTAL_LINES = {
    "total_type": "import numpy as {P}np  # noqa: E402\n{P}total_type = {P}numba.from_dtype({P}np.dtype({total!r}))\n",
    "serial_start": "    {P}part = {P}total_type(0)\n", "serial_end": "    return {P}part\n",
    "parallel_start": "    {P}total = {P}total_type(0)\n", "task_start": "        {P}part = {P}total_type(0)\n",
    "task_end": "        {P}total += {P}part\n", "parallel_end": "    return {P}total\n",
}

_THREAD_INDEX = "        {P}i = {P}cuda.grid(1)"
_WARP_INDEX = ("        {P}lane = {P}cuda.threadIdx.x % 32\n"
               "        {P}i = {P}cuda.blockIdx.x * ({P}cuda.blockDim.x // 32) + {P}cuda.threadIdx.x // 32")


def driver_prefix(body: Callable[..., Any]) -> str:
    """The prefix of the generated drivers' own names for ``body``: ``_rk_``, with more
    leading underscores while a name of the body (an argument, a local, a global or an
    attribute it uses) starts with it, so the pasted statements cannot rebind a driver's
    loop index or running sum (``_t``, ``_n``, ``_i``, ``_part`` in a body are fine)."""
    code = body.__code__
    names = set(code.co_varnames) | set(code.co_names) | set(code.co_freevars) | set(code.co_cellvars)
    prefix = "_rk_"
    while any(n.startswith(prefix) for n in names):
        prefix = "_" + prefix
    return prefix


class RowKernel:
    """A per-row body with its cpu and gpu drivers (see the module docstring).

    Call it as ``kernel(ctx, n, *args, work=None)``: runs the body for rows ``0 .. n-1``
    on the device of ``ctx``: an op context (a gpu one launches on its stream), a device,
    or None (the cpu). With a ``total`` dtype it returns the sum of what the rows return."""

    def __init__(self, body: Callable[..., Any], lanes: bool = False, cost: int = 1, parallel: bool = True,
                 total: Any = None, float64: str | None = None) -> None:
        self.body = body
        self.float64 = float64  # why the float32 variant computes in float64, where it does on purpose
        self.lanes = lanes
        self.cost = cost
        self.parallel = parallel
        self.total = None if total is None else _total_dtype(total, body)
        self.__name__ = body.__name__
        self.__qualname__ = body.__qualname__
        self.__module__ = body.__module__
        self.__doc__ = body.__doc__
        params = list(inspect.signature(body).parameters)
        skip = 3 if lanes else 1
        if len(params) <= skip - 1:
            raise TypeError(f"row kernel {body.__qualname__}: the body takes the row index first"
                            + (", then lane and lanes" if lanes else ""))
        self.params = params[skip:]
        self.prefix = driver_prefix(body)
        self._module: Any = None
        self._cpu_body: Any = None
        self._gpu: Any = None
        self._serial: Any = None  # the cpu drivers, once loaded (a call looks no further)
        self._parallel: Any = None

    @functools.cached_property
    def _identity(self) -> tuple[str, bool]:
        """(sha256 of the body's source, whether it has a source file and so can be cached
        on disk); read on first use, not at import (reading sources is slow)."""
        try:
            source = inspect.getsource(self.body).encode()
            cacheable = True
        except (OSError, TypeError):  # no source file (exec'd code): compiled, never cached on disk
            source = self.body.__code__.co_code + repr(self.body.__code__.co_consts).encode()
            cacheable = False
        return hashlib.sha256(source).hexdigest(), cacheable

    @property
    def sha(self) -> str:
        return self._identity[0]

    @property
    def cacheable(self) -> bool:
        return self._identity[1]

    @property
    def key(self) -> str:
        """The body's key in ``_BODIES``, where its generated driver module finds it."""
        return f"{self.body.__module__}.{self.body.__qualname__}:{self.sha[:16]}"

    def cpu_body(self, inline: str = CPU_INLINE) -> Any:
        """The body compiled for the cpu (a numba dispatcher the cpu drivers call);
        ``inline="always"`` inlines it into them at numba's IR level."""
        if self._cpu_body is None:
            import numba

            from sparse_ops import _numba_env
            from sparse_ops.settings import BOUNDSCHECK

            self._cpu_body = numba.njit(inline=inline, nogil=True, cache=self.cacheable and _numba_env.CACHE_OK,
                                        boundscheck=BOUNDSCHECK or None, error_model="numpy")(self.body)
        return self._cpu_body

    def drivers(self) -> Any:
        """The module of generated drivers (``cpu_serial``, ``cpu_parallel``, ``gpu()``),
        written to ``driver_dir()`` and imported on first use."""
        if self._module is None:
            with _BUILD_LOCK:
                if self._module is None:
                    module = self._load()
                    self._serial, self._parallel = module.cpu_serial, module.cpu_parallel
                    self._module = module
        return self._module

    def _row_code(self) -> str:
        """The cpu drivers' code for row ``_i``: the body's own statements, pasted in with
        its row (and ``lane = 0``, ``lanes = 1``) bound, when it has a source and no
        ``return`` (a ``total`` body: none but its last statement, which becomes an addition
        to the driver's running sum); else a call of the body, inlined by numba. Pasted
        code is faster for short rows: numba's call, even inlined, adds reference counting
        of every array argument per row (gcn fill: 1.25x the hand-written loop)."""
        P = self.prefix
        lane = "0, 1, " if self.lanes else ""
        call = f"{P}body({P}nonneg({P}i), {lane}{', '.join(self.params)})"
        if self.total is not None:
            call = f"{P}part += {P}total_type({call})"
        names = list(inspect.signature(self.body).parameters)
        try:
            fn = ast.parse(textwrap.dedent(inspect.getsource(self.body))).body[0]
        except (OSError, TypeError, SyntaxError, IndexError):
            return " " * 12 + call
        if not isinstance(fn, ast.FunctionDef):
            return " " * 12 + call
        stmts = fn.body
        if stmts and isinstance(stmts[0], ast.Expr) and isinstance(getattr(stmts[0], "value", None), ast.Constant):
            stmts = stmts[1:]  # the docstring
        last = None
        if self.total is not None:
            if not stmts or not isinstance(stmts[-1], ast.Return) or stmts[-1].value is None:
                return " " * 12 + call
            stmts, last = stmts[:-1], stmts[-1].value
        inner = [n for stmt in stmts for n in ast.walk(stmt)]
        if any(isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom, ast.FunctionDef, ast.Lambda, ast.Global,
                              ast.Nonlocal)) for n in inner):
            return " " * 12 + call
        bind = [f"{names[0]} = {P}nonneg({P}i)"] + ([f"{names[1]} = 0", f"{names[2]} = 1"] if self.lanes else [])
        lines = bind + [ast.unparse(stmt) for stmt in stmts]
        if last is not None:
            lines.append(f"{P}part += {P}total_type({ast.unparse(last)})")
        return textwrap.indent("\n".join(lines), " " * 12)

    def _source_text(self, cache: bool = True) -> str:
        P = self.prefix
        gpu_call = f"{P}gpu_body({P}i, {P + 'lane, 32, ' if self.lanes else ''}{', '.join(self.params)})"
        if self.total is None:
            total = dict.fromkeys(_TOTAL_LINES, "")
            gpu_total, gpu_row = "", gpu_call
        else:
            total = {k: v.format(total=self.total.name, P=P) for k, v in _TOTAL_LINES.items()}
            gpu_total, gpu_row = f"{P}total, ", f"{P}cuda.atomic.add({P}total, 0, {P}total_type({gpu_call}))"
        return _TEMPLATE.format(row_code=self._row_code(), P=P,
            where=f"{self.body.__module__}.{self.body.__qualname__}", sha=self.sha, key=self.key,
            params=", ".join(self.params), cache=cache, inline=CPU_INLINE,
            gpu_index=(_WARP_INDEX if self.lanes else _THREAD_INDEX).format(P=P), gpu_total=gpu_total,
            gpu_row=gpu_row, **total)

    def _load(self) -> Any:
        _BODIES[self.key] = self
        folder = driver_dir() if self.cacheable else None
        text = self._source_text(cache=folder is not None)
        text_sha = hashlib.sha256(text.encode()).hexdigest()[:16]  # the body and this SDK's template
        module_name = f"sparse_ops_rowkernel_{str(self.body.__module__).replace('.', '_')}_{self.__name__}_{text_sha}"
        if folder is None:  # nowhere to write: compile from the text, without a disk cache
            namespace: dict[str, Any] = {"__name__": module_name}
            exec(compile(text, f"<{module_name}>", "exec"), namespace)
            return types.SimpleNamespace(**namespace)
        path = os.path.join(folder, module_name + ".py")
        if not _same_text(path, text):  # rewrite only on change: numba's cache checks the file's time
            tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, path)
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # numba finds a function's module there (caching needs it)
        spec.loader.exec_module(module)
        return module

    def gpu_driver(self) -> Any:
        """The numba.cuda kernel of this body (thread or warp per row)."""
        if self._gpu is None:
            self._gpu = self.drivers().gpu()
        return self._gpu

    def run_cpu(self, n: int, *args: Any, work: int | None = None) -> Any:
        """Run the body for rows ``0 .. n-1`` on the cpu: parallel when the work pays and
        there is more than one row. Returns the rows' total (None without ``total``)."""
        return self(None, n, *args, work=work)

    def run_gpu(self, ctx: Any, n: int, *args: Any) -> Any:
        """Launch the gpu driver for rows ``0 .. n-1`` on ``ctx``'s stream. Returns the
        rows' total (None without ``total``): a copy to the host, which waits for the kernel."""
        total = None if self.total is None else ctx.xp.zeros(1, dtype=self.total)
        if n > 0:
            from .launch import rows_grid, launch, warp_per_row

            if _SIGNATURE_LOG:
                record_launch(self, args, getattr(getattr(ctx, "op", None), "name", None))
            config = warp_per_row(n) if self.lanes else rows_grid(n)
            try:
                launch(ctx, self.gpu_driver(), config, n, *(args if total is None else (total, *args)))
            except Exception as exc:
                located = self.locate(exc, args, "gpu")
                if located is None:
                    raise
                raise located from None
        if total is None:
            return None
        stream = getattr(ctx, "stream", None)
        return (total.get(stream=stream) if stream is not None else _to_host(total))[0].item()

    def __call__(self, ctx: Any, n: int, *args: Any, work: int | None = None) -> Any:
        # the cpu path in one frame: a small batch (an embedding lookup of a few hundred
        # ids) takes about as long as a Python call or two
        if ctx is not None and is_gpu(ctx):
            return self.run_gpu(ctx, int(n), *args)
        serial = self._serial
        if serial is None:
            self.drivers()
            serial = self._serial
        try:
            if n > 1 and self.parallel:
                units = self.cost * (n if work is None else work)
                if units >= PARALLEL_MIN_WORK and parallel_worth(units):
                    return self._parallel(n, task_rows(n), *args)
            return serial(0, n, *args)
        except Exception as exc:
            located = self.locate(exc, args, "cpu")
            if located is None:
                raise
            raise located from None

    # ---- compile errors at the author's line, and the real CUDA target ------------------------
    def body_signature(self, argtypes: tuple) -> tuple:
        """The numba signature of the body for driver arguments of numba types ``argtypes``:
        the row (and lane, lanes) as int64, then the arguments."""
        import numba

        return (numba.int64,) * (3 if self.lanes else 1) + tuple(argtypes)

    def locate(self, exc: BaseException, args: tuple, device: str) -> BaseException | None:
        """``exc`` said at the author's file, function and line when it is numba's failure to
        compile a driver, else None (a kernel's own error: raised as it is).

        The drivers are generated code, so numba's message would name their file: the body
        is compiled alone for the same argument types (for ``device``: the cpu, or the CUDA
        target), and its error, which numba reports at the body's own lines, is raised."""
        from numba.core.errors import NumbaError

        if not isinstance(exc, NumbaError) or getattr(exc, "_sparse_ops_located", False):
            return None
        import numba

        try:
            argtypes = tuple(numba.typeof(a) for a in args)
        except ValueError:
            return None
        try:
            self.compile_body(argtypes, device)
        except NumbaError as own:
            return self.located_error(own)
        return self.driver_error(exc, device)

    def driver_error(self, exc: BaseException, device: str) -> BaseException:
        """numba's error ``exc`` from a generated driver whose body compiles alone."""
        code = self.body.__code__
        return _relabel(exc, f"row kernel {self.__qualname__} ({code.co_filename}:{code.co_firstlineno}): the "
                             f"body compiles alone, but its {device} driver generated by sparse_ops.sdk.rowkernel "
                             f"does not: {exc}")

    def compile_body(self, argtypes: tuple, device: str = "cpu", cc: tuple[int, int] | None = None) -> Any:
        """Compile the body alone for ``device`` (``"cpu"``, or ``"gpu"``: PTX for compute
        capability ``cc``, numba-cuda's default when None) with driver argument types
        ``argtypes``; numba's errors name the author's file and line."""
        import numba

        sig = self.body_signature(argtypes)
        if device == "cpu":
            return numba.njit(self.body).compile(sig)
        from numba import cuda

        return cuda.compile_ptx(self.body, sig, device=True, cc=cc)

    def located_error(self, own: BaseException) -> BaseException:
        """numba's error ``own`` from compiling the body alone, opened with the kernel's name
        and the author's file and line."""
        file, line = _author_line(own, self.body.__code__)
        return _relabel(own, f"row kernel {self.__qualname__} ({file}:{line}): {own}")

    def __repr__(self) -> str:
        return f"<row_kernel {self.__module__}.{self.__qualname__}{' (lanes)' if self.lanes else ''}>"


def _author_line(exc: BaseException, code: Any) -> tuple[str, int]:
    """(file, line) of the statement numba failed to compile in a body whose code object is
    ``code``: the innermost location numba's typing frames held outside numba itself (some
    numba-cuda errors carry none in their message), else the ``File "...", line N`` the
    message shows for the body's file, else the error's own location, else the body's
    first line."""
    import numba

    numba_dirs = tuple(os.path.dirname(m.__file__) + os.sep for m in
                       (numba, sys.modules.get("numba_cuda")) if m is not None and getattr(m, "__file__", None))
    found = None
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        tb = e.__traceback__
        while tb is not None:
            f_locals = tb.tb_frame.f_locals
            for loc in (f_locals.get("loc"), getattr(f_locals.get("self"), "loc", None)):
                filename = getattr(loc, "filename", None)
                if isinstance(filename, str) and isinstance(getattr(loc, "line", None), int) \
                        and not os.path.abspath(filename).startswith(numba_dirs):
                    found = (filename, loc.line)
            tb = tb.tb_next
        e = e.__cause__ or e.__context__
    if found is not None:
        return found
    import re

    base = os.path.basename(code.co_filename)
    shown = re.findall(r'File "([^"]+)", line (\d+)', str(exc))
    for name, line in reversed(shown):
        if os.path.basename(name) == base:
            return code.co_filename, int(line)
    loc = getattr(exc, "loc", None)
    if loc is not None and getattr(loc, "line", None):
        return loc.filename, loc.line
    return code.co_filename, code.co_firstlineno


def _relabel(exc: BaseException, message: str) -> BaseException:
    """An error of ``exc``'s numba class carrying ``message`` (marked, so that it is not
    located twice)."""
    from numba.core.errors import NumbaError

    try:
        new = type(exc)(message)
    except TypeError:
        new = NumbaError(message)
    new._sparse_ops_located = True
    return new


# SPARSE_OPS_GPU_SIGNATURES=<file>: each gpu launch of a row kernel appends the kernel and its
# argument types to the file (once per process and signature), for sparse_ops.sdk.gpu_compile
# to compile them for the real CUDA target later (CI records them in the simulator).
_SIGNATURE_LOG = os.environ.get("SPARSE_OPS_GPU_SIGNATURES", "")
_recorded: set = set()


def argument_type(value: Any) -> list:
    """A JSON-able description of a kernel argument's type as a GPU would see it: arrays
    as ``["array", dtype, ndim, layout]`` (device arrays are never read-only), scalars as
    ``["scalar", dtype]``."""
    import numpy as np

    if hasattr(value, "__cuda_array_interface__") or isinstance(value, np.ndarray):  # NumPy or CuPy
        flags = value.flags
        layout = "C" if flags.c_contiguous else ("F" if flags.f_contiguous else "A")
        return ["array", str(value.dtype), value.ndim, layout]
    if isinstance(value, bool):
        return ["scalar", "bool"]
    if isinstance(value, int):
        return ["scalar", "int64"]
    if isinstance(value, float):
        return ["scalar", "float64"]
    if isinstance(value, np.generic):
        return ["scalar", str(value.dtype)]
    raise TypeError(f"cannot describe a kernel argument of type {type(value).__name__}")


def record_launch(kernel: RowKernel, args: tuple, op: str | None = None) -> None:
    """Append ``kernel``, its arguments' types and the operator that launched it (when a
    kernel method did) to ``$SPARSE_OPS_GPU_SIGNATURES`` (see ``sparse_ops.sdk.gpu_compile``),
    once per process and signature."""
    import json

    try:
        types_ = [argument_type(a) for a in args]
    except TypeError as exc:
        types_ = [["unknown", str(exc)]]
    line = json.dumps({"module": kernel.body.__module__, "qualname": kernel.body.__qualname__,
                       "file": kernel.body.__code__.co_filename, "args": types_, "op": op}, sort_keys=True)
    if line in _recorded:
        return
    _recorded.add(line)
    with open(_SIGNATURE_LOG, "a") as f:  # one short line per write: appends do not interleave
        f.write(line + "\n")


def _same_text(path: str, text: str) -> bool:
    try:
        with open(path) as f:
            return f.read() == text
    except OSError:
        return False


def row_kernel(body: Callable[..., Any] | None = None, *, lanes: bool = False, cost: int = 1,
               parallel: bool = True, total: Any = None, float64: str | None = None) -> Any:
    """Decorator: the per-row ``body`` as a ``RowKernel`` running on cpu and gpu (see the
    module docstring). ``lanes=True``: the warp-per-row form, body ``(r, lane, lanes, ...)``.
    ``cost``: work units per unit of ``work=`` (for the parallel-size policy).
    ``parallel=False``: the cpu always runs the serial form, for light memory-bound passes
    that more cpu threads do not speed up (gathers, one-off structure passes).
    ``total``: a NumPy integer or float dtype; the body ends with ``return <number>`` (its
    row's share) and the call returns the sum over the rows in that dtype (a count of bad
    rows, a norm).
    ``float64``: why the body computes in float64 on float32 data, where it does so on
    purpose (an accumulation that needs the precision); ``sparse_ops.sdk.gpu_compile``
    refuses a float32 variant holding float64 arithmetic unless the kernel says why."""
    def build(f: Callable[..., Any]) -> RowKernel:
        return RowKernel(f, lanes=lanes, cost=cost, parallel=parallel, total=total, float64=float64)

    return build if body is None else build(body)


def _total_dtype(total: Any, body: Callable[..., Any]) -> Any:
    import numpy as np

    dtype = np.dtype(total)
    if dtype.kind not in "iuf":
        raise TypeError(f"row kernel {body.__qualname__}: total= takes an integer or float dtype, got {dtype}")
    return dtype


def _to_host(a: Any) -> Any:
    from sparse_ops.device import to_host

    return to_host(a)


def is_gpu(ctx: Any) -> bool:
    """Whether ``ctx`` (an op context, a device, or None for the cpu) is on a gpu."""
    device = getattr(ctx, "device", ctx)
    return device is not None and device.device_type == "gpu"


__all__ = ["row_kernel", "RowKernel", "parallel_worth", "task_rows", "is_gpu", "PARALLEL_MIN_WORK", "ROWS_PER_TASK",
           "TASKS_PER_THREAD", "driver_dir"]
