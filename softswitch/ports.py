"""The softswitch's port layer: where frames enter and leave the pipeline.

- `LoopbackWire`: a port is a UDP socket on 127.0.0.1 that carries whole Ethernet frames, one
  per datagram, to and from a peer socket (a host transport, or another switch's wire). No root.
  The convention `wire_udp_ports(base, port)` gives switch port p the UDP port base + 2p and
  its peer base + 2p + 1; hostlib's loopback transport uses the same function.
- `AfPacketPort`: a raw AF_PACKET socket on a named interface (Mininet veths; needs root).
"""

from __future__ import annotations

import errno
import select
import socket
from typing import Protocol

from inaemu.hostlib.transport import DEFAULT_WIRE_BASE, LOOPBACK, wire_udp_ports

__all__ = ["DEFAULT_WIRE_BASE", "LOOPBACK", "AfPacketPort", "LoopbackWire", "wire_udp_ports"]

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
MAX_FRAME = 9216
RECV_BATCH = 64
OUTPUT_QUEUE_WAIT = 0.005  # seconds a send may wait for a full socket buffer


class PortInUseError(OSError):
    pass


class Port(Protocol):
    name: str

    def fileno(self) -> int: ...
    def recv_batch(self) -> list[bytes]: ...
    def send(self, frame: bytes) -> None: ...
    def close(self) -> None: ...


def _drain(sock: socket.socket, limit: int = RECV_BATCH) -> list[bytes]:
    frames: list[bytes] = []
    for _ in range(limit):
        try:
            frames.append(sock.recv(MAX_FRAME))
        except BlockingIOError:
            break
        except ConnectionRefusedError:  # ICMP from an earlier send to a closed peer
            continue
    return frames


class LoopbackWire:
    """One switch port as a UDP socket: frames in, frames out, one per datagram."""

    def __init__(self, listen: tuple[str, int], peer: tuple[str, int], name: str = "") -> None:
        self.name = name or f"udp:{listen[1]}"
        self.peer = peer
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        try:
            self.sock.bind(listen)
        except OSError as exc:
            self.sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise PortInUseError(
                    exc.errno,
                    f"UDP port {listen[0]}:{listen[1]} for {self.name} is taken "
                    "(another softswitch running? pick another --wire-base)",
                ) from None
            raise
        self.sock.setblocking(False)
        self.tx_dropped = 0  # frames lost because the peer did not drain its socket in time

    def fileno(self) -> int:
        return self.sock.fileno()

    def recv_batch(self) -> list[bytes]:
        return _drain(self.sock)

    def send(self, frame: bytes) -> None:
        # A full socket buffer is an output queue: wait for it a little (as a switch's egress
        # queue holds frames), then drop and count. An absent peer loses the frame, like a wire.
        for attempt in range(2):
            try:
                self.sock.sendto(frame, self.peer)
                return
            except BlockingIOError:
                if attempt == 0:
                    select.select([], [self.sock], [], OUTPUT_QUEUE_WAIT)
            except ConnectionRefusedError:
                break
        self.tx_dropped += 1

    def close(self) -> None:
        self.sock.close()


class AfPacketPort:
    """One switch port bound to a network interface with a raw AF_PACKET socket (root)."""

    def __init__(self, ifname: str) -> None:
        self.name = ifname
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:
            self.sock.bind((ifname, 0))
        except OSError as exc:
            self.sock.close()
            raise OSError(
                exc.errno, f"cannot bind AF_PACKET to {ifname!r}: {exc.strerror}"
            ) from None
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.setblocking(False)

    def fileno(self) -> int:
        return self.sock.fileno()

    def recv_batch(self) -> list[bytes]:
        frames: list[bytes] = []
        for _ in range(RECV_BATCH):
            try:
                data, addr = self.sock.recvfrom(MAX_FRAME)
            except BlockingIOError:
                break
            if addr[2] != PACKET_OUTGOING:  # our own transmissions come back on ETH_P_ALL
                frames.append(data)
        return frames

    def send(self, frame: bytes) -> None:
        try:
            self.sock.send(frame)
        except BlockingIOError:
            pass

    def close(self) -> None:
        self.sock.close()
