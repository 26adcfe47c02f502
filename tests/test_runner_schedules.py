"""The side-by-side runners run the schedules the checker checks.

`inaemu demo --algo` (`cli/compare.py`) and `inaemu mininet --algo`
(`mininet/algos.py`) hand every worker a schedule, its rank and its peers. Here that hand-over
is replayed, without a network: for every topology family, every host collective that runs
there and both node models, each worker's sends (its host, to the host behind the peer its
rank's transfers name) are routed as the switches route, and the flows on every link in every
step must equal the checker's own table (`check.step_loads`) for the algorithm's schedule, the
one `inaemu schedule` prints. Whatever order the runner receives the workers in (a property
test permutes them), each algorithm keeps its own rank order: the ring snakes along a torus's
rows, HDRM maps ranks onto a BiGraph's parts, the worker-aggregator puts the aggregator where
the checker does.

Mininet's shaping is checked against the same node model: a torus or mesh node's host link is
shaped to the links' bandwidth times the capacity the checker's alpha-beta model gives it.
"""

from __future__ import annotations

import functools
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inaemu.cli.compare import collective_schedules, schedule_task
from inaemu.cli.compare_worker import task_rank
from inaemu.cli.demo import worker_seat
from inaemu.collectives.algorithms import ALGORITHMS
from inaemu.collectives.check import step_loads
from inaemu.collectives.schedule import Schedule, ScheduleError
from inaemu.hostlib.collective import worker as collective_worker
from inaemu.hostlib.collective.peers import parse_peers
from inaemu.mininet.algo_run import natural
from inaemu.mininet.algos import Collective, RunSpec
from inaemu.mininet.run import choose
from inaemu.mininet.scenario import MAX_BW, NetOptions, RunDir, Scenario, link_shaping
from inaemu.topology.builders import from_spec
from inaemu.topology.model import Topology, TopologyError
from inaemu.topology.routes import NODE_PORTS, FlowRoutes, Link, host_link_capacity

FAMILIES = ("star:4", "leaf-spine:2x2x2", "fat-tree:4", "bigraph:2x4", "torus:3x3", "mesh:3x3")
DIRECT = ("torus:3x3", "mesh:3x3")

# (host of the worker, the schedule it runs, its rank, the host behind each rank's peer)
Handover = list[tuple[str, Schedule, int, list[str]]]


@functools.cache
def topo_of(spec: str) -> Topology:
    return from_spec(spec)


def runs_on(name: str, spec: str) -> bool:
    try:
        ALGORITHMS[name].schedule(topo_of(spec))
    except ScheduleError:
        return False
    return True


CASES = [
    (spec, name, ports)
    for spec in FAMILIES
    for name in ALGORITHMS
    for ports in (NODE_PORTS if spec in DIRECT else NODE_PORTS[:1])
    if runs_on(name, spec)
]


@functools.cache
def checked(spec: str, name: str, ports: str) -> list[Counter[Link]]:
    """The checker's flows per link per step for the algorithm's schedule (its own order)."""
    topo = topo_of(spec)
    return step_loads(ALGORITHMS[name].schedule(topo, node_ports=ports), FlowRoutes(topo, ports))


def replayed(topo: Topology, ports: str, handover: Handover) -> list[Counter[Link]]:
    """The flows per link per step of what the workers execute: every worker sends each
    transfer its rank is the source of, from its own host to its peer's."""
    routes = FlowRoutes(topo, ports)
    schedules = {sched for _, sched, _, _ in handover}
    assert len(schedules) == 1, "every worker runs the same schedule"
    (sched,) = schedules
    assert sorted(rank for _, _, rank, _ in handover) == list(range(sched.n_ranks))
    loads = []
    for step in sched.steps:
        flows = {
            (host, peers[t.dst]) for host, _, rank, peers in handover for t in step if t.src == rank
        }
        load: Counter[Link] = Counter()
        for a, b in sorted(flows):
            load.update(routes.contended_links(a, b))
        loads.append(load)
    return loads


def embedded(topo: Topology, name: str, ports: str, workers: tuple[str, ...]) -> Handover:
    """What `inaemu demo --algo` hands each worker (`run_compare`: the schedule of
    `collective_schedules`, the task of `schedule_task`, the worker's seat; the worker takes
    its rank with `task_rank`)."""
    sched = collective_schedules((name,), topo, workers, ports)[name]
    assert isinstance(sched, Schedule), sched
    task = schedule_task(name, 1, sched, topo)
    by_address = {(h.mac, h.ip): host for host, h in topo.hosts.items()}
    assert task.schedule is not None
    out = []
    for host in workers:
        rank = task_rank(task, worker_seat(topo, host, 1))
        executed = Schedule.from_json(task.schedule)
        out.append((host, executed, rank, [by_address[p] for p in task.peers]))
    return out


def on_mininet(
    topo: Topology, name: str, ports: str, workers: tuple[str, ...], tmp: Path
) -> Handover:
    """What `inaemu mininet --algo` hands each worker: the algorithm as `choose` makes it,
    its `prepare` and each worker's command line, read back by the collective worker's own
    argument parser (no network: the scenario is never started)."""
    (algo,), _ = choose(name, topo, workers, "int32", ports)
    assert isinstance(algo, Collective)
    sc = Scenario(topo, RunDir.make(tmp), NetOptions(node_ports=ports))
    spec = RunSpec(workers, size=100, codec="int32", seed=1, run_id=7, window=64, timeout=5.0)
    algo.prepare(sc, spec)
    by_ip = {h.ip: host for host, h in topo.hosts.items()}
    out = []
    for i, host in enumerate(spec.workers):
        argv = algo.worker_argv(sc, spec, i, host, tmp / f"{host}.npy")
        assert argv[1:3] == ["-m", "inaemu.hostlib.collective.worker"]
        args = collective_worker.build_parser().parse_args(argv[3:])
        peers = [by_ip[ip] for ip, _ in parse_peers(args.peers)]
        out.append((host, Schedule.load(args.schedule), args.rank, peers))
    return out


def mininet_workers(topo: Topology) -> tuple[str, ...]:
    """The runner's workers: the hosts with role worker, h2 before h10 (`run_scenario`)."""
    return tuple(sorted((h for h, x in topo.hosts.items() if x.role == "worker"), key=natural))


@pytest.mark.parametrize(("spec", "name", "ports"), CASES)
def test_the_embedded_comparison_runs_the_checked_schedule(
    spec: str, name: str, ports: str
) -> None:
    topo = topo_of(spec)
    workers = tuple(topo.hosts)  # run_compare: the first --workers hosts, here all of them
    assert replayed(topo, ports, embedded(topo, name, ports, workers)) == checked(spec, name, ports)


@pytest.mark.parametrize(("spec", "name", "ports"), CASES)
def test_the_mininet_comparison_runs_the_checked_schedule(
    spec: str, name: str, ports: str, tmp_path: Path
) -> None:
    topo = topo_of(spec)
    handover = on_mininet(topo, name, ports, mininet_workers(topo), tmp_path)
    assert replayed(topo, ports, handover) == checked(spec, name, ports)


def test_the_ring_on_a_torus_keeps_one_flow_per_link() -> None:
    """The case of issue 16: handed the hosts in host order, the ring took that order and put
    two flows on some links of torus:3x3; in its own order (the snake) it puts one."""
    topo = topo_of("torus:3x3")
    loads = replayed(topo, "all", embedded(topo, "ring", "all", tuple(topo.hosts)))
    assert max(max(load.values()) for load in loads) == 1


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CASES), st.data())
def test_any_order_of_the_workers_gives_the_checked_schedule(
    case: tuple[str, str, str], data: st.DataObject
) -> None:
    spec, name, ports = case
    topo = topo_of(spec)
    workers = tuple(data.draw(st.permutations(list(topo.hosts))))
    want = checked(spec, name, ports)
    assert replayed(topo, ports, embedded(topo, name, ports, workers)) == want
    with tempfile.TemporaryDirectory() as tmp:
        assert replayed(topo, ports, on_mininet(topo, name, ports, workers, Path(tmp))) == want


# ---------------------------------------------------------------------- the node model


@pytest.mark.parametrize("spec", ["torus:3x3", "mesh:3x3", "torus:1x4", "star:4", "bigraph:2x4"])
@pytest.mark.parametrize("ports", NODE_PORTS)
def test_mininet_shapes_host_links_as_the_checker_models_them(spec: str, ports: str) -> None:
    topo = topo_of(spec) if spec in FAMILIES else from_spec(spec)
    routes = FlowRoutes(topo, ports)
    for lk, params in zip(topo.links, link_shaping(topo, 10.0, ports), strict=True):
        if lk.a_port is not None and lk.b_port is not None:
            assert params["bw"] == 10.0  # between switches: the links' bandwidth
            continue
        host, sw = (lk.a, lk.b) if lk.a_port is None else (lk.b, lk.a)
        capacity = routes.capacity((host, sw))
        assert capacity == routes.capacity((sw, host)) == host_link_capacity(topo, host, ports)
        assert params["bw"] == 10.0 * capacity
        direct = topo.switches[sw].role in ("torus", "mesh")
        assert (capacity > 1) == (direct and ports == "all")


def test_a_host_link_beyond_mininet_s_limit_is_refused_with_the_fix() -> None:
    topo = topo_of("torus:3x3")
    assert link_shaping(topo, MAX_BW, "1")[0]["bw"] == MAX_BW
    with pytest.raises(TopologyError, match="lower --bw or use --node-ports 1"):
        link_shaping(topo, MAX_BW / 2, "all")
