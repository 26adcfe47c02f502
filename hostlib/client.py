"""The INA allreduce client: what a training worker calls to sum an array through the switch.

SwitchML's slot discipline: chunk i (numbered per run from 0, never restarting within the run,
so that a (slot, set) always sees a new seq on a new use) goes to slot i mod W, set
(i div W) mod 2, tree (i mod W) mod T, with seq = run << 16 | (i mod 2^16), and it goes out
only after the result of chunk i - W. W is the job's pool (`window`); every worker uses the
same slot for the same chunk.

Congestion control decides how many of those chunks are in flight (the host window of
docs/protocol.md, section 4, is its upper bound):

- `CongestionWindow` (AIMD within the pool, 1 <= cwnd <= W) and `RttEstimator` (RFC 6298
  timers, Karn's rule), both in `congestion.py`, keep the numbers. Chunks go out in order,
  cwnd bounding those in flight.
- Losses: a chunk is presumed lost when its timer expires, or at once when DUPTHRESH later
  chunks of its tree were answered (fast retransmit). A timed-out chunk is a suspect: it is
  retransmitted (with RETX) only once results have stopped for a round trip, and a result for
  it first proves the timeout spurious (F-RTO's test): the decrease is undone, the suspects
  are in flight again and the timer is raised past the delay. Duplicate results are ignored.

A worker never waits forever: if nothing progresses for `give_up_after` seconds (or a chunk
exhausts its retries), `InaTimeoutError` names the job and the chunks that are missing.
`ClientStats` counts packets, retransmissions (and an estimate of the spurious ones), the
congestion window (final, min, mean, max) and the timer (SRTT, RTTVAR, RTO).

A run is one execution of the job's workers: every worker of a run passes the same `run` id
(0..65535), and each new run (workers restarted, a job rerun from chunk 0) takes a new one, so
that the switch tells the new run's chunk 0 from the old run's (docs/protocol.md, "Runs and
installations"). There is no default: a client without one (`run=` or `start_run`) refuses
to aggregate and says where to get one (`inaemu job new-run`, which never repeats one for an
installation; the DDP hook state, which shares one over the process group; launchers draw one
and hand it to every worker).

A reused id is refused, never summed (docs/protocol.md, "The run check"): the first operation
of every run is the run check, an exchange of ceil(n_workers / K) chunks in which worker r
puts a random nonce in element r. The switch's result must hold this worker's own nonce in
its element: a result the switch kept from an earlier run with the same id holds that run's
nonce (or lacks this worker), and the client raises `InaRunError`. Then every later chunk
carries the worker's tag (its nonce's low 16 bits) in `contrib`, which the switch sums, and
every result must carry the sum of all workers' tags (read from the run check's result); a
result holding any contribution of another run carries another sum (a chance of 2^-16 that
two runs' sums agree), and the client raises `InaRunError` instead of returning it. A reused
id can also be dropped as STALE at the switch: the run stalls, and the timeout says so. So
the client needs its `rank` (0..n_workers-1) and `n_workers`; `check_run=False` skips the
check (for test switches that do not sum).

    client = InaClient(transport, job_id=1, window=64, n_workers=4, rank=0, run=run)
    total = client.allreduce(gradient)                  # fixed-point codec by default
    ints, overflowed = client.allreduce_int32(values, Opcode.SUM)
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import NoReturn, TypeVar

import numpy as np
import numpy.typing as npt

from inaemu.common import jit
from inaemu.common.wire import (
    FRAME_BYTES,
    INA_BYTES,
    INA_DTYPE,
    INA_HEADER_STRUCT,
    INA_VERSION,
    INT32_MAX,
    MAX_RUN,
    RUN_SHIFT,
    SEQ_CHUNK_MASK,
    SLOT_INDEX_MASK,
    SLOT_SET_BIT,
    Flag,
    K,
    Opcode,
    pack_payloads,
)
from inaemu.hostlib import kernels
from inaemu.hostlib.codecs.base import HomomorphicCodec, Int32Array, Phase, phase_steps
from inaemu.hostlib.congestion import CongestionWindow, RttEstimator
from inaemu.hostlib.transport import FramedTransport, Transport, framed

BoolArray = npt.NDArray[np.bool_]

DUPTHRESH = 3  # later chunks of a tree answered before a chunk is presumed lost
MAX_WAIT = 0.05  # seconds the loop waits for results at most between checks
SMALL_BATCH = 8  # batches up to this size are matched record by record, larger ones in numpy
OTHER_RUN = kernels.OTHER_RUN_CHUNK  # a match: a result of another run (the run check)
_RESULT, _OVERFLOW = int(Flag.RESULT), int(Flag.OVERFLOW)
_NO_HEAD = np.zeros(0, np.uint8)


def _record_offsets(n: int) -> npt.NDArray[np.int64]:
    """Where each of n INA records back to back starts."""
    return np.arange(n, dtype=np.int64) * INA_BYTES


T = TypeVar("T")
Steps = Generator["_Exchange", None, T]  # an operation as the exchanges it runs, in order


def drive(steps: Steps[T]) -> T:
    """Run an operation's exchanges one after another on the client's transport, blocking
    (`_Exchange.run`); what the operation returns. An exchange's error goes back into the
    steps, so that they clean up, and out of here."""
    try:
        exchange = next(steps)
        while True:
            try:
                exchange.run()
            except BaseException as exc:
                exchange = steps.throw(exc)
            else:
                exchange = steps.send(None)
    except StopIteration as stop:
        result: T = stop.value
        return result


class InaError(RuntimeError):
    """Base of the client's errors."""


def no_run_message(job_id: int) -> str:
    """Why a client without a run id refuses, and where to get one."""
    return (
        f"job {job_id}: no run id: give every worker of this run the same new one "
        f"(InaClient(run=...) or start_run), e.g. from `inaemu job new-run -t topology.json "
        f"--job {job_id}`, or let the DDP hook state share one; a reused one gets the last "
        "run's sums back, or stalls"
    )


class InaRunError(InaError):
    """The switch answered with sums of another run: this run's id was used before on the job's
    installation (or two workers have the same rank)."""


def reused_run_message(job_id: int, run: int, what: str) -> str:
    """Why a client refuses a result of another run, and what to do."""
    return (
        f"job {job_id}: run {run}: {what}: the switch holds sums of an earlier run with this "
        f"id, so run id {run} was used before on this installation (or two workers have the "
        f"same rank); give every worker of this run a new one, e.g. from `inaemu job new-run "
        f"-t topology.json --job {job_id}`"
    )


class InaTimeoutError(InaError, TimeoutError):
    """The switch or a peer stopped answering: names the job and the missing chunks."""

    def __init__(self, job_id: int, missing: list[int], waited: float, reason: str) -> None:
        shown = ", ".join(str(s) for s in missing[:10]) + (" ..." if len(missing) > 10 else "")
        super().__init__(
            f"job {job_id}: no result for {len(missing)} chunk(s) [{shown}] after "
            f"{waited:.1f}s ({reason}); is the switch running, the job installed, and every "
            f"worker of the job alive?"
        )
        self.job_id = job_id
        self.missing = missing


@dataclass
class ClientStats:
    """Counters of one client over its lifetime (all operations)."""

    operations: int = 0
    chunks: int = 0
    packets_sent: int = 0
    bytes_sent: int = 0  # whole frames on the wire (FRAME_BYTES each)
    retransmissions: int = 0
    results: int = 0
    duplicate_results: int = 0
    foreign_packets: int = 0  # not a result of this job's and run's recent chunks
    overflowed_chunks: int = 0
    rtt_samples: list[float] = field(default_factory=list)
    timeouts: int = 0  # copies whose timer expired
    fast_retransmits: int = 0  # chunks presumed lost: DUPTHRESH later chunks completed first
    loss_events: int = 0  # decreases of the congestion window
    undone_decreases: int = 0  # decreases taken back: the loss was not one
    # An estimate, a lower bound: retransmissions answered after the chunk's result had come
    # (a second result for a retransmitted chunk: the switch had the result when the
    # retransmission arrived). One that arrived while the chunk was still incomplete (the
    # switch drops it as DUPLICATE) is not seen here.
    spurious_retransmissions: int = 0
    cwnd: float = 0.0  # congestion window at the end of the last operation
    cwnd_min: float = math.inf  # over every completed chunk
    cwnd_max: float = 0.0
    cwnd_sum: float = 0.0  # cwnd summed over completed chunks (cwnd_mean = cwnd_sum / results)
    srtt: float | None = None  # seconds, at the end of the last operation
    rttvar: float = 0.0
    rto: float = 0.0
    min_rtt: float = math.inf

    @property
    def cwnd_mean(self) -> float:
        return self.cwnd_sum / self.results if self.results else self.cwnd

    def summary(self) -> dict[str, float | int | None]:
        """Counters and congestion state as JSON-ready numbers."""
        return {
            "packets_sent": self.packets_sent,
            "retransmissions": self.retransmissions,
            "duplicate_results": self.duplicate_results,
            "spurious_retransmissions": self.spurious_retransmissions,
            "timeouts": self.timeouts,
            "fast_retransmits": self.fast_retransmits,
            "loss_events": self.loss_events,
            "undone_decreases": self.undone_decreases,
            "cwnd_final": round(self.cwnd, 2),
            "cwnd_min": round(self.cwnd_min, 2) if self.results else None,
            "cwnd_max": round(self.cwnd_max, 2),
            "cwnd_mean": round(self.cwnd_mean, 2),
            "srtt": None if self.srtt is None else round(self.srtt, 6),
            "rttvar": round(self.rttvar, 6),
            "rto": round(self.rto, 6),
            "min_rtt": None if math.isinf(self.min_rtt) else round(self.min_rtt, 6),
        }


def warm_up(codec: object | None = None, dtype: npt.DTypeLike = np.float32) -> float:
    """What a worker process needs loaded, through the one warm-up (`common.jit.warm_up`): the
    client's compiled kernels and, given `codec`, the codec's for inputs of `dtype` (the codec
    once on a small sparse array with no network); the seconds it took. numba loads (or
    compiles) a kernel on its first call, a fraction of a second per process: a worker that
    calls this before its first allreduce does not pay for it there."""
    if codec is None:
        return jit.warm_up(kernels.load).seconds
    from inaemu.hostlib.codecs import loader

    return jit.warm_up(kernels.load, loader(codec, dtype)).seconds


class InaClient:
    """One worker's end of an INA job.

    Every worker of a job must make the same sequence of calls with arrays of the same length
    (the chunk numbering and the codecs' phases depend on it), and use the same `run` id, a new
    one for every run of the job (see the module doc): `run=` here, or `start_run` before the
    first operation (`run=None`: an operation before it raises `InaError`). `rank`
    (0..n_workers-1, distinct per worker) and `n_workers` are what the run's first operation,
    the run check, needs (module doc); the DDP hook state fills them in from the process group.

    `window` is the job's pool (W slots); the congestion window (`cc`, at most W) decides how
    many chunks are in flight, `initial_cwnd` at first; `congestion_control=False` keeps it
    at W. `clock` (seconds, monotonic) is for tests.

    `compiled` (the default): an operation's payloads are packed, batches of first results
    taken and new chunks' bookkeeping done by numba kernels (`hostlib.kernels`), one pass per
    batch; False runs only the numpy and record-by-record paths, which the kernels must
    match state for state (tests/test_client_kernels.py). Either way the exchange is the same.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        job_id: int,
        window: int,
        n_workers: int | None = None,
        n_trees: int = 1,
        run: int | None = None,
        rank: int | None = None,
        check_run: bool = True,
        initial_rto: float = 0.1,
        min_rto: float = 0.02,
        max_rto: float = 1.0,
        max_retries: int = 50,
        give_up_after: float = 30.0,
        on_progress: Callable[[int], None] | None = None,
        congestion_control: bool = True,
        initial_cwnd: int = 4,
        clock: Callable[[], float] = time.monotonic,
        compiled: bool = True,
    ) -> None:
        if not 1 <= window <= 0x7FFF:
            raise ValueError(f"window must be 1..32767 (at most the job's pool size), got {window}")
        if n_trees < 1 or window % n_trees:
            raise ValueError(f"window {window} must be a multiple of the tree count {n_trees}")
        if not 0 <= job_id <= 0xFFFF:
            raise ValueError(f"job_id must fit 16 bits, got {job_id}")
        if rank is not None and not (n_workers is not None and 0 <= rank < n_workers):
            raise ValueError(f"rank must be 0..n_workers-1 (n_workers {n_workers}), got {rank}")
        self.transport = transport
        self.job_id = job_id
        self.window = window
        self.n_workers = n_workers
        self.n_trees = n_trees
        self.rtt = RttEstimator(initial_rto, min_rto, max_rto)
        self.cc = CongestionWindow.start(window, initial_cwnd, fixed=not congestion_control)
        self.max_retries = max_retries
        self.give_up_after = give_up_after
        self.on_progress = on_progress  # called with the number of chunks just completed
        self.clock = clock
        self.compiled = compiled
        self.rank = rank
        self.check_run = check_run
        self.run: int | None = None  # this run's id: the top 16 bits of every seq
        self.next_chunk = 0  # chunk number within the run; never restarts (see module doc)
        # the run check's outcome (module doc): this worker's contrib and the sum every
        # result carries; None until the run's first operation (and with check_run=False)
        self.tag: int | None = None
        self.tag_sum: int | None = None
        if run is not None:
            self.start_run(run)
        self.stats = ClientStats()
        self._tx = 0  # copies sent so far: the transmission number of the next one

    # the timer's bounds, as attributes of the client
    @property
    def rto(self) -> float:
        return self.rtt.rto

    @property
    def min_rto(self) -> float:
        return self.rtt.min_rto

    @min_rto.setter
    def min_rto(self, value: float) -> None:
        self.rtt.min_rto = value

    @property
    def max_rto(self) -> float:
        return self.rtt.max_rto

    @max_rto.setter
    def max_rto(self, value: float) -> None:
        self.rtt.max_rto = value

    def start_run(self, run: int) -> None:
        """Begin run `run` (0..65535): chunks are numbered from 0 again. Every worker of the
        job must start the same run before its first operation of the run."""
        if not 0 <= run <= MAX_RUN:
            raise ValueError(f"run must be 0..{MAX_RUN}, got {run}")
        self.run = run
        self.next_chunk = 0
        self.tag = self.tag_sum = None

    # ------------------------------------------------------------------ public API

    def allreduce(
        self, x: npt.NDArray[np.generic], codec: HomomorphicCodec | None = None
    ) -> npt.NDArray[np.generic]:
        """Sum `x` over the job's workers through the switch, encoded by `codec`."""
        return drive(self.allreduce_steps(x, codec))

    def allreduce_steps(
        self, x: npt.NDArray[np.generic], codec: HomomorphicCodec | None = None
    ) -> Steps[npt.NDArray[np.generic]]:
        """`allreduce` as steps: yields each exchange for its driver to run (`drive`, or a
        simulator's events), returns the sum."""
        if codec is None:
            from inaemu.hostlib.codecs import FixedPointCodec

            codec = FixedPointCodec()
        if self.n_workers is None:
            raise InaError("allreduce with a codec needs n_workers (the job's worker count)")
        return (yield from phase_steps(codec.phases(x, self.n_workers), self._phase_steps))

    def _phase_steps(self, phase: Phase) -> Steps[tuple[Int32Array, BoolArray]]:
        return self.allreduce_int32_steps(phase.values, phase.opcode)

    def allreduce_int32(
        self, values: npt.NDArray[np.int32], opcode: Opcode = Opcode.SUM
    ) -> tuple[Int32Array, BoolArray]:
        """Aggregate int32 `values` with `opcode`; returns (result, per-element overflow mask).

        The mask marks the elements of chunks whose result carried Flag.OVERFLOW (a saturated
        SUM somewhere in that chunk).
        """
        return drive(self.allreduce_int32_steps(values, opcode))

    def allreduce_int32_steps(
        self, values: npt.NDArray[np.int32], opcode: Opcode = Opcode.SUM
    ) -> Steps[tuple[Int32Array, BoolArray]]:
        """`allreduce_int32` as steps (`allreduce_steps`): the run check's exchange first if
        the run has not had it, then the operation's."""
        run = self.run
        if run is None:
            raise InaError(no_run_message(self.job_id))
        if self.check_run and self.tag is None:
            yield from self._check_run_steps(run)
        flat = np.ascontiguousarray(values, dtype=np.int32).reshape(-1)
        self.stats.operations += 1
        tag = 1 if self.tag is None else self.tag
        expect = -1 if self.tag_sum is None else self.tag_sum
        return (yield from self._aggregate_steps(flat, opcode, run, tag, expect))

    def _check_run_steps(self, run: int) -> Steps[None]:
        """The run check (module doc): every worker's nonce in its element, through the switch;
        this worker's must come back. Sets `tag` and `tag_sum`."""
        if self.rank is None or self.n_workers is None:
            raise InaError(
                f"job {self.job_id}: the client needs rank= and n_workers= (the run's first "
                "operation checks that the switch holds no earlier run with this id)"
            )
        nonce = secrets.randbelow(INT32_MAX) + 1
        probe = np.zeros(self.n_workers, dtype=np.int32)
        probe[self.rank] = nonce
        got, _ = yield from self._aggregate_steps(probe, Opcode.SUM, run, 1, -1)
        if int(got[self.rank]) != nonce:
            raise InaRunError(
                reused_run_message(
                    self.job_id,
                    run,
                    f"the run check's result does not hold rank {self.rank}'s nonce",
                )
            )
        tags = got.astype(np.int64) & 0xFFFF
        self.tag = int(tags[self.rank])
        self.tag_sum = int(tags.sum()) & 0xFFFF

    def _aggregate_steps(
        self, flat: Int32Array, opcode: Opcode, run: int, contrib: int, expect: int
    ) -> Steps[tuple[Int32Array, BoolArray]]:
        """`flat` through the switch as chunks carrying `contrib`, in one exchange (yielded);
        a result whose contrib is not `expect` (-1: any) raises `InaRunError`."""
        n = flat.size
        if n == 0:
            return np.empty(0, dtype=np.int32), np.zeros(0, dtype=np.bool_)
        n_chunks = -(-n // K)
        first = self.next_chunk
        self.next_chunk += n_chunks
        frames = None
        through = framed(self.transport) if self.compiled else None
        if through is not None:
            frames, payloads = self._frames(through, flat, first, n_chunks, opcode, run, contrib)
        else:
            payloads = self._payloads(flat, first, n_chunks, opcode, run, contrib)
        result = np.empty((n_chunks, K), dtype=np.int32)
        overflow = np.zeros(n_chunks, dtype=np.bool_)
        exchange = _Exchange(self, payloads, first, result, overflow, expect)
        exchange.frames, exchange.framed = frames, through
        try:
            yield exchange
        finally:
            self._note_state()
        self.stats.chunks += n_chunks
        mask = np.repeat(overflow, K)[:n]
        return result.reshape(-1)[:n], mask

    def _payloads(
        self, flat: Int32Array, first: int, n_chunks: int, opcode: Opcode, run: int, contrib: int
    ) -> npt.NDArray[np.void]:
        """The INA payloads of chunks first.. (the module doc's slot discipline) carrying
        `flat` in K lanes each, the last chunk zero-padded, and `contrib`."""
        if self.compiled:
            raw = np.empty((n_chunks, INA_BYTES), np.uint8)
            kernels.pack_chunks(flat, raw, _NO_HEAD, self._header(first, opcode, run, contrib))
            return raw.view(INA_DTYPE).reshape(-1)
        n = flat.size
        padded = np.zeros(n_chunks * K, dtype=np.int32)
        padded[:n] = flat
        chunk_ids = np.arange(first, first + n_chunks, dtype=np.int64)
        slot_index = chunk_ids % self.window
        lanes = np.full(n_chunks, K, dtype=np.uint8)
        lanes[-1] = n - (n_chunks - 1) * K
        return pack_payloads(
            opcode=int(opcode),
            job_id=self.job_id,
            tree_id=slot_index % self.n_trees,
            slot=slot_index | (((chunk_ids // self.window) % 2) * SLOT_SET_BIT),
            seq=(run << RUN_SHIFT) | (chunk_ids & SEQ_CHUNK_MASK),
            values=padded.reshape(n_chunks, K),
            lanes=lanes,
            contrib=contrib,
        )

    def _frames(
        self,
        transport: FramedTransport,
        flat: Int32Array,
        first: int,
        n_chunks: int,
        opcode: Opcode,
        run: int,
        contrib: int,
    ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.void]]:
        """`_payloads` as a framed `transport` sends them, each behind its head: (the frames,
        one per row, and the payloads in them)."""
        head = transport.head
        frames = np.empty((n_chunks, len(head) + INA_BYTES), np.uint8)
        kernels.pack_chunks(flat, frames, head, self._header(first, opcode, run, contrib))
        payloads = frames[:, len(head) :].view(INA_DTYPE).reshape(-1)
        return frames, payloads

    def _header(self, first: int, opcode: Opcode, run: int, contrib: int) -> kernels.ChunkHeader:
        return kernels.ChunkHeader(
            first=first,
            window=self.window,
            n_trees=self.n_trees,
            run=run,
            opcode=int(opcode),
            job_id=self.job_id,
            ver_flags=INA_VERSION << 4,
            contrib=contrib,
        )

    def _note_state(self) -> None:
        st, rtt = self.stats, self.rtt
        st.cwnd = self.cc.cwnd
        st.srtt, st.rttvar, st.rto, st.min_rtt = rtt.srtt, rtt.rttvar, rtt.rto, rtt.min_rtt


class _Exchange:
    """One operation's chunks through the window (see the module doc).

    Every chunk sent and not answered is either in flight (a finite deadline) or presumed lost
    (`lost`: waiting for its retransmission); `in_flight` counts the first kind, and the
    congestion window bounds it. Sending, after every batch of results and losses: first the
    presumed-lost chunks that may go (lowest first, with RETX), then new chunks in order, each
    only after the result of the chunk W before it (SwitchML's slot rule: chunk i uses slot
    i mod W whatever the window).

    A chunk is presumed lost when its timer expires (a suspect: `timer_lost`), or, if it was
    sent once, when DUPTHRESH later chunks of its tree were answered from their only copy
    (`confirmed`: the switch answers a tree's chunks in the order they were sent; only a loss,
    of this worker's or a peer's packet, reorders them). Confirmed chunks may go at once;
    suspects once results have stopped for a round trip (`quiet`). A result for a presumed-lost
    chunk before its retransmission went out cancels the retransmission; for a suspect it also
    proves the timeout spurious (`spurious_timeout`). A decrease of the window is also taken
    back when a chunk it presumed lost has its retransmission answered twice (`duplicate`).

    Chunks below `base` are done, and not-done chunks are within the last W sent: the slot rule
    holds every chunk back until the one W before is done.
    """

    def __init__(
        self,
        client: InaClient,
        payloads: npt.NDArray[np.void],
        first: int,
        result: Int32Array,
        overflow: BoolArray,
        expect: int = -1,
    ) -> None:
        self.c = client
        self.payloads = payloads
        self.first = first
        self.result = result
        self.overflow = overflow
        self.expect = expect  # the contrib every result carries (-1: any)
        n = len(payloads)
        self.n = n
        self.done = np.zeros(n, dtype=np.bool_)
        self.lost = np.zeros(n, dtype=np.bool_)
        self.sent_at = np.zeros(n, dtype=np.float64)
        self.deadline = np.full(n, np.inf)
        self.retries = np.zeros(n, dtype=np.int32)
        self.tx = np.zeros(n, dtype=np.int64)  # transmission number of the latest copy
        self.spurious = np.zeros(n, dtype=np.int32)
        # The latest chunk sent in each slot (-1: none yet). A slot carries one outstanding
        # chunk at a time (chunk i + W goes out only after the result of chunk i), so a result
        # is chunk slot_latest[slot] of this operation, or a duplicate of the one before it in
        # that slot: the 16-bit chunk counter in seq is unambiguous within a slot.
        self.slot_latest = np.full(client.window, -1, dtype=np.int64)
        # per tree, the highest chunk answered from its only copy (-1: none)
        self.answered_once = np.full(client.n_trees, -1, dtype=np.int64)
        self.base = 0  # every chunk below it is done
        self.next_new = 0  # the next chunk never sent
        self.in_flight = 0
        self.n_lost = 0
        self.timer_lost = np.zeros(n, dtype=np.bool_)  # presumed lost by its timer
        self.confirmed = np.zeros(n, dtype=np.bool_)  # presumed lost, and sure enough to resend
        self.last_result_at = client.clock()
        # the loss event (a decrease of the window, numbered per operation) in which each
        # chunk was last presumed lost, and the latest event not yet settled (-1: none)
        self.lost_event = np.full(n, -1, dtype=np.int64)
        self.events = 0
        self.event = -1
        self.remaining = n
        self.last_progress = client.clock()
        # the compiled path's scratch: [has SRTT, SRTT, RTTVAR, min RTT, and the recursion's
        # gains alpha, beta] (`kernels.take_results`), a batch's RTT samples and matches
        # (grown to the largest batch)
        self.rtt_state = np.zeros(6, dtype=np.float64)
        # with a framed transport, the frames it sends as they are (`_frames`)
        self.frames: npt.NDArray[np.uint8] | None = None
        self.framed: FramedTransport | None = None
        self.rtts = np.empty(0, dtype=np.float64)
        self.chunks = np.empty(0, dtype=np.int64)
        # the arrays above as the kernels take them (never replaced, only changed in place)
        self.sending = kernels.Sending(
            sent_at=self.sent_at, deadline=self.deadline, slot_latest=self.slot_latest
        )
        self.results = kernels.Results(
            done=self.done,
            retries=self.retries,
            result=self.result,
            overflow=self.overflow,
            answered_once=self.answered_once,
        )
        self.scratch = kernels.Scratch(rtts=self.rtts, chunks=self.chunks)
        self.sent = kernels.sent_args(self.sending, self.tx)
        self.taking: kernels.TakeArgs | None = None  # made on the first batch (the run's)

    # ---------------------------------------------------------------- sending

    def transmit(self, idx: npt.NDArray[np.int64] | slice, retx: bool) -> None:
        """Send chunks `idx`: retransmissions (an index array) with RETX, or the next new
        chunks (a slice)."""
        c, st = self.c, self.c.stats
        if self.framed is not None and self.frames is not None and not retx:
            assert isinstance(idx, slice)
            count = idx.stop - idx.start
            self.framed.send_framed(self.frames[idx])
        else:
            batch = self.payloads[idx]
            count = len(batch)
            if retx:
                batch = batch.copy()
                batch["ver_flags"] = (INA_VERSION << 4) | int(Flag.RETX)
            c.transport.send(batch)
        now = c.clock()
        if retx or not c.compiled:
            self.sent_at[idx] = now
            self.tx[idx] = np.arange(c._tx, c._tx + count)
            c._tx += count
        if retx:
            self.deadline[idx] = now + c.rtt.timeouts(self.retries[idx])
        elif c.compiled:
            assert isinstance(idx, slice)
            due = now + c.rtt.timeout(0)
            kernels.sent_new(idx.start, idx.stop, self.first, now, due, c._tx, *self.sent)
            c._tx += count
        else:
            assert isinstance(idx, slice)
            self.deadline[idx] = now + c.rtt.timeout(0)
            w, start = c.window, idx.start
            slot0 = (self.first + start) % w
            ids = range(start, idx.stop)
            if slot0 + count <= w:  # the slots of a run of new chunks, in order
                self.slot_latest[slot0 : slot0 + count] = ids
            else:
                self.slot_latest[(slot0 + np.arange(count)) % w] = ids
        self.in_flight += count
        st.packets_sent += count
        st.bytes_sent += count * FRAME_BYTES

    def fill(self) -> None:
        """Send what the congestion window allows: retransmissions first, then new chunks."""
        room = self.c.cc.allowed - self.in_flight
        if room <= 0:
            return
        if self.n_lost:
            base, hi = self.base, self.next_new
            ready = self.lost[base:hi]
            if not self.quiet(self.c.clock()):  # suspects wait while results come
                ready = ready & self.confirmed[base:hi]
            idx = (np.flatnonzero(ready) + base)[:room]
            if len(idx):
                if (self.retries[idx] >= self.c.max_retries).any():
                    self.fail(f"a chunk was retransmitted {self.c.max_retries} times")
                self.lost[idx] = False
                self.timer_lost[idx] = False
                self.confirmed[idx] = False
                self.n_lost -= len(idx)
                self.retries[idx] += 1
                self.c.stats.retransmissions += len(idx)
                self.transmit(idx, retx=True)
                room -= len(idx)
        start = self.next_new
        if room <= 0 or start >= self.n:
            return
        w = self.c.window
        stop = min(self.n, start + room, self.base + w)  # the slot rule
        if stop > start:
            self.next_new = stop
            self.transmit(slice(start, stop), retx=False)

    def hold(self) -> float:
        """How long results must stop before the timer's suspects are retransmitted."""
        rtt = self.c.rtt
        return rtt.srtt if rtt.srtt is not None else rtt.base_rto

    def quiet(self, now: float) -> bool:
        return now - self.last_result_at >= self.hold()

    # ---------------------------------------------------------------- receiving

    def match(self, got: npt.NDArray[np.void]) -> list[int]:
        """The chunk (of this operation) each record of `got` is a result of, -1 if none: a
        result of this job and run for the latest chunk sent in its slot, or for the one W
        before it (a late duplicate). The counter in seq is unambiguous within a slot. A
        result for one of them whose contrib is not `expect` is OTHER_RUN."""
        c, w = self.c, self.c.window
        first16 = self.first & SEQ_CHUNK_MASK
        expect = self.expect
        if len(got) <= SMALL_BATCH:
            out = []
            buf = got.tobytes()
            latest_of = self.slot_latest
            for off in range(0, len(buf), INA_BYTES):
                ver_flags, _, job, _, _, slot, contrib, seq = INA_HEADER_STRUCT.unpack_from(
                    buf, off
                )
                index = slot & SLOT_INDEX_MASK
                chunk = -1
                if (
                    job == c.job_id
                    and ver_flags & _RESULT
                    and seq >> RUN_SHIFT == c.run
                    and index < w
                ):
                    last = int(latest_of[index])
                    count16 = seq & SEQ_CHUNK_MASK
                    if last >= 0 and (first16 + last) & SEQ_CHUNK_MASK == count16:
                        chunk = last
                    elif last >= w and (first16 + last - w) & SEQ_CHUNK_MASK == count16:
                        chunk = last - w
                    if chunk >= 0 and expect >= 0 and contrib != expect:
                        chunk = OTHER_RUN
                out.append(chunk)
            return out
        chunks: list[int] = self.match_many(got).tolist()
        return chunks

    def match_many(self, got: npt.NDArray[np.void]) -> npt.NDArray[np.int64]:
        """`match` in numpy, for batches larger than SMALL_BATCH."""
        c, w = self.c, self.c.window
        first16 = self.first & SEQ_CHUNK_MASK
        seqs = got["seq"].astype(np.int64)
        slots = (got["slot"] & SLOT_INDEX_MASK).astype(np.int64)
        latest = self.slot_latest[np.minimum(slots, w - 1)]
        counter = seqs & SEQ_CHUNK_MASK
        mine = (
            (got["job_id"] == c.job_id)
            & ((got["ver_flags"] & _RESULT) != 0)
            & ((seqs >> RUN_SHIFT) == c.run)
            & (slots < w)
        )
        current = mine & (latest >= 0) & (((first16 + latest) & SEQ_CHUNK_MASK) == counter)
        previous = (
            mine & ~current & (latest >= w) & (((first16 + latest - w) & SEQ_CHUNK_MASK) == counter)
        )
        chunks: npt.NDArray[np.int64] = np.where(
            current, latest, np.where(previous, latest - w, -1)
        )
        if self.expect >= 0:
            chunks[(chunks >= 0) & (got["contrib"] != self.expect)] = OTHER_RUN
        return chunks

    def take(self, got: npt.NDArray[np.void], now: float) -> None:
        """A batch of received records: results complete their chunks."""
        if got.dtype != INA_DTYPE:  # e.g. concatenated: numpy makes the fields native
            got = got.astype(INA_DTYPE)
        if not self.c.compiled:
            self.take_reference(got, now)
        elif not self.take_compiled(got, now):
            self.take_declined(got, now)

    def take_reference(self, got: npt.NDArray[np.void], now: float) -> None:
        """`take` without the compiled pass: in numpy for a large batch of first results,
        else record by record."""
        if len(got) > SMALL_BATCH:
            matched = self.match_many(got)
            if (matched == OTHER_RUN).any():
                self.other_run(got[matched == OTHER_RUN][0])
            if self.take_first_results(got, matched, now):
                return
            chunks: list[int] = matched.tolist()
        else:
            chunks = self.match(got)
            if OTHER_RUN in chunks:
                self.other_run(got[chunks.index(OTHER_RUN)])
        self.take_records(got, chunks, now)

    def take_declined(self, got: npt.NDArray[np.void], now: float) -> None:
        """A batch the compiled pass declined (a duplicate, a result for a chunk presumed lost,
        a chunk twice): record by record at once. `take_first_results` declines every batch
        the compiled pass does (the same conditions), so it is not tried."""
        chunks = self.match(got) if len(got) <= SMALL_BATCH else self.match_many(got).tolist()
        if OTHER_RUN in chunks:
            self.other_run(got[chunks.index(OTHER_RUN)])
        self.take_records(got, chunks, now)

    def take_records(self, got: npt.NDArray[np.void], chunks: list[int], now: float) -> None:
        """`take`, record by record: `chunks[j]` is the chunk record j is a result of (`match`;
        -1 if none, never OTHER_RUN)."""
        c, st = self.c, self.c.stats
        flags = got["ver_flags"].tolist()
        values = got["values"]
        done, deadline, lost, retries = self.done, self.deadline, self.lost, self.retries
        per_rtt = max(self.in_flight, 1)
        limited = 2 * self.in_flight >= c.cc.allowed
        n_new = 0
        spurious_timeout, undo, delay = False, False, None
        for j, i in enumerate(chunks):
            if i < 0:
                st.foreign_packets += 1
                continue
            if done[i]:
                st.duplicate_results += 1
                self.duplicate(i)
                continue
            done[i] = True
            n_new += 1
            self.result[i] = values[j]
            if flags[j] & _OVERFLOW:
                self.overflow[i] = True
                st.overflowed_chunks += 1
            if deadline[i] != np.inf:
                self.in_flight -= 1
                deadline[i] = np.inf
            elif lost[i]:  # answered before its retransmission went out: none goes
                lost[i] = False
                self.confirmed[i] = False
                self.n_lost -= 1
                if self.timer_lost[i]:
                    self.timer_lost[i] = False
                    spurious_timeout = True
                    undo |= bool(self.event >= 0 and self.lost_event[i] == self.event)
                    if retries[i] == 0:
                        late = now - float(self.sent_at[i])
                        delay = late if delay is None else max(delay, late)
            if retries[i] == 0:  # Karn's rule: only chunks sent once are timed
                rtt = now - float(self.sent_at[i])
                c.rtt.sample(rtt, per_rtt)
                if len(st.rtt_samples) < 10_000:
                    st.rtt_samples.append(rtt)
                tree = i % c.n_trees
                if i > self.answered_once[tree]:
                    self.answered_once[tree] = i
        if not n_new:
            return
        self.last_result_at = now
        if spurious_timeout:
            self.spurious_timeout(now, delay, undo)
        self.completed(n_new, now, limited)

    def take_first_results(
        self, got: npt.NDArray[np.void], chunks: npt.NDArray[np.int64], now: float
    ) -> bool:
        """`take` in numpy for a batch in which every result is the first for a chunk in
        flight (the common case): the same changes, record by record in the same order where
        order matters (the RTT samples). False, with nothing changed, for any other batch."""
        c, st = self.c, self.c.stats
        mine = chunks >= 0
        idx = chunks[mine]
        n_new = len(idx)
        if not n_new:
            st.foreign_packets += len(chunks)
            return True
        if self.done[idx].any() or np.isinf(self.deadline[idx]).any():
            return False  # a duplicate, or a chunk presumed lost: record by record
        if n_new > 1 and len(np.unique(idx)) != n_new:
            return False
        per_rtt = max(self.in_flight, 1)
        limited = 2 * self.in_flight >= c.cc.allowed
        st.foreign_packets += len(chunks) - n_new
        self.done[idx] = True
        self.result[idx] = got["values"][mine]
        over = (got["ver_flags"][mine] & _OVERFLOW) != 0
        if over.any():
            self.overflow[idx[over]] = True
            st.overflowed_chunks += int(over.sum())
        self.deadline[idx] = np.inf
        self.in_flight -= n_new
        once = idx[self.retries[idx] == 0]  # Karn's rule: only chunks sent once are timed
        if len(once):
            rtts: list[float] = (now - self.sent_at[once]).tolist()
            c.rtt.sample_many(rtts, per_rtt)
            room = 10_000 - len(st.rtt_samples)
            if room > 0:
                st.rtt_samples.extend(rtts[:room])
            np.maximum.at(self.answered_once, once % c.n_trees, once)
        self.last_result_at = now
        self.completed(n_new, now, limited)
        return True

    def take_compiled(self, got: npt.NDArray[np.void], now: float) -> bool:
        """`take_first_results` in one compiled pass (`kernels.take_results`), matching
        included: the same changes for a batch in which every result is the first for a chunk
        in flight. False, with nothing changed, for any other batch."""
        raw = np.ascontiguousarray(got).view(np.uint8).reshape(-1)
        return self.take_at(raw, _record_offsets(len(got)), now)

    def take_frames(
        self, buf: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64], now: float
    ) -> None:
        """`take` for records where a framed transport received them: record j at
        buf[offsets[j]:]. The compiled pass takes them in place; a batch it declines is
        copied out and taken record by record (`take_declined`)."""
        if not self.take_at(buf, offsets, now):
            got = np.empty((len(offsets), INA_BYTES), np.uint8)
            kernels.copy_rows(buf, offsets, got)
            self.take_declined(got.view(INA_DTYPE).reshape(-1), now)

    def take_at(
        self, buf: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64], now: float
    ) -> bool:
        """`take_compiled` for the records at buf[offsets[j]:]."""
        c, st, rtt = self.c, self.c.stats, self.c.rtt
        n = len(offsets)
        if len(self.chunks) < n:
            self.chunks = np.empty(n, dtype=np.int64)
            self.rtts = np.empty(n, dtype=np.float64)
            self.scratch = kernels.Scratch(rtts=self.rtts, chunks=self.chunks)
            self.taking = None
        state = self.rtt_state
        scale = max(self.in_flight, 1)  # per_rtt
        alpha, beta = rtt.ALPHA / scale, rtt.BETA / scale
        state[:] = (0.0, 0.0, 0.0, rtt.min_rtt, alpha, beta) if rtt.srtt is None else (
            1.0, rtt.srtt, rtt.rttvar, rtt.min_rtt, alpha, beta
        )  # fmt: skip
        limited = 2 * self.in_flight >= c.cc.allowed
        taking = self.taking
        if taking is None:
            assert c.run is not None
            match = kernels.Match(
                job_id=c.job_id,
                run=c.run,
                expect=self.expect,
                window=c.window,
                first16=self.first & SEQ_CHUNK_MASK,
            )
            taking = kernels.take_args(match, self.sending, self.results, self.scratch)
            self.taking = taking
        status, n_new, n_over, n_rtts, base = kernels.take_results(
            buf, offsets, now, self.base, self.next_new, state, *taking
        )
        if status == kernels.OTHER_RUN:  # n_new: the record's index
            at = int(offsets[n_new])
            self.other_run(buf[at : at + INA_BYTES].view(INA_DTYPE)[0])
        if status != kernels.TAKEN:
            return False
        st.foreign_packets += n - n_new
        if not n_new:
            return True
        st.overflowed_chunks += n_over
        self.in_flight -= n_new
        if n_rtts:
            rtt.srtt, rtt.rttvar, rtt.min_rtt = float(state[1]), float(state[2]), float(state[3])
            rtt.backoff = 0
            rtt.samples += n_rtts
            room = 10_000 - len(st.rtt_samples)
            if room > 0:
                st.rtt_samples.extend(self.rtts[: min(room, n_rtts)].tolist())
        self.last_result_at = now
        self.completed(n_new, now, limited, base)
        return True

    def completed(self, n_new: int, now: float, limited: bool, base: int | None = None) -> None:
        """`n_new` chunks just completed: the window's base (`base` if the caller moved it
        already), the congestion window, stats."""
        c, st = self.c, self.c.stats
        self.remaining -= n_new
        st.results += n_new
        if base is None:
            base = self.base
            while base < self.next_new and self.done[base]:
                base += 1
        self.base = base
        c.cc.on_results(n_new, limited)
        cwnd = c.cc.cwnd
        st.cwnd_sum += cwnd * n_new
        st.cwnd_min = min(st.cwnd_min, cwnd)
        st.cwnd_max = max(st.cwnd_max, cwnd)
        self.last_progress = now
        if c.on_progress is not None:
            c.on_progress(n_new)

    def spurious_timeout(self, now: float, delay: float | None, undo: bool) -> None:
        """A chunk the timer presumed lost was answered from a copy sent before its
        retransmission (none had gone out): the timeout was spurious, a delay, not a loss
        (F-RTO's test). `delay`: that chunk's round trip, if it was sent once. The timer is
        made to cover the delay (RTTVAR raised: `RttEstimator.cover`) and re-armed for the
        chunks in flight; the chunks the timer presumed lost and not yet retransmitted are in
        flight again; with `undo` (the chunk was presumed lost in the window's last decrease),
        the decrease is taken back."""
        c = self.c
        if undo:
            self.event = -1  # this decrease is settled
            if c.cc.undo():
                c.stats.undone_decreases += 1
        if delay is not None:
            c.rtt.cover(delay)
        lo, hi = self.base, self.next_new
        flying = (self.deadline[lo:hi] != np.inf) & (self.retries[lo:hi] == 0)
        if flying.any():
            ids = np.flatnonzero(flying) + lo
            self.deadline[ids] = np.maximum(self.deadline[ids], self.sent_at[ids] + c.rtt.rto)
        back = np.flatnonzero(self.timer_lost[lo:hi] & ~self.confirmed[lo:hi]) + lo
        if len(back):
            self.lost[back] = False
            self.timer_lost[back] = False
            self.n_lost -= len(back)
            self.deadline[back] = now + c.rtt.timeouts(self.retries[back])
            self.in_flight += len(back)

    def duplicate(self, i: int) -> None:
        """A second result for chunk i: up to one per retransmission of the chunk counts as
        spurious (the switch had the result when that retransmission arrived). If the chunk
        was presumed lost in the window's last decrease, the decrease is taken back."""
        if self.spurious[i] < self.retries[i]:
            self.spurious[i] += 1
            self.c.stats.spurious_retransmissions += 1
            if self.event >= 0 and self.lost_event[i] == self.event:
                self.event = -1
                if self.c.cc.undo():
                    self.c.stats.undone_decreases += 1

    # ---------------------------------------------------------------- losses

    def detect_losses(self, now: float, soonest: float) -> None:
        """Presume lost the chunks whose timer expired (if the soonest deadline has passed):
        suspects, resent once results stop coming for a round trip (`quiet`), unless one of
        them is answered first; and, sure enough to resend at once (`confirmed`), the chunks
        sent once (in flight or suspects) that DUPTHRESH later chunks of their tree overtook."""
        c, st = self.c, self.c.stats
        t = c.n_trees
        lo, hi = self.base, self.next_new
        check_fast = int(self.answered_once.max()) >= lo + DUPTHRESH * t
        if hi <= lo or (soonest > now and not check_fast):
            return
        deadline = self.deadline[lo:hi]
        flying = deadline != np.inf
        expired = flying & (deadline <= now)
        n_exp = int(expired.sum())
        fast = None
        n_fast = 0
        if check_fast:
            ids = np.arange(lo, hi, dtype=np.int64)
            overtaken = (
                (self.retries[lo:hi] == 0)
                & ~self.confirmed[lo:hi]
                & (ids + DUPTHRESH * t <= self.answered_once[ids % t])
            )
            fast = overtaken & (flying | self.lost[lo:hi])
            self.confirmed[lo:hi] |= fast
            fast &= flying  # newly presumed lost (the others were suspects already)
            n_fast = int(fast.sum())
        if not n_exp and not n_fast:
            return
        gone_mask = expired | fast if fast is not None else expired
        gone = np.flatnonzero(gone_mask) + lo
        self.deadline[gone] = np.inf
        self.lost[gone] = True
        self.timer_lost[lo:hi] |= expired & ~self.confirmed[lo:hi]
        self.in_flight -= len(gone)
        self.n_lost += len(gone)
        st.timeouts += n_exp
        st.fast_retransmits += n_fast
        if c.cc.on_loss(int(self.tx[gone].max()), c._tx, timeout=n_exp > 0):
            st.loss_events += 1
            self.events += 1
            self.event = self.events
            if n_exp:
                c.rtt.back_off()
        if self.event >= 0:
            self.lost_event[gone] = self.event

    def other_run(self, record: np.void) -> NoReturn:
        """A result of this job, run and chunk whose contrib is not this run's sum."""
        raise InaRunError(
            reused_run_message(
                self.c.job_id,
                int(record["seq"]) >> RUN_SHIFT,
                f"a result for chunk {int(record['seq']) & SEQ_CHUNK_MASK} carries contrib "
                f"{int(record['contrib']):#06x}, not this run's {self.expect:#06x}",
            )
        )

    def fail(self, reason: str) -> NoReturn:
        c = self.c
        now = c.clock()
        missing = [int(self.first + i) for i in np.flatnonzero(~self.done)]
        if c.check_run:
            reason += (
                f"; a run id used before on this installation stalls too (the switch drops "
                f"its chunks as STALE): if every worker is up, give them a new one, not {c.run}"
            )
        raise InaTimeoutError(c.job_id, missing, now - self.last_progress, reason)

    # ---------------------------------------------------------------- the loop

    def soonest(self) -> float:
        """The earliest deadline of a chunk in flight (inf: none)."""
        if not self.in_flight:
            return math.inf
        return float(self.deadline[self.base : self.next_new].min())

    def wake_at(self, now: float) -> float:
        """When its driver must call `after` next, at the latest, if no result comes first:
        the soonest deadline, the moment results will have stopped for a round trip (if chunks
        are presumed lost), or the moment to give up."""
        wake = min(self.soonest(), self.last_progress + self.c.give_up_after)
        if self.n_lost:  # suspects go out once results stop for a round trip
            quiet_at = self.last_result_at + self.hold()
            if quiet_at > now:
                wake = min(wake, quiet_at)
        return wake

    def after(self, now: float) -> None:
        """After a batch of results (not the last) or a wait: losses presumed, giving up
        (`InaTimeoutError`) if nothing progressed for too long, and what may go now sent."""
        self.detect_losses(now, self.soonest())
        if now >= self.last_progress + self.c.give_up_after:  # the moment `wake_at` names
            self.fail(f"no progress for {now - self.last_progress:.1f}s")
        self.fill()

    def run(self) -> None:
        """The exchange on its client's transport, blocking until every chunk is done: the
        driver of `fill`, `take` / `take_frames`, `wake_at` and `after` that a simulator
        drives with its events instead."""
        c = self.c
        framed = self.framed
        self.fill()
        while self.remaining:
            now = c.clock()
            timeout = min(max(self.wake_at(now) - now, 0.0), MAX_WAIT)
            if framed is not None:  # the records where they arrived
                buf, offsets = framed.recv_offsets(timeout)
                now, got_any = c.clock(), len(offsets) > 0
                if got_any:
                    self.take_frames(buf, offsets, now)
            else:
                got = c.transport.recv(timeout)
                now, got_any = c.clock(), len(got) > 0
                if got_any:
                    self.take(got, now)
            if got_any and not self.remaining:
                break
            self.after(now)
