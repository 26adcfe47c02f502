"""The controller against softswitches over real gRPC (P4Runtime)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import pytest
from finsy.proto import p4r

from inaemu.common.wire import (
    INA_OFFSET,
    INA_UDP_PORT,
    Endpoint,
    Flag,
    FrameTemplate,
    InaHeader,
    K,
    Opcode,
    pack_frames,
    pack_payloads,
    parse_frames,
    slot_field,
)
from inaemu.controller.jobs import JobError, JobSpec
from inaemu.controller.p4rt import Controller, ControllerError, PipelineFiles
from inaemu.p4.constants import P4INFO_PATH, DropReason
from inaemu.p4.plan import CHILD_TABLE
from inaemu.softswitch.fabric import Fabric
from inaemu.softswitch.p4runtime.server import P4RuntimeServer
from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.state import ActionCall, TableEntry
from inaemu.topology.builders import leaf_spine, star
from inaemu.topology.model import Topology

T = TypeVar("T")


@contextmanager
def served(topo: Topology, pipelines: dict[str, Pipeline]) -> Iterator[Topology]:
    """A P4Runtime server per switch; returns the topology with their real addresses."""
    with ExitStack() as stack:
        for name in topo.switches:
            server = stack.enter_context(P4RuntimeServer(pipelines[name], address="127.0.0.1:0"))
            topo.switches[name] = replace(topo.switches[name], grpc=server.address, device_id=1)
        yield topo


def frame(
    topo: Topology,
    host: str,
    values: npt.NDArray[np.int32],
    seq: int,
    job: int = 1,
    tree: int = 0,
    window: int = 8,
) -> bytes:
    h = topo.hosts[host]
    return pack_frames(
        FrameTemplate(Endpoint(h.mac, h.ip), Endpoint("02:00:00:00:00:fe", "10.0.0.254")),
        pack_payloads(
            opcode=Opcode.SUM,
            job_id=job,
            tree_id=tree,
            slot=slot_field(seq % window, (seq // window) % 2),
            seq=seq,
            values=values[None, :],
        ),
    ).tobytes()


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def test_job_lifecycle_on_one_switch() -> None:
    topo = star(4)
    pipe = Pipeline()
    with served(topo, {"s1": pipe}) as topo:

        async def scenario() -> None:
            async with Controller(topo, push_pipeline=True) as ctl:
                await ctl.install_routes()
                await ctl.add_job(JobSpec(1, ("h1", "h2", "h3"), pool_size=8))
                assert len(pipe.ina_child.entries) == 3
                out = []
                for i, h in enumerate(("h1", "h2", "h3")):
                    out += pipe.process(i + 1, frame(topo, h, np.full(K, i + 1, np.int32), 0))
                assert sorted(p for p, _ in out) == [1, 2, 3]
                assert all(parse_frames(f)["values"][0][0] == 6 for _, f in out)
                report = await ctl.read_stats()
                rows = report.job_ports(1)
                assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
                    ("s1", 1, "h1", 1),
                    ("s1", 2, "h2", 1),
                    ("s1", 3, "h3", 1),
                ]
                assert report.switches["s1"].events()["COMPLETE_ROOT"] == 1
                assert "job 1" in report.render()
                await ctl.remove_job(1)
                assert not pipe.ina_job.entries and not pipe.ina_child.entries
                assert not pipe.ina_egress.entries and not pipe.multicast.groups
                assert len(pipe.ipv4_lpm.entries) == 4  # routes stay

        run(scenario())


def test_refusals_leave_the_switch_unchanged() -> None:
    topo = star(4)
    pipe = Pipeline()
    with served(topo, {"s1": pipe}) as topo:

        async def scenario() -> None:
            async with Controller(topo, push_pipeline=True) as ctl:
                await ctl.add_job(JobSpec(1, ("h1", "h2"), pool_size=1000))
                snapshot = {n: dict(t.entries) for n, t in pipe.tables.items()}
                groups = dict(pipe.multicast.groups)
                with pytest.raises(JobError, match="already installed"):
                    await ctl.add_job(JobSpec(1, ("h3",)))
                with pytest.raises(JobError, match="no 100 contiguous free slots"):
                    await ctl.add_job(JobSpec(2, ("h3", "h4"), pool_size=100))
                # an entry the controller does not know about makes the switch refuse one
                # update of the batch: everything else of the job is rolled back
                pipe.ina_child.insert(
                    TableEntry((2, 0, 4, INA_UDP_PORT), ActionCall("set_child", (9,)))
                )
                snapshot[CHILD_TABLE] = dict(pipe.ina_child.entries)
                with pytest.raises(ControllerError, match="ALREADY_EXISTS"):
                    await ctl.add_job(JobSpec(2, ("h3", "h4"), pool_size=8))
                assert {n: dict(t.entries) for n, t in pipe.tables.items()} == snapshot
                assert pipe.multicast.groups == groups
                assert 2 not in ctl.jobs.jobs
                with pytest.raises(JobError, match="not installed"):
                    await ctl.remove_job(5)

        run(scenario())


def test_non_primary_and_incompatible_pipeline(tmp_path: Path) -> None:
    topo = star(2)
    pipe = Pipeline()
    with served(topo, {"s1": pipe}) as topo:

        async def scenario() -> None:
            async with Controller(topo, push_pipeline=True, election_id=20):
                with pytest.raises(ControllerError, match="another controller is primary"):
                    async with Controller(topo, election_id=5, push_pipeline=False):
                        pass
            bad = tmp_path / "bad.p4info.txt"
            bad.write_text(P4INFO_PATH.read_text().replace("size: 4096", "size: 4097"))
            refused = r"ina_child.*; the switch refused the pipeline"
            with pytest.raises(ControllerError, match=refused):
                async with Controller(topo, push_pipeline=True, pipeline=PipelineFiles(p4info=bad)):
                    pass
            assert not pipe.ina_job.entries

        run(scenario())


def test_a_connection_waits_for_an_earlier_one_with_its_election_id() -> None:
    """Commands run back to back: the switch may not have seen the previous connection end
    when the next one (same election id) arrives. It waits for it instead of failing."""
    topo = star(2)
    with served(topo, {"s1": Pipeline()}) as topo:

        async def scenario() -> None:
            first = Controller(topo, push_pipeline=True)
            await first.connect()

            async def end_first() -> None:
                await asyncio.sleep(0.5)
                await first.close()

            ending = asyncio.create_task(end_first())
            async with Controller(topo) as second:
                assert second.switches["s1"].is_primary
                assert ending.done()  # it got in only after the first one ended
            await ending
            lasting = Controller(topo)
            await lasting.connect()
            try:
                with pytest.raises(ControllerError, match=r"election id \(10\) has not ended"):
                    async with Controller(topo):
                        pass
            finally:
                await lasting.close()

        run(scenario())


def test_commands_check_the_pipeline_and_never_replace_it(tmp_path: Path) -> None:
    """Without push_pipeline a controller only checks: no pipeline, or another P4Info, stops
    it with what to run, and the switch keeps what it had."""
    topo = star(2)
    pipe = Pipeline()
    with served(topo, {"s1": pipe}) as topo:

        async def scenario() -> None:
            with pytest.raises(
                ControllerError, match=r"has no forwarding pipeline; run `inaemu pipeline push"
            ):
                async with Controller(topo):
                    pass
            files = PipelineFiles(device_config=b"the bmv2 json")
            async with Controller(topo, pipeline=files, push_pipeline=True) as ctl:
                await ctl.add_job(JobSpec(1, ("h1", "h2"), pool_size=4))
            other = tmp_path / "other.p4info.txt"
            other.write_text(P4INFO_PATH.read_text().replace("size: 4096", "size: 4097"))
            with pytest.raises(
                ControllerError, match=r"runs another P4 program .*nothing was changed"
            ):
                async with Controller(topo, pipeline=PipelineFiles(p4info=other)):
                    pass
            async with Controller(topo) as ctl:  # the default device config differs: no push
                await ctl.read_stats()
            assert len(pipe.ina_child.entries) == 2  # the job survived every connection

        run(scenario())


def test_unreachable_switch_is_named() -> None:
    topo = star(1)
    topo.switches["s1"] = replace(topo.switches["s1"], grpc="127.0.0.1:1")

    async def scenario() -> None:
        with pytest.raises(ControllerError, match=r"cannot program switch 's1' at 127\.0\.0\.1:1"):
            async with Controller(topo, push_pipeline=True):
                pass

    run(scenario())


def test_leaf_spine_job_aggregates_across_three_switches() -> None:
    """Two leaves and two spines; two trees rooted at different spines (multi-root)."""
    topo = leaf_spine(2, 2, 2)
    fab = Fabric()
    for name in topo.switches:
        fab.add_switch(name)
    for lk in topo.links:
        if lk.a_port is not None and lk.b_port is not None:
            fab.link(lk.a, lk.a_port, lk.b, lk.b_port)
        else:
            host, (sw, port) = (
                (lk.a, (lk.b, lk.b_port)) if lk.a_port is None else (lk.b, (lk.a, lk.a_port))
            )
            assert port is not None
            fab.attach_host(host, sw, port)
    with served(topo, fab.switches) as topo:
        hosts = ("h1", "h2", "h3", "h4")

        async def scenario() -> None:
            async with Controller(topo, push_pipeline=True) as ctl:
                await ctl.add_job(JobSpec(1, hosts, pool_size=8, n_trees=2))

        run(scenario())
        rng = np.random.default_rng(1)
        for seq in range(4):  # chunks 0..3: trees 0, 1, 0, 1
            vals = {h: rng.integers(-999, 999, K, dtype=np.int32) for h in hosts}
            total = sum(v.astype(np.int64) for v in vals.values())
            got = []
            for h in hosts:
                got += fab.send(h, frame(topo, h, vals[h], seq, tree=seq % 2))
            assert sorted(h for h, _ in got) == list(hosts)
            for _, f in got:
                assert np.array_equal(parse_frames(f)["values"][0], total)
                hdr = InaHeader.unpack(f[INA_OFFSET:])
                assert hdr.flags == Flag.RESULT and hdr.contrib == 4 and hdr.seq == seq
        roots = [fab.switches[s].ina_events.packets[2] for s in ("s1", "s2")]
        assert roots == [2, 2]
        assert all(sum(fab.switches[s].ina_drops.packets) == 0 for s in topo.switches)
        assert int(DropReason.NONE) == 0


def test_removal_with_an_entry_missing_rolls_back() -> None:
    """Someone deleted one of the job's entries behind the controller's back: the removal
    fails with NOT_FOUND, names it, and puts back what it had already deleted."""
    topo = star(3)
    pipe = Pipeline()
    with served(topo, {"s1": pipe}) as topo:

        async def scenario() -> None:
            async with Controller(topo, push_pipeline=True) as ctl:
                await ctl.add_job(JobSpec(1, ("h1", "h2", "h3"), pool_size=4))
                pipe.ina_child.delete((1, 0, 2, INA_UDP_PORT))
                snapshot = {n: dict(t.entries) for n, t in pipe.tables.items()}
                groups = {k: list(v) for k, v in pipe.multicast.groups.items()}
                with pytest.raises(ControllerError, match="NOT_FOUND"):
                    await ctl.remove_job(1)
                assert {n: dict(t.entries) for n, t in pipe.tables.items()} == snapshot
                assert {k: list(v) for k, v in pipe.multicast.groups.items()} == groups
                assert 1 in ctl.jobs.jobs

        run(scenario())


def test_cli_job_commands(tmp_path: Path) -> None:
    """inaemu topo / job add / job list / stats / job remove against a live softswitch."""
    import subprocess
    import sys

    pipe = Pipeline()
    with P4RuntimeServer(pipe, address="127.0.0.1:0") as server:
        topo_file = tmp_path / "topology.json"
        topo = star(3)
        topo.switches["s1"] = replace(topo.switches["s1"], grpc=server.address)
        topo.save(topo_file)

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "inaemu.cli", *args],
                capture_output=True,
                text=True,
                timeout=60,
            )

        out = cli("stats", "-t", str(topo_file))
        assert out.returncode == 1 and "inaemu pipeline push -t" in out.stderr
        config = tmp_path / "ina.json"
        config.write_bytes(b"pushed once")
        out = cli("pipeline", "push", "-t", str(topo_file), "--device-config", str(config))
        assert out.returncode == 0 and "ina.p4 installed on the switch" in out.stdout, out.stderr
        out = cli(
            "job", "add", "-t", str(topo_file), "--job", "7", "--workers", "h1,h2", "--pool", "16"
        )
        assert out.returncode == 0, out.stderr
        assert "job 7: s1 slots [0, 16) (root)" in out.stdout
        assert len(pipe.ina_child.entries) == 2
        out = cli(
            "job", "add", "-t", str(topo_file), "--job", "8", "--workers", "h3", "--pool", "16"
        )
        assert "s1 slots [16, 32)" in out.stdout  # the state file kept job 7's pool
        assert "job 7: workers h1,h2" in cli("job", "list", "-t", str(topo_file)).stdout
        assert "job 7: packets in from each child" in cli("stats", "-t", str(topo_file)).stdout
        assert cli("pipeline", "check", "-t", str(topo_file)).returncode == 0
        kept = server.get_pipeline_config(
            p4r.GetForwardingPipelineConfigRequest(
                device_id=1, response_type=p4r.GetForwardingPipelineConfigRequest.ALL
            )
        )
        assert kept.config.p4_device_config == b"pushed once"  # no command re-pushed it
        out = cli("job", "add", "-t", str(topo_file), "--job", "9", "--workers", "h9")
        assert out.returncode == 1 and "unknown host 'h9'" in out.stderr
        assert cli("job", "remove", "-t", str(topo_file), "--job", "7").returncode == 0
        assert sorted(k[0] for k in pipe.ina_child.entries) == [8]
        # the state file keeps each job's epochs and the last issued: a reinstallation of job 7
        # through a new process gets a new epoch, so no slot state of the first one is reused
        state = json.loads((tmp_path / "topology.json.jobs.json").read_text())
        assert state["epochs"] == {"s1": 2} and state["jobs"][0]["epochs"] == {"s1": 2}
        out = cli("job", "add", "-t", str(topo_file), "--job", "7", "--workers", "h1,h2")
        assert out.returncode == 0, out.stderr
        epoch = pipe.ina_job.entries[(7, 0)].action.params[-1]
        assert epoch == 3, pipe.ina_job.entries[(7, 0)]
        (tmp_path / "bad.json").write_text('{"switches": {}, "links": []}')
        out = cli("stats", "-t", str(tmp_path / "bad.json"))
        assert out.returncode == 1 and "no switches" in out.stderr


def test_switch_program_from_the_topology(tmp_path: Path) -> None:
    """A switch's "program" (bmv2 JSON for simple_switch_grpc) is pushed as its device
    config; a missing one is refused before any switch is touched."""
    pipe = Pipeline()
    with P4RuntimeServer(pipe, address="127.0.0.1:0") as server:
        blob = tmp_path / "ina.json"
        blob.write_text('{"program": "ina.p4"}')
        topo = star(2)
        topo.switches["s1"] = replace(topo.switches["s1"], grpc=server.address, program=str(blob))
        assert Topology.from_json(topo.to_json()).switches["s1"].program == str(blob)

        async def scenario() -> None:
            async with Controller(topo, push_pipeline=True) as ctl:
                await ctl.add_job(JobSpec(1, ("h1", "h2"), pool_size=4))
            missing = replace(topo.switches["s1"], program=str(tmp_path / "nope.json"))
            topo.switches["s1"] = missing
            with pytest.raises(ControllerError, match=r"nope\.json' not found"):
                async with Controller(topo, push_pipeline=True):
                    pass

        run(scenario())
        assert len(pipe.ina_child.entries) == 2
