"""Just enough of the pcap file format to read the frames of a capture (bmv2 `--pcap`, tcpdump)."""

from __future__ import annotations

import struct
from pathlib import Path

_MAGICS = {  # magic as read little-endian -> (byte order, sub-second unit per second)
    0xA1B2C3D4: ("<", 1_000_000),
    0xD4C3B2A1: (">", 1_000_000),
    0xA1B23C4D: ("<", 1_000_000_000),
    0x4D3CB2A1: (">", 1_000_000_000),
}


class PcapError(ValueError):
    pass


def read_pcap(path: Path) -> list[bytes]:
    """The frames of a pcap file, in file order."""
    raw = path.read_bytes()
    if len(raw) < 24:
        raise PcapError(f"{path}: {len(raw)} bytes, shorter than a pcap header")
    magic = struct.unpack_from("<I", raw)[0]
    if magic not in _MAGICS:
        raise PcapError(f"{path}: not a pcap file (magic {magic:#010x})")
    order, _ = _MAGICS[magic]
    frames: list[bytes] = []
    off = 24
    while off + 16 <= len(raw):
        _, _, caplen, _ = struct.unpack_from(order + "IIII", raw, off)
        off += 16
        if off + caplen > len(raw):
            raise PcapError(f"{path}: truncated record at byte {off - 16}")
        frames.append(raw[off : off + caplen])
        off += caplen
    return frames
