"""The suite's chart: one horizontal bar per case, ratio ours / reference on a log axis,
with the 1.0 line (left of it we are faster).

Drawn with matplotlib when it is installed (``pip install "sparse-ops[plot]"``), else
rasterised with NumPy and written by ``sparse_ops.png`` (as the demo's loss curve is), so
the chart is always produced and the benchmarks depend on nothing beyond the package.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np

from sparse_ops.png import CHAR_W, draw_text, write_png

FASTER, SLOWER, BLACK, GREY = (46, 160, 67), (210, 60, 50), (0, 0, 0), (215, 215, 215)


def _log_range(ratios: Sequence[float]) -> tuple[float, float]:
    """Decades covering every ratio and 1.0."""
    lo = min([1.0, *ratios])
    hi = max([1.0, *ratios])
    return 10.0 ** math.floor(math.log10(lo)), 10.0 ** math.ceil(math.log10(hi) + 1e-9)


def _raster(path: str | Path, labels: Sequence[str], ratios: Sequence[float], title: str) -> None:
    row_h, top, bottom, right = 22, 40, 50, 60
    left = 16 + CHAR_W * max(len(s) for s in labels)
    plot_w = 520
    w, h = left + plot_w + right, top + row_h * len(labels) + bottom
    img = np.full((h, w, 3), 255, np.uint8)
    lo, hi = _log_range(ratios)

    def px(v: float) -> int:
        return left + int(round((math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * plot_w))

    y0, y1 = top - 4, top + row_h * len(labels)
    decade = lo
    while decade <= hi * 1.0001:
        x = px(decade)
        img[y0:y1, x] = GREY
        text = f"{decade:g}"
        draw_text(img, x - CHAR_W * len(text) // 2, y1 + 6, text)
        decade *= 10
    for i, (label, r) in enumerate(zip(labels, ratios)):
        y = top + i * row_h
        draw_text(img, 8, y + 6, label)
        a, b = sorted((px(1.0), px(r)))
        img[y + 4:y + row_h - 4, a:max(b, a + 1)] = FASTER if r <= 1 else SLOWER
        value = f"{r:.2f}" if r >= 0.01 else f"{r:.1e}"
        draw_text(img, max(b, px(1.0)) + 6, y + 6, value)
    img[y0:y1, px(1.0) - 1:px(1.0) + 1] = BLACK  # the 1.0 line
    draw_text(img, 8, 12, title)
    draw_text(img, left, h - 22, "ours / reference time, log scale. green: ours faster, red: slower")
    write_png(path, img)


def bar_chart(path: str | Path, labels: Sequence[str], ratios: Sequence[float], title: str) -> str:
    """Write the chart to ``path``; returns the renderer used ("matplotlib" or "numpy")."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        from matplotlib.figure import Figure  # no pyplot: no global backend state
    except ImportError:
        _raster(path, labels, ratios, title)
        return "numpy"
    fig = Figure(figsize=(10, 0.32 * len(labels) + 1.6), dpi=100)
    ax = fig.subplots()
    y = np.arange(len(labels))[::-1]
    lefts = [min(r, 1.0) for r in ratios]
    widths = [max(r, 1.0) - min(r, 1.0) for r in ratios]
    colors = ["#2ea043" if r <= 1 else "#d23c32" for r in ratios]
    ax.barh(y, widths, left=lefts, color=colors, height=0.6)
    ax.axvline(1.0, color="black", lw=1.2)
    ax.set_xscale("log")
    ax.set_xlim(*_log_range(ratios))
    ax.set_yticks(y, labels, fontsize=8)
    for yi, r in zip(y, ratios):
        ax.text(max(r, 1.0) * 1.05, yi, f"{r:.2f}" if r >= 0.01 else f"{r:.1e}", va="center", fontsize=7)
    ax.set_xlabel("ours / reference time (log scale); left of 1.0: ours faster")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path)
    return "matplotlib"
