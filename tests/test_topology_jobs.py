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
