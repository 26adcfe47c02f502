"""Host-collective schedules (ring, halving-doubling, HDRM, MultiTree, the worker-aggregator
baseline, the 2D ring, the double binary tree), their checker, the routes and node models they
are measured on, the alpha-beta prediction, the authors' simulator's step counts, and `inaemu
schedule`."""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inaemu.cli import main as controller_cli
from inaemu.cli import schedule as schedule_cli
from inaemu.collectives import dtree, hdrm, multitree, ps, ring, ring2d
from inaemu.collectives.algorithms import ALGORITHMS, algorithm, topology_kind
from inaemu.collectives.check import (
    LinkModel,
    check,
    measure,
    predict_seconds,
    ranks_text,
    simulate,
    step_loads,
)
from inaemu.collectives.halving_doubling import hd_steps
from inaemu.collectives.schedule import MAX_CHUNKS, Op, Schedule, ScheduleError, Transfer
from inaemu.controller.jobs import route_plans
from inaemu.topology.addresses import ip_int
from inaemu.topology.builders import bigraph, from_spec, mesh, torus
from inaemu.topology.model import Topology
from inaemu.topology.routes import FlowRoutes, RouteError

SIZE = 1_000_003  # bytes; not a multiple of any chunk count used here
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SPECS = (
    "star:1",
    "star:2",
    "star:5",
    "leaf-spine:2x2x3",
    "leaf-spine:3x2x2",
    "fat-tree:4",
    "bigraph:1x2",
    "bigraph:2x4",
    "bigraph:4x4",
    "bigraph:2x6",
    "bigraph:4x8",
    "torus:3x3",
    "torus:4x4",
    "torus:3x5",
    "torus:1x4",
    "mesh:2x3",
    "mesh:4x4",
    "mesh:1x4",
)
HDRM_SHAPES = ((1, 2), (1, 4), (2, 4), (1, 8), (2, 8), (4, 8), (4, 16))


@functools.cache
def topo_of(spec: str) -> Topology:
    return from_spec(spec)


@functools.cache
def built(name: str, spec: str) -> Schedule:
    return algorithm(name).schedule(topo_of(spec))


def supported(name: str, spec: str) -> bool:
    if name == "ring2d":
        return spec.startswith(("torus:", "mesh:"))
    if name == "hdrm":
        m, n = (int(x) for x in spec.partition(":")[2].split("x")) if "bigraph" in spec else (0, 0)
        return (m, n) in HDRM_SHAPES
    return True


CASES = [(name, spec) for name in ALGORITHMS for spec in SPECS if supported(name, spec)]


# ---------------------------------------------------------------------- every algorithm


@pytest.mark.parametrize(("name", "spec"), CASES)
def test_checker_passes_every_algorithm_on_every_topology_it_supports(name: str, spec: str) -> None:
    topo, algo = topo_of(spec), ALGORITHMS[name]
    sched = built(name, spec)
    m = check(sched, topo, SIZE, topology=spec, promised=algo.promises(topo))
    assert sched.algo == name and set(sched.hosts) == set(topo.hosts)
    assert m.ranks == len(topo.hosts) and m.steps == len(sched.steps)
    n = m.ranks
    # every rank sends at least the lower bound 2 (n - 1) / n of the array
    assert m.sent_mean >= 2 * (n - 1) / n * SIZE - 2 * n
    if algo.promises(topo):
        assert m.max_flows <= 1


@pytest.mark.parametrize("spec", ["torus:4x4", "mesh:3x3", "star:4", "bigraph:4x4"])
def test_hdrm_refuses_what_is_not_a_supported_bigraph(spec: str) -> None:
    with pytest.raises(ScheduleError, match="hdrm"):
        algorithm("hdrm").schedule(topo_of(spec))


def test_unknown_algorithm_is_refused_with_the_names() -> None:
    with pytest.raises(ScheduleError, match="ring, hd, hdrm, multitree, ps"):
        algorithm("tree")


def test_topology_kinds() -> None:
    kinds = {spec: topology_kind(topo_of(spec)) for spec in SPECS}
    assert kinds["star:5"] == "star" and kinds["fat-tree:4"] == "fat-tree"
    assert kinds["bigraph:4x4"] == "bigraph" and kinds["mesh:1x4"] == "mesh"
    custom = Topology.from_json(topo_of("star:2").to_json() | {"switches": {"s1": {}}})
    assert topology_kind(custom) == "custom"
    check(ring.schedule(custom), custom, SIZE)  # ring and hd run anywhere routes go


# ---------------------------------------------------------------------- properties


@SETTINGS
@given(st.integers(1, 70))
def test_halving_doubling_all_reduces_any_number_of_ranks(n: int) -> None:
    chunks, steps = hd_steps(n)
    p = 1 << (n.bit_length() - 1)
    assert chunks == p
    k = p.bit_length() - 1
    assert len(steps) == 2 * k + (2 if n != p else 0)
    simulate(Schedule("hd", tuple(f"h{i}" for i in range(n)), chunks, steps))


@SETTINGS
@given(st.integers(1, 40))
def test_ring_all_reduces_any_number_of_ranks(n: int) -> None:
    sched = Schedule("ring", tuple(f"h{i}" for i in range(n)), n, ring.ring_steps(n))
    simulate(sched)
    assert len(sched.steps) == 2 * (n - 1)


@SETTINGS
@given(st.sampled_from(HDRM_SHAPES))
def test_hdrm_is_contention_free_on_every_supported_bigraph(shape: tuple[int, int]) -> None:
    topo = bigraph(*shape)
    sched = hdrm.schedule(topo)
    m = check(sched, topo, SIZE, promised=True)
    assert m.max_flows == 1 and m.steps == 2 * (len(topo.hosts).bit_length() - 1)
    routes = FlowRoutes(topo)
    for _, t in sched.transfers():  # every pair in opposite parts: one switch link
        assert routes.hops(sched.hosts[t.src], sched.hosts[t.dst]) == 1


@SETTINGS
@given(st.integers(1, 9), st.integers(1, 5).map(lambda k: 2 * k))
def test_hdrm_refuses_unsupported_bigraph_shapes(m: int, n: int) -> None:
    half = n // 2
    if m & (m - 1) == 0 and half & (half - 1) == 0 and m <= half:
        check(hdrm.schedule(bigraph(m, n)), bigraph(m, n), SIZE, promised=True)
    else:
        with pytest.raises(ScheduleError, match=f"not bigraph:{m}x{n}"):
            hdrm.schedule(bigraph(m, n))


@SETTINGS
@given(st.sampled_from([1, 3, 4, 5]), st.sampled_from([1, 3, 4, 5, 6]), st.booleans())
def test_multitree_is_contention_free_on_tori_and_meshes(rows: int, cols: int, wrap: bool) -> None:
    topo = torus(rows, cols) if wrap else mesh(rows, cols)
    sched = multitree.schedule(topo)
    m = check(sched, topo, SIZE, promised=True)
    assert m.max_flows <= 1
    routes = FlowRoutes(topo)
    for _, t in sched.transfers():  # neighbours only
        assert routes.hops(sched.hosts[t.src], sched.hosts[t.dst]) == 1


@SETTINGS
@given(st.sampled_from(["star:6", "leaf-spine:2x2x3", "bigraph:2x4", "fat-tree:4"]), st.data())
def test_multitree_on_a_subset_of_workers(spec: str, data: st.DataObject) -> None:
    topo = topo_of(spec)
    hosts = data.draw(st.permutations(list(topo.hosts)))
    workers = hosts[: data.draw(st.integers(1, len(hosts)))]
    for name in ("ring", "hd", "multitree"):
        algo = ALGORITHMS[name]
        sched = algo.schedule(topo, workers)
        assert sched.hosts == tuple(workers)
        check(sched, topo, SIZE, promised=algo.promises(topo))


@SETTINGS
@given(
    st.sampled_from(["star:6", "leaf-spine:2x2x3", "bigraph:2x4", "torus:3x3", "mesh:3x3"]),
    st.data(),
)
def test_schedule_among_keeps_each_algorithm_s_own_order(spec: str, data: st.DataObject) -> None:
    # what the side-by-side runners call: the workers in any order, the algorithm's order kept
    topo = topo_of(spec)
    hosts = data.draw(st.permutations(list(topo.hosts)))
    workers = hosts[: data.draw(st.integers(1, len(hosts)))]
    for name in ("ring", "hd", "multitree", "ps"):
        algo = ALGORITHMS[name]
        try:
            sched = algo.schedule_among(topo, workers)
        except ScheduleError as exc:  # a torus or mesh subset that is not linked
            assert name == "multitree" and "not linked" in str(exc)
            continue
        assert set(sched.hosts) == set(workers)
        if name == "ps":  # the aggregator first, then the others in host order
            in_order = [h for h in topo.hosts if h in workers]
            agg = ps.aggregator(topo, in_order)
            assert list(sched.hosts) == [agg, *(h for h in in_order if h != agg)]
        else:
            assert list(sched.hosts) == [h for h in algo.order(topo, None) if h in workers]
        check(sched, topo, SIZE, promised=algo.promises(topo))
        if len(workers) == len(hosts):
            assert sched == algo.schedule(topo)  # every host: what `inaemu schedule` checks


def test_multitree_takes_fewer_steps_than_ring_on_a_4x4_torus() -> None:
    topo = topo_of("torus:4x4")
    tree, rng = (
        check(built("multitree", "torus:4x4"), topo, SIZE),
        check(built("ring", "torus:4x4"), topo, SIZE),
    )
    assert rng.steps == 30 and tree.steps < rng.steps
    assert tree.max_flows == rng.max_flows == 1


@pytest.mark.parametrize("spec", ["bigraph:1x2", "bigraph:4x4", "bigraph:2x6", "torus:4x4"])
def test_the_ring_s_default_order_crosses_each_link_once(spec: str) -> None:
    # alternating the BiGraph's parts, snaking the torus: one switch link per flow
    topo = topo_of(spec)
    sched = built("ring", spec)
    assert check(sched, topo, SIZE).max_flows == 1
    routes = FlowRoutes(topo)
    assert {routes.hops(sched.hosts[t.src], sched.hosts[t.dst]) for _, t in sched.transfers()} <= {
        0,
        1,
    }


# ---------------------------------------------------------------------- the worker-aggregator


@SETTINGS
@given(st.integers(1, 40))
def test_ps_all_reduces_any_number_of_ranks_in_two_steps(n: int) -> None:
    sched = Schedule("ps", tuple(f"h{i}" for i in range(n)), 1, ps.ps_steps(n))
    simulate(sched)
    assert len(sched.steps) == (2 if n > 1 else 0)
    for _, t in sched.transfers():  # every transfer to or from the aggregator, rank 0
        assert 0 in (t.src, t.dst) and (t.lo, t.hi) == (0, 1)


def test_ps_measures_on_a_star() -> None:
    topo = topo_of("star:5")
    m = check(built("ps", "star:5"), topo, 1000)
    assert (m.steps, m.chunks) == (2, 1)
    assert m.sent_max == 4 * 1000 and m.sent_mean == 2 * 4 * 1000 / 5  # the aggregator: n - 1
    assert m.max_flows == 4 and m.busiest == (0, ("s1", "h1"))  # 4 pushes into h1's NIC


@SETTINGS
@given(
    st.sampled_from(["mesh:3x3", "mesh:3x5", "mesh:1x5", "star:4", "leaf-spine:2x2x2"]), st.data()
)
def test_ps_aggregator_is_the_worker_nearest_the_others(spec: str, data: st.DataObject) -> None:
    topo = topo_of(spec) if spec in SPECS else from_spec(spec)
    workers = data.draw(st.permutations(list(topo.hosts)))
    workers = workers[: data.draw(st.integers(1, len(workers)))]
    sched = ALGORITHMS["ps"].schedule_among(topo, workers)
    routes = FlowRoutes(topo)

    def hops(h: str) -> int:
        return sum(routes.hops(h, w) for w in workers if w != h)

    agg = sched.hosts[0]
    assert hops(agg) == min(hops(w) for w in workers)
    assert agg == next(h for h in topo.hosts if h in workers and hops(h) == hops(agg))
    if spec == "mesh:3x3" and len(workers) == 9:
        assert agg == "h5"  # the centre


def test_hdrm_removes_the_contention_of_plain_halving_doubling() -> None:
    topo = topo_of("bigraph:4x8")
    plain = check(built("hd", "bigraph:4x8"), topo, SIZE)
    mapped = check(built("hdrm", "bigraph:4x8"), topo, SIZE, promised=True)
    assert plain.steps == mapped.steps and plain.max_flows > 1 and mapped.max_flows == 1


# ---------------------------------------------------------------------- the 2D ring


GRIDS = st.tuples(st.integers(1, 6), st.integers(1, 6), st.booleans()).filter(
    lambda g: not (g[2] and 2 in g[:2])  # a torus has no dimension of 2
)


@SETTINGS
@given(GRIDS, st.sampled_from(["all", "1"]))
def test_ring2d_all_reduces_contention_free_on_any_torus_or_mesh(
    grid: tuple[int, int, bool], ports: str
) -> None:
    rows, cols, wrap = grid
    topo = torus(rows, cols) if wrap else mesh(rows, cols)
    routes = FlowRoutes(topo, ports)
    sched = ALGORITHMS["ring2d"].schedule(topo, node_ports=ports)
    n = rows * cols
    size = n * sched.n_chunks * 16  # every chunk the same size: exact bytes below
    m = check(sched, topo, size, promised=True, routes=routes)
    assert m.max_flows <= 1
    # every node sends 2 (n - 1) / n of the array, the least an all-reduce can
    assert m.sent_max == m.sent_mean == 2 * (n - 1) * size // n
    dims = [d for d in (cols, rows) if d > 1]
    if ports == "1":  # one stream: reduce-scatter rows, columns; all-gather columns, rows
        assert m.steps == 2 * (rows - 1) + 2 * (cols - 1) and sched.n_chunks == n
    else:  # streams in both dimension orders (and on a torus both ways), phases aligned
        longest = max([rows, cols]) - 1
        assert m.steps == (4 * longest if len(dims) == 2 else 2 * longest)
        ways = 1 if not dims else (2 if wrap and min(dims) >= 3 else 1)
        assert sched.n_chunks == max(1, len(dims) * ways * n)
    for _, t in sched.transfers():  # within a row or column, along it
        (r1, c1), (r2, c2) = divmod(t.src, cols), divmod(t.dst, cols)
        assert r1 == r2 or c1 == c2
        assert routes.hops(sched.hosts[t.src], sched.hosts[t.dst]) <= (1 if wrap else 2)


def test_ring2d_on_a_torus_drives_the_four_links_of_every_node() -> None:
    # torus:4x4, all ports: every step every node sends one flow on each of its 4 links
    topo = topo_of("torus:4x4")
    sched = built("ring2d", "torus:4x4")
    routes = FlowRoutes(topo)
    for step in sched.steps:
        out = Counter(t.src for t in step)
        assert set(out.values()) == {4}
        for r in range(16):
            hosts = [(sched.hosts[t.src], sched.hosts[t.dst]) for t in step if t.src == r]
            links = {routes.contended_links(a, b) for a, b in hosts}
            assert len(links) == 4 and all(len(lk) == 1 for lk in links)


def _not_quite_a_grid(what: str) -> Topology:
    """A torus or mesh with one thing wrong."""
    if what == "link":
        topo = torus(3, 3)
        topo.links = [lk for lk in topo.links if {lk.a, lk.b} != {"s1_1", "s1_2"}]
    elif what == "extra link":
        topo = mesh(3, 3)
        topo.link("s1_1", "s3_3")
    elif what == "name":
        text = json.dumps(torus(3, 3).to_json()).replace('"s3_3', '"core')
        topo = Topology.from_json(json.loads(text))
    else:
        topo = mesh(2, 3)
        topo.add_host("h7", "10.0.0.7/16", "08:00:00:00:00:06")
        topo.link("h7", "s1_1")
    return topo


@pytest.mark.parametrize(
    ("what", "message"),
    [
        ("star:4", "ring2d runs on a torus or mesh"),
        ("bigraph:2x4", "ring2d runs on a torus or mesh"),
        ("link", "links of a 3x3 torus as torus:3x3 builds them; s1_1-s1_2 is missing"),
        ("extra link", "links of a 3x3 mesh as mesh:3x3 builds them; s1_1-s3_3 is not one"),
        ("name", r"every switch s<row>_<col> of a 3x3 grid and no other \(core is not one\)"),
        ("host", "one host on every switch of the grid; s1_1 has 2"),
    ],
)
def test_ring2d_refuses_what_is_not_a_grid_with_the_reason(what: str, message: str) -> None:
    topo = from_spec(what) if ":" in what else _not_quite_a_grid(what)
    with pytest.raises(ScheduleError, match=message):
        ring2d.schedule(topo)


def test_ring2d_runs_on_every_host_only() -> None:
    topo = topo_of("torus:3x3")
    with pytest.raises(ScheduleError, match="every host of the torus or mesh"):
        ALGORITHMS["ring2d"].schedule_among(topo, ["h1", "h2", "h3"])
    everyone = list(reversed(topo.hosts))
    assert ALGORITHMS["ring2d"].schedule_among(topo, everyone) == built("ring2d", "torus:3x3")
    assert ring2d.order(topo, ["h5", "h1"]) == ["h1", "h5"]  # the grid row by row


# ---------------------------------------------------------------------- the double binary tree


@SETTINGS
@given(st.integers(1, 70))
def test_dtree_all_reduces_any_number_of_ranks_one_send_one_receive_per_step(n: int) -> None:
    chunks, steps = dtree.dtree_steps(n)
    sched = Schedule("dtree", tuple(f"h{i}" for i in range(n)), chunks, steps)
    simulate(sched)
    assert chunks == 2 * max(1, n // 2)
    for step in steps:  # what makes it contention-free on a star
        assert max(Counter(t.src for t in step).values()) == 1
        assert max(Counter(t.dst for t in step).values()) == 1
    tree0, tree1 = dtree.double_tree(n)
    for i, step in enumerate(steps):  # chunks of the first half travel tree 0, the rest tree 1
        for t in step:
            tree = tree0 if t.lo < chunks // 2 else tree1
            child, parent = (t.src, t.dst) if t.op is Op.REDUCE else (t.dst, t.src)
            assert tree[child] == parent, (i, t)
    if n % 2 == 0:  # NCCL's mirror: every rank a leaf in one tree, an inner node of the other
        inner = [{p for p in tree if p >= 0} for tree in (tree0, tree1)]
        assert inner == [set(range(0, n, 2)), set(range(1, n, 2))]


def test_dtree_builds_nccl_s_trees() -> None:
    # NCCL's own picture of its binary tree over 14 ranks (src/graph/trees.cc):
    #   0---------------8
    #            ______/ \______
    #           4               12
    #         /   \            /  \
    #       2       6       10     \
    #      / \     / \     /  \     \
    #     1   3   5   7   9   11    13
    tree0, tree1 = dtree.double_tree(14)
    assert tree0 == (-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 12)
    assert tree1 == tuple(-1 if p < 0 else 13 - p for p in reversed(tree0))  # mirrored
    # an odd count: the second tree is the first shifted by one rank
    tree0, tree1 = dtree.double_tree(7)
    assert tree0 == (-1, 2, 4, 2, 0, 6, 4)
    assert tree1 == (5, -1, 3, 5, 3, 1, 0)  # rank r plays rank r - 1 of tree 0


@pytest.mark.parametrize("spec", ["star:2", "star:5", "star:8", "star:16"])
def test_dtree_is_contention_free_on_a_star(spec: str) -> None:
    topo = topo_of(spec) if spec in SPECS else from_spec(spec)
    m = check(algorithm("dtree").schedule(topo), topo, SIZE, promised=True)
    assert m.max_flows == 1


# ---------------------------------------------------------------------- the authors' simulator
#
# MULTITREE's authors' simulator (github.com/farabimahmud/accelerator, src/allreduce/), its
# ring, 2D ring and double binary tree on the node counts of their experiments (16 and 64
# nodes, 256 for weak scaling; tori of d x d nodes), read off their schedules (the steps of
# reduce_scatter_schedule less its closing entry, and of all_gather_schedule; the bytes as
# the data copies each node sends, a copy being 1/n of the array): steps, and the most and
# the mean of the array a node sends.
AUTHORS = {
    ("ring", 16): (30, 30 / 16, 30 / 16),
    ("ring", 64): (126, 126 / 64, 126 / 64),
    ("ring", 256): (510, 510 / 256, 510 / 256),
    # 4 flows per node and step, 1/(4d) of the array each, d - 1 steps each way
    ("ring2d", 16): (6, 1.5, 1.5),
    ("ring2d", 64): (14, 1.75, 1.75),
    ("ring2d", 256): (30, 1.875, 1.875),
    # n/2 chunks per tree, pipelined two steps apart, 2 ceil(log2 n) stages each way
    ("dtree", 4): (12, 2.0, 1.5),
    ("dtree", 8): (24, 2.0, 1.75),
    ("dtree", 16): (44, 2.0, 30 / 16),
    ("dtree", 32): (80, 2.0, 62 / 32),
    ("dtree", 64): (148, 2.0, 126 / 64),
    ("dtree", 128): (280, 2.0, 254 / 128),
    ("dtree", 256): (540, 2.0, 510 / 256),
}


def _ours(name: str, n: int) -> tuple[int, float, float]:
    """Our schedule's steps and the most and mean of the array a node sends (square tori for
    the ring and the 2D ring, the ranks alone for the tree)."""
    if name == "dtree":
        chunks, steps = dtree.dtree_steps(n)
        sched = Schedule(name, tuple(f"h{i}" for i in range(n)), chunks, steps)
    else:
        d = int(n**0.5)
        sched = algorithm(name).schedule(torus(d, d))
    sent = Counter[int]()
    for _, t in sched.transfers():
        sent[t.src] += t.hi - t.lo
    per = [sent[r] / sched.n_chunks for r in range(n)]
    return len(sched.steps), max(per), sum(per) / n


@pytest.mark.parametrize(("name", "n"), list(AUTHORS))
def test_steps_and_bytes_against_the_authors_simulator(name: str, n: int) -> None:
    theirs = AUTHORS[(name, n)]
    steps, most, mean = _ours(name, n)
    if name == "ring":  # the same ring
        assert (steps, most, mean) == pytest.approx(theirs)
    elif name == "dtree":
        # the same trees, chunks and bytes; our pipeline starts every edge at the first step
        # of its colour after its children, theirs spends two stages on every level of the
        # tree and one on its root: as many steps at 4, 16, 64 and 256 nodes, 2 fewer at 8,
        # 32 and 128 (and never more at any n their code runs, a multiple of 4, up to 256)
        assert (most, mean) == pytest.approx(theirs[1:])
        assert steps == theirs[0] - (0 if n in (4, 16, 64, 256) else 2)
    else:
        # theirs is our phases 1 and 4 (the rows' and columns' rings of the four streams),
        # without 2 and 3 (the second dimension's): half our steps, and 2 (d - 1) / d of the
        # array per node instead of an all-reduce's 2 (n - 1) / n
        d = int(n**0.5)
        assert steps == 2 * theirs[0] == 4 * (d - 1)
        assert most == mean == pytest.approx(2 * (n - 1) / n)
        assert theirs[1] == pytest.approx(2 * (d - 1) / d)
        assert mean - theirs[2] == pytest.approx(2 * (d - 1) / n)  # phases 2 and 3


def test_ring2d_phases_1_and_4_are_the_authors_flows() -> None:
    # on a d x d torus their 2D ring is 4n flows, every node the root of one per direction,
    # each a chain of d - 1 steps along its row or column carrying 1/(4d) of the array:
    # our first d - 1 steps (and our last d - 1, the same flows gathering)
    d = 4
    topo = torus(d, d)
    sched = ring2d.schedule(topo)
    routes = FlowRoutes(topo)
    for step in (*sched.steps[: d - 1], *sched.steps[-(d - 1) :]):
        assert len(step) == 4 * d * d
        for t in step:
            assert (t.hi - t.lo) / sched.n_chunks == 1 / (4 * d)
            assert routes.hops(sched.hosts[t.src], sched.hosts[t.dst]) == 1
        assert {(t.src, t.dst) for t in step} == {
            (r, n) for r in range(d * d) for n in _neighbours(r, d)
        }


def _neighbours(r: int, d: int) -> set[int]:
    row, col = divmod(r, d)
    return {
        row * d + (col + 1) % d,
        row * d + (col - 1) % d,
        ((row + 1) % d) * d + col,
        ((row - 1) % d) * d + col,
    }


# ---------------------------------------------------------------------- the checker


CORRUPTIBLE = [
    c for c in CASES if c[1] in ("star:5", "bigraph:2x4", "torus:3x3", "leaf-spine:3x2x2")
]


def _replace_step(sched: Schedule, i: int, step: tuple[Transfer, ...]) -> Schedule:
    steps = list(sched.steps)
    steps[i] = step
    return dataclasses.replace(sched, steps=tuple(steps))


@SETTINGS
@given(st.sampled_from(CORRUPTIBLE), st.data())
def test_the_checker_catches_a_dropped_transfer(case: tuple[str, str], data: st.DataObject) -> None:
    sched = built(*case)
    where = list(sched.transfers())
    if not where:
        return
    k = data.draw(st.integers(0, len(where) - 1))
    i, t = where[k]
    bad = _replace_step(sched, i, tuple(x for x in sched.steps[i] if x is not t))
    with pytest.raises(ScheduleError):
        simulate(bad)


@SETTINGS
@given(st.sampled_from(CORRUPTIBLE), st.data())
def test_the_checker_catches_a_duplicated_transfer(
    case: tuple[str, str], data: st.DataObject
) -> None:
    sched = built(*case)
    where = list(sched.transfers())
    if not where:
        return
    i, t = where[data.draw(st.integers(0, len(where) - 1))]
    j = data.draw(st.integers(i, len(sched.steps) - 1))  # the same step or a later one
    bad = _replace_step(sched, j, (*sched.steps[j], t))
    with pytest.raises(ScheduleError):
        simulate(bad)


def test_the_checker_names_the_first_fault() -> None:
    hosts = ("a", "b", "c")
    twice = Schedule(
        "x",
        hosts,
        1,
        ((Transfer(0, 1, 0, 1, Op.REDUCE),), (Transfer(0, 1, 0, 1, Op.REDUCE),)),
    )
    with pytest.raises(ScheduleError, match=r"x, step 1: rank 1 \(b\) chunk 0: .* ranks 0 twice"):
        simulate(twice)
    missing = Schedule("x", hosts, 1, ((Transfer(0, 1, 0, 1, Op.REDUCE),),))
    with pytest.raises(ScheduleError, match=r"rank 0 \(a\) chunk 0 lacks .* ranks 1-2"):
        simulate(missing)
    clash = Schedule(
        "x", hosts, 1, ((Transfer(0, 2, 0, 1, Op.COPY), Transfer(1, 2, 0, 1, Op.REDUCE)),)
    )
    with pytest.raises(ScheduleError, match="written twice in one step"):
        simulate(clash)
    dropping = Schedule("x", ("a", "b"), 1, ((Transfer(0, 1, 0, 1, Op.COPY),),))
    with pytest.raises(ScheduleError, match="drops the contributions of ranks 1"):
        simulate(dropping)
    wasted = Schedule(
        "x",
        ("a", "b"),
        1,
        (
            (Transfer(0, 1, 0, 1, Op.REDUCE),),
            (Transfer(1, 0, 0, 1, Op.COPY),),
            (Transfer(0, 1, 0, 1, Op.COPY),),
        ),
    )
    with pytest.raises(ScheduleError, match="a COPY from 0 of what the rank already holds"):
        simulate(wasted)
    assert ranks_text(0b101111) == "0-3, 5"


def test_a_broken_promise_is_an_error() -> None:
    topo = topo_of("bigraph:4x4")
    with pytest.raises(ScheduleError, match="promised contention-free, but step"):
        check(built("hd", "bigraph:4x4"), topo, SIZE, promised=True)


def test_measures_of_the_ring_on_a_star() -> None:
    topo = topo_of("star:5")
    m = measure(built("ring", "star:5"), topo, 1000)
    assert (m.steps, m.chunks, m.max_flows) == (8, 5, 1)
    assert m.sent_max == m.sent_mean == 8 * 200  # 2 (n - 1) chunks of 200 bytes
    assert m.link_bytes == 5 * 8 * 200 * 2  # every flow crosses two host links


# ---------------------------------------------------------------------- routes


@pytest.mark.parametrize("spec", ["bigraph:2x4", "fat-tree:4", "leaf-spine:2x3x2", "torus:3x3"])
def test_flow_routes_follow_the_installed_routes(spec: str) -> None:
    topo, routes = topo_of(spec), FlowRoutes(topo_of(spec))
    out = {
        (sw, w.key[0]): w.params[1] for sw, plan in route_plans(topo).items() for w in plan.tables
    }
    adj = topo.adjacency()
    for a in topo.hosts:
        for b in topo.hosts:
            if a == b:
                continue
            links = routes.links(a, b)
            assert links[0] == (a, routes.home(a)) and links[-1] == (routes.home(b), b)
            for sw, nxt in links[1:-1]:
                assert adj[sw][out[(sw, ip_int(topo.hosts[b].ip))]][0] == nxt
            assert len(links) - 2 == topo.distances(routes.home(a))[routes.home(b)]


def test_bigraph_routes_within_a_part_cross_the_other_part() -> None:
    topo = topo_of("bigraph:2x4")
    links = FlowRoutes(topo).links("h1", "h3")  # s1 and s2, both upper
    assert len(links) == 4 and topo.switches[links[1][1]].role == "lower"


def test_torus_host_links_are_internal() -> None:
    routes = FlowRoutes(topo_of("torus:3x3"))
    assert routes.links("h1", "h2")[0] == ("h1", "s1_1")
    assert routes.contended_links("h1", "h2") == (("s1_1", "s1_2"),)
    with pytest.raises(RouteError, match="not a host"):
        routes.links("h1", "s1_1")


@pytest.mark.parametrize(
    ("spec", "capacities"),
    [("torus:3x3", {4}), ("mesh:3x3", {2, 3, 4}), ("torus:1x4", {2}), ("star:3", {1})],
)
def test_the_node_models(spec: str, capacities: set[int]) -> None:
    topo = topo_of(spec) if spec in SPECS else from_spec(spec)
    every, one = FlowRoutes(topo, "all"), FlowRoutes(topo, "1")
    for h in topo.hosts:
        link = (h, every.home(h))
        assert one.capacity(link) == 1 and not one.internal(link)
        assert every.internal(link) == (every.capacity(link) > 1) == every.direct(link)
    assert {every.capacity((h, every.home(h))) for h in topo.hosts} == capacities
    # one interface: the host links are contended like a NIC's
    a, b = list(topo.hosts)[:2]
    assert one.contended_links(a, b) == one.links(a, b)
    if capacities == {1}:  # a switched network: a host link is a NIC in both models
        assert every.contended_links(a, b) == every.links(a, b)
    else:  # all ports: the host links are the nodes' internal ports
        assert every.contended_links(a, b) == every.links(a, b)[1:-1]
    with pytest.raises(ValueError, match="use all or 1"):
        FlowRoutes(topo, "4")


@SETTINGS
@given(st.sampled_from([3, 4, 5]), st.sampled_from([1, 3, 4]), st.booleans())
def test_multitree_under_one_interface_is_contention_free_on_its_host_links(
    rows: int, cols: int, wrap: bool
) -> None:
    topo = torus(rows, cols) if wrap else mesh(rows, cols)
    routes = FlowRoutes(topo, "1")
    sched = ALGORITHMS["multitree"].schedule(topo, node_ports="1")
    m = check(sched, topo, SIZE, promised=True, routes=routes)
    n = len(topo.hosts)
    assert m.max_flows <= 1 and m.steps >= 2 * (n - 1)  # one send per node per step
    for load in step_loads(sched, routes):  # the host links included
        assert all(count == 1 for count in load.values())


def test_a_schedule_built_for_all_ports_contends_on_one_interface() -> None:
    # MultiTree's concurrent sends of the all-ports model queue on a one-interface node's link
    topo = topo_of("torus:3x3")
    sched = built("multitree", "torus:3x3")
    assert check(sched, topo, SIZE, routes=FlowRoutes(topo, "all")).max_flows == 1
    assert check(sched, topo, SIZE, routes=FlowRoutes(topo, "1")).max_flows > 1


def test_the_alpha_beta_prediction() -> None:
    model = LinkModel(bw=1e6, alpha=0.5)
    star4 = topo_of("star:4") if "star:4" in SPECS else from_spec("star:4")
    # the ring: 6 steps, each putting a quarter of the array on every host link
    ring4 = algorithm("ring").schedule(star4)
    assert predict_seconds(ring4, FlowRoutes(star4), 4_000_000, model) == 6 * (0.5 + 1.0)
    # the worker-aggregator: 3 arrays into, then out of, the aggregator's one link
    ps4 = algorithm("ps").schedule(star4)
    assert predict_seconds(ps4, FlowRoutes(star4), 1_000_000, model) == 2 * (0.5 + 3.0)
    # torus:3x3, all ports: MultiTree's steps each move one chunk per network link, and a
    # node's host link carries its 4 ports at once; with one interface up to 4 chunks queue
    topo = topo_of("torus:3x3")
    tree = built("multitree", "torus:3x3")
    size, chunk = 9_000_000, 1_000_000
    every = predict_seconds(tree, FlowRoutes(topo, "all"), size, LinkModel(bw=1e6))
    assert every == len(tree.steps) * chunk / 1e6
    one = predict_seconds(tree, FlowRoutes(topo, "1"), size, LinkModel(bw=1e6))
    assert every < one <= 4 * every
    m = measure(tree, topo, size, model=LinkModel(bw=1e6))
    assert m.seconds == every and m.node_ports == "all"
    with pytest.raises(ValueError, match="bw"):
        LinkModel(bw=0)


# ---------------------------------------------------------------------- JSON and the CLI


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_json_round_trip(name: str, tmp_path: Path) -> None:
    sched = built(name, "torus:3x3" if name == "ring2d" else "bigraph:2x4")
    assert Schedule.from_json(json.loads(json.dumps(sched.to_json()))) == sched
    sched.save(tmp_path / "s.json")
    assert Schedule.load(tmp_path / "s.json") == sched


def test_cli_prints_the_table_and_writes_a_schedule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert controller_cli.main(["schedule", "--topo", "bigraph:2x4", "--size", "1000"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()[0] in ALGORITHMS}
    assert set(rows) == {"ring", "hd", "hdrm", "multitree", "ps", "dtree"}
    assert "bigraph:2x4: ring2d does not run on a bigraph topology; it supports torus, mesh" in out
    assert rows["hdrm"].endswith("yes (promised)") and rows["hd"].endswith("no")
    target = tmp_path / "s.json"
    code = schedule_cli.main(
        [
            "--topo",
            "torus:3x3",
            "--algo",
            "multitree",
            "--workers",
            "h1,h2,h4,h5",
            "-o",
            str(target),
        ]
    )
    assert code == 0
    sched = Schedule.load(target)
    assert sched.algo == "multitree" and sched.hosts == ("h1", "h2", "h4", "h5")
    out = capsys.readouterr().out
    assert "not run:\n  hdrm" not in out and f"wrote {target}" in out
    assert schedule_cli.main(["--topo", "torus:3x3", "--topo", "star:3", "--algo", "hd"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[:2] for line in out.splitlines() if line.startswith("hd ")] == [
        ["hd", "torus:3x3"],
        ["hd", "star:3"],
    ]
    assert schedule_cli.main(["--topo", "torus:3x3"]) == 0
    out = capsys.readouterr().out
    assert "not run:\n  torus:3x3: hdrm does not run on a torus" in out
    assert "ring2d" in {line.split()[0] for line in out.splitlines() if line}
    assert "torus and mesh nodes: all network ports at once" in out
    args = ["--topo", "torus:3x3", "--algo", "multitree", "--size", "9000000", "--bw", "8"]
    assert schedule_cli.main([*args, "--alpha", "0", "--node-ports", "1"]) == 0
    out = capsys.readouterr().out
    assert "torus and mesh nodes: one interface" in out
    (row,) = [line.split() for line in out.splitlines() if line.startswith("multitree")]
    assert row[3] == "18" and row[-2] == "yes"  # 18 steps of one 1 MB chunk per node each
    assert row[-3] == "18.0000"  # 1 MB at 1 MB/s per step


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topo", "torus:4x4", "--algo", "hdrm"], "hdrm does not run on a torus topology"),
        (["--topo", "bigraph:4x4", "--algo", "hdrm"], "not bigraph:4x4"),
        (["--topo", "torus:2x2"], "dimension of 2"),
        (["--topo", "no-such.json"], "no such topology file"),
        (["--topo", "star:4", "--algo", "tree"], "unknown algorithm 'tree'"),
        (["--topo", "star:4", "-o", "x.json"], "-o writes one schedule"),
        (["--topo", "star:4", "--topo", "star:3", "--algo", "hd", "-o", "x.json"], "one --topo"),
        (["--topo", "star:4", "--workers", "h1,h9"], "unknown worker 'h9'"),
        (["--topo", "star:4", "--workers", "h1,h1"], "named twice"),
        (["--topo", "mesh:3x3", "--algo", "multitree", "--workers", "h1,h9"], "not linked"),
        (["--topo", "star:4", "--algo", "ring2d"], "ring2d does not run on a star topology"),
        (["--topo", "torus:3x3", "--algo", "ring2d", "--workers", "h1,h2"], "every host"),
    ],
)
def test_cli_errors_are_one_line_and_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert controller_cli.main(["schedule", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("inaemu schedule: ") and message in err and err.count("\n") == 1


@pytest.mark.parametrize("n_chunks", [10**15, 2**16 + 1, 0])
def test_a_schedule_of_too_many_chunks_is_refused_in_one_line(
    tmp_path: Path, n_chunks: int
) -> None:
    """Issue 22 (item 10): the chunk count of a schedule file is capped (`MAX_CHUNKS`). A
    worker given one of 10^15 chunks went on cutting its array into them (it hung); now it
    says what is wrong and exits 2, before it connects to anyone."""
    path = tmp_path / "s.json"
    doc = Schedule("ring", ("h1",), 1, ()).to_json()
    path.write_text(json.dumps({**doc, "n_chunks": n_chunks}))
    with pytest.raises(ScheduleError, match=f"n_chunks is {n_chunks}, not within 1..65,536"):
        Schedule.load(path)
    argv = [sys.executable, "-m", "inaemu.hostlib.collective.worker", "--schedule", str(path)]
    argv += ["--rank", "0", "--peers", "127.0.0.1:1", "--size", "100"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"n_chunks is {n_chunks}, not within 1..65,536" in proc.stderr
    assert Schedule("ring", ("h1",), MAX_CHUNKS, ()).validate().n_chunks == MAX_CHUNKS
