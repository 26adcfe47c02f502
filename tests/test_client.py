"""The INA client against a running softswitch over loopback wires."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from inaemu.common.wire import K, Opcode
from inaemu.hostlib.client import InaClient, InaTimeoutError
from inaemu.hostlib.transport import LoopbackWireTransport
from inaemu.p4.constants import DropReason
from tests.helpers import accounted, install_star, run_threads, running_switch, workers


def int_inputs(n_workers: int, size: int, seed: int = 0) -> list[npt.NDArray[np.int32]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(-(2**20), 2**20, size, dtype=np.int32) for _ in range(n_workers)]


def int32_result(c: InaClient, x: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    """`c.allreduce_int32(x)` without its overflow mask."""
    return c.allreduce_int32(x)[0]


@pytest.mark.parametrize("loss", [0.0, 0.01, 0.10])
def test_exact_sum_under_injected_loss(loss: float) -> None:
    n, size, window = 4, 40 * K + 17, 8  # a short tail chunk
    ws = workers(n)
    xs = int_inputs(n, size, seed=int(loss * 100))
    with running_switch([w.port for w in ws], seed=7) as (sw, wire_dir):
        install_star(sw, 1, ws, pool=window, loss=loss)
        clients = [
            InaClient(
                LoopbackWireTransport(w.port, wire_dir),
                job_id=1,
                run=1,
                rank=r,
                n_workers=len(ws),
                window=window,
                initial_rto=0.02,
                give_up_after=20,
            )
            for r, w in enumerate(ws)
        ]
        results = run_threads(
            [partial(c.allreduce_int32, x) for c, x in zip(clients, xs, strict=True)]
        )
        for c in clients:
            c.transport.close()
    expected = np.sum(np.stack(xs).astype(np.int64), axis=0)
    for res, over in results:
        assert np.array_equal(res, expected)
        assert not over.any()
    packets_in, packets_accounted = accounted(sw.pipeline)
    assert packets_in == packets_accounted == sum(c.stats.packets_sent for c in clients)
    drops = sw.pipeline.ina_drops.packets
    if loss:
        assert drops[DropReason.LOSS] > 0
        assert sum(c.stats.retransmissions for c in clients) > 0
    else:
        assert drops[DropReason.LOSS] == 0


def test_consecutive_operations_and_opcodes() -> None:
    """Chunk numbering continues across operations; OR and MAX work; empty input is fine."""
    ws = workers(3)
    xs = int_inputs(3, 5 * K, seed=3)
    with running_switch([w.port for w in ws]) as (sw, wire_dir):
        install_star(sw, 1, ws, pool=4)
        clients = [
            InaClient(
                LoopbackWireTransport(w.port, wire_dir),
                job_id=1,
                run=1,
                rank=r,
                n_workers=len(ws),
                window=4,
            )
            for r, w in enumerate(ws)
        ]

        def work(c: InaClient, x: npt.NDArray[np.int32]) -> list[npt.NDArray[np.int32]]:
            out = []
            for op in (Opcode.SUM, Opcode.MAX, Opcode.OR, Opcode.SUM):
                out.append(c.allreduce_int32(x[: 3 * K + 5], op)[0])
            out.append(c.allreduce_int32(x[:0])[0])
            out.append(c.allreduce_int32(x[:1])[0])
            return out

        outs = run_threads([partial(work, c, x) for c, x in zip(clients, xs, strict=True)])
    stack = np.stack(xs)[:, : 3 * K + 5]
    for o in outs:
        assert np.array_equal(o[0], stack.astype(np.int64).sum(0))
        assert np.array_equal(o[1], stack.max(0))
        assert np.array_equal(o[2], np.bitwise_or.reduce(stack, 0))
        assert np.array_equal(o[3], o[0])
        assert o[4].size == 0
        assert np.array_equal(o[5], stack[:, :1].astype(np.int64).sum(0))
    assert clients[0].next_chunk == 1 + 4 * 4 + 0 + 1  # the run check's chunk first


def test_overflow_is_reported_per_chunk() -> None:
    ws = workers(2)
    a = np.zeros(3 * K, dtype=np.int32)
    a[K + 5] = 2**31 - 1  # only the second chunk overflows
    with running_switch([w.port for w in ws]) as (sw, wire_dir):
        install_star(sw, 1, ws, pool=4)
        clients = [
            InaClient(
                LoopbackWireTransport(w.port, wire_dir),
                job_id=1,
                run=1,
                rank=r,
                n_workers=len(ws),
                window=4,
            )
            for r, w in enumerate(ws)
        ]
        outs = run_threads([partial(c.allreduce_int32, a) for c in clients])
    for res, over in outs:
        assert res[K + 5] == 2**31 - 1  # saturated
        assert over[K : 2 * K].all() and not over[:K].any() and not over[2 * K :].any()


class DuplicatingReorderingTransport(LoopbackWireTransport):
    """Delivers every received result twice and in reverse batch order."""

    def recv(self, timeout: float) -> npt.NDArray[np.void]:
        got = super().recv(timeout)
        return np.concatenate([got[::-1], got]) if len(got) else got


def test_duplicated_and_reordered_results_are_harmless() -> None:
    ws = workers(3)
    xs = int_inputs(3, 30 * K, seed=5)
    with running_switch([w.port for w in ws]) as (sw, wire_dir):
        install_star(sw, 1, ws, pool=8)
        clients = [
            InaClient(
                DuplicatingReorderingTransport(w.port, wire_dir),
                job_id=1,
                run=1,
                rank=r,
                n_workers=len(ws),
                window=8,
            )
            for r, w in enumerate(ws)
        ]
        outs = run_threads([partial(int32_result, c, x) for c, x in zip(clients, xs, strict=True)])
    expected = np.stack(xs).astype(np.int64).sum(0)
    for o, c in zip(outs, clients, strict=True):
        assert np.array_equal(o, expected)
        assert c.stats.duplicate_results >= 30


def test_vanished_switch_gives_a_clear_error_within_its_bound(tmp_path: Path) -> None:
    wire_dir = str(tmp_path / "wires")  # outlives the switch (a switch's own dir would not)
    with running_switch([1], wire_dir=wire_dir):
        pass  # the switch is gone: nothing listens on the wire any more
    transport = LoopbackWireTransport(1, wire_dir)
    client = InaClient(
        transport,
        job_id=7,
        run=1,
        check_run=False,  # the exchange's own error, not the run check's
        window=4,
        initial_rto=0.01,
        max_rto=0.05,
        give_up_after=0.5,
    )
    start = time.monotonic()
    with pytest.raises(InaTimeoutError, match=r"job 7: no result for 3 chunk\(s\) \[0, 1, 2\]"):
        client.allreduce_int32(np.ones(3 * K, dtype=np.int32))
    assert time.monotonic() - start < 2.0
    assert transport.tx_dropped == client.stats.packets_sent > 3  # retransmitted, all lost
    transport.close()


def test_missing_peer_names_the_job_and_chunks() -> None:
    """One worker of two never shows up: the other fails clearly instead of hanging."""
    ws = workers(2)
    with running_switch([w.port for w in ws]) as (sw, wire_dir):
        install_star(sw, 3, ws, pool=4)
        client = InaClient(
            LoopbackWireTransport(1, wire_dir),
            job_id=3,
            run=1,
            check_run=False,  # the exchange's own error, not the run check's
            window=4,
            initial_rto=0.01,
            max_rto=0.05,
            give_up_after=0.5,
        )
        with pytest.raises(InaTimeoutError) as info:
            client.allreduce_int32(np.ones(2 * K, dtype=np.int32))
    assert info.value.job_id == 3 and info.value.missing == [0, 1]


@pytest.mark.parametrize("codec_name", ["fixedpoint", "sketch", "sketch-compact"])
def test_codecs_through_the_switch_match_the_reference_bit_for_bit(codec_name: str) -> None:
    """Through a lossy softswitch, every worker decodes exactly what the reference switch
    (numpy) gives: the switch's integer sums are exact, whatever was lost on the way."""
    from inaemu.hostlib.codecs import make_codec, simulate_allreduce

    n, size = 3, 5000
    rng = np.random.default_rng(11)
    xs = []
    for _ in range(n):
        x = np.zeros(size, dtype=np.float32)
        idx = rng.choice(size, 250, replace=False)
        x[idx] = rng.standard_normal(250).astype(np.float32)
        xs.append(x)
    expected, _ = simulate_allreduce(make_codec(codec_name), xs)
    ws = workers(n)
    with running_switch([w.port for w in ws], seed=3) as (sw, wire_dir):
        install_star(sw, 1, ws, pool=16, loss=0.05)
        clients = [
            InaClient(
                LoopbackWireTransport(w.port, wire_dir),
                job_id=1,
                run=1,
                rank=r,
                window=16,
                n_workers=n,
                initial_rto=0.02,
            )
            for r, w in enumerate(ws)
        ]

        def reduce(c: InaClient, x: npt.NDArray[np.float32]) -> npt.NDArray[np.generic]:
            return c.allreduce(x, make_codec(codec_name))

        outs = run_threads([partial(reduce, c, x) for c, x in zip(clients, xs, strict=True)])
    for out in outs:
        assert out.dtype == np.float32
        assert np.array_equal(out, expected[0])
    true_sum = np.sum(np.stack(xs).astype(np.float64), axis=0)
    assert np.abs(outs[0] - true_sum).max() < 1e-5


def test_kernel_udp_transport_carries_payload_records() -> None:
    """UdpTransport (Mininet hosts, real NICs): INA payloads as plain UDP datagrams on the INA
    port, batched both ways; here between two loopback addresses."""
    from inaemu.common.wire import pack_payloads
    from inaemu.hostlib.transport import UdpTransport

    a = UdpTransport("127.0.0.2", "127.0.0.3")
    b = UdpTransport("127.0.0.3", "127.0.0.2")
    try:
        vals = np.arange(300 * K, dtype=np.int32).reshape(300, K)
        sent = pack_payloads(
            opcode=Opcode.SUM,
            job_id=5,
            tree_id=0,
            slot=np.arange(300),
            seq=np.arange(300),
            values=vals,
        )
        a.send(sent)
        got: list[npt.NDArray[np.void]] = []
        deadline = time.monotonic() + 5
        while sum(len(g) for g in got) < 300 and time.monotonic() < deadline:
            got.append(b.recv(0.5))
        # (np.concatenate would turn the big-endian fields native: compare the bytes)
        assert b"".join(g.tobytes() for g in got) == sent.tobytes()
        assert b.frames_received == 300 and a.frames_sent == 300
        assert len(a.recv(0.05)) == 0  # nothing came back: an empty batch, no exception
    finally:
        a.close()
        b.close()


def test_transport_port_taken_is_named() -> None:
    from inaemu.hostlib.transport import TransportError, UdpTransport

    a = UdpTransport("127.0.0.4", "127.0.0.5")
    try:
        with pytest.raises(TransportError, match=r"127\.0\.0\.4:47500"):
            UdpTransport("127.0.0.4", "127.0.0.5")
    finally:
        a.close()


def test_chunks_striped_over_two_trees() -> None:
    """n_trees=2: chunk i travels on tree (i mod W) mod 2; both trees' entries are used."""
    from inaemu.controller.star import star_job_plan
    from inaemu.softswitch.plan import apply_to_pipeline

    ws = workers(3)
    xs = int_inputs(3, 20 * K, seed=9)
    with running_switch([w.port for w in ws]) as (sw, wire_dir):
        apply_to_pipeline(sw.pipeline, star_job_plan(1, ws, base=0, pool_size=8, mgid=1, n_trees=2))
        clients = [
            InaClient(
                LoopbackWireTransport(w.port, wire_dir),
                job_id=1,
                run=1,
                rank=r,
                n_workers=len(ws),
                window=8,
                n_trees=2,
            )
            for r, w in enumerate(ws)
        ]
        outs = run_threads([partial(int32_result, c, x) for c, x in zip(clients, xs, strict=True)])
        per_tree = {key[1]: e.packets for key, e in sw.pipeline.ina_child.entries.items()}
    assert all(np.array_equal(o, np.stack(xs).astype(np.int64).sum(0)) for o in outs)
    # 20 chunks per worker, half on each tree, after the run check's (tree 0)
    assert per_tree == {0: 11, 1: 10}


def test_int32_overflow_through_the_switch_fails_clearly() -> None:
    from inaemu.hostlib.codecs import SumOverflow, make_codec

    ws = workers(2)
    x = np.full(10, 2**30 + 1, dtype=np.int32)
    with running_switch([w.port for w in ws]) as (sw, wire_dir):
        install_star(sw, 1, ws, pool=4)
        clients = [
            InaClient(
                LoopbackWireTransport(w.port, wire_dir),
                job_id=1,
                run=1,
                rank=r,
                window=4,
                n_workers=2,
            )
            for r, w in enumerate(ws)
        ]

        def reduce(c: InaClient) -> npt.NDArray[np.generic]:
            return c.allreduce(x, make_codec("int32"))

        with pytest.raises(SumOverflow, match="int32"):
            run_threads([partial(reduce, c) for c in clients])
