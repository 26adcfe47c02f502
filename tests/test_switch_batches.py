"""The softswitch's data-plane loop moves frames in batches: many frames per read, one
`process_batch` per round, each egress port's frames sent in order in one call, frames for a
port with nobody connected dropped and counted."""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt

from inaemu.hostlib.transport import LoopbackWireTransport
from inaemu.hostlib.wire import INA_OFFSET, K, Opcode, pack_payloads
from inaemu.softswitch.batch import FrameBatch
from inaemu.softswitch.switch import SoftSwitch

SEQ = INA_OFFSET + 10  # the INA header's seq field in a frame


class RouteBySeq:
    """A data plane: every frame unchanged to port seq % 4 + 1; the batch sizes it saw."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def process(self, ingress_port: int, frame: bytes) -> list[tuple[int, bytes]]:
        return [(int.from_bytes(frame[SEQ : SEQ + 4], "big") % 4 + 1, frame)]

    def process_batch(self, batch: FrameBatch) -> FrameBatch:
        self.batches.append(batch.n)
        out = FrameBatch(max(batch.n, 1), max(batch.used_bytes, 1))
        for port, frame in batch:
            for egress, emitted in self.process(port, frame):
                out.append(egress, emitted)
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
