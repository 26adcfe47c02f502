"""Transports: how a worker's INA payloads reach the switch and results come back.

All transports carry INA payloads (header + K lanes, `hostlib.wire.INA_DTYPE` records); they
differ in what wraps them:

- `LoopbackWireTransport`: whole Ethernet frames over a softswitch loopback wire, the host
  end `s1.p.host` of switch port p in the switch's wire dir (`hostlib.loopback`: AF_UNIX
  datagrams in a private directory; the softswitch prints it as `wire_dir=` on its READY
  line). No root, no UDP ports; only the switch port can send to it.
- `UdpTransport`: a kernel UDP socket (Mininet hosts, real NICs): the kernel adds
  Ethernet/IPv4/UDP; the switch's aggregation address needs an ARP entry on the host.

Sends go out back to back from one buffer and receives drain the socket in batches; no work
per element is done in Python.
"""

from __future__ import annotations

import os
import select
import socket
from typing import Protocol

import numpy as np
import numpy.typing as npt

from inaemu.hostlib.loopback import WireDir, WireEnd, host_end, port_end
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

RECV_BATCH = 256
_IPV4 = ETHERTYPE_IPV4.to_bytes(2, "big")
SOCKET_BUFFER = 8 << 20
SEND_WAIT = 0.01  # seconds a loopback send sleeps for room before trying again
_DONTWAIT = socket.MSG_DONTWAIT


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


class LoopbackWireTransport(WireEnd):
    """The host end of the loopback wire on port `switch_port` of softswitch `switch_name`,
    in `wire_dir` (the softswitch's `wire_dir`).

    The socket is connected to the switch port's end as soon as that exists (at once when
    the switch runs, else on a later send): from then on the kernel refuses datagrams to it
    from any other socket, and a send sleeps in the kernel until the switch has room. Until
    connected, datagrams not from the switch port are dropped and counted in `rx_foreign`.
    A send while the switch is absent loses the frame, as on a wire (the client retransmits).
    """

    def __init__(
        self,
        switch_port: int,
        wire_dir: WireDir | str | os.PathLike[str],
        *,
        switch_name: str = "s1",
        host: Endpoint | None = None,
        switch: Endpoint | None = None,
    ) -> None:
        wires = wire_dir if isinstance(wire_dir, WireDir) else WireDir(wire_dir, create=False)
        super().__init__(
            wires,
            host_end(switch_name, switch_port),
            port_end(switch_name, switch_port),
            hint=f"is another worker on port {switch_port} of {switch_name}?",
            send_timeout=SEND_WAIT,
        )
        host = host or Endpoint(f"02:00:00:00:00:{switch_port & 0xFF:02x}", f"10.0.0.{switch_port}")
        switch = switch or Endpoint("02:00:00:00:00:fe", "10.0.0.254")
        self.prefix = FrameTemplate(host, switch).prefix()
        self.connected = False
        self._connect()
        self.frames_sent = 0
        self.frames_received = 0

    def _connect(self) -> bool:
        try:
            self.sock.connect(self.peer)
        except OSError:  # no switch port (yet), or a stale path
            return False
        self.connected = True
        return True

    def send(self, payloads: npt.NDArray[np.void]) -> None:
        buf = payloads.tobytes()
        prefix, send_frame = self.prefix, self._send_frame
        for off in range(0, len(buf), INA_BYTES):
            if not send_frame(prefix + buf[off : off + INA_BYTES]):
                self.tx_dropped += 1  # lost, like on a wire with nothing at the other end
        self.frames_sent += len(payloads)

    def _send_frame(self, frame: bytes) -> bool:
        for _ in range(2):  # a second try after reconnecting to a restarted switch
            if not self.connected and not self._connect():
                return False  # no switch on the wire
            try:
                while True:
                    try:
                        self.sock.send(frame)  # sleeps up to SEND_WAIT for room
                        return True
                    except BlockingIOError:
                        pass
            except OSError:  # the switch port went away (ECONNREFUSED)
                self.connected = False
        return False

    def recv(self, timeout: float) -> npt.NDArray[np.void]:
        if not _wait_readable(self.sock, timeout):
            return np.empty(0, dtype=INA_DTYPE)
        chunks: list[bytes] = []
        recvfrom, peer = self.sock.recvfrom, self.peer
        for _ in range(RECV_BATCH):
            try:
                frame, source = recvfrom(FRAME_BYTES + 64, _DONTWAIT)
            except (BlockingIOError, ConnectionError):
                break
            if source != peer:
                self.rx_foreign += 1
            elif len(frame) >= FRAME_BYTES and frame[12:14] == _IPV4 and frame[23] == 17:
                chunks.append(frame[INA_OFFSET:FRAME_BYTES])
        self.frames_received += len(chunks)
        return np.frombuffer(b"".join(chunks), dtype=INA_DTYPE)


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
