"""The fast data plane's contract with the control plane (softswitch/fast/engine.py): a change
to tables or groups, however made, reaches the next frame; the counters a reader sees under the
lock are the kernel's, and a counter a controller writes keeps its value; the P4Runtime server
drives it as it drives the reference; batches whose copies outgrow the output are finished;
the softswitch process says which data plane it runs and how it got ready.

(That both data planes agree frame for frame is tests/test_dataplane_agreement.py's, and the
conformance cases run on both: tests/test_conformance.py.)"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import finsy as fy
import numpy as np
import pytest
from finsy.p4entity import P4Entity

from inaemu.common.wire import (
    INA_UDP_PORT,
    Endpoint,
    FrameTemplate,
    K,
    Opcode,
    pack_frames,
    pack_payloads,
    parse_frames,
    slot_field,
)
from inaemu.controller.star import star_job_plan
from inaemu.p4.constants import P4INFO_PATH, DropReason, Event
from inaemu.softswitch.batch import FrameBatch
from inaemu.softswitch.p4runtime.server import P4RuntimeServer
from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.plan import apply_to_pipeline
from inaemu.softswitch.state import ActionCall
from tests.helpers import workers

ROOT = Path(__file__).resolve().parents[1]
E = TypeVar("E", bound=P4Entity)
P = TypeVar("P", bound=Pipeline)
SWITCH = Endpoint("02:00:00:00:00:fe", "10.0.0.254")
JOB = (1, 0)


def contribution(port: int, chunk: int, value: int = 1, job: int = 1) -> bytes:
    return pack_frames(
        FrameTemplate(Endpoint(f"02:00:00:00:00:{port:02x}", f"10.0.0.{port}"), SWITCH),
        pack_payloads(
            opcode=Opcode.SUM,
            job_id=job,
            tree_id=0,
            slot=slot_field(chunk % 4, (chunk // 4) % 2),
            seq=chunk,
            values=np.full((1, K), value, np.int32),
        ),
    ).tobytes()


def star(pipe: P, n: int = 2) -> P:
    apply_to_pipeline(pipe, star_job_plan(1, workers(n), base=0, pool_size=4, mgid=1))
    return pipe


def fanin_one(pipe: Pipeline) -> None:
    """The job's agg_node entry, its fan-in set to 1 in place (as the P4Runtime server's
    MODIFY assigns the entry's action)."""
    entry = pipe.ina_job.entries[JOB]
    base, pool, _fanin, *rest = entry.action.params
    entry.action = ActionCall("agg_node", (base, pool, 1, *rest))


def locked(change: Callable[[Pipeline], None]) -> Callable[[Pipeline], None]:
    def run(pipe: Pipeline) -> None:
        with pipe.lock:
            change(pipe)

    return run


# ---------------------------------------------------------------------- control-plane changes


CHANGES: dict[str, Callable[[Pipeline], None]] = {
    # through the table's methods, no lock taken (tests, plans)
    "modify method": lambda p: p.ina_job.modify(
        JOB, ActionCall("agg_node", (0, 4, 1, *p.ina_job.entries[JOB].action.params[3:]))
    ),
    # in place under the lock, as the P4Runtime server writes an entry, a default, a group
    "entry assigned under the lock": locked(fanin_one),
    "group replaced under the lock": locked(lambda p: p.multicast.groups.__setitem__(1, [(2, 0)])),
}


@pytest.mark.parametrize("how", CHANGES)
def test_a_change_reaches_the_next_frame(how: str) -> None:
    """Fan-in 2 -> 1 (or group {1, 2} -> {2}): the very next contribution behaves as the
    changed table says, on the fast data plane as on the reference."""
    for pipe in (Pipeline(), Pipeline(compiled=True)):
        star(pipe)
        assert pipe.process(1, contribution(1, 0)) == []  # waits for worker 2
        if how == "group replaced under the lock":
            CHANGES[how](pipe)
            out = pipe.process(2, contribution(2, 0))
            assert [port for port, _ in out] == [2], f"compiled={pipe.compiled}"
        else:
            CHANGES[how](pipe)
            out = pipe.process(1, contribution(1, 1))
            assert sorted(port for port, _ in out) == [1, 2], f"compiled={pipe.compiled}"


def test_a_change_made_while_holding_the_lock_reaches_a_frame_in_the_same_hold() -> None:
    pipe = star(Pipeline(compiled=True))
    pipe.process(1, contribution(1, 0))
    with pipe.lock:
        fanin_one(pipe)
        out = pipe.process(1, contribution(1, 1))
        assert sorted(port for port, _ in out) == [1, 2]
        del pipe.ina_job.entries[JOB]  # as a server's undo: the dict itself
        pipe.process(1, contribution(1, 2))
    assert pipe.ina_drops.packets[DropReason.UNKNOWN_JOB] == 1


def test_counters_are_the_kernels_and_keep_what_a_controller_writes() -> None:
    pipe = star(Pipeline(compiled=True))
    frame = contribution(1, 0)
    pipe.process_batch(FrameBatch.of([(1, frame), (2, contribution(2, 0)), (3, b"\0" * 10)]))
    assert pipe.port_rx.packets[1:4] == [1, 1, 1]
    assert pipe.port_tx.packets[1:3] == [1, 1]
    assert pipe.ina_events.packets[Event.COMPLETE_ROOT] == 1
    assert pipe.ina_drops.packets[DropReason.TRUNCATED] == 1
    child = pipe.ina_child.entries[(1, 0, 1, INA_UDP_PORT)]
    assert (child.packets, child.bytes) == (1, len(frame))
    with pipe.lock:  # a controller's counter writes (P4Runtime MODIFY)
        pipe.port_rx.packets[1] = 100
        child.packets = 50
    pipe.process(1, contribution(1, 1))
    assert pipe.port_rx.packets[1] == 101 and child.packets == 51
    pipe.reset_state()
    assert sum(pipe.port_rx.packets) == 0 and child.packets == 0
    assert not pipe.registers.cells.any() and not any(pipe.registers.owner)


def test_readers_under_the_lock_see_whole_batches() -> None:
    """While batches run in one thread, a reader holding the lock always finds every packet
    accounted for (docs/protocol.md section 9): counters never show half a batch."""
    pipe = star(Pipeline(compiled=True), 4)
    batches = [
        FrameBatch.of([(w, contribution(w, c)) for c in range(i, i + 8) for w in (1, 2, 3, 4)])
        for i in range(0, 400, 8)
    ]
    done = threading.Event()
    errors: list[BaseException] = []

    def traffic() -> None:
        try:
            for b in batches:
                pipe.process_batch(b)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=traffic)
    thread.start()
    reads = 0
    while not done.is_set() or reads == 0:
        with pipe.lock:
            e = pipe.ina_events.packets
            taken = e[Event.CONTRIBUTION] + e[Event.RETX_REPLY] + e[Event.RETX_UP]
            assert sum(pipe.port_rx.packets) == sum(pipe.ina_drops.packets) + taken
            assert sum(pipe.port_tx.packets) == 4 * e[Event.COMPLETE_ROOT]
        reads += 1
    thread.join(10)
    assert not errors
    assert pipe.ina_events.packets[Event.COMPLETE_ROOT] == 400


def test_a_batch_whose_copies_outgrow_the_output_is_finished() -> None:
    """A group of 600 ports and a batch of 100 single-worker rounds: 60,000 copies, far past
    the output's first size; every frame is processed once and all copies come out."""
    frames = [(1, contribution(1, c, value=c)) for c in range(100)]
    outs = []
    for pipe in (Pipeline(), Pipeline(compiled=True)):
        star(pipe, 1)
        pipe.multicast.modify(1, [(p, 0) for p in range(600)])
        out = pipe.process_batch(FrameBatch.of(frames))
        outs.append(list(out))
        assert pipe.ina_events.packets[Event.COMPLETE_ROOT] == 100
    assert len(outs[1]) == 60_000 and outs[1] == outs[0]


# ---------------------------------------------------------------------- the kernel's constants


def test_kernel_constants_are_the_enums_and_key_numbas_cache() -> None:
    """The kernel names every drop reason, event, flag and opcode by the enums' own names and
    values (built from them, not listed again); numba keys its cache on the kernel's closure
    as pickled, which is these constants and nothing else: a value changed is a new key, and
    the key is the same in every process (else every process would compile again)."""
    from numba.core import serialize

    from inaemu.common.wire import Flag
    from inaemu.softswitch.fast.kernel import constants

    dumps = cast(Callable[[object], bytes], serialize.dumps)
    c = constants()
    for kind, values in ((DropReason, c.drop), (Event, c.event), (Flag, c.flag), (Opcode, c.op)):
        assert cast(Any, values)._asdict() == {m.name: int(m) for m in kind}
    drops = cast(Any, c.drop)
    renumbered = c._replace(drop=type(drops)(*(v + 1 for v in drops)))
    assert dumps((renumbered,)) != dumps((c,)) == dumps((constants(),))
    # what numba's cache key hashes: the kernel's closure, as pickled in a fresh process
    code = (
        "from numba.core.serialize import dumps; from inaemu.softswitch.fast import engine; "
        "f = engine._kernel().dispatcher.py_func; "
        "print(dumps(tuple(x.cell_contents for x in f.__closure__)).hex())"
    )
    keys = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
        ).stdout.strip()
        for _ in range(2)
    }
    assert keys == {dumps((c,)).hex()}


def test_a_kernel_whose_parameters_are_not_its_records_fields_is_refused() -> None:
    """Callers hand the kernel records (`*frames`, in the fields' order): a kernel whose
    parameters are in another order would take one array for another, so it is refused as it
    is made (the batch kernel is checked so in make_kernel)."""
    from inaemu.common.jit import check_parameters
    from inaemu.softswitch.batch import Frames

    def swapped(in_buf: object, in_length: object, in_offset: object, in_port: object) -> None:
        pass

    def named(in_buf: object, in_offset: object, in_length: object, in_port: object) -> None:
        pass

    with pytest.raises(TypeError, match="are not the records'"):
        check_parameters(swapped, (Frames, "in_"))
    check_parameters(named, (Frames, "in_"))


# ---------------------------------------------------------------------- P4Runtime


@pytest.fixture
def server() -> Iterator[P4RuntimeServer]:
    with P4RuntimeServer(Pipeline(compiled=True), address="127.0.0.1:0") as srv:
        yield srv


def run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))  # type: ignore[arg-type]


def switch(server: P4RuntimeServer) -> fy.Switch:
    options = fy.SwitchOptions(p4info=P4INFO_PATH, p4blob=b"softswitch", device_id=server.device_id)
    return fy.Switch("s1", server.address, options)


def read(sw: fy.Switch, entity: E) -> AsyncIterator[E]:
    """`sw.read(entity)`: finsy declares its overloads `async def ... -> AsyncGenerator`, which
    mypy takes for a coroutine returning a generator; at run time it is the generator."""
    return sw.read(entity)  # type: ignore[return-value]


def test_p4runtime_server_drives_the_fast_data_plane(server: P4RuntimeServer) -> None:
    """Programmed, modified and read over P4Runtime: what it reads is what the kernel counted,
    a MODIFY reaches the next packet, a counter it writes keeps its value."""
    p = server.pipeline
    job = fy.P4TableMatch({"hdr.ina.job_id": 1, "hdr.ina.tree_id": 0})
    node = dict(base=0, pool_size=4, fanin=2, child_mgid=1, is_root=1, parent_port=0, epoch=1)
    entities: list[P4Entity] = [
        fy.P4TableEntry("ina_job", match=job, action=fy.P4TableAction("agg_node", **node)),
        fy.P4MulticastGroupEntry(1, replicas=[1, 2]),
    ]
    for index, port in enumerate((1, 2)):
        key = {
            "hdr.ina.job_id": 1,
            "hdr.ina.tree_id": 0,
            "standard_metadata.ingress_port": port,
            "udp_port": INA_UDP_PORT,
        }
        entities.append(
            fy.P4TableEntry(
                "ina_child",
                match=fy.P4TableMatch(key),
                action=fy.P4TableAction("set_child", index=index),
            )
        )

    async def program() -> None:
        async with switch(server) as sw:
            await sw.insert(entities)

    run(program())
    a, b = contribution(1, 0, 3), contribution(2, 0, 4)
    assert p.process(1, a) == []
    out = p.process(2, b)
    assert sorted(port for port, _ in out) == [1, 2]
    assert all((parse_frames(frame)[0]["values"] == 7).all() for _, frame in out)

    async def read_modify_read() -> None:
        async with switch(server) as sw:
            rx = [e async for e in read(sw, fy.P4CounterEntry("port_rx", index=1))]
            assert [(e.packet_count, e.byte_count) for e in rx] == [(1, len(a))]
            direct = [e async for e in read(sw, fy.P4DirectCounterEntry("ina_child_stats"))]
            assert sorted(e.packet_count for e in direct) == [1, 1]
            ten = fy.P4CounterData(packet_count=10, byte_count=0)
            await sw.modify([fy.P4CounterEntry("port_rx", index=1, data=ten)])
            fanin_1 = fy.P4TableAction("agg_node", **{**node, "fanin": 1})
            await sw.modify([fy.P4TableEntry("ina_job", match=job, action=fanin_1)])

    run(read_modify_read())
    out = p.process(1, contribution(1, 1, 5))  # fan-in 1 now: completes at once
    assert sorted(port for port, _ in out) == [1, 2]

    async def read_again() -> None:
        async with switch(server) as sw:
            rx = [e async for e in read(sw, fy.P4CounterEntry("port_rx", index=1))]
            assert [(e.packet_count, e.byte_count) for e in rx] == [(11, len(a))]
            events = [e async for e in read(sw, fy.P4CounterEntry("ina_events"))]
            assert events[Event.COMPLETE_ROOT].packet_count == 2

    run(read_again())


# ---------------------------------------------------------------------- the process


@pytest.mark.parametrize("dataplane", ["fast", "reference"])
def test_softswitch_process_says_which_data_plane_it_runs(dataplane: str) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inaemu.softswitch",
            "--grpc",
            "127.0.0.1:0",
            "--dataplane",
            dataplane,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY"), line + (proc.stderr.read() if proc.stderr else "")
        fields = dict(kv.split("=", 1) for kv in line.split()[1:])
        assert fields["dataplane"] == dataplane
        if dataplane == "fast":  # loaded from numba's cache or compiled, and how long it took
            source, _, seconds = fields["warmup"].partition(":")
            assert source in ("cache", "compiled") and seconds.endswith("s")
        else:
            assert "warmup" not in fields
    finally:
        proc.terminate()
        proc.wait(10)


def test_softswitch_process_refuses_an_unknown_data_plane() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "inaemu.softswitch", "--dataplane", "turbo"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2 and "invalid choice: 'turbo'" in proc.stderr
