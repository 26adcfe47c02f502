"""A peer channel whose messages travel as IPv4/UDP frames through the embedded softswitch
network: host IP to host IP, routed by the switches' /32 routes (`inaemu routes`).

    link = HostWire(port, wire_dir, switch_name="l1")        # this host's loopback wire
    ch = WirePeerChannel(rank, peers, link, run=run)          # peers: (mac, ip) of each rank
    ch.send(3, data); got = ch.recv(1, timeout=10.0); ch.close()

Each (sender, receiver) pair is one reliable stream of segments: a message is cut into
segments that fit the MTU (`segment`), numbered 0, 1, 2, ... per stream; the receiver
reassembles them in order (`RecvStream`) and acknowledges cumulatively with a selective-ack
bitmap of the next `SACK_BITS` segments. The sender (`SendStream`) keeps at most `cwnd`
segments in flight, not counting those selectively acked (RFC 6675's pipe; AIMD: slow start,
+1 per round trip, halved on a loss, 1 after a timeout), and none `window` or more past the
oldest unacknowledged one; it resends a segment once three later ones are acked (fewer when
fewer are out: early retransmit, RFC 5827) and the oldest one when its RFC 6298 timer expires
(Karn's rule, doubled on each timeout, at most `RTO_MAX`). The softswitch drops a frame when
a wire's queue stays full (`tx_dropped`), and injected loss (`inaemu loss`) drops any frame:
both are recovered.

Frames: Ethernet / IPv4 (no options) / UDP (dport `COLLECTIVE_UDP_PORT`, checksum 0) / a
header (`DATA_HEADER` or `ACK_HEADER`) / payload; the payload's CRC-32 is checked on arrival.
The header carries the run id, so that frames of an earlier run on the same wire are ignored,
and the sender's and receiver's ranks. INA frames (UDP port 47500) and anything else are not
the channel's: they are counted in `foreign_frames` and dropped, so an INA client and a
channel cannot share a wire at the same time; the comparison runs them one after the other.

One I/O thread per channel reads the wire, acknowledges, and resends on timers; `send`
queues a message and returns (it is delivered in the background, `flush` waits for it),
`recv` waits at most its timeout. A peer that acknowledges nothing for `give_up` seconds,
or sends nothing for a `recv`'s timeout, is reported by rank and address (`PeerError`).
"""

from __future__ import annotations

import os
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from inaemu.common.loopback import (
    READ_BYTES,
    WireDir,
    WireEnd,
    encode_frames,
    host_end,
    port_end,
)
from inaemu.common.wire import (
    ETH_BYTES,
    ETHERTYPE_IPV4,
    IP_PROTO_UDP,
    IPV4_BYTES,
    UDP_BYTES,
    Endpoint,
    ipv4_checksum,
)
from inaemu.hostlib.collective.peers import Message, PeerError
from inaemu.topology.addresses import ip_int, mac_bytes

COLLECTIVE_UDP_PORT = 47501  # next to INA's 47500: plain IPv4 to the switches, routed by /32
MAGIC = 0xC7
KIND_DATA = 1
KIND_ACK = 2
# magic, kind, run, src rank, dst rank | seq, message id, message length, offset, crc32
DATA_HEADER = struct.Struct("!BBHHHIIIII")
# magic, kind, run, src rank, dst rank | cumulative ack (next seq wanted), sack bitmap
ACK_HEADER = struct.Struct("!BBHHHIQ")
SACK_BITS = 64  # bit i of the bitmap: segment cum + 1 + i has arrived
MAX_WINDOW = SACK_BITS  # the sender never has more in flight than the bitmap can describe
HEADERS = ETH_BYTES + IPV4_BYTES + UDP_BYTES  # 42
DEFAULT_MTU = 1500  # IPv4 packet bytes; the softswitch takes frames up to 9216 bytes
MIN_MTU, MAX_MTU = 128, 9000
DUPTHRESH = 3  # later segments acked before a hole counts as lost
RTO_INITIAL, RTO_MIN, RTO_MAX = 0.1, 0.02, 0.25  # seconds (loopback RTTs are milliseconds)
LINGER_QUIET, LINGER_MAX = 0.3, 3.0  # close(): answer late retransmissions until quiet

_IPV4 = ETHERTYPE_IPV4.to_bytes(2, "big")
_UDP_LEN = struct.Struct("!HHHH")


def max_payload(mtu: int) -> int:
    """Message bytes per segment for an IPv4 packet of `mtu` bytes."""
    return mtu - IPV4_BYTES - UDP_BYTES - DATA_HEADER.size


def segment(data: bytes | memoryview, max_bytes: int) -> list[tuple[int, memoryview]]:
    """(offset, piece) of each segment of a message; an empty message is one empty segment."""
    if max_bytes < 1:
        raise ValueError(f"segments of {max_bytes} bytes: need at least 1")
    view = memoryview(data).cast("B")
    if len(view) == 0:
        return [(0, view)]
    return [(off, view[off : off + max_bytes]) for off in range(0, len(view), max_bytes)]


@dataclass(frozen=True)
class DataSegment:
    seq: int
    msg: int  # message number in its stream
    length: int  # the whole message's bytes
    offset: int
    payload: bytes


class Reassembler:
    """Whole messages from one stream's segments, taken in sequence order."""

    def __init__(self) -> None:
        self.msg = 0  # the message being assembled
        self.parts: list[bytes] = []
        self.have = 0

    def add(self, s: DataSegment) -> bytes | None:
        """The message `s` completes, if any; PeerError if `s` does not continue it."""
        if s.msg != self.msg or s.offset != self.have or s.offset + len(s.payload) > s.length:
            raise PeerError(
                f"segment {s.seq} (message {s.msg}, bytes {s.offset}+{len(s.payload)} of "
                f"{s.length}) does not continue message {self.msg} at byte {self.have}"
            )
        self.parts.append(s.payload)
        self.have += len(s.payload)
        if self.have < s.length:
            return None
        out = b"".join(self.parts)
        self.msg, self.parts, self.have = self.msg + 1, [], 0
        return out


class RecvStream:
    """One sender's segments at the receiver: in-order delivery, cumulative + selective ack."""

    def __init__(self) -> None:
        self.cum = 0  # next segment wanted
        self.early: dict[int, DataSegment] = {}  # arrived ahead of cum
        self.assembler = Reassembler()
        self.duplicates = 0

    def add(self, s: DataSegment) -> list[bytes]:
        """Take a segment; the messages it completes, in order."""
        if s.seq < self.cum or s.seq in self.early:
            self.duplicates += 1
            return []
        if s.seq > self.cum + SACK_BITS:
            return []  # beyond any window the sender may have: a stale frame
        self.early[s.seq] = s
        done: list[bytes] = []
        while self.cum in self.early:
            msg = self.assembler.add(self.early.pop(self.cum))
            self.cum += 1
            if msg is not None:
                done.append(msg)
        return done

    def ack(self) -> tuple[int, int]:
        """(cumulative ack, selective-ack bitmap)."""
        bits = 0
        for seq in self.early:
            bits |= 1 << (seq - self.cum - 1)
        return self.cum, bits


@dataclass
class _Sent:
    frame: bytes
    sent_at: float = 0.0
    retransmitted: bool = False
    sacked: bool = False


@dataclass
class SendStream:
    """One receiver's segments at the sender: window, timers, congestion window."""

    window: int
    una: int = 0  # oldest unacknowledged segment
    nxt: int = 0  # next segment never sent
    segs: dict[int, _Sent] = field(default_factory=dict)  # una .. end of the queue
    cwnd: float = 4.0
    ssthresh: float = float(MAX_WINDOW)
    srtt: float | None = None
    rttvar: float = 0.0
    rto: float = RTO_INITIAL
    backoff: int = 0
    recover: int = 0  # no second halving for losses below this segment
    sacked: int = 0  # segments in una .. nxt the receiver has selectively acked
    progress_at: float = 0.0  # last time the peer acknowledged something new
    retransmissions: int = 0
    timeouts: int = 0

    @property
    def end(self) -> int:
        return self.una + len(self.segs)

    @property
    def idle(self) -> bool:
        return not self.segs

    def push(self, frame: bytes) -> None:
        self.segs[self.end] = _Sent(frame)

    def sendable(self, now: float) -> Iterator[bytes]:
        """New segments the windows let out now (marked sent): at most `cwnd` in flight, not
        counting those selectively acked (RFC 6675's pipe), and none `window` or more past
        the oldest unacknowledged one (what the receiver's ack bitmap can describe)."""
        limit = min(self.una + self.window, self.end)
        cwnd = max(1, int(self.cwnd))
        while self.nxt < limit and self.nxt - self.una - self.sacked < cwnd:
            if self.una == self.nxt:
                self.progress_at = now  # the timer of a stream that was idle starts here
            seg = self.segs[self.nxt]
            seg.sent_at = now
            self.nxt += 1
            yield seg.frame

    def on_ack(self, cum: int, sack: int, now: float) -> list[bytes]:
        """Take an ack; the segments to resend at once (fast retransmit)."""
        if cum > self.nxt:
            return []  # acks segments never sent: not for this stream (stale run)
        newest: _Sent | None = None  # the latest segment this ack is first to cover
        if cum > self.una:
            for seq in range(self.una, cum):
                acked = self.segs.pop(seq)
                if acked.sacked:
                    self.sacked -= 1
                else:
                    newest = acked
                if self.cwnd < self.ssthresh:
                    self.cwnd += 1.0
                else:
                    self.cwnd += 1.0 / self.cwnd
            self.una = cum
            self.backoff = 0
            self.progress_at = now
        if sack:
            for i in range(SACK_BITS):
                sacked = self.segs.get(cum + 1 + i) if sack >> i & 1 else None
                if sacked is not None and not sacked.sacked:
                    sacked.sacked = True
                    self.sacked += 1
                    newest = sacked
                    self.progress_at = now
        if newest is not None and not newest.retransmitted:
            self._sample(now - newest.sent_at)  # Karn: never from a resent segment
        resend: list[bytes] = []
        # early retransmit (RFC 5827): with few segments out, fewer later ones must arrive
        dupthresh = min(DUPTHRESH, max(1, self.nxt - self.una - 1))
        later = 0
        for seq in range(self.nxt - 1, self.una - 1, -1):
            seg = self.segs[seq]
            if seg.sacked:
                later += 1
            elif later >= dupthresh and (not seg.retransmitted or now - seg.sent_at > self.rto):
                # lost: three later segments got through (a resent one: when its timer ran out)
                if seq >= self.recover:
                    self.ssthresh = max(self.cwnd / 2, 2.0)
                    self.cwnd = self.ssthresh
                    self.recover = self.nxt
                seg.sent_at, seg.retransmitted = now, True
                self.retransmissions += 1
                resend.append(seg.frame)
        return resend

    def on_timer(self, now: float) -> bytes | None:
        """The oldest unacknowledged segment, if its timer expired (resend it)."""
        if self.una == self.nxt:
            return None
        seg = self.segs[self.una]
        if now - seg.sent_at < self._timeout():
            return None
        self.ssthresh = max(self.cwnd / 2, 2.0)
        self.cwnd = 1.0
        self.recover = self.nxt
        self.backoff = min(self.backoff + 1, 6)
        self.timeouts += 1
        self.retransmissions += 1
        seg.sent_at, seg.retransmitted = now, True
        return seg.frame

    def next_timer(self) -> float | None:
        if self.una == self.nxt:
            return None
        return self.segs[self.una].sent_at + self._timeout()

    def _timeout(self) -> float:
        return min(self.rto * (1 << self.backoff), RTO_MAX)

    def _sample(self, rtt: float) -> None:
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.rto = min(max(self.srtt + 4 * self.rttvar, RTO_MIN), RTO_MAX)


class FrameLink(Protocol):
    """Where a channel's Ethernet frames go and come from (a host's wire, or a test double)."""

    def send_frames(self, frames: list[bytes]) -> int: ...  # how many went; the rest dropped
    def recv(self, timeout: float) -> list[bytes]: ...  # [] after `timeout` seconds
    def close(self) -> None: ...


class HostWire(WireEnd):
    """Raw frames on the host end of the loopback wire on `port` of softswitch `switch`
    (`common.loopback`): one stream connection to the switch port, which only it can use;
    a batch of frames goes out in one call and one read takes every frame that has arrived.
    The channel's caller and its I/O thread both send: a lock guards the connection."""

    def __init__(
        self, port: int, wire_dir: WireDir | str | os.PathLike[str], *, switch: str = "s1"
    ) -> None:
        wires = wire_dir if isinstance(wire_dir, WireDir) else WireDir(wire_dir, create=False)
        super().__init__(
            wires,
            host_end(switch, port),
            port_end(switch, port),
            hint=f"is another worker on port {port} of {switch}?",
        )
        self._lock = threading.Lock()
        self._rx: npt.NDArray[np.uint8] = np.empty(READ_BYTES, np.uint8)
        self.connect()

    def send_frames(self, frames: list[bytes]) -> int:
        if not frames:
            return 0
        data, ends = encode_frames(frames)
        with self._lock:
            before = self.tx_dropped
            self.write(data, ends)
            return max(len(frames) - (self.tx_dropped - before), 0)

    def recv(self, timeout: float) -> list[bytes]:
        if not self.wait(timeout, self._lock):
            return []
        with self._lock:
            offsets, lengths, _, _ = self.read(self._rx, 0, len(self._rx))
        view = self._rx.data
        return [
            bytes(view[off : off + n])
            for off, n in zip(offsets.tolist(), lengths.tolist(), strict=True)
        ]

    def close(self) -> None:
        with self._lock:
            super().close()


@dataclass
class ChannelStats:
    messages_sent: int = 0
    messages_received: int = 0
    frames_sent: int = 0  # every frame: data, retransmissions, acks
    frames_received: int = 0
    wire_bytes_sent: int = 0  # Ethernet frame bytes of frames_sent
    wire_bytes_received: int = 0
    retransmissions: int = 0
    timeouts: int = 0
    duplicates: int = 0  # data segments that arrived twice
    dropped_at_send: int = 0  # frames the wire refused (switch queue full or absent)
    foreign_frames: int = 0  # frames that were not this channel's (INA, other runs, bad crc)


class WirePeerChannel:
    """Reliable messages between `len(peers)` ranks over IPv4/UDP frames (the module doc).

    `peers[r]` is rank r's (mac, ip); this channel is rank `rank` and sends on `link`.
    """

    def __init__(
        self,
        rank: int,
        peers: Sequence[Endpoint],
        link: FrameLink,
        *,
        run: int = 0,
        mtu: int = DEFAULT_MTU,
        window: int = MAX_WINDOW,
        give_up: float = 10.0,
    ) -> None:
        if not 0 <= rank < len(peers):
            raise ValueError(f"rank {rank} out of 0..{len(peers) - 1}")
        if not MIN_MTU <= mtu <= MAX_MTU:
            raise ValueError(f"mtu {mtu} out of {MIN_MTU}..{MAX_MTU}")
        if not 1 <= window <= MAX_WINDOW:
            raise ValueError(f"window {window} out of 1..{MAX_WINDOW}")
        if not 0 <= run <= 0xFFFF:
            raise ValueError(f"run {run} out of 0..65535")
        self.rank = rank
        self.n_ranks = len(peers)
        self.peers = list(peers)
        self.link = link
        self.run = run
        self.seg_bytes = max_payload(mtu)
        self.give_up = give_up
        self.stats = ChannelStats()
        self._sent_bytes = [0] * len(peers)  # message bytes per peer (send / recv)
        self._received_bytes = [0] * len(peers)
        self._ips = [ip_int(p.ip) for p in peers]
        self._macs = [mac_bytes(p.mac) for p in peers]
        self._me = self._ips[rank]
        self._out = [SendStream(window) for _ in peers]
        self._in = [RecvStream() for _ in peers]
        self._msg_ids = [0] * len(peers)
        self._inbox: list[deque[bytes]] = [deque() for _ in peers]
        self._emitted: list[bytes] = []  # frames to send, in order, at the end of a step
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._error: PeerError | None = None
        self._last_rx = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._io, name=f"wire-peers-{rank}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the API

    def who(self, rank: int) -> str:
        return f"rank {rank} ({self.peers[rank].ip})"

    def bytes_sent(self) -> list[int]:
        return list(self._sent_bytes)

    def bytes_received(self) -> list[int]:
        return list(self._received_bytes)

    def send(self, dst: int, data: Message) -> None:
        """Queue `data` for rank `dst`; it is delivered in the background (see `flush`)."""
        self._check_rank(dst)
        view = memoryview(data).cast("B")
        with self._lock:
            self._raise_error()
            msg = self._msg_ids[dst]
            self._msg_ids[dst] += 1
            out = self._out[dst]
            for off, piece in segment(view, self.seg_bytes):
                out.push(self._data_frame(dst, out.end, msg, len(view), off, piece))
            self.stats.messages_sent += 1
            self._sent_bytes[dst] += len(view)
            self._pump(out, dst, time.monotonic())
            self._send_emitted()

    def recv(self, src: int, timeout: float) -> bytes:
        """The next message from rank `src`; PeerError after `timeout` seconds without it."""
        self._check_rank(src)
        deadline = time.monotonic() + timeout
        with self._arrived:
            while not self._inbox[src]:
                self._raise_error()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PeerError(
                        f"rank {self.rank}: no message from {self.who(src)} within "
                        f"{timeout:g} s: has it stopped, or is there no route to it?",
                        rank=src,
                        address=self.peers[src].ip,
                    )
                self._arrived.wait(min(left, 0.5))
            msg = self._inbox[src].popleft()
            self.stats.messages_received += 1
            self._received_bytes[src] += len(msg)
            return msg

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every peer has acknowledged everything sent to it."""
        deadline = time.monotonic() + (self.give_up if timeout is None else timeout)
        with self._arrived:
            while not all(s.idle for s in self._out):
                self._raise_error()
                if time.monotonic() > deadline:
                    late = [r for r, s in enumerate(self._out) if not s.idle]
                    raise PeerError(
                        f"rank {self.rank}: {', '.join(map(self.who, late))} did not "
                        "acknowledge everything sent to it in time",
                        rank=late[0],
                        address=self.peers[late[0]].ip,
                    )
                self._arrived.wait(0.05)

    def close(self) -> None:
        """Deliver what is queued (PeerError if a peer vanished), then keep acknowledging
        late retransmissions until the wire is quiet, and release the wire."""
        if self._stop.is_set():
            return
        try:
            self.flush()
            end = time.monotonic() + LINGER_MAX
            while time.monotonic() < end:
                with self._lock:
                    quiet = time.monotonic() - self._last_rx
                if quiet >= LINGER_QUIET:
                    break
                time.sleep(0.05)
        finally:
            self._stop.set()
            self._thread.join(5.0)
            with self._lock:
                for s in self._out:
                    self.stats.retransmissions += s.retransmissions
                    self.stats.timeouts += s.timeouts
                self.stats.duplicates = sum(s.duplicates for s in self._in)
            self.link.close()

    def __enter__(self) -> WirePeerChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _check_rank(self, r: int) -> None:
        if not (0 <= r < self.n_ranks and r != self.rank):
            raise PeerError(f"rank {self.rank}: no peer rank {r} (ranks 0..{self.n_ranks - 1})")

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _ip_udp(self, dst: int, udp_payload: int) -> bytes:
        total = IPV4_BYTES + UDP_BYTES + udp_payload
        ip = struct.pack(
            "!BBHHHBBHII", 0x45, 0, total, 0, 0, 64, IP_PROTO_UDP, 0, self._me, self._ips[dst]
        )
        ip = ip[:10] + ipv4_checksum(ip).to_bytes(2, "big") + ip[12:]
        udp = _UDP_LEN.pack(COLLECTIVE_UDP_PORT, COLLECTIVE_UDP_PORT, UDP_BYTES + udp_payload, 0)
        return self._macs[dst] + self._macs[self.rank] + _IPV4 + ip + udp

    def _data_frame(
        self, dst: int, seq: int, msg: int, length: int, off: int, piece: memoryview
    ) -> bytes:
        head = DATA_HEADER.pack(
            MAGIC, KIND_DATA, self.run, self.rank, dst, seq, msg, length, off, zlib.crc32(piece)
        )
        return self._ip_udp(dst, DATA_HEADER.size + len(piece)) + head + piece

    def _ack_frame(self, dst: int) -> bytes:
        cum, sack = self._in[dst].ack()
        head = ACK_HEADER.pack(MAGIC, KIND_ACK, self.run, self.rank, dst, cum, sack)
        return self._ip_udp(dst, ACK_HEADER.size) + head

    def _emit(self, frame: bytes) -> None:
        """Queue a frame for the next `_send_emitted` (under the lock)."""
        self._emitted.append(frame)

    def _send_emitted(self) -> None:
        """Every frame emitted since the last call, to the link in one batch (under the lock)."""
        frames, self._emitted = self._emitted, []
        if not frames:
            return
        sent = self.link.send_frames(frames)
        self.stats.frames_sent += sent
        self.stats.wire_bytes_sent += sum(len(f) for f in frames[:sent])
        self.stats.dropped_at_send += len(frames) - sent

    def _pump(self, out: SendStream, dst: int, now: float) -> None:
        for frame in out.sendable(now):
            self._emit(frame)

    def _io(self) -> None:
        try:
            while not self._stop.is_set():
                with self._lock:
                    timers = [t for s in self._out if (t := s.next_timer()) is not None]
                wait = min([0.05, *(t - time.monotonic() for t in timers)])
                frames = self.link.recv(max(wait, 0.0))
                with self._arrived:
                    now = time.monotonic()
                    try:
                        if frames:
                            self._last_rx = now
                            self._take(frames, now)
                        self._timers(now)
                    finally:
                        self._send_emitted()
        except PeerError as exc:
            self._fail(exc)
        except Exception as exc:  # the wire itself failed: reported by the next call
            self._fail(PeerError(f"rank {self.rank}: wire failed: {type(exc).__name__}: {exc}"))

    def _fail(self, exc: PeerError) -> None:
        with self._arrived:
            self._error = exc
            self._arrived.notify_all()

    def _take(self, frames: list[bytes], now: float) -> None:
        acked: set[int] = set()
        delivered = False
        for frame in frames:
            self.stats.frames_received += 1
            self.stats.wire_bytes_received += len(frame)
            parsed = self._parse(frame)
            if parsed is None:
                self.stats.foreign_frames += 1
                continue
            src, body = parsed
            if isinstance(body, DataSegment):
                for msg in self._in[src].add(body):
                    self._inbox[src].append(msg)
                    delivered = True
                acked.add(src)
            else:
                cum, sack = body
                out = self._out[src]
                for again in out.on_ack(cum, sack, now):
                    self._emit(again)
                self._pump(out, src, now)
                if out.idle:
                    delivered = True  # wakes flush()
        for src in acked:  # one ack per sender per batch of frames
            self._emit(self._ack_frame(src))
        if delivered:
            self._arrived.notify_all()

    def _parse(self, frame: bytes) -> tuple[int, DataSegment | tuple[int, int]] | None:
        """(source rank, segment or (cum, sack)) of one of this run's frames to this rank."""
        if len(frame) < HEADERS + ACK_HEADER.size or frame[12:14] != _IPV4:
            return None
        if frame[23] != IP_PROTO_UDP or frame[14] != 0x45:
            return None
        if int.from_bytes(frame[36:38], "big") != COLLECTIVE_UDP_PORT:
            return None
        if int.from_bytes(frame[30:34], "big") != self._me:
            return None
        magic, kind, run, src, dst = struct.unpack_from("!BBHHH", frame, HEADERS)
        if magic != MAGIC or run != self.run or dst != self.rank or not 0 <= src < self.n_ranks:
            return None
        if src == self.rank:
            return None
        if kind == KIND_ACK:
            cum, sack = ACK_HEADER.unpack_from(frame, HEADERS)[5:]
            return src, (cum, sack)
        if kind != KIND_DATA or len(frame) < HEADERS + DATA_HEADER.size:
            return None
        seq, msg, length, off, crc = DATA_HEADER.unpack_from(frame, HEADERS)[5:]
        udp_len = int.from_bytes(frame[38:40], "big")
        payload = frame[HEADERS + DATA_HEADER.size : ETH_BYTES + IPV4_BYTES + udp_len]
        if zlib.crc32(payload) != crc or len(payload) != udp_len - UDP_BYTES - DATA_HEADER.size:
            return None
        return src, DataSegment(seq, msg, length, off, payload)

    def _timers(self, now: float) -> None:
        for dst, out in enumerate(self._out):
            again = out.on_timer(now)
            if again is not None:
                self._emit(again)
            if not out.idle and now - out.progress_at > self.give_up and out.nxt > out.una:
                raise PeerError(
                    f"rank {self.rank}: {self.who(dst)} acknowledged nothing for "
                    f"{self.give_up:g} s: has it stopped, or is there no route to it?",
                    rank=dst,
                    address=self.peers[dst].ip,
                )


def on_host_wire(
    rank: int,
    peers: Sequence[Endpoint],
    wire_dir: str,
    switch: str,
    port: int,
    *,
    run: int = 0,
    mtu: int = DEFAULT_MTU,
    window: int = MAX_WINDOW,
    give_up: float = 10.0,
) -> WirePeerChannel:
    """A channel on the host end of port `port` of softswitch `switch` in `wire_dir`."""
    link = HostWire(port, wire_dir, switch=switch)
    try:
        return WirePeerChannel(rank, peers, link, run=run, mtu=mtu, window=window, give_up=give_up)
    except BaseException:
        link.close()
        raise
