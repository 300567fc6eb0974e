"""The suite's chart: one horizontal bar per case, ratio ours / reference on a log axis,
with the 1.0 line (left of it we are faster).

Drawn with matplotlib when it is installed (``pip install "sparse-ops[plot]"``), else
rasterised with NumPy and written by a small PNG encoder here, so the chart is always
produced and the benchmarks depend on nothing beyond the package itself (the cookbook's
demo has its own loss-curve rasteriser; its glyphs cover only the letters it needs).
"""
from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path
from typing import Sequence

import numpy as np

FASTER, SLOWER, BLACK, GREY = (46, 160, 67), (210, 60, 50), (0, 0, 0), (215, 215, 215)


def write_png(path: str | Path, rgb: np.ndarray) -> None:
    """An (h, w, 3) uint8 array as an 8-bit RGB PNG: one zlib stream of unfiltered rows."""
    h, w, _ = rgb.shape
    rows = np.concatenate([np.zeros((h, 1), np.uint8), rgb.reshape(h, 3 * w)], axis=1)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8 bits, truecolour, no interlace
    Path(path).write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                           + chunk(b"IDAT", zlib.compress(rows.tobytes(), 9)) + chunk(b"IEND", b""))


# 3 x 5 glyphs, five rows of three bits; upper case is drawn as lower case
_FONT = {
    "a": "010101111101101", "b": "110101110101110", "c": "011100100100011", "d": "110101101101110",
    "e": "111100110100111", "f": "111100110100100", "g": "011100101101011", "h": "101101111101101",
    "i": "111010010010111", "j": "001001001101010", "k": "101101110101101", "l": "100100100100111",
    "m": "101111111101101", "n": "110101101101101", "o": "010101101101010", "p": "110101110100100",
    "q": "010101101110011", "r": "110101110101101", "s": "011100010001110", "t": "111010010010010",
    "u": "101101101101111", "v": "101101101101010", "w": "101101111111101", "x": "101101010101101",
    "y": "101101010010010", "z": "111001010100111",
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001010010010",
    "8": "111101111101111", "9": "111101111001111",
    " ": "000000000000000", ".": "000000000000010", ",": "000000000010100", ":": "000010000010000",
    "(": "010100100100010", ")": "010001001001010", "-": "000000111000000", "+": "000010111010000",
    "/": "001001010100100", "_": "000000000000111", ">": "100010001010100", "<": "001010100010001",
    "=": "000111000111000", "%": "101001010100101", "'": "010010000000000", "*": "000101010101000",
    "[": "110100100100110", "]": "011001001001011", "#": "101111101111101", "?": "111001010000010",
    "!": "010010010000010", "&": "010101010101011", "`": "100010000000000", "@": "010101111100011",
}
_SCALE = 2
CHAR_W = 4 * _SCALE  # advance per character, pixels


def _glyph(ch: str) -> np.ndarray:
    bits = _FONT.get(ch.lower(), _FONT["?"])
    g = np.array([b == "1" for b in bits], dtype=bool).reshape(5, 3)
    return np.kron(g, np.ones((_SCALE, _SCALE), dtype=bool))


def draw_text(img: np.ndarray, x: int, y: int, text: str, color: tuple = BLACK) -> None:
    """Write ``text`` with its top-left corner at pixel (x, y), clipped to the image."""
    for ch in text:
        block = _glyph(ch)
        region = img[max(y, 0):y + block.shape[0], max(x, 0):x + block.shape[1]]
        region[block[:region.shape[0], :region.shape[1]]] = color
        x += CHAR_W


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
