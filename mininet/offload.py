"""Turn off a veth's transmit offloads (checksum, scatter-gather, TSO, GSO) with the ethtool
ioctl, so that ordinary TCP traffic crosses a switch that forwards frames in user space.

A Linux veth leaves a TCP segment's checksum for the "hardware" to fill and hands on 64 KiB
segments for it to cut (TSO/GSO). A switch that reads frames from an AF_PACKET socket and
writes them out of another interface (the softswitch, bmv2) forwards them as they are: the
checksum never gets filled (the receiving host drops every segment) and a 64 KiB frame does
not fit its buffer. With these offloads off the kernel computes checksums and cuts segments
itself, as p4-utils' hosts do with `ethtool --offload IF rx off tx off`. ethtool itself is not
needed (Debian's Mininet does not depend on it): this is the same request it makes.

    python -m inaemu.mininet.offload h1-eth0     # in the host's network namespace
"""

from __future__ import annotations

import ctypes
import fcntl
import socket
import struct
import sys

SIOCETHTOOL = 0x8946
# ethtool's legacy "set" commands (linux/ethtool.h), each taking a struct ethtool_value
TX_OFFLOADS = {"tx-checksumming": 0x17, "scatter-gather": 0x19, "tso": 0x1F, "gso": 0x24}


def tx_offloads_off(ifname: str) -> None:
    """Every offload of `TX_OFFLOADS` off on `ifname` (this process's network namespace;
    needs CAP_NET_ADMIN). OSError naming the interface and the offload if one is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name, cmd in TX_OFFLOADS.items():
            value = ctypes.create_string_buffer(struct.pack("II", cmd, 0))  # ethtool_value
            ifreq = struct.pack("16sP", ifname.encode(), ctypes.addressof(value))
            try:
                fcntl.ioctl(s.fileno(), SIOCETHTOOL, ifreq)
            except OSError as exc:
                why = f"{ifname}: cannot turn {name} off: {exc.strerror}"
                raise OSError(exc.errno, why) from None


def main(argv: list[str] | None = None) -> int:
    names = sys.argv[1:] if argv is None else argv
    if not names:
        print("usage: python -m inaemu.mininet.offload IFNAME...", file=sys.stderr)
        return 2
    try:
        for name in names:
            tx_offloads_off(name)
    except OSError as exc:
        print(f"offload: {exc.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
