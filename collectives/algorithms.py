"""The host collectives by name: what builds each schedule, the rank order it chooses, on
which kinds of topology it runs, and where it promises to be contention-free (at most one flow
on any directed link in any step, which `check.check` then asserts).

Every runner that puts algorithms side by side (`inaemu demo --algo`, `inaemu mininet
--algo`, the benchmarks) takes each algorithm's schedule from `Algorithm.schedule_among`: its
own rank order over the workers (the ring's snake along a torus's rows, HDRM's mapping, ...),
the schedule `inaemu schedule` checks. Only a user who names the workers in rank order
(`inaemu schedule --workers`) overrides it.

Kinds come from the switches' roles (`topology_kind`): the built-in builders' star,
leaf-spine, fat-tree, bigraph, torus and mesh; any other topology is `custom`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from inaemu.collectives import dtree, halving_doubling, hdrm, multitree, ps, ring, ring2d
from inaemu.collectives.schedule import Schedule, ScheduleError
from inaemu.topology.model import Topology
from inaemu.topology.routes import ALL_PORTS, check_node_ports


class Builder(Protocol):
    """A module's `schedule(topo, hosts=None, *, node_ports)`: hosts in rank order, None for
    the algorithm's own order over every host."""

    def __call__(
        self, topo: Topology, hosts: Sequence[str] | None = None, *, node_ports: str = ...
    ) -> Schedule: ...


# a module's `order(topo, among)`: the workers `among` (every host if None) in its own order
Order = Callable[[Topology, Sequence[str] | None], list[str]]

KINDS = ("star", "leaf-spine", "fat-tree", "bigraph", "torus", "mesh", "custom")

_ROLES = {
    frozenset({"root"}): "star",
    frozenset({"leaf", "spine"}): "leaf-spine",
    frozenset({"core", "aggregation", "edge"}): "fat-tree",
    frozenset({"upper", "lower"}): "bigraph",
    frozenset({"torus"}): "torus",
    frozenset({"mesh"}): "mesh",
}


def topology_kind(topo: Topology) -> str:
    """star, leaf-spine, fat-tree, bigraph, torus or mesh by the switches' roles (as the
    builders set them); `custom` for anything else."""
    return _ROLES.get(frozenset(s.role for s in topo.switches.values()), "custom")


@dataclass(frozen=True)
class Algorithm:
    name: str
    title: str
    build: Builder
    order: Order
    supports: frozenset[str]  # topology kinds
    contention_free: frozenset[str]  # kinds where it promises one flow per link per step

    def schedule(
        self,
        topo: Topology,
        hosts: Sequence[str] | None = None,
        *,
        node_ports: str = ALL_PORTS,
    ) -> Schedule:
        """The schedule on `topo` over `hosts` in that rank order (None: every host, in the
        algorithm's own order), under the node model `node_ports` (`routes`);
        `ScheduleError` if the algorithm does not support the topology."""
        self._supported(topo)
        return self.build(topo, hosts, node_ports=check_node_ports(node_ports))

    def schedule_among(
        self, topo: Topology, workers: Sequence[str], *, node_ports: str = ALL_PORTS
    ) -> Schedule:
        """The schedule over exactly `workers`, whatever order they come in, in the
        algorithm's own rank order (`order`): with every host, the schedule `inaemu schedule`
        checks. What the side-by-side runners run."""
        self._supported(topo)
        return self.schedule(topo, self.order(topo, workers), node_ports=node_ports)

    def _supported(self, topo: Topology) -> None:
        kind = topology_kind(topo)
        if kind not in self.supports:
            raise ScheduleError(
                f"{self.name} does not run on a {kind} topology; it supports "
                + ", ".join(k for k in KINDS if k in self.supports)
            )

    def promises(self, topo: Topology) -> bool:
        return topology_kind(topo) in self.contention_free


_EVERY = frozenset(KINDS)

ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm(
            "ring",
            "ring reduce-scatter + all-gather (INCEPTIONN, MICRO'18)",
            ring.schedule,
            ring.order,
            _EVERY,
            frozenset({"star"}),
        ),
        Algorithm(
            "hd",
            "halving-doubling, Rabenseifner (any n: fold-in of the extra ranks)",
            halving_doubling.schedule,
            halving_doubling.order,
            _EVERY,
            frozenset({"star"}),
        ),
        Algorithm(
            "hdrm",
            "halving-doubling with EFLOPS' rank mapping on BiGraph (HPCA'20)",
            hdrm.schedule,
            hdrm.order,
            frozenset({"bigraph"}),
            frozenset({"bigraph"}),
        ),
        Algorithm(
            "multitree",
            "one tree per rank, grown under per-step link constraints (MULTITREE, ISCA'21)",
            multitree.schedule,
            multitree.order,
            _EVERY,
            _EVERY,
        ),
        Algorithm(
            "ps",
            "worker-aggregator: push to one aggregator, pull the sum (INCEPTIONN's baseline)",
            ps.schedule,
            ps.order,
            _EVERY,
            frozenset(),
        ),
        Algorithm(
            "ring2d",
            "2D ring: rings along the rows, then the columns, of a torus or mesh (MULTITREE's "
            "2D-RING baseline)",
            ring2d.schedule,
            ring2d.order,
            frozenset({"torus", "mesh"}),
            frozenset({"torus", "mesh"}),
        ),
        Algorithm(
            "dtree",
            "double binary tree, NCCL's: two trees, half the array each, pipelined in chunks "
            "(MULTITREE's DBTREE baseline)",
            dtree.schedule,
            dtree.order,
            _EVERY,
            frozenset({"star"}),
        ),
    )
}


def algorithm(name: str) -> Algorithm:
    """The algorithm called `name`; `ScheduleError` listing the names otherwise."""
    if name not in ALGORITHMS:
        raise ScheduleError(f"unknown algorithm {name!r}; use {', '.join(ALGORITHMS)} or all")
    return ALGORITHMS[name]
