"""SwitchML-style block fixed point: floats become int32 that the switch can SUM exactly.

Wire phases (float32 / float64 input of n elements, blocks of B elements, nb = ceil(n / B)):

1. ``MAX`` of nb int32 block exponents. A worker's exponent for block b is the `frexp`
   exponent of the block's largest magnitude, so every |x| in the block is < 2**e_b
   (an all-zero block reports ZERO_BLOCK_EXPONENT). The switch returns E_b = max over workers.
2. ``SUM`` of n int32 ``q = rint(x * 2**S_b)`` with the scale exponent

       S_b = 30 - E_b - H - backoff_b,     H = ceil(log2(n_terms)),  n_terms = n_workers

   Since |x| < 2**E_b, |q| <= 2**(30 - H): any n_terms <= 2**H such values sum to at most
   2**30 < INT32_MAX in magnitude, so neither the sum nor any partial sum in the switch can
   saturate. (backoff_b is 0 unless the switch reported OVERFLOW anyway; then the codec halves
   the scale of the flagged blocks and SUMs again, at most `max_backoff` times.)

Decode: ``sum_q * 2**-S_b`` (exact in float64), rounded once to the input dtype.

Error bound, per element of block b (see `error_bound`): each worker's rint moves its value by
at most 0.5 / 2**S_b, so

    |decoded - true_sum| <= n_workers * 0.5 * 2**-S_b = n_workers * 2**(E_b + H + backoff_b - 31)

plus the final rounding to the output dtype (half an ulp of the result). Relative to the
block's largest magnitude M_b >= 2**(E_b - 1) that is n_workers * 2**(H + backoff_b - 30).

int32 input takes no exponent phase: one SUM of the values as they are, exact, and
`SumOverflow` propagates if the switch saturated (the true sum, or a partial sum in arrival
order, left int32).

`quantize` / `dequantize` / `block_exponents` are public so that tests and the sketch codec
(which uses n_terms = n_workers * max cell load) compute exactly the same integers.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.common.wire import Opcode
from inaemu.hostlib.codecs import _kernels
from inaemu.hostlib.codecs._util import (
    CHUNK_ELEMENTS,
    ScratchPool,
    as_flat,
    check_finite,
    check_workers,
    chunks,
    expect_result,
    float_bits,
)
from inaemu.hostlib.codecs.base import BoolArray, Int32Array, Phase, PhaseGenerator, SumOverflow
from inaemu.hostlib.codecs.passthrough import int32_sum_phases

DEFAULT_BLOCK_SIZE = 256
VALUE_BITS = 30  # |q| <= 2**(VALUE_BITS - H); n_terms * |q| <= 2**30 < INT32_MAX
ZERO_BLOCK_EXPONENT = -1100  # all-zero block: below any finite float64's frexp exponent (-1073)
MAX_BLOCK_EXPONENT = 1024  # frexp exponent of the largest finite float64
DEFAULT_MAX_BACKOFF = 3

Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[Any]  # float32 or float64


def headroom_bits(n_terms: int) -> int:
    """H = ceil(log2(n_terms)): bits kept free so n_terms values can be summed."""
    n = operator.index(n_terms)  # also accepts numpy integers
    if n < 1:
        raise ValueError(f"n_terms must be >= 1, got {n_terms}")
    return (n - 1).bit_length()


def n_blocks(size: int, block_size: int) -> int:
    return -(-size // block_size)


def _check_block_size(block_size: int) -> None:
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")


def _float_flat(x: npt.ArrayLike, what: str) -> FloatArray:
    flat, _ = as_flat(x, what)
    if flat.dtype.kind != "f":
        raise TypeError(f"{what}: expected float32 or float64, got {flat.dtype}")
    return flat


def block_exponents(
    x: npt.ArrayLike, block_size: int = DEFAULT_BLOCK_SIZE, *, compiled: bool = True
) -> Int32Array:
    """Per block of `block_size` elements: e with max|x| < 2**e (frexp exponent), int32.

    All-zero blocks get ZERO_BLOCK_EXPONENT. Raises ValueError on NaN / inf.
    """
    _check_block_size(block_size)
    flat = _float_flat(x, "block_exponents")
    if not compiled:
        return _block_exponents_numpy(flat, block_size)
    out = np.empty(n_blocks(flat.size, block_size), dtype=np.int32)
    if not _kernels.block_exponents(float_bits(flat), block_size, ZERO_BLOCK_EXPONENT, out):
        check_finite(flat, "fixedpoint")
    return out


def _block_exponents_numpy(flat: FloatArray, block_size: int) -> Int32Array:
    """The numpy reference of `block_exponents` (flat: 1-D float32 / float64)."""
    n = flat.size
    nb = n_blocks(n, block_size)
    out = np.empty(nb, dtype=np.int32)
    full = n // block_size
    step = max(1, CHUNK_ELEMENTS // block_size)
    finite = True
    with np.errstate(invalid="ignore"):
        for b0, b1 in chunks(full, step):
            y = flat[b0 * block_size : b1 * block_size].reshape(-1, block_size)
            amax = np.maximum(y.max(axis=1), -y.min(axis=1))
            finite &= bool(np.isfinite(amax).all())
            e = np.frexp(amax)[1]
            e[amax == 0] = ZERO_BLOCK_EXPONENT
            out[b0:b1] = e
        if full < nb:
            tail = np.abs(flat[full * block_size :])
            amax_t = tail.max()
            finite &= bool(np.isfinite(amax_t))
            out[full] = ZERO_BLOCK_EXPONENT if amax_t == 0 else int(np.frexp(amax_t)[1])
    if not finite:
        check_finite(flat, "fixedpoint")
    return out


def scale_exponents(
    exponents: npt.ArrayLike, n_terms: int, backoff: npt.ArrayLike = 0
) -> Int64Array:
    """S_b = 30 - E_b - ceil(log2(n_terms)) - backoff_b (the scale is 2**S_b)."""
    e = np.asarray(exponents, dtype=np.int64)
    s: Int64Array = np.asarray(
        VALUE_BITS - e - headroom_bits(n_terms) - np.asarray(backoff), dtype=np.int64
    )
    return s


def _factor_plan(
    s: Int64Array, zero: BoolArray, dtype: np.dtype[Any], margin: int
) -> tuple[FloatArray, BoolArray]:
    """Per block: the factor 2**s in `dtype` and whether it is usable (a normal number with
    `margin` spare exponent bits). Zero blocks get factor 0 (their values are all zero).
    (_kernels._power_of_two is the same rule for one block.)"""
    fi = np.finfo(dtype)
    fast = zero | ((s >= fi.minexp) & (s + margin < fi.maxexp))
    safe = np.where(fast & ~zero, s, 0).astype(np.int32)
    factors = np.ldexp(np.ones(s.size, dtype=dtype), safe)
    factors[zero] = 0
    return factors, fast


def _quantize_scaled(
    flat: FloatArray,
    s: Int64Array,
    zero: BoolArray,
    block_size: int,
    compiled: bool = True,
    out: Int32Array | None = None,
) -> Int32Array:
    """rint(flat * 2**s_b) as int32 (into `out` if given); caller guarantees
    |flat * 2**s_b| < 2**31."""
    n = flat.size
    if out is None:
        out = np.empty(n, dtype=np.int32)
    if n == 0:
        return out
    # flat * 2**s is exact in flat's own dtype whenever 2**s is a normal number there and the
    # product is not subnormal (then it is < 2**-126 and rounds to 0 anyway), so float32
    # input needs no float64 temporaries; rare out-of-range blocks take an ldexp path.
    if compiled:
        _kernels.quantize(flat, s, zero, block_size, out, _kernels.stream_head(out))
        return out
    factors, fast = _factor_plan(s, zero, flat.dtype, margin=0)
    step = max(1, CHUNK_ELEMENTS // block_size)
    for b0, b1 in chunks(n_blocks(n, block_size), step):
        lo, hi = b0 * block_size, min(b1 * block_size, n)
        seg = flat[lo:hi]
        if fast[b0:b1].all():
            if hi - lo == (b1 - b0) * block_size:
                y = seg.reshape(-1, block_size) * factors[b0:b1, None]
            else:
                y = seg * np.repeat(factors[b0:b1], block_size)[: hi - lo]
        else:
            exps = np.repeat(np.where(zero[b0:b1], 0, s[b0:b1]), block_size)[: hi - lo]
            y = np.ldexp(seg.astype(np.float64), exps.astype(np.int32))
            y[np.repeat(zero[b0:b1], block_size)[: hi - lo]] = 0
        np.rint(y, out=y)
        np.copyto(out[lo:hi], y.reshape(-1), casting="unsafe")
    return out


def quantize(
    x: npt.ArrayLike,
    exponents: npt.ArrayLike,
    n_terms: int,
    block_size: int = DEFAULT_BLOCK_SIZE,
    backoff: npt.ArrayLike = 0,
    *,
    compiled: bool = True,
) -> Int32Array:
    """The int32 fixed-point encoding rint(x * 2**S_b) of float x (any shape, flattened).

    `exponents` are the aggregated (MAX) block exponents; `n_terms` the most values that can
    land in one lane (n_workers for this codec). ValueError if x exceeds the exponents.
    """
    _check_block_size(block_size)
    flat = _float_flat(x, "quantize")
    e = np.asarray(exponents, dtype=np.int64)
    if e.shape != (n_blocks(flat.size, block_size),):
        raise ValueError(f"expected {n_blocks(flat.size, block_size)} exponents, got {e.shape}")
    if (block_exponents(flat, block_size, compiled=compiled) > e).any():
        raise ValueError("x has a block larger in magnitude than its exponent allows")
    return _quantize_scaled(
        flat, scale_exponents(e, n_terms, backoff), e == ZERO_BLOCK_EXPONENT, block_size, compiled
    )


def dequantize(
    total: npt.ArrayLike,
    exponents: npt.ArrayLike,
    n_terms: int,
    block_size: int = DEFAULT_BLOCK_SIZE,
    backoff: npt.ArrayLike = 0,
    dtype: npt.DTypeLike = np.float64,
    *,
    compiled: bool = True,
) -> FloatArray:
    """total * 2**-S_b, rounded once to `dtype` (float32 / float64); 1-D.

    Sums beyond the dtype's range saturate to +-inf, as float addition would.
    """
    _check_block_size(block_size)
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"dequantize: dtype must be float32 or float64, got {dt}")
    tot = np.asarray(total).reshape(-1)
    if tot.dtype.kind not in "iu":
        raise TypeError(f"dequantize: total must be integers, got {tot.dtype}")
    n = tot.size
    e = np.asarray(exponents, dtype=np.int64)
    if e.shape != (n_blocks(n, block_size),):
        raise ValueError(f"expected {n_blocks(n, block_size)} exponents, got {e.shape}")
    zero = e == ZERO_BLOCK_EXPONENT
    neg_s = -scale_exponents(e, n_terms, backoff)
    # int -> dtype rounds once; the power-of-two factor is then exact as long as the result
    # stays normal: |total| < 2**33 keeps it below the top of the range (margin 34).
    out = np.empty(n, dtype=dt)
    step = max(1, CHUNK_ELEMENTS // block_size)  # the numpy loop's chunks decide the paths
    if compiled:
        native = np.ascontiguousarray(tot, dtype=tot.dtype.newbyteorder("="))
        _kernels.dequantize(native, neg_s, zero, block_size, step, out)
        return out
    factors, fast = _factor_plan(neg_s, zero, dt, margin=34)
    with np.errstate(over="ignore"):
        for b0, b1 in chunks(n_blocks(n, block_size), step):
            lo, hi = b0 * block_size, min(b1 * block_size, n)
            seg = tot[lo:hi]
            if fast[b0:b1].all():
                if hi - lo == (b1 - b0) * block_size:
                    y = seg.reshape(-1, block_size).astype(dt) * factors[b0:b1, None]
                else:
                    y = seg.astype(dt) * np.repeat(factors[b0:b1], block_size)[: hi - lo]
                out[lo:hi] = y.reshape(-1)
            else:
                exps = np.repeat(np.where(zero[b0:b1], 0, neg_s[b0:b1]), block_size)[: hi - lo]
                wide = np.ldexp(seg.astype(np.float64), exps.astype(np.int32))
                wide[np.repeat(zero[b0:b1], block_size)[: hi - lo]] = 0
                out[lo:hi] = wide.astype(dt)
    return out


def error_bound(
    exponents: npt.ArrayLike,
    n_workers: int,
    size: int,
    block_size: int = DEFAULT_BLOCK_SIZE,
    n_terms: int | None = None,
    backoff: npt.ArrayLike = 0,
) -> npt.NDArray[np.float64]:
    """Per-element bound on |decoded - true_sum| before the final rounding to the dtype:

        n_workers * 0.5 * 2**-S_b = n_workers * 2**(E_b + ceil(log2 n_terms) + backoff_b - 31)

    (0 in all-zero blocks). Add half an ulp of the result for the output rounding.
    `n_terms` defaults to n_workers (fixed point); the sketch codec passes its own.
    """
    check_workers(n_workers)
    e = np.asarray(exponents, dtype=np.int64)
    if e.shape != (n_blocks(size, block_size),):
        raise ValueError(f"expected {n_blocks(size, block_size)} exponents, got {e.shape}")
    s = scale_exponents(e, n_workers if n_terms is None else n_terms, backoff)
    per_block = np.ldexp(np.full(e.size, 0.5 * n_workers), (-s).clip(-2000, 2000).astype(np.int32))
    per_block[e == ZERO_BLOCK_EXPONENT] = 0.0
    return np.repeat(per_block, block_size)[:size]


def worst_case_error(max_abs: float, n_workers: int, n_terms: int | None = None) -> float:
    """The per-element error bound of the worst block, knowing only max |x| over all workers:

        n_workers * 2**(E + ceil(log2 n_terms) - 31),  E = frexp(max_abs) exponent

    (no backoff; plus half an ulp of the result). For printing, e.g. in a demo; the exact
    per-element bounds need the agreed block exponents (`error_bound`).
    """
    check_workers(n_workers)
    if not (math.isfinite(max_abs) and max_abs >= 0):
        raise ValueError(f"max_abs must be finite and >= 0, got {max_abs}")
    if max_abs == 0:
        return 0.0
    e = math.frexp(max_abs)[1]
    h = headroom_bits(n_workers if n_terms is None else n_terms)
    return math.ldexp(float(n_workers), e + h - 31)


def check_exponents(agg: Int32Array, local: Int32Array) -> Int32Array:
    """Validate a MAX result against this worker's own exponents."""
    if (agg < local).any() or (agg < ZERO_BLOCK_EXPONENT).any() or (agg > MAX_BLOCK_EXPONENT).any():
        raise ValueError("exponent MAX result is inconsistent with this worker's exponents")
    return agg


def blocks_hit(lanes: BoolArray | None, size: int, block_size: int) -> Int64Array:
    """1 for every block touched by a flagged lane (all blocks if unknown), else 0."""
    nb = n_blocks(size, block_size)
    if lanes is None or np.shape(lanes) != (size,) or not np.any(lanes):
        return np.ones(nb, dtype=np.int64)
    padded = np.zeros(nb * block_size, dtype=np.bool_)
    padded[:size] = lanes
    hit: Int64Array = np.asarray(padded.reshape(nb, block_size).any(axis=1), dtype=np.int64)
    return hit


class FixedPointCodec:
    """Block fixed point (MAX exponents, then SUM int32); int32 input: one exact SUM."""

    name = "fixedpoint"

    def __init__(
        self,
        block_size: int = DEFAULT_BLOCK_SIZE,
        max_backoff: int = DEFAULT_MAX_BACKOFF,
        compiled: bool = True,
    ) -> None:
        _check_block_size(block_size)
        if max_backoff < 0:
            raise ValueError(f"max_backoff must be >= 0, got {max_backoff}")
        self.block_size = block_size
        self.max_backoff = max_backoff
        self.compiled = compiled
        self._scratch = ScratchPool()

    def phases(self, x: npt.NDArray[np.generic], n_workers: int) -> PhaseGenerator:
        """Validates eagerly (TypeError for other dtypes, ValueError for NaN / inf)."""
        check_workers(n_workers)
        flat, shape = as_flat(x, self.name)
        if flat.dtype == np.int32:
            return int32_sum_phases(flat, shape, f"{self.name}.int32")
        local = block_exponents(flat, self.block_size, compiled=self.compiled)  # rejects NaN / inf
        return self._float_phases(flat, shape, local, n_workers)

    def _float_phases(
        self, flat: FloatArray, shape: tuple[int, ...], local: Int32Array, n_workers: int
    ) -> PhaseGenerator:
        n, bs = flat.size, self.block_size
        if n == 0:
            return np.zeros(shape, dtype=flat.dtype)
        agg = yield Phase(Opcode.MAX, local, f"{self.name}.exponents")
        exps = check_exponents(expect_result(agg, local.size, self.name), local)
        zero = exps == ZERO_BLOCK_EXPONENT
        backoff = np.zeros(exps.size, dtype=np.int64)
        retries = 0
        while True:
            s = scale_exponents(exps, n_workers, backoff)
            # numba: a buffer of an earlier allreduce, its pages already mapped (a phase sent
            # before a retry keeps its own buffer: the driver may still hold it)
            buf = self._scratch.take(n) if self.compiled else None
            q = _quantize_scaled(flat, s, zero, bs, self.compiled, buf)
            try:
                total = yield Phase(Opcode.SUM, q, f"{self.name}.values")
            except SumOverflow as exc:
                if retries >= self.max_backoff:
                    raise SumOverflow(
                        f"{self.name}: SUM still overflows after halving the scale "
                        f"{retries} times (do all workers pass the same n_workers?)",
                        label=exc.label,
                        lanes=exc.lanes,
                    ) from exc
                retries += 1
                backoff += blocks_hit(exc.lanes, n, bs)
                continue
            total = expect_result(total, n, self.name)
            out = dequantize(
                total, exps, n_workers, bs, backoff, flat.dtype, compiled=self.compiled
            )
            if buf is not None:
                self._scratch.give(buf)
            return out.reshape(shape)
