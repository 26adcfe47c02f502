"""The softswitch's port layer: where frames enter and leave the pipeline.

- `LoopbackWire`: a port is one end of a loopback wire (`hostlib.loopback`): an AF_UNIX
  datagram socket bound to `WIRE_DIR/SWITCH.PORT` in a private directory, carrying whole
  Ethernet frames, one per datagram, to and from its peer's end (a host's
  `LoopbackWireTransport`, or another switch's port). No root, no UDP ports. Only datagrams
  sent from the peer's path are taken; anything else is dropped and counted in `rx_foreign`.
- `AfPacketPort`: a raw AF_PACKET socket on a named interface (Mininet veths; needs root).
"""

from __future__ import annotations

import socket
from typing import Protocol

from inaemu.hostlib.loopback import WireDir, WireEnd, WireError, host_end, port_end

__all__ = ["AfPacketPort", "LoopbackWire", "Port", "WireDir", "WireError", "host_end", "port_end"]

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
MAX_FRAME = 9216
RECV_BATCH = 64
OUTPUT_QUEUE_WAIT = 0.005  # seconds a send may wait for room at the peer
_DONTWAIT = socket.MSG_DONTWAIT


class Port(Protocol):
    name: str

    def fileno(self) -> int: ...
    def recv_batch(self) -> list[bytes]: ...
    def send(self, frame: bytes) -> None: ...
    def close(self) -> None: ...


class LoopbackWire(WireEnd):
    """One switch port as one end of a loopback wire: frames in, frames out, one per datagram.

    The socket stays unconnected (a switch port accepts its peer whenever it comes up, and a
    restarted peer is just a new socket on the same path): every datagram's source is checked
    against the peer's path.
    """

    def __init__(self, wire_dir: WireDir, end: str, peer: str, name: str = "") -> None:
        super().__init__(
            wire_dir,
            end,
            peer,
            hint="another softswitch with this name in this wire dir? "
            "pick another --wire-dir or --name",
            send_timeout=OUTPUT_QUEUE_WAIT,
        )
        self.name = name or end

    def recv_batch(self) -> list[bytes]:
        frames: list[bytes] = []
        recvfrom, peer = self.sock.recvfrom, self.peer
        for _ in range(RECV_BATCH):
            try:
                data, source = recvfrom(MAX_FRAME, _DONTWAIT)
            except BlockingIOError:
                break
            if source == peer:
                frames.append(data)
            else:
                self.rx_foreign += 1
        return frames

    def send(self, frame: bytes) -> None:
        # A peer that has not drained its queue is an output queue: the send sleeps in the
        # kernel for room (at most OUTPUT_QUEUE_WAIT, SO_SNDTIMEO), then the frame is dropped
        # and counted. An absent peer loses the frame, like a wire with nothing plugged in.
        try:
            self.sock.sendto(frame, self.peer)
        except OSError:  # EAGAIN after the wait; ENOENT/ECONNREFUSED/EPERM: no live peer
            self.tx_dropped += 1


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
        self.tx_dropped = 0  # frames the interface had no room for

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
        # The interface's queue is full (EAGAIN) or the interface went away: the frame is
        # lost, and counted, like a frame a real switch's full output queue drops.
        try:
            self.sock.send(frame)
        except OSError:
            self.tx_dropped += 1

    def close(self) -> None:
        self.sock.close()
