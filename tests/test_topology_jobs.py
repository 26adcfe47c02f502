"""Topologies (file format, builders, validation) and job planning (trees, pools, groups)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from inaemu.controller.jobs import (
    MAX_EPOCH,
    JobError,
    JobManager,
    JobRecord,
    JobSpec,
    next_epoch,
    route_plans,
)
from inaemu.controller.stats import StatsReport, SwitchCounters
from inaemu.p4.constants import INA_SLOTS
from inaemu.softswitch.plan import apply_to_pipeline
from inaemu.topology.addresses import ip_int
from inaemu.topology.builders import fat_tree, leaf_spine, star
from inaemu.topology.model import Topology, TopologyError


def test_json_round_trip(tmp_path: Path) -> None:
    topo = leaf_spine(2, 2, 2)
    path = tmp_path / "topology.json"
    topo.save(path)
    again = Topology.load(path)
    assert again.to_json() == topo.to_json()
    assert again.host_attachment("h3") == ("l2", 1)
    assert again.switch_neighbours("l1") == {3: ("s1", 1), 4: ("s2", 1)}


def test_tutorials_style_file() -> None:
    topo = Topology.from_json(
        {
            "hosts": {
                "h1": {"ip": "10.0.1.1/24", "mac": "08:00:00:00:01:11"},
                "h2": {"ip": "10.0.2.2/24", "mac": "08:00:00:00:02:22"},
            },
            "switches": {"s1": {"runtime_json": "s1-runtime.json"}, "s2": {}},
            "links": [["h1", "s1-p1"], ["h2", "s2-p1"], ["s1-p2", "s2-p2", "bw=10"]],
        }
    )
    assert topo.links[2].options == "bw=10"
    assert topo.host_attachment("h2") == ("s2", 1)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"hosts": {}, "switches": {}, "links": []}, "no switches"),
        ({"switches": {"s1": {}}, "links": [["h9", "s1-p1"]]}, "unknown node 'h9'"),
        (
            {
                "hosts": {"h1": {"ip": "10.0.0.1", "mac": "x"}},
                "switches": {"s1": {}},
                "links": [["h1", "s1-p1"]],
            },
            "host 'h1'",
        ),
        (
            {
                "hosts": {
                    "h1": {"ip": "10.0.0.1", "mac": "00:00:00:00:00:01"},
                    "h2": {"ip": "10.0.0.2", "mac": "00:00:00:00:00:02"},
                },
                "switches": {"s1": {}},
                "links": [["h1", "s1-p1"], ["h2", "s1-p1"]],
            },
            "port 1 of switch 's1' is used by links #0 and #1",
        ),
        (
            {
                "hosts": {"h1": {"ip": "10.0.0.1", "mac": "00:00:00:00:00:01"}},
                "switches": {"s1": {}},
                "links": [],
            },
            "host 'h1' has 0 links",
        ),
        ({"switches": {"s1": {}}, "links": [["s1", "s1-p2"]]}, "needs a port"),
        ({"switches": {"s1": {"colour": "red"}}}, "switch 's1': unknown key 'colour'"),
        ({"switches": {"s1": {}}, "colour": 1}, "topology: unknown key 'colour'"),
        ([1, 2], "expected an object"),
    ],
)
def test_bad_topologies_are_refused_clearly(data: object, message: str) -> None:
    with pytest.raises(TopologyError, match=message.replace("[", r"\[").replace("(", r"\(")):
        Topology.from_json(data)


def _built_star() -> Topology:
    topo = Topology()
    topo.add_switch("s1", grpc="127.0.0.1:9559")
    topo.add_host("h1", "10.0.0.1/24", "08:00:00:00:00:01")
    topo.add_host("h2", "10.0.0.2/24", "08:00:00:00:00:02")
    topo.link("h1", "s1")
    topo.link("h2", "s1")
    return topo


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"device_id": "one"},
            "switch 's1': device_id: expected an integer in 0..18446744073709551615",
        ),
        ({"device_id": -1}, "switch 's1': device_id: expected an integer"),
        ({"grpc": 9559}, "switch 's1': grpc: expected a string \"host:port\""),
        ({"grpc": "localhost"}, "switch 's1': grpc: expected a string \"host:port\""),
        ({"agg_ip": "10.0.0.1"}, "host 'h1' has IP 10.0.0.1, the aggregation address of switch"),
        ({"agg_mac": "08:00:00:00:00:02"}, "host 'h2' has MAC 08:00:00:00:00:02, the aggregation"),
        ({"agg_mac": "nope"}, "switch 's1': agg_mac: expected a MAC address"),
    ],
)
def test_python_built_topologies_get_the_same_checks(
    change: dict[str, object], message: str
) -> None:
    """validate() checks what the builders and `add_switch` made, as a file would be."""
    topo = _built_star()
    assert topo.validate() is topo
    topo.switches["s1"] = replace(topo.switches["s1"], **change)  # type: ignore[arg-type]
    with pytest.raises(TopologyError) as info:
        topo.validate()
    assert message in str(info.value)


def test_hosts_sharing_a_mac_are_refused() -> None:
    topo = _built_star()
    topo.hosts["h2"] = replace(topo.hosts["h2"], mac="08:00:00:00:00:01")
    with pytest.raises(TopologyError, match="hosts 'h1' and 'h2' share MAC 08:00:00:00:00:01"):
        topo.validate()
    topo.hosts["h2"] = replace(topo.hosts["h2"], mac="8:0:0:0:0:1")  # the same MAC
    with pytest.raises(TopologyError, match="share MAC"):
        topo.validate()


def test_duplicate_keys_in_a_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    text = json.dumps(star(2).to_json())
    path.write_text(text.replace('"device_id": 1', '"device_id": 1, "device_id": 2'))
    with pytest.raises(TopologyError, match=f"{path}: switch 's1': \"device_id\" appears twice"):
        Topology.load(path)
    path.write_text(text)
    assert Topology.load(path).to_json() == star(2).to_json()


def test_bad_file(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text("{nope")
    with pytest.raises(TopologyError, match="not valid JSON"):
        Topology.load(tmp_path / "t.json")
    with pytest.raises(TopologyError, match="no such topology file"):
        Topology.load(tmp_path / "missing.json")


def test_builders() -> None:
    ft = fat_tree(4)
    assert len(ft.hosts) == 16 and len(ft.switches) == 20
    assert json.loads(json.dumps(ft.to_json()))["links"]
    assert len(star(5).hosts) == 5


def test_star_job_plan() -> None:
    jm = JobManager(star(4))
    rec = jm.plan_add(JobSpec(1, ("h1", "h2", "h3"), pool_size=8))
    (plan,) = rec.plans.values()
    jobs = [w for w in plan.tables if w.table.endswith("ina_job")]
    assert [w.params for w in jobs] == [(0, 8, 3, 1, 1, 0, 1)]  # epoch 1: the first
    assert len([w for w in plan.tables if w.table.endswith("ina_child")]) == 3
    assert plan.groups[0].ports == (1, 2, 3)


def ranked(topo: Topology, ranks: dict[str, tuple[int, int | None]]) -> Topology:
    """`topo` with hosts running several ranks: name -> (ranks, first UDP port)."""
    for name, (n, udp) in ranks.items():
        topo.hosts[name] = replace(topo.hosts[name], ranks=n, udp_port=udp)
    return topo.validate()


def test_a_machine_with_ranks_is_that_many_workers_of_the_job(tmp_path: Path) -> None:
    """Several workers behind one port (docs/protocol.md, section 4): a host with M ranks is
    M children of its switch, each (port, UDP port) with its own ina_child entry and its own
    multicast replica, whose instance is that UDP port; the port's host rewrite is one."""
    topo = ranked(star(2), {"h1": (2, 40000), "h2": (3, None)})
    path = tmp_path / "topology.json"
    topo.save(path)
    data = json.loads(path.read_text())["hosts"]
    assert data["h1"]["ranks"] == 2 and data["h1"]["udp_port"] == 40000
    assert data["h2"]["ranks"] == 3 and "udp_port" not in data["h2"]
    assert Topology.load(path).to_json() == topo.to_json()

    rec = JobManager(topo).plan_add(JobSpec(1, ("h1", "h2"), pool_size=8))
    (plan,) = rec.plans.values()
    (job,) = [w for w in plan.tables if w.table.endswith("ina_job")]
    assert job.params[2] == 5  # fan-in: every rank
    children = {w.key: w.params for w in plan.tables if w.table.endswith("ina_child")}
    assert children == {
        (1, 0, 1, 40000): (0,),
        (1, 0, 1, 40001): (1,),
        (1, 0, 2, 47500): (2,),
        (1, 0, 2, 47501): (3,),
        (1, 0, 2, 47502): (4,),
    }
    assert plan.groups[0].replicas == ((1, 40000), (1, 40001), (2, 47500), (2, 47501), (2, 47502))
    assert sorted(w.key for w in plan.tables if w.table.endswith("ina_egress")) == [(1,), (2,)]


def test_ranks_across_switches_keep_switch_children_on_the_ina_port() -> None:
    """A leaf's ranks are its children by UDP port; the root knows each leaf by (port, 47500),
    the port a switch's partials leave from, and its copies to a leaf have instance 0."""
    topo = ranked(leaf_spine(2, 1, 1), {"h1": (2, None), "h2": (2, None)})
    rec = JobManager(topo).plan_add(JobSpec(1, ("h1", "h2"), pool_size=8))
    leaf = rec.plans["l1"]
    assert sorted(w.key for w in leaf.tables if w.table.endswith("ina_child")) == [
        (1, 0, 1, 47500),
        (1, 0, 1, 47501),
    ]
    root = rec.plans["s1"]
    assert sorted(w.key for w in root.tables if w.table.endswith("ina_child")) == [
        (1, 0, 1, 47500),
        (1, 0, 2, 47500),
    ]
    assert root.groups[0].replicas == ((1, 0), (2, 0))
    assert leaf.groups[0].replicas == ((1, 47500), (1, 47501))


def test_ranks_are_checked() -> None:
    with pytest.raises(TopologyError, match=r"UDP ports 65535\.\.65536"):
        ranked(star(1), {"h1": (2, 65535)})
    with pytest.raises(TopologyError, match=r"ranks.*1\.\.32"):
        Topology.from_json(
            {
                "hosts": {"h1": {"ip": "10.0.0.1/24", "mac": "02:00:00:00:00:01", "ranks": 33}},
                "switches": {"s1": {}},
                "links": [["h1", "s1-p1"]],
            }
        )
    with pytest.raises(JobError, match=r"33 children.*bitmap holds 32"):
        JobManager(ranked(star(2), {"h1": (32, 1000)})).plan_add(JobSpec(1, ("h1", "h2")))


def test_leaf_spine_tree_and_multi_root() -> None:
    topo = leaf_spine(2, 2, 2)
    jm = JobManager(topo)
    rec = jm.plan_add(JobSpec(1, ("h1", "h2", "h3", "h4"), pool_size=8, n_trees=2))
    assert [next(sw for sw, n in t.items() if n.is_root) for t in rec.trees] == ["s1", "s2"]
    leaf = rec.trees[0]["l1"]
    assert leaf.child_ports == [1, 2] and leaf.parent_port == 3 and not leaf.is_root
    root = rec.trees[0]["s1"]
    assert root.child_ports == [1, 2]
    assert set(rec.pools) == {"l1", "l2", "s1", "s2"}


def test_pools_do_not_overlap_and_exhaustion_is_refused_without_change() -> None:
    jm = JobManager(star(4))
    a = jm.plan_add(JobSpec(1, ("h1", "h2"), pool_size=INA_SLOTS - 100))
    jm.commit_add(a)
    b = jm.plan_add(JobSpec(2, ("h3", "h4"), pool_size=100))
    assert b.pools["s1"] == (INA_SLOTS - 100, 100)
    jm.commit_add(b)
    before = (
        dict(jm.pools["s1"].used),
        dict(jm.egress_refs),
        {k: set(v) for k, v in jm.mgids.items()},
    )
    with pytest.raises(JobError, match="no 1 contiguous free slots"):
        jm.plan_add(JobSpec(3, ("h1",), pool_size=1))
    assert before == (
        dict(jm.pools["s1"].used),
        dict(jm.egress_refs),
        {k: set(v) for k, v in jm.mgids.items()},
    )
    jm.commit_remove(1)
    assert jm.plan_add(JobSpec(3, ("h1",), pool_size=5)).pools["s1"] == (0, 5)


def test_shared_host_port_rewrite_is_reference_counted() -> None:
    jm = JobManager(star(3))
    r1 = jm.plan_add(JobSpec(1, ("h1", "h2"), pool_size=4))
    jm.commit_add(r1)
    r2 = jm.plan_add(JobSpec(2, ("h2", "h3"), pool_size=4))
    egress2 = [w for w in r2.plans["s1"].tables if w.table.endswith("ina_egress")]
    assert [w.key for w in egress2] == [(3,)]  # h2's rewrite exists already
    jm.commit_add(r2)
    removal = jm.plan_remove(1)
    assert [w.key for w in removal["s1"].tables if w.table.endswith("ina_egress")] == [(1,)]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (JobSpec(1, ()), "no workers"),
        (JobSpec(1, ("h1", "h1")), "twice"),
        (JobSpec(1, ("h9",)), "unknown host 'h9'"),
        (JobSpec(1, ("h1",), pool_size=3, n_trees=2), "multiple of n_trees"),
        (JobSpec(1, ("h1",), roots=("zz",)), "root 'zz'"),
        (JobSpec(70000, ("h1",)), "16 bits"),
    ],
)
def test_bad_jobs(spec: JobSpec, message: str) -> None:
    with pytest.raises(JobError, match=message):
        JobManager(star(2)).plan_add(spec)


def test_routes_forward_between_leaves() -> None:
    from inaemu.softswitch.pipeline import Pipeline

    topo = leaf_spine(2, 1, 1)
    plans = route_plans(topo)
    pipe = Pipeline()
    apply_to_pipeline(pipe, plans["l1"])
    # h2 (10.0.0.2) lives behind the spine: l1 sends it up port 2
    entry = pipe.ipv4_lpm.lookup((0x0A000002,))
    assert entry is not None and entry.action.params[1] == 2


def _epochs(record: JobRecord) -> dict[str, set[int]]:
    """switch -> the epochs of the record's ina_job entries there."""
    return {
        sw: {w.params[6] for w in plan.tables if w.table.endswith("ina_job")}
        for sw, plan in record.plans.items()
    }


def test_every_installation_gets_a_new_epoch_per_switch() -> None:
    """Reinstalling a job, or giving its freed pool to another job, never repeats an epoch on
    a switch; every tree of one installation shares it; the counters can be handed over."""
    topo = leaf_spine(2, 2, 2)
    jm = JobManager(topo)
    first = jm.plan_add(JobSpec(1, ("h1", "h2", "h3", "h4"), pool_size=8, n_trees=2))
    assert first.epochs == {"l1": 1, "l2": 1, "s1": 1, "s2": 1}
    assert _epochs(first) == {sw: {1} for sw in first.epochs}
    assert jm.plan_add(JobSpec(1, ("h1", "h2", "h3", "h4"), pool_size=8)).epochs["l1"] == 1
    jm.commit_add(first)
    seen: dict[str, set[int]] = {sw: {1} for sw in first.epochs}
    for job in (1, 2, 1):  # remove, then the same pool for job 2, then job 1 again
        jm.commit_remove(next(iter(jm.jobs)))
        rec = jm.plan_add(JobSpec(job, ("h1", "h3"), pool_size=8))
        assert rec.pools["l1"] == first.pools["l1"]  # the freed pool
        for sw, epoch in rec.epochs.items():
            assert epoch not in seen[sw]
            seen[sw].add(epoch)
        jm.commit_add(rec)
    # another manager (a controller restarted) continues from the saved counters
    jm2 = JobManager(topo, epochs=jm.epochs)
    assert jm2.plan_add(JobSpec(3, ("h2",), pool_size=4)).epochs["l1"] == jm.epochs["l1"] + 1
    with pytest.raises(JobError, match="'zz'"):
        JobManager(topo, epochs={"zz": 1})
    with pytest.raises(JobError, match="16 bits"):
        JobManager(topo, epochs={"l1": 70000})


def test_epochs_wrap_past_zero() -> None:
    assert [next_epoch(e) for e in (0, 1, MAX_EPOCH - 1, MAX_EPOCH)] == [1, 2, MAX_EPOCH, 1]
    jm = JobManager(star(2), epochs={"s1": MAX_EPOCH})
    assert jm.plan_add(JobSpec(1, ("h1",))).epochs == {"s1": 1}


def test_results_leave_from_the_switch_aggregation_address() -> None:
    """Every ina_egress entry: to the host, from its switch's agg_mac / agg_ip."""
    topo = leaf_spine(2, 1, 2)
    topo.switches["l2"] = replace(
        topo.switches["l2"], agg_ip="10.9.9.9", agg_mac="02:09:09:09:09:09"
    )
    jm = JobManager(topo)
    rec = jm.plan_add(JobSpec(1, tuple(topo.hosts), pool_size=4))
    rewrites = {
        (sw, w.key[0]): w.params
        for sw, plan in rec.plans.items()
        for w in plan.tables
        if w.table.endswith("ina_egress")
    }
    assert set(rewrites) == {topo.host_attachment(h) for h in topo.hosts}
    for (sw, port), (dmac, dip, smac, sip) in rewrites.items():
        host = next(h for h in topo.hosts.values() if topo.host_attachment(h.name) == (sw, port))
        agg = topo.switches[sw]
        assert (dmac, dip) == (int(host.mac.replace(":", ""), 16), ip_int(host.ip))
        assert (smac, sip) == (int(agg.agg_mac.replace(":", ""), 16), ip_int(agg.agg_ip))
    assert {params[3] for params in rewrites.values()} == {ip_int("10.0.0.254"), ip_int("10.9.9.9")}


def test_stats_name_each_rank_behind_a_port() -> None:
    """`inaemu stats` counts each child apart (ina_child's direct counter per entry): a rank
    of a machine is named by its local rank, from its UDP port."""
    topo = ranked(star(2), {"h1": (2, 40000)})
    counters = SwitchCounters("s1")
    counters.children = {
        (1, 0, 1, 40000): (5, 50),
        (1, 0, 1, 40001): (7, 70),
        (1, 0, 2, 47500): (1, 9),
    }
    report = StatsReport(topo, {}, {"s1": counters})
    assert report.job_ports(1) == [
        ("s1", 1, "h1 rank 0", 5, 50),
        ("s1", 1, "h1 rank 1", 7, 70),
        ("s1", 2, "h2", 1, 9),
    ]
