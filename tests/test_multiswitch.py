"""The controller over P4Runtime with many switches: a job's trees installed on every switch
in one change (rolled back when the last switch refuses), statistics per switch and per link,
and the CLI's job and stats commands on a leaf-spine."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from inaemu.cli import main as cli
from inaemu.common.wire import K
from inaemu.controller.jobs import JobError, JobSpec
from inaemu.controller.p4rt import Controller, ControllerError
from inaemu.p4.plan import CHILD_TABLE, EGRESS_TABLE, JOB_TABLE
from inaemu.softswitch.fabric import Fabric
from inaemu.softswitch.p4runtime.server import P4RuntimeServer
from inaemu.softswitch.state import ActionCall, TableEntry
from inaemu.topology.builders import bigraph, leaf_spine
from inaemu.topology.model import Topology
from tests.multiswitch import fabric_of
from tests.test_tree import chunk_frame


@contextmanager
def served(topo: Topology, fab: Fabric) -> Iterator[Topology]:
    """A P4Runtime server per switch of the fabric; the topology with their addresses."""
    with ExitStack() as stack:
        for name, sw in topo.switches.items():
            server = stack.enter_context(
                P4RuntimeServer(fab.switches[name], address="127.0.0.1:0", device_id=sw.device_id)
            )
            topo.switches[name] = replace(sw, grpc=server.address)
        yield topo


def job_state(fab: Fabric) -> dict[str, tuple[int, int, int, int]]:
    """Per switch: (ina_job entries, ina_child entries, ina_egress entries, groups)."""
    return {
        name: (
            len(p.tables[JOB_TABLE].entries),
            len(p.tables[CHILD_TABLE].entries),
            len(p.tables[EGRESS_TABLE].entries),
            len(p.multicast.groups),
        )
        for name, p in fab.switches.items()
    }


def test_a_refusal_on_the_last_switch_rolls_back_every_switch() -> None:
    """The job's two trees cross all four switches; s2, written last, already holds an entry
    for (job 1, tree 1) that someone else installed: the change fails naming s2, and every
    switch is left as it was. Without the foreign entry, the same job installs everywhere."""
    topo = leaf_spine(2, 2, 2)
    fab = fabric_of(topo)
    foreign = ActionCall("agg_node", (500, 4, 2, 99, 1, 0, 7))
    spec = JobSpec(1, tuple(topo.hosts), pool_size=8, n_trees=0)
    with served(topo, fab) as topo:

        async def scenario() -> None:
            async with Controller(topo, push_pipeline=True) as ctl:
                # after the pipeline push, which starts every switch empty
                fab.switches["s2"].tables[JOB_TABLE].insert(TableEntry((1, 1), foreign))
                before = job_state(fab)
                plan = ctl.jobs.plan_add(spec)
                assert sorted(plan.plans)[-1] == "s2" and plan.roots == ["s1", "s2"]
                assert all(plan.plans[sw].tables for sw in ("l1", "l2", "s1", "s2"))
                with pytest.raises(ControllerError, match="switch 's2' refused") as err:
                    await ctl.add_job(spec)
                assert "rolled back" in str(err.value) and "ALREADY_EXISTS" in str(err.value)
                assert job_state(fab) == before
                assert fab.switches["s2"].tables[JOB_TABLE].entries[(1, 1)].action == foreign
                assert ctl.jobs.jobs == {}
                fab.switches["s2"].tables[JOB_TABLE].delete((1, 1))
                record = await ctl.add_job(spec)
                assert record.max_trees_per_link == 1
                # leaves: two trees, two workers each; spines: the root of one tree each
                assert job_state(fab) == {
                    "l1": (2, 4, 2, 2),
                    "l2": (2, 4, 2, 2),
                    "s1": (1, 2, 0, 1),
                    "s2": (1, 2, 0, 1),
                }

        asyncio.run(scenario())


def test_stats_per_switch_and_per_link_each_way() -> None:
    """After chunks over two trees of a BiGraph, the report counts what every switch took in
    and sent out and, per link, what each end sent and the other counted arriving."""
    topo = bigraph(1, 4)
    fab = fabric_of(topo)
    with served(topo, fab) as topo:

        async def scenario() -> str:
            async with Controller(topo, push_pipeline=True) as ctl:
                rec = await ctl.add_job(JobSpec(1, tuple(topo.hosts), pool_size=4, n_trees=2))
                for seq in range(2):
                    for h in topo.hosts:
                        values = np.full(K, seq + 1, np.int32)
                        fab.send(h, chunk_frame(topo, h, values, seq, n_trees=2, window=4))
                report = await ctl.read_stats()
                links = report.links()
                assert len(links) == 4
                for lk in links:
                    a, b = fab.switches[lk.a], fab.switches[lk.b]
                    assert lk.a_sent == a.port_tx.packets[lk.a_port] == lk.b_received
                    assert lk.b_sent == b.port_tx.packets[lk.b_port] == lk.a_received
                used = {(a, b) for (a, _, b, _) in rec.link_trees}
                busy = {(lk.a, lk.b) for lk in links if lk.a_sent} | {
                    (lk.b, lk.a) for lk in links if lk.b_sent
                }
                assert busy == used  # traffic exactly on the links the trees use
                for name in topo.switches:
                    rx, tx = report.switch_packets(name)
                    assert rx == sum(fab.switches[name].port_rx.packets) > 0
                    assert tx == sum(fab.switches[name].port_tx.packets)
                return report.render()

        text = asyncio.run(scenario())
    assert "links between switches: packets each way" in text
    assert "s1:2 -> s3:2" in text and "switch s1: packets in" in text


def test_cli_job_add_reports_trees_and_stats_report_links(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topo = leaf_spine(2, 2, 2)
    fab = fabric_of(topo)
    with served(topo, fab) as topo:
        path = tmp_path / "ls.json"
        topo.save(path)
        t = str(path)
        assert cli.main(["pipeline", "push", "-t", t]) == 0
        assert cli.main(["routes", "-t", t]) == 0
        capsys.readouterr()
        assert cli.main(["job", "add", "-t", t, "--job", "1", "--workers", "h1,h2,h3,h4"]) == 0
        out = capsys.readouterr().out
        assert "job 1: 2 tree(s), roots 0:s1, 1:s2; at most 1 tree(s) per link each way" in out
        assert "InaClient(job_id=1, window=64, n_trees=2)" in out
        assert "job 1: l1 slots [0, 64) (up port 3, up port 4)" in out
        assert "job 1: s1 slots [0, 64) (root)" in out
        assert (
            cli.main(["job", "add", "-t", t, "--job", "2", "--workers", "h1,h3", "--trees", "1"])
            == 0
        )
        assert "job 2: 1 tree(s), roots 0:s1" in capsys.readouterr().out
        assert cli.main(["job", "list", "-t", t]) == 0
        listing = capsys.readouterr().out
        assert (
            "job 1: workers h1,h2,h3,h4 pool 64 trees 2 (roots s1,s2; at most 1 per link)"
            in listing
        )
        for h in ("h1", "h2", "h3", "h4"):
            fab.send(h, chunk_frame(topo, h, np.ones(K, np.int32), 0, n_trees=2, window=64))
        assert cli.main(["stats", "-t", t]) == 0
        stats = capsys.readouterr().out
        # in: two workers' chunks and the root's result; out: the partial and two results
        assert "switch l1: packets in 3, out 3; drops none" in stats
        assert "l1:3 -> s1:1         1 (1 in)   s1:1 -> l1:3         1 (1 in)" in stats
        assert "l1:4 -> s2:1         0 (0 in)" in stats  # chunk 0: tree 0 only
        assert cli.main(["job", "remove", "-t", t, "--job", "1"]) == 0
        assert cli.main(["job", "remove", "-t", t, "--job", "2"]) == 0
    assert all(state == (0, 0, 0, 0) for state in job_state(fab).values())


def test_the_controller_api_needs_no_command_line(tmp_path: Path) -> None:
    """`controller.api`, what the subcommands and the Mininet scenario call: each operation
    over the topology and job state files, returning values, not text. A job added is in the
    state file and the switches, its run ids count from 1, a refusal comes before any switch
    is touched and says what to fix, and a removed job leaves the switches empty."""
    from inaemu.controller import api

    topo = leaf_spine(2, 2, 2)
    fab = fabric_of(topo)
    with served(topo, fab) as topo:
        path = tmp_path / "ls.json"
        topo.save(path)
        files = api.NetworkFiles(path)
        assert sorted(api.push_pipeline(files).switches) == ["l1", "l2", "s1", "s2"]
        api.install_routes(files)
        record = api.add_job(files, JobSpec(1, ("h1", "h2", "h3", "h4"), n_trees=0))
        assert record.roots == ["s1", "s2"] and record.spec.n_trees == 2
        assert api.describe_trees(record).startswith("job 1: 2 tree(s), roots 0:s1, 1:s2")
        assert job_state(fab)["l1"] == (2, 4, 2, 2)
        assert files.state_path == tmp_path / "ls.json.jobs.json"
        assert [r.spec for r in api.list_jobs(files)] == [record.spec]
        assert [api.new_run(files, 1) for _ in range(2)] == [1, 2]
        before = job_state(fab)
        with pytest.raises(ControllerError, match="unknown switch 'x1'"):
            api.set_loss(files, "x1", [1], 0.5)
        with pytest.raises(ValueError, match=r"within 0\.\.1"):
            api.set_loss(files, "l1", [1], 1.5)
        assert job_state(fab) == before
        api.set_loss(files, "l1", [1, 2], 0.25)
        for h in ("h1", "h2", "h3", "h4"):
            fab.send(h, chunk_frame(topo, h, np.ones(K, np.int32), 0, n_trees=2, window=64))
        report = api.read_stats(files)
        assert sum(report.switch_packets("l2")) > 0
        assert api.remove_job(files, 1) == []
        assert all(state == (0, 0, 0, 0) for state in job_state(fab).values())
        assert api.list_jobs(files) == []
        with pytest.raises(JobError, match="job 1 is not installed"):
            api.new_run(files, 1)
