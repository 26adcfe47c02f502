"""The client's and the transports' compiled kernels (hostlib/kernels.py) against the numpy and
record-by-record references they replace: the same bytes, and the same changes to the
exchange's state, for any batch; a whole exchange behaves the same either way."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inaemu.common.loopback import RECORD_HEADER, WireDir, split_records
from inaemu.common.wire import (
    FRAME_BYTES,
    INA_BYTES,
    INA_DTYPE,
    INA_OFFSET,
    Endpoint,
    FrameTemplate,
    K,
    Opcode,
    pack_frames,
)
from inaemu.hostlib import kernels
from inaemu.hostlib.client import SMALL_BATCH, InaClient, InaRunError, _Exchange
from inaemu.hostlib.transport import LoopbackWireTransport, framed, ina_payloads
from tests.test_client_batches import WINDOW, Nowhere, exchange, results, state
from tests.test_congestion import SimSwitch, sim_client

# ---------------------------------------------------------------------- payloads


@given(
    st.integers(1, 5 * K),
    st.integers(0, 3 * 65536),
    st.sampled_from([(1, 1), (2, 2), (8, 4), (64, 1), (64, 4), (70, 7)]),
    st.integers(0, 0xFFFF),
    st.sampled_from(list(Opcode)),
    st.integers(0, 0xFFFF),
    st.integers(0, 2**32 - 1),
    st.integers(0, 0xFFFF),
)
@settings(max_examples=200, deadline=None)
def test_compiled_payloads_are_the_reference_bytes(
    n: int,
    first: int,
    window_trees: tuple[int, int],
    run: int,
    opcode: Opcode,
    job: int,
    seed: int,
    contrib: int,
) -> None:
    window, trees = window_trees
    values = np.random.default_rng(seed).integers(-(2**31), 2**31, n, dtype=np.int64)
    flat = values.astype(np.int32)
    n_chunks = -(-n // K)
    out = {}
    for compiled in (True, False):
        c = InaClient(
            Nowhere(), job_id=job, window=window, n_trees=trees, run=run, compiled=compiled
        )
        out[compiled] = c._payloads(flat, first, n_chunks, opcode, run, contrib)
    assert out[True].dtype == out[False].dtype == INA_DTYPE
    assert out[True].tobytes() == out[False].tobytes()
    sim = FramedSim(1)
    framed = InaClient(sim, job_id=job, window=window, n_trees=trees, run=run)
    frames, payloads = framed._frames(sim, flat, first, n_chunks, opcode, run, contrib)
    assert payloads.tobytes() == out[False].tobytes()
    assert (frames[:, : len(HEAD)] == HEAD).all()
    assert frames[:, len(HEAD) :].tobytes() == out[False].tobytes()


# ---------------------------------------------------------------------- a batch of results

CHUNK = st.integers(-1, WINDOW - 1)  # -1: a record of another job


def reference(ex: _Exchange, numpy: bool) -> _Exchange:
    """`ex` taking batches without its kernel: in numpy where it can (else record by record),
    or always record by record."""
    ex.c.compiled = False
    if not numpy:
        ex.take_first_results = lambda *_: False  # type: ignore[method-assign]
    return ex


@given(
    st.integers(WINDOW, 3 * WINDOW),
    st.lists(st.floats(0.0, 0.5), min_size=1, max_size=5),
    st.sampled_from([1, 2, 4]),
    st.one_of(
        st.lists(CHUNK, min_size=1, max_size=WINDOW + 1, unique=True),  # often all first
        st.lists(CHUNK, min_size=1, max_size=40),
    ),
    st.lists(st.booleans(), min_size=40, max_size=40),
    st.one_of(st.just([]), st.lists(st.integers(0, WINDOW - 1), max_size=3, unique=True)),
    st.floats(0.0, 2.0),
    st.integers(0, 3),
)
@settings(max_examples=300, deadline=None)
def test_a_batch_compiled_changes_what_the_loop_and_numpy_change(
    n_chunks: int,
    sent_at: list[float],
    n_trees: int,
    picks: list[int],
    overflow: list[bool],
    lost: list[int],
    now: float,
    earlier: int,
) -> None:
    """Any batch, any size, after `earlier` batches of first results (so that the timer has
    samples): the compiled path (or, when it declines, the record loop it falls back to)
    leaves the state the record loop leaves, and the state numpy leaves."""
    exs = [exchange(n_chunks, sent_at, n_trees, lost) for _ in range(3)]
    compiled, loop, numpy = exs[0], reference(exs[1], False), reference(exs[2], True)
    for k in range(earlier):  # the same earlier batches, taken by each its own way
        got = results(compiled, [k], [False])
        for ex in exs:
            ex.take(got, 0.25 * (k + 1))
    got = results(compiled, picks, overflow[: len(picks)])
    for ex in exs:
        ex.take(got, now)
    assert state(compiled) == state(loop) == state(numpy)
    assert compiled.c.rtt.srtt == loop.c.rtt.srtt  # bit for bit, not only close


def test_the_compiled_path_takes_first_results_and_declines_the_rest() -> None:
    ex = exchange(2 * WINDOW, [0.1], 1, [])
    assert ex.take_compiled(results(ex, list(range(WINDOW)), [False] * WINDOW), 1.0)
    assert ex.done[:WINDOW].all() and ex.c.rtt.samples == WINDOW and ex.base == WINDOW
    before = state(ex)
    assert not ex.take_compiled(results(ex, [0, 1], [False, False]), 1.0)  # duplicates
    assert state(ex) == before
    assert ex.take_compiled(results(ex, [-1, -1], [False, False]), 1.0)  # another job's
    assert ex.c.stats.foreign_packets == 2


@given(
    st.lists(CHUNK, min_size=1, max_size=WINDOW + 1),
    st.integers(0, WINDOW),
    st.sampled_from([False, True]),
)
@settings(max_examples=100, deadline=None)
def test_a_result_of_another_run_is_refused_on_every_path(
    picks: list[int], at: int, numpy: bool
) -> None:
    """A batch in which one result of this operation carries a contrib other than the run's
    sum (`expect`: the run check's): the compiled path and both references raise
    `InaRunError` before they take any of it."""
    at = min(at, len(picks) - 1)
    picks[at] = max(picks[at], 0)  # a result of this operation, not another job's
    for path in ("compiled", "loop", "numpy"):
        ex = exchange(2 * WINDOW, [0.1], 1, [])
        ex.expect = 0x1234
        got = results(ex, picks, [False] * len(picks))
        got["contrib"] = 0x1234
        got["contrib"][at] = 0x1235
        if path != "compiled":
            reference(ex, path == "numpy" and numpy)
        before = state(ex)
        with pytest.raises(InaRunError, match=r"run 0: a result for chunk \d+ carries contrib"):
            ex.take(got, 1.0)
        assert state(ex) == before


@given(
    st.lists(CHUNK, min_size=SMALL_BATCH + 1, max_size=2 * WINDOW),
    st.integers(0, 2 * WINDOW),
    st.one_of(st.just([]), st.lists(st.integers(0, WINDOW - 1), max_size=3, unique=True)),
    st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_a_declined_batch_goes_straight_to_the_record_loop(
    picks: list[int], twice: int, lost: list[int], on_frames: bool
) -> None:
    """A batch the compiled pass declines (a chunk twice, a chunk presumed lost) is taken
    record by record at once: the numpy path, which declines on the same conditions, is not
    tried, and the outcome is the references' (numpy first, then the record loop), state for
    state; taken where a framed transport received it (`take_frames`) or as records."""
    picks = [*picks, max(picks[twice % len(picks)], 0)]  # a result of this operation, twice
    exs = [exchange(2 * WINDOW, [0.1], 1, lost) for _ in range(2)]
    compiled, numpy = exs[0], reference(exs[1], True)

    def never(*_: object) -> bool:
        raise AssertionError("the numpy path was tried after the compiled pass declined")

    compiled.take_first_results = never  # type: ignore[method-assign, assignment]
    got = results(compiled, picks, [False] * len(picks))
    assert not exchange(2 * WINDOW, [0.1], 1, lost).take_compiled(got, 1.0)  # it is declined
    if on_frames:
        raw = np.ascontiguousarray(got).view(np.uint8).reshape(-1)
        compiled.take_frames(raw, np.arange(len(got), dtype=np.int64) * INA_BYTES, 1.0)
    else:
        compiled.take(got, 1.0)
    numpy.take(got, 1.0)
    assert state(compiled) == state(numpy)


def test_a_batch_with_a_chunk_twice_is_declined_and_changes_nothing() -> None:
    ex = exchange(2 * WINDOW, [0.1], 1, [])
    before = state(ex)
    assert not ex.take_compiled(results(ex, [3, 4, 3], [False] * 3), 1.0)
    assert state(ex) == before


# ---------------------------------------------------------------------- sending


@given(st.integers(1, 3 * WINDOW), st.integers(0, 3 * 65536), st.sampled_from([1, 2, 4, 16]))
@settings(max_examples=100, deadline=None)
def test_new_chunks_compiled_bookkeeping_is_the_reference(
    n_chunks: int, first: int, cwnd: int
) -> None:
    exs = []
    for compiled in (True, False):
        c = InaClient(
            Nowhere(), job_id=1, run=2, window=WINDOW, initial_cwnd=cwnd, clock=lambda: 1.5
        )
        c.compiled = compiled
        c._tx = 17
        payloads = c._payloads(np.zeros(n_chunks * K, np.int32), first, n_chunks, Opcode.SUM, 2, 1)
        ex = _Exchange(
            c, payloads, first, np.zeros((n_chunks, K), np.int32), np.zeros(n_chunks, bool)
        )
        ex.fill()
        exs.append(ex)
    a, b = exs
    for name in ("sent_at", "tx", "deadline", "slot_latest"):
        assert getattr(a, name).tolist() == getattr(b, name).tolist(), name
    assert (a.in_flight, a.next_new, a.c._tx) == (b.in_flight, b.next_new, b.c._tx)
    assert dataclasses.asdict(a.c.stats) == dataclasses.asdict(b.c.stats)


# ---------------------------------------------------------------------- a whole exchange

HEAD = np.arange(7, dtype=np.uint8) + 200  # what FramedSim puts in front of a payload


class FramedSim(SimSwitch):
    """The simulated switch as a framed transport: frames with HEAD in front of each
    payload, results handed over where they lie in a buffer with junk between them."""

    head = HEAD
    framed_sends = 0

    def send_framed(self, frames: npt.NDArray[np.uint8]) -> None:
        assert (frames[:, : len(HEAD)] == HEAD).all()
        self.framed_sends += 1
        self.send(np.ascontiguousarray(frames[:, len(HEAD) :]).view(INA_DTYPE).reshape(-1))

    def recv_offsets(self, timeout: float) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        got = self.recv(timeout)
        step = INA_BYTES + 5
        buf = np.full(len(got) * step + 3, 0xEE, np.uint8)
        offsets = np.arange(len(got), dtype=np.int64) * step + 3
        for j, rec in enumerate(got):
            buf[offsets[j] : offsets[j] + INA_BYTES] = np.frombuffer(rec.tobytes(), np.uint8)
        return buf, offsets


@settings(max_examples=40, deadline=None)
@given(
    window=st.sampled_from([1, 4, 16, 64]),
    n_chunks=st.integers(1, 300),
    loss=st.sampled_from([0.0, 0.02, 0.2]),
    buffer=st.sampled_from([4, 32, 1000]),
    seed=st.integers(0, 1000),
    fixed=st.booleans(),
)
def test_a_whole_exchange_is_the_same_compiled_or_not(
    window: int, n_chunks: int, loss: float, buffer: int, seed: int, fixed: bool
) -> None:
    """Against the simulated switch (a fake clock): the same packets at the same times, the
    same results, counters, timer and window, without the kernels, with them, and with them
    on a framed transport (frames sent as built, results taken where they arrived)."""
    runs = []
    x = np.random.default_rng(seed).integers(-1000, 1000, n_chunks * K, dtype=np.int32)
    for compiled, kind in ((False, SimSwitch), (True, SimSwitch), (True, FramedSim)):
        sim = kind(window, buffer=buffer, loss=loss, seed=seed)
        client = sim_client(sim, congestion_control=not fixed, max_retries=200, compiled=compiled)
        out, over = client.allreduce_int32(x)
        runs.append((out, over, sim, client))
    out_a, over_a, sim_a, a = runs[0]
    for out_b, over_b, sim_b, b in runs[1:]:
        assert np.array_equal(out_a, out_b) and np.array_equal(over_a, over_b)
        assert sim_a.copies == sim_b.copies and sim_a.delivered == sim_b.delivered
        assert sim_a.now == sim_b.now
        assert dataclasses.asdict(a.stats) == dataclasses.asdict(b.stats)
        assert dataclasses.asdict(a.rtt) == dataclasses.asdict(b.rtt)
        assert dataclasses.asdict(a.cc) == dataclasses.asdict(b.cc)
    framed = runs[2][2]
    assert isinstance(framed, FramedSim) and framed.framed_sends > 0  # the framed path ran


# ---------------------------------------------------------------------- transports


FRAME = st.tuples(
    st.sampled_from([FRAME_BYTES, FRAME_BYTES, FRAME_BYTES + 10, FRAME_BYTES - 1, 60]),
    st.booleans(),  # IPv4
    st.booleans(),  # UDP
    st.integers(0, 2**32 - 1),  # content
)


@given(st.lists(FRAME, max_size=40))
@settings(max_examples=200, deadline=None)
def test_gathered_payloads_are_the_reference_ones(
    frames: list[tuple[int, bool, bool, int]],
) -> None:
    """Frames on a wire's stream, some short, long, not IPv4 or not UDP: the compiled pass
    finds the payloads `ina_payloads` takes, byte for byte."""
    parts = []
    for length, ipv4, udp, seed in frames:
        frame = np.random.default_rng(seed).integers(0, 256, length, dtype=np.uint8)
        if length > 23:
            frame[12:14] = (8, 0) if ipv4 else (0x86, 0xDD)
            frame[23] = 17 if udp else 6
        parts.append(length.to_bytes(RECORD_HEADER, "little") + frame.tobytes())
    data = b"".join(parts)
    buf = np.zeros(len(data) + 8, np.uint8)
    buf[: len(data)] = np.frombuffer(data, np.uint8)
    offsets, lengths, end = split_records(buf, 0, len(data))
    assert end == len(data)
    want = ina_payloads(buf, offsets, lengths)
    at = np.empty(len(offsets), np.int64)
    n = kernels.payload_offsets(buf, offsets, lengths, FRAME_BYTES, INA_OFFSET, True, at)
    out = np.empty((n, INA_BYTES), np.uint8)
    kernels.copy_rows(buf, at[:n], out)
    assert out.tobytes() == want.tobytes()


@given(st.integers(0, 40), st.integers(0, 2**32 - 1))
@settings(max_examples=50, deadline=None)
def test_framed_records_are_the_frames_pack_frames_builds(n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    payloads = np.frombuffer(rng.integers(0, 256, n * INA_BYTES, np.uint8).tobytes(), INA_DTYPE)
    template = FrameTemplate(
        Endpoint("02:00:00:00:00:01", "10.0.0.1"), Endpoint("02:00:00:00:00:fe", "10.0.0.254")
    )
    head = np.frombuffer(
        FRAME_BYTES.to_bytes(RECORD_HEADER, "little") + template.prefix(), np.uint8
    )
    out = np.empty(n * (RECORD_HEADER + FRAME_BYTES), np.uint8)
    kernels.frame_records(payloads.view(np.uint8).reshape(n, INA_BYTES), head, out)
    want = b"".join(
        FRAME_BYTES.to_bytes(RECORD_HEADER, "little") + f.tobytes()
        for f in pack_frames(template, payloads)
    )
    assert out.tobytes() == want


def test_a_transport_whose_receive_is_overridden_is_not_used_framed(tmp_path: Path) -> None:
    """The client takes the framed path only through the methods that define it: a subclass
    that changes what `recv` or `send` do (duplicates, drops) is used through those."""

    class Duplicating(LoopbackWireTransport):
        def recv(self, timeout: float) -> npt.NDArray[np.void]:
            got = super().recv(timeout)
            return np.concatenate([got, got])

    wires = WireDir(tmp_path / "wires")
    plain, odd = LoopbackWireTransport(1, wires), Duplicating(2, wires)
    try:
        assert framed(plain) is plain and framed(odd) is None
        assert framed(SimSwitch(1)) is None and framed(FramedSim(1)) is not None
    finally:
        plain.close()
        odd.close()
