"""The wire peer channel: segmentation and reassembly (properties), the sender's window and
timers, every message intact through a lossy, reordering test double, and through a real
softswitch that routes by /32 and drops frames on purpose (loss injection)."""

from __future__ import annotations

import queue
import random
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inaemu.common.wire import Endpoint
from inaemu.controller.jobs import route_plans
from inaemu.hostlib.collective.peers import PeerChannel, PeerError
from inaemu.hostlib.collective.wire_peers import (
    MAX_WINDOW,
    SACK_BITS,
    DataSegment,
    Reassembler,
    RecvStream,
    SendStream,
    WirePeerChannel,
    max_payload,
    on_host_wire,
    segment,
)
from inaemu.p4.constants import DropReason
from inaemu.p4.plan import LOSS_TABLE, SwitchPlan, TableWrite, loss_threshold
from inaemu.softswitch.plan import apply_to_pipeline
from inaemu.softswitch.switch import SoftSwitch
from inaemu.topology.builders import star


def segments_of(messages: list[bytes], size: int) -> list[DataSegment]:
    out: list[DataSegment] = []
    for m, data in enumerate(messages):
        for off, piece in segment(data, size):
            out.append(DataSegment(len(out), m, len(data), off, bytes(piece)))
    return out


@given(st.binary(max_size=3000), st.integers(1, 700))
def test_segments_cover_the_message_in_order(data: bytes, size: int) -> None:
    pieces = segment(data, size)
    assert b"".join(bytes(p) for _, p in pieces) == data
    assert all(0 < len(p) <= size for _, p in pieces) or data == b""
    assert [off for off, _ in pieces] == list(range(0, max(len(data), 1), size))


@given(st.lists(st.binary(max_size=500), max_size=8), st.integers(1, 64))
def test_reassembler_gives_back_every_message(messages: list[bytes], size: int) -> None:
    r = Reassembler()
    got = [m for s in segments_of(messages, size) if (m := r.add(s)) is not None]
    assert got == messages


def test_reassembler_refuses_a_gap() -> None:
    r = Reassembler()
    with pytest.raises(PeerError, match="does not continue message 0 at byte 0"):
        r.add(DataSegment(0, 0, 10, 5, b"abcde"))


@settings(max_examples=200)
@given(
    st.lists(st.binary(max_size=300), min_size=1, max_size=6),
    st.integers(1, 50),
    st.integers(0, 2**32),
)
def test_recv_stream_delivers_in_order_whatever_arrives(
    messages: list[bytes], size: int, seed: int
) -> None:
    """Segments arrive shuffled within the window, duplicated, and some only after a resend;
    the stream hands out each message once, in order, and its acks describe what it has."""
    rnd = random.Random(seed)
    segs = segments_of(messages, size)
    stream = RecvStream()
    got: list[bytes] = []
    pending = list(segs)
    while pending:
        window = [s for s in pending if s.seq < stream.cum + SACK_BITS]
        s = rnd.choice(window)
        if rnd.random() < 0.3:
            continue  # lost: sent again later
        got += stream.add(s)
        if rnd.random() < 0.2:
            got += stream.add(s)  # duplicated
        pending.remove(s)
        cum, sack = stream.ack()
        have = {x.seq for x in segs if x not in pending}
        assert cum == min(set(range(len(segs) + 1)) - have)
        assert {cum + 1 + i for i in range(SACK_BITS) if sack >> i & 1} == {
            q for q in have if q > cum
        }
    assert got == messages
    assert stream.ack() == (len(segs), 0)


def test_recv_stream_ignores_frames_beyond_the_window() -> None:
    stream = RecvStream()
    assert stream.add(DataSegment(SACK_BITS + 5, 0, 1, 0, b"x")) == []
    assert stream.ack() == (0, 0)


def test_send_stream_window_fast_retransmit_and_timer() -> None:
    s = SendStream(window=8)
    for i in range(12):
        s.push(bytes([i]))
    first = list(s.sendable(0.0))
    assert first == [bytes([i]) for i in range(4)]  # initial congestion window: 4
    # segment 0 lost; 1, 2, 3 arrive (sacked) -> fast retransmit of 0 once it is old enough
    assert s.on_ack(0, 0b111, 0.5) == [b"\x00"]  # lost: three later ones arrived
    assert s.cwnd == 2.0 and s.retransmissions == 1
    assert s.on_ack(0, 0b111, 0.5) == []  # not again at once
    # selectively acked segments are no longer in flight: 0 is (resent), so one new one goes
    assert list(s.sendable(0.5)) == [bytes([4])]
    assert list(s.sendable(0.5)) == []
    s.on_ack(4, 0, 0.6)
    assert s.una == 4 and s.idle is False
    sent = list(s.sendable(0.6))
    assert sent and all(s.nxt - s.una <= 8 for _ in sent)
    assert s.on_timer(0.6) is None
    assert s.on_timer(0.6 + s.rto + 0.01) == bytes([4])
    assert s.cwnd == 1.0 and s.timeouts == 1 and s.backoff == 1
    assert s.on_ack(99, 0, 1.0) == [] and s.una == 4  # acks beyond what was sent: ignored


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 2000), min_size=1, max_size=5),
    st.integers(1, MAX_WINDOW),
    st.floats(0.0, 0.4),
    st.integers(0, 2**32),
)
def test_streams_deliver_everything_through_any_loss(
    sizes: list[int], window: int, loss: float, seed: int
) -> None:
    """A sender and a receiver stream on a virtual clock, every data frame and every ack lost
    with probability `loss`, some delivered late: all messages arrive, once, in order, and the
    sender ends with nothing unacknowledged."""
    rnd = random.Random(seed)
    messages = [rnd.randbytes(n) for n in sizes]
    segs = segments_of(messages, 100)
    sender, receiver = SendStream(window=window), RecvStream()
    for seg in segs:
        sender.push(seg.seq.to_bytes(4, "big"))  # the "frame" names its segment
    got: list[bytes] = []
    late: list[bytes] = []
    now = 0.0
    for _ in range(200_000):
        if sender.idle:
            break
        now += 0.001
        frames = list(sender.sendable(now))
        if (again := sender.on_timer(now)) is not None:
            frames.append(again)
        batch, late = frames + late, []
        arrived = False
        for f in batch:
            if rnd.random() < 0.1:
                late.append(f)  # overtaken: arrives in the next round
            elif rnd.random() >= loss:
                got += receiver.add(segs[int.from_bytes(f, "big")])
                arrived = True
        if arrived and rnd.random() >= loss:
            late += sender.on_ack(*receiver.ack(), now)
    assert sender.idle, f"stuck: una {sender.una} of {len(segs)}, receiver at {receiver.cum}"
    assert got == messages


# ---------------------------------------------------------------- a lossy test double


class LossyHub:
    """Frames between ranks by destination IP, in memory: each dropped with `loss`, and
    delayed by a few milliseconds (so overtaken by later ones) with `reorder`."""

    def __init__(self, n: int, loss: float, reorder: float = 0.0, seed: int = 1) -> None:
        self.ips = [f"10.9.0.{r + 1}" for r in range(n)]
        self.queues: dict[bytes, queue.Queue[bytes]] = {
            bytes(int(p) for p in ip.split(".")): queue.Queue() for ip in self.ips
        }
        self.loss, self.reorder = loss, reorder
        self.rnd = random.Random(seed)
        self.lock = threading.Lock()
        self.dropped = 0
        self.delayed = 0

    def peers(self) -> list[Endpoint]:
        return [Endpoint(f"02:00:00:09:00:{r + 1:02x}", ip) for r, ip in enumerate(self.ips)]

    def link(self, rank: int) -> HubLink:
        return HubLink(self, self.queues[bytes(int(p) for p in self.ips[rank].split("."))])

    def carry(self, frame: bytes) -> None:
        inbox = self.queues[frame[30:34]]
        with self.lock:
            lost, late = self.rnd.random() < self.loss, self.rnd.random() < self.reorder
            self.dropped += lost
            self.delayed += late and not lost
        if lost:
            return
        if late:
            timer = threading.Timer(0.003, inbox.put, args=(frame,))
            timer.daemon = True
            timer.start()
        else:
            inbox.put(frame)


class HubLink:
    def __init__(self, hub: LossyHub, inbox: queue.Queue[bytes]) -> None:
        self.hub, self.inbox = hub, inbox

    def send_frames(self, frames: list[bytes]) -> int:
        for frame in frames:
            self.hub.carry(frame)
        return len(frames)

    def recv(self, timeout: float) -> list[bytes]:
        try:
            frames = [self.inbox.get(timeout=timeout)]
        except queue.Empty:
            return []
        while len(frames) < 64:
            try:
                frames.append(self.inbox.get_nowait())
            except queue.Empty:
                break
        return frames

    def close(self) -> None:
        pass


def all_to_all(
    channels: list[WirePeerChannel], messages: dict[tuple[int, int], list[bytes]]
) -> None:
    """Every rank sends its messages and receives everyone's, each in its own thread."""
    errors: list[BaseException] = []
    got: dict[tuple[int, int], list[bytes]] = {}

    def rank_main(ch: WirePeerChannel) -> None:
        try:
            for (src, dst), msgs in messages.items():
                if src == ch.rank:
                    for m in msgs:
                        ch.send(dst, m)
            for (src, dst), msgs in messages.items():
                if dst == ch.rank:
                    got[(src, dst)] = [ch.recv(src, timeout=20.0) for _ in msgs]
            ch.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=rank_main, args=(ch,)) for ch in channels]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert got == messages


def test_every_message_intact_through_loss_and_reordering() -> None:
    hub = LossyHub(4, loss=0.1, reorder=0.1)
    chans = [
        WirePeerChannel(r, hub.peers(), hub.link(r), run=7, mtu=256, give_up=10.0) for r in range(4)
    ]
    rnd = random.Random(3)
    messages = {
        (s, d): [rnd.randbytes(rnd.choice([0, 1, 100, 5000, 20_000])) for _ in range(3)]
        for s in range(4)
        for d in range(4)
        if s != d
    }
    all_to_all(chans, messages)
    assert hub.dropped > 0
    assert sum(c.stats.retransmissions for c in chans) >= hub.dropped // 2
    for c in chans:
        assert c.bytes_sent() == [sum(map(len, messages.get((c.rank, d), []))) for d in range(4)]
        assert c.bytes_received() == [
            sum(map(len, messages.get((s, c.rank), []))) for s in range(4)
        ]


def test_a_vanished_peer_is_named() -> None:
    hub = LossyHub(2, loss=0.0)
    ch: PeerChannel = WirePeerChannel(0, hub.peers(), hub.link(0), give_up=0.5)
    try:
        with pytest.raises(
            PeerError, match=r"no message from rank 1 \(10\.9\.0\.2\) within 0\.3 s"
        ):
            ch.recv(1, timeout=0.3)
        ch.send(1, b"hello")  # nobody acks it
        with pytest.raises(PeerError, match=r"rank 1 \(10\.9\.0\.2\) acknowledged nothing"):
            ch.flush(timeout=5.0)
        with pytest.raises(PeerError, match="acknowledged nothing") as failed:
            ch.send(1, b"again")  # the channel stays failed
        assert failed.value.rank == 1 and failed.value.address == "10.9.0.2"
    finally:
        with pytest.raises(PeerError):
            ch.close()


def test_bad_arguments_are_refused() -> None:
    hub = LossyHub(2, loss=0.0)
    with pytest.raises(ValueError, match="mtu 64 out of"):
        WirePeerChannel(0, hub.peers(), hub.link(0), mtu=64)
    with pytest.raises(ValueError, match=r"rank 2 out of 0\.\.1"):
        WirePeerChannel(2, hub.peers(), hub.link(0))
    with pytest.raises(ValueError, match="window"):
        WirePeerChannel(0, hub.peers(), hub.link(0), window=MAX_WINDOW + 1)
    ch = WirePeerChannel(0, hub.peers(), hub.link(0))
    with pytest.raises(PeerError, match="no peer rank 0"):
        ch.send(0, b"me")
    ch.close()
    assert max_payload(1500) == 1500 - 20 - 8 - 28


# ---------------------------------------------------------------- through a softswitch


@contextmanager
def routed_switch(n: int, loss: float) -> Iterator[tuple[SoftSwitch, list[Endpoint]]]:
    """One softswitch with hosts on ports 1..n, /32 routes to each, `loss` on every port."""
    topo = star(n)
    sw = SoftSwitch()
    sw.add_loopback_wires(range(1, n + 1))
    apply_to_pipeline(sw.pipeline, route_plans(topo)["s1"])
    if loss:
        t = loss_threshold(loss)
        plan = SwitchPlan()
        plan.tables += [TableWrite(LOSS_TABLE, (p,), "set_loss", (t,)) for p in range(1, n + 1)]
        apply_to_pipeline(sw.pipeline, plan)
    sw.start()
    try:
        yield sw, [Endpoint(h.mac, h.ip) for h in topo.hosts.values()]
    finally:
        sw.stop()


def test_through_a_softswitch_with_injected_loss() -> None:
    with routed_switch(3, loss=0.05) as (sw, peers), ExitStack() as stack:
        chans = [
            stack.enter_context(on_host_wire(r, peers, sw.wire_dir, "s1", r + 1, run=3))
            for r in range(3)
        ]
        rnd = random.Random(5)
        messages = {
            (s, d): [rnd.randbytes(n) for n in (200_000, 7, 0)]
            for s in range(3)
            for d in range(3)
            if s != d
        }
        all_to_all(chans, messages)
        assert sw.pipeline.ina_drops.packets[DropReason.LOSS] > 0
        assert sum(c.stats.retransmissions for c in chans) > 0
