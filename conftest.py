"""Repository-wide pytest settings (``tests/`` and ``cookbook/tests/``).

``SPARSE_OPS_TEST_ORDER=reverse`` (or ``--test-order=reverse``) runs the test files in the
reverse of their collected order, each file's own tests in their usual order: a test that
passes only because an earlier file left some global state behind (a registry entry, a
cached operator, a module attribute) fails there. CI runs one pass so (``.ci/run``).
"""
from __future__ import annotations

import os

import pytest

ORDERS = ("forward", "reverse")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--test-order", choices=ORDERS, default=None,
                     help="order of the test files: forward (collected order) or reverse "
                          "(also SPARSE_OPS_TEST_ORDER=reverse)")


def _order(config: pytest.Config) -> str:
    order = config.getoption("--test-order", default=None) or os.environ.get("SPARSE_OPS_TEST_ORDER") or "forward"
    order = order.strip().lower()
    if order not in ORDERS:
        raise pytest.UsageError(f"SPARSE_OPS_TEST_ORDER must be one of {', '.join(ORDERS)}, got {order!r}")
    return order


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    if _order(config) != "reverse":
        return
    by_file: dict[str, list] = {}
    for item in items:  # dicts keep first-seen order: the files in collected order
        by_file.setdefault(str(item.path), []).append(item)
    items[:] = [item for path in reversed(list(by_file)) for item in by_file[path]]


def pytest_report_header(config: pytest.Config) -> str | None:
    return "test files in reverse order (SPARSE_OPS_TEST_ORDER=reverse)" if _order(config) == "reverse" else None
