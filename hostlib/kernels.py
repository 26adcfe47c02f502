"""The host side's inner loops, compiled with numba: what the INA client and the transports do
per chunk and per frame, one pass over a batch instead of a numpy call per field.

Every kernel changes exactly what the Python or numpy reference beside its caller changes
(`InaClient(compiled=False)` runs those references; tests/test_client_kernels.py checks the
two against each other, state for state and bit for bit):

- `pack_chunks`: an operation's INA payloads from its int32 values (`wire.pack_payloads`);
- `take_results`: a batch of received records: match each to its chunk, and if every one is
  a first result of a chunk in flight (or not this job's), complete them: the result lanes
  in place, the RTT samples through RFC 6298's recursion, the window's base
  (`_Exchange.take_first_results` and the record loop of `_Exchange.take`);
- `sent_new`: the bookkeeping of new chunks just sent (`_Exchange.transmit`);
- `frame_records`, `payload_offsets`, `copy_rows`: frames onto a loopback wire's stream, and
  the INA payloads of received frames found and copied out (`transport.ina_payloads`).

The client hands `pack_chunks`, `take_results` and `sent_new` their arrays and parameters in
records (NamedTuples, named and typed: `ChunkHeader`, `Match`, `Sending`, `Results`,
`Scratch`), which mypy checks where they are made; they reach the compiled kernels as
separate arguments (numba types an array argument in C and a NamedTuple in Python, a
microsecond a call), taken apart once per exchange for the calls made per batch
(`take_args`, `sent_args`: `take_results(buf, offsets, now, base, next_new, rtt, *args)`),
and `check_parameters` holds each kernel's parameters to the records' fields.

INA records are handled as bytes (`wire.INA_DTYPE` is big-endian); the field offsets come
from that dtype (`wire.INA_AT`). No fastmath: the RTT recursion must round as Python's
floats do.

Compiled on first use (about a second each) and cached on disk (`cache=True`: in __pycache__
beside this file, or elsewhere: `common/jit.py`); `load` loads them all (`common.jit.warm_up`).
"""

from __future__ import annotations

from typing import Any, NamedTuple, NewType

import numpy as np
import numpy.typing as npt

from inaemu.common.jit import check_parameters, kernel
from inaemu.common.wire import (
    ETHERTYPE_IPV4,
    FRAME_AT,
    FRAME_BYTES,
    INA_AT,
    INA_BYTES,
    INA_OFFSET,
    IP_PROTO_UDP,
    RUN_SHIFT,
    SEQ_CHUNK_MASK,
    SLOT_INDEX_MASK,
    SLOT_SET_BIT,
    Flag,
    K,
)

VER_FLAGS, OPCODE, JOB, TREE, LANES, SLOT, CONTRIB, SEQ, VALUES = INA_AT  # wire.INA_DTYPE's
RESULT, OVERFLOW = int(Flag.RESULT), int(Flag.OVERFLOW)
ETH_TYPE, IP_PROTO = FRAME_AT["eth_type"], FRAME_AT["ip_proto"]  # byte offsets in a frame
ETH_TYPE_HI, ETH_TYPE_LO = ETHERTYPE_IPV4 >> 8, ETHERTYPE_IPV4 & 0xFF

# status of take_results
TAKEN, DECLINED, OTHER_RUN = 0, 1, 2
OTHER_RUN_CHUNK = -2  # `_match`: a result of this job, run and chunk with another run's contrib


@kernel
def _put16(r: Any, at: int, v: int) -> None:
    r[at] = (v >> 8) & 0xFF
    r[at + 1] = v & 0xFF


# ---- records: what the client hands the kernels, named and typed (module doc)

U8s = npt.NDArray[np.uint8]
I32s = npt.NDArray[np.int32]
I64s = npt.NDArray[np.int64]
F64s = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]


class ChunkHeader(NamedTuple):
    """What an operation's chunks carry besides their values (`pack_chunks`)."""

    first: int  # the operation's first chunk number in the run
    window: int  # the job's pool (W slots)
    n_trees: int
    run: int
    opcode: int
    job_id: int
    ver_flags: int
    contrib: int


class Match(NamedTuple):
    """What tells an operation's results from other records (`_Exchange.match`)."""

    job_id: int
    run: int
    expect: int  # the contrib every result carries (-1: any)
    window: int
    first16: int  # the operation's first chunk number, mod 2^16


class Sending(NamedTuple):
    """An exchange's per-chunk record of what went out (`_Exchange`'s arrays)."""

    sent_at: F64s  # per chunk: when its latest copy went out
    deadline: F64s  # per chunk: its timer (inf: none running)
    slot_latest: I64s  # per slot: the latest chunk sent in it (-1: none)


class Results(NamedTuple):
    """An exchange's per-chunk record of what came back (`_Exchange`'s arrays)."""

    done: Bools
    retries: I32s
    result: I32s  # (chunks, K)
    overflow: Bools
    answered_once: I64s  # per tree: the highest chunk answered from its only copy


class Scratch(NamedTuple):
    """Room for a batch's RTT samples and matches (one per record at least)."""

    rtts: F64s
    chunks: I64s


def pack_chunks(values: I32s, out: U8s, head: U8s, header: ChunkHeader) -> None:
    """`_pack_chunks` (its doc), the header a record."""
    _pack_chunks(values, out, head, *header)


# What an exchange hands a kernel on every batch, taken apart once from its records (made
# again when one changes): the records' fields in order, the kernel's last parameters, so that
# a call is `take_results(buf, offsets, now, base, next_new, rtt, *args)`.
TakeArgs = NewType("TakeArgs", tuple[Any, ...])
SentArgs = NewType("SentArgs", tuple[Any, ...])


def take_args(match: Match, sending: Sending, results: Results, scratch: Scratch) -> TakeArgs:
    """The records `take_results` reads and changes, for its calls."""
    return TakeArgs((*match, *sending, *results, *scratch))


def sent_args(sending: Sending, tx: I64s) -> SentArgs:
    """The arrays `sent_new` sets, for its calls: `tx` per chunk its latest copy's
    transmission number."""
    return SentArgs((*sending, tx))


# ---- the kernels (their parameters are the records' fields: `check_parameters` below)


@kernel
def _pack_chunks(
    values: Any,
    out: Any,
    head: Any,
    first: int,
    window: int,
    n_trees: int,
    run: int,
    opcode: int,
    job_id: int,
    ver_flags: int,
    contrib: int,
) -> None:
    """out[i] = `head`, then the payload of chunk first + i (INA_BYTES): `values` (flat int32)
    cut into K lanes per chunk, the last one zero-padded, in slot (first + i) mod window of
    set ((first + i) div window) mod 2 and tree slot mod n_trees, seq = run << 16 | chunk mod
    2^16, `contrib`, lanes the chunk's element count."""
    n_values = values.size
    h = head.size
    for i in range(out.shape[0]):
        c = first + i
        index = c % window
        row = out[i]
        for b in range(h):
            row[b] = head[b]
        r = row[h:]
        r[VER_FLAGS] = ver_flags
        r[OPCODE] = opcode
        _put16(r, JOB, job_id)
        r[TREE] = index % n_trees
        lo = i * K
        lanes = min(n_values - lo, K)
        r[LANES] = lanes
        _put16(r, SLOT, index | ((c // window) % 2) * SLOT_SET_BIT)
        _put16(r, CONTRIB, contrib)
        seq = (run << RUN_SHIFT) | (c & SEQ_CHUNK_MASK)
        _put16(r, SEQ, seq >> 16)
        _put16(r, SEQ + 2, seq & 0xFFFF)
        seg = values[lo : lo + lanes]
        for j in range(seg.size):
            v = np.uint32(seg[j])
            at = VALUES + 4 * j
            r[at] = v >> 24
            r[at + 1] = (v >> 16) & 0xFF
            r[at + 2] = (v >> 8) & 0xFF
            r[at + 3] = v & 0xFF
        for at in range(VALUES + 4 * seg.size, INA_BYTES):
            r[at] = 0


@kernel
def _u16(buf: Any, at: int) -> Any:
    return (np.int64(buf[at]) << 8) | np.int64(buf[at + 1])


@kernel
def _match(
    buf: Any,
    at: int,
    job_id: int,
    run: int,
    expect: int,
    window: int,
    first16: int,
    slot_latest: Any,
) -> int:
    """The chunk the record at buf[at:] is a result of (`_Exchange.match`), -1 if none,
    OTHER_RUN_CHUNK if it is one but its contrib is not `expect` (-1: any)."""
    if _u16(buf, at + JOB) != job_id or not buf[at + VER_FLAGS] & RESULT:
        return -1
    if _u16(buf, at + SEQ) != run:
        return -1
    index = _u16(buf, at + SLOT) & SLOT_INDEX_MASK
    if index >= window:
        return -1
    count16 = _u16(buf, at + SEQ + 2)
    last = slot_latest[index]
    chunk = -1
    if last >= 0 and (first16 + last) & SEQ_CHUNK_MASK == count16:
        chunk = int(last)
    elif last >= window and (first16 + last - window) & SEQ_CHUNK_MASK == count16:
        chunk = int(last - window)
    if chunk >= 0 and expect >= 0 and _u16(buf, at + CONTRIB) != expect:
        return OTHER_RUN_CHUNK
    return chunk


@kernel
def take_results(
    buf: Any,
    offsets: Any,
    now: float,
    base: int,
    next_new: int,
    rtt: Any,
    job_id: int,
    run: int,
    expect: int,
    window: int,
    first16: int,
    sent_at: Any,
    deadline: Any,
    slot_latest: Any,
    done: Any,
    retries: Any,
    result: Any,
    overflow: Any,
    answered_once: Any,
    rtts: Any,
    chunks: Any,
) -> tuple[int, int, int, int, int]:
    """A batch of received records (record j at buf[offsets[j]:], INA_BYTES): (status, new
    results, overflowed ones, RTT samples, the window's base after them).

    OTHER_RUN, with nothing changed and the record's index in place of the new results, if a
    record is a result of this operation whose contrib is not `expect` (-1: any). DECLINED,
    with nothing changed, unless every record is either not a result of this operation
    (`_match`: -1) or the first result of a different chunk in flight (not done, a finite
    deadline). Else TAKEN: each such chunk is done, its lanes in `result`, its
    OVERFLOW flag in `overflow`, its deadline infinite; a chunk sent once (retries 0) gives an
    RTT sample, now - sent_at, in `rtts` in record order and through RFC 6298's recursion on
    `rtt` = [has SRTT, SRTT, RTTVAR, min RTT, alpha, beta] (the first four updated) with gains
    alpha, beta
    (`RttEstimator.sample_many`), and raises its tree's `answered_once`; the base moves past
    the done chunks below `next_new`. `chunks`: room for the matches, one per record."""
    n = offsets.size
    n_trees = answered_once.size
    for j in range(n):
        i = _match(buf, offsets[j], job_id, run, expect, window, first16, slot_latest)
        chunks[j] = i
        other = i == OTHER_RUN_CHUNK
        if other or (i >= 0 and (done[i] or deadline[i] == np.inf)):  # a duplicate, or lost
            for k in range(j):
                if chunks[k] >= 0:
                    done[chunks[k]] = False
            if other:
                return OTHER_RUN, j, 0, 0, base
            return DECLINED, 0, 0, 0, base
        if i >= 0:
            done[i] = True  # marks it for the duplicate test of the records after it
    has, srtt, rttvar, low, alpha, beta = rtt[0], rtt[1], rtt[2], rtt[3], rtt[4], rtt[5]
    n_new = n_over = n_rtts = 0
    for j in range(n):
        i = chunks[j]
        if i < 0:
            continue
        n_new += 1
        r = buf[offsets[j] : offsets[j] + INA_BYTES]
        row = result[i]
        for lane in range(K):
            at = VALUES + 4 * lane
            word = (
                (np.uint32(r[at]) << 24)
                | (np.uint32(r[at + 1]) << 16)
                | (np.uint32(r[at + 2]) << 8)
                | np.uint32(r[at + 3])
            )
            row[lane] = np.int32(word)
        if r[VER_FLAGS] & OVERFLOW:
            overflow[i] = True
            n_over += 1
        deadline[i] = np.inf
        if retries[i] == 0:
            sample = now - sent_at[i]
            rtts[n_rtts] = sample
            n_rtts += 1
            clamped = max(sample, 0.0)
            if has == 0.0:
                srtt, rttvar, has = clamped, clamped / 2, 1.0
            else:
                rttvar = (1 - beta) * rttvar + beta * abs(srtt - clamped)
                srtt = (1 - alpha) * srtt + alpha * clamped
            low = min(low, clamped)
            tree = i % n_trees
            if i > answered_once[tree]:
                answered_once[tree] = i
    rtt[0], rtt[1], rtt[2], rtt[3] = has, srtt, rttvar, low
    if n_new:
        while base < next_new and done[base]:
            base += 1
    return TAKEN, n_new, n_over, n_rtts, base


@kernel
def sent_new(
    start: int,
    stop: int,
    first: int,
    now: float,
    due: float,
    tx0: int,
    sent_at: Any,
    deadline: Any,
    slot_latest: Any,
    tx: Any,
) -> None:
    """New chunks start..stop-1 went out at `now`: their send time, transmission numbers from
    tx0, deadline `due`, and each is now the latest chunk of its slot."""
    window = slot_latest.size
    for i in range(start, stop):
        sent_at[i] = now
        tx[i] = tx0 + i - start
        deadline[i] = due
        slot_latest[(first + i) % window] = i


@kernel
def frame_records(payloads: Any, head: Any, out: Any) -> None:
    """out = one record per payload row, back to back: `head` (a record's length and the
    frame's Ethernet/IPv4/UDP headers) then the payload."""
    h = head.size
    step = h + payloads.shape[1]
    for i in range(payloads.shape[0]):
        at = i * step
        for b in range(h):
            out[at + b] = head[b]
        row = payloads[i]
        for b in range(row.size):
            out[at + h + b] = row[b]


@kernel
def payload_offsets(
    buf: Any, offsets: Any, lengths: Any, min_length: int, skip: int, check: bool, out: Any
) -> int:
    """Where the INA payloads start (byte `skip` of each frame) of the frames
    buf[offsets[i]:][:lengths[i]] at least `min_length` long and, with `check`, IPv4/UDP: into
    `out`, in order; how many."""
    n = 0
    for i in range(offsets.size):
        if lengths[i] < min_length:
            continue
        at = offsets[i]
        if check and (
            buf[at + ETH_TYPE] != ETH_TYPE_HI
            or buf[at + ETH_TYPE + 1] != ETH_TYPE_LO
            or buf[at + IP_PROTO] != IP_PROTO_UDP
        ):
            continue
        out[n] = at + skip
        n += 1
    return n


@kernel
def copy_rows(buf: Any, offsets: Any, out: Any) -> None:
    """out[j] = a row's width of bytes from buf[offsets[j]]."""
    for j in range(offsets.size):
        row = out[j]
        src = offsets[j]
        for b in range(row.size):
            row[b] = buf[src + b]


check_parameters(_pack_chunks, "values", "out", "head", ChunkHeader)
check_parameters(
    take_results,
    "buf",
    "offsets",
    "now",
    "base",
    "next_new",
    "rtt",
    Match,
    Sending,
    Results,
    Scratch,
)
check_parameters(sent_new, "start", "stop", "first", "now", "due", "tx0", Sending, "tx")


def load() -> None:
    """Every kernel here loaded (or compiled): `common.jit.warm_up(load)`, once per process,
    so that the first operation does not wait for numba."""
    recs = np.zeros((1, INA_BYTES), np.uint8)
    head = np.zeros(2 + INA_OFFSET, np.uint8)
    header = ChunkHeader(
        first=0, window=1, n_trees=1, run=0, opcode=0, job_id=0, ver_flags=0, contrib=1
    )
    for out, h in ((recs, head[:0]), (np.zeros((1, head.size + INA_BYTES), np.uint8), head)):
        pack_chunks(np.zeros(1, np.int32), out, h, header)
    flags = np.zeros(1, np.bool_)
    times = np.zeros(1, np.float64)
    ints = np.zeros(1, np.int64)
    sending = Sending(sent_at=times, deadline=times.copy(), slot_latest=ints.copy())
    results = Results(
        done=flags,
        retries=np.zeros(1, np.int32),
        result=np.zeros((1, K), np.int32),
        overflow=flags.copy(),
        answered_once=ints.copy(),
    )
    match = Match(job_id=0, run=0, expect=-1, window=1, first16=0)
    scratch = Scratch(rtts=times.copy(), chunks=ints.copy())
    args = take_args(match, sending, results, scratch)
    rtt = np.array([0.0, 0.0, 0.0, 0.0, 0.1, 0.1])
    take_results(recs.reshape(-1), ints.copy(), 0.0, 0, 0, rtt, *args)
    sent_new(0, 0, 0, 0.0, 0.0, 0, *sent_args(sending, ints))
    frames = np.zeros(FRAME_BYTES + 2, np.uint8)
    frame_records(recs, head, frames)
    payload_offsets(frames, ints, ints, FRAME_BYTES, INA_OFFSET, True, ints.copy())
    copy_rows(frames, ints, recs)
