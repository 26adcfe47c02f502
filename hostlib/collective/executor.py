"""Execute an allreduce `Schedule` (inaemu.collectives.schedule) on one rank over a
`PeerChannel`: the host-collective counterpart of `InaClient`.

    client = ScheduleClient(Schedule.load("ring.json"), rank, TcpPeers(rank, addrs, token=t))
    total = client.allreduce(gradient)                       # plain float32 sums
    total = client.allreduce(gradient, FixedPointCodec())    # INA's fixed point, bit for bit
    ints, overflowed = client.allreduce_int32(values, Opcode.MAX)

Every rank makes the same sequence of calls with arrays of the same size. The array is cut
into the schedule's chunks (`chunk_bounds`); step by step, a rank first sends, for each
transfer it is the source of, its chunks as they were at the step's start, then takes each
transfer it is the destination of, in the step's order, and applies it (REDUCE adds, COPY
replaces). Each message carries a header (run, operation, step, transfer, kind, size) that the
receiver checks, so ranks that run different schedules or calls fail at once naming the peer,
instead of adding garbage.

Codecs (`allreduce(x, codec)`):

- `None` or `PlainCodec()`: sums in the input's dtype (float32 or float64), in the schedule's
  order: a REDUCE computes dst + src.
- any `HomomorphicCodec` (`FixedPointCodec`, `Int32Codec`, `SketchCodec`): each phase is an
  int32 SUM (saturating, with a per-element overflow mask that travels with the values), MAX
  or OR allreduce through the schedule. Integer SUM, MAX and OR do not depend on the order, so
  the results equal the switch's bit for bit.
- `InceptionnCodec(error_bound)`: INCEPTIONN's compression on every hop (docs/codecs.md). A
  chunk a rank sends is compressed once; the rank then keeps the decompressed value itself
  (so sender and receiver agree on it) and forwards the same bytes on later COPY hops; a
  REDUCE receiver decompresses and adds, and its sum is compressed afresh when it is sent on.
  `inceptionn_quantizations(schedule)` counts the compressions behind each chunk's result,
  `inceptionn_error_bound` turns them into an element-wise error bound.

`stats` (`ScheduleStats`) keeps operations, steps, seconds and the last operation's time per
step; `summary()` adds the channel's bytes sent and received per peer.
"""

from __future__ import annotations

import enum
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from inaemu.collectives.schedule import Op, Schedule, ScheduleError, Transfer, chunk_bounds
from inaemu.common.wire import INT32_MAX, INT32_MIN, MAX_RUN, Opcode
from inaemu.hostlib.codecs import CODECS, make_codec
from inaemu.hostlib.codecs.base import HomomorphicCodec, Int32Array, Phase, run_phases
from inaemu.hostlib.codecs.inceptionn import DEFAULT_ERROR_BOUND, compress, decompress
from inaemu.hostlib.collective.peers import PeerChannel, PeerError

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.floating[Any]]

UNIT_ROUNDOFF_F32: Final = 2.0**-24  # |fl(a + b) - (a + b)| <= this * |a + b|


class Kind(enum.IntEnum):
    """What a message's values are, and how a REDUCE combines them."""

    FLOAT32 = 1
    FLOAT64 = 2
    INT32_SUM = 3
    INT32_MAX = 4
    INT32_OR = 5
    INCEPTIONN = 6


_INT_KIND = {Opcode.SUM: Kind.INT32_SUM, Opcode.MAX: Kind.INT32_MAX, Opcode.OR: Kind.INT32_OR}
# run, kind, flags, operation, step, transfer index within the step, array elements
_HEADER = struct.Struct("<HBBIIIQ")
HEADER_BYTES = _HEADER.size
FLAG_OVERFLOW = 1  # an int32 SUM message: a bitmap of saturated elements follows the values


class Header(NamedTuple):
    """What every message starts with: which run, operation, step and transfer it is."""

    run: int
    kind: int
    flags: int
    op: int  # the operation's number within the run (mod 2^32)
    step: int
    transfer: int  # the transfer's index within the step
    elements: int  # of the whole array


def read_header(msg: bytes | bytearray | memoryview) -> Header:
    """The header of message `msg` (ValueError if it is shorter than one)."""
    if len(msg) < HEADER_BYTES:
        raise ValueError(f"a message of {len(msg)} bytes, no header")
    return Header(*_HEADER.unpack_from(msg))


_LEN = struct.Struct("<I")  # INCEPTIONN: each chunk's compressed bytes, length-prefixed


@dataclass(frozen=True)
class PlainCodec:
    """Sums in the input's own float dtype, as the schedule adds."""

    name: str = "plain"


@dataclass(frozen=True)
class InceptionnCodec:
    """INCEPTIONN on every hop (see the module doc), each compression within `error_bound`."""

    error_bound: float = DEFAULT_ERROR_BOUND
    name: str = "inceptionn"


ScheduleCodec = HomomorphicCodec | PlainCodec | InceptionnCodec
SCHEDULE_CODECS: Final = ("plain", "inceptionn", *sorted(CODECS))


def make_schedule_codec(name: str) -> ScheduleCodec:
    """ "plain", "inceptionn" or a name of `CODECS` (fixedpoint, int32, sketch, ...)."""
    if name == "plain":
        return PlainCodec()
    if name == "inceptionn":
        return InceptionnCodec()
    if name in CODECS:
        return make_codec(name)
    raise ValueError(f"unknown codec {name!r}; known: {', '.join(SCHEDULE_CODECS)}")


@dataclass
class ScheduleStats:
    """Counters of one `ScheduleClient` over its lifetime."""

    operations: int = 0  # allreduce_int32 calls, plain and INCEPTIONN allreduces
    steps: int = 0  # schedule steps executed
    messages_sent: int = 0
    messages_received: int = 0
    seconds: float = 0.0  # in operations, all of them
    last_seconds: float = 0.0  # the last operation
    step_seconds: list[float] = field(default_factory=list)  # the last operation, per step
    step_log: list[float] = field(default_factory=list)  # every step of every operation


# a rank's part of a schedule: per step, (transfer index, transfer) it sends and receives
RankPlan = list[tuple[list[tuple[int, Transfer]], list[tuple[int, Transfer]]]]


def rank_plans(schedule: Schedule) -> list[RankPlan]:
    """Every rank's part of `schedule` (validated), in one pass over its transfers: what
    ranks that are threads of one process share, instead of each validating and scanning
    the whole schedule (a ring over n ranks has n^2 transfers)."""
    schedule.validate()
    plans: list[RankPlan] = [[([], []) for _ in schedule.steps] for _ in range(schedule.n_ranks)]
    for s, step in enumerate(schedule.steps):
        for i, t in enumerate(step):
            plans[t.src][s][0].append((i, t))
            plans[t.dst][s][1].append((i, t))
    return plans


class ScheduleClient:
    """Rank `rank`'s end of `schedule`, over `channel` (see the module doc). Every wait for a
    message is bounded by `timeout` seconds (`PeerError` naming the peer); `run` (0..65535),
    as for `InaClient`, tells the messages of successive runs apart. `plan`: this rank's
    `rank_plans(schedule)[rank]`, if the caller made them (else the schedule is validated
    and scanned here)."""

    def __init__(
        self,
        schedule: Schedule,
        rank: int,
        channel: PeerChannel,
        *,
        timeout: float = 30.0,
        run: int = 0,
        plan: RankPlan | None = None,
    ) -> None:
        if plan is None:
            schedule.validate()
        if channel.n_ranks != schedule.n_ranks:
            raise ScheduleError(
                f"{schedule.algo}: {schedule.n_ranks} ranks, but the channel connects "
                f"{channel.n_ranks}"
            )
        if not (0 <= rank < schedule.n_ranks and channel.rank == rank):
            raise ScheduleError(
                f"{schedule.algo}: rank {rank} (channel's rank {channel.rank}), expected "
                f"0..{schedule.n_ranks - 1} and the same on both"
            )
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.schedule = schedule
        self.rank = rank
        self.channel = channel
        self.timeout = timeout
        self.stats = ScheduleStats()
        self.run = 0
        self.op = 0  # operations of this run so far
        self.start_run(run)
        # per step: (transfer index, transfer) this rank sends, and those it receives
        self._plan: RankPlan = (
            plan
            if plan is not None
            else [
                (
                    [(i, t) for i, t in enumerate(step) if t.src == rank],
                    [(i, t) for i, t in enumerate(step) if t.dst == rank],
                )
                for step in schedule.steps
            ]
        )
        if len(self._plan) != len(schedule.steps):
            raise ScheduleError(f"{schedule.algo}: a plan of {len(self._plan)} steps")

    @property
    def n_workers(self) -> int:
        return self.schedule.n_ranks

    def start_run(self, run: int) -> None:
        """Begin run `run`: operations are numbered from 0 again. Every rank must start the
        same run before its first operation of the run."""
        if not 0 <= run <= MAX_RUN:
            raise ValueError(f"run must be 0..{MAX_RUN}, got {run}")
        self.run = run
        self.op = 0

    def close(self) -> None:
        self.channel.close()

    # ------------------------------------------------------------------ public API

    def allreduce(
        self, x: npt.NDArray[np.generic], codec: ScheduleCodec | None = None
    ) -> npt.NDArray[np.generic]:
        """Sum `x` over the ranks, encoded by `codec` (module doc); same shape and dtype."""
        if codec is None or isinstance(codec, PlainCodec):
            return self._plain(x)
        if isinstance(codec, InceptionnCodec):
            return self._inceptionn(x, codec.error_bound)
        return run_phases(codec.phases(x, self.n_workers), self._run_phase)

    def allreduce_int32(
        self, values: npt.NDArray[np.int32], opcode: Opcode = Opcode.SUM
    ) -> tuple[Int32Array, BoolArray]:
        """Aggregate int32 `values` with `opcode` (SUM saturating at the int32 bounds, MAX,
        OR); returns (result, per-element mask of saturated sums), as `InaClient` does."""
        if opcode not in _INT_KIND:
            raise ValueError(f"opcode {opcode!r}: expected SUM, MAX or OR")
        buf = np.array(values, dtype=np.int32, copy=True).reshape(-1)
        ints = _Ints(buf, opcode)
        self._execute(_INT_KIND[opcode], ints)
        return buf, ints.overflow

    def summary(self) -> dict[str, Any]:
        """Counters as JSON-ready numbers: bytes per peer (message bytes), time per step."""
        st, me = self.stats, self.rank
        sent, received = self.channel.bytes_sent(), self.channel.bytes_received()
        steps = st.step_seconds
        return {
            "algo": self.schedule.algo,
            "ranks": self.schedule.n_ranks,
            "operations": st.operations,
            "steps": st.steps,
            "messages_sent": st.messages_sent,
            "messages_received": st.messages_received,
            "bytes_sent": sum(sent),
            "bytes_received": sum(received),
            "bytes_sent_per_peer": {str(r): b for r, b in enumerate(sent) if r != me},
            "bytes_received_per_peer": {str(r): b for r, b in enumerate(received) if r != me},
            "step_seconds_max": round(max(steps), 6) if steps else None,
            "step_seconds_mean": round(sum(steps) / len(steps), 6) if steps else None,
            "step_seconds": [round(s, 6) for s in steps],
        }

    # ------------------------------------------------------------------ codecs

    def _run_phase(self, phase: Phase) -> tuple[Int32Array, BoolArray]:
        return self.allreduce_int32(phase.values, phase.opcode)

    def _plain(self, x: npt.NDArray[np.generic]) -> npt.NDArray[np.generic]:
        arr = np.asarray(x)
        if arr.dtype not in (np.float32, np.float64):
            raise TypeError(
                f"plain sums float32 or float64, got {arr.dtype} (the int32 codec sums integers)"
            )
        kind = Kind.FLOAT32 if arr.dtype == np.float32 else Kind.FLOAT64
        buf = np.array(arr, dtype=arr.dtype.newbyteorder("="), copy=True).reshape(-1)
        self._execute(kind, _Floats(buf))
        return buf.reshape(arr.shape)

    def _inceptionn(self, x: npt.NDArray[np.generic], bound: float) -> npt.NDArray[np.generic]:
        arr = np.asarray(x)
        if arr.dtype != np.float32:
            raise TypeError(f"INCEPTIONN sums float32, got {arr.dtype} (cast explicitly)")
        buf = np.array(arr, dtype=np.float32, copy=True).reshape(-1)
        if not np.isfinite(buf).all():  # before any message: every rank fails alike
            raise ValueError("INCEPTIONN: the input holds NaN or infinity")
        compress(np.zeros(0, np.float32), bound)  # a bad bound fails here, not mid-exchange
        self._execute(Kind.INCEPTIONN, _Inceptionn(buf, self.schedule.n_chunks, bound))
        return buf.reshape(arr.shape)

    # ------------------------------------------------------------------ the exchange

    def _execute(self, kind: Kind, values: _Values) -> None:
        st = self.stats
        st.operations += 1
        n = values.size
        if n == 0:  # every rank has the same size: all skip the exchange alike
            return
        op = self.op
        self.op += 1
        bounds = chunk_bounds(n, self.schedule.n_chunks)
        started = time.perf_counter()
        st.step_seconds = []
        for s, (sends, recvs) in enumerate(self._plan):
            step_start = time.perf_counter()
            for i, t in sends:
                a, b = bounds[t.lo][0], bounds[t.hi - 1][1]
                flags, parts = values.encode(t, a, b)
                head = _HEADER.pack(self.run, kind, flags, op & 0xFFFFFFFF, s, i, n)
                self.channel.send(t.dst, b"".join([head, *parts]))
                st.messages_sent += 1
            for i, t in recvs:
                msg = self.channel.recv(t.src, self.timeout)
                st.messages_received += 1
                a, b = bounds[t.lo][0], bounds[t.hi - 1][1]
                try:
                    got = read_header(msg)
                except ValueError as exc:
                    raise self._garbage(t, str(exc)) from None
                want = (self.run, kind, got[2], op & 0xFFFFFFFF, s, i, n)
                if got != want:
                    raise self._garbage(t, _mismatch(got, want))
                try:
                    values.apply(t, a, b, got[2], memoryview(msg)[HEADER_BYTES:])
                except ValueError as exc:
                    raise self._garbage(t, str(exc)) from None
            st.step_seconds.append(time.perf_counter() - step_start)
            st.step_log.append(st.step_seconds[-1])
        st.steps += len(self._plan)
        st.last_seconds = time.perf_counter() - started
        st.seconds += st.last_seconds

    def _garbage(self, t: Transfer, what: str) -> PeerError:
        where = f"chunks [{t.lo}, {t.hi}) {t.op.value}"
        return PeerError(
            f"{self.channel.who(t.src)} sent rank {self.rank} an unexpected message for "
            f"{where}: {what}; do all ranks run the same schedule, calls and sizes?",
            rank=t.src,
        )


def _mismatch(got: tuple[int, ...], want: tuple[int, ...]) -> str:
    names = ("run", "kind", "flags", "operation", "step", "transfer", "elements")
    pairs = zip(names, got, want, strict=True)
    return ", ".join(f"{k} {g} (expected {w})" for k, g, w in pairs if g != w)


# ---------------------------------------------------------------------- value handlers


class _Values(Protocol):
    """One rank's array during an operation: how its chunks go out and come in."""

    @property
    def size(self) -> int: ...

    def encode(self, t: Transfer, a: int, b: int) -> tuple[int, list[Any]]:
        """(flags, buffers) of elements [a, b) as they are now (the step's start)."""
        ...

    def apply(self, t: Transfer, a: int, b: int, flags: int, body: memoryview) -> None:
        """Combine a received message into elements [a, b); ValueError if malformed."""
        ...


def _expect(body: memoryview, nbytes: int) -> None:
    if len(body) != nbytes:
        raise ValueError(f"{len(body)} bytes of values, expected {nbytes}")


class _Floats:
    def __init__(self, buf: FloatArray) -> None:
        self.buf = buf
        self.size = buf.size

    def encode(self, t: Transfer, a: int, b: int) -> tuple[int, list[Any]]:
        return 0, [self.buf[a:b]]

    def apply(self, t: Transfer, a: int, b: int, flags: int, body: memoryview) -> None:
        _expect(body, (b - a) * self.buf.itemsize)
        incoming = np.frombuffer(body, dtype=self.buf.dtype)
        if t.op is Op.REDUCE:
            self.buf[a:b] += incoming
        else:
            self.buf[a:b] = incoming


class _Ints:
    def __init__(self, buf: Int32Array, opcode: Opcode) -> None:
        self.buf = buf
        self.size = buf.size
        self.opcode = opcode
        self.overflow = np.zeros(buf.size, dtype=np.bool_)

    def encode(self, t: Transfer, a: int, b: int) -> tuple[int, list[Any]]:
        mask = self.overflow[a:b]
        if mask.any():
            return FLAG_OVERFLOW, [self.buf[a:b], np.packbits(mask)]
        return 0, [self.buf[a:b]]

    def apply(self, t: Transfer, a: int, b: int, flags: int, body: memoryview) -> None:
        n = b - a
        _expect(body, 4 * n + (-(-n // 8) if flags & FLAG_OVERFLOW else 0))
        incoming = np.frombuffer(body, dtype=np.int32, count=n)
        flagged: BoolArray | None = None
        if flags & FLAG_OVERFLOW:
            bits = np.frombuffer(body, dtype=np.uint8, offset=4 * n)
            flagged = np.unpackbits(bits, count=n).astype(np.bool_)
        cur = self.buf[a:b]
        if t.op is Op.COPY:
            cur[...] = incoming
            self.overflow[a:b] = False if flagged is None else flagged
        elif self.opcode == Opcode.SUM:
            total = cur.astype(np.int64)
            total += incoming
            self.overflow[a:b] |= (total > INT32_MAX) | (total < INT32_MIN)
            if flagged is not None:
                self.overflow[a:b] |= flagged
            cur[...] = np.clip(total, INT32_MIN, INT32_MAX)
        elif self.opcode == Opcode.MAX:
            np.maximum(cur, incoming, out=cur)
        else:
            np.bitwise_or(cur, incoming, out=cur)


class _Inceptionn:
    """Each chunk is either raw (an input, or a sum this rank made) or the decompression of
    `cached[c]`, the bytes it forwards unchanged."""

    def __init__(self, buf: npt.NDArray[np.float32], n_chunks: int, bound: float) -> None:
        self.buf = buf
        self.size = buf.size
        self.bound = bound
        self.bounds = chunk_bounds(buf.size, n_chunks)
        self.cached: list[bytes | None] = [None] * n_chunks

    def encode(self, t: Transfer, a: int, b: int) -> tuple[int, list[Any]]:
        parts: list[Any] = []
        for c in range(t.lo, t.hi):
            data = self.cached[c]
            if data is None:
                lo, hi = self.bounds[c]
                data = compress(self.buf[lo:hi], self.bound)
                self.buf[lo:hi] = decompress(data)  # keep what the receivers will see
                self.cached[c] = data
            parts += [_LEN.pack(len(data)), data]
        return 0, parts

    def apply(self, t: Transfer, a: int, b: int, flags: int, body: memoryview) -> None:
        off = 0
        for c in range(t.lo, t.hi):
            if off + _LEN.size > len(body):
                raise ValueError(f"INCEPTIONN message ends before chunk {c}")
            (length,) = _LEN.unpack_from(body, off)
            off += _LEN.size
            piece = body[off : off + length]
            off += length
            values = decompress(piece)
            lo, hi = self.bounds[c]
            if values.size != hi - lo:
                raise ValueError(f"chunk {c}: {values.size} values, expected {hi - lo}")
            if t.op is Op.REDUCE:
                self.buf[lo:hi] += values
                self.cached[c] = None
            else:
                self.buf[lo:hi] = values
                self.cached[c] = bytes(piece)
        if off != len(body):
            raise ValueError(f"{len(body) - off} bytes after the last chunk")


# ---------------------------------------------------------------------- INCEPTIONN's bound


def inceptionn_quantizations(schedule: Schedule) -> npt.NDArray[np.int64]:
    """(n_ranks, n_chunks): how many compressions (each within the error bound) went into
    each rank's final value of each chunk, under the executor's INCEPTIONN rules: a raw chunk
    is compressed when it is sent, a COPY takes the sender's count, a REDUCE adds it."""
    n, m = schedule.n_ranks, schedule.n_chunks
    q = np.zeros((n, m), dtype=np.int64)
    raw = np.ones((n, m), dtype=np.bool_)
    for step in schedule.steps:
        outgoing = []
        for t in step:
            sl = slice(t.lo, t.hi)
            q[t.src, sl] += raw[t.src, sl]
            raw[t.src, sl] = False
            outgoing.append(q[t.src, sl].copy())
        for t, qs in zip(step, outgoing, strict=True):
            sl = slice(t.lo, t.hi)
            if t.op is Op.REDUCE:
                q[t.dst, sl] += qs
                raw[t.dst, sl] = True
            else:
                q[t.dst, sl] = qs
                raw[t.dst, sl] = False
    return q


def inceptionn_error_bound(
    schedule: Schedule, abs_sum: npt.NDArray[np.float64], error_bound: float
) -> npt.NDArray[np.float64]:
    """Element-wise bound on |result - exact sum| of an INCEPTIONN allreduce on any rank,
    given `abs_sum` = the sum over ranks of |input| (float64, one per element):

        q * error_bound + (n_ranks - 1) * 2^-24 * (abs_sum + q * error_bound)

    q = the chunk's largest `inceptionn_quantizations` count: each compression moves a value
    by less than error_bound, and each of the n_ranks - 1 float32 additions rounds by at most
    2^-24 of a partial sum, itself at most abs_sum + q * error_bound."""
    abs_sum = np.asarray(abs_sum, dtype=np.float64).reshape(-1)
    q = inceptionn_quantizations(schedule).max(axis=0)
    per_element = np.zeros(abs_sum.size, dtype=np.float64)
    for c, (lo, hi) in enumerate(chunk_bounds(abs_sum.size, schedule.n_chunks)):
        per_element[lo:hi] = q[c]
    drift = per_element * error_bound
    rounding = (schedule.n_ranks - 1) * UNIT_ROUNDOFF_F32 * (abs_sum + drift)
    out: npt.NDArray[np.float64] = drift + rounding
    return out


__all__ = [
    "HEADER_BYTES",
    "SCHEDULE_CODECS",
    "Header",
    "InceptionnCodec",
    "PlainCodec",
    "RankPlan",
    "ScheduleClient",
    "ScheduleCodec",
    "ScheduleStats",
    "inceptionn_error_bound",
    "inceptionn_quantizations",
    "make_schedule_codec",
    "rank_plans",
    "read_header",
]
