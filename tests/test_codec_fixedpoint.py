"""Fixed-point codec, the int32 passthrough and the codec protocol in base.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inaemu.common.wire import FRAME_BYTES, INT32_MAX, K, Opcode
from inaemu.hostlib.codecs import (
    CODECS,
    FixedPointCodec,
    Int32Codec,
    Phase,
    PhaseGenerator,
    SumOverflow,
    aggregate_reference,
    bytes_on_wire,
    error_bound,
    frames_on_wire,
    make_codec,
    quantize,
    run_phases,
    simulate_allreduce,
    words_on_wire,
    worst_case_error,
)
from inaemu.hostlib.codecs import fixedpoint as fp

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FLOAT_DTYPES = [np.float32, np.float64]


def make_inputs(
    seed: int, n_workers: int, size: int, dtype: Any, density: float, log2_scale: int, spread: int
) -> list[npt.NDArray[Any]]:
    """Random worker arrays: normal values * 2**log2_scale * 2**U(-spread, spread), sparse."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_workers):
        if np.dtype(dtype) == np.int32:
            lim = INT32_MAX // n_workers
            x: npt.NDArray[Any] = rng.integers(-lim, lim + 1, size, dtype=np.int64)
        else:
            x = rng.standard_normal(size) * 2.0**log2_scale
            if spread:
                x = x * np.exp2(rng.integers(-spread, spread + 1, size))
        out.append(np.where(rng.random(size) < density, x, 0).astype(dtype))
    return out


@st.composite
def worker_inputs(draw: st.DrawFn, dtypes: list[Any] = FLOAT_DTYPES) -> list[npt.NDArray[Any]]:
    dtype = draw(st.sampled_from(dtypes))
    if np.dtype(dtype) == np.float32:
        log2_scale = draw(st.integers(-140, 100))  # down to subnormals; sums stay finite
    else:
        log2_scale = draw(st.integers(-1060, 1000))
    return make_inputs(
        seed=draw(st.integers(0, 2**32 - 1)),
        n_workers=draw(st.integers(1, 8)),
        size=draw(st.one_of(st.integers(0, 300), st.integers(300, 5000))),
        dtype=dtype,
        density=draw(st.sampled_from([0.5, 1.0, 0.05, 0.001, 0.0])),
        log2_scale=log2_scale,
        spread=draw(st.sampled_from([0, 4, 20])),
    )


def exact_sum(xs: list[npt.NDArray[Any]]) -> npt.NDArray[np.float64]:
    # numpy's stubs type a reduction over a list of arrays as Any: name the result's type
    total: npt.NDArray[np.float64] = np.sum([x.astype(np.float64) for x in xs], axis=0)
    return total


def check_within_bound(
    xs: list[npt.NDArray[Any]], result: npt.NDArray[Any], bound: npt.NDArray[np.float64]
) -> None:
    exact = exact_sum(xs)
    # + half an ulp of the output rounding + the float64 reference sum's own rounding
    slack = 0.5 * np.spacing(np.abs(result)).astype(np.float64)
    slack += 8 * np.finfo(np.float64).eps * np.sum([np.abs(x.astype(np.float64)) for x in xs], 0)
    err = np.abs(result.astype(np.float64) - exact)
    assert (err <= bound + slack).all(), float((err - bound - slack).max())


def agreed_exponents(xs: list[npt.NDArray[Any]], block_size: int) -> npt.NDArray[np.int32]:
    agreed: npt.NDArray[np.int32] = np.max(
        [fp.block_exponents(x, block_size) for x in xs], axis=0
    ).astype(np.int32)
    return agreed


# ---- fixed point: properties ---------------------------------------------------------------


@SETTINGS
@given(xs=worker_inputs(), block_size=st.sampled_from([1, 7, 64, 256]))
def test_fixedpoint_within_documented_bound(xs: list[npt.NDArray[Any]], block_size: int) -> None:
    n_workers, n = len(xs), xs[0].size
    results, phases = simulate_allreduce(FixedPointCodec(block_size=block_size), xs)
    for r in results:
        assert r.dtype == xs[0].dtype and r.shape == xs[0].shape
        assert np.array_equal(r.view(np.uint8), results[0].view(np.uint8))  # same on all workers
    if n == 0:
        assert phases == []
        return
    assert [p.opcode for p in phases] == [Opcode.MAX, Opcode.SUM]
    assert words_on_wire(phases) == fp.n_blocks(n, block_size) + n
    exps = agreed_exponents(xs, block_size)
    check_within_bound(xs, results[0], error_bound(exps, n_workers, n, block_size))


@SETTINGS
@given(xs=worker_inputs(), block_size=st.sampled_from([3, 256]))
def test_fixedpoint_decodes_exact_sum_of_quantized(
    xs: list[npt.NDArray[Any]], block_size: int
) -> None:
    n_workers = len(xs)
    results, _ = simulate_allreduce(FixedPointCodec(block_size=block_size), xs)
    exps = agreed_exponents(xs, block_size)
    q = [quantize(x, exps, n_workers, block_size).astype(np.int64) for x in xs]
    total = np.sum(q, axis=0) if q[0].size else np.zeros(0, np.int64)
    assert np.abs(total).max(initial=0) <= 2**30  # the headroom argument
    expected = fp.dequantize(total, exps, n_workers, block_size, 0, xs[0].dtype)
    assert np.array_equal(results[0].view(np.uint8), expected.view(np.uint8))


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    n_workers=st.integers(1, 8),
    size=st.integers(0, 5000),
    density=st.sampled_from([0.0, 0.01, 0.5, 1.0]),
)
def test_int32_round_trips_exactly(seed: int, n_workers: int, size: int, density: float) -> None:
    xs = make_inputs(seed, n_workers, size, np.int32, density, 0, 0)
    expected = np.sum([x.astype(np.int64) for x in xs], axis=0).astype(np.int32)
    for codec in (FixedPointCodec(), Int32Codec()):
        results, phases = simulate_allreduce(codec, xs)
        assert all(r.dtype == np.int32 and np.array_equal(r, expected) for r in results)
        assert [p.opcode for p in phases] == ([Opcode.SUM] if size else [])


# ---- fixed point: formulas and edge cases --------------------------------------------------


def test_scale_and_bound_formulas() -> None:
    assert [fp.headroom_bits(n) for n in (1, 2, 3, 4, 5, 8, 9)] == [0, 1, 2, 2, 3, 3, 4]
    exps = np.array([0, -10, fp.ZERO_BLOCK_EXPONENT], dtype=np.int32)
    # S_b = 30 - E_b - ceil(log2 n): n = 8 -> H = 3
    assert fp.scale_exponents(exps[:2], 8).tolist() == [27, 37]
    bound = error_bound(exps, 8, 5, block_size=2)
    # n * 0.5 * 2**-S = 8 * 2**-28 = 2**-25 for E = 0; 2**-35 for E = -10; 0 for a zero block
    assert bound.tolist() == [2.0**-25, 2.0**-25, 2.0**-35, 2.0**-35, 0.0]


def test_worst_case_error_scalar() -> None:
    assert worst_case_error(0.0, 8) == 0.0
    assert worst_case_error(1.0, 8) == 2.0**-24  # E = 1, H = 3: 2**3 * 2**(1 + 3 - 31)
    assert worst_case_error(0.75, 8) == 2.0**-25  # E = 0
    exps = fp.block_exponents(np.array([0.75, -0.5, 0.01, 1e-9], np.float32), 1)
    assert error_bound(exps, 8, 4, 1).max() == worst_case_error(0.75, 8)
    with pytest.raises(ValueError):
        worst_case_error(float("nan"), 2)


def test_worst_case_values_do_not_overflow() -> None:
    # every worker at the top of the range with the same sign: n * 2**(30-H) <= 2**30
    for n_workers in (1, 2, 3, 5, 8):
        x = np.full(1000, np.nextafter(np.float32(1), np.float32(0)))
        xs = [x, *[x.copy() for _ in range(n_workers - 1)]]
        results, _ = simulate_allreduce(FixedPointCodec(), xs)
        assert np.allclose(results[0], n_workers, rtol=1e-6)
        xs = [-x for x in xs]
        results, _ = simulate_allreduce(FixedPointCodec(), xs)
        assert np.allclose(results[0], -n_workers, rtol=1e-6)


def test_extreme_magnitudes_float64() -> None:
    tiny, huge = 5e-324, 1e300
    x = np.zeros(1024)
    x[:256] = tiny
    x[256:512] = huge
    x[512:768] = np.linspace(-1e-310, 1e-310, 256)  # subnormal block
    x[768] = -np.finfo(np.float64).max / 8
    xs = [x, x * 0.5, -x * 0.25]
    results, _ = simulate_allreduce(FixedPointCodec(), xs)
    exps = agreed_exponents(xs, 256)
    check_within_bound(xs, results[0], error_bound(exps, 3, x.size))


def test_shape_is_preserved_and_input_untouched() -> None:
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((13, 29)).astype(np.float32) for _ in range(3)]
    copies = [x.copy() for x in xs]
    results, _ = simulate_allreduce(FixedPointCodec(block_size=16), xs)
    assert results[0].shape == (13, 29)
    assert all(np.array_equal(a, b) for a, b in zip(xs, copies, strict=True))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_non_finite_rejected_eagerly(bad: float, dtype: Any) -> None:
    x = np.ones(700, dtype=dtype)
    x[513] = bad
    with pytest.raises(ValueError, match="non-finite"):
        FixedPointCodec().phases(x, 2)  # before any phase is produced


@pytest.mark.parametrize("dtype", [np.int64, np.float16, np.complex64, np.uint8])
def test_unsupported_dtype_rejected(dtype: Any) -> None:
    with pytest.raises(TypeError):
        FixedPointCodec().phases(np.zeros(4, dtype=dtype), 1)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        FixedPointCodec().phases(np.zeros(4, np.float32), 0)
    with pytest.raises(ValueError):
        FixedPointCodec(block_size=0)
    with pytest.raises(ValueError, match="exponent"):
        quantize(np.array([4.0]), np.array([1], np.int32), 1)  # 4.0 needs exponent 3
    with pytest.raises(ValueError, match="exponents"):
        quantize(np.ones(10), np.zeros(2, np.int32), 1, block_size=4)  # needs 3
    with pytest.raises(ValueError):
        make_codec("nope")


def test_inconsistent_max_result_detected() -> None:
    gen = FixedPointCodec().phases(np.ones(10, np.float32), 1)
    phase = next(gen)
    with pytest.raises(ValueError, match="inconsistent"):
        gen.send(phase.values - 1)


# ---- overflow signalling -------------------------------------------------------------------


class UnderCountingCodec:
    """Every worker claims to be alone: the fixed-point scale leaves no headroom."""

    name = "liar"

    def __init__(self, inner: FixedPointCodec) -> None:
        self.inner = inner

    def phases(self, x: npt.NDArray[np.generic], n_workers: int) -> PhaseGenerator:
        return self.inner.phases(x, 1)


def test_overflow_retries_with_halved_scale() -> None:
    x = np.full(600, 0.99, dtype=np.float32)
    xs = [x.copy() for _ in range(8)]
    for other in xs[1:]:
        other[300:] = 0.01  # blocks 3..5: one large value and seven small ones fit
    results, phases = simulate_allreduce(UnderCountingCodec(FixedPointCodec(block_size=100)), xs)
    # q = rint(0.99 * 2**30) per worker: 8 of them need two halvings to fit below 2**31
    assert [p.opcode for p in phases] == [Opcode.MAX, Opcode.SUM, Opcode.SUM, Opcode.SUM]
    assert np.allclose(results[0], exact_sum(xs), rtol=1e-6)
    # only the flagged blocks were halved: the others kept their full precision
    assert (phases[1].values[:300] == np.rint(float(np.float32(0.99)) * 2**30)).all()
    assert (phases[-1].values[:300] == np.rint(float(np.float32(0.99)) * 2**28)).all()
    assert np.array_equal(phases[-1].values[300:], phases[1].values[300:])


def test_overflow_propagates_when_retries_exhausted() -> None:
    xs = [np.full(10, 0.99, dtype=np.float32) for _ in range(8)]
    with pytest.raises(SumOverflow, match="halving"):
        simulate_allreduce(UnderCountingCodec(FixedPointCodec(max_backoff=1)), xs)


def test_int32_overflow_raises_sum_overflow() -> None:
    xs = [np.array([INT32_MAX, 1, -5], np.int32), np.array([1, 1, -5], np.int32)]
    for codec in (FixedPointCodec(), Int32Codec()):
        with pytest.raises(SumOverflow) as info:
            simulate_allreduce(codec, xs)
        assert info.value.lanes is not None and info.value.lanes.tolist() == [True, False, False]


def test_partial_sum_overflow_is_flagged_in_arrival_order() -> None:
    a = np.array([INT32_MAX, 5], np.int32)
    b = np.array([1, 5], np.int32)
    c = np.array([-10, 5], np.int32)
    _, overflowed = aggregate_reference(Opcode.SUM, [a, b, c])  # MAX+1 saturates before -10
    assert overflowed
    agg, overflowed = aggregate_reference(Opcode.SUM, [a, c, b])
    assert not overflowed and agg.tolist() == [INT32_MAX - 9, 15]


def test_run_phases_driver_and_accounting() -> None:
    x = np.linspace(-1, 1, 1000).astype(np.float32)
    sent: list[Phase] = []

    def allreduce(phase: Phase) -> tuple[npt.NDArray[np.int32], bool]:
        sent.append(phase)
        agg, overflowed = aggregate_reference(phase.opcode, [phase.values, phase.values])
        return agg, overflowed

    result = run_phases(FixedPointCodec().phases(x, 2), allreduce)
    assert np.allclose(result, 2 * x, atol=1e-6)
    assert words_on_wire(sent) == 4 + 1000
    assert frames_on_wire(sent) == 1 + -(-1000 // K)
    assert bytes_on_wire(sent) == 4 * 1004
    assert bytes_on_wire(sent, framed=True) == frames_on_wire(sent) * FRAME_BYTES
    # an empty array produces no phase at all
    assert run_phases(FixedPointCodec().phases(np.zeros(0, np.float32), 2), allreduce).size == 0


def test_registry() -> None:
    assert set(CODECS) == {"int32", "fixedpoint", "sketch", "sketch-compact"}
    for name, factory in CODECS.items():
        assert factory().name == name
    assert make_codec("fixedpoint", block_size=32).phases is not None
