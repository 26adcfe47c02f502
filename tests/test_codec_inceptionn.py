"""INCEPTIONN lossy compression: element-wise error bound, format, ring all-reduce."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inaemu.hostlib.codecs import inceptionn as inc

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BOUNDS = [2.0**-10, 2.0**-6, 2.0**-16, 1e-3, 0.3, 3.0, 2.0**-30, 2.0**-130]


def gradient_like(seed: int, size: int, log2_scale: int, density: float) -> npt.NDArray[Any]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(size) * np.exp2(log2_scale + rng.integers(-12, 13, size))
    x = np.where(rng.random(size) < density, x, 0.0)
    with np.errstate(over="ignore"):
        x32 = x.astype(np.float32)
    return np.where(np.isfinite(x32), x32, np.float32(1.5)).astype(np.float32)


def check_bound(x: npt.NDArray[np.float32], bound: float) -> bytes:
    buf = inc.compress(x, bound)
    y = inc.decompress(buf)
    assert y.dtype == np.float32 and y.shape == (x.size,)
    err = np.abs(y.astype(np.float64) - x.astype(np.float64).reshape(-1))
    assert (err < bound).all(), (float(err.max()), bound)
    return buf


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    size=st.one_of(st.integers(0, 300), st.integers(300, 5000)),
    log2_scale=st.integers(-140, 120),
    density=st.sampled_from([1.0, 0.3, 0.01, 0.0]),
    bound=st.one_of(st.sampled_from(BOUNDS), st.floats(2.0**-120, 8.0)),
)
def test_error_bound_holds_elementwise(
    seed: int, size: int, log2_scale: int, density: float, bound: float
) -> None:
    x = gradient_like(seed, size, log2_scale, density)
    buf = check_bound(x, bound)
    assert len(buf) <= inc.HEADER_BYTES + 4 * size + -(-size // 4)


@pytest.mark.parametrize("bound", BOUNDS)
def test_error_bound_over_a_sweep_of_float32_bit_patterns(bound: float) -> None:
    # every 2**11-th bit pattern (both signs, all exponents, subnormals, +-0), minus NaN / inf
    bits = np.arange(0, 2**32, 2**11, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[np.isfinite(x)]
    extra = np.array([bound, -bound, np.nextafter(bound, 0), 1.0, -1.0, 2**-149], np.float64)
    check_bound(np.concatenate([x, extra.astype(np.float32)]), bound)


def test_tags_and_sizes_for_default_bound() -> None:
    b = 2.0**-10
    x = np.array([0.0, b / 2, -b, b, 0.1, -0.12, 0.125, 0.5, -0.999, 1.0, -3.0, 1e30], np.float32)
    # tag 0: |x| < 2**-10; tag 1: < 2**-3; tag 2: < 1; tag 3: the rest
    expected_tags = [0, 0, 1, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    buf = inc.compress(x)
    _, _, _, _, n, bound, n8, n16, n32 = struct.unpack_from("<4sBBHQdQQQ", buf)
    assert (n, bound) == (12, b)
    assert (n8, n16, n32) == tuple(expected_tags.count(t) for t in (1, 2, 3))
    assert len(buf) == inc.HEADER_BYTES + n8 + 2 * n16 + 4 * n32 + 3
    packed = np.frombuffer(buf[-3:], np.uint8)
    tags = ((packed[:, None] >> (2 * np.arange(4))) & 3).reshape(-1)
    assert tags.tolist() == expected_tags
    y = inc.decompress(buf)
    assert y[9:].tolist() == x[9:].tolist()  # raw floats are exact
    assert y[2] == -b and y[4] == np.floor(np.float32(0.1) * 1024) / 1024  # truncation


def test_compresses_gradients() -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(100_000) * 1e-3).astype(np.float32)
    buf = check_bound(x, 2.0**-10)
    assert len(buf) < 0.2 * x.nbytes  # most |x| < 2**-10: 2 bits each


def test_shape_is_flattened_and_empty_ok() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 16
    assert inc.decompress(inc.compress(x)).shape == (12,)
    assert inc.decompress(inc.compress(np.zeros(0, np.float32))).size == 0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_rejected(bad: float) -> None:
    x = np.zeros(10, np.float32)
    x[3] = bad
    with pytest.raises(ValueError, match="non-finite"):
        inc.compress(x)


def test_bad_arguments() -> None:
    with pytest.raises(TypeError):
        inc.compress(np.zeros(3, np.float64))
    for bound in (0.0, -1.0, float("nan"), float("inf"), 2.0**-140):
        with pytest.raises(ValueError):
            inc.compress(np.zeros(3, np.float32), bound)


def test_malformed_buffers_rejected() -> None:
    buf = inc.compress(np.linspace(-2, 2, 101).astype(np.float32))
    with pytest.raises(ValueError, match="header"):
        inc.decompress(buf[:10])
    with pytest.raises(ValueError, match="magic"):
        inc.decompress(b"XXXX" + buf[4:])
    with pytest.raises(ValueError, match="bytes"):
        inc.decompress(buf[:-1])
    # swap the 8-bit and 16-bit counts: sizes no longer match
    fields = list(struct.unpack_from("<4sBBHQdQQQ", buf))
    fields[6], fields[7] = fields[7], fields[6]
    with pytest.raises(ValueError):
        inc.decompress(struct.pack("<4sBBHQdQQQ", *fields) + buf[inc.HEADER_BYTES :])
    # a corrupted tag byte: counts disagree with the header
    corrupt = bytearray(buf)
    corrupt[-1] ^= 0b11
    with pytest.raises(ValueError, match="tags"):
        inc.decompress(bytes(corrupt))


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_workers=st.integers(1, 8),
    size=st.integers(0, 3000),
    bound=st.sampled_from([2.0**-10, 2.0**-16, 1e-2]),
)
def test_ring_allreduce_error_grows_at_most_linearly(
    seed: int, n_workers: int, size: int, bound: float
) -> None:
    xs = [gradient_like(seed + w, size, -6, 0.7) for w in range(n_workers)]
    results, sent = inc.ring_allreduce(xs, bound)
    exact = np.sum([x.astype(np.float64) for x in xs], axis=0)
    # n compressions per chunk + float32 rounding of n-1 additions of partial sums
    partial = np.sum([np.abs(x.astype(np.float64)) for x in xs], axis=0) + n_workers * bound
    tol = n_workers * bound + n_workers * 2.0**-24 * partial
    for r in results:
        assert np.array_equal(r, results[0])
        assert (np.abs(r - exact) <= tol).all()
    assert (sent > 0) == (n_workers > 1)  # headers even for empty chunks
