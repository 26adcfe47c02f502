"""IPv4 and MAC addresses: the text `topology.json` and the command lines use, the integers
and bytes that tables and frames carry. The one parser of each, shared by the topology's
checks, the controller's table entries and the host library's frames."""

from __future__ import annotations


def mac_bytes(mac: str | bytes) -> bytes:
    if isinstance(mac, bytes):
        if len(mac) != 6:
            raise ValueError(f"MAC address must be 6 bytes, got {len(mac)}")
        return mac
    parts = mac.split(":")
    if len(parts) != 6:
        raise ValueError(f"bad MAC address {mac!r}: expected six ':'-separated octets")
    return bytes(int(p, 16) for p in parts)


def ip_int(ip: str | int) -> int:
    if isinstance(ip, int):
        return ip
    parts = ip.split(".")
    if len(parts) != 4 or not all(p.isdigit() and 0 <= int(p) <= 255 for p in parts):
        raise ValueError(f"bad IPv4 address {ip!r}")
    a, b, c, d = (int(p) for p in parts)
    return (a << 24) | (b << 16) | (c << 8) | d


def ip_str(ip: int) -> str:
    return ".".join(str((ip >> s) & 0xFF) for s in (24, 16, 8, 0))
