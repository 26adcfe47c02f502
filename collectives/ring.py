"""The ring allreduce (as in INCEPTIONN, MICRO'18, and Baidu's ring): n ranks in a ring, the
array in n chunks. Reduce-scatter: in step s (0..n-2) rank r adds chunk (r - s) mod n into rank
r + 1's, so after n - 1 steps rank r holds the whole sum of chunk (r + 1) mod n. All-gather:
in step s rank r copies chunk (r + 1 - s) mod n to rank r + 1. 2(n - 1) steps; every rank
sends 2(n - 1)/n of the array, one chunk per step, always to the same neighbour.

The default order follows the topology: hosts as listed (switch by switch), except in a
torus or mesh, where the ring snakes along the rows (row 1 left to right, row 2 right to
left, ...), so that consecutive ranks are neighbours, and in a BiGraph, where it visits the
switches alternately from the two parts (upper 1, lower 1, upper 2, lower 2, ...), so that
the ring crosses from switch to switch over direct links only, each link once.
"""

from __future__ import annotations

from collections.abc import Sequence

from inaemu.collectives.ranks import host_order, own_order, worker_hosts
from inaemu.collectives.schedule import Op, Schedule, Step, Transfer
from inaemu.topology.builders import grid_cell
from inaemu.topology.model import Topology
from inaemu.topology.routes import ALL_PORTS, DIRECT_ROLES


def ring_steps(n: int) -> tuple[Step, ...]:
    """The ring's steps for n ranks and n chunks (none for one rank)."""
    if n < 2:
        return ()
    scatter = tuple(
        tuple(Transfer(r, (r + 1) % n, (r - s) % n, (r - s) % n + 1, Op.REDUCE) for r in range(n))
        for s in range(n - 1)
    )
    gather = tuple(
        tuple(
            Transfer(r, (r + 1) % n, (r + 1 - s) % n, (r + 1 - s) % n + 1, Op.COPY)
            for r in range(n)
        )
        for s in range(n - 1)
    )
    return scatter + gather


def snake_order(topo: Topology) -> list[str] | None:
    """A torus's or mesh's hosts row by row, every other row reversed; None if the topology
    is not one (its switches are not all named s<row>_<col> with role torus or mesh)."""
    cells: dict[tuple[int, int], str] = {}
    for host in topo.hosts:
        sw = topo.host_attachment(host)[0]
        cell = grid_cell(sw)
        if cell is None or topo.switches[sw].role not in DIRECT_ROLES:
            return None
        cells[cell] = host
    order = []
    for i, row in enumerate(sorted({r for r, _ in cells})):
        cols = sorted(c for r, c in cells if r == row)
        order += [cells[(row, c)] for c in (cols if i % 2 == 0 else reversed(cols))]
    return order


def bigraph_order(topo: Topology) -> list[str] | None:
    """A BiGraph's hosts switch by switch, the switches alternately upper and lower; None if
    the topology is not a BiGraph (as many switches of role upper as lower, no others)."""
    upper = [sw for sw, s in topo.switches.items() if s.role == "upper"]
    lower = [sw for sw, s in topo.switches.items() if s.role == "lower"]
    if not upper or len(upper) != len(lower) or 2 * len(upper) != len(topo.switches):
        return None
    alternate = [sw for pair in zip(upper, lower, strict=True) for sw in pair]
    rank = {sw: i for i, sw in enumerate(alternate)}
    return sorted(topo.hosts, key=lambda h: rank[topo.host_attachment(h)[0]])


def order(topo: Topology, among: Sequence[str] | None = None) -> list[str]:
    """The ring's own rank order (see the module's docstring) over the workers `among`
    (default every host)."""
    default = snake_order(topo) or bigraph_order(topo) or host_order(topo)
    return own_order(topo, default, among)


def schedule(
    topo: Topology, hosts: Sequence[str] | None = None, *, node_ports: str = ALL_PORTS
) -> Schedule:
    """The ring over `hosts` (rank order; default: `order`). The node model does not change
    the ring."""
    ranks = worker_hosts(topo, hosts, order(topo))
    n = len(ranks)
    return Schedule("ring", ranks, n, ring_steps(n)).validate()
