"""The LibSVM text parser: one pass of numba over a file's bytes.

``parse_lines`` reads whole lines of ``label[:weight] [qid:q] index:value ...`` (zero-based
integer indices) into labels, per-row lengths, indices and float32 values. Numbers in
the common form (at most 15 significant digits, decimal exponent within +-22) are
converted exactly as ``float()`` does (Clinger's fast path: one correctly rounded
multiply or divide), then rounded to float32; any other number (more digits, a large
exponent, ``inf``/``nan``) is listed in ``fallback`` for the caller to convert with
``float()``. A malformed line stops the scan with an error code, the line (0-based) and
one detail value in ``status``.
"""
from __future__ import annotations

import numpy as np

from . import jit

# status slots
N_ROWS, N_PAIRS, N_FALLBACK, ERROR, LINE, DETAIL, UNSORTED, POS = range(8)
# error codes (FALLBACK_FULL: call again with a larger ``fallback``)
OK, BAD_CHAR, BAD_NUMBER, BAD_INDEX, NOT_PAIR, BAD_LABEL, BAD_VALUE, FALLBACK_FULL = range(8)
# fallback kinds (fallback[i, 2])
FB_LABEL, FB_VALUE = 0, 1

_POW10 = np.array([10.0 ** i for i in range(23)])


@jit()
def _is_ws(c):
    return c == 32 or c == 9 or c == 13


@jit()
def _is_end(c):
    return c == 32 or c == 9 or c == 13 or c == 10


@jit()
def _number(b, p, n, pow10):
    """Parse a number at ``p``: (end, value, code) with code 0 exact, 1 valid syntax that
    needs ``float()`` (or might: letters), 2 not a number."""
    q = p
    neg = False
    if q < n and (b[q] == 43 or b[q] == 45):
        neg = b[q] == 45
        q += 1
    if q < n and (b[q] == 105 or b[q] == 110 or b[q] == 73 or b[q] == 78):  # inf / nan: float() decides
        while q < n and not _is_end(b[q]) and b[q] != 58:
            q += 1
        return q, 0.0, 1
    mant = 0
    digits = 0  # significant digits kept in mant
    dropped = False
    exp10 = 0
    seen = False
    while q < n and 48 <= b[q] <= 57:
        seen = True
        if mant == 0 and b[q] == 48:
            pass
        elif digits < 18:
            mant = mant * 10 + (b[q] - 48)
            digits += 1
        else:
            exp10 += 1
            if b[q] != 48:
                dropped = True
        q += 1
    if q < n and b[q] == 46:
        q += 1
        while q < n and 48 <= b[q] <= 57:
            seen = True
            if mant == 0 and b[q] == 48:
                exp10 -= 1
            elif digits < 18:
                mant = mant * 10 + (b[q] - 48)
                digits += 1
                exp10 -= 1
            elif b[q] != 48:
                dropped = True
            q += 1
    if not seen:
        return q, 0.0, 2
    if q < n and (b[q] == 101 or b[q] == 69):
        q += 1
        eneg = False
        if q < n and (b[q] == 43 or b[q] == 45):
            eneg = b[q] == 45
            q += 1
        if not (q < n and 48 <= b[q] <= 57):
            return q, 0.0, 2
        e = 0
        while q < n and 48 <= b[q] <= 57:
            if e < 100000:
                e = e * 10 + (b[q] - 48)
            q += 1
        exp10 += -e if eneg else e
    if q < n and not _is_end(b[q]) and b[q] != 58:
        return q, 0.0, 2
    if mant == 0:
        return q, -0.0 if neg else 0.0, 0
    if dropped or mant > 9007199254740992 or exp10 > 22 or exp10 < -22:
        return q, 0.0, 1
    v = float(mant)
    v = v * pow10[exp10] if exp10 >= 0 else v / pow10[-exp10]
    return q, -v if neg else v, 0


@jit()
def parse_lines(b, num_cols, labels, row_len, row_line, idx, val, fallback, status):
    """Parse whole lines of ``b`` (uint8). Outputs are sized by the caller: ``labels``,
    ``row_len``, ``row_line`` for every line, ``idx``/``val`` for every ':', ``fallback``
    (k, 3) int64 rows of (start, end, kind * 2**40 + slot) for every number."""
    n = b.shape[0]
    pow10 = _POW10
    p = 0
    line = 0
    rows = 0
    pairs = 0
    nfb = 0
    while p < n:
        while p < n and _is_ws(b[p]):
            p += 1
        if p < n and b[p] == 10:
            p += 1
            line += 1
            continue
        if p >= n:
            break
        # label [":" weight]
        start = p
        p, v, code = _number(b, p, n, pow10)
        if code == 2:
            c = b[p] if p < n else 32
            status[ERROR] = BAD_CHAR if not (48 <= c <= 57 or c == 46 or c == 43 or c == 45 or c == 101
                                             or c == 69 or c == 32) else BAD_NUMBER
            status[LINE] = line
            status[DETAIL] = c
            status[POS] = start
            return
        labels[rows] = v
        if code == 1:
            if nfb == fallback.shape[0]:
                status[ERROR] = FALLBACK_FULL
                return
            fallback[nfb, 0] = start
            fallback[nfb, 1] = p
            fallback[nfb, 2] = FB_LABEL * 2 ** 40 + rows
            nfb += 1
        if p < n and b[p] == 58:  # a weight: checked, not kept
            p, v, code = _number(b, p + 1, n, pow10)
            if code == 2 or (p < n and b[p] == 58):
                status[ERROR] = BAD_LABEL
                status[LINE] = line
                status[POS] = start
                return
        row_line[rows] = line
        count = 0
        last = -1
        while True:
            while p < n and _is_ws(b[p]):
                p += 1
            if p >= n or b[p] == 10:
                break
            start = p
            if b[p] == 113:  # qid:...
                if p + 3 < n and b[p + 1] == 105 and b[p + 2] == 100 and b[p + 3] == 58:
                    while p < n and not _is_end(b[p]):
                        p += 1
                    continue
                status[ERROR] = BAD_CHAR
                status[LINE] = line
                status[DETAIL] = b[p]
                status[POS] = start
                return
            # index: digits only
            k = 0
            q = p
            while q < n and 48 <= b[q] <= 57:
                d = b[q] - 48
                k = num_cols if k > (num_cols - d) // 10 else k * 10 + d  # at num_cols: out of range, never wraps
                q += 1
            if q == p or q >= n or b[q] != 58:
                # not digits then ':' -- say why
                r = p
                while r < n and not _is_end(b[r]) and b[r] != 58:
                    r += 1
                if r < n and b[r] == 58 and q != p:
                    status[ERROR] = BAD_INDEX  # e.g. 0.5:1 or 1e3:1
                    status[DETAIL] = -2
                elif r < n and b[r] == 58 and r > p:
                    status[ERROR] = BAD_INDEX  # e.g. -1:1
                    status[DETAIL] = -2
                else:
                    status[ERROR] = NOT_PAIR
                status[LINE] = line
                status[POS] = start  # the token, for the message
                return
            if k >= num_cols:
                status[ERROR] = BAD_INDEX
                status[LINE] = line
                status[DETAIL] = k
                status[POS] = start
                return
            p, v, code = _number(b, q + 1, n, pow10)
            if code == 2 or (p < n and b[p] == 58):
                status[ERROR] = BAD_VALUE if code == 2 else NOT_PAIR
                status[LINE] = line
                status[POS] = start
                return
            if k <= last:
                status[UNSORTED] = 1
            last = k
            idx[pairs] = k
            val[pairs] = v
            if code == 1:
                if nfb == fallback.shape[0]:
                    status[ERROR] = FALLBACK_FULL
                    return
                fallback[nfb, 0] = q + 1
                fallback[nfb, 1] = p
                fallback[nfb, 2] = FB_VALUE * 2 ** 40 + pairs
                nfb += 1
            pairs += 1
            count += 1
        row_len[rows] = count
        rows += 1
    status[N_ROWS] = rows
    status[N_PAIRS] = pairs
    status[N_FALLBACK] = nfb
