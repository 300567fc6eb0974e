"""The ``sparse-ops`` command line: the operator table, plugins, the plugin templates, the C
header's folder, warm-up of numba's cache, demo, benchmarks and version. Exit codes: 0 success, 1 failure, 2 usage error."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _ops_module() -> Any:
    import sparse_ops

    return sparse_ops


# ---- list / info -------------------------------------------------------------------------------------
def _devices(opdef: Any) -> list[str]:
    devs = set(opdef.fcompute) | {dev for dev, _ in opdef.fcompute_ex}
    return [d for d in ("cpu", "gpu") if d in devs]


def _storage_variants(opdef: Any) -> list[str]:
    """The input storage types the op has kernels for: 'dense' for the dense kernel, then
    each storage-aware kernel's signature."""
    variants = ["dense"] if opdef.fcompute else []
    variants += sorted({",".join(st) for _, st in opdef.fcompute_ex})
    return variants


def _cmd_list(args: argparse.Namespace) -> int:
    so = _ops_module()
    rows = []
    for name in so.list_ops():
        opdef = so.get_op(name)
        plugin = opdef.plugin or "built-in"
        if args.plugin and plugin != args.plugin:
            continue
        rows.append((name, plugin, ",".join(_devices(opdef)) or "-", " ".join(_storage_variants(opdef)) or "-"))
    if not rows:
        print(f"no operators{' from plugin ' + args.plugin if args.plugin else ''}")
        return 1 if args.plugin else 0
    header = ("operator", "plugin", "devices", "kernels for input storage")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(3)]
    for r in [header] + rows:
        print(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}")
    print(f"\n{len(rows)} operators")
    return 0


def _storage_rules(opdef: Any) -> list[str]:
    """One line per input-storage signature with a kernel: the output storage types the
    op's rule infers and the dispatch mode the dispatcher picks (``describe.storage_rules``)."""
    from .describe import storage_rules

    return storage_rules(opdef).lines()


def _capacity_rules(opdef: Any) -> list[str]:
    """One line per output (and input updated in place): its capacity rule's text, what
    bounds its stored entries when it is sparse (``Op.capacity``); or one line saying the op
    declares none, so a sparse output under ``jax.jit`` needs ``max_nnz=``."""
    from .sdk import capacity as cap

    if not opdef.capacity:
        return [f"{cap.NO_RULE} (the op declares no capacity rule)"]
    slots = list(opdef.outputs) + list(opdef.mutate)
    return [f"{slot}: {text}" for slot, text in cap.describe(opdef.capacity, slots).items()]


def _cmd_info(args: argparse.Namespace) -> int:
    import difflib
    import inspect

    so = _ops_module()
    from .dispatch import op_function

    if args.op not in so.list_ops():
        close = difflib.get_close_matches(args.op, so.list_ops(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see `sparse-ops list`"
        print(f"sparse-ops: no operator named {args.op!r}{hint}", file=sys.stderr)
        return 1
    opdef = so.get_op(args.op)
    fn = op_function(args.op)
    print(f"{args.op}{inspect.signature(fn)}")
    print(f"plugin: {opdef.plugin or 'built-in'}")
    print(f"inputs: {', '.join(opdef.arguments)}{' (any number)' if opdef.variadic else ''}; "
          f"outputs: {', '.join(opdef.outputs[:opdef.num_visible_outputs])}"
          + (f" (hidden: {', '.join(opdef.outputs[opdef.num_visible_outputs:])})"
             if len(opdef.outputs) > opdef.num_visible_outputs else ""))
    if opdef.mutate:
        print(f"updates in place: {', '.join(opdef.mutate)}")
    if opdef.resources:
        print(f"resources: {', '.join(opdef.resources)}")
    print("parameters:" + ("" if opdef.params else " none"))
    for p in opdef.params.values():
        print(f"  {p.describe()}" + (f" (one of {', '.join(map(repr, p.choices))})" if p.choices else ""))
    print("storage rules (input storage -> output storage [dispatch mode]):")
    for line in _storage_rules(opdef):
        print(f"  {line}")
    print("capacity of sparse outputs (stored entries jax.jit reserves):")
    for line in _capacity_rules(opdef):
        print(f"  {line}")
    print("kernels:")
    for dev in sorted(opdef.fcompute):
        print(f"  {dev}  dense (fcompute) -> {opdef.fcompute[dev].__name__}")
    for (dev, st), kfn in sorted(opdef.fcompute_ex.items()):
        print(f"  {dev}  {','.join(st)} (fcompute_ex) -> {kfn.__name__}")
    if not opdef.fcompute and not opdef.fcompute_ex:
        print("  (none: the op runs its own code)")
    print(f"gradient: {'yes' if opdef.differentiable else 'no'}")
    samples = getattr(opdef.cls, "samples", None)
    source = "so_sample" if hasattr(opdef.cls, "_c_spec") else "samples()"
    print(f"sample inputs: {f'yes ({source})' if callable(samples) else 'none'}")
    if opdef.doc:
        print("\n" + opdef.doc)
    return 0


# ---- plugins ----------------------------------------------------------------------------------------
def _cmd_plugins(args: argparse.Namespace) -> int:
    so = _ops_module()
    from .plugins import ENTRY_POINT_GROUP, autoload_disabled, failure_details, installed_plugins

    info = so.plugins_info()
    installed = installed_plugins()
    if autoload_disabled():
        print("note: SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD is set, so installed plugins were not loaded")
    print(f"loaded ({len(info['loaded'])}):")
    for name, rec in info["loaded"].items():
        extra = f", SDK {rec['sdk']}" if rec["sdk"] else ""
        print(f"  {name} {rec['version'] or '(no version)'}{extra} — {rec['source']}")
        print(f"    ops: {', '.join(rec['ops']) or '(none)'}")
    print(f"failed ({len(info['failed'])}):")
    for name, rec in info["failed"].items():
        print(f"  {name} — {rec['reason']}")
        details = failure_details(name) if args.verbose else None
        if details:
            print("    " + details.rstrip().replace("\n", "\n    "))
    idle = [n for n in installed if n not in info["loaded"] and n not in info["failed"]]
    if idle:
        print(f"installed, not loaded: {', '.join(idle)}")
    if not installed and not info["loaded"] and not info["failed"]:
        print(f"(no plugins installed under the entry-point group {ENTRY_POINT_GROUP!r})")
    return 1 if info["failed"] else 0


def _looks_like_path(target: str) -> bool:
    """Whether a ``check`` argument is written as a path: ``./x``, ``../x``, ``/abs/x``,
    ``~/x``, ``dir/x`` or ``x.py``. A bare word (``myops``) is a plugin name, even when a
    folder of that name is in the current folder."""
    seps = tuple(s for s in (os.sep, os.altsep) if s)
    return target.endswith(".py") or target.startswith(("~", ".")) or any(s in target for s in seps)


def _ensure_plugin(target: str | None, path: str | None = None) -> tuple[str | None, str]:
    """Load what ``sparse-ops check`` names, if needed; returns (plugin name or None, message).

    ``target`` is a plugin name (loaded, or installed under the entry-point group) unless it
    is written as a path (see ``_looks_like_path``); ``path`` (``--path``) is always a path,
    a .py file, a package folder or a project folder."""
    import warnings

    so = _ops_module()
    from .plugins import PluginError

    if path is None and _looks_like_path(target):
        path = target
    if path is not None:
        try:
            module = so.library.load(os.path.expanduser(path))
        except PluginError as exc:
            return None, str(exc)
        # the plugin's name: a .py file's module name, or for a C library (whose module is
        # sparse_ops.clib.libraries.<name>) the name its record holds
        from .plugins import _LOADED

        return next((r.name for r in list(_LOADED.values()) if r.module is module), module.__name__), ""
    if target in so.plugins_info()["loaded"]:
        return target, ""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = so.load_plugins([target])  # an installed plugin that is not loaded yet
    if target in info["loaded"]:
        return target, ""
    what = "folder" if os.path.isdir(target) else "file"
    hint = (f"; to check the {what} {target!r}, write it as a path: `sparse-ops check ./{target}` "
            f"or `sparse-ops check --path {target}`") if os.path.exists(target) else ""
    return None, f"plugin {target!r} is not loaded: {info['failed'].get(target, {}).get('reason')}{hint}"


# `sparse-ops check built-in` (or `sparse_ops`) checks our own operators, as `list --plugin built-in` lists them
BUILTIN_NAMES = ("built-in", "sparse_ops")


def _cmd_check_gpu_compile(args: argparse.Namespace, argv: list[str]) -> int:
    """``check --gpu-compile``: the checks again in a child process whose gpu is simulated,
    recording every gpu kernel launch, then each recorded kernel compiled to PTX here."""
    import subprocess
    import tempfile

    from .sdk import gpu_compile

    try:
        cc = gpu_compile.parse_cc(args.cc)
        gpu_compile.require_cuda_compiler()
    except (ValueError, gpu_compile.GpuCompileError) as exc:
        print(f"sparse-ops check --gpu-compile: {exc}", file=sys.stderr)
        return 1
    child_argv = [a for a in argv if a != "--gpu-compile"]
    with tempfile.TemporaryDirectory() as tmp:
        records = os.path.join(tmp, "gpu-signatures.jsonl")
        env = dict(os.environ, SPARSE_OPS_CUDA_SIM="1", SPARSE_OPS_GPU_SIGNATURES=records)
        checked = subprocess.call([sys.executable, "-m", "sparse_ops", *child_argv], env=env)
        if not os.path.exists(records):
            print("gpu-compile: no numba gpu kernel ran (the operators have no gpu kernels built with "
                  "sparse_ops.sdk.rowkernel, or their checks failed first; a C or CUDA library's gpu kernels "
                  "were compiled by nvcc when it was built)")
            return 1 if checked else 0
        report = gpu_compile.compile_recorded(records, cc, log=print)
    print(report.summary(cc))
    return 1 if checked or not report.ok else 0


def _bounds_unchecked(args: argparse.Namespace) -> bool:
    """Whether ``check`` of a plugin (not the built-ins) is about to run without the
    bounds-checking debug mode that the user did not turn off."""
    from .settings import BOUNDSCHECK

    builtin = args.plugin in BUILTIN_NAMES and args.path is None
    return not (BOUNDSCHECK or builtin or args.no_boundscheck)


def _cmd_check_bounds_checked() -> int:
    """The command line's ``check`` again in a child process with ``SPARSE_OPS_BOUNDSCHECK=1``
    (read at import: numba compiles every kernel bounds-checked, in a cache of its own, and
    kernels' outputs start out marked): an out-of-bounds access fails the op's check by name."""
    env = dict(os.environ, SPARSE_OPS_BOUNDSCHECK="1")
    return subprocess.call([sys.executable, "-m", "sparse_ops", *sys.argv[1:]], env=env)


def _cmd_check(args: argparse.Namespace) -> int:
    so = _ops_module()
    from .plugins import plugin_ops
    from .registry import all_ops

    if args.plugin in BUILTIN_NAMES and args.path is None:
        name = "built-in"
        ops = sorted(opdef.name for opdef in all_ops() if opdef.plugin is None)
    else:
        name, message = _ensure_plugin(args.plugin, args.path)
        if name is None:
            print(f"sparse-ops check: {message}", file=sys.stderr)
            return 1
        ops = plugin_ops(name)
    if args.op:
        missing = [o for o in args.op if o not in ops]
        if missing:
            print(f"sparse-ops check: plugin {name!r} has no operator {', '.join(missing)}", file=sys.stderr)
            return 1
        ops = [o for o in ops if o in args.op]
    if not ops:
        print(f"sparse-ops check: plugin {name!r} registers no operators", file=sys.stderr)
        return 1
    gpu = "simulated" if so.cuda.is_simulator() else ("yes" if so.cuda.is_available() else "no")
    what = "the built-in operators" if name == "built-in" else f"plugin {name}"
    print(f"checking {what} ({len(ops)} operators; gpu: {gpu})")
    return _check_ops(so, ops)


def _check_ops(so: Any, ops: list[str]) -> int:
    """Run opcheck over each op's samples(), one line per op (what it compared, or why it
    failed), then a summary line; 0 when every op was checked and passed. An op without
    samples(), or whose samples() raises (reported with its traceback, apart from kernel
    failures), fails too: every op that ships carries samples."""
    import traceback

    from .sdk.testing import opcheck

    failed, without, broken, samples_run = [], [], [], 0
    for op in ops:
        cls = so.get_op(op).cls
        make = getattr(cls, "samples", None)
        if not callable(make):
            without.append(op)
            missing = ("its so_op_decl declares no samples (n_samples, samples: so_sample)" if hasattr(cls, "_c_spec")
                       else "no samples() classmethod")
            print(f"  FAIL {op}: {missing}, so nothing was checked")
            continue
        try:
            samples = list(make())
        except Exception as exc:  # the op's own samples(): not a kernel failure
            broken.append(op)
            print(f"  FAIL {op}: samples() raised {type(exc).__name__}: {exc} (no kernel ran)")
            print("    " + "".join(traceback.format_exception(exc)).rstrip().replace("\n", "\n    "))
            continue
        samples_run += len(samples)
        try:
            report = opcheck(op, samples)
        except Exception as exc:  # AssertionError from opcheck, or an error in the op
            failed.append(op)
            print(f"  FAIL {op}: {type(exc).__name__}: {exc}")
            continue
        print(f"  ok   {op}: {report.summary()}")
    checked = len(ops) - len(without) - len(broken)
    from .settings import BOUNDSCHECK

    print("kernels bounds-checked (SPARSE_OPS_BOUNDSCHECK=1)" if BOUNDSCHECK else
          "kernels not bounds-checked (SPARSE_OPS_BOUNDSCHECK=1 checks them)")
    line = (f"{checked} operators checked ({samples_run} samples), {len(broken)} whose samples() raised, "
            f"{len(failed)} failed, {len(without)} without samples")
    if without or broken:
        line += " (a failure: every operator that ships carries samples that build)"
    print(line)
    return 1 if failed or without or broken or checked == 0 else 0


def _cmd_new_plugin(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .sdk.scaffold import ScaffoldError, create, next_step, validate_name

    try:
        validate_name(args.name)
    except ValueError as exc:
        parser.error(str(exc))  # exits with 2
    try:
        root = create(args.name, args.dir, lang=args.lang)
    except ScaffoldError as exc:
        print(f"sparse-ops new-plugin: {exc}", file=sys.stderr)
        return 1
    print(f"created plugin {args.name} ({args.lang}) in {root}:")
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        print(f"  {f.relative_to(root)}")
    print(f"\nnext: {next_step(args.name, root, args.lang)}")
    return 0


def _cmd_include_dir(args: argparse.Namespace) -> int:
    """The folder holding sparse_ops.h, for build systems: cc -I"$(sparse-ops include-dir)"."""
    from .sdk import include_dir

    print(include_dir())
    return 0


# ---- demo / bench / version ---------------------------------------------------------------------------
def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _cmd_demo(args: argparse.Namespace) -> int:
    """The cookbook's demo (``sparse_ops_cookbook.demo``), or the container tour."""
    import importlib.util

    tour_sizes = (args.rows, args.cols, args.per_row)
    if args.tour or any(v is not None for v in tour_sizes):
        from .demo import run as tour

        rows, cols, per_row = (d if v is None else v for v, d in zip(tour_sizes, (2000, 500, 8)))
        tour(rows=rows, cols=cols, per_row=per_row, seed=args.seed)
        return 0
    if importlib.util.find_spec("sparse_ops_cookbook") is None:
        print("sparse-ops demo trains models with the cookbook's operators, and the cookbook plugin is not "
              "installed: run `pip install -e ./cookbook` in a source checkout of sparse-ops (or "
              "`sparse-ops demo --tour` for the container tour, which needs no plugin)", file=sys.stderr)
        return 1
    if args.torch:
        if importlib.util.find_spec("torch") is None:
            print("sparse-ops demo --torch trains the cookbook's models in PyTorch through sparse_ops.torch, and "
                  "PyTorch is not installed: pip install 'sparse-ops[torch]'", file=sys.stderr)
            return 1
        from sparse_ops_cookbook.demo.torch_demo import run as torch_demo

        return 0 if torch_demo(quick=args.quick, seed=args.seed, graph=args.graph)["ok"] else 1
    from sparse_ops_cookbook.demo import run

    result = run(quick=args.quick, epochs=args.epochs, seed=args.seed, out=args.out, graph=args.graph,
                 progress=args.progress)
    return 0 if result["ok"] else 1


def _cmd_bench(args: argparse.Namespace) -> int:
    root = Path(__file__).resolve().parent.parent
    if not (root / "benchmarks" / "__main__.py").is_file():
        print("sparse-ops bench needs a source checkout of sparse-ops (the benchmarks/ folder beside "
              "sparse_ops/); installed packages do not ship it", file=sys.stderr)
        return 1
    cmd = [sys.executable, "-m", "benchmarks"] + (["--quick"] if args.quick else [])
    return 0 if subprocess.call(cmd, cwd=root) == 0 else 1


def _cmd_warmup(args: argparse.Namespace) -> int:
    """Compile the kernels of every (or each named) op into numba's on-disk cache."""
    so = _ops_module()
    from .warmup import warmup, warmup_jax

    names = args.ops or sorted(so.list_ops())
    unknown = [n for n in names if n not in so.list_ops()]
    if unknown:
        print(f"sparse-ops warmup: no operator {', '.join(unknown)}", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    results = warmup(names, args.dtypes)
    handlers = [warmup_jax(names, args.dtypes)] if args.jax else []
    failed = [r for r in results + handlers if r.error is not None]
    for r in results + handlers:
        if r.error is not None:
            print(f"  FAIL {r.name}: {r.error}", file=sys.stderr)
        elif not args.quiet:
            skipped = f" (does not take {', '.join(r.skipped)})" if r.skipped else ""
            print(f"  ok   {r.name}: {r.calls} {'variants' if r in handlers else 'calls'}, {r.seconds:.2f} s{skipped}")
    total = time.perf_counter() - t0
    if not args.quiet or failed:
        ok = sum(r.error is None for r in results)
        print(f"warmed {ok} of {len(results)} operators in {', '.join(args.dtypes)}"
              + (" and the jax native handlers" if handlers and handlers[0].error is None else "")
              + f" in {total:.1f} s" + (f"; failed: {', '.join(r.name for r in failed)}" if failed else ""))
    return 1 if failed else 0


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    from .sdk.scaffold import LANGS

    parser = argparse.ArgumentParser(prog="sparse-ops", description="sparse-aware operators for Python",
                                     epilog="exit codes: 0 success, 1 failure, 2 usage error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    subs = {}
    p = sub.add_parser("list", help="list operators with their plugin, devices and storage kernels")
    p.add_argument("--plugin", metavar="NAME", help="only this plugin's operators ('built-in' for ours)")
    subs["list"] = p
    p = sub.add_parser("info", help="describe one operator: signature, parameters, storage rules, kernels, docs")
    p.add_argument("op", metavar="OP", help="operator name (see `sparse-ops list`)")
    subs["info"] = p
    p = sub.add_parser("plugins", help="list loaded and failed plugins (exit 1 if one failed)")
    p.add_argument("-v", "--verbose", action="store_true", help="show the traceback of each failure")
    subs["plugins"] = p
    p = sub.add_parser("new-plugin", help="create a plugin project from the template",
                       description="Write a ready-to-install plugin package NAME into DIR/NAME: one operator "
                                   "with samples, tests and a README. --lang python (the default): a "
                                   "kernel-first operator with numba cpu and gpu kernels; --lang c: an operator "
                                   "library in C against sparse_ops.h, compiled by pip at install; --lang cuda: "
                                   "the same in CUDA (a cpu kernel and a gpu kernel), compiled with nvcc.")
    p.add_argument("name", metavar="NAME", help="plugin and package name (a lower-case identifier)")
    p.add_argument("--dir", default=".", metavar="D", help="parent folder (default: the current folder)")
    p.add_argument("--lang", choices=LANGS, default="python",
                   help="the language of the operator (default: python)")
    subs["new-plugin"] = p
    subs["include-dir"] = sub.add_parser(
        "include-dir", help="print the folder holding sparse_ops.h, the C ABI of operator libraries",
        description="Print the folder holding sparse_ops.h, for compiling operator libraries: "
                    "cc -shared -fPIC -I\"$(sparse-ops include-dir)\" ops.c -o libops.so")
    p = sub.add_parser("check", help="run opcheck over a plugin's operators and their samples()",
                       description="Load PLUGIN (an installed or loaded plugin's name; a path only when written "
                                   "as one: ./x, /abs/x, x.py, or --path X) and run sparse_ops.sdk.testing.opcheck "
                                   "on the samples() of each of its operators; PLUGIN 'built-in' (or 'sparse_ops') "
                                   "checks the built-in operators. Exit 1 if a check fails, an operator has no "
                                   "samples() or nothing could be checked.")
    p.add_argument("plugin", metavar="PLUGIN", nargs="?",
                   help="plugin name ('built-in': ours), or a path written as one (./folder, /abs/folder, file.py)")
    p.add_argument("--path", metavar="X", help="load the plugin from this .py file, package or project folder")
    p.add_argument("--op", action="append", metavar="OP", help="check only this operator (repeatable)")
    p.add_argument("--gpu-compile", action="store_true",
                   help="run the checks with the gpu simulated (SPARSE_OPS_CUDA_SIM=1), recording each gpu "
                        "kernel launch, then compile those kernels for the real CUDA target (PTX, compute "
                        "capability --cc) with numba-cuda: no GPU needed (pip install 'sparse-ops[gpu-compile]')")
    p.add_argument("--cc", default="8.0", metavar="X.Y", help="compute capability for --gpu-compile (default 8.0)")
    p.add_argument("--no-boundscheck", action="store_true",
                   help="run a plugin's kernels without bounds checking (by default the checks of a plugin run "
                        "in a child process with SPARSE_OPS_BOUNDSCHECK=1, so a kernel that reads or writes out "
                        "of bounds fails its check instead of passing and corrupting memory)")
    subs["check"] = p
    p = sub.add_parser("warmup", help="compile every operator's kernels into numba's on-disk cache",
                       description="Run each operator on its samples() in each dtype (floating-point inputs "
                                   "converted; serial and parallel drivers), so numba compiles their kernels "
                                   "into its on-disk cache (NUMBA_CACHE_DIR) and later processes load them "
                                   "instead of compiling: a deployment step. Installed plugins' operators are "
                                   "included. Exit 1 naming the operators that failed (the others still run).")
    p.add_argument("--ops", nargs="+", metavar="NAME", help="only these operators (default: all)")
    p.add_argument("--dtypes", nargs="+", metavar="DTYPE", default=["float32", "float64"],
                   help="value dtypes of the floating-point inputs (default: float32 float64)")
    p.add_argument("--jax", action="store_true",
                   help="also compile the JAX bridge's native FFI handlers of these operators (needs jax)")
    p.add_argument("--quiet", action="store_true", help="print only failures")
    subs["warmup"] = p
    p = sub.add_parser("demo", help="run the main job: train a factorization machine and a GCN on sparse data",
                       description="Train a factorization machine on a generated click log (embedding_bag, "
                                   "fm_interaction, row_sparse gradients, lazy Adagrad: loss, AUC, speed against "
                                   "dense gradients, a PNG of the loss curve), then a 2-layer GCN (csr_spmm). "
                                   "Needs the cookbook plugin (pip install -e ./cookbook); exit 1 if a stated "
                                   "target is missed. --torch trains the models in PyTorch through the bridge "
                                   "and compares them with the native ones (exit 1 if they disagree); --tour runs "
                                   "the container tour instead.")
    p.add_argument("--quick", action="store_true", help="small data, one epoch: a few seconds")
    p.add_argument("--epochs", type=_positive_int, default=None, metavar="N",
                   help="epochs of the CTR model (default 3; 1 with --quick)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the initial weights (default 0)")
    p.add_argument("--out", default=".", metavar="DIR",
                   help="folder for sparse_ops_demo_loss.png (default: the current folder)")
    p.add_argument("--graph", choices=("auto", "karate", "sbm"), default="auto",
                   help="GCN graph: karate club if networkx is installed (auto), or a stochastic block model")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.add_argument("--torch", action="store_true",
                   help="train the same models in PyTorch through sparse_ops.torch next to the native ones: "
                        "loss per step, native-vs-torch agreement, step times, torch.compile (needs torch)")
    tour = p.add_argument_group("container tour (no cookbook needed)")
    tour.add_argument("--tour", action="store_true", help="run the checked tour of the containers instead")
    tour.add_argument("--rows", type=int, default=None, help="tour matrix rows (default 2000; implies --tour)")
    tour.add_argument("--cols", type=int, default=None, help="tour matrix columns (default 500; implies --tour)")
    tour.add_argument("--per-row", type=int, default=None, help="tour values per row (default 8; implies --tour)")
    subs["demo"] = p
    p = sub.add_parser("bench", help="run the benchmark suite (python -m benchmarks; needs a source checkout)")
    p.add_argument("--quick", action="store_true", help="smaller inputs; writes report-quick.md")
    subs["bench"] = p
    subs["version"] = sub.add_parser("version", help="print the version")
    return parser, subs


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `sparse-ops list | head`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _main(argv: list[str] | None) -> int:
    parser, subs = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "demo":
        return _cmd_demo(args)
    if args.command == "version":
        from . import __version__

        print(__version__)
        return 0
    if args.command == "new-plugin":
        return _cmd_new_plugin(args, subs["new-plugin"])
    if args.command == "check" and (args.plugin is None) == (args.path is None):
        subs["check"].error("name one plugin: PLUGIN or --path X")  # exits with 2
    if args.command == "check" and args.gpu_compile:
        return _cmd_check_gpu_compile(args, sys.argv[1:] if argv is None else list(argv))
    if args.command == "check" and argv is None and _bounds_unchecked(args):
        return _cmd_check_bounds_checked()
    handler = {"list": _cmd_list, "info": _cmd_info, "plugins": _cmd_plugins, "check": _cmd_check,
               "bench": _cmd_bench, "warmup": _cmd_warmup, "include-dir": _cmd_include_dir}[args.command]
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
