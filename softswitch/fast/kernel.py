"""The compiled per-packet path: one numba function runs a whole batch of frames.

`process_frames` is `ReferenceEngine._process` (softswitch/reference.py) over a batch,
decision for decision and in the same order: parser, loss injection, aggregation or IPv4 forwarding,
ingress counters, the traffic manager (multicast, drop, unicast), egress rewrite, egress
counters and the IPv4 checksum. What it reads and writes are flat numpy arrays: the tables
as open-addressing hash tables (`tables.py` builds them from the Python tables), the
registers as a (cells, fields) int64 array plus the owners and the (cells, K) int32 lanes, the
counters as per-batch increments that `engine.py` adds to the Python counters afterwards.

Numbers the kernel takes from elsewhere (wire layout, drop reasons, events, counter sizes,
the registers' columns)
reach it through `Constants`, which `make_kernel` closes over: numba keys its on-disk cache on
the closure's values as well as on this file, so a change to p4/constants.py or
common/wire.py recompiles instead of loading a stale kernel. Functions here at module level
take such numbers only as arguments.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar, cast

import numpy as np
import numpy.typing as npt
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from inaemu.common.jit import check_parameters, kernel_with
from inaemu.common.wire import (
    ETH_BYTES,
    ETHERTYPE_IPV4,
    INA_AT,
    INA_OFFSET,
    INA_UDP_PORT,
    INA_VERSION,
    IP_PROTO_UDP,
    IPV4_BYTES,
    LANES_BYTES,
    Flag,
    InaLayout,
    K,
    Opcode,
)
from inaemu.p4.constants import (
    DROP_PORT,
    INA_DROP_REASONS,
    INA_EVENTS,
    INA_PORTS,
    STATE_OVERFLOW,
    STATE_READY,
    DropReason,
    Event,
)
from inaemu.softswitch.batch import Frames
from inaemu.softswitch.state import CELL, CellFields

# The hash tables, in the order of `CompiledTables.slices` (tables.py).
T_LOSS, T_JOB, T_CHILD, T_EGRESS, T_LPM, T_MCAST = range(6)
N_TABLES = 6
PARAMS_WIDTH = 7  # the widest action (agg_node)
# misc[]: scalars of the compiled tables.
M_LPM_DEFAULT, M_MAX_REPLICAS = range(2)
N_MISC = 2
LPM_FORWARD = 1  # params[row, 0] of an LPM action: 1 ipv4_forward(dmac, port), 0 drop
_HASH_MUL = 0x9E3779B97F4A7C15  # Fibonacci hashing
_HASH_SHIFT = 29
# The kernel's integers: int64 throughout (numba types int64 mixed with uint64 or int32 as float).
i64 = cast(Callable[[Any], int], np.int64)

# Every function here: `common.jit.kernel` without numba's reference counting (`_nrt=False`):
# nothing here allocates, and counting the references of every array a helper takes costs two
# atomic calls per array and call, which made a hash look-up 20 times slower. The helpers of
# the kernel are inlined into it by numba (called, they would take the constants as 50
# arguments).
jit = kernel_with(_nrt=False)
inline = kernel_with(_nrt=False, inline="always")


class Constants(NamedTuple):
    """Every number `process_frames` takes from the wire format and p4/constants.py."""

    eth_bytes: int
    ethertype_ipv4: int
    ip_off: int
    udp_off: int
    ina_off: int
    reg: CellFields  # each register's column in `cells` (state.CELL)
    at: InaLayout  # the INA fields' offsets from ina_off
    lanes_off: int
    frame_end: int
    k: int
    ip_proto_udp: int
    ina_udp_port: int
    ina_version: int
    child_ports: int  # ina_child's ingress_port is bit<9>: ports below this can be members
    # The enums' members by name (`members`: a NamedTuple of their values, which numba takes
    # whole; typed as the enums, so that mypy knows every name the kernel uses).
    flag: type[Flag]
    op: type[Opcode]
    drop: type[DropReason]
    event: type[Event]
    state_ready: int
    state_overflow: int
    drop_port: int
    # the flat counter array: [events | port_rx | ina_drops | port_tx], one row per index
    events_at: int
    events_n: int
    rx_at: int
    ports_n: int
    drops_at: int
    drops_n: int
    tx_at: int
    counters_n: int


E = TypeVar("E", bound=enum.IntEnum | enum.IntFlag)


def members(kind: type[E]) -> type[E]:
    """The members of `kind` as a NamedTuple of their values (`DropReason` -> `DropReasons(NONE=0,
    TRUNCATED=1, ...)`), typed as `kind` itself: `c.drop.STALE` reads like the enum, in numba
    a constant. Its class is this module's attribute of that name, so that numba's cache key
    pickles it by name and values: a member added or renumbered recompiles the kernel."""
    name = kind.__name__ + "s"
    record = globals().get(name)
    if record is None:
        record = globals()[name] = _namedtuple(name, [m.name for m in kind], module=__name__)
    assert record._fields == tuple(m.name for m in kind)
    return cast(type[E], record(*(int(m) for m in kind)))


_namedtuple: Callable[..., Any] = collections.namedtuple  # fields from the enum, not literals


def constants() -> Constants:
    ip_off = ETH_BYTES
    udp_off = ip_off + IPV4_BYTES
    lanes_off = INA_OFFSET + INA_AT.values
    rx_at = INA_EVENTS
    drops_at = rx_at + INA_PORTS
    tx_at = drops_at + INA_DROP_REASONS
    return Constants(
        eth_bytes=ETH_BYTES,
        ethertype_ipv4=ETHERTYPE_IPV4,
        ip_off=ip_off,
        udp_off=udp_off,
        ina_off=INA_OFFSET,
        reg=CELL,
        at=INA_AT,
        lanes_off=lanes_off,
        frame_end=lanes_off + LANES_BYTES,
        k=K,
        ip_proto_udp=IP_PROTO_UDP,
        ina_udp_port=INA_UDP_PORT,
        ina_version=INA_VERSION,
        child_ports=1 << CHILD_PORT_BITS,
        flag=members(Flag),
        op=members(Opcode),
        drop=members(DropReason),
        event=members(Event),
        state_ready=STATE_READY,
        state_overflow=STATE_OVERFLOW,
        drop_port=DROP_PORT,
        events_at=0,
        events_n=INA_EVENTS,
        rx_at=rx_at,
        ports_n=INA_PORTS,
        drops_at=drops_at,
        drops_n=INA_DROP_REASONS,
        tx_at=tx_at,
        counters_n=tx_at + INA_PORTS,
    )


# ---------------------------------------------------------------------- the kernel's records

U8s = npt.NDArray[np.uint8]
I32s = npt.NDArray[np.int32]
I64s = npt.NDArray[np.int64]


class TableArrays(NamedTuple):
    """The tables and multicast groups as the kernel reads them (`tables.compile_tables`)."""

    hkeys: I64s  # every table's hash slots, back to back; -1: free
    hvals: I64s  # the row of the key in the same slot
    slices: I64s  # (N_TABLES, 2): each table's first slot and mask (slots - 1)
    params: I64s  # (rows, PARAMS_WIDTH): each entry's action parameters
    mc_ports: I64s  # multicast replicas' ports, group after group
    mc_rids: I64s  # and their instances (egress_rid), likewise
    plens: I64s  # the LPM prefix lengths present, longest first
    misc: I64s  # M_LPM_DEFAULT: the row of the LPM default action; M_MAX_REPLICAS


class Work(NamedTuple):
    """What the kernel changes besides the output: the registers (`Registers`' arrays) and
    the counts of a batch."""

    cells: I64s  # (cells, CellFields): one row per cell
    owner: I64s  # per slot
    lanes: I32s  # (cells, K)
    ctr: I64s  # (counters, 2): packets and bytes per index of [events|rx|drops|tx], zeroed
    row_ctr: I64s  # (rows, 2): the direct counters per table row, zeroed
    touched: I64s  # (counters + rows, 3): what a batch counted, (index, packets, bytes)


class BatchKernel:
    """The batch kernel (`make_kernel`) as Python calls it: its arguments
    in records, named and typed at the call. They cross into numba as separate arguments
    (`process_arrays`, whose parameters are the records' fields, checked as it is made): numba
    types an array argument in C, a NamedTuple in Python (microseconds a call)."""

    def __init__(self, dispatcher: Any) -> None:
        self.dispatcher = dispatcher  # numba's: its cache statistics (`stats`)

    def __call__(
        self,
        inp: Frames,
        n: int,
        start: int,
        draws: I64s,
        tables: TableArrays,
        work: Work,
        out: Frames,
        out_n: int,
        out_used: int,
    ) -> KernelResult:
        result: KernelResult = self.dispatcher(
            *inp, n, start, draws, *tables, *work, *out, out_n, out_used
        )
        return result


# ---------------------------------------------------------------------- hash tables


@inline
def _slot_of(key: int, mask: int) -> int:
    h = (np.uint64(key) * np.uint64(_HASH_MUL)) >> np.uint64(_HASH_SHIFT)
    return i64(h & np.uint64(mask))


@jit
def fill_hash(keys: Any, vals: Any, start: int, mask: int, new_keys: Any, new_vals: Any) -> None:
    """Insert `new_keys` -> `new_vals` into the table keys[start : start + mask + 1] (linear
    probing; -1 marks a free slot; every key is >= 0 and distinct)."""
    for j in range(new_keys.shape[0]):
        s = _slot_of(new_keys[j], mask)
        while keys[start + s] != -1:
            s = (s + 1) & mask
        keys[start + s] = new_keys[j]
        vals[start + s] = new_vals[j]


@inline
def find(t: TableArrays, table: int, key: int) -> int:
    """The row of `key` in hash table `table`, or -1."""
    if key < 0:
        return -1
    start = t.slices[table, 0]
    mask = t.slices[table, 1]
    s = _slot_of(key, mask)
    while True:
        k = t.hkeys[start + s]
        if k == key:
            return i64(t.hvals[start + s])
        if k == -1:
            return -1
        s = (s + 1) & mask


CHILD_PORT_BITS = 9  # ina_child's key: job_id (16), tree_id (8), ingress_port (9), UDP port (16)


def pack_child_key(job_id: int, tree_id: int, port: int, udp_port: int) -> int:
    """ina_child's key packed into one int64: `tables.compile_tables` packs its entries with
    this function, the kernel a frame's fields with its compiled twin `child_key`."""
    return (job_id << 33) | (tree_id << 25) | (port << 16) | udp_port


child_key = inline(pack_child_key)


# ---------------------------------------------------------------------- bytes


@inline
def _u16(buf: Any, at: int) -> int:
    return (i64(buf[at]) << 8) | i64(buf[at + 1])


@inline
def _u32(buf: Any, at: int) -> int:
    return _lane(buf, at) & 0xFFFFFFFF


def _byte_pointer(context: Any, builder: Any, array_type: Any, array: Any, at: Any) -> Any:
    return builder.gep(context.make_array(array_type)(context, builder, array).data, [at])


@intrinsic
def _memcpy(typingctx: Any, dst: Any, at: Any, src: Any, start: Any, nbytes: Any) -> Any:
    """dst[at : at + nbytes] = src[start : start + nbytes] for uint8 arrays whose regions do not
    overlap, as one memcpy (a loop copies a byte at a time: it cannot know the two apart)."""
    sig = types.void(dst, at, src, start, nbytes)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> None:
        d, d_at, s, s_at, count = args
        d_ptr = _byte_pointer(context, builder, dst, d, d_at)
        s_ptr = _byte_pointer(context, builder, src, s, s_at)
        raw_memcpy(builder, d_ptr, s_ptr, count, 1)

    return sig, codegen


@intrinsic
def _load_be32(typingctx: Any, buf: Any, at: Any) -> Any:
    """The big-endian int32 at buf[at : at + 4] (any alignment), sign-extended: one load and
    one byte swap."""
    sig = types.int64(buf, at)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ptr = builder.bitcast(_byte_pointer(context, builder, buf, *args), I32.as_pointer())
        return builder.sext(builder.bswap(builder.load(ptr, align=1)), I64)

    return sig, codegen


@intrinsic
def _store_be32(typingctx: Any, buf: Any, at: Any, value: Any) -> Any:
    """buf[at : at + 4] = the low 32 bits of value, big-endian (any alignment)."""
    sig = types.void(buf, at, value)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> None:
        b, b_at, v = args
        ptr = builder.bitcast(_byte_pointer(context, builder, buf, b, b_at), I32.as_pointer())
        builder.store(builder.bswap(builder.trunc(v, I32)), ptr, align=1)

    return sig, codegen


raw_memcpy: Any = cgutils.raw_memcpy
I32, I64 = ir.IntType(32), ir.IntType(64)
_copy = cast(Callable[[Any, int, Any, int, int], None], _memcpy)
_lane = cast(Callable[[Any, int], int], _load_be32)  # a lane, signed
_put32 = cast(Callable[[Any, int, int], None], _store_be32)


@inline
def _put(buf: Any, at: int, value: int, nbytes: int) -> None:
    for b in range(nbytes):
        buf[at + b] = (value >> (8 * (nbytes - 1 - b))) & 0xFF


@inline
def _store_lanes(buf: Any, at: int, row: Any, k: int) -> None:
    for j in range(k):
        _put32(buf, at + 4 * j, i64(row[j]))


@inline
def _set_flags_contrib(buf: Any, p: int, c: Constants, flags: int, contrib: int) -> None:
    ina = p + c.ina_off
    buf[ina + c.at.ver_flags] = (i64(buf[ina + c.at.ver_flags]) & 0xF0) | (flags & 0x0F)
    _put(buf, ina + c.at.contrib, contrib & 0xFFFF, 2)


@inline
def _ipv4_checksum(buf: Any, at: int, nbytes: int) -> int:
    """RFC 791 one's-complement checksum of buf[at : at + nbytes] (as common.wire's)."""
    total = 0
    for j in range(0, nbytes, 2):
        total += _u16(buf, at + j)
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return (~total) & 0xFFFF


@inline
def _count(ctr: Any, at: int, size: int, index: int, length: int) -> None:
    """CounterArray.count: out-of-range indices are ignored (as bmv2 does)."""
    if 0 <= index < size:
        ctr[at + index, 0] += 1
        ctr[at + index, 1] += length


# ---------------------------------------------------------------------- the pipeline


@inline
def _parse(buf: Any, p: int, n: int, c: Constants) -> tuple[bool, bool, bool]:
    """InaParser: (ina valid, ipv4 valid, parser error PacketTooShort)."""
    if n < c.eth_bytes:
        return False, False, True
    if _u16(buf, p + 12) != c.ethertype_ipv4:
        return False, False, False
    if n < c.udp_off:
        return False, False, True
    ip = p + c.ip_off
    ihl = i64(buf[ip]) & 0x0F
    frag_offset = ((i64(buf[ip + 6]) & 0x1F) << 8) | i64(buf[ip + 7])
    if not (ihl == 5 and frag_offset == 0 and i64(buf[ip + 9]) == c.ip_proto_udp):
        return False, True, False
    if n < c.ina_off:
        return False, True, True
    if _u16(buf, p + c.udp_off + 2) != c.ina_udp_port:
        return False, True, False
    if n < c.frame_end:
        return False, True, True
    return True, True, False


@inline
def _forward(buf: Any, p: int, t: TableArrays, c: Constants) -> tuple[int, int]:
    """Ipv4Forwarding: (drop reason, egress_spec)."""
    ip = p + c.ip_off
    if i64(buf[ip]) >> 4 != 4 or i64(buf[ip]) & 0x0F != 5:
        return c.drop.BAD_IPV4, 0
    ttl = i64(buf[ip + 8])
    if ttl <= 1:
        return c.drop.TTL_EXPIRED, 0
    dst = _u32(buf, ip + 16)
    row = i64(t.misc[M_LPM_DEFAULT])
    for j in range(t.plens.shape[0]):
        plen = i64(t.plens[j])
        mask = (((1 << plen) - 1) << (32 - plen)) if plen else 0
        hit = find(t, T_LPM, (plen << 32) | (dst & mask))
        if hit >= 0:
            row = hit
            break
    params = t.params
    if params[row, 0] == LPM_FORWARD:
        for b in range(6):  # the source MAC is the old destination MAC
            buf[p + 6 + b] = buf[p + b]
        _put(buf, p, i64(params[row, 1]), 6)
        buf[ip + 8] = ttl - 1
        return c.drop.NONE, i64(params[row, 2])
    return c.drop.NO_ROUTE, 0


@inline
def _aggregate(
    buf: Any, p: int, ingress_port: int, length: int, t: TableArrays, w: Work, c: Constants
) -> tuple[int, int, int, bool]:
    """Aggregation: (drop reason, egress_spec, mcast_grp, consumed), as the reference's
    `_aggregate`."""
    params, cells, owner, lanes, ctr = t.params, w.cells, w.owner, w.lanes, w.ctr
    ina = p + c.ina_off
    at = c.at
    ver_flags = i64(buf[ina + at.ver_flags])
    version = ver_flags >> 4
    flags = ver_flags & 0x0F
    opcode = i64(buf[ina + at.opcode])
    job_id = _u16(buf, ina + at.job_id)
    tree_id = i64(buf[ina + at.tree_id])
    nlanes = i64(buf[ina + at.lanes])
    slot = _u16(buf, ina + at.slot)
    contrib = _u16(buf, ina + at.contrib)
    seq = _u32(buf, ina + at.seq)
    # Validate the header, then the job.
    if version != c.ina_version:
        return c.drop.BAD_VERSION, 0, 0, False
    if opcode > c.op.MAX:
        return c.drop.BAD_OPCODE, 0, 0, False
    if nlanes == 0 or nlanes > c.k:
        return c.drop.BAD_LANES, 0, 0, False
    job = find(t, T_JOB, (job_id << 8) | tree_id)
    if job < 0:
        return c.drop.UNKNOWN_JOB, 0, 0, False
    base = i64(params[job, 0])
    pool_size = i64(params[job, 1])
    fanin = i64(params[job, 2])
    child_mgid = i64(params[job, 3])
    is_root = i64(params[job, 4])
    parent_port = i64(params[job, 5])
    epoch = i64(params[job, 6])
    set_ = slot >> 15
    slot_index = slot & 0x7FFF
    if slot_index >= pool_size:
        return c.drop.SLOT_RANGE, 0, 0, False
    slot_addr = base + slot_index
    cell = (slot_addr << 1) | set_
    if cell < 0 or cell >= cells.shape[0]:
        return c.drop.SLOT_RANGE, 0, 0, False
    owner_key = (job_id << 32) | (epoch << 16) | (seq >> 16)
    state = i64(cells[cell, c.reg.state])
    stored_contrib = i64(cells[cell, c.reg.contrib])
    lanes_at = p + c.lanes_off
    ev = c.events_at
    ne = c.events_n

    if flags & c.flag.RESULT:
        # A result coming down from the parent.
        if is_root == 1 or ingress_port != parent_port:
            return c.drop.UNEXPECTED_RESULT, 0, 0, False
        if owner[slot_addr] != owner_key or seq != cells[cell, c.reg.seq]:
            return c.drop.STALE, 0, 0, False
        if cells[cell, c.reg.count] != fanin:
            # This node's round is not complete: the parent's result cannot include it.
            return c.drop.UNEXPECTED_RESULT, 0, 0, False
        for j in range(c.k):
            lanes[cell, j] = _lane(buf, lanes_at + 4 * j)
        state = c.state_ready | (c.state_overflow if flags & c.flag.OVERFLOW else 0)
        cells[cell, c.reg.state] = state
        cells[cell, c.reg.contrib] = contrib
        _count(ctr, ev, ne, c.event.PARENT_RESULT, length)
        return c.drop.NONE, 0, child_mgid, False

    udp_src = _u16(buf, p + c.udp_off)
    child = -1
    if ingress_port < c.child_ports:
        child = find(t, T_CHILD, child_key(job_id, tree_id, ingress_port, udp_src))
    if child < 0:
        return c.drop.NOT_MEMBER, 0, 0, False
    w.row_ctr[child, 0] += 1
    w.row_ctr[child, 1] += length
    child_index = i64(params[child, 0])
    other = cell ^ 1
    if owner[slot_addr] != owner_key:
        # 1. A new owner (job, installation or run) takes the slot over: lazy reset.
        owner[slot_addr] = owner_key
        for f in (c.reg.bitmap, c.reg.count, c.reg.state, c.reg.seq):
            cells[cell, f] = 0
            cells[other, f] = 0
        state = 0
        stored_contrib = 0
        _count(ctr, ev, ne, c.event.TAKEOVER, length)
    child_bit = ((1 << child_index) & 0xFFFFFFFF) if 0 <= child_index < 32 else 0
    bitmap = i64(cells[cell, c.reg.bitmap])
    count = i64(cells[cell, c.reg.count])
    stored_seq = i64(cells[cell, c.reg.seq])
    other_bitmap = i64(cells[other, c.reg.bitmap])
    other_count = i64(cells[other, c.reg.count])

    if bitmap & child_bit and seq != stored_seq:
        return c.drop.STALE, 0, 0, False  # 2. not a retransmission: older than this use
    if bitmap & child_bit:
        # 3. A retransmission from a child already counted in this use.
        overflow_flag = c.flag.OVERFLOW if state & c.state_overflow else 0
        if state & c.state_ready:
            _store_lanes(buf, lanes_at, lanes[cell], c.k)
            _set_flags_contrib(buf, p, c, c.flag.RESULT | overflow_flag, stored_contrib)
            _put(buf, p + c.udp_off + 2, udp_src, 2)  # back to the UDP port it came from
            _count(ctr, ev, ne, c.event.RETX_REPLY, length)
            return c.drop.NONE, ingress_port, 0, False
        if count == fanin:
            _store_lanes(buf, lanes_at, lanes[cell], c.k)
            _set_flags_contrib(buf, p, c, c.flag.RETX | overflow_flag, stored_contrib)
            _count(ctr, ev, ne, c.event.RETX_UP, length)
            return c.drop.NONE, parent_port, 0, False
        return c.drop.DUPLICATE, 0, 0, False
    if count != 0 and count != fanin and seq != stored_seq:
        return c.drop.STALE, 0, 0, False  # 4. an older chunk's copy
    if count == fanin and seq == stored_seq:
        return c.drop.STALE, 0, 0, False  # 5. a late copy of the completed use
    if other_bitmap & child_bit and other_count != fanin:
        # 6. The child jumps ahead: its round in the other set is not complete.
        return c.drop.AHEAD, 0, 0, False

    # 7. A new contribution.
    cells[cell, c.reg.bitmap] = bitmap | child_bit
    cells[other, c.reg.bitmap] = other_bitmap & ~child_bit & 0xFFFFFFFF
    _count(ctr, ev, ne, c.event.CONTRIBUTION, length)
    overflow = False
    row = lanes[cell]
    if count == 0 or count == fanin:
        for j in range(c.k):
            row[j] = _lane(buf, lanes_at + 4 * j)
        count = 1
        new_contrib = contrib
        state = 0
        cells[cell, c.reg.seq] = seq
        _count(ctr, ev, ne, c.event.FIRST, length)
    else:
        if opcode == c.op.SUM:
            for j in range(c.k):
                wide = i64(row[j]) + _lane(buf, lanes_at + 4 * j)
                if wide > 0x7FFFFFFF:
                    wide = 0x7FFFFFFF
                    overflow = True
                elif wide < -0x80000000:
                    wide = -0x80000000
                    overflow = True
                row[j] = wide
        elif opcode == c.op.OR:
            for j in range(c.k):
                row[j] = i64(row[j]) | _lane(buf, lanes_at + 4 * j)
        else:
            for j in range(c.k):
                row[j] = max(i64(row[j]), _lane(buf, lanes_at + 4 * j))
        count = (count + 1) & 0xFF  # bit<8> in the P4: wraps before it meets fanin
        new_contrib = (stored_contrib + contrib) & 0xFFFF
        if count == fanin:  # the packet leaves with the result (consumed otherwise: unseen)
            _store_lanes(buf, lanes_at, row, c.k)
    if overflow:
        state |= c.state_overflow
        _count(ctr, ev, ne, c.event.OVERFLOW, length)
    if flags & c.flag.OVERFLOW:
        state |= c.state_overflow

    # Completion.
    egress_spec = 0
    mcast_grp = 0
    consumed = False
    if count == fanin:
        out_flags = c.flag.OVERFLOW if state & c.state_overflow else 0
        if is_root == 1:
            state |= c.state_ready
            _set_flags_contrib(buf, p, c, out_flags | c.flag.RESULT, new_contrib)
            mcast_grp = child_mgid
            _count(ctr, ev, ne, c.event.COMPLETE_ROOT, length)
        else:
            _set_flags_contrib(buf, p, c, out_flags, new_contrib)
            egress_spec = parent_port
            _count(ctr, ev, ne, c.event.COMPLETE_UP, length)
    else:
        consumed = True
    cells[cell, c.reg.count] = count
    cells[cell, c.reg.contrib] = new_contrib
    cells[cell, c.reg.state] = state
    return c.drop.NONE, egress_spec, mcast_grp, consumed


@inline
def _egress(
    buf: Any,
    p: int,
    length: int,
    egress_port: int,
    egress_rid: int,
    ina_valid: bool,
    ipv4_valid: bool,
    t: TableArrays,
    ctr: Any,
    c: Constants,
) -> None:
    """EgressRewrite, EgressCounters and InaComputeChecksum on the copy at buf[p:]."""
    ip = p + c.ip_off
    if ina_valid:
        row = find(t, T_EGRESS, egress_port)
        params = t.params
        if row >= 0:
            _put(buf, p, i64(params[row, 0]), 6)
            _put(buf, ip + 16, i64(params[row, 1]), 4)
            _put(buf, p + 6, i64(params[row, 2]), 6)
            _put(buf, ip + 12, i64(params[row, 3]), 4)
            if egress_rid != 0:  # a copy to one of the workers behind the port
                _put(buf, p + c.udp_off + 2, egress_rid, 2)
        _put(buf, p + c.udp_off, c.ina_udp_port, 2)
        buf[p + c.udp_off + 6] = 0
        buf[p + c.udp_off + 7] = 0
    _count(ctr, c.tx_at, c.ports_n, egress_port, length)  # bmv2 counts the ingress length
    if ipv4_valid:
        buf[ip + 10] = 0
        buf[ip + 11] = 0
        _put(buf, ip + 10, _ipv4_checksum(buf, ip, c.udp_off - c.ip_off), 2)


KernelResult = tuple[int, int, int, int]  # (next frame, output frames, output bytes, counts)


@inline
def _drain_counts(w: Work) -> int:
    """Move every non-zero count into `touched` as (index, packets, bytes), zeroing it; indices
    past the counters are rows of row_ctr (index - len(ctr)). Returns how many."""
    ctr, row_ctr, touched = w.ctr, w.row_ctr, w.touched
    m = 0
    for i in range(ctr.shape[0]):
        if ctr[i, 0] or ctr[i, 1]:
            touched[m, 0] = i
            touched[m, 1] = ctr[i, 0]
            touched[m, 2] = ctr[i, 1]
            ctr[i, 0] = 0
            ctr[i, 1] = 0
            m += 1
    for r in range(row_ctr.shape[0]):
        if row_ctr[r, 0] or row_ctr[r, 1]:
            touched[m, 0] = ctr.shape[0] + r
            touched[m, 1] = row_ctr[r, 0]
            touched[m, 2] = row_ctr[r, 1]
            row_ctr[r, 0] = 0
            row_ctr[r, 1] = 0
            m += 1
    return m


def make_kernel(c: Constants) -> BatchKernel:
    """The batch kernel for these constants (compiled on first call, or loaded from numba's
    cache)."""

    @jit
    def process_arrays(
        in_buf: U8s,
        in_offset: I64s,
        in_length: I32s,
        in_port: I32s,
        n: int,
        start: int,
        draws: I64s,
        hkeys: I64s,
        hvals: I64s,
        slices: I64s,
        params: I64s,
        mc_ports: I64s,
        mc_rids: I64s,
        plens: I64s,
        misc: I64s,
        cells: I64s,
        owner: I64s,
        lanes: I32s,
        ctr: I64s,
        row_ctr: I64s,
        touched: I64s,
        out_buf: U8s,
        out_offset: I64s,
        out_length: I32s,
        out_port: I32s,
        out_n: int,
        out_used: int,
    ) -> KernelResult:
        """Frames start .. n-1 of the input, each as ReferenceEngine._process, `draws[i]` the
        loss injection's draw of frame i; what they emit is appended to the output (out_n
        frames, out_used bytes so far). Stops early, before a frame whose worst-case output
        might not fit (a copy per replica of the largest multicast group): returns (the next
        frame to process, output frames, output bytes, counts in `touched`), and the caller
        grows the output. What the frames counted is left in `touched` (_drain_counts).

        Its parameters are the records' fields (`BatchKernel`); the helpers take the tables
        and the work arrays as records again. `c`, the constants, is the only name it closes
        over (numba's cache key)."""
        t = TableArrays(
            hkeys=hkeys,
            hvals=hvals,
            slices=slices,
            params=params,
            mc_ports=mc_ports,
            mc_rids=mc_rids,
            plens=plens,
            misc=misc,
        )
        w = Work(cells=cells, owner=owner, lanes=lanes, ctr=ctr, row_ctr=row_ctr, touched=touched)
        worst = max(1, i64(misc[M_MAX_REPLICAS]))
        frames_room = out_offset.shape[0]
        bytes_room = out_buf.shape[0]
        i = start
        while i < n:
            length = i64(in_length[i])
            if out_n + worst > frames_room or out_used + worst * length > bytes_room:
                break
            port = i64(in_port[i])
            src = i64(in_offset[i])
            p = out_used  # work on the first copy in place, at the end of the output
            _copy(out_buf, p, in_buf, src, length)
            ina_valid, ipv4_valid, parser_error = _parse(out_buf, p, length, c)

            drop_reason: int = c.drop.NONE
            loss = find(t, T_LOSS, port)
            if loss >= 0 and draws[i] < params[loss, 0]:
                drop_reason = c.drop.LOSS
            egress_spec = 0
            mcast_grp = 0
            consumed = False
            if drop_reason == c.drop.NONE:
                if parser_error:
                    drop_reason = c.drop.TRUNCATED
                elif ina_valid:
                    drop_reason, egress_spec, mcast_grp, consumed = _aggregate(
                        out_buf, p, port, length, t, w, c
                    )
                elif ipv4_valid:
                    drop_reason, egress_spec = _forward(out_buf, p, t, c)
                else:
                    drop_reason = c.drop.NOT_IPV4
            if drop_reason != c.drop.NONE or consumed:
                egress_spec = c.drop_port
                mcast_grp = 0
            _count(ctr, c.rx_at, c.ports_n, port, length)
            if drop_reason != c.drop.NONE:
                _count(ctr, c.drops_at, c.drops_n, drop_reason, length)

            # Traffic manager: multicast wins, then the drop port, then unicast.
            if mcast_grp != 0:
                group = find(t, T_MCAST, mcast_grp)
                copies = i64(params[group, 1]) if group >= 0 else 0
                first = i64(params[group, 0]) if group >= 0 else 0
                for r in range(1, copies):
                    at = p + r * length
                    _copy(out_buf, at, out_buf, p, length)
                for r in range(copies):
                    at = p + r * length
                    egress_port = i64(mc_ports[first + r])
                    rid = i64(mc_rids[first + r])
                    _egress(out_buf, at, length, egress_port, rid, ina_valid, ipv4_valid, t, ctr, c)
                    out_offset[out_n] = at
                    out_length[out_n] = length
                    out_port[out_n] = egress_port
                    out_n += 1
                out_used += copies * length
            elif egress_spec != c.drop_port:
                _egress(out_buf, p, length, egress_spec, 0, ina_valid, ipv4_valid, t, ctr, c)
                out_offset[out_n] = p
                out_length[out_n] = length
                out_port[out_n] = egress_spec
                out_n += 1
                out_used += length
            i += 1
        return i, out_n, out_used, _drain_counts(w)

    check_parameters(
        process_arrays,
        (Frames, "in_"),
        "n",
        "start",
        "draws",
        TableArrays,
        Work,
        (Frames, "out_"),
        "out_n",
        "out_used",
    )
    return BatchKernel(process_arrays)
