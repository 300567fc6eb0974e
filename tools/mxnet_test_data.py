#!/usr/bin/env python3
"""Local stand-ins for the data sets MXNet 1.9.1's ``test_io.py`` downloads.

``generate(folder)`` writes, under ``folder/data``, files with the names, formats, sizes
and properties the tests check, so that ``mx.test_utils.get_mnist_ubyte()`` and
``get_bz2_data(...)`` find them and download nothing:

- MNIST in idx-ubyte form: ``train-images-idx3-ubyte`` (60000 images of 28 x 28 bytes),
  ``train-labels-idx1-ubyte`` (60000 labels in 0..9), ``t10k-images-idx3-ubyte`` and
  ``t10k-labels-idx1-ubyte`` (10000 each); headers as LeCun's files (magic numbers 2051
  and 2049, big-endian counts and sizes). Each image is a blurred stroke pattern of its
  label's class, mostly zeros like MNIST's, not a real digit.
- ``news20.t``: LibSVM text with 3993 examples, labels 1..20 and zero-based feature
  indices below 62061 (the test's ``feature_dim``), sorted within each row, 20 to 140
  features a row with positive values.

The content is a fixed function of a fixed seed (the same bytes on every run) and takes
about a second to write. Run it as ``python tools/mxnet_test_data.py FOLDER``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

MNIST_SETS = {"train": 60000, "t10k": 10000}
MNIST_SIDE = 28
NEWS20 = {"name": "news20.t", "num_examples": 3993, "feature_dim": 62061, "num_classes": 20}
_SEED = 20240901


def _idx_header(magic: int, *dims: int) -> bytes:
    return np.array((magic,) + dims, dtype=">i4").tobytes()


def _mnist_images(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """uint8 (n, 28, 28) images: per class a fixed pattern of bright pixels, jittered by a
    random shift and noise, so about a fifth of the pixels are non-zero as in MNIST."""
    n = labels.size
    templates = np.zeros((10, MNIST_SIDE, MNIST_SIDE), dtype=np.float32)
    yy, xx = np.mgrid[:MNIST_SIDE, :MNIST_SIDE]
    for c in range(10):  # a ring and a bar whose size and angle depend on the class
        r = 5 + c * 0.6
        ring = np.abs(np.hypot(yy - 14, xx - 14) - r) < 1.6
        angle = np.pi * c / 10
        bar = np.abs((yy - 14) * np.cos(angle) - (xx - 14) * np.sin(angle)) < 1.2
        templates[c] = (ring | (bar & (np.hypot(yy - 14, xx - 14) < 11))) * 255.0
    shifts = rng.integers(-2, 3, size=(n, 2))
    images = np.empty((n, MNIST_SIDE, MNIST_SIDE), dtype=np.uint8)
    for dy in range(-2, 3):  # 25 shift groups, each one vectorised roll
        for dx in range(-2, 3):
            sel = np.flatnonzero((shifts[:, 0] == dy) & (shifts[:, 1] == dx))
            if sel.size:
                moved = np.roll(templates[labels[sel]], (dy, dx), axis=(1, 2))
                noise = rng.integers(0, 40, size=moved.shape, dtype=np.int16)
                images[sel] = np.clip(moved - noise * (moved > 0), 0, 255).astype(np.uint8)
    return images


def _write_mnist(data: Path, rng: np.random.Generator) -> list[Path]:
    written = []
    for prefix, n in MNIST_SETS.items():
        labels = rng.integers(0, 10, size=n).astype(np.uint8)
        images = _mnist_images(labels, rng)
        img_path = data / f"{prefix}-images-idx3-ubyte"
        img_path.write_bytes(_idx_header(2051, n, MNIST_SIDE, MNIST_SIDE) + images.tobytes())
        lbl_path = data / f"{prefix}-labels-idx1-ubyte"
        lbl_path.write_bytes(_idx_header(2049, n) + labels.tobytes())
        written += [img_path, lbl_path]
    return written


def _write_news20(data: Path, rng: np.random.Generator) -> Path:
    """news20.t in LibSVM form: one line per example, ``label idx:value ...``."""
    n, dim, classes = NEWS20["num_examples"], NEWS20["feature_dim"], NEWS20["num_classes"]
    labels = rng.integers(1, classes + 1, size=n)
    lengths = rng.integers(20, 141, size=n)
    # distinct sorted indices per row: a sorted draw from [0, dim - len) plus 0..len-1
    # turns non-decreasing numbers into strictly increasing ones, all below dim
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    pos = np.arange(lengths.sum()) - starts
    row = np.repeat(np.arange(n), lengths)
    draw = rng.integers(0, dim - np.repeat(lengths, lengths))
    order = np.lexsort((draw, row))
    indices = draw[order] + pos
    values = rng.gamma(2.0, 0.05, size=indices.size) + 1e-4  # positive, as tf-idf weights
    pairs = np.char.add(np.char.add(indices.astype(str), ":"), np.char.mod("%.6g", values))
    bounds = np.cumsum(lengths)[:-1]
    lines = [f"{y} " + " ".join(p) for y, p in zip(labels.tolist(), np.split(pairs, bounds))]
    path = data / NEWS20["name"]
    path.write_text("\n".join(lines) + "\n")
    return path


def generate(folder: Path) -> list[str]:
    """Write the stand-ins under ``folder/data`` (made when missing) and return their paths
    relative to ``folder``, as POSIX strings."""
    folder = Path(folder)
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(_SEED)
    written = _write_mnist(data, rng) + [_write_news20(data, rng)]
    return [p.relative_to(folder).as_posix() for p in written]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} FOLDER")
    for name in generate(Path(sys.argv[1])):
        print(name)
