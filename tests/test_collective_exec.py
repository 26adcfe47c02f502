"""The host-collective executor (`inaemu.hostlib.collective`): schedules run over an in-memory
mesh (threads, property tests), a TCP mesh in threads, and worker processes on loopback.

The schedules here are written for the tests (ring, ring with split transfers, binary tree,
recursive doubling), plus the worker-aggregator's (`collectives.ps`, every rank's whole array
into one); the reference runs a schedule on numpy arrays, transfer by transfer."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inaemu.collectives.ps import ps_steps
from inaemu.collectives.schedule import Op, Schedule, ScheduleError, Transfer, chunk_bounds
from inaemu.common.wire import INT32_MAX, Opcode
from inaemu.hostlib.codecs import FixedPointCodec, make_codec, simulate_allreduce
from inaemu.hostlib.collective import worker as collective_worker
from inaemu.hostlib.collective.executor import (
    InceptionnCodec,
    ScheduleClient,
    ScheduleCodec,
    inceptionn_error_bound,
    inceptionn_quantizations,
    rank_plans,
)
from inaemu.hostlib.collective.peers import MemoryMesh, PeerChannel, PeerError, parse_peers
from inaemu.hostlib.collective.tcp_peers import TcpPeers
from inaemu.hostlib.worker import digest, worker_input

if TYPE_CHECKING:
    from inaemu.hostlib.ddp import AllreduceClient

TIMEOUT = 5.0

# ---------------------------------------------------------------------- schedules


def _hosts(n: int) -> tuple[str, ...]:
    return tuple(f"h{r}" for r in range(n))


def ring(n: int, split: int = 1) -> Schedule:
    """Reduce-scatter then all-gather around the ring; with `split`, each rank's block is
    `split` chunks sent as that many transfers (several messages to one peer per step)."""
    steps: list[tuple[Transfer, ...]] = []
    for phase, op in ((0, Op.REDUCE), (1, Op.COPY)):
        for s in range(n - 1):
            step = []
            for r in range(n):
                block = (r + phase - s) % n
                for k in range(split):
                    lo = block * split + k
                    step.append(Transfer(r, (r + 1) % n, lo, lo + 1, op))
            steps.append(tuple(step))
    return Schedule("ring", _hosts(n), n * split, tuple(steps))


def tree(n: int) -> Schedule:
    """Binomial tree: reduce everything to rank 0, then copy it back down (any n)."""
    up: list[tuple[Transfer, ...]] = []
    down: list[tuple[Transfer, ...]] = []
    d = 1
    while d < n:
        step = tuple(Transfer(r, r - d, 0, 2, Op.REDUCE) for r in range(n) if r % (2 * d) == d)
        up.append(step)
        down.insert(0, tuple(Transfer(t.dst, t.src, 0, 2, Op.COPY) for t in step))
        d *= 2
    return Schedule("tree", _hosts(n), 2, tuple(up + down))


def recursive_doubling(n: int) -> Schedule:
    """Every rank exchanges everything with rank ^ d, d = 1, 2, 4, ... (n a power of 2)."""
    steps = []
    d = 1
    while d < n:
        steps.append(tuple(Transfer(r, r ^ d, 0, 1, Op.REDUCE) for r in range(n)))
        d *= 2
    return Schedule("rd", _hosts(n), 1, tuple(steps))


def worker_aggregator(n: int) -> Schedule:
    """`collectives.ps`: every rank adds its array into rank 0's, which copies the sum back."""
    return Schedule("ps", _hosts(n), 1, ps_steps(n))


SCHEDULES: dict[str, Callable[[int], Schedule]] = {
    "ring": ring,
    "ring-split": lambda n: ring(n, 2),
    "tree": tree,
    "rd": recursive_doubling,
    "ps": worker_aggregator,
}


def reference(schedule: Schedule, inputs: Sequence[npt.NDArray[Any]]) -> list[npt.NDArray[Any]]:
    """Every rank's array after `schedule`, transfer by transfer (REDUCE: dst + src)."""
    bufs = [np.array(x, copy=True) for x in inputs]
    bounds = chunk_bounds(bufs[0].size, schedule.n_chunks)
    for step in schedule.steps:
        start = [b.copy() for b in bufs]
        for t in step:
            a, b = bounds[t.lo][0], bounds[t.hi - 1][1]
            if t.op is Op.REDUCE:
                bufs[t.dst][a:b] = bufs[t.dst][a:b] + start[t.src][a:b]
            else:
                bufs[t.dst][a:b] = start[t.src][a:b]
    return bufs


# ---------------------------------------------------------------------- running ranks


def run_ranks(
    schedule: Schedule,
    channels: Sequence[PeerChannel],
    body: Callable[[ScheduleClient, int], Any],
) -> list[Any]:
    """`body(client, rank)` on every rank, one thread each; re-raises the first error."""
    results: list[Any] = [None] * schedule.n_ranks
    errors: list[BaseException | None] = [None] * schedule.n_ranks

    def go(r: int) -> None:
        try:
            client = ScheduleClient(schedule, r, channels[r], timeout=TIMEOUT)
            results[r] = body(client, r)
        except BaseException as exc:
            errors[r] = exc
        finally:
            try:
                channels[r].close()
            except PeerError:
                pass

    threads = [threading.Thread(target=go, args=(r,), daemon=True) for r in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(4 * TIMEOUT)
        assert not t.is_alive(), "a rank did not finish within its bounded waits"
    for e in errors:
        if e is not None:
            raise e
    return results


def allreduce_all(
    schedule: Schedule, inputs: Sequence[npt.NDArray[Any]], codec: ScheduleCodec | None = None
) -> list[npt.NDArray[Any]]:
    mesh = MemoryMesh(schedule.n_ranks)
    return run_ranks(schedule, mesh.channels, lambda c, r: c.allreduce(inputs[r], codec))


def gradients(n: int, size: int, seed: int, dtype: Any = np.float32) -> list[npt.NDArray[Any]]:
    out = []
    for r in range(n):
        rng = np.random.default_rng([seed, r])
        x = rng.standard_normal(size) * 0.01
        big = rng.random(size) < 0.05  # a few values INCEPTIONN sends as raw floats
        x[big] *= 300
        out.append(x.astype(dtype))
    return out


def schedule_for(name: str, n: int) -> Schedule:
    if name == "rd":
        n = 1 << max(0, n.bit_length() - 1)  # the largest power of 2 <= n
    return SCHEDULES[name](n)


# ---------------------------------------------------------------------- property tests

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(name=st.sampled_from(sorted(SCHEDULES)), n=st.integers(1, 8))
def test_rank_plans_give_every_rank_the_plan_it_makes_itself(name: str, n: int) -> None:
    """Ranks that are threads of one process share `rank_plans` (one pass over the
    schedule); each gets what it would have found scanning the whole schedule."""
    schedule = schedule_for(name, n)
    mesh = MemoryMesh(schedule.n_ranks)
    plans = rank_plans(schedule)
    for r, channel in enumerate(mesh.channels):
        own = ScheduleClient(schedule, r, channel)
        shared = ScheduleClient(schedule, r, channel, plan=plans[r])
        assert shared._plan == own._plan


@FAST
@given(
    name=st.sampled_from(sorted(SCHEDULES)),
    n=st.integers(1, 8),
    size=st.integers(0, 300),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 1000),
)
def test_plain_sums_in_the_schedules_order(
    name: str, n: int, size: int, dtype: Any, seed: int
) -> None:
    schedule = schedule_for(name, n)
    inputs = gradients(schedule.n_ranks, size, seed, dtype)
    got = allreduce_all(schedule, inputs)
    want = reference(schedule, inputs)
    for r, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == dtype and g.shape == (size,)
        assert np.array_equal(g, w), f"rank {r}"
        assert np.array_equal(g, got[0])  # these schedules leave every rank the same sum
    exact = np.sum(np.array(inputs, dtype=np.float64), axis=0)
    assert np.allclose(got[0], exact, rtol=1e-4, atol=1e-6)


@FAST
@given(
    name=st.sampled_from(sorted(SCHEDULES)),
    n=st.integers(1, 6),
    size=st.integers(1, 200),
    opcode=st.sampled_from([Opcode.SUM, Opcode.MAX, Opcode.OR]),
    seed=st.integers(0, 1000),
)
def test_int32_sum_max_or(name: str, n: int, size: int, opcode: Opcode, seed: int) -> None:
    schedule = schedule_for(name, n)
    rng = np.random.default_rng(seed)
    k = schedule.n_ranks
    inputs = [rng.integers(-(2**20), 2**20, size, dtype=np.int32) for _ in range(k)]
    mesh = MemoryMesh(k)
    got = run_ranks(schedule, mesh.channels, lambda c, r: c.allreduce_int32(inputs[r], opcode))
    stack = np.array(inputs)
    want = {
        Opcode.SUM: stack.sum(axis=0, dtype=np.int64).astype(np.int32),
        Opcode.MAX: stack.max(axis=0),
        Opcode.OR: np.bitwise_or.reduce(stack, axis=0),
    }[opcode]
    for values, overflow in got:
        assert np.array_equal(values, want) and not overflow.any()


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_int32_sum_saturates_and_flags_like_the_switch(name: str) -> None:
    schedule = schedule_for(name, 4)
    size = 100
    # non-negative inputs: a partial sum leaves int32 exactly where the total does
    inputs = [np.full(size, 2**29, dtype=np.int32) for _ in range(4)]
    inputs[0][:50] = 10
    mesh = MemoryMesh(4)
    got = run_ranks(schedule, mesh.channels, lambda c, r: c.allreduce_int32(inputs[r], Opcode.SUM))
    exact = np.array(inputs, dtype=np.int64).sum(axis=0)
    for values, overflow in got:
        assert np.array_equal(overflow, exact > INT32_MAX)
        assert np.array_equal(values, np.minimum(exact, INT32_MAX))


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize("codec_name", ["fixedpoint", "int32", "sketch"])
def test_homomorphic_codecs_match_the_reference_switch_bit_for_bit(
    name: str, codec_name: str
) -> None:
    schedule = schedule_for(name, 5)
    codec = make_codec(codec_name)
    density = 0.1 if codec_name == "sketch" else 1.0  # OR bitmaps, MAX, SUM of a sketch
    inputs = [worker_input(7, r, 3000, density, codec=codec_name) for r in range(schedule.n_ranks)]
    switch, _ = simulate_allreduce(codec, inputs)
    got = allreduce_all(schedule, inputs, codec)
    for g in got:
        assert g.dtype == switch[0].dtype and g.tobytes() == switch[0].tobytes()


@FAST
@given(
    name=st.sampled_from(sorted(SCHEDULES)),
    n=st.integers(1, 8),
    size=st.integers(0, 400),
    bound=st.sampled_from([2.0**-10, 2.0**-6, 2.0**-14]),
    seed=st.integers(0, 1000),
)
def test_inceptionn_within_its_bound_and_the_same_on_every_rank(
    name: str, n: int, size: int, bound: float, seed: int
) -> None:
    schedule = schedule_for(name, n)
    inputs = gradients(schedule.n_ranks, size, seed)
    got = allreduce_all(schedule, inputs, InceptionnCodec(bound))
    stack = np.array(inputs, dtype=np.float64).reshape(schedule.n_ranks, size)
    exact = stack.sum(axis=0)
    limit = inceptionn_error_bound(schedule, np.abs(stack).sum(axis=0), bound)
    for g in got:
        assert g.dtype == np.float32
        assert np.array_equal(g, got[0])
        assert (np.abs(g.astype(np.float64) - exact) <= limit).all()


@pytest.mark.parametrize("n", [2, 4, 8])
def test_inceptionn_compressions_per_result(n: int) -> None:
    """A ring compresses each chunk n times on its way (n - 1 partial sums, the final sum
    once); recursive doubling 2(n - 1) times (each input and partial sum once per level)."""
    assert (inceptionn_quantizations(ring(n)) == n).all()
    assert (inceptionn_quantizations(recursive_doubling(n)) == 2 * (n - 1)).all()
    # worker-aggregator: every input once, then the aggregator's sum once
    assert (inceptionn_quantizations(worker_aggregator(n)) == n).all()


def test_the_aggregator_compresses_the_sum_once_and_sends_everyone_the_same_bytes() -> None:
    n, size = 4, 20_000
    schedule = worker_aggregator(n)
    inputs = gradients(n, size, 11)
    mesh = MemoryMesh(n)
    results = run_ranks(
        schedule,
        mesh.channels,
        lambda c, r: (c.allreduce(inputs[r], InceptionnCodec()), c.summary()),
    )
    sums = [res for res, _ in results]
    assert all(np.array_equal(s, sums[0]) for s in sums)  # the aggregator's kept value too
    agg = results[0][1]
    per_peer = [agg["bytes_sent_per_peer"][str(r)] for r in range(1, n)]
    assert len(set(per_peer)) == 1  # one compression of the sum, the same bytes to each
    for r in range(1, n):  # a worker pushes its own compressed array, once
        sent = {k: b for k, b in results[r][1]["bytes_sent_per_peer"].items() if b}
        assert sent == {"0": results[r][1]["bytes_sent"]}
        assert results[r][1]["bytes_sent"] < 2 * size  # compressed: under half of float32


def test_inceptionn_sends_fewer_bytes_and_the_ring_meets_the_documented_error() -> None:
    n, size, bound = 8, 50_000, 2.0**-10
    schedule = ring(n)
    inputs = [worker_input(3, r, size, codec="inceptionn") for r in range(n)]

    def sent(codec: ScheduleCodec | None) -> tuple[list[npt.NDArray[Any]], int]:
        mesh = MemoryMesh(n)
        results = run_ranks(
            schedule, mesh.channels, lambda c, r: (c.allreduce(inputs[r], codec), c.summary())
        )
        return [res for res, _ in results], sum(s["bytes_sent"] for _, s in results)

    _, plain_bytes = sent(None)
    comp, comp_bytes = sent(InceptionnCodec(bound))
    assert comp_bytes < 0.4 * plain_bytes  # N(0, 0.01): mostly 8-bit payloads and 2-bit tags
    err = np.abs(comp[0].astype(np.float64) - np.sum(np.array(inputs, np.float64), axis=0))
    assert err.max() < n * bound  # docs/codecs.md: within n x bound on a ring


def test_ranks_that_disagree_fail_naming_the_peer() -> None:
    schedule = ring(3)
    sizes = [100, 100, 101]
    mesh = MemoryMesh(3)
    with pytest.raises(PeerError, match=r"elements 10[01] \(expected 10[01]\)"):
        run_ranks(
            schedule,
            mesh.channels,
            lambda c, r: c.allreduce(np.ones(sizes[r], np.float32)),
        )


def test_a_schedule_for_another_rank_count_is_refused() -> None:
    mesh = MemoryMesh(3)
    with pytest.raises(ScheduleError, match="4 ranks, but the channel connects 3"):
        ScheduleClient(ring(4), 0, mesh.channels[0])


def test_stats_count_steps_messages_and_bytes_per_peer() -> None:
    schedule = ring(4, 2)
    mesh = MemoryMesh(4)
    inputs = gradients(4, 800, 1)
    summaries = run_ranks(
        schedule, mesh.channels, lambda c, r: (c.allreduce(inputs[r]), c.summary())[1]
    )
    s = summaries[1]
    assert s["steps"] == 6 and len(s["step_seconds"]) == 6 and s["operations"] == 1
    assert s["messages_sent"] == s["messages_received"] == 12
    # 12 messages of 100 float32 each, plus a 24-byte header each
    assert s["bytes_sent"] == s["bytes_sent_per_peer"]["2"] == 12 * (400 + 24)
    assert s["bytes_received_per_peer"] == {"0": 12 * 424, "2": 0, "3": 0}


def _as_hook_client(client: ScheduleClient) -> AllreduceClient:
    return client  # mypy: the DDP hook state accepts a ScheduleClient


def test_the_ddp_hook_averages_through_a_schedule_client() -> None:
    torch = pytest.importorskip("torch", reason="PyTorch not installed")
    from inaemu.hostlib.ddp import InaHookState, ina_allreduce_hook

    class Bucket:  # what the hook uses of a dist.GradBucket
        def __init__(self, tensor: Any) -> None:
            self.tensor = tensor

        def buffer(self) -> Any:
            return self.tensor

    schedule = ring(3)
    grads = [torch.arange(10, dtype=torch.float32) * (r + 1) for r in range(3)]

    def hook(client: ScheduleClient, r: int) -> Any:
        state = InaHookState(client, run=7)  # codec None: plain float32 sums
        out = ina_allreduce_hook(state, Bucket(grads[r].clone())).wait()
        assert client.run == 7 and state.buckets == 1
        return out

    outs = run_ranks(schedule, MemoryMesh(3).channels, hook)
    for out in outs:
        assert torch.equal(out, torch.arange(10, dtype=torch.float32) * 2)  # (1+2+3)/3


# ---------------------------------------------------------------------- TCP mesh


def listeners(n: int) -> list[socket.socket]:
    """Listening sockets on free loopback ports, bound now (no race for the ports)."""
    return [socket.create_server(("127.0.0.1", 0), backlog=16) for _ in range(n)]


def tcp_mesh(
    socks: list[socket.socket], token: str = "job", timeout: float = TIMEOUT
) -> list[TcpPeers]:
    addrs = [s.getsockname()[:2] for s in socks]
    out: list[TcpPeers | None] = [None] * len(socks)
    errors: list[BaseException] = []

    def make(r: int) -> None:
        try:
            out[r] = TcpPeers(r, addrs, token=token, timeout=timeout, listener=socks[r])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=make, args=(r,)) for r in range(len(socks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * timeout)
    if errors:
        close_all([ch for ch in out if ch is not None])
        raise errors[0]
    return [ch for ch in out if ch is not None]


def close_all(channels: Sequence[PeerChannel]) -> None:
    """Close every rank's channel at once, as separate processes would (a clean close waits
    for the others' goodbyes)."""
    threads = [threading.Thread(target=ch.close) for ch in channels]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * TIMEOUT)


def test_tcp_mesh_runs_a_schedule_and_refuses_a_stray_connection() -> None:
    socks = listeners(3)
    silent = socket.create_connection(socks[0].getsockname()[:2])  # says nothing
    stray = socket.create_connection(socks[0].getsockname()[:2])
    stray.sendall(b"GET / HTTP/1.0\r\n\r\n" + bytes(100))  # longer than a hello, not one
    start = time.monotonic()
    channels = tcp_mesh(socks)
    assert time.monotonic() - start < 2.0  # the silent one delayed no one
    try:  # closed by rank 0, or reset: it left some of the bytes unread
        assert stray.recv(1) == b""
    except ConnectionResetError:
        pass
    stray.close()
    silent.close()
    schedule = ring(3, 2)
    inputs = gradients(3, 100_001, 2)
    got = run_ranks(schedule, channels, lambda c, r: c.allreduce(inputs[r]))
    want = reference(schedule, inputs)
    assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    assert channels[0].wire_sent[1] == channels[1].wire_received[0] > 400_000


def test_tcp_rank_of_another_job_is_refused() -> None:
    socks = listeners(2)
    addrs = [s.getsockname()[:2] for s in socks]
    errors: list[BaseException] = []

    def accept() -> None:
        try:
            TcpPeers(0, addrs, token="job A", timeout=1.0, listener=socks[0])
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=accept)
    t.start()
    with pytest.raises(PeerError, match=r"rank 0 \(127\.0\.0\.1:\d+\): refused our hello"):
        TcpPeers(1, addrs, token="job B", timeout=1.0, listener=socks[1])
    t.join(5)
    assert len(errors) == 1 and "rank 1 (127.0.0.1:" in str(errors[0])
    assert "did not connect" in str(errors[0]) and "refused 1 stray" in str(errors[0])


def test_tcp_large_messages_both_ways_at_once_do_not_deadlock() -> None:
    channels = tcp_mesh(listeners(2))
    big = [bytes([r]) * 20_000_000 for r in range(2)]  # far beyond the socket buffers

    def swap(ch: TcpPeers) -> bytes | bytearray:
        ch.send(1 - ch.rank, big[ch.rank])
        return ch.recv(1 - ch.rank, TIMEOUT)

    out: list[bytes | bytearray] = [b"", b""]
    threads = [
        threading.Thread(target=lambda r=r: out.__setitem__(r, swap(channels[r]))) for r in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * TIMEOUT)
    close_all(channels)
    assert out[0] == big[1] and out[1] == big[0]
    assert channels[0].bytes_sent() == [0, 20_000_000]


def test_tcp_silent_peer_is_named_within_the_timeout() -> None:
    channels = tcp_mesh(listeners(3), timeout=1.0)
    start = time.monotonic()
    with pytest.raises(PeerError, match=r"rank 2 \(127\.0\.0\.1:\d+\): alive, but sent no") as info:
        channels[0].recv(2, 1.0)
    assert info.value.rank == 2
    assert time.monotonic() - start < 3.0
    # rank 0 told the others who failed
    with pytest.raises(PeerError, match=r"rank 2 .*reported by rank 0"):
        channels[1].recv(0, 2.0)
    close_all(channels)


def test_tcp_a_rank_waiting_on_a_silent_one_is_not_blamed() -> None:
    """0 waits on 1, which waits on 2 (alive, silent): 1 names 2, and 0 names 2 too."""
    channels = tcp_mesh(listeners(3), timeout=1.0)
    errors: list[PeerError | None] = [None, None]

    def wait(r: int) -> None:
        try:
            channels[r].recv(r + 1, 1.0)
        except PeerError as exc:
            errors[r] = exc

    threads = [threading.Thread(target=wait, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
        time.sleep(0.3)  # rank 1 starts waiting later, as if it had work first
    for t in threads:
        t.join(10)
    close_all(channels)
    assert errors[1] is not None and "rank 2 (127.0.0.1:" in str(errors[1])
    assert errors[0] is not None and errors[0].rank == 2, str(errors[0])
    assert "reported by rank 1" in str(errors[0])


def test_tcp_two_ranks_waiting_on_each_other_are_told_so() -> None:
    channels = tcp_mesh(listeners(2), timeout=1.0)
    errors: list[str] = ["", ""]

    def wait(r: int) -> None:
        try:
            channels[r].recv(1 - r, 1.0)
        except PeerError as exc:
            errors[r] = str(exc)

    threads = [threading.Thread(target=wait, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    close_all(channels)
    assert all("waits on rank" in e and "the same schedule" in e for e in errors), errors


def test_parse_peers() -> None:
    assert parse_peers("10.0.0.1:7000, [::1]:7001") == [("10.0.0.1", 7000), ("::1", 7001)]
    for bad in ("", "10.0.0.1", "10.0.0.1:x", "a:1,a:1", "h:70000"):
        with pytest.raises(ValueError, match=r"peer address|no peer|repeat"):
            parse_peers(bad)


# ---------------------------------------------------------------------- worker processes


def start_workers(
    tmp_path: Path, schedule: Schedule, *args: str, timeout: float = TIMEOUT
) -> list[tuple[subprocess.Popen[str], Path, Path]]:
    """One worker process per rank; each inherits its listening socket (--listen-fd)."""
    path = tmp_path / f"{schedule.algo}.json"
    schedule.save(path)
    socks = listeners(schedule.n_ranks)
    peers = ",".join(f"127.0.0.1:{s.getsockname()[1]}" for s in socks)
    procs = []
    for r, sock in enumerate(socks):
        out, err = tmp_path / f"out{r}", tmp_path / f"err{r}"
        cmd = [sys.executable, "-m", "inaemu.hostlib.collective.worker", "--schedule"]
        cmd += [str(path), "--rank", str(r), "--peers", peers, "--timeout", str(timeout)]
        cmd += ["--listen-fd", str(sock.fileno()), *args]
        with out.open("w") as fo, err.open("w") as fe:
            p = subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True, pass_fds=[sock.fileno()])
        procs.append((p, out, err))
        sock.close()
    return procs


def finish(procs: list[tuple[subprocess.Popen[str], Path, Path]], wait: float = 60.0) -> None:
    for p, _, _ in procs:
        try:
            p.wait(wait)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
            raise AssertionError("a worker did not exit in time") from None


@pytest.mark.parametrize("codec", ["plain", "fixedpoint", "inceptionn"])
def test_worker_processes(tmp_path: Path, codec: str) -> None:
    schedule = ring(3, 2)
    size, seed = 20_000, 5
    procs = start_workers(tmp_path, schedule, "--size", str(size), "--seed", str(seed),
                          "--codec", codec, "--out", str(tmp_path / "r.npy"))  # fmt: skip
    finish(procs)
    lines = []
    for p, out, err in procs:
        assert p.returncode == 0, err.read_text()
        (line,) = [json.loads(s) for s in out.read_text().splitlines()]
        lines.append(line)
    inputs = [worker_input(seed, r, size, codec=codec) for r in range(3)]
    if codec == "plain":
        want = digest(reference(schedule, inputs)[0])
    elif codec == "fixedpoint":
        want = digest(simulate_allreduce(FixedPointCodec(), inputs)[0][0])
    else:
        want = lines[0]["digest"]
        result = np.load(tmp_path / "r.npy")
        exact = np.sum(np.array(inputs, dtype=np.float64), axis=0)
        assert np.abs(result - exact).max() < 3 * 2.0**-10
    for r, line in enumerate(lines):
        phases = 2 if codec == "fixedpoint" else 1  # MAX of the exponents, SUM of the values
        assert line["rank"] == r and line["algo"] == "ring" and line["steps"] == 4 * phases
        assert line["digest"] == want
        assert line["start"] <= line["end"] and line["cpu_seconds"] >= 0
        assert line["bytes_sent"] == line["bytes_sent_per_peer"][str((r + 1) % 3)] > 0
        assert line["bytes_received"] == lines[(r - 1) % 3]["bytes_sent"]


def _await_first_line(procs: list[tuple[subprocess.Popen[str], Path, Path]]) -> None:
    end = time.monotonic() + 30
    while not all(out.read_text().strip() for _, out, _ in procs):
        for p, _, err in procs:
            assert p.poll() is None, err.read_text()
        assert time.monotonic() < end, "no allreduce finished"
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["killed", "stopped"])
def test_a_failed_worker_is_named_by_the_others(tmp_path: Path, how: str) -> None:
    schedule = ring(4)
    timeout = 2.0
    procs = start_workers(tmp_path, schedule, "--size", "100000", "--repeat", "100000",
                          timeout=timeout)  # fmt: skip
    victim = procs[2][0]
    try:
        _await_first_line(procs)
        if how == "killed":
            victim.kill()
        else:
            os.kill(victim.pid, signal.SIGSTOP)
        hit = time.monotonic()
        others = procs[:2] + procs[3:]
        finish(others, wait=timeout + 10)
        took = time.monotonic() - hit
    finally:
        victim.kill()
        victim.wait(5)
    port = schedule_port(procs, 2)
    for p, _, err in others:
        text = err.read_text()
        assert p.returncode == 1, text
        assert f"rank 2 (127.0.0.1:{port})" in text, text
        assert len(text.strip().splitlines()) == 1  # one line, no traceback
    assert took < timeout + 2.5  # the timeout, the grace for a report, process exit


def schedule_port(procs: list[tuple[subprocess.Popen[str], Path, Path]], rank: int) -> int:
    args = procs[rank][0].args
    assert isinstance(args, list)
    peers = args[args.index("--peers") + 1]
    return parse_peers(peers)[rank][1]


def test_worker_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = ["--schedule", str(tmp_path / "none.json"), "--rank", "0", "--peers", "a:1"]
    assert collective_worker.main(missing) == 2
    assert "cannot read a schedule" in capsys.readouterr().err
    ring(3).save(tmp_path / "ring.json")
    wrong = ["--schedule", str(tmp_path / "ring.json"), "--rank", "0", "--peers", "a:1,b:2"]
    assert collective_worker.main(wrong) == 2
    err = capsys.readouterr().err
    assert "names 2 addresses, the schedule has 3 ranks" in err and len(err.splitlines()) == 1
