"""Aggregation trees of softswitch pipelines: a hand-made two-level tree (leaf -> root ->
leaf) with loss, and trees the controller plans over topologies of many switches, with loss
injected on the links between switches (partials lost upward, results lost downward)."""

from __future__ import annotations

from functools import partial

import numpy as np
import numpy.typing as npt
import pytest

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
    seq_field,
    slot_field,
)
from inaemu.controller.jobs import JobManager, JobRecord, JobSpec
from inaemu.hostlib.client import InaClient
from inaemu.p4.constants import DropReason, Event
from inaemu.softswitch.fabric import Fabric
from inaemu.softswitch.state import ActionCall, TableEntry
from inaemu.topology.addresses import ip_int
from inaemu.topology.builders import bigraph, leaf_spine
from inaemu.topology.model import Topology
from tests.helpers import accounted, run_threads
from tests.multiswitch import FabricNetwork, fabric_of, install, inter_switch_ports, set_loss

SWITCH = Endpoint("00:00:00:00:00:fe", "10.0.0.254")  # every switch's aggregation address
HOSTS = {f"h{i}": Endpoint(f"00:00:00:00:00:{i:02x}", f"10.0.0.{i}") for i in range(1, 5)}
SWITCH_MAC = int(SWITCH.mac.replace(":", ""), 16)


def build() -> Fabric:
    """leaf1 (h1, h2) and leaf2 (h3, h4), each port 3 up to root ports 1 and 2."""
    fab = Fabric()
    for name in ("leaf1", "leaf2", "root"):
        fab.add_switch(name)
    fab.link("leaf1", 3, "root", 1)
    fab.link("leaf2", 3, "root", 2)
    for leaf, hosts in (("leaf1", ("h1", "h2")), ("leaf2", ("h3", "h4"))):
        sw = fab.switches[leaf]
        sw.ina_job.insert(TableEntry((1, 0), ActionCall("agg_node", (0, 4, 2, 1, 0, 3, 1))))
        sw.multicast.insert(1, [(1, 0), (2, 0)])
        for i, h in enumerate(hosts):
            fab.attach_host(h, leaf, i + 1)
            sw.ina_child.insert(
                TableEntry((1, 0, i + 1, INA_UDP_PORT), ActionCall("set_child", (i,)))
            )
            mac = int(HOSTS[h].mac.replace(":", ""), 16)
            rewrite = (mac, ip_int(HOSTS[h].ip), SWITCH_MAC, ip_int(SWITCH.ip))
            sw.ina_egress.insert(TableEntry((i + 1,), ActionCall("to_host", rewrite)))
    root = fab.switches["root"]
    root.ina_job.insert(TableEntry((1, 0), ActionCall("agg_node", (0, 4, 2, 1, 1, 0, 1))))
    root.multicast.insert(1, [(1, 0), (2, 0)])
    for i in range(2):
        root.ina_child.insert(
            TableEntry((1, 0, i + 1, INA_UDP_PORT), ActionCall("set_child", (i,)))
        )
    return fab


def frame(
    host: str, values: npt.NDArray[np.int32], seq: int = 0, retx: bool = False, run: int = 0
) -> bytes:
    return pack_frames(
        FrameTemplate(HOSTS[host], SWITCH),
        pack_payloads(
            opcode=Opcode.SUM,
            job_id=1,
            tree_id=0,
            slot=slot_field(seq % 4, (seq // 4) % 2),
            seq=seq_field(run, seq),
            values=values[None, :],
            flags=int(Flag.RETX) if retx else 0,
        ),
    ).tobytes()


def check_results(
    delivered: list[tuple[str, bytes]],
    hosts: set[str],
    total: npt.NDArray[np.int64],
    seq: int = 0,
) -> None:
    assert {h for h, _ in delivered} == hosts and len(delivered) == len(hosts)
    for host, data in delivered:
        rec = parse_frames(data)[0]
        assert np.array_equal(rec["values"], total)
        assert int(rec["contrib"]) == 4
        assert int(rec["ver_flags"]) & 0xF == Flag.RESULT
        assert InaHeader.unpack(data[INA_OFFSET:]).seq == seq
        # to the host, from its leaf's aggregation address (not from a worker)
        assert int(rec["ip_dst"]) == ip_int(HOSTS[host].ip)
        assert int(rec["ip_src"]) == ip_int(SWITCH.ip)
        assert bytes(rec["eth_src"]) == bytes.fromhex(SWITCH.mac.replace(":", ""))


def test_two_level_tree_sums_all_four_workers() -> None:
    fab = build()
    vals = {
        h: np.random.default_rng(i).integers(-1000, 1000, K).astype(np.int32)
        for i, h in enumerate(HOSTS)
    }
    total = sum((v.astype(np.int64) for v in vals.values()), np.zeros(K, np.int64))
    delivered = []
    for h in HOSTS:
        delivered += fab.send(h, frame(h, vals[h]))
    check_results(delivered, set(HOSTS), total)
    assert fab.switches["root"].ina_events.packets[Event.COMPLETE_ROOT] == 1
    for leaf in ("leaf1", "leaf2"):
        assert fab.switches[leaf].ina_events.packets[Event.COMPLETE_UP] == 1
        assert fab.switches[leaf].ina_events.packets[Event.PARENT_RESULT] == 1


def test_lost_upward_partial_recovered_by_retx() -> None:
    fab = build()
    vals = {h: np.full(K, i + 1, dtype=np.int32) for i, h in enumerate(HOSTS)}
    total = np.full(K, 10, dtype=np.int64)
    lost: list[bytes] = []

    def lose_first_partial(switch: str, port: int, data: bytes) -> bool:
        if (switch, port) == ("leaf1", 3) and not lost:
            lost.append(data)
            return True
        return False

    fab.drop = lose_first_partial
    delivered = []
    for h in HOSTS:
        delivered += fab.send(h, frame(h, vals[h]))
    assert delivered == [], "leaf1's partial was lost: nobody can have a result yet"
    # h1 times out and retransmits: leaf1 (complete, waiting) re-sends its partial with RETX
    delivered = fab.send("h1", frame("h1", vals["h1"], retx=True))
    check_results(delivered, set(HOSTS), total)
    assert fab.switches["leaf1"].ina_events.packets[Event.RETX_UP] == 1


def test_lost_downward_result_recovered_from_root() -> None:
    fab = build()
    vals = {h: np.full(K, -(i + 1), dtype=np.int32) for i, h in enumerate(HOSTS)}
    total = np.full(K, -10, dtype=np.int64)
    fab.drop = lambda sw, port, f: (sw, port) == ("root", 2)  # root -> leaf2 cut
    delivered = []
    for h in HOSTS:
        delivered += fab.send(h, frame(h, vals[h]))
    assert {h for h, _ in delivered} == {"h1", "h2"}
    fab.drop = None
    # h4 retransmits: leaf2 re-sends its partial, the root answers leaf2 alone (unicast),
    # leaf2 stores the result and multicasts it to h3 and h4.
    delivered = fab.send("h4", frame("h4", vals["h4"], retx=True))
    check_results(delivered, {"h3", "h4"}, total)
    root = fab.switches["root"]
    assert root.ina_events.packets[Event.RETX_REPLY] == 1
    # h3 retransmits too late: leaf2 answers it locally, the root sees nothing
    rx_before = sum(root.port_rx.packets)
    delivered = fab.send("h3", frame("h3", vals["h3"], retx=True))
    check_results(delivered, {"h3"}, total)
    assert sum(root.port_rx.packets) == rx_before
    assert fab.switches["leaf2"].ina_drops.packets[DropReason.NONE] == 0


def test_reruns_and_reinstalls_start_clean_on_every_level() -> None:
    """Run 1 leaves every switch's slot with a result and leaf1 with a half-finished use;
    run 2 (from chunk 0, new run id) gets exactly its own sums on both levels; a reinstall
    (new epochs) followed by the same run id again starts clean too."""
    fab = build()

    def values(run: int, i: int) -> dict[str, npt.NDArray[np.int32]]:
        return {h: np.full(K, 1000 * run + 10 * i + n, dtype=np.int32) for n, h in enumerate(HOSTS)}

    def total(vals: dict[str, npt.NDArray[np.int32]]) -> npt.NDArray[np.int64]:
        return sum((v.astype(np.int64) for v in vals.values()), np.zeros(K, np.int64))

    v = values(1, 0)
    delivered = [out for h in HOSTS for out in fab.send(h, frame(h, v[h], run=1))]
    check_results(delivered, set(HOSTS), total(v), seq=seq_field(1, 0))
    assert fab.send("h1", frame("h1", values(1, 1)["h1"], seq=1, run=1)) == []  # then abandoned
    for run, epoch in ((2, 1), (2, 2)):
        if epoch == 2:  # reinstall: every switch's ina_job entry gets a new epoch
            for sw in fab.switches.values():
                entry = sw.ina_job.entries[(1, 0)]
                params = (*entry.action.params[:6], epoch)
                sw.ina_job.modify((1, 0), ActionCall("agg_node", params))
        for i in (0, 1):
            v = values(run, i) if epoch == 1 else values(7, i)
            delivered = [out for h in HOSTS for out in fab.send(h, frame(h, v[h], seq=i, run=run))]
            check_results(delivered, set(HOSTS), total(v), seq=seq_field(run, i))
    for name, sw in fab.switches.items():
        assert sw.ina_drops.packets[DropReason.DUPLICATE] == 0, name
        assert sw.ina_drops.packets[DropReason.STALE] == 0, name


# ------------------------------------------------------------------ trees planned by the
# controller over topologies of many switches, in an in-process fabric


def chunk_frame(
    topo: Topology,
    host: str,
    values: npt.NDArray[np.int32],
    seq: int,
    *,
    n_trees: int,
    window: int,
    retx: bool = False,
) -> bytes:
    """Chunk `seq` of job 1 from `host`, as the client numbers it (slot seq mod W, tree
    (seq mod W) mod T), to its switch's aggregation address."""
    h = topo.hosts[host]
    agg = topo.switches[topo.host_attachment(host)[0]]
    return pack_frames(
        FrameTemplate(Endpoint(h.mac, h.ip), Endpoint(agg.agg_mac, agg.agg_ip)),
        pack_payloads(
            opcode=Opcode.SUM,
            job_id=1,
            tree_id=(seq % window) % n_trees,
            slot=slot_field(seq % window, (seq // window) % 2),
            seq=seq,
            values=values[None, :],
            flags=int(Flag.RETX) if retx else 0,
        ),
    ).tobytes()


def planned_leaf_spine() -> tuple[Topology, Fabric, JobRecord]:
    """leaf_spine(2, 2, 2) with a two-tree job (roots s1 and s2) installed from the plan."""
    topo = leaf_spine(2, 2, 2)
    rec = JobManager(topo).plan_add(JobSpec(1, tuple(topo.hosts), pool_size=4, n_trees=0))
    assert rec.roots == ["s1", "s2"]
    fab = fabric_of(topo)
    install(fab, rec.plans)
    return topo, fab, rec


def send_all(
    topo: Topology, fab: Fabric, seq: int, vals: dict[str, npt.NDArray[np.int32]]
) -> list[tuple[str, bytes]]:
    return [
        out
        for h in topo.hosts
        for out in fab.send(h, chunk_frame(topo, h, vals[h], seq, n_trees=2, window=4))
    ]


def test_planned_tree_partial_lost_upward_is_recovered() -> None:
    """Loss injection drops l1's partial on its way into root s1 (tree 0): nobody has a
    result; h1's retransmission makes l1 send its partial again (RETX_UP), and the root's
    result reaches every worker."""
    topo, fab, _ = planned_leaf_spine()
    up = topo.switch_neighbours("l1")[3]  # l1 port 3 -> (s1, port)
    assert up[0] == "s1"
    set_loss(fab, [up], 1.0)
    vals = {h: np.full(K, i + 1, np.int32) for i, h in enumerate(topo.hosts)}
    assert send_all(topo, fab, 0, vals) == []
    assert fab.switches["s1"].ina_drops.packets[DropReason.LOSS] == 1
    set_loss(fab, [up], 0.0)
    delivered = fab.send(
        "h1", chunk_frame(topo, "h1", vals["h1"], 0, n_trees=2, window=4, retx=True)
    )
    check_planned(delivered, topo, set(topo.hosts), np.full(K, 10, np.int64))
    assert fab.switches["l1"].ina_events.packets[Event.RETX_UP] == 1
    assert fab.switches["s1"].ina_events.packets[Event.COMPLETE_ROOT] == 1


def test_planned_tree_result_lost_downward_is_recovered() -> None:
    """Chunk 1 goes over tree 1 (root s2); loss injection drops s2's result on its way into
    l2: h1 and h2 have it, h3 and h4 not. h4 retransmits: l2 sends its partial again, s2
    answers l2 alone from its stored result, l2 keeps it and multicasts it to h3 and h4."""
    topo, fab, _ = planned_leaf_spine()
    down = topo.switch_neighbours("s2")[2]  # s2 port 2 -> (l2, port)
    assert down[0] == "l2"
    set_loss(fab, [down], 1.0)
    vals = {h: np.full(K, -(i + 1), np.int32) for i, h in enumerate(topo.hosts)}
    total = np.full(K, -10, np.int64)
    check_planned(send_all(topo, fab, 1, vals), topo, {"h1", "h2"}, total, seq=1)
    assert fab.switches["l2"].ina_drops.packets[DropReason.LOSS] == 1
    set_loss(fab, [down], 0.0)
    retx = chunk_frame(topo, "h4", vals["h4"], 1, n_trees=2, window=4, retx=True)
    check_planned(fab.send("h4", retx), topo, {"h3", "h4"}, total, seq=1)
    assert fab.switches["s2"].ina_events.packets[Event.RETX_REPLY] == 1
    assert fab.switches["l2"].ina_events.packets[Event.PARENT_RESULT] == 1
    # s1, the root of the other tree, saw nothing of chunk 1
    assert fab.switches["s1"].ina_events.packets[Event.CONTRIBUTION] == 0


def check_planned(
    delivered: list[tuple[str, bytes]],
    topo: Topology,
    hosts: set[str],
    total: npt.NDArray[np.int64],
    seq: int = 0,
) -> None:
    assert sorted(h for h, _ in delivered) == sorted(hosts)
    for host, data in delivered:
        rec = parse_frames(data)[0]
        assert np.array_equal(rec["values"], total)
        assert int(rec["contrib"]) == len(topo.hosts)
        assert int(rec["ver_flags"]) & 0xF == Flag.RESULT
        assert InaHeader.unpack(data[INA_OFFSET:]).seq == seq
        assert int(rec["ip_dst"]) == ip_int(topo.hosts[host].ip)


@pytest.mark.parametrize(
    ("topo", "n_trees"),
    [(bigraph(2, 4), 0), (leaf_spine(2, 2, 2), 0), (leaf_spine(2, 2, 2), 1)],
    ids=["bigraph-4-trees", "leaf-spine-2-trees", "leaf-spine-1-tree"],
)
def test_clients_over_planned_trees_with_loss_on_every_link(topo: Topology, n_trees: int) -> None:
    """Real clients, chunks striped over the trees, 5% loss injected on every inter-switch
    port each way: every worker gets the exact sums; partials and results were lost and
    recovered on the way."""
    rec = JobManager(topo).plan_add(JobSpec(1, tuple(topo.hosts), pool_size=8, n_trees=n_trees))
    fab = fabric_of(topo, seed=3)
    install(fab, rec.plans)
    set_loss(fab, inter_switch_ports(topo), 0.05)
    net = FabricNetwork(topo, fab)
    clients = [
        InaClient(
            net.transport(h),
            job_id=1,
            run=1,
            rank=r,
            n_workers=len(topo.hosts),
            window=8,
            n_trees=len(rec.trees),
            initial_rto=0.02,
            min_rto=0.005,
            give_up_after=60,
        )
        for r, h in enumerate(topo.hosts)
    ]
    xs = [
        np.random.default_rng(r).integers(-1000, 1000, 60 * K, np.int32)
        for r in range(len(clients))
    ]
    results = run_threads([partial(c.allreduce_int32, x) for c, x in zip(clients, xs, strict=True)])
    expected = np.sum(np.stack(xs).astype(np.int64), axis=0)
    for res, over in results:
        assert np.array_equal(res, expected) and not over.any()
    lost = sum(sw.ina_drops.packets[DropReason.LOSS] for sw in fab.switches.values())
    events = {e: sum(sw.ina_events.packets[e] for sw in fab.switches.values()) for e in Event}
    assert lost > 0 and events[Event.RETX_UP] > 0 and events[Event.RETX_REPLY] > 0
    for name, sw in fab.switches.items():  # every packet into a switch is accounted for
        received, explained = accounted(sw)
        assert received == explained, name
