"""MULTITREE (Huang, Paraskevas, Dutu et al., "Communication Algorithm-Architecture Co-Design
for Distributed Deep Learning", ISCA'21): one spanning tree per rank, built all together, one
time step at a time.

The array is cut into n chunks, one per rank; tree i, rooted at rank i, carries chunk i. The
trees are grown as all-gathers: at time step 0 each tree holds only its root; in step t the
trees take turns, in rounds, each adding at most one rank per turn: a rank u that joined its
tree before step t sends the chunk to a rank v not yet in it, if no link of the flow u -> v
is already used in step t. Each round serves the trees with the fewest ranks first (ties:
from tree t mod n on), so that no tree lags behind (30 instead of 32 steps on fat-tree:4, 136
instead of 142 on bigraph:8x8). Rounds repeat until no tree can grow in step t; then step
t + 1. So in every step every directed link carries at most one flow, which on a switched
network (star, leaf-spine, fat tree, BiGraph: a host's one link is its NIC) means that every
NIC sends at most once and receives at most once.

Who u may send to:

- torus and mesh (direct networks: every switch is its host's own router, `routes`) under
  node model `all` (the default, the paper's: a node drives all its network links at once):
  only its neighbours, one link away, as in the paper. Every link of every node can be busy
  at once, so a tree can add up to 4 ranks per step through one node.
- every other topology, and a torus or mesh under node model `1` (one interface per node,
  its host link, which then contends like a NIC): any rank, along the topology's route
  (`routes.FlowRoutes`), the same link constraint applied to every link of the route, the
  node's host link included (so a node sends at most once per step there, as a host with one
  NIC does on a switched network). Nearer ranks first: a step first lets
  the trees take turns over flows of the fewest links only (e.g. within one switch), then
  allows the next longer ones, and so on (without this, long detours such as a BiGraph's
  paths within one part take links that shorter flows of other trees could use: 52 instead
  of 36 steps on bigraph:4x4); among equally long flows, the ranks after u come first.

Each tree is thus a shortest-time broadcast under the constraints. The all-gather copies
chunk i down tree i in these steps; the reduce-scatter runs it in reverse (a rank added in
step t adds its chunk into its parent's in step T - 1 - t, T the all-gather's steps), so a
rank sends after all its children have: 2T steps, each contention-free by construction.
"""

from __future__ import annotations

from collections.abc import Sequence

from inaemu.collectives.ranks import host_order, own_order, worker_hosts
from inaemu.collectives.schedule import Op, Schedule, ScheduleError, Step, Transfer
from inaemu.topology.model import Topology
from inaemu.topology.routes import ALL_PORTS, FlowRoutes, Link

Edge = tuple[int, int, int]  # (step, parent rank, child rank)


def _candidates(
    order: tuple[str, ...], routes: FlowRoutes
) -> list[list[tuple[int, tuple[int, ...]]]]:
    """For every rank u: the ranks it may send to, with the ids of the links the flow
    contends on, in order of preference (see the module's docstring). The ids cover both
    the flow u -> v (the all-gather's step) and v -> u (the reduce-scatter's mirror step),
    each in its own id space: where a route back is not the route there reversed, the
    reduce-scatter's flows must not share a link either."""
    n = len(order)
    ids: dict[tuple[int, Link], int] = {}
    direct = all(routes.internal((h, routes.home(h))) for h in order)
    out = []
    for u in range(n):
        options = []
        for v in range(n):
            if v == u:
                continue
            if direct and routes.hops(order[u], order[v]) != 1:
                continue
            there = routes.contended_links(order[u], order[v])
            back = routes.contended_links(order[v], order[u])
            lids = tuple(
                ids.setdefault(key, len(ids))
                for key in [(0, lk) for lk in there] + [(1, lk) for lk in back]
            )
            options.append((len(lids), (v - u) % n, v, lids))
        options.sort()
        out.append([(v, lids) for _, _, v, lids in options])
    if direct:
        _require_connected(order, out)
    return out


def _require_connected(
    order: tuple[str, ...], cand: list[list[tuple[int, tuple[int, ...]]]]
) -> None:
    seen, todo = {0}, [0]
    while todo:
        for v, _ in cand[todo.pop()]:
            if v not in seen:
                seen.add(v)
                todo.append(v)
    if len(seen) < len(order):
        cut = next(order[r] for r in range(len(order)) if r not in seen)
        raise ScheduleError(
            f"multitree grows its trees over the links between the workers of a torus or "
            f"mesh, and {cut} is not linked to {order[0]} through workers: name a connected "
            "set of workers (or all hosts)"
        )


def build_trees(order: tuple[str, ...], routes: FlowRoutes) -> list[list[Edge]]:
    """Every rank's tree as the edges it grows, (step, parent, child), in step order."""
    n = len(order)
    cand = _candidates(order, routes)
    # the link every flow out of u starts on (its NIC), -1 if there is none
    nic = [
        opts[0][1][0] if opts and all(lids[:1] == opts[0][1][:1] for _, lids in opts) else -1
        for opts in cand
    ]
    joined = [{i: -1} for i in range(n)]  # tree -> rank -> the step it joined in
    members = [[i] for i in range(n)]  # tree -> its ranks in the order they joined
    trees: list[list[Edge]] = [[] for _ in range(n)]
    lengths = sorted({len(lids) for opts in cand for _, lids in opts})
    left = sum(1 for i in range(n) if len(members[i]) < n)
    t = 0
    while left:
        used: set[int] = set()
        grown_in_step = False
        for limit in lengths:
            progress = True
            while progress:
                progress = False
                for i in sorted(range(n), key=lambda i: (len(members[i]), (i - t) % n)):
                    tree = joined[i]
                    if len(tree) == n:
                        continue
                    edge = _grow(tree, members[i], cand, nic, used, t, limit)
                    if edge is None:
                        continue
                    u, v = edge
                    tree[v] = t
                    members[i].append(v)
                    trees[i].append((t, u, v))
                    progress = grown_in_step = True
                    if len(tree) == n:
                        left -= 1
        if not grown_in_step:  # cannot happen on a connected candidate graph
            raise ScheduleError(f"multitree: no tree can grow in step {t}")
        t += 1
    return trees


def _grow(
    tree: dict[int, int],
    members: list[int],
    cand: list[list[tuple[int, tuple[int, ...]]]],
    nic: list[int],
    used: set[int],
    t: int,
    limit: int,
) -> tuple[int, int] | None:
    """The first (u, v) the tree can add in step t with free links, marking them used."""
    for u in members:
        if tree[u] >= t:
            break  # joined in this step: it gets the chunk only at the step's end
        if nic[u] in used:
            continue  # u's NIC already sends in this step
        for v, lids in cand[u]:
            if len(lids) > limit:
                break
            if v in tree:
                continue
            if all(lid not in used for lid in lids):
                used.update(lids)
                return u, v
    return None


def schedule_of_trees(algo: str, order: tuple[str, ...], trees: Sequence[list[Edge]]) -> Schedule:
    """The allreduce of the trees: reduce-scatter up each tree (the all-gather reversed), then
    the all-gather down it; tree i carries chunk i."""
    steps_ag = 1 + max((t for tree in trees for t, _, _ in tree), default=-1)
    gather: list[list[Transfer]] = [[] for _ in range(steps_ag)]
    scatter: list[list[Transfer]] = [[] for _ in range(steps_ag)]
    for i, tree in enumerate(trees):
        for t, parent, child in tree:
            gather[t].append(Transfer(parent, child, i, i + 1, Op.COPY))
            scatter[steps_ag - 1 - t].append(Transfer(child, parent, i, i + 1, Op.REDUCE))
    steps: tuple[Step, ...] = tuple(tuple(s) for s in (*scatter, *gather))
    return Schedule(algo, order, len(order), steps).validate()


def order(topo: Topology, among: Sequence[str] | None = None) -> list[str]:
    """MULTITREE's own rank order over the workers `among` (default every host): the
    topology's host order (every rank roots a tree; the order only breaks ties)."""
    return own_order(topo, host_order(topo), among)


def schedule(
    topo: Topology, hosts: Sequence[str] | None = None, *, node_ports: str = ALL_PORTS
) -> Schedule:
    """MULTITREE over `hosts` (rank order; default: `order`), its trees grown under the node
    model `node_ports` (`routes`)."""
    ranks = worker_hosts(topo, hosts, order(topo))
    routes = FlowRoutes(topo, node_ports)
    return schedule_of_trees("multitree", ranks, build_trees(ranks, routes))
