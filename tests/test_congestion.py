"""The client's congestion control: the RTT estimator and the AIMD window on their own
(properties over arbitrary event sequences), and the whole client against a simulated switch
on a fake clock (deterministic: no real time passes, nothing depends on the machine's speed).

The simulated switch (`SimSwitch`) is one worker's view of a job of fan-in 1: a FIFO
bottleneck of `capacity` packets/s with a drop-tail buffer, a fixed propagation delay, seeded
random loss, and optional stalls (the switch serves nothing for a while). It checks what the
client must never do (send chunk i before chunk i - W's result arrived), and counts what it
dropped, so that a test can tell needed retransmissions from spurious ones.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import inaemu.hostlib.client as client_mod
from inaemu.common.wire import (
    INA_DTYPE,
    INA_VERSION,
    RUN_SHIFT,
    SEQ_CHUNK_MASK,
    SLOT_INDEX_MASK,
    SLOT_SET_BIT,
    Flag,
    K,
)
from inaemu.hostlib.client import ClientStats, InaClient, InaTimeoutError, _Exchange
from inaemu.hostlib.congestion import CongestionWindow, RttEstimator

# ---------------------------------------------------------------------- the RTT estimator


@given(
    samples=st.lists(st.floats(0.0, 5.0), min_size=1, max_size=200),
    per_rtt=st.integers(1, 64),
    backoffs=st.integers(0, 40),
    retries=st.integers(0, 60),
)
def test_rto_stays_within_its_bounds(
    samples: list[float], per_rtt: int, backoffs: int, retries: int
) -> None:
    est = RttEstimator(initial_rto=0.1, min_rto=0.02, max_rto=1.0)
    for s in samples:
        est.sample(s, per_rtt)
        assert 0.02 <= est.rto <= 1.0
        srtt = est.srtt or 0.0  # a weighted mean of the samples (up to rounding)
        assert min(samples) * (1 - 1e-9) <= srtt <= max(samples) * (1 + 1e-9)
    for _ in range(backoffs):
        est.back_off()
        assert 0.02 <= est.timeout(retries) <= 1.0
    assert est.timeout(retries) >= est.base_rto
    timeouts = est.timeouts(np.array([0, retries], dtype=np.int32))
    assert timeouts.tolist() == [est.timeout(0), est.timeout(retries)]


@given(
    rtt=st.floats(0.001, 0.5),
    jitter=st.floats(0.0, 0.5),
    per_rtt=st.integers(1, 64),
    seed=st.integers(0, 2**32 - 1),
)
def test_rto_converges_for_a_stationary_rtt(
    rtt: float, jitter: float, per_rtt: int, seed: int
) -> None:
    """Samples drawn from [rtt, rtt (1 + jitter)]: after enough of them SRTT lies in that range
    and RTTVAR is at most its width (a little more: the EWMA's memory), so the RTO is at least
    the mean RTT and at most the top of the range plus 4 widths (or min_rto)."""
    rng = np.random.default_rng(seed)
    lo, hi = rtt, rtt * (1 + jitter)
    est = RttEstimator(initial_rto=3.0, min_rto=0.001, max_rto=60.0)
    for s in rng.uniform(lo, hi, 200 * per_rtt):
        est.sample(float(s), per_rtt)
    eps = 1e-9 * hi  # rounding
    assert est.srtt is not None and lo - eps <= est.srtt <= hi + eps
    assert est.rttvar <= (hi - lo) * 1.05 + eps
    assert lo - eps <= est.rto <= max(hi + 4.2 * (hi - lo), 0.001) + eps


def test_backoff_doubles_until_a_sample_and_cover_raises_the_rto_past_a_delay() -> None:
    est = RttEstimator(initial_rto=0.1, min_rto=0.01, max_rto=1.0)
    est.sample(0.02)  # srtt 0.02, rttvar 0.01: rto 0.06
    assert est.rto == pytest.approx(0.06)
    est.back_off()
    est.back_off()
    assert est.rto == pytest.approx(0.24) and est.timeout(1) == pytest.approx(0.24)
    assert est.timeout(3) == pytest.approx(0.48)  # a chunk's own retries weigh more
    for _ in range(5):
        est.back_off()
    assert est.rto == 1.0  # capped
    est.sample(0.02)
    assert est.backoff == 0 and est.rto < 0.1
    est.cover(0.5)  # a delay of 0.5 s fooled the timer
    assert est.rto >= 0.5


# ---------------------------------------------------------------------- the window

events = st.lists(
    st.one_of(
        st.tuples(st.just("results"), st.integers(0, 200), st.booleans()),
        st.tuples(st.just("loss"), st.integers(0, 10), st.booleans()),
        st.tuples(st.just("send"), st.integers(1, 100), st.booleans()),
        st.tuples(st.just("undo"), st.just(0), st.just(False)),
    ),
    max_size=300,
)


@given(limit=st.integers(1, 2000), initial=st.integers(-5, 3000), evs=events)
def test_window_stays_between_one_and_the_pool_and_decreases_once_per_window(
    limit: int, initial: int, evs: list[tuple[str, int, bool]]
) -> None:
    """Whatever happens: 1 <= cwnd <= W, and a loss decreases the window only if the lost copy
    was sent after the last decrease (once per window of chunks)."""
    cc = CongestionWindow.start(limit, initial)
    tx = 0  # copies sent so far
    last_decrease_at: int | None = None  # tx when the window last decreased
    for kind, n, flag in evs:
        before = (cc.cwnd, cc.ssthresh)
        if kind == "results":
            cc.on_results(n, limited=flag)
            assert cc.cwnd >= before[0]
            if not flag:
                assert cc.cwnd == before[0]  # no growth while the window was not in use
        elif kind == "send":
            tx += n
        elif kind == "loss":
            lost_tx = max(tx - 1 - n, 0)  # a copy sent n copies ago
            decreased = cc.on_loss(lost_tx, tx, timeout=flag)
            if decreased:
                assert last_decrease_at is None or lost_tx >= last_decrease_at
                assert cc.cwnd <= max(before[0], 1.0)
                assert cc.cwnd == 1.0 if flag else cc.cwnd == cc.ssthresh or cc.cwnd == before[0]
                last_decrease_at = tx
            else:
                assert (cc.cwnd, cc.ssthresh) == before
                assert last_decrease_at is not None and lost_tx < last_decrease_at
        else:
            cc.undo()
        assert 1.0 <= cc.cwnd <= limit
        assert 1 <= cc.allowed <= limit
        assert 1.0 <= cc.ssthresh <= limit


def test_slow_start_doubles_per_window_and_congestion_avoidance_adds_one() -> None:
    cc = CongestionWindow.start(1000, 1)
    for expected in (2, 4, 8, 16):
        cc.on_results(cc.allowed)  # one window of chunks answered
        assert cc.cwnd == expected
    cc.on_loss(0, 100, timeout=False)  # fast retransmit: halve, to ssthresh
    assert cc.cwnd == cc.ssthresh == 8
    for _ in range(8):
        cc.on_results(1)
    assert 8.9 < cc.cwnd <= 9.0  # +1 per window in congestion avoidance
    assert not cc.on_loss(99, 200, timeout=True)  # sent before the decrease: no second one
    assert cc.on_loss(100, 200, timeout=True)
    grown = cc.before[0] if cc.before else 0.0
    assert cc.cwnd == 1 and cc.ssthresh == pytest.approx(grown * 0.5)
    assert cc.undo() and cc.cwnd == grown and cc.ssthresh == 8
    assert not cc.undo()  # once


def test_fixed_window_never_moves() -> None:
    cc = CongestionWindow.start(64, 4, fixed=True)
    cc.on_results(100)
    assert not cc.on_loss(10, 11, timeout=True)
    assert cc.cwnd == 64 and cc.allowed == 64


# ---------------------------------------------------------------------- a simulated switch


@dataclass
class SimSwitch:
    """A fake transport and clock: one worker of a fan-in-1 job behind a bottleneck."""

    window: int
    capacity: float = 2000.0  # packets/s
    buffer: int = 1000  # packets queued (and in service) at most; more are dropped
    delay: float = 0.004  # propagation, both ways together
    loss: float = 0.0  # each packet, each way
    stalls: list[tuple[float, float]] = field(default_factory=list)  # [start, end)
    seed: int = 0
    now: float = 0.0
    queue: deque[float] = field(default_factory=deque)  # departure times
    last_departure: float = 0.0
    pending: list[tuple[float, int, bytes]] = field(default_factory=list)  # results, a heap
    serial: int = 0
    delivered: dict[int, float] = field(default_factory=dict)  # chunk -> first result time
    copies: dict[int, int] = field(default_factory=dict)
    dropped: dict[int, int] = field(default_factory=dict)  # chunk -> copies or results lost
    violations: list[str] = field(default_factory=list)
    max_queue: int = 0

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def clock(self) -> float:
        return self.now

    def _serve(self, arrival: float) -> float:
        start = max(arrival, self.last_departure)
        for a, b in self.stalls:
            if a <= start < b:
                start = b
        self.last_departure = start + 1 / self.capacity
        return self.last_departure

    def send(self, payloads: npt.NDArray[np.void]) -> None:
        while self.queue and self.queue[0] <= self.now:
            self.queue.popleft()
        for rec in payloads:
            chunk = int(rec["seq"]) & SEQ_CHUNK_MASK
            retx = bool(int(rec["ver_flags"]) & int(Flag.RETX))
            self.copies[chunk] = self.copies.get(chunk, 0) + 1
            if not retx:
                if self.copies[chunk] != 1:
                    self.violations.append(f"chunk {chunk} sent twice without RETX")
                before = chunk - self.window
                if before >= 0 and self.delivered.get(before, math.inf) > self.now:
                    self.violations.append(f"chunk {chunk} before the result of {before}")
            if len(self.queue) >= self.buffer or self.rng.random() < self.loss:
                self.dropped[chunk] = self.dropped.get(chunk, 0) + 1
                continue
            departure = self._serve(self.now)
            self.queue.append(departure)
            self.max_queue = max(self.max_queue, len(self.queue))
            if self.rng.random() < self.loss:  # the result is lost on the way back
                self.dropped[chunk] = self.dropped.get(chunk, 0) + 1
                continue
            result = rec.copy()
            result["ver_flags"] = (INA_VERSION << 4) | int(Flag.RESULT)
            self.serial += 1
            heapq.heappush(self.pending, (departure + self.delay, self.serial, result.tobytes()))

    def recv(self, timeout: float) -> npt.NDArray[np.void]:
        until = self.now + timeout
        if not self.pending or self.pending[0][0] > until:
            self.now = until
            return np.empty(0, dtype=INA_DTYPE)
        self.now = max(self.now, self.pending[0][0])
        out = []
        while self.pending and self.pending[0][0] <= self.now:
            _, _, data = heapq.heappop(self.pending)
            out.append(data)
            chunk = int(np.frombuffer(data, dtype=INA_DTYPE)[0]["seq"]) & SEQ_CHUNK_MASK
            self.delivered.setdefault(chunk, self.now)
        return np.frombuffer(b"".join(out), dtype=INA_DTYPE)

    def close(self) -> None:
        pass

    def needed_retransmissions(self) -> int:
        """Retransmissions that replaced a lost copy or result."""
        return sum(self.dropped.values())


def sim_client(sim: SimSwitch, **kwargs: object) -> InaClient:
    opts: dict[str, object] = {"job_id": 1, "window": sim.window, "run": 1, "give_up_after": 30.0}
    opts.update(kwargs)
    # a fan-in-1 switch that echoes: the exchange under test, not the run check before it
    return InaClient(sim, clock=sim.clock, check_run=False, **opts)  # type: ignore[arg-type]


def values(n_chunks: int, seed: int = 0) -> npt.NDArray[np.int32]:
    return np.random.default_rng(seed).integers(-1000, 1000, n_chunks * K, dtype=np.int32)


def check_stats(st: ClientStats, window: int) -> None:
    assert 1.0 <= st.cwnd_min <= st.cwnd_mean <= st.cwnd_max <= window
    assert 1.0 <= st.cwnd <= window
    assert st.spurious_retransmissions <= st.retransmissions


@settings(max_examples=40, deadline=None)
@given(
    window=st.sampled_from([1, 2, 8, 64]),
    n_chunks=st.integers(1, 400),
    loss=st.sampled_from([0.0, 0.02, 0.2]),
    buffer=st.sampled_from([4, 32, 1000]),
    seed=st.integers(0, 1000),
    fixed=st.booleans(),
)
def test_exact_results_slot_rule_and_karn_against_a_simulated_switch(
    window: int, n_chunks: int, loss: float, buffer: int, seed: int, fixed: bool
) -> None:
    """Any window, loss and buffer: every result is exact, chunk i never leaves before chunk
    i - W's result arrived, the window stays within [1, W], and only chunks sent once are
    timed (Karn's rule)."""
    sim = SimSwitch(window, buffer=buffer, loss=loss, seed=seed)
    client = sim_client(sim, congestion_control=not fixed, max_retries=200)
    x = values(n_chunks, seed)
    out, over = client.allreduce_int32(x)
    assert np.array_equal(out, x) and not over.any()
    assert sim.violations == []
    check_stats(client.stats, window)
    sent_once = sum(1 for c in sim.copies.values() if c == 1)
    assert len(client.stats.rtt_samples) == sent_once
    assert client.stats.packets_sent == sum(sim.copies.values())
    if fixed:
        assert client.stats.cwnd_min == client.stats.cwnd_max == window


def test_a_stationary_path_has_no_spurious_retransmission_and_a_tight_timer() -> None:
    """A bottleneck with a small buffer and random loss: the window finds the buffer (losses
    decrease it), every retransmission replaces a lost packet, and the timer settles near the
    round trip (which the buffer bounds)."""
    sim = SimSwitch(64, capacity=2000.0, buffer=16, delay=0.004, loss=0.01, seed=5)
    client = sim_client(sim, min_rto=0.001)
    x = values(5000, 1)
    out, _ = client.allreduce_int32(x)
    assert np.array_equal(out, x) and sim.violations == []
    st = client.stats
    assert st.loss_events > 0 and st.cwnd_max > 16  # it grew, and came down again
    assert st.retransmissions == sim.needed_retransmissions()  # none spurious
    assert st.spurious_retransmissions == 0
    max_rtt = sim.delay + sim.buffer / sim.capacity
    assert st.srtt is not None and sim.delay <= st.srtt <= max_rtt
    assert st.rto <= 2 * max_rtt + 0.001
    assert sim.max_queue <= sim.buffer


def test_a_stall_fools_the_timer_once_and_is_taken_back() -> None:
    """The switch stops for 0.3 s mid-transfer: the timers fire, but the results of the
    original copies arrive before the retransmissions go out (they are cancelled), the
    window's decrease is undone, and the timer is raised past the stall (for a while)."""

    @dataclass
    class Watched(SimSwitch):
        client: InaClient | None = None
        rto_after_stall: float = 0.0

        def recv(self, timeout: float) -> npt.NDArray[np.void]:
            got = super().recv(timeout)
            if self.client is not None and self.now >= 0.81 and not self.rto_after_stall:
                self.rto_after_stall = self.client.rtt.rto
            return got

    sim = Watched(64, capacity=5000.0, buffer=1000, delay=0.002, stalls=[(0.5, 0.8)])
    client = sim_client(sim)
    sim.client = client
    x = values(4000, 2)
    out, _ = client.allreduce_int32(x)
    assert np.array_equal(out, x)
    st = client.stats
    assert sim.needed_retransmissions() == 0
    assert st.timeouts >= 32 and st.loss_events >= 1 and st.undone_decreases >= 1
    assert st.retransmissions <= st.loss_events  # the first suspect's, and its backoffs
    assert sim.rto_after_stall >= 0.3  # the timer covers the stall it just saw
    assert st.rto < 0.1  # and forgets it again


def test_fixed_window_retransmits_every_stalled_chunk_where_cwnd_does_not() -> None:
    """The same stall with SwitchML's fixed window: each chunk in flight times out and is
    resent; with the congestion window, almost none is."""
    counts = {}
    for fixed in (True, False):
        sim = SimSwitch(64, capacity=5000.0, delay=0.002, stalls=[(0.5, 0.8)])
        client = sim_client(sim, congestion_control=not fixed)
        client.allreduce_int32(values(4000, 3))
        counts[fixed] = client.stats.retransmissions
    assert counts[True] >= 32 and counts[False] <= counts[True] // 8


def test_fast_retransmit_recovers_a_loss_before_the_timer() -> None:
    """One copy lost in a steady stream: three later results mark it lost, and it is resent
    long before its (large) timer would fire."""

    @dataclass
    class LoseOne(SimSwitch):
        victim: int = 300

        def send(self, payloads: npt.NDArray[np.void]) -> None:
            keep = []
            for rec in payloads:
                chunk = int(rec["seq"]) & SEQ_CHUNK_MASK
                if chunk == self.victim and chunk not in self.copies:
                    self.copies[chunk] = 1
                    self.dropped[chunk] = 1
                    continue
                keep.append(rec)
            if keep:
                super().send(np.array(keep, dtype=INA_DTYPE))

    sim = LoseOne(64, capacity=5000.0, delay=0.002)
    client = sim_client(sim, min_rto=0.5)  # the timer alone would wait 0.5 s
    x = values(1000, 4)
    out, _ = client.allreduce_int32(x)
    assert np.array_equal(out, x)
    st = client.stats
    assert st.fast_retransmits == 1 and st.timeouts == 0 and st.retransmissions == 1
    assert sim.delivered[300] - sim.delivered[299] < 0.05


def test_a_vanished_switch_still_ends_in_the_timeout_error() -> None:
    sim = SimSwitch(8, loss=1.0)
    client = sim_client(sim, give_up_after=2.0, max_rto=0.2)
    with pytest.raises(InaTimeoutError, match=r"no result for 3 chunk"):
        client.allreduce_int32(values(3))
    assert client.stats.retransmissions > 3
    assert client.stats.cwnd == 1.0


# ---------------------------------------------------------------------- matching results


@settings(max_examples=60, deadline=None)
@given(
    window=st.sampled_from([1, 4, 64]),
    first=st.integers(0, 3 * 65536),
    sent=st.integers(0, 300),
    recs=st.lists(
        st.tuples(
            st.integers(0, 3),  # job 1 or another
            st.integers(0, 15),  # flags
            st.integers(0, 2),  # run 7 or another
            st.integers(0, 70),  # slot index
            st.booleans(),  # set bit
            st.integers(0, 400),  # chunk, mod 2^16 in seq
        ),
        max_size=40,
    ),
)
def test_small_and_large_batches_match_results_alike(
    window: int,
    first: int,
    sent: int,
    recs: list[tuple[int, int, int, int, bool, int]],
) -> None:
    """Record by record (small batches) and in numpy (large ones): the same chunk or -1."""
    client = InaClient(SimSwitch(window), job_id=1, window=window, run=7, check_run=False)
    n = max(sent, 1)
    ex = _Exchange(
        client,
        np.zeros(n, dtype=INA_DTYPE),
        first,
        np.zeros((n, K), dtype=np.int32),
        np.zeros(n, dtype=np.bool_),
    )
    for i in range(sent):  # chunks 0..sent-1 were sent, in order
        ex.slot_latest[(first + i) % window] = i
    got = np.zeros(len(recs), dtype=INA_DTYPE)
    for rec, (job, flags, run, slot, set_, chunk) in zip(got, recs, strict=True):
        rec["job_id"] = 1 if job else 2
        rec["ver_flags"] = (INA_VERSION << 4) | flags
        rec["slot"] = (slot & SLOT_INDEX_MASK) | (SLOT_SET_BIT if set_ else 0)
        rec["seq"] = ((7 if run else 8) << RUN_SHIFT) | ((first + chunk) & SEQ_CHUNK_MASK)
    small = ex.match(got) if len(got) <= client_mod.SMALL_BATCH else None
    saved = client_mod.SMALL_BATCH
    try:
        client_mod.SMALL_BATCH = 1000
        by_record = ex.match(got)
        client_mod.SMALL_BATCH = -1
        in_numpy = ex.match(got)
    finally:
        client_mod.SMALL_BATCH = saved
    assert by_record == in_numpy
    if small is not None:
        assert small == by_record
    for (job, flags, run, slot, _, chunk), found in zip(recs, by_record, strict=True):
        if found >= 0:  # only this job's and run's results for a chunk sent in that slot
            assert job and flags & int(Flag.RESULT) and run and slot < window
            assert found < sent and (first + found) % window == slot
            assert (first + found) & SEQ_CHUNK_MASK == (first + chunk) & SEQ_CHUNK_MASK
