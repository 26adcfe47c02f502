"""The codecs' inner loops, compiled with numba: one fused pass where numpy needs several.

Every kernel computes exactly what the numpy reference beside its caller computes (the
`impl="numpy"` paths; tests/test_codec_kernels.py checks the two against each other bit for
bit). Conventions, for speed:

- Floats are read as their IEEE bit patterns where that avoids float semantics: for
  non-negative floats the integer order of the patterns is the float order, so a block's
  largest magnitude is an integer max, which LLVM vectorises (a float max it vectorises only
  with fastmath), and NaN / inf sort above every finite value.
- Inner loops run over slices from index 0 (`seg = a[lo:hi]; for i in range(seg.size)`): with
  `a[lo + i]` numba keeps a negative-index check that stops LLVM from vectorising.
- No fastmath: it could change results (rint, NaN, signed zeros), and nothing needs it.
- Outputs are allocated by the callers with numpy (its allocator asks the kernel for huge
  pages on large arrays) and filled here.

Compiled on first use (about a second per kernel and dtype) and cached on disk
(`cache=True`: in __pycache__ beside this file, or under NUMBA_CACHE_DIR).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
from numba import njit

F = TypeVar("F", bound=Callable[..., Any])


def _jit(fn: F) -> F:
    """numba's njit, typed: a kernel keeps its Python signature for mypy."""
    return cast(F, njit(cache=True, nogil=True, error_model="numpy")(fn))


# ---- bits ----------------------------------------------------------------------------------

# the lowest set bit b of a word: _DEBRUIJN32[((1 << b) * 0x077CB531 mod 2**32) >> 27]
_DEBRUIJN32 = np.array(
    [0, 1, 28, 2, 29, 14, 24, 3, 30, 22, 20, 15, 25, 17, 4, 8,
     31, 27, 13, 23, 21, 19, 16, 7, 26, 12, 18, 6, 11, 5, 10, 9],
    dtype=np.int64,
)  # fmt: skip


@_jit
def _lowest_bit(word: Any) -> int:
    """The index of the lowest set bit of a non-zero word of at most 32 bits."""
    low = np.int64(word) & -np.int64(word)
    return int(_DEBRUIJN32[((low * 0x077CB531) & 0xFFFFFFFF) >> 27])


@_jit
def _popcount32(word: Any) -> int:
    v = np.int64(word) & 0xFFFFFFFF
    v = v - ((v >> 1) & 0x55555555)
    v = (v & 0x33333333) + ((v >> 2) & 0x33333333)
    v = (v + (v >> 4)) & 0x0F0F0F0F
    return int(((v * 0x01010101) & 0xFFFFFFFF) >> 24)


# ---- float bit patterns --------------------------------------------------------------------


@_jit
def _frexp_exponent(amax: int, mant_bits: int, bias: int, zero_exponent: int) -> int:
    """frexp(v)[1] of the non-negative finite float whose bit pattern is amax; zero_exponent
    for 0. A normal v = 1.f * 2**(field - bias) has exponent field - bias + 1; a subnormal
    frac * 2**(1 - bias - mant_bits) has bit_length(frac) + 1 - bias - mant_bits."""
    field = amax >> mant_bits
    if field > 0:
        return field - bias + 1
    if amax == 0:
        return zero_exponent
    length = 0
    while amax:
        amax >>= 1
        length += 1
    return length + 1 - bias - mant_bits


@_jit
def _float_layout(itemsize: int) -> tuple[int, int, int]:
    """(mantissa bits, exponent bits, exponent bias) of float32 / float64."""
    return (23, 8, 127) if itemsize == 4 else (52, 11, 1023)


@_jit
def block_exponents(bits: Any, block_size: int, zero_exponent: int, out: Any) -> bool:
    """out[b] = the frexp exponent of block b's largest |x|; bits: float32 / float64 viewed
    as uint32 / uint64. Returns False if some element is NaN or inf (out is then
    meaningless)."""
    t = bits.dtype.type
    mant_bits, exp_bits, bias = _float_layout(bits.itemsize)
    absmask = t(~(t(1) << t(mant_bits + exp_bits)))
    inf_bits = t(((1 << exp_bits) - 1) << mant_bits)
    n = bits.size
    worst = t(0)
    for b in range(out.size):
        seg = bits[b * block_size : min(b * block_size + block_size, n)]
        m = t(0)
        for i in range(seg.size):
            m = max(m, t(seg[i] & absmask))
        worst = max(worst, m)
        out[b] = _frexp_exponent(int(m), mant_bits, bias, zero_exponent)
    return bool(worst < inf_bits)


@_jit
def nonzero_bitmap(bits: Any, is_float: bool, packed: Any, support: Any) -> tuple[bool, int]:
    """One pass over the input: its non-zero bitmap, its finiteness and its non-zeros.

    bits: float32 / float64 as uint32 / uint64 (+-0 are zero), or int32 as uint32. packed:
    the bitmap words as bytes (4 * ceil(n / 32), all written): bit i % 8 of byte i // 8 is
    set iff element i is non-zero. support: room for the non-zero elements' bits in index
    order, filled while they fit. Returns (False if some float is NaN or inf, how many
    non-zeros were stored: -1 if they did not fit)."""
    t = bits.dtype.type
    if is_float:
        mant_bits, exp_bits, _ = _float_layout(bits.itemsize)
        absmask = t(~(t(1) << t(mant_bits + exp_bits)))
        inf_bits = t(((1 << exp_bits) - 1) << mant_bits)
    else:
        absmask = t(~t(0))
        inf_bits = absmask
    chunk = 4096  # elements per round: flags in L1, then 8 flags -> 1 byte by a multiply
    flags = np.zeros(chunk, dtype=np.uint8)
    flags64 = flags.view(np.uint64)
    n = bits.size
    worst = t(0)
    stored = 0
    for c0 in range(0, n, chunk):
        seg = bits[c0 : min(c0 + chunk, n)]
        m = t(0)
        for i in range(seg.size):
            a = t(seg[i] & absmask)
            m = max(m, a)
            flags[i] = a != 0
        worst = max(worst, m)
        for i in range(seg.size, chunk):
            flags[i] = 0
        dst = packed[c0 // 8 : min(c0 // 8 + chunk // 8, packed.size)]
        for k in range(dst.size):
            # bytes b0..b7 in {0, 1} (little endian) -> the byte sum(b_j << j)
            dst[k] = np.uint8((flags64[k] * np.uint64(0x0102040810204080)) >> np.uint64(56))
        if stored < 0:
            continue
        for k in range(dst.size):
            byte = np.int64(dst[k])
            while byte:
                if stored == support.size:
                    stored = -1
                    break
                support[stored] = seg[8 * k + _lowest_bit(byte)]
                stored += 1
                byte &= byte - 1
            if stored < 0:
                break
    return not is_float or bool(worst < inf_bits), stored


# ---- fixed point ---------------------------------------------------------------------------


@_jit
def _power_of_two(s: int, zero: bool, margin: int, t: Any, itemsize: int) -> tuple[Any, bool]:
    """fixedpoint._factor_plan for one block: (2**s in float type t, usable), where usable
    means 2**s is a normal number with `margin` spare exponent bits; zero blocks: (0, True)."""
    if zero:
        return t(0), True
    _, _, bias = _float_layout(itemsize)
    if s >= 1 - bias and s + margin < bias + 1:
        return t(math.ldexp(1.0, s)), True
    return t(0), False


@_jit
def quantize(x: Any, s: Any, zero: Any, block_size: int, out: Any) -> None:
    """out = rint(x * 2**s_b) as int32: x * 2**s_b in x's own dtype where 2**s_b is normal
    there (exact; zero blocks multiply by 0), else ldexp in float64 (exact)."""
    t = x.dtype.type
    n = x.size
    for b in range(s.size):
        lo = b * block_size
        hi = min(lo + block_size, n)
        xs = x[lo:hi]
        os = out[lo:hi]
        f, fast = _power_of_two(s[b], zero[b], 0, t, x.itemsize)
        if fast:
            for i in range(xs.size):
                os[i] = np.int32(np.rint(xs[i] * f))
        else:
            e = s[b]
            for i in range(xs.size):
                os[i] = np.int32(np.rint(math.ldexp(np.float64(xs[i]), e)))


@_jit
def dequantize(total: Any, neg_s: Any, zero: Any, block_size: int, step: int, out: Any) -> None:
    """out = total * 2**neg_s_b rounded to out's dtype, in chunks of `step` blocks like the
    numpy reference: a chunk whose every block has a normal 2**neg_s_b with 34 bits to spare
    converts to out's dtype and multiplies by it, any other chunk goes through float64 ldexp
    (zero blocks there give +0)."""
    t = out.dtype.type
    n = total.size
    nb = neg_s.size
    for c0 in range(0, nb, step):
        c1 = min(c0 + step, nb)
        all_fast = True
        for b in range(c0, c1):
            all_fast &= _power_of_two(neg_s[b], zero[b], 34, t, out.itemsize)[1]
        for b in range(c0, c1):
            lo = b * block_size
            hi = min(lo + block_size, n)
            ts = total[lo:hi]
            os = out[lo:hi]
            if all_fast:
                f = _power_of_two(neg_s[b], zero[b], 34, t, out.itemsize)[0]
                for i in range(ts.size):
                    os[i] = t(ts[i]) * f
            elif zero[b]:
                for i in range(ts.size):
                    os[i] = 0
            else:
                e = neg_s[b]
                for i in range(ts.size):
                    os[i] = t(math.ldexp(np.float64(ts[i]), e))


# ---- sketch: union -------------------------------------------------------------------------


@_jit
def union_size(local: Any, agg: Any, n: int) -> int:
    """Bits set among the first n of the aggregated bitmap agg (the words as uint32); -1 if
    agg lacks a bit that this worker's bitmap `local` sets."""
    count = 0
    for w in range(agg.size):
        if local[w] & ~agg[w]:
            return -1
    full = n // 32
    for w in range(full):
        count += _popcount32(agg[w])
    if full < agg.size:
        count += _popcount32(agg[full] & np.uint32((1 << (n % 32)) - 1))
    return count


@_jit
def union_merge(agg: Any, local: Any, n: int, support: Any, union: Any, values: Any) -> None:
    """union = the indices of the bits set among the first n of agg, ascending; values = this
    worker's x there: the next of its non-zeros `support` where its own bitmap `local` has
    the bit (local is a subset of agg), else 0. No pass over x."""
    j = 0
    p = 0
    full = n // 32
    for w in range(agg.size):
        a = np.int64(agg[w]) & 0xFFFFFFFF
        if w == full:
            a &= (1 << (n % 32)) - 1
        own = np.int64(local[w])
        while a:
            b = _lowest_bit(a)
            union[j] = w * 32 + b
            if (own >> b) & 1:
                values[j] = support[p]
                p += 1
            else:
                values[j] = 0
            j += 1
            a &= a - 1


@_jit
def union_gather(agg: Any, n: int, x: Any, union: Any, values: Any) -> None:
    """union = the indices of the bits set among the first n of agg, ascending; values =
    x[union]."""
    j = 0
    full = n // 32
    for w in range(agg.size):
        a = np.int64(agg[w]) & 0xFFFFFFFF
        if w == full:
            a &= (1 << (n % 32)) - 1
        while a:
            i = w * 32 + _lowest_bit(a)
            union[j] = i
            values[j] = x[i]
            j += 1
            a &= a - 1


# ---- sketch: cells and peeling -------------------------------------------------------------


@_jit
def sketch_cells(members: Any, seeds: Any, table: int, cells: Any, loads: Any) -> None:
    """cells[k, j] = k * table + ((fmix64(members[j] ^ seeds[k]) >> 32) * table) >> 32 and
    loads[c] = how many (k, j) land in cell c (the caller zeroes loads)."""
    t = np.uint64(table)
    for k in range(seeds.size):
        s = np.uint64(seeds[k])
        base = k * table
        row = cells[k]
        for j in range(members.size):
            h = np.uint64(members[j]) ^ s
            h ^= h >> np.uint64(33)
            h *= np.uint64(0xFF51AFD7ED558CCD)
            h ^= h >> np.uint64(33)
            h *= np.uint64(0xC4CEB9FE1A85EC53)
            h ^= h >> np.uint64(33)
            c = np.int64(((h >> np.uint64(32)) * t) >> np.uint64(32)) + base
            row[j] = c
            loads[c] += 1


@_jit
def encode_sketch(values: Any, cells: Any, sums: Any) -> bool:
    """sums[c] += values[j] for every (k, j) with cells[k, j] == c (int64; the caller zeroes
    sums). Returns False if some sum leaves int32."""
    for k in range(cells.shape[0]):
        row = cells[k]
        for j in range(row.size):
            sums[row[j]] += values[j]
    ok = True
    for c in range(sums.size):
        ok &= -2147483648 <= sums[c] <= 2147483647
    return ok


# peel() outcomes; the three CORRUPT_* are sketch.peel's three SketchCorrupt cases
PEELED, STALLED, CORRUPT_IDS, CORRUPT_DISAGREE, CORRUPT_RESIDUAL = 0, 1, 2, 3, 4


@_jit
def peel(residual: Any, cells: Any, loads: Any, degree_bits: int, values: Any) -> int:
    """sketch.peel's rounds, element by element: PEELED (values filled), STALLED or a CORRUPT_*
    code, the same outcome as the numpy reference on any input, consistent or not.

    residual: the aggregated cells as int64 (consumed); values: u zeros. A round takes the
    frontier (the cells the previous round touched, repeats included), finds its pure cells
    (one unresolved member), resolves every member they name at once (the last pure cell of a
    member represents it, and all of them must agree), and subtracts the members from all
    their cells."""
    n_hashes, u = cells.shape
    m = residual.size
    # per cell: (sum of its unresolved members' ids) << degree_bits | their count
    key = np.zeros(m, dtype=np.int64)
    for k in range(n_hashes):
        row = cells[k]
        for j in range(u):
            key[row[j]] += np.int64(j) << degree_bits
    for c in range(m):
        key[c] |= loads[c]
    mask = (np.int64(1) << degree_bits) - 1
    owner = np.empty(u, dtype=np.int64)
    frontier = np.empty(max(m, n_hashes * u), dtype=np.int64)
    pure_j = np.empty(frontier.size, dtype=np.int64)
    pure_v = np.empty(frontier.size, dtype=np.int64)
    size = 0
    for c in range(m):
        if loads[c] == 1:
            frontier[size] = c
            size += 1
    remaining = u
    while remaining:
        n_pure = 0
        for p in range(size):
            c = frontier[p]
            if key[c] & mask == 1:
                pure_j[n_pure] = key[c] >> degree_bits
                pure_v[n_pure] = residual[c]
                n_pure += 1
        if n_pure == 0:
            return STALLED
        for p in range(n_pure):
            if pure_j[p] < 0 or pure_j[p] >= u:
                return CORRUPT_IDS
        for p in range(n_pure):
            owner[pure_j[p]] = p
        kept = 0
        for p in range(n_pure):
            rep = owner[pure_j[p]]
            if pure_v[p] != pure_v[rep]:
                return CORRUPT_DISAGREE
            if rep == p:
                pure_j[kept] = pure_j[p]
                pure_v[kept] = pure_v[p]
                kept += 1
        remaining -= kept
        size = 0
        for k in range(n_hashes):
            row = cells[k]
            for p in range(kept):
                j = pure_j[p]
                c = row[j]
                residual[c] -= pure_v[p]
                key[c] -= (j << degree_bits) | 1
                frontier[size] = c
                size += 1
        for p in range(kept):
            values[pure_j[p]] = pure_v[p]
    for c in range(m):
        if residual[c] != 0:
            return CORRUPT_RESIDUAL
    return PEELED
