"""Transports: how a worker's INA payloads reach the switch and results come back.

All transports carry INA payloads (header + K lanes, `hostlib.wire.INA_DTYPE` records); they
differ in what wraps them:

- `LoopbackWireTransport`: whole Ethernet frames in UDP datagrams on 127.0.0.1, the host end
  of a softswitch loopback wire (`softswitch.ports.wire_udp_ports`). No root.
- `UdpTransport`: a kernel UDP socket (Mininet hosts, real NICs): the kernel adds
  Ethernet/IPv4/UDP; the switch's aggregation address needs an ARP entry on the host.

Sends go out back to back from one buffer and receives drain the socket in batches; no work
per element is done in Python.
"""

from __future__ import annotations

import select
import socket
from typing import Protocol

import numpy as np
import numpy.typing as npt

from inaemu.hostlib.wire import (
    ETHERTYPE_IPV4,
    FRAME_BYTES,
    INA_BYTES,
    INA_DTYPE,
    INA_OFFSET,
    INA_UDP_PORT,
    Endpoint,
    FrameTemplate,
)

LOOPBACK = "127.0.0.1"
RECV_BATCH = 256
_IPV4 = ETHERTYPE_IPV4.to_bytes(2, "big")
SOCKET_BUFFER = 8 << 20

# The softswitch's loopback-wire convention (softswitch/ports.py imports this one).
DEFAULT_WIRE_BASE = 40000


def wire_udp_ports(base: int, port: int) -> tuple[int, int]:
    """(switch side, host side) UDP ports of loopback wire `port` under `base`."""
    if not 0 <= port < 511:
        raise ValueError(f"switch port {port} out of range 0..510")
    return base + 2 * port, base + 2 * port + 1


class TransportError(OSError):
    pass


class Transport(Protocol):
    def send(self, payloads: npt.NDArray[np.void]) -> None: ...
    def recv(self, timeout: float) -> npt.NDArray[np.void]: ...
    def close(self) -> None: ...


def _udp_socket(bind: tuple[str, int], what: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
        sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
    try:
        sock.bind(bind)
    except OSError as exc:
        sock.close()
        raise TransportError(
            exc.errno, f"cannot bind {what} to {bind[0]}:{bind[1]}: {exc.strerror}"
        ) from None
    sock.setblocking(False)
    return sock


def _wait_readable(sock: socket.socket, timeout: float) -> bool:
    readable, _, _ = select.select([sock], [], [], max(timeout, 0.0))
    return bool(readable)


class LoopbackWireTransport:
    """The host end of softswitch loopback wire `switch_port`."""

    def __init__(
        self,
        switch_port: int,
        *,
        base: int = DEFAULT_WIRE_BASE,
        host: Endpoint | None = None,
        switch: Endpoint | None = None,
    ) -> None:
        switch_udp, host_udp = wire_udp_ports(base, switch_port)
        self.peer = (LOOPBACK, switch_udp)
        host = host or Endpoint(f"02:00:00:00:00:{switch_port & 0xFF:02x}", f"10.0.0.{switch_port}")
        switch = switch or Endpoint("02:00:00:00:00:fe", "10.0.0.254")
        self.prefix = FrameTemplate(host, switch).prefix()
        self.sock = _udp_socket((LOOPBACK, host_udp), f"the host end of wire {switch_port}")
        self.frames_sent = 0
        self.frames_received = 0

    def send(self, payloads: npt.NDArray[np.void]) -> None:
        buf = payloads.tobytes()
        prefix, sendto, peer = self.prefix, self.sock.sendto, self.peer
        for off in range(0, len(buf), INA_BYTES):
            while True:
                try:
                    sendto(prefix + buf[off : off + INA_BYTES], peer)
                    break
                except BlockingIOError:
                    select.select([], [self.sock], [], 0.01)
                except ConnectionRefusedError:
                    break  # no switch listening (yet): the frame is lost, like on a wire
        self.frames_sent += len(payloads)

    def recv(self, timeout: float) -> npt.NDArray[np.void]:
        if not _wait_readable(self.sock, timeout):
            return np.empty(0, dtype=INA_DTYPE)
        chunks: list[bytes] = []
        recv = self.sock.recv
        for _ in range(RECV_BATCH):
            try:
                frame = recv(FRAME_BYTES + 64)
            except (BlockingIOError, ConnectionRefusedError):
                break
            if len(frame) >= FRAME_BYTES and frame[12:14] == _IPV4 and frame[23] == 17:
                chunks.append(frame[INA_OFFSET:FRAME_BYTES])
        self.frames_received += len(chunks)
        return np.frombuffer(b"".join(chunks), dtype=INA_DTYPE)

    def close(self) -> None:
        self.sock.close()


class UdpTransport:
    """Kernel UDP: payloads to (switch_ip, INA_UDP_PORT), results on (local_ip, INA_UDP_PORT)."""

    def __init__(self, local_ip: str, switch_ip: str, *, port: int = INA_UDP_PORT) -> None:
        self.peer = (switch_ip, port)
        self.sock = _udp_socket((local_ip, port), "the INA UDP socket")
        self.frames_sent = 0
        self.frames_received = 0

    def send(self, payloads: npt.NDArray[np.void]) -> None:
        buf = payloads.tobytes()
        sendto, peer = self.sock.sendto, self.peer
        for off in range(0, len(buf), INA_BYTES):
            while True:
                try:
                    sendto(buf[off : off + INA_BYTES], peer)
                    break
                except BlockingIOError:
                    select.select([], [self.sock], [], 0.01)
                except ConnectionRefusedError:
                    break
        self.frames_sent += len(payloads)

    def recv(self, timeout: float) -> npt.NDArray[np.void]:
        if not _wait_readable(self.sock, timeout):
            return np.empty(0, dtype=INA_DTYPE)
        chunks: list[bytes] = []
        for _ in range(RECV_BATCH):
            try:
                data = self.sock.recv(INA_BYTES + 64)
            except (BlockingIOError, ConnectionRefusedError):
                break
            if len(data) >= INA_BYTES:
                chunks.append(data[:INA_BYTES])
        self.frames_received += len(chunks)
        return np.frombuffer(b"".join(chunks), dtype=INA_DTYPE)

    def close(self) -> None:
        self.sock.close()
