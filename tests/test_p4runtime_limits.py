"""What one P4Runtime client can make the softswitch do is bounded: Reads (entities, bytes,
time, repeats, the data plane forwarding meanwhile) and StreamChannel slots (observers and
silent streams cannot lock a controller out).

Servers run in the test process on 127.0.0.1 port 0, or as `python -m inaemu.softswitch` where
the data plane and the server's memory are measured.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from finsy.proto.p4.v1 import p4runtime_pb2 as p4r
from finsy.proto.p4.v1 import p4runtime_pb2_grpc

from inaemu.cli import main as cli
from inaemu.common.wire import K
from inaemu.controller.jobs import JobSpec
from inaemu.controller.p4rt import Controller as InaController
from inaemu.controller.p4rt import ControllerError
from inaemu.hostlib.client import InaClient
from inaemu.hostlib.transport import LoopbackWireTransport
from inaemu.softswitch.p4runtime.arbitration import ARBITRATION_GRACE
from inaemu.softswitch.p4runtime.read import READ_MAX_ENTITIES, ReadLimits
from inaemu.softswitch.p4runtime.server import P4RuntimeServer
from inaemu.softswitch.p4runtime.write import MAX_REPLICAS
from inaemu.softswitch.pipeline import Pipeline
from inaemu.topology.builders import star
from inaemu.topology.model import Topology
from tests.test_p4runtime_hardening import RawStream, arbitration
from tests.test_p4runtime_server import (
    CODE,
    INFO,
    JOB1,
    Controller,
    agg_node,
    batch_errors,
    group_entity,
    insert,
    raw_entry,
    status,
    te_entity,
)

REPO = Path(__file__).resolve().parent.parent
COUNTER_CELLS = sum(c.size for c in INFO.counters.values())  # what one counter wildcard reads


def stub(address: str) -> tuple[grpc.Channel, p4runtime_pb2_grpc.P4RuntimeStub]:
    channel = grpc.insecure_channel(
        address, options=[("grpc.max_receive_message_length", 64 << 20)]
    )
    return channel, p4runtime_pb2_grpc.P4RuntimeStub(channel)


def counter_wildcard() -> p4r.Entity:
    return p4r.Entity(counter_entry=p4r.CounterEntry())


def groups_wildcard(mgid: int = 0) -> p4r.Entity:
    return group_entity(mgid, [])


def big_group(mgid: int) -> p4r.Entity:
    ports = range(1, 501)
    replicas = [p4r.Replica(egress_port=ports[i % 500], instance=i // 500) for i in range(4096)]
    assert len(replicas) == MAX_REPLICAS
    return group_entity(mgid, replicas)


def read(address: str, *entities: p4r.Entity, timeout: float = 60) -> list[p4r.Entity]:
    channel, p4rt = stub(address)
    try:
        request = p4r.ReadRequest(device_id=1, entities=entities)
        return [e for r in p4rt.Read(request, timeout=timeout) for e in r.entities]
    finally:
        channel.close()


def read_error(address: str, *entities: p4r.Entity) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        read(address, *entities)
    return info.value


@pytest.fixture
def server() -> Iterator[P4RuntimeServer]:
    with P4RuntimeServer(Pipeline(), address="127.0.0.1:0", preconfigured=True) as srv:
        yield srv


# ---------------------------------------------------------------------- Read limits


def test_an_entity_repeated_in_a_read_is_read_once(server: P4RuntimeServer) -> None:
    # the attack of issue 14: one 4 KB request naming the counter wildcard 1,000 times
    found = read(server.address, *[counter_wildcard()] * 1000)
    assert len(found) == COUNTER_CELLS
    # every requested position still gets its own result
    bad = p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=7))
    err = read_error(server.address, bad, counter_wildcard(), bad)
    codes = [code for code, _ in batch_errors(err)]
    assert codes == [CODE.INVALID_ARGUMENT, CODE.OK, CODE.INVALID_ARGUMENT]


def test_a_read_past_the_entity_limit_is_refused_before_any_work(server: P4RuntimeServer) -> None:
    ctl = Controller(server.address)
    assert status(ctl.arbitrate(10)) == CODE.OK
    groups = READ_MAX_ENTITIES // (MAX_REPLICAS + 1) + 1  # one group too many for one Read
    for mgid in range(1, groups + 1):
        ctl.write(insert(big_group(mgid)))
    ctl.close()
    err = read_error(server.address, groups_wildcard())
    assert err.code() == CODE.RESOURCE_EXHAUSTED, err.details()
    assert f"{groups * (MAX_REPLICAS + 1):,} entities" in err.details()
    assert f"at most {READ_MAX_ENTITIES:,} per Read" in err.details()
    assert "one table, counter or multicast group per Read" in err.details()
    [group] = read(server.address, groups_wildcard(1))
    replicas = group.packet_replication_engine_entry.multicast_group_entry.replicas
    assert len(replicas) == MAX_REPLICAS
    # distinct entities add up too: every cell of every counter, one by one, and more
    cells = [
        p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=c.id, index=p4r.Index(index=i)))
        for c in INFO.counters.values()
        for i in range(c.size)
    ]
    assert len(read(server.address, *cells)) == COUNTER_CELLS
    err = read_error(server.address, *cells, *[groups_wildcard(g) for g in range(1, 17)])
    assert err.code() == CODE.RESOURCE_EXHAUSTED, err.details()


def test_a_read_past_the_byte_or_time_limit_ends_with_resource_exhausted() -> None:
    meta = b"m" * 100_000
    limits = ReadLimits(max_bytes=2_000_000)
    with P4RuntimeServer(
        Pipeline(), address="127.0.0.1:0", preconfigured=True, read_limits=limits
    ) as srv:
        ctl = Controller(srv.address)
        assert status(ctl.arbitrate(10)) == CODE.OK
        for job in range(1, 31):
            match = {"hdr.ina.job_id": job, "hdr.ina.tree_id": 0}
            entry = raw_entry("ina_job", match, "agg_node", agg_node(), metadata=meta)
            ctl.write(insert(te_entity(entry)))
        ctl.close()
        jobs = te_entity(p4r.TableEntry(table_id=INFO.table("ina_job").id))
        err = read_error(srv.address, jobs)
        assert err.code() == CODE.RESOURCE_EXHAUSTED, err.details()
        assert "more than 2,000,000 bytes" in err.details()
        one = te_entity(raw_entry("ina_job", JOB1))
        assert len(read(srv.address, one)) == 1
    with P4RuntimeServer(
        Pipeline(), address="127.0.0.1:0", preconfigured=True, read_limits=ReadLimits(time_limit=0)
    ) as srv:
        err = read_error(srv.address, counter_wildcard())
        assert err.code() == CODE.RESOURCE_EXHAUSTED, err.details()
        assert "longer than 0 s" in err.details()


# ---------------------------------------------------------------------- the data plane meanwhile


def peak_rss(pid: int) -> int:
    """The process's peak resident memory (VmHWM), bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


class Allreduces:
    """Two workers all-reducing one chunk after another through a softswitch, in threads; the
    completion times say how long the data plane ever stood still."""

    def __init__(self, wire_dir: str) -> None:
        self.clients = [
            InaClient(
                LoopbackWireTransport(port, wire_dir),
                job_id=1,
                run=1,
                rank=port - 1,
                n_workers=2,
                window=4,
                initial_rto=0.05,
                give_up_after=120,
            )
            for port in (1, 2)
        ]
        self.done: list[list[float]] = [[], []]
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._go = True  # decided once per round for both workers (every call on both)
        self._round = threading.Barrier(2, action=self._decide, timeout=130)
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in (0, 1)]

    def _decide(self) -> None:
        self._go = not self._stop.is_set()

    def _run(self, i: int) -> None:
        x = np.arange(4 * K, dtype=np.int32)
        try:
            while True:
                self._round.wait()
                if not self._go:
                    return
                total, _ = self.clients[i].allreduce_int32(x)
                assert np.array_equal(total, 2 * x)
                self.done[i].append(time.monotonic())
        except BaseException as exc:
            self.errors.append(exc)
            self._round.abort()

    def __enter__(self) -> Allreduces:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(130)
        for c in self.clients:
            c.transport.close()

    def count(self) -> int:
        return len(self.done[0])

    def longest_stall(self, start: float, end: float) -> float:
        """The longest time in [start, end] without an allreduce completing on worker 0."""
        times = [start, *(t for t in self.done[0] if start < t < end), end]
        return max(b - a for a, b in itertools.pairwise(times))


@pytest.fixture
def softswitch_process() -> Iterator[tuple[subprocess.Popen[str], dict[str, str]]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "inaemu.softswitch", "--grpc", "127.0.0.1:0", "--wires", "1-2"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line and line[0] == "READY", line
        yield proc, dict(kv.split("=", 1) for kv in line[1:])
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_data_plane_forwards_during_abusive_reads(
    softswitch_process: tuple[subprocess.Popen[str], dict[str, str]],
) -> None:
    proc, ready = softswitch_process
    address = ready["grpc"]
    topo = star(2, grpc=address)

    async def program() -> None:
        async with InaController(topo, push_pipeline=True) as ctl:
            await ctl.add_job(JobSpec(1, ("h1", "h2"), pool_size=8))

    asyncio.run(program())
    ctl = Controller(address)
    assert status(ctl.arbitrate(20)) == CODE.OK
    for mgid in range(100, 115):  # 15 groups of 4,096 replicas: just within one Read
        ctl.write(insert(big_group(mgid)))
    ctl.close()
    memory_before = peak_rss(proc.pid)
    with Allreduces(ready["wire_dir"]) as work:
        deadline = time.monotonic() + 30
        while work.count() < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert work.count() >= 20, work.errors
        start = time.monotonic()
        # the request: the counter wildcard 1,000 times (a million entities before)
        counters = read(address, *[counter_wildcard()] * 1000)
        for _ in range(3):  # every group, 61,455 replicas; and one big group repeated
            groups = read(address, groups_wildcard())
            one = read(address, *[groups_wildcard(100)] * 1000)
        end = time.monotonic()
        time.sleep(0.2)
    assert not work.errors, work.errors
    stall = work.longest_stall(start, end)
    assert stall < 1.0, f"no allreduce completed for {stall:.2f} s during the reads"
    growth = peak_rss(proc.pid) - memory_before
    assert growth < 100 << 20, f"the softswitch grew by {growth >> 20} MB during the reads"
    assert len(counters) == COUNTER_CELLS and len(groups) == 15 + 1 and len(one) == 1


# ---------------------------------------------------------------------- StreamChannel slots


def observers(address: str, n: int) -> list[RawStream]:
    """`n` streams that arbitrate without an election id and then say nothing."""
    streams = []
    for _ in range(n):
        stream = RawStream(address)
        stream.send(arbitration(None))
        reply = stream.inbox.get(timeout=10)
        assert isinstance(reply, p4r.StreamMessageResponse), reply
        streams.append(stream)
    return streams


def test_observers_cannot_lock_out_a_controller(
    server: P4RuntimeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    idle = observers(server.address, server.max_streams)
    try:
        # a controller takes the longest-idle observer's slot: inaemu commands work
        topology = tmp_path / "t.json"
        star(2, grpc=server.address).save(topology)
        assert cli.main(["pipeline", "check", "-t", str(topology)]) == 0, capsys.readouterr()
        assert cli.main(["routes", "-t", str(topology)]) == 0, capsys.readouterr()
        err = idle[0].end()  # its slot went to the first command, and then to the second
        assert err.code() == CODE.RESOURCE_EXHAUSTED, err.details()
        assert "this stream was the longest-idle observer" in err.details()
        idle += observers(server.address, 1)  # every slot taken again
        # one observer more finds every slot taken, and is told so
        late = RawStream(server.address)
        late.send(arbitration(None))
        err = late.end()
        assert err.code() == CODE.RESOURCE_EXHAUSTED, err.details()
        assert "an observer (no election id) gets none" in err.details()
        late.close()
    finally:
        for stream in idle:
            stream.close()


def test_silent_backups_give_way_to_a_controller_that_outranks_them(
    server: P4RuntimeServer, tmp_path: Path
) -> None:
    silent = [Controller(server.address) for _ in range(server.max_streams)]
    try:
        for n, ctl in enumerate(silent):
            assert status(ctl.arbitrate(n + 1)) in (CODE.OK, CODE.ALREADY_EXISTS)
        newcomer = Controller(server.address)
        assert status(newcomer.arbitrate(100)) == CODE.OK  # took backup 1's slot
        lowest = silent[0].next()
        while not isinstance(lowest, grpc.RpcError):  # skip its arbitration updates
            lowest = silent[0].next()
        assert lowest.code() == CODE.RESOURCE_EXHAUSTED, lowest.details()
        assert "the backup controller with the lowest election id" in lowest.details()
        # outranked by every controller there: refused, and told why
        topology = tmp_path / "t.json"
        star(2, grpc=server.address).save(topology)
        with pytest.raises(ControllerError) as info:
            asyncio.run(InaController(Topology.load(topology), election_id=1).connect())
        message = str(info.value)
        assert "StreamChannel slots are taken by controllers" in message, message
        assert message.endswith("the switch has no StreamChannel slot for this controller")
        newcomer.close()
    finally:
        for ctl in silent:
            ctl.close()


def _ended(streams: list[RawStream], timeout: float) -> list[grpc.RpcError]:
    """The errors that ended any of `streams`, waiting until one has (then 0.5 s more)."""
    ended: list[grpc.RpcError] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for stream in streams:
            while not stream.inbox.empty():
                item = stream.inbox.get_nowait()
                if isinstance(item, grpc.RpcError):
                    ended.append(item)
        if ended:
            deadline = min(deadline, time.monotonic() + 0.5)
        time.sleep(0.05)
    return ended


def test_streams_that_do_not_arbitrate_give_way_after_the_grace() -> None:
    with P4RuntimeServer(
        Pipeline(), address="127.0.0.1:0", preconfigured=True, arbitration_timeout=None
    ) as server:
        waiting = [RawStream(server.address) for _ in range(server.max_streams)]
        try:
            time.sleep(0.2)
            early = RawStream(server.address)  # none has waited the grace yet
            err = early.end()
            assert err.code() == CODE.RESOURCE_EXHAUSTED, err.details()
            assert "are opening" in err.details()
            early.close()
            time.sleep(ARBITRATION_GRACE)
            ctl = Controller(server.address)
            assert status(ctl.arbitrate(10)) == CODE.OK
            ctl.close()
            # the server evicts the stream it saw open first: gRPC's threads may see them open
            # in another order than the test made them, so any one of them, and only one
            ended = _ended(waiting, timeout=10)
            assert len(ended) == 1, [e.details() for e in ended]
            assert ended[0].code() == CODE.DEADLINE_EXCEEDED, ended[0].details()
            assert "MasterArbitrationUpdate" in ended[0].details()
        finally:
            for stream in waiting:
                stream.close()
