"""Many frames per system call: the softswitch's data-plane loop (many frames per read, one
`process_batch` per round, each egress port's frames sent in order in one call, frames for a
port with nobody connected dropped and counted) and the kernel-UDP transport (`sendmmsg`,
`recvmmsg`)."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import numpy.typing as npt

from inaemu.common.wire import INA_OFFSET, K, Opcode, pack_payloads
from inaemu.hostlib.collective.tcp_peers import TcpPeers
from inaemu.hostlib.transport import LoopbackWireTransport, UdpTransport
from inaemu.softswitch.batch import FrameBatch
from inaemu.softswitch.switch import SoftSwitch
from tests.test_collective_exec import close_all, listeners, tcp_mesh

SEQ = INA_OFFSET + 10  # the INA header's seq field in a frame


class RouteBySeq:
    """A data plane in numpy: every frame unchanged to port seq % 4 + 1; the batch sizes it
    saw."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def process(self, ingress_port: int, frame: bytes) -> list[tuple[int, bytes]]:
        return [(int.from_bytes(frame[SEQ : SEQ + 4], "big") % 4 + 1, frame)]

    def process_batch(self, batch: FrameBatch) -> FrameBatch:
        n = batch.n
        self.batches.append(n)
        at = batch.offset[:n] + SEQ + 3  # the low byte of seq
        out = FrameBatch(1, 1)
        out.buf = batch.buf
        out.offset, out.length = batch.offset[:n].copy(), batch.length[:n].copy()
        out.port = (batch.buf[at] % 4 + 1).astype(np.int32)
        out.n = n
        return out


def seqs_until(t: LoopbackWireTransport, count: int, timeout: float = 10.0) -> list[int]:
    got: list[npt.NDArray[np.void]] = []
    deadline = time.monotonic() + timeout
    while sum(len(g) for g in got) < count and time.monotonic() < deadline:
        got.append(t.recv(0.1))
    return [int(s) for g in got for s in g["seq"]]


def test_a_burst_goes_through_in_batches_in_order_per_port() -> None:
    plane = RouteBySeq()
    sw = SoftSwitch(dataplane=plane)
    sw.add_loopback_wires([1, 2, 3, 4])  # nobody attaches to port 4
    sw.start()
    hosts = [LoopbackWireTransport(p, sw.wire_dir) for p in (1, 2, 3)]
    try:
        n = 3000
        payloads = pack_payloads(
            opcode=Opcode.SUM,
            job_id=1,
            tree_id=0,
            slot=0,
            seq=np.arange(n),
            values=np.zeros((n, K), np.int32),
        )
        hosts[0].send(payloads)  # one call
        got = [seqs_until(h, n // 4) for h in hosts]
        deadline = time.monotonic() + 10
        while sw.tx_dropped < n // 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        for p, seqs in enumerate(got, start=1):
            assert seqs == [s for s in range(n) if s % 4 + 1 == p]  # all, in order
        assert sw.tx_dropped == n // 4  # port 4: no one connected
        assert hosts[0].counts.tx_calls == 1 and hosts[0].counts.tx_frames == n
        counts = sw.counts
        assert counts.rx_frames == n and counts.rx_frames / counts.rx_calls >= 100, counts
        assert counts.tx_frames == 3 * n // 4 and counts.tx_frames / counts.tx_calls >= 100, counts
        assert sum(plane.batches) == n and n / len(plane.batches) >= 100, plane.batches
        assert sw.frames_in == n and sw.frames_out == n
    finally:
        for h in hosts:
            h.close()
        sw.stop()


def test_udp_transport_sends_and_receives_a_window_in_one_call_each() -> None:
    a = UdpTransport("127.0.0.6", "127.0.0.7")
    b = UdpTransport("127.0.0.7", "127.0.0.6")
    try:
        n = 200
        sent = pack_payloads(
            opcode=Opcode.SUM,
            job_id=5,
            tree_id=0,
            slot=np.arange(n),
            seq=np.arange(n),
            values=np.arange(n * K, dtype=np.int32).reshape(n, K),
        )
        a.send(sent)
        assert a.counts.tx_calls == 1 and a.counts.tx_frames == n
        got = b.recv(2.0)
        assert got.tobytes() == sent.tobytes()  # all of them, in order, one call
        assert b.counts.rx_calls == 1 and b.counts.rx_frames == n
        b.send(got[:3])  # and back, to its peer's address
        assert a.recv(2.0)["seq"].tolist() == [0, 1, 2]
    finally:
        a.close()
        b.close()


def test_tcp_peers_many_small_and_some_large_messages_arrive_intact_in_order() -> None:
    """The TCP channel joins queued small frames into one send and reads small frames many per
    call (large ones straight into the message): every message once, in order, both ways."""
    channels = tcp_mesh(listeners(2))
    rnd = random.Random(9)
    sizes = [rnd.choice([0, 1, 14, 300, 5000, 70_000, 140_000, 300_000]) for _ in range(600)]
    msgs = [[rnd.randbytes(n) for n in sizes] for _ in range(2)]
    got: list[list[bytes]] = [[], []]

    def exchange(ch: TcpPeers) -> None:
        other = 1 - ch.rank
        for m in msgs[ch.rank]:
            ch.send(other, m)
        got[ch.rank] = [bytes(ch.recv(other, 30.0)) for _ in msgs[other]]

    threads = [threading.Thread(target=exchange, args=(ch,)) for ch in channels]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    close_all(channels)
    assert got[0] == msgs[1] and got[1] == msgs[0]
    assert channels[0].wire_sent[1] == channels[1].wire_received[0]
