"""Sketch codec (bitmap OR + exponent MAX + count-sketch SUM, exact peeling)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from inaemu.common.wire import INT32_MAX, Opcode
from inaemu.hostlib.codecs import (
    FixedPointCodec,
    PeelingFailed,
    Phase,
    SketchCodec,
    SketchCorrupt,
    SumOverflow,
    error_bound,
    simulate_allreduce,
    words_on_wire,
)
from inaemu.hostlib.codecs import fixedpoint as fp
from inaemu.hostlib.codecs import sketch as sk

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make_inputs(
    seed: int, n_workers: int, size: int, dtype: Any, density: float, log2_scale: int = 0
) -> list[npt.NDArray[Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_workers):
        if np.dtype(dtype) == np.int32:
            lim = INT32_MAX // n_workers
            x: npt.NDArray[Any] = rng.integers(-lim, lim + 1, size, dtype=np.int64)
        else:
            x = rng.standard_normal(size) * np.exp2(log2_scale + rng.integers(-8, 9, size))
        out.append(np.where(rng.random(size) < density, x, 0).astype(dtype))
    return out


@st.composite
def worker_inputs(draw: st.DrawFn, dtypes: tuple[Any, ...] = (np.float32, np.float64)) -> Any:
    dtype = draw(st.sampled_from(dtypes))
    return make_inputs(
        seed=draw(st.integers(0, 2**32 - 1)),
        n_workers=draw(st.integers(1, 8)),
        size=draw(st.one_of(st.integers(1, 400), st.integers(400, 5000))),
        dtype=dtype,
        density=draw(st.sampled_from([0.05, 0.01, 0.2, 0.001, 0.5, 1.0, 0.0])),
        log2_scale=draw(st.integers(-100, 100)),
    )


def expected_result(
    xs: list[npt.NDArray[Any]], codec: SketchCodec, phases: list[Phase]
) -> npt.NDArray[Any]:
    """Recompute, from the public helpers only, what the codec must decode bit for bit."""
    n_workers, n, dtype = len(xs), xs[0].size, xs[0].dtype
    union = np.flatnonzero(np.any([x != 0 for x in xs], axis=0))
    out = np.zeros(n, dtype=dtype)
    if union.size == 0:
        return out
    last = phases[-1].label
    if dtype == np.int32:
        assert last.endswith(".compact")
        out[union] = np.sum([x[union].astype(np.int64) for x in xs], axis=0)
        return out
    exps = np.max([fp.block_exponents(x[union], codec.block_size) for x in xs], axis=0)
    if last.endswith(".compact"):
        n_terms, layout = n_workers, None
    else:
        attempt = int(last.split("#")[1])
        table = sk.table_size(
            union.size, attempt, codec.ratio, codec.growth, codec.slack_sqrt, codec.slack_const
        )
        layout = sk.sketch_layout(union, table, attempt, codec.seed)
        n_terms = n_workers * layout.max_load
    q = [fp.quantize(x[union], exps, n_terms, codec.block_size).astype(np.int64) for x in xs]
    total = np.sum(q, axis=0)
    if layout is not None:
        # the integer level: the aggregated sketch peels to exactly the sum of the q's
        cells = np.sum([sk.encode_sketch(qi, layout).astype(np.int64) for qi in q], axis=0)
        assert np.abs(cells).max() <= 2**30  # the cell-load headroom argument
        peeled = sk.peel(cells, layout)
        assert peeled is not None and np.array_equal(peeled, total)
    out[union] = fp.dequantize(total, exps, n_terms, codec.block_size, 0, dtype)
    return out


def run(codec: SketchCodec, xs: list[npt.NDArray[Any]]) -> tuple[npt.NDArray[Any], list[Phase]]:
    results, phases = simulate_allreduce(codec, xs)
    for r in results[1:]:
        assert np.array_equal(r.view(np.uint8), results[0].view(np.uint8))
    return results[0], phases


# ---- properties ----------------------------------------------------------------------------


@SETTINGS
@given(xs=worker_inputs(dtypes=(np.float32, np.float64, np.int32)))
def test_decode_is_exact_sum_of_fixed_point_ints(xs: list[npt.NDArray[Any]]) -> None:
    codec = SketchCodec()
    result, phases = run(codec, xs)
    event(phases[-1].label.split("#")[0] if phases else "no phases")
    assert result.dtype == xs[0].dtype and result.shape == xs[0].shape
    expected = expected_result(xs, codec, phases)
    assert np.array_equal(result.view(np.uint8), expected.view(np.uint8))


@SETTINGS
@given(xs=worker_inputs())
def test_within_fixed_point_bound(xs: list[npt.NDArray[Any]]) -> None:
    codec = SketchCodec(block_size=64)
    result, phases = run(codec, xs)
    n_workers, n = len(xs), xs[0].size
    union = np.flatnonzero(np.any([x != 0 for x in xs], axis=0))
    exact = np.sum([x.astype(np.float64) for x in xs], axis=0)
    assert (result[np.setdiff1d(np.arange(n), union)] == 0).all()
    if union.size == 0:
        assert [p.opcode for p in phases] == ([Opcode.OR] if n else [])
        return
    exps = np.max([fp.block_exponents(x[union], 64) for x in xs], axis=0)
    sum_phase = phases[-1]
    n_terms = n_workers
    if not sum_phase.label.endswith(".compact"):
        attempt = int(sum_phase.label.split("#")[1])
        layout = sk.sketch_layout(union, sk.table_size(union.size, attempt), attempt)
        n_terms *= layout.max_load
    bound = error_bound(exps, n_workers, union.size, 64, n_terms=n_terms)
    slack = 0.5 * np.spacing(np.abs(result[union])).astype(np.float64)
    slack += 8 * np.finfo(np.float64).eps * np.abs(exact[union])
    assert (np.abs(result[union] - exact[union]) <= bound + slack).all()


# ---- wire cost -----------------------------------------------------------------------------


def test_bytes_fall_with_sparsity() -> None:
    n = 100_000
    words = {}
    for density in (0.001, 0.01, 0.1, 1.0):
        xs = make_inputs(7, 1, n, np.float32, density)
        result, phases = run(SketchCodec(), xs)
        assert np.array_equal(result, expected_result(xs, SketchCodec(), phases))
        words[density] = words_on_wire(phases)
    assert words[0.001] < words[0.01] < words[0.1] < words[1.0]
    assert words[0.01] < 0.10 * n  # 1% density: under 10% of the dense vector
    assert words[1.0] <= n + n // 32 + n // 256 + 1  # dense: fallback, bitmap + exps + values


def test_union_over_workers_sizes_the_sketch() -> None:
    n, n_workers = 50_000, 4
    xs = make_inputs(11, n_workers, n, np.float32, 0.005)
    _, phases = run(SketchCodec(), xs)
    u = int(np.count_nonzero(np.any([x != 0 for x in xs], axis=0)))
    assert [p.opcode for p in phases] == [Opcode.OR, Opcode.MAX, Opcode.SUM]
    assert [p.values.size for p in phases] == [
        -(-n // 32),
        -(-u // 256),
        3 * sk.table_size(u, 0),
    ]
    assert phases[2].values.size >= 1.25 * u


def test_dense_fallback_and_compact_payload() -> None:
    xs = make_inputs(5, 3, 2000, np.float32, 0.9)
    result, phases = run(SketchCodec(), xs)
    assert phases[-1].label == "sketch.compact"  # 1.25u + bitmap >= n
    u = int(np.count_nonzero(np.any([x != 0 for x in xs], axis=0)))
    assert phases[-1].values.size == u <= 2000
    assert np.array_equal(result, expected_result(xs, SketchCodec(), phases))
    # payload="compact": the union's values (u words) even when sparse
    xs = make_inputs(5, 3, 20_000, np.float64, 0.01)
    codec = SketchCodec(payload="compact")
    result, phases = run(codec, xs)
    assert phases[-1].label == "sketch-compact.compact"
    assert np.array_equal(result, expected_result(xs, codec, phases))
    # compact has the fixed-point codec's scale, hence its precision: identical result
    fixed, _ = simulate_allreduce(
        FixedPointCodec(), [x[np.any([y != 0 for y in xs], 0)] for x in xs]
    )
    assert np.array_equal(result[np.any([y != 0 for y in xs], 0)], fixed[0])


# ---- peeling retries -----------------------------------------------------------------------


def test_peeling_failure_retries_with_larger_sketch_and_stays_exact() -> None:
    xs = make_inputs(3, 4, 30_000, np.float32, 0.02)
    codec = SketchCodec(ratio=0.2, growth=2.0, slack_sqrt=0, slack_const=0, max_retries=8)
    result, phases = run(codec, xs)
    sums = [p for p in phases if p.opcode == Opcode.SUM]
    assert len(sums) >= 3  # m < u cannot peel: at least attempts at 0.2u, 0.4u, 0.8u fail
    assert [p.values.size for p in sums] == sorted(p.values.size for p in sums)
    assert sums[-1].label.startswith("sketch.cells#")  # ended as a sketch, not the fallback
    assert np.array_equal(result.view(np.uint8), expected_result(xs, codec, phases).view(np.uint8))


def test_peeling_gives_up_with_clear_error() -> None:
    xs = make_inputs(3, 2, 30_000, np.float32, 0.02)
    codec = SketchCodec(ratio=0.2, growth=1.0, slack_sqrt=0, slack_const=0, max_retries=2)
    with pytest.raises(PeelingFailed, match="failed 3 times"):
        simulate_allreduce(codec, xs)


def test_peel_unit() -> None:
    rng = np.random.default_rng(0)
    union = np.sort(rng.choice(10**6, 5000, replace=False))
    values = rng.integers(-(2**20), 2**20, union.size)
    layout = sk.sketch_layout(union, sk.table_size(union.size, 0))
    cells = sk.encode_sketch(values, layout)
    assert cells.size == layout.m >= 1.25 * union.size
    peeled = sk.peel(cells, layout)
    assert peeled is not None and np.array_equal(peeled, values)
    # m < u can never peel: None, not a guess
    small = sk.sketch_layout(union, union.size // 4)
    assert sk.peel(sk.encode_sketch(values, small), small) is None
    # a cell holding a value no member accounts for is detected
    bad = cells.copy()
    bad[np.flatnonzero(layout.loads == 0)[0]] += 1
    with pytest.raises(SketchCorrupt):
        sk.peel(bad, layout)


def test_hashes_are_deterministic_and_fresh_per_attempt() -> None:
    union = np.arange(0, 3_000_000, 7)
    a = sk.sketch_layout(union, 1000, attempt=0)
    b = sk.sketch_layout(union.copy(), 1000, attempt=0)
    c = sk.sketch_layout(union, 1000, attempt=1)
    assert np.array_equal(a.cells, b.cells) and not np.array_equal(a.cells, c.cells)
    for k in range(3):  # one cell per sub-table, roughly uniform
        assert ((a.cells[k] >= k * 1000) & (a.cells[k] < (k + 1) * 1000)).all()
        counts = np.bincount(a.cells[k] - k * 1000, minlength=1000)
        assert counts.min() > 0.5 * counts.mean() and counts.max() < 2 * counts.mean()
    assert sk.hash_seeds(sk.DEFAULT_SEED, 0) == sk.hash_seeds(sk.DEFAULT_SEED, 0)


def test_bitmap_bit_order() -> None:
    x = np.zeros(70, np.float32)
    x[[0, 31, 32, 69]] = 1.0
    words = sk.nonzero_bitmap(x)
    assert words.dtype == np.int32 and words.size == 3
    assert words.view(np.uint32).tolist() == [1 | (1 << 31), 1, 1 << 5]
    assert sk.union_indices(words, 70).tolist() == [0, 31, 32, 69]


# ---- edge cases ----------------------------------------------------------------------------


def test_all_zero_and_empty() -> None:
    xs = [np.zeros(1000, np.float32) for _ in range(3)]
    result, phases = run(SketchCodec(), xs)
    assert [p.opcode for p in phases] == [Opcode.OR] and not result.any()
    result, phases = run(SketchCodec(), [np.zeros(0, np.float64)] * 2)
    assert phases == [] and result.size == 0


def test_negative_zero_is_zero() -> None:
    x = np.array([-0.0, 1.0, -0.0, 0.0], np.float32)
    result, phases = run(SketchCodec(), [x, x])
    assert result.tolist() == [0.0, 2.0, 0.0, 0.0]
    assert phases[0].values.tolist() == [0b10]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_rejected(bad: float) -> None:
    x = np.zeros(100, np.float64)
    x[50] = bad
    with pytest.raises(ValueError, match="non-finite"):
        SketchCodec().phases(x, 2)


def test_int32_overflow_raises() -> None:
    xs = [np.array([0, INT32_MAX, 3], np.int32), np.array([0, 1, 3], np.int32)]
    with pytest.raises(SumOverflow):
        simulate_allreduce(SketchCodec(), xs)


def test_bad_parameters() -> None:
    for kwargs in (
        {"ratio": 0},
        {"growth": 0.9},
        {"max_retries": -1},
        {"payload": "dense"},
        {"block_size": 0},
        {"slack_sqrt": -1},
    ):
        with pytest.raises(ValueError):
            SketchCodec(**kwargs)
    with pytest.raises(TypeError):
        SketchCodec().phases(np.zeros(3, np.int16), 1)


def test_dense_union_through_failed_sketches_falls_back_exactly() -> None:
    xs = make_inputs(9, 3, 5000, np.float32, 1.0)
    codec = SketchCodec(ratio=0.5, slack_sqrt=0, slack_const=0)
    result, phases = run(codec, xs)
    assert [p.label for p in phases] == [
        "sketch.bitmap",
        "sketch.exponents",
        "sketch.cells#0",  # 0.5u cells: cannot peel
        "sketch.cells#1",  # 0.75u cells: cannot peel
        "sketch.compact",  # 1.125u + bitmap >= n: the dense fallback
    ]
    assert np.array_equal(result.view(np.uint8), expected_result(xs, codec, phases).view(np.uint8))


class UnderCountingSketch:
    """Every worker claims to be alone: the sketch's scale leaves too little headroom."""

    name = "liar"

    def __init__(self, inner: SketchCodec) -> None:
        self.inner = inner

    def phases(self, x: npt.NDArray[np.generic], n_workers: int) -> Any:
        return self.inner.phases(x, 1)


def test_overflow_retries_with_halved_scale() -> None:
    x = np.zeros(4000, np.float32)
    x[::40] = 0.99  # 100 members, all at the top of their block
    xs = [x.copy() for _ in range(8)]
    results, phases = simulate_allreduce(UnderCountingSketch(SketchCodec()), xs)
    sums = [p.label for p in phases if p.opcode == Opcode.SUM]
    assert len(sums) >= 2 and len(set(sums)) == 1  # the same sketch, re-sent at a lower scale
    assert np.allclose(results[0], 8 * x, rtol=1e-6)
    with pytest.raises(SumOverflow, match="halving"):
        simulate_allreduce(UnderCountingSketch(SketchCodec(max_backoff=0)), xs)
