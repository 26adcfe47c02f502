"""The softswitch's port layer: where frames enter and leave the pipeline.

- `LoopbackWire`: a port is one end of a loopback wire (`common.loopback`): an AF_UNIX
  socket bound to `WIRE_DIR/SWITCH.PORT` in a private directory, joined to its peer's end (a
  host's `LoopbackWireTransport`, or another switch's port) by one stream connection that
  carries whole Ethernet frames as length-prefixed records, many per system call. No root, no
  UDP ports. Only a connection from the peer's path, while no other from it is live, is taken;
  the frames of any other are read, dropped and counted in `rx_foreign`.
- `AfPacketPort`: a raw AF_PACKET socket on a named interface (Mininet veths; needs root).

A port reads into a `FrameBatch` (`recv_into`) and sends a batch's frames to it in order
(`send_batch`), each in as few system calls as it can; `counts` says how many frames and
calls. `fileno()` is what the switch waits on: it becomes readable when the port has
something to do (frames, a connecting peer, room for queued frames).
"""

from __future__ import annotations

import fcntl
import mmap
import select
import socket
import struct
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from inaemu.common.batch_io import IoCounts, Mmsg
from inaemu.common.loopback import (
    ENDED,
    FULL,
    READ_BYTES,
    RETRY_CONNECT,
    WireDir,
    WireEnd,
    WireError,
    WireFormatError,
    WireStream,
    encode_records,
    host_end,
    port_end,
)
from inaemu.common.wire import ETH_BYTES, FRAME_BYTES
from inaemu.softswitch.batch import FrameBatch

__all__ = ["AfPacketPort", "LoopbackWire", "Port", "WireDir", "WireError", "host_end", "port_end"]

IntArray = npt.NDArray[np.int64]

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_RX_RING = 5
PACKET_VERSION = 10
PACKET_IGNORE_OUTGOING = 23
TPACKET_V2 = 1
TP_STATUS_KERNEL, TP_STATUS_USER = 0, 1
TPACKET_MAC_OFFSET = 66  # where a frame starts in its V2 slot (header, sockaddr_ll, alignment)
SIOCGIFMTU = 0x8921
SIOCGIFFLAGS = 0x8913
IFF_UP = 0x1
INA_MTU = FRAME_BYTES - ETH_BYTES  # an INA frame's IPv4 packet: the least MTU a port needs
RING_BYTES = 4 << 20  # an AF_PACKET port's receive ring
RING_READ = 512  # slots one `recv_into` takes at most
SEND_BATCH = 256  # frames per sendmmsg call
FEW = 16  # fewer frames than this are read and sent one by one (numpy and ctypes cost more)
FOREIGN_MAX = 16  # foreign connections a port reads at once; more are closed unread
_IN = select.EPOLLIN
_OUT = select.EPOLLOUT
_READ_EVENTS = select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR


class Port(Protocol):
    name: str
    counts: IoCounts
    tx_dropped: int

    def fileno(self) -> int: ...
    def tick(self, now: float) -> float | None: ...
    def recv_into(self, batch: FrameBatch, port_no: int) -> int: ...
    def send_batch(self, batch: FrameBatch, index: IntArray) -> None: ...
    def close(self) -> None: ...


def append_frames(
    batch: FrameBatch, port_no: int, offsets: IntArray, lengths: IntArray | int
) -> None:
    """Frames already in `batch.buf` at `offsets` become frames of `batch` on `port_no`."""
    count = len(offsets)
    if not count:
        return
    batch.reserve(count, 0)
    n = batch.n
    batch.offset[n : n + count] = offsets
    batch.length[n : n + count] = lengths
    batch.port[n : n + count] = port_no
    batch.n = n + count


class LoopbackWire(WireEnd):
    """One switch port as one end of a loopback wire (`common.loopback`).

    A passive port (its peer's name sorts after its own: a host end, or the other switch's
    port of a link) listens and takes its peer's connection whenever it comes, a restarted
    peer's at once; an active one connects to its peer and tries again every
    `RETRY_CONNECT` seconds while it has no connection (`tick`). Its `fileno` is an epoll
    set of everything it waits on.
    """

    def __init__(self, wire_dir: WireDir, end: str, peer: str, name: str = "") -> None:
        super().__init__(
            wire_dir,
            end,
            peer,
            hint="another softswitch with this name in this wire dir? "
            "pick another --wire-dir or --name",
        )
        self.name = name or end
        self._poll = select.epoll()
        self._foreign: dict[int, WireStream] = {}
        self._foreign_counts = IoCounts()  # foreign connections' reads (not the port's)
        self._scratch: npt.NDArray[np.uint8] = np.empty(READ_BYTES, np.uint8)
        self._retry_at = 0.0
        self._watching_out = False
        if self.active:
            self._connect()
        else:
            self._poll.register(self.sock.fileno(), _IN)

    def fileno(self) -> int:
        return self._poll.fileno()

    def tick(self, now: float) -> float | None:
        """An active port with no connection tries again when due; seconds until it wants
        to be ticked again (None: never)."""
        if not self.active or self.stream is not None:
            return None
        if now >= self._retry_at:
            if self._connect():
                return None
            self._retry_at = now + RETRY_CONNECT
        return self._retry_at - now

    def _connect(self) -> bool:
        if not self.connect():
            return False
        assert self.stream is not None
        self._poll.register(self.stream.fileno(), _IN)
        self._watching_out = False
        return True

    def recv_into(self, batch: FrameBatch, port_no: int) -> int:
        """What the port has to do now: frames from the peer into `batch` (one read, ingress
        `port_no`), queued frames out as the peer takes them, a connecting peer taken, foreign
        connections' frames read and counted. How many frames went into `batch`."""
        ready = dict(self._poll.poll(0))
        added = 0
        state = ENDED
        stream = self.stream
        if stream is not None:
            events = ready.get(stream.fileno(), 0)
            if events & _OUT:
                self._flush(stream)
            if events & _READ_EVENTS and self.stream is stream:
                count, state = self._read_into(batch, port_no)
                added += count
        for fd in ready:
            if fd in self._foreign:
                self._read_foreign(fd)
        if not self.active and self.sock.fileno() in ready and state != FULL:
            added += self._accept(batch, port_no)
        return added

    def _read_into(self, batch: FrameBatch, port_no: int) -> tuple[int, int]:
        start = batch.used_bytes
        batch.reserve(0, READ_BYTES)
        offsets, lengths, _, state = self.read(batch.buf, start, READ_BYTES)
        append_frames(batch, port_no, offsets, lengths)
        return len(offsets), state

    def _accept(self, batch: FrameBatch, port_no: int) -> int:
        added = 0
        while True:
            try:
                conn, addr = self.sock.accept()
            except OSError:  # none waiting (EAGAIN), or out of descriptors
                return added
            if addr == self.peer and self.stream is not None:
                # The peer again: if it restarted, its old connection ended before it
                # connected anew, so reading the old one to its end tells.
                state = FULL
                while state == FULL and self.stream is not None:
                    count, state = self._read_into(batch, port_no)
                    added += count
            if addr == self.peer and self.stream is None:
                self.stream = WireStream(conn, self.counts)
                self._poll.register(conn.fileno(), _IN)
                self._watching_out = False
                added += self._read_into(batch, port_no)[0]  # what it sent so far
            elif len(self._foreign) < FOREIGN_MAX:
                stream = WireStream(conn, self._foreign_counts)
                self._foreign[conn.fileno()] = stream
                self._poll.register(conn.fileno(), _IN)
            else:
                conn.close()
                self.rx_foreign += 1

    def _read_foreign(self, fd: int) -> None:
        stream = self._foreign[fd]
        try:
            offsets, _, _, state = stream.read(self._scratch, 0, len(self._scratch))
            self.rx_foreign += len(offsets)
        except WireFormatError:
            self.rx_foreign += 1
            state = ENDED
        if state == ENDED:
            del self._foreign[fd]
            stream.close()

    def send_batch(self, batch: FrameBatch, index: IntArray) -> None:
        """Frames `index` of `batch` to the peer, in order: as many as the connection takes
        now, the rest queued; what finds no room, or no connection, is dropped and counted."""
        stream = self.stream
        if stream is None:
            self.tx_dropped += len(index)
            return
        data, ends = encode_records(batch.buf, batch.offset[index], batch.length[index])
        try:
            self.tx_dropped += stream.write(data, ends)
        except OSError:  # the peer went away
            self.lose_stream()
            return
        self._watch_out(stream)

    def _flush(self, stream: WireStream) -> None:
        try:
            stream.flush()
        except OSError:
            self.lose_stream()
            return
        self._watch_out(stream)

    def _watch_out(self, stream: WireStream) -> None:
        """Wake up for room at the peer while frames are queued (and only then)."""
        want = bool(stream.out)
        if want != self._watching_out:
            self._poll.modify(stream.fileno(), _IN | _OUT if want else _IN)
            self._watching_out = want

    def send(self, frame: bytes) -> None:
        """One frame (tests, tools)."""
        self.send_batch(FrameBatch.of([(0, frame)]), np.zeros(1, np.int64))

    def recv_batch(self) -> list[bytes]:
        """The frames one `recv_into` takes now (tests, tools)."""
        batch = FrameBatch()
        self.recv_into(batch, 0)
        return [frame for _, frame in batch]

    def close(self) -> None:
        for stream in self._foreign.values():
            stream.close()
        self._foreign.clear()
        super().close()
        self._poll.close()


class AfPacketPort:
    """One switch port bound to a network interface with a raw AF_PACKET socket (root).

    Receive: a TPACKET_V2 ring (`PACKET_RX_RING`, memory-mapped): the kernel writes each frame
    into the next slot and marks it ready; `recv_into` copies every ready slot into the batch
    with numpy (frames of one length in one copy) and hands the slots back, no system call at
    all. TPACKET_V3 would hand frames over a block at a time, and a block only when it is full
    or its timer (at least a jiffy, milliseconds) expires: latency that the hosts' windows turn
    straight into lost throughput, so V2's per-frame slots it is. The thread reads the slots'
    status words and writes them back with plain loads and stores, which x86's memory order
    makes safe (the kernel publishes a slot after its frame, with a barrier).

    Send: `sendmmsg` (ctypes, `common.batch_io`): a batch's frames for this port in one call
    from the batch's own buffer; a frame the interface refuses (a full queue, longer than
    its MTU) is dropped and counted in `tx_dropped`, and the rest go on. The socket ignores its
    own transmissions (`PACKET_IGNORE_OUTGOING`), which ETH_P_ALL would otherwise read back.
    """

    def __init__(self, ifname: str, *, ring_bytes: int = RING_BYTES) -> None:
        self.name = ifname
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # nothing until bound
        try:
            mtu = check_interface(self.sock, ifname)
            frame_size = max(2048, 1 << (TPACKET_MAC_OFFSET + 18 + mtu - 1).bit_length())
            block_size = max(frame_size, 1 << 16)
            blocks = max(ring_bytes // block_size, 1)
            self._slots = blocks * (block_size // frame_size)
            sol = SOL_PACKET
            self.sock.setsockopt(sol, PACKET_VERSION, TPACKET_V2)
            self.sock.setsockopt(sol, PACKET_IGNORE_OUTGOING, 1)
            self.sock.setsockopt(
                sol,
                PACKET_RX_RING,
                struct.pack("IIII", block_size, blocks, frame_size, self._slots),
            )
            self._ring = mmap.mmap(
                self.sock.fileno(),
                block_size * blocks,
                mmap.MAP_SHARED,
                mmap.PROT_READ | mmap.PROT_WRITE,
            )
            self.sock.bind((ifname, ETH_P_ALL))
        except InterfaceError:
            self.sock.close()
            raise
        except OSError as exc:
            self.sock.close()
            raise OSError(
                exc.errno, f"cannot bind AF_PACKET to {ifname!r}: {exc.strerror}"
            ) from None
        self.sock.setblocking(False)
        ring = np.frombuffer(self._ring, np.uint8)
        self._frames = ring.reshape(self._slots, frame_size)

        def field(offset: int, dtype: type[np.generic]) -> npt.NDArray[Any]:
            view: npt.NDArray[Any] = np.ndarray(
                (self._slots,), dtype, buffer=self._ring, offset=offset, strides=(frame_size,)
            )
            return view

        self._status = field(0, np.uint32)
        self._snaplen = field(8, np.uint32)
        self._mac = field(12, np.uint16)
        self._frame_size = frame_size
        self._bytes = memoryview(self._ring)
        self._words = self._bytes.cast("I")  # a slot's header as 32-bit words (native order)
        self._step = frame_size // 4
        self._head = 0  # the next slot the kernel fills after the ones read
        self._probe = np.arange(RING_READ, dtype=np.int64)
        self._mmsg = Mmsg(SEND_BATCH, 1)  # send headers only (frames come from the batch)
        self.tx_dropped = 0  # frames the interface refused
        self.counts = IoCounts()

    def fileno(self) -> int:
        return self.sock.fileno()

    def tick(self, now: float) -> float | None:
        return None

    def recv_into(self, batch: FrameBatch, port_no: int) -> int:
        """The ready slots (at most RING_READ) into `batch`, in order; the slots go back to
        the kernel. How many frames. A few are copied one by one (cheaper than numpy's set-up),
        more with numpy, frames of one length in one copy."""
        words, step, slots, head = self._words, self._step, self._slots, self._head
        count = 0
        while count < FEW and words[(head + count) % slots * step] & TP_STATUS_USER:
            count += 1
        if count == FEW:
            return self._recv_many(batch, port_no)
        if not count:
            return 0
        rows = [(head + i) % slots for i in range(count)]
        lengths = [words[row * step + 2] for row in rows]  # tp_snaplen
        macs = [words[row * step + 3] & 0xFFFF for row in rows]  # tp_mac
        start = batch.used_bytes
        batch.reserve(count, sum(lengths))
        buf, ring, frame_size = batch.buf.data, self._bytes, self._frame_size
        n = batch.n
        pos = start
        for i, row in enumerate(rows):
            size, at = lengths[i], row * frame_size + macs[i]
            buf[pos : pos + size] = ring[at : at + size]
            batch.offset[n + i] = pos
            batch.length[n + i] = size
            pos += size
            words[row * step] = TP_STATUS_KERNEL
        batch.port[n : n + count] = port_no
        batch.n = n + count
        self._head = (head + count) % slots
        self.counts.rx_frames += count
        return count

    def _recv_many(self, batch: FrameBatch, port_no: int) -> int:
        index = (self._head + self._probe) % self._slots
        ready = (self._status[index] & TP_STATUS_USER) != 0
        count = len(index) if bool(ready.all()) else int(ready.argmin())
        index = index[:count]
        lengths = self._snaplen[index].astype(np.int64)
        macs = self._mac[index].astype(np.int64)
        start = batch.used_bytes
        batch.reserve(count, int(lengths.sum()))
        size, mac = int(lengths[0]), int(macs[0])
        if bool((lengths == size).all()) and bool((macs == mac).all()):
            dest = batch.buf[start : start + count * size].reshape(count, size)
            dest[:] = self._frames[index, mac : mac + size]  # (np.take would copy the ring)
            offsets = start + size * np.arange(count, dtype=np.int64)
        else:
            ends = start + np.cumsum(lengths)
            offsets = ends - lengths
            for row, off, n, m in zip(
                index.tolist(), offsets.tolist(), lengths.tolist(), macs.tolist(), strict=True
            ):
                batch.buf[off : off + n] = self._frames[row, m : m + n]
        append_frames(batch, port_no, offsets, lengths)
        self._status[index] = TP_STATUS_KERNEL
        self._head = int(index[-1] + 1) % self._slots
        self.counts.rx_frames += count
        return count

    def send_batch(self, batch: FrameBatch, index: IntArray) -> None:
        """Frames `index` of `batch` out of the interface, in order, in as few calls as the
        kernel allows (a few with one `send` each, more with `sendmmsg`); each frame it
        refuses is dropped and counted."""
        total = len(index)
        if total < FEW:
            buf, send = batch.buf.data, self.sock.send
            for i in index.tolist():
                off = int(batch.offset[i])
                try:
                    send(buf[off : off + int(batch.length[i])])
                    self.counts.tx_frames += 1
                except OSError:  # a full queue (EAGAIN), too long, the interface gone
                    self.tx_dropped += 1
            self.counts.tx_calls += total
            return
        offsets = batch.offset[index].astype(np.int64)
        lengths = batch.length[index].astype(np.int64)
        fd, done = self.sock.fileno(), 0
        while done < total:
            sent, err, calls = self._mmsg.send(fd, batch.buf, offsets[done:], lengths[done:])
            self.counts.tx_frames += sent
            self.counts.tx_calls += calls
            done += sent
            if err:  # refused: lost, the next one goes on
                self.tx_dropped += 1
                done += 1

    def close(self) -> None:
        self.sock.close()
        del self._frames, self._status, self._snaplen, self._mac
        self._words.release()
        self._bytes.release()
        try:
            self._ring.close()
        except BufferError:  # a view is still alive somewhere: unmapped when it goes
            pass


class InterfaceError(ValueError):
    """A network interface a port cannot use, and what to do about it (one line)."""


def check_interface(sock: socket.socket, ifname: str) -> int:
    """The MTU of `ifname`, which a switch port can use: it exists (in this process's network
    namespace), is up, and its MTU carries an INA frame; `InterfaceError` saying which is
    not so and how to fix it otherwise."""
    req = struct.pack("16sH22x", ifname.encode()[:15], 0)
    try:
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, req))[1]
    except OSError:
        raise InterfaceError(
            f"interface {ifname!r} does not exist here (`ip link show` lists this namespace's)"
        ) from None
    if not flags & IFF_UP:
        raise InterfaceError(f"interface {ifname!r} is down: `ip link set {ifname} up` first")
    mtu = _interface_mtu(sock, ifname)
    if mtu < INA_MTU:
        raise InterfaceError(
            f"interface {ifname!r} has MTU {mtu}, less than the {INA_MTU} bytes an INA frame "
            f"needs: `ip link set {ifname} mtu 1500`"
        )
    return mtu


def _interface_mtu(sock: socket.socket, ifname: str) -> int:
    """The interface's MTU (SIOCGIFMTU); OSError if there is no such interface."""
    req = struct.pack("16si", ifname.encode()[:15], 0)
    return int(struct.unpack("16si", fcntl.ioctl(sock.fileno(), SIOCGIFMTU, req))[1])
