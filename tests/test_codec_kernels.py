"""The compiled codec kernels (compiled=True, the default) against the numpy reference
(compiled=False): the same bits for every input, function by function and codec by codec."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inaemu.common.wire import INT32_MAX, Opcode
from inaemu.hostlib.codecs import (
    FixedPointCodec,
    HomomorphicCodec,
    Phase,
    SketchCodec,
    SketchCorrupt,
    _kernels,
    inceptionn,
    simulate_allreduce,
)
from inaemu.hostlib.codecs import fixedpoint as fp
from inaemu.hostlib.codecs import sketch as sk
from inaemu.hostlib.codecs._util import ScratchPool

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FLOATS = [np.float32, np.float64]
SIZES = st.one_of(st.integers(0, 70), st.integers(70, 3000))


def same_bits(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@contextmanager
def streaming(on: bool) -> Iterator[None]:
    """Within: outputs of any size take quantize's streamed-store path if `on`."""
    with pytest.MonkeyPatch.context() as patch:
        if on:
            patch.setattr(_kernels, "STREAM_MIN_BYTES", 0)
        yield


def random_floats(rng: np.random.Generator, size: int, dtype: Any) -> npt.NDArray[Any]:
    """Finite floats of every kind: normals over the whole exponent range, subnormals, +-0,
    the largest finite values, on sparse or dense supports."""
    fi = np.finfo(dtype)
    kind = rng.integers(0, 4)
    if kind == 0:  # one scale, gradient-like
        x = rng.standard_normal(size) * 2.0 ** int(rng.integers(fi.minexp - 20, fi.maxexp - 4))
    else:  # every exponent at once, from subnormal to the largest
        bits = rng.integers(0, 1 << (fi.bits - 1), size, dtype=np.uint64)
        with np.errstate(invalid="ignore"):  # NaN patterns, replaced below
            x = bits.astype(f"u{fi.bits // 8}").view(dtype).astype(np.float64)
        x[~np.isfinite(x)] = fi.max
        x *= rng.choice([-1.0, 1.0], size)
    x = x.astype(dtype)
    x[rng.random(size) < rng.choice([0.0, 0.5, 0.99])] = 0
    x[rng.random(size) < 0.05] = -0.0
    x[rng.random(size) < 0.01] = fi.max * rng.choice([-1, 1])
    return x


@st.composite
def float_arrays(draw: st.DrawFn) -> npt.NDArray[Any]:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return random_floats(rng, draw(SIZES), draw(st.sampled_from(FLOATS)))


# ---- fixed point ---------------------------------------------------------------------------


@SETTINGS
@given(x=float_arrays(), block_size=st.sampled_from([1, 3, 32, 256]))
def test_block_exponents(x: npt.NDArray[Any], block_size: int) -> None:
    assert same_bits(
        fp.block_exponents(x, block_size), fp.block_exponents(x, block_size, compiled=False)
    )


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", FLOATS)
def test_non_finite_rejected_alike(bad: float, dtype: Any) -> None:
    x = np.ones(1001, dtype)
    x[777] = bad
    messages = []
    for compiled in (True, False):
        with pytest.raises(ValueError) as info:
            fp.block_exponents(x, 256, compiled=compiled)
        messages.append(str(info.value))
        for codec in (FixedPointCodec(compiled=compiled), SketchCodec(compiled=compiled)):
            with pytest.raises(ValueError) as info:
                codec.phases(x, 2)
            messages.append(str(info.value))
    assert messages[:3] == messages[3:] and "777" in messages[0]


@SETTINGS
@given(
    x=float_arrays(),
    block_size=st.sampled_from([1, 5, 256]),
    n_terms=st.integers(1, 3000),
    seed=st.integers(0, 2**32 - 1),
    streamed=st.booleans(),
)
def test_quantize(
    x: npt.NDArray[Any], block_size: int, n_terms: int, seed: int, streamed: bool
) -> None:
    rng = np.random.default_rng(seed)
    exps = fp.block_exponents(x, block_size)
    nonzero = exps != fp.ZERO_BLOCK_EXPONENT
    exps[nonzero] += rng.integers(0, 3, exps.size)[nonzero]  # other workers' larger blocks
    backoff = rng.integers(0, 4, exps.size)
    with streaming(streamed):
        fast = fp.quantize(x, exps, n_terms, block_size, backoff)
    assert same_bits(fast, fp.quantize(x, exps, n_terms, block_size, backoff, compiled=False))


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    size=SIZES,
    block_size=st.sampled_from([1, 7, 256]),
    n_terms=st.integers(1, 3000),
    total_dtype=st.sampled_from([np.int32, np.int64, ">i4"]),
    dtype=st.sampled_from(FLOATS),
)
def test_dequantize(
    seed: int, size: int, block_size: int, n_terms: int, total_dtype: Any, dtype: Any
) -> None:
    """Any integers at any exponents (sums that overflow to inf, subnormal results, garbage in
    zero blocks), with chunks of blocks mixing the fast and the float64 path."""
    rng = np.random.default_rng(seed)
    total = rng.integers(-(2**31), 2**31, size).astype(total_dtype)
    total[rng.random(size) < 0.3] = 0
    nb = fp.n_blocks(size, block_size)
    exps = rng.integers(-1080, fp.MAX_BLOCK_EXPONENT + 1, nb)
    near = rng.random(nb) < 0.7  # around float32's range, where its fast path ends
    exps[near] = rng.integers(-160, 160, int(near.sum()))
    exps[rng.random(nb) < 0.1] = fp.ZERO_BLOCK_EXPONENT
    backoff = rng.integers(0, 4, nb)
    args = (total, exps, n_terms, block_size, backoff, dtype)
    assert same_bits(fp.dequantize(*args), fp.dequantize(*args, compiled=False))


# ---- sketch --------------------------------------------------------------------------------


@SETTINGS
@given(x=float_arrays(), as_int=st.booleans())
def test_nonzero_bitmap(x: npt.NDArray[Any], as_int: bool) -> None:
    if as_int:
        x = x.view(np.int32) if x.dtype == np.float32 else x.view(np.int32)[::2].copy()
    assert same_bits(sk.nonzero_bitmap(x), sk.nonzero_bitmap(x, compiled=False))


@st.composite
def layouts(draw: st.DrawFn) -> tuple[sk.SketchLayout, npt.NDArray[np.int64]]:
    """A union of u members of [0, 10**7), a table from far too small to roomy, an attempt."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    u = draw(st.one_of(st.integers(0, 30), st.integers(30, 5000)))
    union = np.sort(rng.choice(10**7, u, replace=False)).astype(np.int64)
    table = max(1, int(u * draw(st.sampled_from([0.2, 0.4, 0.45, 1.0])) + draw(st.integers(0, 9))))
    attempt = draw(st.integers(0, 5))
    layout = sk.sketch_layout(union, table, attempt)
    reference = sk.sketch_layout(union, table, attempt, compiled=False)
    assert same_bits(layout.cells, reference.cells) and same_bits(layout.loads, reference.loads)
    return layout, union


def peel_outcome(cells: npt.NDArray[Any], layout: sk.SketchLayout, compiled: bool) -> object:
    try:
        return sk.peel(cells, layout, compiled=compiled)
    except SketchCorrupt as exc:
        return str(exc)


@SETTINGS
@given(case=layouts(), seed=st.integers(0, 2**32 - 1), corrupt=st.integers(0, 3))
def test_sketch_encode_and_peel(
    case: tuple[sk.SketchLayout, npt.NDArray[np.int64]], seed: int, corrupt: int
) -> None:
    """Same cells, and the same peeling outcome (values, None for a stall, or the same
    SketchCorrupt) on consistent sketches and on ones with `corrupt` cells changed."""
    layout, union = case
    rng = np.random.default_rng(seed)
    limit = (2**31 - 1) // max(1, layout.max_load)
    values = rng.integers(-limit, limit + 1, union.size).astype(np.int32)
    cells = sk.encode_sketch(values, layout)
    assert same_bits(cells, sk.encode_sketch(values, layout, compiled=False))
    bad = cells.astype(np.int64)
    if corrupt and bad.size:
        hit = rng.integers(0, bad.size, corrupt)
        bad[hit] += rng.integers(-3, 4, corrupt)
    fast, reference = peel_outcome(bad, layout, True), peel_outcome(bad, layout, False)
    if isinstance(reference, np.ndarray):
        assert isinstance(fast, np.ndarray) and same_bits(fast, reference)
    else:
        assert fast == reference


def test_encode_sketch_overflow_alike() -> None:
    layout = sk.sketch_layout(np.arange(4), 1)  # every member in the same 3 cells
    values = np.full(4, INT32_MAX // 2, np.int32)
    for compiled in (True, False):
        with pytest.raises(OverflowError):
            sk.encode_sketch(values, layout, compiled=compiled)


# ---- whole codecs --------------------------------------------------------------------------


@st.composite
def worker_inputs(draw: st.DrawFn) -> list[npt.NDArray[Any]]:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_workers, size = draw(st.integers(1, 8)), draw(SIZES)
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int32]))
    if dtype == np.int32:
        lim = INT32_MAX // n_workers
        xs = [rng.integers(-lim, lim + 1, size).astype(np.int32) for _ in range(n_workers)]
        for x in xs:
            x[rng.random(size) < draw(st.sampled_from([0.0, 0.9, 0.999]))] = 0
        return xs
    # the same huge / tiny magnitudes on every worker: sums reach the top of the range
    scale = random_floats(rng, size, dtype)
    return [
        (scale * rng.random(size).astype(dtype)) * (rng.random(size) < rng.random())
        for _ in range(n_workers)
    ]


def run_both(
    make: Any, xs: list[npt.NDArray[Any]]
) -> tuple[list[npt.NDArray[Any]], list[Phase], list[npt.NDArray[Any]], list[Phase]]:
    fast: HomomorphicCodec = make(True)
    reference: HomomorphicCodec = make(False)
    results, phases = simulate_allreduce(fast, xs)
    ref_results, ref_phases = simulate_allreduce(reference, xs)
    return results, phases, ref_results, ref_phases


def check_same_run(make: Any, xs: list[npt.NDArray[Any]]) -> None:
    with np.errstate(over="ignore", invalid="ignore"):
        results, phases, ref_results, ref_phases = run_both(make, xs)
    assert [(p.opcode, p.label) for p in phases] == [(p.opcode, p.label) for p in ref_phases]
    # worker 0's phases: its last one may be a reused buffer by now only if another run of
    # the same codec started, which it did not
    assert all(same_bits(p.values, r.values) for p, r in zip(phases, ref_phases, strict=True))
    assert all(same_bits(a, b) for a, b in zip(results, ref_results, strict=True))


@SETTINGS
@given(xs=worker_inputs(), block_size=st.sampled_from([1, 64, 256]), streamed=st.booleans())
def test_fixedpoint_codec(xs: list[npt.NDArray[Any]], block_size: int, streamed: bool) -> None:
    with streaming(streamed):
        check_same_run(
            lambda compiled: FixedPointCodec(block_size=block_size, compiled=compiled), xs
        )


@SETTINGS
@given(xs=worker_inputs(), payload=st.sampled_from(["sketch", "compact"]))
def test_sketch_codec(xs: list[npt.NDArray[Any]], payload: sk.Payload) -> None:
    check_same_run(
        lambda compiled: SketchCodec(block_size=64, payload=payload, compiled=compiled), xs
    )


def test_sketch_codec_retries_alike() -> None:
    rng = np.random.default_rng(1)
    xs = [np.where(rng.random(30_000) < 0.02, rng.standard_normal(30_000), 0) for _ in range(4)]
    check_same_run(
        lambda compiled: SketchCodec(
            ratio=0.2, growth=2.0, slack_sqrt=0, slack_const=0, compiled=compiled
        ),
        [x.astype(np.float32) for x in xs],
    )


# ---- phase buffers -------------------------------------------------------------------------


def sum_phase_values(codec: HomomorphicCodec, x: npt.NDArray[Any]) -> npt.NDArray[np.int32]:
    _, phases = simulate_allreduce(codec, [x])
    values: npt.NDArray[np.int32] = [p for p in phases if p.opcode == Opcode.SUM][-1].values
    return values


@pytest.mark.parametrize(
    "make",
    [
        lambda compiled: FixedPointCodec(compiled=compiled),
        lambda compiled: SketchCodec(compiled=compiled),
        lambda compiled: SketchCodec(payload="compact", compiled=compiled),
    ],
)
def test_sum_phase_buffers_are_reused_across_allreduces(make: Any) -> None:
    x = np.linspace(-1, 1, 5000).astype(np.float32)
    x[::3] = 0
    codec = make(True)
    first = sum_phase_values(codec, x)
    second = sum_phase_values(codec, x)
    assert np.shares_memory(first, second)  # the same pages, no fresh allocation
    assert same_bits(second, sum_phase_values(make(False), x))
    reference = make(False)
    assert not np.shares_memory(sum_phase_values(reference, x), sum_phase_values(reference, x))


def test_scratch_pool_bounds() -> None:
    pool = ScratchPool(keep=1, sizes=2)
    a, b = pool.take(10), pool.take(10)
    pool.give(a)
    pool.give(b)  # one of size 10 is kept
    assert pool.take(10) is a and pool.take(10) is not b
    pool.give(np.empty(20, np.int32))
    pool.give(np.empty(30, np.int32))  # a third size: the older sizes are dropped
    assert pool.take(20).size == 20 and len(pool._free) == 1


# ---- INCEPTIONN ----------------------------------------------------------------------------


def decompress_outcome(buf: bytes, compiled: bool) -> object:
    try:
        return inceptionn.decompress(buf, compiled=compiled).tobytes()
    except ValueError as exc:
        return str(exc)


@SETTINGS
@given(
    x=float_arrays(),
    log2_bound=st.floats(-130, 1.5),
    seed=st.integers(0, 2**32 - 1),
    tamper=st.integers(0, 2),
)
def test_inceptionn(x: npt.NDArray[Any], log2_bound: float, seed: int, tamper: int) -> None:
    """The same bytes from compress, and from decompress the same floats (or the same error
    once tags are tampered with)."""
    with np.errstate(over="ignore"):  # float64's largest values become inf
        x = np.nan_to_num(x.astype(np.float32), posinf=1.0, neginf=-1.0)
    bound = 2.0**log2_bound
    buf = inceptionn.compress(x, bound)
    assert buf == inceptionn.compress(x, bound, compiled=False)
    raw = bytearray(buf)
    rng = np.random.default_rng(seed)
    tags_at = len(raw) - -(-x.size // 4)
    for at in rng.integers(tags_at, len(raw), tamper if len(raw) > tags_at else 0):
        raw[at] ^= int(rng.integers(1, 256))
    assert decompress_outcome(bytes(raw), True) == decompress_outcome(bytes(raw), False)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_inceptionn_non_finite_rejected_alike(bad: float) -> None:
    x = np.zeros(100, np.float32)
    x[42] = bad
    messages = []
    for compiled in (True, False):
        with pytest.raises(ValueError) as info:
            inceptionn.compress(x, compiled=compiled)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
