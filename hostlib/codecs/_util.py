"""Helpers shared by the codecs: input validation, result checks, cache-sized chunking."""

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
