"""The ``sparse-ops`` command line."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparse-ops", description="sparse-aware operators for Python")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="run the main job: a checked tour of the containers")
    demo.add_argument("--rows", type=int, default=2000)
    demo.add_argument("--cols", type=int, default=500)
    demo.add_argument("--per-row", type=int, default=8)
    demo.add_argument("--seed", type=int, default=0)
    sub.add_parser("version", help="print the version")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run

        run(rows=args.rows, cols=args.cols, per_row=args.per_row, seed=args.seed)
        return 0
    if args.command == "version":
        from . import __version__

        print(__version__)
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
