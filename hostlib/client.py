"""The INA allreduce client: what a training worker calls to sum an array through the switch.

SwitchML's self-clocked window: at most W chunks of K lanes are outstanding; chunk i (numbered
per run from 0, never restarting within the run, so that a (slot, set) always sees a new seq on
a new use) goes to slot i mod W, set (i div W) mod 2, tree (i mod W) mod T, with seq = run << 16
| (i mod 2^16); the result of chunk i releases chunk i + W. A chunk whose result does not come
back in time is retransmitted with RETX, with an adaptive timeout and exponential backoff;
duplicate results are ignored. A worker never waits forever: if nothing progresses for
`give_up_after` seconds (or a chunk exhausts its retries), `InaTimeoutError` names the job and
the chunks that are missing.

A run is one execution of the job's workers: every worker of a run passes the same `run` id
(0..65535), and each new run (workers restarted, a job rerun from chunk 0) takes a new one, so
that the switch tells the new run's chunk 0 from the old run's (docs/protocol.md, "Runs and
installations"). Launchers draw it once and hand it to every worker.

    client = InaClient(LoopbackWireTransport(1, wire_dir), job_id=1, window=64, run=run)
    total = client.allreduce(gradient)                  # fixed-point codec by default
    ints, overflowed = client.allreduce_int32(values, Opcode.SUM)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from inaemu.hostlib.codecs.base import HomomorphicCodec, Int32Array, Phase, run_phases
from inaemu.hostlib.transport import Transport
from inaemu.hostlib.wire import (
    FRAME_BYTES,
    INA_VERSION,
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

BoolArray = npt.NDArray[np.bool_]


class InaError(RuntimeError):
    """Base of the client's errors."""


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


class InaClient:
    """One worker's end of an INA job.

    Every worker of a job must make the same sequence of calls with arrays of the same length
    (the chunk numbering and the codecs' phases depend on it), and use the same `run` id, a new
    one for every run of the job (see the module doc).
    """

    def __init__(
        self,
        transport: Transport,
        *,
        job_id: int,
        window: int,
        n_workers: int | None = None,
        n_trees: int = 1,
        run: int = 0,
        initial_rto: float = 0.1,
        min_rto: float = 0.02,
        max_rto: float = 1.0,
        max_retries: int = 50,
        give_up_after: float = 30.0,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        if not 1 <= window <= 0x7FFF:
            raise ValueError(f"window must be 1..32767 (at most the job's pool size), got {window}")
        if n_trees < 1 or window % n_trees:
            raise ValueError(f"window {window} must be a multiple of the tree count {n_trees}")
        if not 0 <= job_id <= 0xFFFF:
            raise ValueError(f"job_id must fit 16 bits, got {job_id}")
        self.transport = transport
        self.job_id = job_id
        self.window = window
        self.n_workers = n_workers
        self.n_trees = n_trees
        self.rto = initial_rto
        self.min_rto, self.max_rto = min_rto, max_rto
        self.max_retries = max_retries
        self.give_up_after = give_up_after
        self.on_progress = on_progress  # called with the number of chunks just completed
        self.run = 0  # this run's id: the top 16 bits of every seq
        self.next_chunk = 0  # chunk number within the run; never restarts (see module doc)
        self.start_run(run)
        self.stats = ClientStats()
        self._srtt: float | None = None
        self._rttvar = 0.0

    def start_run(self, run: int) -> None:
        """Begin run `run` (0..65535): chunks are numbered from 0 again. Every worker of the
        job must start the same run before its first operation of the run."""
        if not 0 <= run <= MAX_RUN:
            raise ValueError(f"run must be 0..{MAX_RUN}, got {run}")
        self.run = run
        self.next_chunk = 0

    # ------------------------------------------------------------------ public API

    def allreduce(
        self, x: npt.NDArray[np.generic], codec: HomomorphicCodec | None = None
    ) -> npt.NDArray[np.generic]:
        """Sum `x` over the job's workers through the switch, encoded by `codec`."""
        if codec is None:
            from inaemu.hostlib.codecs import FixedPointCodec

            codec = FixedPointCodec()
        if self.n_workers is None:
            raise InaError("allreduce with a codec needs n_workers (the job's worker count)")
        return run_phases(codec.phases(x, self.n_workers), self._run_phase)

    def _run_phase(self, phase: Phase) -> tuple[Int32Array, BoolArray]:
        return self.allreduce_int32(phase.values, phase.opcode)

    def allreduce_int32(
        self, values: npt.NDArray[np.int32], opcode: Opcode = Opcode.SUM
    ) -> tuple[Int32Array, BoolArray]:
        """Aggregate int32 `values` with `opcode`; returns (result, per-element overflow mask).

        The mask marks the elements of chunks whose result carried Flag.OVERFLOW (a saturated
        SUM somewhere in that chunk).
        """
        flat = np.ascontiguousarray(values, dtype=np.int32).reshape(-1)
        n = flat.size
        self.stats.operations += 1
        if n == 0:
            return np.empty(0, dtype=np.int32), np.zeros(0, dtype=np.bool_)
        n_chunks = -(-n // K)
        padded = np.zeros(n_chunks * K, dtype=np.int32)
        padded[:n] = flat
        first = self.next_chunk
        self.next_chunk += n_chunks
        chunk_ids = np.arange(first, first + n_chunks, dtype=np.int64)
        slot_index = chunk_ids % self.window
        lanes = np.full(n_chunks, K, dtype=np.uint8)
        lanes[-1] = n - (n_chunks - 1) * K
        payloads = pack_payloads(
            opcode=int(opcode),
            job_id=self.job_id,
            tree_id=slot_index % self.n_trees,
            slot=slot_index | (((chunk_ids // self.window) % 2) * SLOT_SET_BIT),
            seq=(self.run << RUN_SHIFT) | (chunk_ids & SEQ_CHUNK_MASK),
            values=padded.reshape(n_chunks, K),
            lanes=lanes,
        )
        result = np.empty((n_chunks, K), dtype=np.int32)
        overflow = np.zeros(n_chunks, dtype=np.bool_)
        self._exchange(payloads, first, result, overflow)
        mask = np.repeat(overflow, K)[:n]
        return result.reshape(-1)[:n], mask

    # ------------------------------------------------------------------ the window

    def _exchange(
        self,
        payloads: npt.NDArray[np.void],
        first: int,
        result: Int32Array,
        overflow: BoolArray,
    ) -> None:
        n_chunks = len(payloads)
        window = self.window
        done = np.zeros(n_chunks, dtype=np.bool_)
        sent_at = np.zeros(n_chunks, dtype=np.float64)
        deadline = np.full(n_chunks, np.inf)
        retries = np.zeros(n_chunks, dtype=np.int32)
        # The latest chunk sent in each slot (-1: none yet). A slot carries one outstanding
        # chunk at a time (chunk i + W goes out only after the result of chunk i), so a result
        # is chunk slot_latest[slot] of this operation, or a duplicate of the one before it in
        # that slot: the 16-bit chunk counter in seq is unambiguous within a slot.
        slot_latest = np.full(window, -1, dtype=np.int64)
        first_slot = first % window
        first16 = first & SEQ_CHUNK_MASK
        remaining = n_chunks
        last_progress = time.monotonic()
        stats = self.stats

        def send(idx: npt.NDArray[np.int64], retx: bool) -> None:
            batch = payloads[idx]
            if retx:
                batch = batch.copy()
                batch["ver_flags"] = (INA_VERSION << 4) | int(Flag.RETX)
            else:
                slot_latest[(first_slot + idx) % window] = idx
            self.transport.send(batch)
            now = time.monotonic()
            sent_at[idx] = now
            backoff = np.minimum(self.rto * (2.0 ** retries[idx]), self.max_rto)
            deadline[idx] = now + backoff
            stats.packets_sent += len(idx)
            stats.bytes_sent += len(idx) * FRAME_BYTES

        send(np.arange(min(window, n_chunks)), retx=False)
        while remaining:
            wait = float(deadline.min()) - time.monotonic()
            got = self.transport.recv(min(max(wait, 0.0), 0.05))
            now = time.monotonic()
            if len(got):
                seqs = got["seq"].astype(np.int64)
                slots = (got["slot"] & SLOT_INDEX_MASK).astype(np.int64)
                latest = slot_latest[np.minimum(slots, window - 1)]
                counter = seqs & SEQ_CHUNK_MASK
                mine = (
                    (got["job_id"] == self.job_id)
                    & ((got["ver_flags"] & int(Flag.RESULT)) != 0)
                    & ((seqs >> RUN_SHIFT) == self.run)
                    & (slots < window)
                )
                current = mine & (latest >= 0) & (((first16 + latest) & SEQ_CHUNK_MASK) == counter)
                previous = (
                    mine
                    & ~current
                    & (latest >= window)
                    & (((first16 + latest - window) & SEQ_CHUNK_MASK) == counter)
                )
                chunk = np.where(current, latest, np.where(previous, latest - window, -1))
                ok = chunk >= 0
                stats.foreign_packets += int((~ok).sum())
                released: list[int] = []
                released_before = remaining
                for rec, c in zip(got[ok], chunk[ok], strict=True):
                    i = int(c)
                    if done[i]:
                        stats.duplicate_results += 1
                        continue
                    done[i] = True
                    remaining -= 1
                    stats.results += 1
                    result[i] = rec["values"]
                    if int(rec["ver_flags"]) & int(Flag.OVERFLOW):
                        overflow[i] = True
                        stats.overflowed_chunks += 1
                    if retries[i] == 0:  # Karn: time only chunks sent once
                        self._rtt_sample(now - sent_at[i])
                    deadline[i] = np.inf
                    last_progress = now
                    if i + window < n_chunks:  # result i releases chunk i + W, only it
                        released.append(i + window)
                if released:
                    send(np.array(released, dtype=np.int64), retx=False)
                if self.on_progress is not None and released_before != remaining:
                    self.on_progress(released_before - remaining)
            expired = np.flatnonzero(deadline <= now)
            if len(expired):
                if (retries[expired] >= self.max_retries).any() or (
                    now - last_progress > self.give_up_after
                ):
                    missing = [int(first + i) for i in np.flatnonzero(~done)]
                    reason = (
                        f"no progress for {now - last_progress:.1f}s"
                        if now - last_progress > self.give_up_after
                        else f"a chunk was retransmitted {self.max_retries} times"
                    )
                    raise InaTimeoutError(self.job_id, missing, now - last_progress, reason)
                retries[expired] += 1
                stats.retransmissions += len(expired)
                send(expired.astype(np.int64), retx=True)
        stats.chunks += n_chunks

    def _rtt_sample(self, rtt: float) -> None:
        """RFC 6298 smoothed RTT; the timeout is srtt + 4 rttvar, clamped."""
        if self._srtt is None:
            self._srtt, self._rttvar = rtt, rtt / 2
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self._srtt - rtt)
            self._srtt = 0.875 * self._srtt + 0.125 * rtt
        self.rto = min(max(self._srtt + 4 * self._rttvar, self.min_rto), self.max_rto)
        if len(self.stats.rtt_samples) < 10_000:
            self.stats.rtt_samples.append(rtt)
