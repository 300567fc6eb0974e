"""The benchmark suite still runs: every case once on tiny inputs (``python -m benchmarks
--smoke``), so CI catches a broken benchmark. Nothing about speed is asserted: the report
must be complete, every case must agree with its reference, and the chart must be a PNG
showing the 1.0 line and the bars on the right side of it."""
from __future__ import annotations

import importlib.util
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ["Machine", "Issue 8 targets", "Storage conversions vs SciPy", "Import time",
            "Per-call overhead and autograd", "dot vs SciPy", "Embedding training step vs PyTorch",
            "Cookbook `csr_spmm` forward+backward vs PyTorch sparse autograd", "Cold start",
            "Effective memory bandwidth", "PyTorch bridge vs PyTorch", "C operator libraries", "The MXNet face",
            "Hashed feature spaces", "Whole training steps vs PyTorch", "SpGEMM: dot(csr, csr)", "The JAX bridge",
            "Chart"]


def read_png(path: Path) -> np.ndarray:
    """Decode an 8-bit RGB, non-interlaced PNG whose rows all use filter 0 (what the suite writes)."""
    blob = path.read_bytes()
    assert blob[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(blob):
        (length,) = struct.unpack(">I", blob[pos:pos + 4])
        kind, body = blob[pos + 4:pos + 8], blob[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", blob[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body), f"bad CRC in chunk {kind!r}"
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    w, h, depth, colour, _, _, interlace = header
    assert (depth, colour, interlace) == (8, 2, 0)
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + 3 * w)
    assert not rows[:, 0].any(), "unfiltered rows expected"
    return rows[:, 1:].reshape(h, w, 3)


def _longest_run(flags: np.ndarray) -> int:
    """Length of the longest run of True in a 1-d bool array."""
    edges = np.diff(np.concatenate(([0], flags.astype(np.int8), [0])))
    return int((np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)).max(initial=0))


def _chart_module():
    """benchmarks/_chart.py loaded from its file (it imports nothing from the suite)."""
    spec = importlib.util.spec_from_file_location("_bench_chart", ROOT / "benchmarks" / "_chart.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_numpy_chart_draws_bars_on_both_sides_of_the_one_line(tmp_path):
    chart = _chart_module()
    path = tmp_path / "ratios.png"
    chart._raster(path, ["faster case", "slower case"], [0.1, 10.0], "title")  # decades 0.1 .. 10
    img = read_png(path)
    black = np.all(img == chart.BLACK, axis=2)
    one_line = np.flatnonzero([_longest_run(col) >= 40 for col in black.T])  # text is 10 px high
    assert one_line.size == 2 and one_line[1] == one_line[0] + 1  # the 1.0 line, 2 px wide
    x1 = one_line[1]
    green = np.all(img == chart.FASTER, axis=2)
    red = np.all(img == chart.SLOWER, axis=2)
    green_cols, red_cols = np.flatnonzero(green.any(axis=0)), np.flatnonzero(red.any(axis=0))
    # log axis: each bar spans one decade, the same width on both sides
    assert green_cols.max() < x1 and red_cols.min() > x1
    assert abs(green_cols.size - red_cols.size) <= 2 and green_cols.size > 100
    assert np.flatnonzero(green.any(axis=1)).max() < np.flatnonzero(red.any(axis=1)).min()  # first row above


@pytest.mark.slow
def test_every_benchmark_case_runs_once(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--smoke", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    report = (tmp_path / "report-smoke.md").read_text()
    for section in SECTIONS:
        assert f"\n## {section}\n" in report, section
    assert "**NO**" not in report, "a case disagrees with its reference"
    assert "**FAIL**" not in report
    assert "Skipped" not in report, "csr_spmm needs the cookbook, the bridge PyTorch: CI installs both"
    bridge = (tmp_path / "torch-smoke.md").read_text()  # benchmarks/bench_torch.py, also written alone
    assert "Skipped" not in bridge and "**NO**" not in bridge
    assert bridge.count("| yes |") == 19  # same result: 3 GCN layers, 2 embedding steps, 2 overheads, 6 conversions,
    # 2 relu calls, 4 recommender steps
    clib = (tmp_path / "clib-smoke.md").read_text()  # benchmarks/bench_clib.py: C op vs numba, ABI vs ctypes
    assert "skipped" not in clib and clib.count("| yes |") == 2, clib
    hashed = (tmp_path / "hashed-smoke.md").read_text()  # benchmarks/bench_hashed.py: 3 widths, 2 dtypes
    assert "**NO**" not in hashed and hashed.count("| yes |") == 5, hashed
    jax_md = (tmp_path / "jax-smoke.md").read_text()  # benchmarks/bench_jax.py: n/a where jax is absent
    assert "n/a (jax is not installed)" in jax_md or jax_md.count("| yes |") == 8, jax_md
    spgemm = (tmp_path / "spgemm-smoke.md").read_text()  # benchmarks/bench_spgemm.py: 2 sizes x 2 kinds x 2 dtypes
    assert spgemm.count("| yes") == 8 and "| NO" not in spgemm and "MKL differs" not in spgemm, spgemm
    assert report.count("| yes |") >= 10  # conversions, dot, embedding, csr_spmm checked their results
    img = read_png(tmp_path / "ratios-smoke.png")
    # one 22-pixel row per ratio: 9 or more without PyTorch (as in CI), ~20 with it
    assert img.shape[0] > 40 + 22 * 8 and img.shape[1] > 500 and (img != 255).any()


def test_the_mkl_verdicts_take_the_issues_widths():
    """Issue 18 item 4's two verdicts read the widths it names (64 columns; 8 to 256); the
    narrow products are reported, never judged against the "never slower" target."""
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks._summary import _sweep_targets
        from benchmarks.bench_dot import SweepRow
    finally:
        sys.path.remove(str(ROOT))

    def row(rows, dtype, width, vs_mkl):
        return SweepRow(rows, dtype, width, 1.0, 1.0, vs_mkl, 1.0, 0.5, None, 1.0, 0.5, True)

    sweep = [row("uniform", "float32", 1, 1.3), row("power-law", "float64", 8, 0.9),
             row("uniform", "float32", 64, 0.7), row("power-law", "float64", 64, 0.85), row("uniform", "float64", 256, 0.5)]
    got = []
    _sweep_targets(sweep, lambda case, wanted, value, shown, target=None: got.append((case, value, shown, target)))
    assert [(v, t) for _, v, _, t in got] == [(0.85, 0.8), (0.9, 1.0), (1.3, None)]
    assert "power-law, float64, k = 64" in got[0][2] and "k = 8" in got[1][2] and "k = 1" in got[2][2]
