"""The wire format: numpy batch pack/parse, struct header pack, and the scapy layer agree."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from inaemu.common import wire
from inaemu.common.scapy_ina import INA
from inaemu.common.wire import FRAME_BYTES, INA_UDP_PORT, Endpoint, FrameTemplate, InaHeader, K
from inaemu.topology import addresses

SRC = Endpoint("00:00:00:00:00:01", "10.0.0.1")
DST = Endpoint("00:00:00:00:00:fe", "10.0.0.254")

headers = st.builds(
    InaHeader,
    version=st.integers(0, 15),
    flags=st.integers(0, 15),
    opcode=st.integers(0, 255),
    job_id=st.integers(0, 0xFFFF),
    tree_id=st.integers(0, 255),
    lanes=st.integers(0, 255),
    slot=st.integers(0, 0xFFFF),
    contrib=st.integers(0, 0xFFFF),
    seq=st.integers(0, 2**32 - 1),
)


@given(headers, st.lists(st.integers(-(2**31), 2**31 - 1), min_size=K, max_size=K))
def test_numpy_scapy_struct_agree(h: InaHeader, values: list[int]) -> None:
    rec = wire.pack_frames(
        FrameTemplate(SRC, DST),
        wire.pack_payloads(
            opcode=h.opcode,
            job_id=h.job_id,
            tree_id=h.tree_id,
            slot=h.slot,
            seq=h.seq,
            values=np.array([values], dtype=np.int32),
            lanes=h.lanes,
            flags=h.flags,
            contrib=h.contrib,
        ),
    )
    rec["ver_flags"] = (h.version << 4) | h.flags
    frame = rec.tobytes()
    assert len(frame) == FRAME_BYTES
    assert InaHeader.unpack(frame[wire.INA_OFFSET :]) == h
    assert frame[wire.INA_OFFSET : wire.INA_OFFSET + wire.INA_HEADER_BYTES] == h.pack()

    pkt = Ether(frame)
    assert INA in pkt
    ina = pkt[INA]
    for name, _ in wire.INA_HEADER_FIELDS:
        assert getattr(ina, name) == getattr(h, name), name
    assert ina.values == values
    assert pkt[IP].chksum == wire.ipv4_checksum(frame[14:24] + b"\0\0" + frame[26:34])

    built = (
        Ether(src=SRC.mac, dst=DST.mac)
        / IP(src=SRC.ip, dst=DST.ip, ttl=64, id=0, flags=0)
        / UDP(sport=INA_UDP_PORT, dport=INA_UDP_PORT, chksum=0)
        / INA(**{n: getattr(h, n) for n, _ in wire.INA_HEADER_FIELDS}, values=values)
    )
    assert bytes(built) == frame

    parsed = wire.parse_frames(frame)
    assert int(parsed["seq"][0]) == h.seq
    assert parsed["values"][0].tolist() == values


def test_scapy_pads_short_lane_lists() -> None:
    raw = bytes(INA(values=[1, -2, 3]))
    assert len(raw) == wire.INA_HEADER_BYTES + 4 * K
    assert INA(raw).values[:4] == [1, -2, 3, 0]


def test_slot_field() -> None:
    assert wire.slot_field(5, 1) == 0x8005
    assert wire.slot_field(0x7FFF, 0) == 0x7FFF


def test_bad_addresses_are_refused_clearly() -> None:
    import pytest

    with pytest.raises(ValueError, match="MAC"):
        addresses.mac_bytes("00:11")
    with pytest.raises(ValueError, match="IPv4"):
        addresses.ip_int("10.0.0.300")
    with pytest.raises(ValueError, match="slot index"):
        wire.slot_field(0x8000, 0)


@given(st.binary(min_size=20, max_size=20) | st.sampled_from([b"\0" * 20, b"\xff" * 20]))
def test_ipv4_checksum_is_rfc_1071(header: bytes) -> None:
    import struct

    total = sum(struct.unpack("!10H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    assert wire.ipv4_checksum(header) == (~total) & 0xFFFF
