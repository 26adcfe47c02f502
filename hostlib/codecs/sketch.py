"""Lossless homomorphic compression after Li et al., arXiv 2402.07529 (bitmap + count sketch).

Wire phases for n float elements on n_workers workers:

A. ``OR`` of the non-zero bitmaps: ceil(n / 32) words. Element i is bit (i % 32) of word
   i // 32 (LSB first), i.e. the little-endian bit stream of `np.packbits(x != 0,
   bitorder="little")` read as little-endian uint32 words, carried as int32. Every worker
   derives the same union U (sorted indices, u = |U|). u == 0 ends the exchange (all zeros).
E. ``MAX`` of block exponents of the union's values x[U] (blocks of B over the compacted
   union, ceil(u / B) words), exactly as in the fixed-point codec.
B. ``SUM`` of an integer count sketch of the fixed-point values of x[U]: 3 equal sub-tables
   of t cells, m = 3t, t = ceil(growth**attempt * (ratio * u + 4 * sqrt(u) + 12) / 3),
   ratio 1.25 by default. (The slack 4*sqrt(u) + 12 keeps the first attempt's peeling
   failure rate at ~3% or less for every u; a bare 1.25u fails 25-70% of the time for u in
   20..1000, the finite-size window around the 3-hypergraph peeling threshold 1.222.)
   Union member i adds its value to one cell per sub-table, cell k*t + h_k(i), where

       h_k(i) = ((fmix64(i xor seed_k) >> 32) * t) >> 32        (uint64 arithmetic)
       seed_k = splitmix64(seed + (3 * attempt + k + 1) * 0x9E3779B97F4A7C15)

   (fmix64: murmur3's 64-bit finalizer; then a multiply-shift range reduction): identical on
   every worker, fresh per attempt. Every worker knows U and the hashes, hence each cell's
   exact load (union members in it) and the largest load L. The scale is the fixed-point
   scale for n_terms = n_workers * L terms per lane, S_b = 30 - E_b - ceil(log2(n_workers *
   L)), so |q| <= 2**30 / (n_workers * L) and no cell (nor partial sum) can leave int32.

Decode: a peeling decoder. A cell holding exactly one unresolved member holds that member's
exact integer sum; resolve it, subtract it from its other cells, repeat (each round peels all
degree-1 cells at once). The result is the exact integer sum of the workers'
fixed-point values (then scaled by 2**-S_b like `fixedpoint.dequantize`); residual cells are
checked to be zero. If peeling stalls (a 2-core remains), the sketch is sent again with
m *= growth and fresh seeds (another SUM phase), at most `max_retries` times, then
`PeelingFailed`. Nothing is ever approximated.

Dense fallback: when the sketch would cost as much as the dense vector (m + bitmap words >=
n), phase B instead SUMs the union's fixed-point values in index order ("compact", u words,
n_terms = n_workers). That is the dense vector minus lanes known to be zero on every worker,
hence never larger than it, and exact. Note that once U is known, compact (u words) is always
smaller than a sketch of m >= 1.25u cells; `payload="compact"` selects it outright.

int32 input: phases A and B only, always "compact" (integer values cannot be rescaled, so a
cell mixing several members could saturate where no true sum does): exact; `SumOverflow`
propagates iff the switch saturated.

Error bound (float input): the fixed-point bound with this codec's scale, per union element
n_workers * 0.5 * 2**-S_b (see `fixedpoint.error_bound` with n_terms); elements outside U
decode to exactly 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from inaemu.common.wire import INT32_MAX, INT32_MIN, Opcode
from inaemu.hostlib.codecs import _kernels
from inaemu.hostlib.codecs._util import (
    SUPPORTED_DTYPES,
    ScratchPool,
    as_flat,
    check_finite,
    check_workers,
    expect_result,
    float_bits,
)
from inaemu.hostlib.codecs.base import (
    Int32Array,
    Phase,
    PhaseGenerator,
    SumOverflow,
)
from inaemu.hostlib.codecs.fixedpoint import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_MAX_BACKOFF,
    ZERO_BLOCK_EXPONENT,
    _quantize_scaled,
    block_exponents,
    check_exponents,
    dequantize,
    scale_exponents,
)

N_HASHES = 3
DEFAULT_RATIO = 1.25
DEFAULT_GROWTH = 1.5
DEFAULT_MAX_RETRIES = 4
DEFAULT_SEED = 0x494E41454D55  # "INAEMU"; shared by all workers
DEFAULT_SLACK_SQRT = 4.0  # extra cells: slack_sqrt * sqrt(u) + slack_const
DEFAULT_SLACK_CONST = 12.0

Int64Array = npt.NDArray[np.int64]
UInt64Array = npt.NDArray[np.uint64]
Payload = Literal["sketch", "compact"]

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


class PeelingFailed(RuntimeError):
    """The count sketch could not be peeled within the retry budget (never approximated)."""


class SketchCorrupt(ValueError):
    """The aggregated sketch is inconsistent (workers disagree, or the switch misbehaved)."""


# ---- bitmaps -------------------------------------------------------------------------------


def nonzero_bitmap(x: npt.ArrayLike, *, compiled: bool = True) -> Int32Array:
    """ceil(n / 32) words; element i is bit i % 32 (LSB first) of word i // 32."""
    flat = np.asarray(x).reshape(-1)
    if compiled and flat.dtype in SUPPORTED_DTYPES:
        return _scan(np.ascontiguousarray(flat, flat.dtype.newbyteorder("="))).bitmap
    n = flat.size
    nbytes = 4 * (-(-n // 32))
    packed = np.zeros(nbytes, dtype=np.uint8)
    packed[: -(-n // 8)] = np.packbits(flat != 0, bitorder="little")
    return packed.view("<i4").astype(np.int32)


class _Scan(NamedTuple):
    bitmap: Int32Array  # nonzero_bitmap(x)
    finite: bool  # x holds no NaN / inf
    support: npt.NDArray[Any] | None  # x's non-zeros in index order; None: too many to keep


def _scan(flat: npt.NDArray[Any]) -> _Scan:
    """One pass over flat (1-D contiguous native float32 / float64 / int32, numba): its
    bitmap, whether it is finite and, if at most about n / 16, its non-zeros (then the union's
    values need no second pass over x: `_kernels.union_merge`)."""
    n = flat.size
    words = np.empty(-(-n // 32), dtype=np.int32)
    support = np.empty(min(n, n // 16 + 1024), dtype=flat.dtype)
    finite, stored = _kernels.nonzero_bitmap(
        float_bits(flat), flat.dtype.kind == "f", words.view(np.uint8), float_bits(support)
    )
    return _Scan(words, bool(finite), support[:stored] if stored >= 0 else None)


def _bits(bitmap: npt.ArrayLike, n: int) -> npt.NDArray[np.uint8]:
    words = np.asarray(bitmap).astype("<i4")
    if words.shape != (-(-n // 32),):
        raise ValueError(f"bitmap for {n} elements needs {-(-n // 32)} words, got {words.shape}")
    return np.unpackbits(words.view(np.uint8), bitorder="little", count=n)


def union_indices(bitmap: npt.ArrayLike, n: int) -> Int64Array:
    """Sorted indices of the bits set in an (aggregated) bitmap of n elements."""
    return np.flatnonzero(_bits(bitmap, n)).astype(np.int64)


# ---- hashing and layout --------------------------------------------------------------------


def _splitmix64(v: int) -> int:
    z = (v + _GOLDEN) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def hash_seeds(seed: int, attempt: int) -> tuple[int, ...]:
    """The N_HASHES 64-bit seeds of one attempt (same on every worker)."""
    return tuple(
        _splitmix64((seed + (N_HASHES * attempt + k + 1) * _GOLDEN) & _M64) for k in range(N_HASHES)
    )


def _fmix64(h: UInt64Array) -> UInt64Array:
    """murmur3's 64-bit finalizer (a bijection), in place."""
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


def table_size(
    u: int,
    attempt: int,
    ratio: float = DEFAULT_RATIO,
    growth: float = DEFAULT_GROWTH,
    slack_sqrt: float = DEFAULT_SLACK_SQRT,
    slack_const: float = DEFAULT_SLACK_CONST,
) -> int:
    """Cells per sub-table t for a union of u members at this attempt (m = 3t)."""
    cells = growth**attempt * (ratio * u + slack_sqrt * math.sqrt(u) + slack_const)
    return max(1, math.ceil(cells / N_HASHES))


@dataclass(frozen=True)
class SketchLayout:
    """Where each union member goes: cells[k, j] is member j's cell in sub-table k."""

    table: int  # cells per sub-table t
    cells: Int64Array  # (N_HASHES, u), values in [k*t, (k+1)*t)
    loads: Int64Array  # (m,) union members per cell
    attempt: int

    @property
    def m(self) -> int:
        return N_HASHES * self.table

    @property
    def max_load(self) -> int:
        return int(self.loads.max()) if self.loads.size else 0


def sketch_layout(
    union: npt.ArrayLike,
    table: int,
    attempt: int = 0,
    seed: int = DEFAULT_SEED,
    *,
    compiled: bool = True,
) -> SketchLayout:
    """The cells of every union member (indices into the full array) for one attempt."""
    if table < 1 or table >= 1 << 32:
        raise ValueError(f"table size {table} out of range")
    if compiled:
        members = np.asarray(union, dtype=np.int64).reshape(-1)
        cells = np.empty((N_HASHES, members.size), dtype=np.int64)
        loads = np.zeros(N_HASHES * table, dtype=np.int64)
        seeds = np.array(hash_seeds(seed, attempt), dtype=np.uint64)
        _kernels.sketch_cells(members, seeds, table, cells, loads)
        return SketchLayout(table=table, cells=cells, loads=loads, attempt=attempt)
    idx = np.asarray(union, dtype=np.int64).astype(np.uint64)
    cells = np.empty((N_HASHES, idx.size), dtype=np.int64)
    t = np.uint64(table)
    for k, s in enumerate(hash_seeds(seed, attempt)):
        h = _fmix64(idx ^ np.uint64(s))
        cells[k] = ((h >> np.uint64(32)) * t) >> np.uint64(32)
        cells[k] += k * table
    loads = np.bincount(cells.reshape(-1), minlength=N_HASHES * table).astype(np.int64)
    return SketchLayout(table=table, cells=cells, loads=loads, attempt=attempt)


# ---- encode / peel -------------------------------------------------------------------------


def encode_sketch(
    values: npt.ArrayLike,
    layout: SketchLayout,
    *,
    compiled: bool = True,
    out: Int32Array | None = None,
) -> Int32Array:
    """The m sketch cells (into `out` if given): each union member's integer value added to
    its N_HASHES cells. OverflowError if a cell does not fit in int32."""
    v = np.asarray(values).reshape(-1)
    if v.shape != (layout.cells.shape[1],):
        raise ValueError(f"expected {layout.cells.shape[1]} values, got {v.shape}")
    if compiled and v.dtype == np.int32:
        # int64 sums are exact; the numpy reference's float64 ones are too (below 2**53)
        sums = np.zeros(layout.m, dtype=np.int64)
        if not _kernels.encode_sketch(v, layout.cells, sums):
            raise OverflowError("a sketch cell does not fit in int32 (values not scaled for it)")
        if out is None:
            return sums.astype(np.int32)
        np.copyto(out, sums, casting="unsafe")
        return out
    # float64 bincount is exact: every partial sum is below 2**53 in magnitude.
    w = np.broadcast_to(v.astype(np.float64), layout.cells.shape).reshape(-1)
    sums = np.bincount(layout.cells.reshape(-1), weights=w, minlength=layout.m)
    if sums.size and (sums.max() > INT32_MAX or sums.min() < INT32_MIN):
        raise OverflowError("a sketch cell does not fit in int32 (values not scaled for it)")
    if out is None:
        return sums.astype(np.int32)
    np.copyto(out, sums, casting="unsafe")
    return out


_CORRUPT = {
    _kernels.CORRUPT_IDS: "sketch cell bookkeeping is inconsistent",
    _kernels.CORRUPT_DISAGREE: "sketch cells disagree about a member's value",
    _kernels.CORRUPT_RESIDUAL: "non-zero residual after peeling: cells hold values outside U",
}
_DEGREE_BITS = 8  # peel() packs (member-id sum << 8) | degree into one int64 per cell


def peel(cells: npt.ArrayLike, layout: SketchLayout, *, compiled: bool = True) -> Int64Array | None:
    """Exact per-member sums from an aggregated sketch, or None if peeling stalls.

    Each round resolves every member that sits alone in some cell, all at once. Raises
    SketchCorrupt if the cells are inconsistent with the layout.
    """
    residual = np.asarray(cells, dtype=np.int64).copy()
    if residual.shape != (layout.m,):
        raise ValueError(f"expected {layout.m} cells, got {residual.shape}")
    c = layout.cells
    u = c.shape[1]
    if layout.max_load >= 1 << _DEGREE_BITS or u * layout.max_load >= 1 << 54:
        raise ValueError("sketch too loaded to peel")  # cannot happen with sane sizes
    if compiled:
        values = np.zeros(u, dtype=np.int64)
        outcome = _kernels.peel(residual, c, layout.loads, _DEGREE_BITS, values)
        if outcome == _kernels.STALLED:
            return None
        if outcome != _kernels.PEELED:
            raise SketchCorrupt(_CORRUPT[outcome])
        return values
    # Per cell: (sum of its unresolved members' ids) << 8 | (their count). In a cell with
    # count 1 the id sum *is* the member. One int64 keeps both in one scatter / gather.
    # (float64 bincount is exact: every sum is below 2**53.)
    ids = np.broadcast_to(np.arange(u, dtype=np.float64), c.shape).reshape(-1)
    id_sum = np.bincount(c.reshape(-1), weights=ids, minlength=layout.m).astype(np.int64)
    key = (id_sum << _DEGREE_BITS) | layout.loads
    values = np.zeros(u, dtype=np.int64)
    owner = np.empty(u, dtype=np.int64)  # scratch for de-duplicating members per round
    mask = (1 << _DEGREE_BITS) - 1
    remaining = u
    frontier = np.flatnonzero(layout.loads == 1)
    while remaining:
        k = key[frontier]
        pure_at = np.flatnonzero((k & mask) == 1)  # may repeat a cell, or a member via 2 cells
        if pure_at.size == 0:
            return None
        j = k[pure_at] >> _DEGREE_BITS
        if (j < 0).any() or (j >= u).any():
            raise SketchCorrupt(_CORRUPT[_kernels.CORRUPT_IDS])
        v = residual[frontier[pure_at]]
        pos = np.arange(j.size, dtype=np.int64)
        owner[j] = pos  # last writer wins: one representative per member
        rep = owner[j]
        if (v != v[rep]).any():
            raise SketchCorrupt(_CORRUPT[_kernels.CORRUPT_DISAGREE])
        keep = rep == pos
        j, v = j[keep], v[keep]
        values[j] = v
        remaining -= j.size
        touched = c.take(j, axis=1).reshape(-1)  # ~3x faster than c[:, j]
        np.subtract.at(residual, touched, np.tile(v, N_HASHES))
        np.subtract.at(key, touched, np.tile((j << _DEGREE_BITS) | 1, N_HASHES))
        frontier = touched
    if residual.any():
        raise SketchCorrupt(_CORRUPT[_kernels.CORRUPT_RESIDUAL])
    return values


# ---- the codec -----------------------------------------------------------------------------


class SketchCodec:
    """Bitmap OR + exponent MAX + count-sketch SUM, decoded exactly by peeling."""

    name = "sketch"

    def __init__(
        self,
        block_size: int = DEFAULT_BLOCK_SIZE,
        ratio: float = DEFAULT_RATIO,
        growth: float = DEFAULT_GROWTH,
        max_retries: int = DEFAULT_MAX_RETRIES,
        seed: int = DEFAULT_SEED,
        payload: Payload = "sketch",
        max_backoff: int = DEFAULT_MAX_BACKOFF,
        slack_sqrt: float = DEFAULT_SLACK_SQRT,
        slack_const: float = DEFAULT_SLACK_CONST,
        compiled: bool = True,
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if not ratio > 0 or not growth >= 1:
            raise ValueError(f"need ratio > 0 and growth >= 1, got {ratio}, {growth}")
        if slack_sqrt < 0 or slack_const < 0:
            raise ValueError("slack_sqrt and slack_const must be >= 0")
        if max_retries < 0 or max_backoff < 0:
            raise ValueError("max_retries and max_backoff must be >= 0")
        if payload not in ("sketch", "compact"):
            raise ValueError(f"payload must be 'sketch' or 'compact', got {payload!r}")
        self.block_size = block_size
        self.ratio = ratio
        self.growth = growth
        self.max_retries = max_retries
        self.seed = seed & _M64
        self.payload: Payload = payload
        self.name = "sketch" if payload == "sketch" else "sketch-compact"
        self.max_backoff = max_backoff
        self.slack_sqrt = slack_sqrt
        self.slack_const = slack_const
        self.compiled = compiled
        self._scratch = ScratchPool()

    def phases(self, x: npt.NDArray[np.generic], n_workers: int) -> PhaseGenerator:
        """Validates eagerly (TypeError for other dtypes, ValueError for NaN / inf)."""
        check_workers(n_workers)
        flat, shape = as_flat(x, self.name)
        if self.compiled:
            scan = _scan(flat)  # phase A's vector, the check and x's non-zeros in one pass
            if not scan.finite:
                check_finite(flat, self.name)
        else:
            if flat.dtype.kind == "f":
                check_finite(flat, self.name)
            scan = _Scan(nonzero_bitmap(flat, compiled=False), True, None)
        return self._run(flat, shape, n_workers, scan)

    def _union(
        self, flat: npt.NDArray[Any], scan: _Scan, agg: Int32Array
    ) -> tuple[int, Int64Array | None, npt.NDArray[Any]]:
        """From the OR result: (u, the union's indices or None if it is everything, x[U])."""
        n, bitmap = flat.size, scan.bitmap
        if self.compiled:
            words, local = agg.view(np.uint32), bitmap.view(np.uint32)
            u = _kernels.union_size(local, words, n)
            if u < 0:
                raise SketchCorrupt("OR result lacks bits this worker set")
            if u == 0 or u == n:
                return u, None, flat
            union = np.empty(u, dtype=np.int64)
            values = np.empty(u, dtype=flat.dtype)
            if scan.support is not None:
                _kernels.union_merge(words, local, n, scan.support, union, values)
            else:
                _kernels.union_gather(words, n, flat, union, values)
            return u, union, values
        if (bitmap & ~agg).any():
            raise SketchCorrupt("OR result lacks bits this worker set")
        bits = _bits(agg, n)
        u = int(np.count_nonzero(bits))
        if u == 0 or u == n:  # every element in U: no index gather / scatter
            return u, None, flat
        union_np = np.flatnonzero(bits)
        return u, union_np, flat[union_np]

    def _run(
        self, flat: npt.NDArray[Any], shape: tuple[int, ...], n_workers: int, scan: _Scan
    ) -> PhaseGenerator:
        n, bs, name, compiled = flat.size, self.block_size, self.name, self.compiled
        if n == 0:
            return np.zeros(shape, dtype=flat.dtype)
        bitmap = scan.bitmap
        agg = expect_result((yield Phase(Opcode.OR, bitmap, f"{name}.bitmap")), bitmap.size, name)
        u, union, values = self._union(flat, scan, agg)
        if u == 0:
            return np.zeros(shape, dtype=flat.dtype)
        is_int = flat.dtype == np.int32
        exps = np.zeros(0, dtype=np.int32)
        if not is_int:
            local = block_exponents(values, bs, compiled=compiled)
            agg = yield Phase(Opcode.MAX, local, f"{name}.exponents")
            exps = check_exponents(expect_result(agg, local.size, name), local)
        zero = exps == ZERO_BLOCK_EXPONENT
        mode: Payload = "compact" if is_int else self.payload
        attempt = backoff = 0
        while True:
            layout = None
            if mode == "sketch":
                table = table_size(
                    u, attempt, self.ratio, self.growth, self.slack_sqrt, self.slack_const
                )
                if N_HASHES * table + bitmap.size >= n:
                    mode = "compact"  # dense fallback: never costs more than the dense vector
                else:
                    members = np.arange(n) if union is None else union
                    layout = sketch_layout(members, table, attempt, self.seed, compiled=compiled)
            n_terms = n_workers * (layout.max_load if layout is not None else 1)
            # numba: the SUM phase's buffer comes from an earlier allreduce (see fixedpoint);
            # every attempt takes its own, the driver may still hold the previous one
            buf = None
            if compiled and not (is_int and layout is None):
                buf = self._scratch.take(u if layout is None else layout.m)
            if is_int:
                q: Int32Array = values
            else:
                s = scale_exponents(exps, n_terms, backoff)
                q = _quantize_scaled(values, s, zero, bs, compiled, buf if layout is None else None)
            if layout is not None:
                cells = encode_sketch(q, layout, compiled=compiled, out=buf)
                phase = Phase(Opcode.SUM, cells, f"{name}.cells#{attempt}")
            else:
                phase = Phase(Opcode.SUM, q, f"{name}.compact")
            try:
                agg = expect_result((yield phase), phase.values.size, name)
            except SumOverflow as exc:
                if is_int:
                    raise SumOverflow(
                        f"{name}: the int32 sum does not fit in int32 (switch saturated)",
                        label=exc.label,
                        lanes=exc.lanes,
                    ) from exc
                if backoff >= self.max_backoff:
                    raise SumOverflow(
                        f"{name}: SUM still overflows after halving the scale {backoff} "
                        "times (do all workers pass the same n_workers?)",
                        label=exc.label,
                        lanes=exc.lanes,
                    ) from exc
                backoff += 1
                continue
            if layout is None:
                sums: npt.NDArray[Any] = agg
                break
            peeled = peel(agg, layout, compiled=compiled)
            if peeled is not None:
                sums = peeled
                break
            attempt += 1
            if attempt > self.max_retries:
                raise PeelingFailed(
                    f"{name}: peeling a {layout.m}-cell sketch of {u} members failed "
                    f"{attempt} times (ratio {self.ratio}, growth {self.growth})"
                )
        if is_int:
            decoded: npt.NDArray[Any] = sums.astype(np.int32)
        else:
            decoded = dequantize(sums, exps, n_terms, bs, backoff, flat.dtype, compiled=compiled)
        if buf is not None:
            self._scratch.give(buf)
        if union is None:
            return decoded.reshape(shape)
        out = np.zeros(n, dtype=flat.dtype)  # pages the kernel zeroes as they are first touched
        out[union] = decoded
        return out.reshape(shape)
