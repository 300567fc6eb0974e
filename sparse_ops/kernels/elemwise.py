"""Merging two canonical csr matrices row by row (union for add/sub, intersection for mul)."""
from numba import prange

from . import jit

ADD, SUB, MUL = 0, 1, 2


@jit(parallel=True)
def csr_merge_count(a_ptr, a_idx, b_ptr, b_idx, union, counts):
    for r in prange(a_ptr.shape[0] - 1):
        i, i_end = a_ptr[r], a_ptr[r + 1]
        j, j_end = b_ptr[r], b_ptr[r + 1]
        c = 0
        while i < i_end and j < j_end:
            if a_idx[i] == b_idx[j]:
                c += 1
                i += 1
                j += 1
            elif a_idx[i] < b_idx[j]:
                c += union
                i += 1
            else:
                c += union
                j += 1
        if union:
            c += (i_end - i) + (j_end - j)
        counts[r] = c


@jit(parallel=True)
def csr_merge_fill(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, op, out_ptr, out_idx, out_val):
    union = op != MUL
    for r in prange(a_ptr.shape[0] - 1):
        i, i_end = a_ptr[r], a_ptr[r + 1]
        j, j_end = b_ptr[r], b_ptr[r + 1]
        p = out_ptr[r]
        while i < i_end and j < j_end:
            ca, cb = a_idx[i], b_idx[j]
            if ca == cb:
                out_idx[p] = ca
                if op == ADD:
                    out_val[p] = a_val[i] + b_val[j]
                elif op == SUB:
                    out_val[p] = a_val[i] - b_val[j]
                else:
                    out_val[p] = a_val[i] * b_val[j]
                p += 1
                i += 1
                j += 1
            elif ca < cb:
                if union:
                    out_idx[p] = ca
                    out_val[p] = a_val[i]
                    p += 1
                i += 1
            else:
                if union:
                    out_idx[p] = cb
                    out_val[p] = -b_val[j] if op == SUB else b_val[j]
                    p += 1
                j += 1
        if union:
            while i < i_end:
                out_idx[p] = a_idx[i]
                out_val[p] = a_val[i]
                p += 1
                i += 1
            while j < j_end:
                out_idx[p] = b_idx[j]
                out_val[p] = -b_val[j] if op == SUB else b_val[j]
                p += 1
                j += 1
