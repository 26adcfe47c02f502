"""The double binary tree (NCCL's tree all-reduce since NCCL 2.4; Sanders, Speck and Träff,
"Two-tree algorithms for full bandwidth broadcast, reduction and scan", 2009; DBTREE, a
baseline of MULTITREE, ISCA'21): two binary trees over the ranks, each carrying half the
array, reduced up and broadcast down, pipelined in chunks.

The trees are NCCL's (`ncclGetBtree`, `ncclGetDtree`). Tree 0 over ranks 0..n-1: rank 0 is
the root and has one child, the largest power of two below n; a rank r > 0 whose lowest set
bit is b has the parent (r XOR b) OR 2b, or r XOR b if that is not a rank, and the children
r - b/2 and r + b/2 (the latter, if not a rank, r + b/4, r + b/8, ...; none if b = 1): odd
ranks are leaves, even ranks inner nodes. Tree 1 is tree 0 mirrored (rank r plays n - 1 - r)
when n is even, so that every rank is a leaf in one tree and an inner node of the other, and
shifted by one (rank r plays r - 1 mod n) when n is odd.

The array is cut into 2k chunks, k = max(1, n div 2) per tree (the first k go up and down
tree 0, the others tree 1), and every chunk is pipelined: a rank sends chunk j up to its
parent once its children's chunk j has arrived, and down to its children once its parent's
has. What a step may carry: every rank sends at most one transfer and receives at most one.
For that every tree edge gets one of two colours (a 2-colouring of the constraints: a rank's
edges to its two parents differ, and the edges to all its children, in both trees, differ;
such a colouring exists for every n we tried, 1..300, and `edge_colours` raises if one does
not), and an edge of colour c is used only in steps of parity c. In the reduction a rank's
edge to its parent in tree T is used at step 2j + s for chunk j, s the smallest number of its
colour's parity after its children's; the broadcast, which starts when the reduction ends,
likewise top-down. So a rank sends up in both trees, and receives from its children, on
alternate steps, as in Sanders et al.'s two-tree pipeline:

- reduction: 2(k - 1) + S_up steps, S_up about 2 log2 n (one or two per level of the
  deeper tree), then the broadcast: 2(k - 1) + S_down; about 2n + 4 log2 n steps in all;
- every rank sends 2(n - 1)/n of the array or close to it (an inner node of one tree
  receives from two children and sends to two, a leaf of the other receives one chunk and
  sends one: about the array each way); the bytes per step are 1/(2k) of the array, as the
  ring's 1/n.

On a star every NIC then carries at most one flow each way per step (promised, and checked);
on other topologies flows between ranks on different switches may share links. Runs on any
topology and any workers, in the topology's host order by default (on a torus or mesh the
grid row by row, as MULTITREE's authors number its nodes).

MULTITREE's authors' simulator (farabimahmud/accelerator, `src/allreduce/dtree_allreduce.py`)
builds the same two trees (ported from NCCL; its shift for odd n goes the other way), n/2
chunks per tree, pipelined two steps apart with a red/black colouring of the edges; it runs
for n divisible by 4. `tests/test_schedules.py` states its step counts beside ours.
"""

from __future__ import annotations

from collections.abc import Sequence

from inaemu.collectives.ranks import host_order, own_order, worker_hosts
from inaemu.collectives.schedule import Op, Schedule, ScheduleError, Step, Transfer
from inaemu.topology.model import Topology
from inaemu.topology.routes import ALL_PORTS

Parents = tuple[int, ...]  # rank -> its parent in a tree, -1 for the root


def btree_parent(rank: int, n: int) -> int:
    """The parent of `rank` in NCCL's binary tree over n ranks (the module's docstring); -1
    for the root, rank 0."""
    if rank == 0:
        return -1
    bit = rank & -rank
    up = (rank ^ bit) | (bit << 1)
    return up if up < n else rank ^ bit


def double_tree(n: int) -> tuple[Parents, Parents]:
    """NCCL's two trees over n ranks, as parents: tree 0 the binary tree, tree 1 its mirror
    image (n even) or shifted by one rank (n odd)."""
    tree0 = tuple(btree_parent(r, n) for r in range(n))

    def mirrored(r: int) -> int:
        p = btree_parent(n - 1 - r, n)
        return -1 if p < 0 else n - 1 - p

    def shifted(r: int) -> int:
        p = btree_parent((r - 1) % n, n)
        return -1 if p < 0 else (p + 1) % n

    tree1 = tuple(mirrored(r) if n % 2 == 0 else shifted(r) for r in range(n))
    return tree0, tree1


def edge_colours(trees: Sequence[Parents]) -> list[dict[int, int]]:
    """A colour, 0 or 1, for every rank's edge to its parent in every tree, such that a rank's
    edges to its parents differ and the edges of all its children (in every tree) differ;
    `ScheduleError` if there is none."""
    edges = [(t, v) for t, parents in enumerate(trees) for v, p in enumerate(parents) if p >= 0]
    apart: dict[tuple[int, int], list[tuple[int, int]]] = {e: [] for e in edges}

    def differ(group: list[tuple[int, int]]) -> None:
        for i, e in enumerate(group):
            for f in group[i + 1 :]:
                apart[e].append(f)
                apart[f].append(e)

    ranks = len(trees[0]) if trees else 0
    for v in range(ranks):
        differ([(t, v) for t in range(len(trees)) if (t, v) in apart])
    children: dict[int, list[tuple[int, int]]] = {}
    for t, v in edges:
        children.setdefault(trees[t][v], []).append((t, v))
    for group in children.values():
        differ(group)
    colour: dict[tuple[int, int], int] = {}
    for e in edges:  # two-colour each connected part, breadth first
        if e in colour:
            continue
        colour[e] = 0
        todo = [e]
        while todo:
            x = todo.pop()
            for y in apart[x]:
                if y not in colour:
                    colour[y] = 1 - colour[x]
                    todo.append(y)
                elif colour[y] == colour[x]:
                    raise ScheduleError(
                        f"dtree: no two-colouring of the double binary tree over {ranks} ranks"
                    )
    return [{v: c for (t, v), c in colour.items() if t == tree} for tree in range(len(trees))]


def _after(earliest: int, parity: int) -> int:
    """The first step >= earliest of the given parity."""
    return earliest + (earliest - parity) % 2


def dtree_steps(n: int) -> tuple[int, tuple[Step, ...]]:
    """(chunks, steps) of the double binary tree over n ranks (the module's docstring)."""
    k = max(1, n // 2)
    if n < 2:
        return 2 * k, ()
    trees = double_tree(n)
    colours = edge_colours(trees)
    up: list[dict[int, int]] = []  # tree -> rank -> its stage in the reduction
    down: list[dict[int, int]] = []  # tree -> rank -> its stage in the broadcast
    for parents, colour in zip(trees, colours, strict=True):
        children: dict[int, list[int]] = {v: [] for v in range(n)}
        for v, p in enumerate(parents):
            if p >= 0:
                children[p].append(v)
        root = parents.index(-1)
        top_down = [root]
        for v in top_down:
            top_down += children[v]
        if len(top_down) != n:
            raise ScheduleError(f"dtree: a tree over {n} ranks does not span them")
        stage_up: dict[int, int] = {}
        for v in reversed(top_down[1:]):
            first = 1 + max((stage_up[c] for c in children[v]), default=-1)
            stage_up[v] = _after(first, colour[v])
        stage_down: dict[int, int] = {}
        for v in top_down[1:]:
            stage_down[v] = _after(stage_down.get(parents[v], -1) + 1, colour[v])
        up.append(stage_up)
        down.append(stage_down)
    reduce_steps = 2 * (k - 1) + 1 + max(s for stages in up for s in stages.values())
    total = reduce_steps + 2 * (k - 1) + 1 + max(s for stages in down for s in stages.values())
    steps: list[list[Transfer]] = [[] for _ in range(total)]
    for t, parents in enumerate(trees):
        for v, p in enumerate(parents):
            if p < 0:
                continue
            for j in range(k):
                c = t * k + j
                steps[2 * j + up[t][v]].append(Transfer(v, p, c, c + 1, Op.REDUCE))
                at = reduce_steps + 2 * j + down[t][v]
                steps[at].append(Transfer(p, v, c, c + 1, Op.COPY))
    # a phase whose first edges all have the odd colour starts with a step that carries
    # nothing: leave such steps out
    return 2 * k, tuple(tuple(step) for step in steps if step)


def order(topo: Topology, among: Sequence[str] | None = None) -> list[str]:
    """The double binary tree's own rank order over the workers `among` (default every
    host): the topology's host order."""
    return own_order(topo, host_order(topo), among)


def schedule(
    topo: Topology, hosts: Sequence[str] | None = None, *, node_ports: str = ALL_PORTS
) -> Schedule:
    """The double binary tree over `hosts` (rank order; default: `order`). The node model
    does not change it."""
    ranks = worker_hosts(topo, hosts, order(topo))
    n_chunks, steps = dtree_steps(len(ranks))
    return Schedule("dtree", ranks, n_chunks, steps).validate()
