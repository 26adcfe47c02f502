"""The 2D ring (2D-RING, a baseline of MULTITREE, ISCA'21, on tori and meshes; the 2D-torus
all-reduce of Mikami et al., 2018, and the 2-D gradient summation of Ying et al. on TPU tori,
2018): rings along the rows of a torus or mesh, then along its columns.

A **stream** carries a part of the array in four phases, each a ring of the grid's rows or
columns (R rows, C columns, N = RC nodes):

1. reduce-scatter along the rows: every row's ring cuts the stream's part into C groups and
   leaves each node with one group summed over its row (C - 1 steps);
2. reduce-scatter along the columns, of that group: the column's ring cuts it into R chunks
   and leaves each node with one chunk summed over every node (R - 1 steps);
3. all-gather along the columns (R - 1 steps);
4. all-gather along the rows (C - 1 steps).

Rings: a torus's row of C >= 3 nodes is a ring of neighbours closed by its wrap-around link,
and the same ring run the other way uses the other direction of every link. A mesh's row has
no wrap-around: its ring is folded, 0, 2, 4, ... along the row and ..., 5, 3, 1 back, every
flow two hops (one at the ends), each directed link of the row once, so it has one direction
only. Columns alike. A dimension of one node has no ring (its phases are empty).

How many streams, by the node model (`routes`):

- `1` (one interface per node): one stream, rows first, each ring one way: reduce-scatter
  rows, reduce-scatter columns, all-gather columns, all-gather rows; every node sends one flow
  and receives one in every step; 2(R - 1) + 2(C - 1) steps.
- `all` (the default; a node drives all its links at once, MULTITREE's setting): the array is
  split evenly among streams that run at the same time on disjoint links, every node in all
  of them: on a torus four, rows first one way and the other way round the rings, columns
  first (phase 1 along the columns, 2 and 3 along the rows) both ways; on a mesh two, rows
  first and columns first, each round the folded rings. In every step a stream's flows run
  along one dimension in one direction, and no two streams share one (phase k of every stream
  runs in the same steps; on a grid that is not square the shorter dimension's streams wait
  for the longer's): 4 (max(R, C) - 1) steps, every directed link one flow per step. With a
  single row or column, only the streams along it (a ring run both ways on a torus).

Every node sends 2(N - 1)/N of the array, the least an all-reduce can (as the ring): phases
1 and 4 move (C - 1)/C of it, phases 2 and 3 (R - 1)/N. Chunks: N per stream, the stream's
part cut into C groups of R. Supported: the builders' torus:RxC and mesh:RxC with every host a
worker, refused otherwise with the reason; the rank order is the grid's, row by row.

MULTITREE's authors model 2D-RING in their simulator (farabimahmud/accelerator,
`src/allreduce/ring2d_allreduce.py`, on d x d tori) as 4N flows, every node the root of one
per direction (east, west, south, north), each a chain along the root's row or column that
carries 1/(4d) of the array: d - 1 steps to reduce, d - 1 to gather, every node 4 flows per
step. Those are phases 1 and 4 of our four streams, step for step and byte for byte; phases 2
and 3 are not in it, so its chunks are summed over one row or column only, and a node sends
2(d - 1)/d of the array (1.75 on 8x8, against 2(N - 1)/N = 1.97 for an all-reduce) in 2(d - 1)
steps (ours: 4(d - 1)). `tests/test_schedules.py` states their counts beside ours.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from inaemu.collectives.ranks import own_order
from inaemu.collectives.schedule import Op, Schedule, ScheduleError, Step, Transfer
from inaemu.topology.builders import grid_cell, grid_switch
from inaemu.topology.model import Topology
from inaemu.topology.routes import ALL_PORTS, DIRECT_ROLES, check_node_ports

ROWS, COLUMNS = 0, 1  # the dimension a ring runs along: a row's ring, a column's ring


@dataclass(frozen=True)
class Grid:
    rows: int
    cols: int
    wrap: bool  # a torus (rings close over wrap-around links), not a mesh
    hosts: tuple[tuple[str, ...], ...]  # hosts[row][col]

    def length(self, dim: int) -> int:
        """How many nodes a ring along `dim` has: a row's are the columns."""
        return self.cols if dim == ROWS else self.rows

    def directions(self, dim: int) -> int:
        """Ways round a ring along `dim` on disjoint links: 2 on a torus (3 or more nodes),
        1 on a mesh's folded ring, 0 for a dimension of one node."""
        n = self.length(dim)
        if n < 2:
            return 0
        return 2 if self.wrap and n >= 3 else 1


def grid_shape(topo: Topology) -> Grid:
    """The torus or mesh `topo` is, as the builders make one (switches s<row>_<col> of one
    role, torus or mesh, every cell of the grid, one host each, linked to their neighbours
    and, in a torus, round the edges); `ScheduleError` saying what is missing otherwise."""
    roles = {s.role for s in topo.switches.values()}
    if len(roles) != 1 or not roles <= DIRECT_ROLES:
        raise ScheduleError(
            "ring2d runs on a torus or mesh (switch role torus or mesh; build one with "
            "torus:RxC or mesh:RxC)"
        )
    wrap = roles == {"torus"}
    cells = {sw: grid_cell(sw) for sw in topo.switches}
    named = [c for c in cells.values() if c is not None]
    rows = 1 + max((r for r, _ in named), default=-1)
    cols = 1 + max((c for _, c in named), default=-1)
    expected = {grid_switch(r, c) for r in range(rows) for c in range(cols)}
    if set(cells) != expected:
        odd = sorted(set(cells) ^ expected)[0]
        raise ScheduleError(
            f"ring2d needs every switch s<row>_<col> of a {rows}x{cols} grid and no other "
            f"({odd} is {'missing' if odd in expected else 'not one'})"
        )
    on: dict[str, list[str]] = {sw: [] for sw in topo.switches}
    for host in topo.hosts:
        on[topo.host_attachment(host)[0]].append(host)
    crowded = [sw for sw, hs in on.items() if len(hs) != 1]
    if crowded:
        raise ScheduleError(
            f"ring2d needs one host on every switch of the grid; {crowded[0]} has "
            f"{len(on[crowded[0]])}"
        )
    want: Counter[frozenset[str]] = Counter()
    for r in range(rows):
        for c in range(cols):
            if c + 1 < cols or (wrap and cols >= 3):
                want[frozenset((grid_switch(r, c), grid_switch(r, (c + 1) % cols)))] += 1
            if r + 1 < rows or (wrap and rows >= 3):
                want[frozenset((grid_switch(r, c), grid_switch((r + 1) % rows, c)))] += 1
    have = Counter(
        frozenset((lk.a, lk.b))
        for lk in topo.links
        if lk.a_port is not None and lk.b_port is not None
    )
    if have != want:
        pair = sorted(sorted(p) for p in (have - want) + (want - have))[0]
        kind = "torus" if wrap else "mesh"
        raise ScheduleError(
            f"ring2d needs the links of a {rows}x{cols} {kind} as {kind}:{rows}x{cols} "
            f"builds them; {pair[0]}-{pair[1]} is "
            f"{'missing' if want[frozenset(pair)] > have[frozenset(pair)] else 'not one'}"
        )
    hosts = tuple(tuple(on[grid_switch(r, c)][0] for c in range(cols)) for r in range(rows))
    return Grid(rows, cols, wrap, hosts)


def ring_positions(n: int, wrap: bool, reverse: bool) -> list[int]:
    """The indices 0..n-1 along a row or column in ring order: in turn on a torus (the
    reverse ring the other way round), folded on a mesh (even indices up, odd ones back)."""
    if wrap:
        return [0, *reversed(range(1, n))] if reverse else list(range(n))
    return [*range(0, n, 2), *reversed(range(1, n, 2))]


@dataclass(frozen=True)
class Stream:
    first: int  # the dimension of phases 1 and 4 (ROWS or COLUMNS); the other one's in 2, 3
    reverse: bool  # round its rings the other way (a torus's second direction)


def streams(grid: Grid, node_ports: str) -> list[Stream]:
    """The streams (the module's docstring): one under node model `1`, else every
    dimension order and direction the grid has."""
    dims = [d for d in (ROWS, COLUMNS) if grid.directions(d)]
    every = [Stream(d, bool(w)) for d in dims for w in range(grid.directions(d))]
    return every[:1] if check_node_ports(node_ports) != ALL_PORTS else every


def rank_hosts(grid: Grid) -> tuple[str, ...]:
    """The grid's hosts row by row: rank r is row r div C, column r mod C."""
    return tuple(h for row in grid.hosts for h in row)


def ring2d_steps(grid: Grid, node_ports: str = ALL_PORTS) -> tuple[int, tuple[Step, ...]]:
    """(chunks, steps) of the 2D ring on `grid` under node model `node_ports`, ranks row by
    row (`rank_hosts`)."""
    chosen = streams(grid, node_ports)
    n = grid.rows * grid.cols
    if not chosen:
        return 1, ()
    phase_len = [
        max(grid.length(s.first if phase in (0, 3) else 1 - s.first) for s in chosen) - 1
        for phase in range(4)
    ]
    starts = [sum(phase_len[:p]) for p in range(4)]
    steps: list[list[Transfer]] = [[] for _ in range(sum(phase_len))]
    for k, s in enumerate(chosen):
        base = k * n
        second = 1 - s.first
        a, b = grid.length(s.first), grid.length(second)
        ring_a = ring_positions(a, grid.wrap, s.reverse)
        ring_b = ring_positions(b, grid.wrap, s.reverse)
        pos_a = {x: p for p, x in enumerate(ring_a)}
        pos_b = {x: q for q, x in enumerate(ring_b)}

        def rank(x_a: int, x_b: int, first: int = s.first) -> int:
            """The rank at index x_a along the first dimension, x_b along the second."""
            row, col = (x_b, x_a) if first == ROWS else (x_a, x_b)
            return row * grid.cols + col

        for x_a in range(a):
            p = pos_a[x_a]
            nxt_a = ring_a[(p + 1) % a]
            group = (p + 1) % a  # the group this node holds after phase 1
            for x_b in range(b):
                q = pos_b[x_b]
                nxt_b = ring_b[(q + 1) % b]
                me = rank(x_a, x_b)
                along_a, along_b = rank(nxt_a, x_b), rank(x_a, nxt_b)
                for t in range(a - 1):  # 1: reduce-scatter groups along the first dimension
                    g = (p - t) % a
                    lo = base + g * b
                    steps[starts[0] + t].append(Transfer(me, along_a, lo, lo + b, Op.REDUCE))
                for t in range(b - 1):  # 2: reduce-scatter its group's chunks along the second
                    c = base + group * b + (q - t) % b
                    steps[starts[1] + t].append(Transfer(me, along_b, c, c + 1, Op.REDUCE))
                for t in range(b - 1):  # 3: all-gather them along the second
                    c = base + group * b + (q + 1 - t) % b
                    steps[starts[2] + t].append(Transfer(me, along_b, c, c + 1, Op.COPY))
                for t in range(a - 1):  # 4: all-gather the groups along the first
                    g = (p + 1 - t) % a
                    lo = base + g * b
                    steps[starts[3] + t].append(Transfer(me, along_a, lo, lo + b, Op.COPY))
    return len(chosen) * n, tuple(tuple(step) for step in steps)


def order(topo: Topology, among: Sequence[str] | None = None) -> list[str]:
    """The 2D ring's rank order (the grid row by row) over the workers `among` (default every
    host; the 2D ring itself runs only on all of them)."""
    return own_order(topo, rank_hosts(grid_shape(topo)), among)


def schedule(
    topo: Topology, hosts: Sequence[str] | None = None, *, node_ports: str = ALL_PORTS
) -> Schedule:
    """The 2D ring on the torus or mesh `topo` under the node model `node_ports`. It chooses
    the rank order itself (the grid's); `hosts`, if given, must name every host (in any
    order)."""
    grid = grid_shape(topo)
    ranks = rank_hosts(grid)
    if hosts is not None and sorted(hosts) != sorted(ranks):
        raise ScheduleError(
            "ring2d runs on every host of the torus or mesh, in the grid's rank order: leave "
            "--workers out, or name all of them"
        )
    n_chunks, steps = ring2d_steps(grid, node_ports)
    return Schedule("ring2d", ranks, n_chunks, steps).validate()
