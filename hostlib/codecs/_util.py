"""Helpers shared by the codecs: input validation, result checks, cache-sized chunking and the
reusable phase buffers."""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.hostlib.codecs.base import Int32Array

# Elements processed per numpy call on hot paths. Working on cache-resident chunks instead of
# whole-array temporaries is ~10x faster for 16M-element arrays (no page faults on fresh
# multi-megabyte temporaries, operands stay in L2).
CHUNK_ELEMENTS = 1 << 16

SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int32))


def as_flat(x: npt.ArrayLike, codec: str) -> tuple[npt.NDArray[Any], tuple[int, ...]]:
    """(1-D contiguous view or copy of x, original shape); float32/float64/int32 only."""
    arr = np.asarray(x)
    if arr.dtype.byteorder not in "=|":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{codec}: unsupported dtype {arr.dtype}; use float32, float64 or int32")
    return np.ascontiguousarray(arr).reshape(-1), arr.shape


def check_finite(flat: npt.NDArray[Any], codec: str) -> None:
    """ValueError if flat holds NaN or +-inf (two fast reductions; max/min propagate NaN)."""
    if flat.size == 0:
        return
    with np.errstate(invalid="ignore"):
        ok = bool(np.isfinite(flat.max())) and bool(np.isfinite(flat.min()))
    if not ok:
        bad = int(np.flatnonzero(~np.isfinite(flat))[0])
        raise ValueError(f"{codec}: input holds a non-finite value ({flat[bad]!r} at index {bad})")


def check_workers(n_workers: int) -> None:
    if operator.index(n_workers) < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")


def expect_result(agg: npt.ArrayLike, length: int, what: str) -> Int32Array:
    """The aggregate the driver sent back, checked for length and made native int32."""
    arr = np.asarray(agg)
    if arr.shape != (length,):
        raise ValueError(f"{what}: aggregate has shape {arr.shape}, expected ({length},)")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{what}: aggregate must be int32, got {arr.dtype}")
    return arr.astype(np.int32, copy=False)


def chunks(n_items: int, chunk: int) -> Iterator[tuple[int, int]]:
    """(start, stop) ranges covering 0..n_items in steps of `chunk`."""
    for start in range(0, n_items, chunk):
        yield start, min(start + chunk, n_items)


def float_bits(flat: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The bit patterns of a 1-D float32 / float64 (or int32) array: a uint32 / uint64 view."""
    return flat.view(np.uint64 if flat.dtype.itemsize == 8 else np.uint32)


class ScratchPool:
    """int32 buffers one codec reuses for its SUM phases from one allreduce to the next.

    A fresh 64 MB array costs about as much in first-touch page faults as the codec's work on
    it; a buffer from the previous allreduce of the same size has its pages mapped. A buffer
    goes back (`give`) once the allreduce that used it has finished; `take` hands it to a later
    one (base.py: drivers keep no phase values past the codec's end). Keeps at most `keep`
    buffers per size and `sizes` sizes. Safe for concurrent allreduces under the GIL (each
    take is one atomic pop); picklable.
    """

    def __init__(self, keep: int = 2, sizes: int = 4) -> None:
        self.keep = keep
        self.sizes = sizes
        self._free: dict[int, list[Int32Array]] = {}

    def take(self, n: int) -> Int32Array:
        try:
            return self._free.get(n, []).pop()
        except IndexError:
            return np.empty(n, dtype=np.int32)

    def give(self, buf: Int32Array) -> None:
        if buf.size not in self._free and len(self._free) >= self.sizes:
            self._free.clear()  # a new size: forget the old ones
        stack = self._free.setdefault(buf.size, [])
        if len(stack) < self.keep:
            stack.append(buf)
