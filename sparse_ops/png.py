"""A PNG writer and 3x5 pixel text over NumPy images: charts without matplotlib.

The demo's loss curve and the benchmark chart are drawn into ``(h, w, 3)`` uint8 arrays and
written with ``write_png``, so both work with nothing installed beyond NumPy (and use
matplotlib instead where they find it).
"""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

BLACK = (0, 0, 0)


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
CHAR_W = 8  # advance per character at the default scale 2, pixels


def _glyph(ch: str, scale: int) -> np.ndarray:
    bits = _FONT.get(ch.lower(), _FONT["?"])
    g = np.array([b == "1" for b in bits], dtype=bool).reshape(5, 3)
    return np.kron(g, np.ones((scale, scale), dtype=bool))


def draw_text(img: np.ndarray, x: int, y: int, text: str, color: tuple = BLACK, scale: int = 2) -> None:
    """Write ``text`` with its top-left corner at pixel (x, y), clipped to the image; each
    character advances ``4 * scale`` pixels."""
    for ch in text:
        block = _glyph(ch, scale)
        region = img[max(y, 0):y + block.shape[0], max(x, 0):x + block.shape[1]]
        region[block[:region.shape[0], :region.shape[1]]] = color
        x += 4 * scale
