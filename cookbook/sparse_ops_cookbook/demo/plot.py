"""The demo's output: a progress bar (tqdm when installed, else a one-line text bar) and
the loss-curve PNG (matplotlib when installed, else a small NumPy rasteriser written with
``sparse_ops.png``, so the picture is always written)."""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Sequence

import numpy as np

from sparse_ops.png import draw_text, write_png


# ---- progress ---------------------------------------------------------------------------------------
class TextBar:
    """A one-line progress bar on stderr, redrawn with a carriage return at most 10 times a
    second; when stderr is not a terminal only the final line is written."""

    def __init__(self, total: int, desc: str, width: int = 30, stream: Any = None) -> None:
        self.total, self.desc, self.width = total, desc, width
        self.stream = stream or sys.stderr
        self.live = getattr(self.stream, "isatty", lambda: False)()
        self.done, self.items, self.postfix = 0, 0, ""
        self.start = self.last = time.perf_counter()

    def update(self, items: int = 0, **postfix: Any) -> None:
        """One step done (``items`` examples in it); ``postfix`` is shown after the bar."""
        self.done += 1
        self.items += items
        self.postfix = "  ".join(f"{k} {v}" for k, v in postfix.items())
        now = time.perf_counter()
        if self.live and (now - self.last > 0.1 or self.done == self.total):
            self.last = now
            self._draw(end="")

    def _draw(self, end: str) -> None:
        filled = self.width * self.done // max(self.total, 1)
        rate = self.items / max(time.perf_counter() - self.start, 1e-9)
        self.stream.write(f"\r{self.desc} |{'#' * filled}{'.' * (self.width - filled)}| {self.done}/{self.total}"
                          f"  {rate:,.0f} ex/s  {self.postfix}{end}")
        self.stream.flush()

    def close(self) -> None:
        self._draw(end="\n")


class _Tqdm:
    """tqdm with the TextBar interface (items counted in examples)."""

    def __init__(self, tqdm: Any, total: int, desc: str) -> None:
        self.bar = tqdm(total=total, desc=desc, unit="batch", leave=True, dynamic_ncols=True)

    def update(self, items: int = 0, **postfix: Any) -> None:
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


class _Silent:
    def update(self, items: int = 0, **postfix: Any) -> None:
        pass

    def close(self) -> None:
        pass


def progress(total: int, desc: str, enabled: bool = True) -> Any:
    """A progress bar over ``total`` steps: tqdm if installed, else ``TextBar``."""
    if not enabled:
        return _Silent()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return TextBar(total, desc)
    return _Tqdm(tqdm, total, desc)


# ---- PNG ----------------------------------------------------------------------------------------------
def _polyline(img: np.ndarray, xs: np.ndarray, ys: np.ndarray, color: tuple, thick: int = 1) -> None:
    """Draw the segments between consecutive points (pixel coordinates) by dense sampling."""
    for (x0, y0), (x1, y1) in zip(zip(xs[:-1], ys[:-1]), zip(xs[1:], ys[1:])):
        n = int(max(abs(x1 - x0), abs(y1 - y0))) + 2
        px = np.rint(np.linspace(x0, x1, n)).astype(int)
        py = np.rint(np.linspace(y0, y1, n)).astype(int)
        for d in range(thick):
            img[np.clip(py + d, 0, img.shape[0] - 1), np.clip(px, 0, img.shape[1] - 1)] = color


def _raster_plot(path: str, train: np.ndarray, test_x: np.ndarray, test_y: np.ndarray) -> None:
    """The loss curves drawn with NumPy: train loss per batch (blue), test loss per epoch
    (red dots joined), y axis labelled with its range, x ticks at epoch ends."""
    w, h, left, right, top, bottom = 640, 400, 60, 20, 20, 30
    img = np.full((h, w, 3), 255, np.uint8)
    lo, hi = float(min(train.min(), test_y.min())), float(max(train.max(), test_y.max()))
    pad = 0.05 * (hi - lo or 1.0)
    lo, hi = lo - pad, hi + pad

    def px(i: np.ndarray) -> np.ndarray:
        return left + (np.asarray(i, float) / max(len(train) - 1, 1)) * (w - left - right - 1)

    def py(v: np.ndarray) -> np.ndarray:
        return top + (hi - np.asarray(v, float)) / (hi - lo) * (h - top - bottom - 1)

    grey, black = (200, 200, 200), (0, 0, 0)
    for v in np.linspace(lo, hi, 5):
        img[int(round(float(py(v)))), left:w - right] = grey
        draw_text(img, 4, int(round(float(py(v)))) - 5, f"{v:.3f}", black)
    img[top:h - bottom, left] = black
    img[h - bottom, left:w - right] = black
    for x in test_x:
        img[h - bottom:h - bottom + 6, int(round(float(px(x))))] = black
    _polyline(img, px(np.arange(len(train))), py(train), (70, 110, 220))
    _polyline(img, px(test_x), py(test_y), (220, 50, 50), thick=2)
    for x, y in zip(px(test_x), py(test_y)):
        img[int(y) - 3:int(y) + 4, int(x) - 3:int(x) + 4] = (220, 50, 50)
    for row, (label, color) in enumerate((("train loss per batch", (70, 110, 220)),
                                          ("test loss per epoch", (220, 50, 50)))):
        y0 = top + 10 + 16 * row
        img[y0 + 4:y0 + 6, w - right - 200:w - right - 180] = color
        draw_text(img, w - right - 172, y0, label, black)
    draw_text(img, (left + w - right) // 2 - 100, h - bottom + 12, "batch (ticks: epoch ends)", black)
    write_png(path, img)


def plot_losses(path: str, batch_losses: Sequence[float], batches_per_epoch: int,
                test_losses: Sequence[float], title: str = "") -> str:
    """Write the loss curves as a PNG at ``path``; returns which renderer drew it."""
    train = np.asarray(batch_losses, dtype=float)
    test_x = np.arange(1, len(test_losses) + 1) * batches_per_epoch - 1
    test_y = np.asarray(test_losses, dtype=float)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        from matplotlib.figure import Figure  # no pyplot: the caller's backend is left alone
    except ImportError:
        _raster_plot(path, train, test_x, test_y)
        return "numpy"
    fig = Figure(figsize=(6.4, 4.0), dpi=100)
    ax = fig.subplots()
    ax.plot(np.arange(len(train)), train, lw=0.8, color="#4670dc", label="train loss (batch)")
    ax.plot(test_x, test_y, "o-", color="#dc3232", label="test loss (epoch end)")
    ax.set_xlabel("batch")
    ax.set_ylabel("logistic loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    return "matplotlib"
