"""Aggregation trees over many switches: where the roots go, and which links each tree takes.

A job's chunks are striped over T trees (chunk i uses tree (i mod W) mod T). Each tree is a
tree of switches: every switch that holds workers of the job is in it and adds up its local
workers first (one partial up per chunk), partials go up to the root, results come down
the same way. A switch with no worker is in a tree only on the way to one that has.

Roots (`choose_roots`): the switches closest to all the workers' switches (the smallest
worst hop count, then the smallest total), spread out: each next root is the candidate
farthest from the roots already taken. So the trees of a leaf-spine job are rooted at its
spines, of a fat-tree job at cores of different aggregation groups, of a BiGraph job at
every switch.

Links (`build_trees`), after MultiTree (Huang et al., ISCA'21), applied to switch trees:

1. Every tree is a shortest-path tree from its root: a switch sits at its hop distance from
   the root, so no tree is deeper than it must be.
2. The trees grow level by level and take turns: at distance 1 tree 0 adds a switch, then
   tree 1, ..., then tree 0 its next one, until every tree has all its workers' switches at
   that distance; then distance 2, and so on. A switch joins through the upward path (to a
   switch its tree already has, one level up at each step) whose most loaded link carries
   the fewest trees so far, then with the fewest new links, then with the smallest total
   load; among equals, tree t takes the t-th (round robin) so that equal choices spread.
3. Keeping the switches each tree has, every switch's parent (one level up, in the same
   tree) is chosen again so that the most loaded link carries as few trees as possible
   (`minimize_max_load`: a b-matching of (tree, switch) pairs to links, solved exactly with
   augmenting paths). A switch left without children and without workers leaves its tree.
4. Then, while some tree can move a switch (with what hangs below it) to another parent one
   level up on a link that would still carry fewer trees than the one it leaves, it does
   (and prunes as in 3). Every move lowers the sum of squared loads and none raises the
   maximum, so this ends.

Steps 3 and 4 repeat until no tree loses a switch. Then, for the switches each tree holds,
no choice of parents has a lower maximum load (`tests/test_topologies.py` checks it against
brute force), and no tree can lower the load of its link to a parent by moving to another
parent in the tree (`locally_balanced`).

A link's load is the number of trees that use it; a tree uses both directions of each of its
links (partials up, results down), so each direction of a link carries the same trees, and
the maximum over directed links is the maximum over links. `link_trees` counts them per
directed link; docs/topologies.md lists the maximum for the built-in topologies.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from inaemu.common.wire import INA_UDP_PORT, MAX_FANIN, worker_udp_port
from inaemu.topology.model import Topology, TopologyError

PortEnd = tuple[str, int]  # (switch, port)
LinkKey = tuple[PortEnd, PortEnd]  # an undirected link: its two ends, sorted
DirectedLink = tuple[str, int, str, int]  # (from switch, its port, to switch, its port)
Parent = tuple[str, int, int]  # (parent switch, port towards it, parent's port towards us)


class TreeError(ValueError):
    """Trees that cannot be built (a worker no root reaches, a fan-in above the bitmap)."""


@dataclass
class TreeNode:
    """One switch's role in one aggregation tree. Its children, in child-index order, are
    its workers (a host's ranks one after another, on the host's port, each from its own UDP
    port) and then the switches below it (each on its own port, from the INA port)."""

    switch: str
    is_root: bool = False
    parent_port: int = 0
    child_ports: list[int] = field(default_factory=list)  # child index = position
    host_ports: dict[int, str] = field(default_factory=dict)  # child ports leading to workers
    # the UDP port each child sends from, by child index ([]: the INA port for every child)
    child_udp_ports: list[int] = field(default_factory=list)

    def children(self) -> list[tuple[int, int]]:
        """(switch port, UDP source port) of each child, in child-index order: what the
        switch knows a child by (ina_child's key)."""
        udp = self.child_udp_ports or [INA_UDP_PORT] * len(self.child_ports)
        if len(udp) != len(self.child_ports):
            raise TreeError(
                f"switch {self.switch!r}: {len(self.child_ports)} child ports but "
                f"{len(udp)} UDP ports"
            )
        return list(zip(self.child_ports, udp, strict=True))

    def host_children(self) -> dict[int, list[int]]:
        """Host port -> the UDP ports of the workers behind it, in child-index order."""
        out: dict[int, list[int]] = {}
        for port, udp in self.children():
            if port in self.host_ports:
                out.setdefault(port, []).append(udp)
        return out


def _link(a: str, a_port: int, b: str, b_port: int) -> LinkKey:
    x, y = (a, a_port), (b, b_port)
    return (x, y) if x <= y else (y, x)


def worker_switches(topo: Topology, workers: Sequence[str]) -> dict[str, list[tuple[int, str]]]:
    """switch -> [(port, worker)] of the job's workers on it, in the workers' order."""
    homes: dict[str, list[tuple[int, str]]] = {}
    for host in workers:
        sw, port = topo.host_attachment(host)
        homes.setdefault(sw, []).append((port, host))
    return homes


def root_candidates(topo: Topology, workers: Sequence[str]) -> list[str]:
    """The switches with the smallest worst hop count to the workers' switches, then the
    smallest total, in topology order."""
    targets = set(worker_switches(topo, workers))
    scored: list[tuple[int, int, int, str]] = []
    for i, sw in enumerate(topo.switches):
        dist = topo.distances(sw)
        if all(t in dist for t in targets):
            scored.append((max(dist[t] for t in targets), sum(dist[t] for t in targets), i, sw))
    if not scored:
        raise TreeError("no switch reaches every worker of the job")
    scored.sort()
    return [sw for worst, total, _, sw in scored if (worst, total) == scored[0][:2]]


def choose_roots(topo: Topology, workers: Sequence[str], n: int) -> list[str]:
    """Roots of n trees: the candidates (`root_candidates`), each next one the farthest from
    those already taken (ties: topology order); with more trees than candidates, round
    again in the same order."""
    candidates = root_candidates(topo, workers)
    dist = {sw: topo.distances(sw) for sw in candidates}
    order = [candidates[0]]
    while len(order) < min(n, len(candidates)):
        rest = [c for c in candidates if c not in order]
        far = max(min(dist[c].get(r, 1 << 30) for r in order) for c in rest)
        order.append(next(c for c in rest if min(dist[c].get(r, 1 << 30) for r in order) == far))
    return [order[t % len(order)] for t in range(n)]


def auto_tree_count(topo: Topology, workers: Sequence[str], pool_size: int) -> int:
    """One tree per root candidate (per spine, per core, ...), or the largest count at most
    that which divides `pool_size` (each tree gets pool_size / T slots)."""
    n = min(len(root_candidates(topo, workers)), 255, max(pool_size, 1))
    while pool_size % n:
        n -= 1
    return n


class _Builder:
    def __init__(self, topo: Topology, workers: Sequence[str], roots: Sequence[str]) -> None:
        self.adj = topo.adjacency()
        self.hosts = topo.hosts
        self.homes = worker_switches(topo, workers)
        self.targets = set(self.homes)
        self.roots = list(roots)
        self.dist = [topo.distances(r) for r in self.roots]
        for t, root in enumerate(self.roots):
            for sw, hosts in self.homes.items():
                if sw not in self.dist[t]:
                    raise TreeError(
                        f"worker {hosts[0][1]!r} on switch {sw!r} cannot reach root {root!r}"
                    )
        self.parent: list[dict[str, Parent | None]] = [{r: None} for r in self.roots]
        self.children: list[dict[str, int]] = [{} for _ in self.roots]
        self.load: dict[LinkKey, int] = {}

    def _load(self, u: str, port: int, p: str, p_port: int) -> int:
        return self.load.get(_link(u, port, p, p_port), 0)

    def _add_edge(self, t: int, u: str, up: Parent) -> None:
        p, port, p_port = up
        self.parent[t][u] = up
        self.children[t][p] = self.children[t].get(p, 0) + 1
        key = _link(u, port, p, p_port)
        self.load[key] = self.load.get(key, 0) + 1

    def _drop_edge(self, t: int, u: str) -> None:
        up = self.parent[t][u]
        assert up is not None
        p, port, p_port = up
        self.children[t][p] -= 1
        self.load[_link(u, port, p, p_port)] -= 1

    def _ups(self, t: int, u: str) -> list[Parent]:
        """u's links one level up in tree t (towards its root), in port order."""
        dist = self.dist[t]
        return [
            (p, port, p_port)
            for port, (p, p_port) in sorted(self.adj[u].items())
            if dist.get(p, -1) == dist[u] - 1
        ]

    def attach(self, t: int, v: str) -> None:
        """Add v to tree t by the least loaded upward path to the tree (see the module doc)."""
        memo: dict[str, tuple[tuple[int, int, int], list[tuple[str, Parent]]]] = {}

        def best(u: str) -> tuple[tuple[int, int, int], list[tuple[str, Parent]]]:
            if u in memo:
                return memo[u]
            options: list[tuple[tuple[int, int, int], list[tuple[str, Parent]]]] = []
            for up in self._ups(t, u):
                load = self._load(u, up[1], up[0], up[2])
                if up[0] in self.parent[t]:
                    options.append(((load, 1, load), [(u, up)]))
                else:
                    (worst, n, total), path = best(up[0])
                    options.append(((max(worst, load), n + 1, total + load), [(u, up), *path]))
            assert options, f"{u} has no link one level up towards {self.roots[t]}"
            least = min(cost for cost, _ in options)
            ties = [o for o in options if o[0] == least]
            memo[u] = ties[t % len(ties)]
            return memo[u]

        for u, up in best(v)[1]:
            self._add_edge(t, u, up)

    def grow(self) -> None:
        """Level by level, the trees taking turns (the module doc, step 2)."""
        depth = max(max(d[s] for s in self.targets) for d in self.dist)
        for level in range(1, depth + 1):
            queues = [
                sorted(s for s in self.targets if self.dist[t][s] == level)
                for t in range(len(self.roots))
            ]
            while any(queues):
                for t, queue in enumerate(queues):
                    while queue and queue[0] in self.parent[t]:
                        queue.pop(0)  # already in the tree, on the way to a deeper one
                    if queue:
                        self.attach(t, queue.pop(0))

    def _rebuild(self, chosen: dict[tuple[int, str], Parent]) -> None:
        """Trees from a parent per (tree, switch) over the same switches; then switches left
        without children and workers leave their trees."""
        self.children = [{} for _ in self.roots]
        self.load = {}
        for tree in self.parent:
            for u in tree:
                tree[u] = None
        for (t, u), up in sorted(chosen.items()):
            self._add_edge(t, u, up)
        for t, tree in enumerate(self.parent):
            for u in sorted(tree):
                if u in tree:
                    self._prune(t, u)

    def minimize_max_load(self) -> None:
        """Keep the switches of every tree and choose each one's parent (one level up, in the
        same tree) so that the most loaded link carries as few trees as possible: the loads
        are a b-matching of (tree, switch) pairs to links, and a bound L is feasible when
        augmenting paths place every pair on a link with fewer than L pairs. The bound goes
        down from the current one until it is not feasible (the module doc, step 3)."""
        pairs = [(t, u) for t, tree in enumerate(self.parent) for u, up in tree.items() if up]
        options: list[list[tuple[LinkKey, Parent]]] = [
            [
                (_link(u, up[1], up[0], up[2]), up)
                for up in self._ups(t, u)
                if up[0] in self.parent[t]
            ]
            for t, u in pairs
        ]
        current = [
            next(j for j, (_, up) in enumerate(options[i]) if up == self.parent[t][u])
            for i, (t, u) in enumerate(pairs)
        ]
        bound = max(self.load.values(), default=0)
        while bound > 1:
            trial = _assign(options, current, bound - 1)
            if trial is None:
                break
            current, bound = trial, bound - 1
        self._rebuild({pairs[i]: options[i][j][1] for i, j in enumerate(current)})

    def rebalance(self) -> None:
        """Move switches to less loaded parents until none can (the module doc, step 4)."""
        moved = True
        while moved:
            moved = False
            for t in range(len(self.roots)):
                for u in sorted(self.parent[t], key=lambda s: (self.dist[t][s], s)):
                    up = self.parent[t].get(u)
                    if up is None:
                        continue  # the root, or pruned in this pass
                    now = self._load(u, up[1], up[0], up[2])
                    alts = [
                        (self._load(u, a[1], a[0], a[2]), a)
                        for a in self._ups(t, u)
                        if a[0] in self.parent[t] and a != up
                    ]
                    if not alts:
                        continue
                    load, alt = min(alts)
                    if load + 1 < now:
                        self._drop_edge(t, u)
                        self._add_edge(t, u, alt)
                        self._prune(t, up[0])
                        moved = True

    def _prune(self, t: int, sw: str) -> None:
        """Remove sw from tree t if it has no children and no workers (then its parent too)."""
        while (
            self.children[t].get(sw, 0) == 0
            and sw not in self.targets
            and self.parent[t].get(sw) is not None
        ):
            up = self.parent[t][sw]
            assert up is not None
            self._drop_edge(t, sw)
            del self.parent[t][sw]
            sw = up[0]

    def nodes(self) -> list[dict[str, TreeNode]]:
        trees: list[dict[str, TreeNode]] = []
        for t, parents in enumerate(self.parent):
            nodes = {sw: TreeNode(sw, is_root=up is None) for sw, up in parents.items()}
            for sw, node in nodes.items():
                for port, host in self.homes.get(sw, []):
                    h = self.hosts[host]
                    for rank in range(h.ranks):
                        node.child_ports.append(port)
                        node.child_udp_ports.append(worker_udp_port(h.udp_port, rank))
                    node.host_ports[port] = host
            for sw, up in sorted(parents.items(), key=lambda kv: (kv[1] or ("", 0, 0))[2]):
                if up is not None:
                    nodes[sw].parent_port = up[1]
                    nodes[up[0]].child_ports.append(up[2])
                    nodes[up[0]].child_udp_ports.append(INA_UDP_PORT)
            for node in nodes.values():
                if len(node.child_ports) > MAX_FANIN:
                    raise TreeError(
                        f"switch {node.switch!r} would have {len(node.child_ports)} children in "
                        f"tree {t}; the per-slot bitmap holds {MAX_FANIN}"
                    )
            trees.append(nodes)
        return trees


def build_trees(
    topo: Topology, workers: Sequence[str], roots: Sequence[str]
) -> list[dict[str, TreeNode]]:
    """One tree per root, reaching every worker's switch, with balanced link loads (see the
    module doc). Tree t maps each of its switches to its `TreeNode`."""
    try:
        builder = _Builder(topo, workers, roots)
    except TopologyError as exc:
        raise TreeError(str(exc)) from None
    builder.grow()
    while True:  # each round keeps or shrinks the trees' switch sets, so this ends
        before = [set(tree) for tree in builder.parent]
        builder.minimize_max_load()
        builder.rebalance()
        if [set(tree) for tree in builder.parent] == before:
            return builder.nodes()


def _assign(
    options: list[list[tuple[LinkKey, Parent]]], start: list[int], bound: int
) -> list[int] | None:
    """Option per pair such that no link holds more than `bound` pairs, starting from
    `start` (pairs on a link over the bound are taken off it, the last ones first, and put
    back by augmenting paths); None if there is none."""
    choice: list[int | None] = list(start)
    holders: dict[LinkKey, list[int]] = {}
    for i, j in enumerate(start):
        holders.setdefault(options[i][j][0], []).append(i)
    loose: list[int] = []
    for key in sorted(holders):
        while len(holders[key]) > bound:
            i = holders[key].pop()
            choice[i] = None
            loose.append(i)
    for i in sorted(loose):
        # breadth-first over links: from a full link, one of its pairs may move to another
        prev: dict[LinkKey, tuple[LinkKey | None, int, int]] = {}
        queue: deque[LinkKey] = deque()
        for j, (key, _) in enumerate(options[i]):
            if key not in prev:
                prev[key] = (None, i, j)
                queue.append(key)
        end: LinkKey | None = None
        while queue:
            key = queue.popleft()
            if len(holders.get(key, ())) < bound:
                end = key
                break
            for k in holders[key]:
                for j, (other, _) in enumerate(options[k]):
                    if other not in prev:
                        prev[other] = (key, k, j)
                        queue.append(other)
        if end is None:
            return None
        key = end
        while True:  # move each pair on the path one link on, from the free end back
            before, k, j = prev[key]
            old = choice[k]
            if old is not None:
                holders[options[k][old][0]].remove(k)
            choice[k] = j
            holders.setdefault(key, []).append(k)
            if before is None:
                break
            key = before
    assert all(j is not None for j in choice)
    return [j for j in choice if j is not None]


def parents(tree: dict[str, TreeNode], topo: Topology) -> dict[str, Parent | None]:
    """switch -> (parent, port towards it, parent's port) of a built tree; root -> None."""
    adj = topo.adjacency()
    out: dict[str, Parent | None] = {}
    for sw, node in tree.items():
        if node.is_root:
            out[sw] = None
        else:
            peer, peer_port = adj[sw][node.parent_port]
            out[sw] = (peer, node.parent_port, peer_port)
    return out


def link_trees(topo: Topology, trees: Sequence[dict[str, TreeNode]]) -> dict[DirectedLink, int]:
    """(switch, port, peer, peer port) -> the number of trees whose packets cross that link
    that way: partials of trees in which the switch is the child, results of trees in which
    the peer is. Each tree crosses each of its links both ways."""
    out: dict[DirectedLink, int] = {}
    for tree in trees:
        for sw, up in parents(tree, topo).items():
            if up is None:
                continue
            p, port, p_port = up
            for key in ((sw, port, p, p_port), (p, p_port, sw, port)):
                out[key] = out.get(key, 0) + 1
    return out


def max_trees_per_link(link_loads: dict[DirectedLink, int]) -> int:
    """The most trees any directed link carries (0 when the trees use no link)."""
    return max(link_loads.values(), default=0)


def locally_balanced(topo: Topology, trees: Sequence[dict[str, TreeNode]]) -> bool:
    """No tree could lower the load of a switch's link to its parent by moving the switch to
    another parent it has one level up in the same tree (what `build_trees` ends with)."""
    adj = topo.adjacency()
    loads = link_trees(topo, trees)
    for tree in trees:
        root = next(sw for sw, n in tree.items() if n.is_root)
        dist = topo.distances(root)
        for sw, up in parents(tree, topo).items():
            if up is None:
                continue
            now = loads[(sw, up[1], up[0], up[2])]
            for port, (peer, peer_port) in adj[sw].items():
                if port == up[1] or peer not in tree or dist[peer] != dist[sw] - 1:
                    continue
                if loads.get((sw, port, peer, peer_port), 0) + 1 < now:
                    return False
    return True
