"""Transports: how a worker's INA payloads reach the switch and results come back.

All transports carry INA payloads (header + K lanes, `common.wire.INA_DTYPE` records); they
differ in what wraps them:

- `LoopbackWireTransport`: whole Ethernet frames over a softswitch loopback wire, the host
  end `s1.p.host` of switch port p in the switch's wire dir (`common.loopback`: an AF_UNIX
  stream connection between ends in a private directory; the softswitch prints it as
  `wire_dir=` on its READY line). No root, no UDP ports; only the switch port can send to it.
- `UdpTransport`: a kernel UDP socket (Mininet hosts, real NICs): the kernel adds
  Ethernet/IPv4/UDP; the switch's aggregation address needs an ARP entry on the host.

A send builds every frame of its batch in one compiled pass (`hostlib.kernels`) and hands
them to the kernel in one system call; a receive takes every frame that has arrived in one call
and copies their INA payloads out in one compiled pass (`ina_payloads` is the numpy
reference); no work per frame or element is done in Python.
"""

from __future__ import annotations

import errno
import os
import select
import socket
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from inaemu.common.batch_io import IoCounts, Mmsg, sockaddr_in
from inaemu.common.loopback import (
    FEW,
    READ_BYTES,
    RECORD_HEADER,
    WireDir,
    WireEnd,
    host_end,
    port_end,
)
from inaemu.common.wire import (
    ETHERTYPE_IPV4,
    FRAME_BYTES,
    INA_BYTES,
    INA_DTYPE,
    INA_OFFSET,
    INA_UDP_PORT,
    IP_PROTO_UDP,
    Endpoint,
    FrameTemplate,
)
from inaemu.hostlib import kernels

RECV_BATCH = 256  # datagrams one UDP receive takes at most
UDP_SLOT = 512  # bytes of a receive slot (an INA payload is 270)
_IPV4 = ETHERTYPE_IPV4.to_bytes(2, "big")
SOCKET_BUFFER = 8 << 20
_RECORD = RECORD_HEADER + FRAME_BYTES  # one INA frame on a wire's stream
_NONE = np.zeros(0, np.int64)
_HEAD = FRAME_BYTES.to_bytes(RECORD_HEADER, "little")


def _steps(n: int, step: int, start: int = 0) -> npt.NDArray[np.int64]:
    """start, start + step, ... (n of them)."""
    return np.arange(n, dtype=np.int64) * step + start


class TransportError(OSError):
    pass


class Transport(Protocol):
    def send(self, payloads: npt.NDArray[np.void]) -> None: ...
    def recv(self, timeout: float) -> npt.NDArray[np.void]: ...
    def close(self) -> None: ...


@runtime_checkable
class FramedTransport(Transport, Protocol):
    """A transport whose sends and receives the client can do in place: it sends frames the
    client built (`head`, the bytes it puts in front of every payload, then the payload) as
    they are, and tells where the payloads it received are instead of copying them out."""

    head: npt.NDArray[np.uint8]

    def send_framed(self, frames: npt.NDArray[np.uint8]) -> None:
        """Send frames, one per row (`head` then an INA payload), in order."""
        ...

    def recv_offsets(self, timeout: float) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        """Wait at most `timeout` for frames; (a buffer, where each INA payload received
        starts in it). The buffer is overwritten by the next receive."""
        ...


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


def framed(transport: Transport) -> FramedTransport | None:
    """`transport` if the client may send and receive through its framed methods: it has
    them, and its `send` and `recv` are those of the class that defines them (a subclass that
    overrides `send` or `recv`, to drop or duplicate frames say, is used through those)."""
    if not isinstance(transport, FramedTransport):
        return None
    cls = type(transport)
    owner = next((k for k in cls.__mro__ if "recv_offsets" in vars(k)), None)
    if owner is None or "recv" in vars(transport) or "send" in vars(transport):
        return None
    if any(getattr(cls, name) is not getattr(owner, name) for name in ("recv", "send")):
        return None
    return transport


class LoopbackWireTransport(WireEnd):
    """The host end of the loopback wire on port `switch_port` of softswitch `switch_name`,
    in `wire_dir` (the softswitch's `wire_dir`).

    The end connects to the switch port as soon as that exists (at once when the switch
    runs, else on a later send or receive, and again after the switch restarted); nothing
    else can reach it (`common.loopback`). A send builds the frames of the whole batch with
    numpy and hands them to the kernel in one call; it never waits: what the switch has no
    room for, or a send while the switch is absent, is lost as on a wire (`tx_dropped`; the
    client retransmits). A receive takes every frame that has arrived in one call.
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
        )
        host = host or Endpoint(f"02:00:00:00:00:{switch_port & 0xFF:02x}", f"10.0.0.{switch_port}")
        switch = switch or Endpoint("02:00:00:00:00:fe", "10.0.0.254")
        self.prefix = FrameTemplate(host, switch).prefix()
        # in front of each payload on the stream: the record's length, the frame's headers
        self.head = np.frombuffer(_HEAD + self.prefix, np.uint8).copy()
        self._ends = _steps(READ_BYTES // _RECORD, _RECORD, _RECORD)  # where records end
        self._rx: npt.NDArray[np.uint8] = np.empty(READ_BYTES, np.uint8)
        self._at = np.empty(READ_BYTES // FRAME_BYTES + 1, np.int64)  # payloads received
        self.frames_sent = 0
        self.frames_received = 0
        self.connect()

    def send(self, payloads: npt.NDArray[np.void]) -> None:
        n = len(payloads)
        if n == 0:
            return
        records = np.empty((n, _RECORD), np.uint8)  # a new one: the queue may keep a view
        kernels.frame_records(_rows(payloads), self.head, records.reshape(-1))
        self.send_framed(records)

    def send_framed(self, frames: npt.NDArray[np.uint8]) -> None:
        """Records (`head` then a payload, one per row) onto the stream; whatever cannot go
        out now or be queued is dropped and counted (`tx_dropped`)."""
        n = len(frames)
        if n == 0:
            return
        ends = self._ends[:n] if n <= len(self._ends) else _steps(n, _RECORD, _RECORD)
        self.write(frames.reshape(-1).data, ends)  # the queue may keep a view: never changed
        self.frames_sent += n

    def recv(self, timeout: float) -> npt.NDArray[np.void]:
        buf, offsets = self.recv_offsets(timeout)
        return _copy_out(buf, offsets)

    def recv_offsets(self, timeout: float) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        """Wait at most `timeout`, read every frame that arrived; (the read buffer, where the
        INA payload of each frame long enough and IPv4/UDP starts in it)."""
        if not self.wait(timeout):
            return self._rx, _NONE
        offsets, lengths, _, _ = self.read(self._rx, 0, len(self._rx))
        count = kernels.payload_offsets(
            self._rx, offsets, lengths, FRAME_BYTES, INA_OFFSET, True, self._at
        )
        self.frames_received += count
        return self._rx, self._at[:count]


def _copy_out(buf: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.void]:
    """The INA records at buf[offsets[j]:], copied into one array."""
    out = np.empty((len(offsets), INA_BYTES), np.uint8)
    kernels.copy_rows(buf, offsets, out)
    return out.view(INA_DTYPE).reshape(-1)


def _rows(payloads: npt.NDArray[np.void]) -> npt.NDArray[np.uint8]:
    """INA payload records as the rows of a (n, INA_BYTES) byte array."""
    if payloads.dtype != INA_DTYPE:
        payloads = payloads.astype(INA_DTYPE)
    return np.ascontiguousarray(payloads).view(np.uint8).reshape(len(payloads), INA_BYTES)


def ina_payloads(
    buf: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
) -> npt.NDArray[np.void]:
    """The INA payloads of the IPv4/UDP frames `buf[offsets[i]:][:lengths[i]]` that are
    long enough (others are skipped), as one array of records. Frames at evenly spaced
    offsets (what one read of same-size frames gives) are viewed in place, others gathered.
    The transports copy them out with `kernels.gather_payloads`, which this is the reference
    of."""
    count = len(offsets)
    if count < FEW:  # one by one: cheaper than numpy's set-up
        view = buf.data
        parts = []
        for off, n in zip(offsets.tolist(), lengths.tolist(), strict=True):
            frame = view[off : off + FRAME_BYTES]
            if n >= FRAME_BYTES and frame[12:14] == _IPV4 and frame[23] == IP_PROTO_UDP:
                parts.append(frame[INA_OFFSET:])
        return np.frombuffer(b"".join(parts), dtype=INA_DTYPE)
    ok = lengths >= FRAME_BYTES
    if not ok.all():
        offsets = offsets[ok]
    count = len(offsets)
    if count == 0:
        return np.empty(0, dtype=INA_DTYPE)
    step = int(offsets[1] - offsets[0]) if count > 1 else FRAME_BYTES
    if step >= FRAME_BYTES and (count < 3 or bool((np.diff(offsets) == step).all())):
        rows = np.lib.stride_tricks.as_strided(
            buf[int(offsets[0]) :], shape=(count, FRAME_BYTES), strides=(step, 1), writeable=False
        )
    else:
        rows = buf[offsets[:, None] + np.arange(FRAME_BYTES)]
    keep = (rows[:, 12] == _IPV4[0]) & (rows[:, 13] == _IPV4[1]) & (rows[:, 23] == IP_PROTO_UDP)
    if not keep.all():
        rows = rows[keep]
    return np.ascontiguousarray(rows[:, INA_OFFSET:]).view(INA_DTYPE).reshape(-1)


class UdpTransport:
    """Kernel UDP: payloads to (switch_ip, port), results on (local_ip, local_port); both
    ports are the INA port (47500) unless said. A machine's ranks behind one interface each
    bind their own `local_port` (`common.wire.worker_udp_port`): the switch tells them apart
    by it and sends each its results there (docs/protocol.md, section 4).

    A send hands the whole batch to the kernel with `sendmmsg` (as many datagrams per call as
    it takes; a full socket buffer is waited out), a receive takes up to RECV_BATCH datagrams
    with one `recvmmsg` (`common.batch_io`)."""

    def __init__(
        self,
        local_ip: str,
        switch_ip: str,
        *,
        port: int = INA_UDP_PORT,
        local_port: int | None = None,
    ) -> None:
        self.peer = (switch_ip, port)
        self.local_port = port if local_port is None else local_port
        self.sock = _udp_socket((local_ip, self.local_port), "the INA UDP socket")
        self._mmsg = Mmsg(RECV_BATCH, UDP_SLOT, name=sockaddr_in(switch_ip, port))
        self._slots = _steps(RECV_BATCH, UDP_SLOT)  # where each receive slot starts
        self._at = np.empty(RECV_BATCH, np.int64)  # payloads received
        self._offsets = _steps(0, INA_BYTES)  # where each payload of a send starts
        self._lengths = np.zeros(0, np.int64)
        self.head = np.zeros(0, np.uint8)  # the kernel adds Ethernet/IPv4/UDP
        self.counts = IoCounts()
        self.frames_sent = 0
        self.frames_received = 0

    def send(self, payloads: npt.NDArray[np.void]) -> None:
        self.send_framed(_rows(payloads))

    def send_framed(self, frames: npt.NDArray[np.uint8]) -> None:
        """Datagrams, one per row (an INA payload: `head` is empty), in order."""
        n = len(frames)
        buf = np.ascontiguousarray(frames).reshape(-1)
        if len(self._offsets) < n:
            self._offsets = _steps(n, INA_BYTES)
            self._lengths = np.full(n, INA_BYTES, np.int64)
        offsets, lengths = self._offsets[:n], self._lengths[:n]
        fd, done = self.sock.fileno(), 0
        while done < n:
            sent, err, calls = self._mmsg.send(fd, buf, offsets[done:], lengths[done:])
            self.counts.tx_calls += calls
            self.counts.tx_frames += sent
            done += sent
            if err == errno.EAGAIN:  # the socket's buffer is full: wait for room
                select.select([], [self.sock], [], 0.01)
            elif err:  # e.g. ECONNREFUSED from an earlier datagram: this one is lost
                done += 1
        self.frames_sent += n

    def recv(self, timeout: float) -> npt.NDArray[np.void]:
        buf, offsets = self.recv_offsets(timeout)
        return _copy_out(buf, offsets)

    def recv_offsets(self, timeout: float) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        """Wait at most `timeout`, take up to RECV_BATCH datagrams; (the receive slots, where
        each datagram long enough to be an INA payload starts in them)."""
        buf = self._mmsg.buf
        if not _wait_readable(self.sock, timeout):
            return buf, _NONE
        try:
            n = self._mmsg.recv(self.sock.fileno())
        except ConnectionRefusedError:
            n = 0
        self.counts.rx_calls += 1
        self.counts.rx_frames += n
        lengths = self._mmsg.lengths[:n].astype(np.int64)
        count = kernels.payload_offsets(
            buf, self._slots[:n], lengths, INA_BYTES, 0, False, self._at
        )
        self.frames_received += count
        return buf, self._at[:count]

    def close(self) -> None:
        self.sock.close()
