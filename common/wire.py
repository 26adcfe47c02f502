"""The INA wire format, defined once (DESIGN §3); `p4/include/headers.p4` mirrors it.

A frame is Ethernet / IPv4 (no options) / UDP (dport INA_UDP_PORT) / INA header / K lanes of
32 bits, all big-endian. Every field the P4 header declares is listed in `INA_HEADER_FIELDS`, in
order, with its width; `tests/test_p4_agreement.py` reads the P4 source and checks it. The
numpy record of the INA part (`INA_DTYPE`) is checked against it as this module loads, and
every byte offset (`INA_AT`) and the `struct` format (`INA_HEADER_STRUCT`) are read off that
dtype: code that reads or writes a header takes its offsets from here, never as literals.

Batch pack/unpack works on numpy structured arrays so that building or parsing thousands of
frames costs a handful of vectorized operations, never a Python loop per lane.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from inaemu.topology.addresses import ip_int, mac_bytes

INA_UDP_PORT = 47500
INA_VERSION = 1
K = 64  # lanes per packet; a compile-time constant of the P4 program (INA_K)
ETHERTYPE_IPV4 = 0x0800
IP_PROTO_UDP = 17

# (name, bits) in wire order, exactly as `header ina_t` in p4/include/headers.p4.
INA_HEADER_FIELDS: tuple[tuple[str, int], ...] = (
    ("version", 4),
    ("flags", 4),
    ("opcode", 8),
    ("job_id", 16),
    ("tree_id", 8),
    ("lanes", 8),
    ("slot", 16),
    ("contrib", 16),
    ("seq", 32),
)
INA_HEADER_BYTES = sum(bits for _, bits in INA_HEADER_FIELDS) // 8  # 14
LANE_BITS = 32
LANES_BYTES = K * LANE_BITS // 8
ETH_BYTES, IPV4_BYTES, UDP_BYTES = 14, 20, 8
INA_OFFSET = ETH_BYTES + IPV4_BYTES + UDP_BYTES  # 42
FRAME_BYTES = INA_OFFSET + INA_HEADER_BYTES + LANES_BYTES  # 312 for K=64

SLOT_SET_BIT = 0x8000  # slot bit 15 selects the shadow copy
SLOT_INDEX_MASK = 0x7FFF
# seq = run << RUN_SHIFT | chunk counter (mod 2^16): the run identifies one run of a job's
# workers (the switch's slot owner includes it); the counter numbers chunks within the run.
RUN_SHIFT = 16
MAX_RUN = 0xFFFF
SEQ_CHUNK_MASK = 0xFFFF
MAX_FANIN = 32  # the per-slot bitmap register is 32 bits wide

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)


def worker_udp_port(first: int | None, local_rank: int) -> int:
    """The UDP port local rank `local_rank` of a machine sends from and gets its results at:
    the machine's `udp_port` in topology.json (None: the INA port) plus its local rank. The
    switch tells the workers behind one port apart by it (docs/protocol.md, section 4)."""
    return (INA_UDP_PORT if first is None else first) + local_rank


class Flag(enum.IntFlag):
    RESULT = 0x1  # set by a switch on a final result
    RETX = 0x2  # a retransmission
    OVERFLOW = 0x4  # a SUM saturated in this slot (sticky up the tree)


class Opcode(enum.IntEnum):
    SUM = 0  # signed 32-bit, saturating
    OR = 1  # bitwise
    MAX = 2  # signed


def slot_field(index: int, set_: int) -> int:
    """The 16-bit slot field: set in bit 15, index in bits 14..0."""
    if not 0 <= index <= SLOT_INDEX_MASK:
        raise ValueError(f"slot index {index} out of range 0..{SLOT_INDEX_MASK}")
    return (SLOT_SET_BIT if set_ else 0) | index


def seq_field(run: int, chunk: int) -> int:
    """The 32-bit seq field: the run in bits 31..16, the chunk counter (mod 2^16) below."""
    if not 0 <= run <= MAX_RUN:
        raise ValueError(f"run {run} out of range 0..{MAX_RUN}")
    return (run << RUN_SHIFT) | (chunk & SEQ_CHUNK_MASK)


# The INA part of a frame (header + K lanes) as a numpy record: what transports carry and the
# client works on. '>' makes every multi-byte field big-endian. The header's bytes, in order:
# INA_HEADER_FIELDS with the two 4-bit fields in one byte (checked below, as the import runs).
INA_FIELDS_DTYPE: list[tuple[str, str] | tuple[str, str, tuple[int, ...]]] = [
    ("ver_flags", "u1"),
    ("opcode", "u1"),
    ("job_id", ">u2"),
    ("tree_id", "u1"),
    ("lanes", "u1"),
    ("slot", ">u2"),
    ("contrib", ">u2"),
    ("seq", ">u4"),
    ("values", ">i4", (K,)),
]
INA_DTYPE = np.dtype(INA_FIELDS_DTYPE)
INA_BYTES = INA_HEADER_BYTES + LANES_BYTES  # 270 for K=64
assert INA_DTYPE.itemsize == INA_BYTES


def field_offsets(dtype: np.dtype[np.void]) -> dict[str, int]:
    """Each field of a record dtype and its byte offset, in order."""
    fields = dtype.fields
    assert fields is not None, f"{dtype} is not a record dtype"
    return {name: int(fields[name][1]) for name in dtype.names or ()}


class InaLayout(NamedTuple):
    """Where each field of the INA part of a frame (header, then lanes) starts, in bytes from
    its start: `INA_AT`, read off `INA_DTYPE` (the names are the dtype's; a NamedTuple, so that
    code compiled with numba can take it whole)."""

    ver_flags: int
    opcode: int
    job_id: int
    tree_id: int
    lanes: int
    slot: int
    contrib: int
    seq: int
    values: int


INA_AT = InaLayout(**field_offsets(INA_DTYPE))
INA_HEADER_NAMES = InaLayout._fields[:-1]  # every field but the lanes
# The header as `struct` reads and writes it: (ver_flags, opcode, job_id, ..., seq).
INA_HEADER_STRUCT = struct.Struct(
    ">" + "".join({1: "B", 2: "H", 4: "I"}[INA_DTYPE[name].itemsize] for name in INA_HEADER_NAMES)
)


def _byte_layout(fields: tuple[tuple[str, int], ...]) -> list[tuple[int, int]]:
    """(offset, bytes) of each whole byte or run of bytes the bit fields fill, in order."""
    out, bits, start = [], 0, 0
    for _name, width in fields:
        bits += width
        if bits % 8 == 0:
            out.append((start // 8, (bits - start) // 8))
            start = bits
    return out


assert _byte_layout(INA_HEADER_FIELDS) == [
    (at, INA_DTYPE[name].itemsize) for name, at in zip(INA_HEADER_NAMES, INA_AT, strict=False)
], "INA_FIELDS_DTYPE's header is not INA_HEADER_FIELDS byte for byte"
assert INA_HEADER_STRUCT.size == INA_AT.values == INA_HEADER_BYTES

# One whole frame: Ethernet / IPv4 / UDP / INA.
FRAME_DTYPE = np.dtype(
    [
        ("eth_dst", "u1", (6,)),
        ("eth_src", "u1", (6,)),
        ("eth_type", ">u2"),
        ("ip_ver_ihl", "u1"),
        ("ip_tos", "u1"),
        ("ip_len", ">u2"),
        ("ip_id", ">u2"),
        ("ip_frag", ">u2"),
        ("ip_ttl", "u1"),
        ("ip_proto", "u1"),
        ("ip_csum", ">u2"),
        ("ip_src", ">u4"),
        ("ip_dst", ">u4"),
        ("udp_sport", ">u2"),
        ("udp_dport", ">u2"),
        ("udp_len", ">u2"),
        ("udp_csum", ">u2"),
        *INA_FIELDS_DTYPE,
    ]
)
assert FRAME_DTYPE.itemsize == FRAME_BYTES
FRAME_AT = field_offsets(FRAME_DTYPE)  # byte offsets in a frame, by field name
assert FRAME_AT["ver_flags"] == INA_OFFSET


def ipv4_checksum(header: bytes) -> int:
    """RFC 791 one's-complement checksum of an IPv4 header (checksum field zeroed).

    The one's-complement sum of 16-bit words is the header, read as one big integer, modulo
    0xFFFF (with 0xFFFF, not 0, for a non-zero header): two integer operations, no loop.
    """
    if len(header) % 2:
        header += b"\0"
    value = int.from_bytes(header, "big")
    total = value % 0xFFFF
    if total == 0 and value:
        total = 0xFFFF
    return (~total) & 0xFFFF


@dataclass(frozen=True)
class Endpoint:
    """Addresses of one side of an INA exchange."""

    mac: str
    ip: str
    udp_port: int = INA_UDP_PORT


@dataclass
class FrameTemplate:
    """Ethernet/IPv4/UDP addressing shared by every frame a worker sends."""

    src: Endpoint
    dst: Endpoint
    ttl: int = 64

    def prefix(self) -> bytes:
        """The 42 bytes of Ethernet/IPv4/UDP headers in front of every INA payload."""
        return self.header_record().tobytes()[:INA_OFFSET]

    def header_record(self) -> npt.NDArray[np.void]:
        rec = np.zeros(1, dtype=FRAME_DTYPE)
        rec["eth_dst"][0] = np.frombuffer(mac_bytes(self.dst.mac), dtype=np.uint8)
        rec["eth_src"][0] = np.frombuffer(mac_bytes(self.src.mac), dtype=np.uint8)
        rec["eth_type"] = ETHERTYPE_IPV4
        rec["ip_ver_ihl"] = 0x45
        rec["ip_len"] = FRAME_BYTES - ETH_BYTES
        rec["ip_ttl"] = self.ttl
        rec["ip_proto"] = IP_PROTO_UDP
        rec["ip_src"] = ip_int(self.src.ip)
        rec["ip_dst"] = ip_int(self.dst.ip)
        raw = rec.tobytes()[ETH_BYTES : ETH_BYTES + IPV4_BYTES]
        rec["ip_csum"] = ipv4_checksum(raw)
        rec["udp_sport"] = self.src.udp_port
        rec["udp_dport"] = self.dst.udp_port
        rec["udp_len"] = FRAME_BYTES - ETH_BYTES - IPV4_BYTES
        return rec


def pack_payloads(
    *,
    opcode: int,
    job_id: int,
    tree_id: npt.ArrayLike,
    slot: npt.ArrayLike,
    seq: npt.ArrayLike,
    values: npt.NDArray[np.int32],
    lanes: npt.ArrayLike = K,
    flags: npt.ArrayLike = 0,
    contrib: int = 1,
) -> npt.NDArray[np.void]:
    """Build len(values) INA payloads (header + lanes) at once; `values` is (n, K) int32."""
    values = np.asarray(values)
    if values.ndim != 2 or values.shape[1] != K:
        raise ValueError(f"values must have shape (n, {K}), got {values.shape}")
    out = np.zeros(values.shape[0], dtype=INA_DTYPE)
    out["ver_flags"] = (INA_VERSION << 4) | (np.asarray(flags, dtype=np.uint8) & 0xF)
    out["opcode"] = opcode
    out["job_id"] = job_id
    out["tree_id"] = tree_id
    out["lanes"] = lanes
    out["slot"] = slot
    out["contrib"] = contrib
    out["seq"] = seq
    out["values"] = values
    return out


def pack_frames(template: FrameTemplate, payloads: npt.NDArray[np.void]) -> npt.NDArray[np.void]:
    """Whole frames: `template`'s Ethernet/IPv4/UDP headers in front of each INA payload.

    frames = pack_frames(template, pack_payloads(opcode=..., job_id=..., ...))
    """
    frames = np.repeat(template.header_record(), len(payloads))
    for name in INA_DTYPE.names or ():
        frames[name] = payloads[name]
    return frames


def parse_frames(buf: bytes | bytearray | memoryview, count: int = -1) -> npt.NDArray[np.void]:
    """View a concatenation of whole INA frames as records (no copy)."""
    return np.frombuffer(buf, dtype=FRAME_DTYPE, count=count)


def parse_payloads(buf: bytes | bytearray | memoryview, count: int = -1) -> npt.NDArray[np.void]:
    """View a concatenation of INA payloads (header + lanes) as records (no copy)."""
    return np.frombuffer(buf, dtype=INA_DTYPE, count=count)


@dataclass(frozen=True)
class InaHeader:
    """One INA header as Python integers (for tests, tools and slow paths)."""

    version: int = INA_VERSION
    flags: int = 0
    opcode: int = Opcode.SUM
    job_id: int = 0
    tree_id: int = 0
    lanes: int = K
    slot: int = 0
    contrib: int = 1
    seq: int = 0

    def pack(self) -> bytes:
        return INA_HEADER_STRUCT.pack(
            ((self.version & 0xF) << 4) | (self.flags & 0xF),
            self.opcode,
            self.job_id,
            self.tree_id,
            self.lanes,
            self.slot,
            self.contrib,
            self.seq,
        )

    @classmethod
    def unpack(cls, data: bytes) -> InaHeader:
        if len(data) < INA_HEADER_BYTES:
            raise ValueError(f"INA header needs {INA_HEADER_BYTES} bytes, got {len(data)}")
        vf, op, job, tree, lanes, slot, contrib, seq = INA_HEADER_STRUCT.unpack_from(data)
        return cls(vf >> 4, vf & 0xF, op, job, tree, lanes, slot, contrib, seq)
