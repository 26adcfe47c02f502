"""The host collectives by name: what builds each schedule, on which kinds of topology it
runs, and where it promises to be contention-free (at most one flow on any directed link in
any step, which `check.check` then asserts).

Kinds come from the switches' roles (`topology_kind`): the built-in builders' star,
leaf-spine, fat-tree, bigraph, torus and mesh; any other topology is `custom`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from inaemu.collectives import halving_doubling, hdrm, multitree, ring
from inaemu.collectives.schedule import Schedule, ScheduleError
from inaemu.controller.topology import Topology

Builder = Callable[[Topology, Sequence[str] | None], Schedule]

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
    supports: frozenset[str]  # topology kinds
    contention_free: frozenset[str]  # kinds where it promises one flow per link per step

    def schedule(self, topo: Topology, hosts: Sequence[str] | None = None) -> Schedule:
        """The schedule on `topo`; `ScheduleError` if the algorithm does not support it."""
        kind = topology_kind(topo)
        if kind not in self.supports:
            raise ScheduleError(
                f"{self.name} does not run on a {kind} topology; it supports "
                + ", ".join(k for k in KINDS if k in self.supports)
            )
        return self.build(topo, hosts)

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
            _EVERY,
            frozenset({"star"}),
        ),
        Algorithm(
            "hd",
            "halving-doubling, Rabenseifner (any n: fold-in of the extra ranks)",
            halving_doubling.schedule,
            _EVERY,
            frozenset({"star"}),
        ),
        Algorithm(
            "hdrm",
            "halving-doubling with EFLOPS' rank mapping on BiGraph (HPCA'20)",
            hdrm.schedule,
            frozenset({"bigraph"}),
            frozenset({"bigraph"}),
        ),
        Algorithm(
            "multitree",
            "one tree per rank, grown under per-step link constraints (MULTITREE, ISCA'21)",
            multitree.schedule,
            _EVERY,
            _EVERY,
        ),
    )
}


def algorithm(name: str) -> Algorithm:
    """The algorithm called `name`; `ScheduleError` listing the names otherwise."""
    if name not in ALGORITHMS:
        raise ScheduleError(f"unknown algorithm {name!r}; use {', '.join(ALGORITHMS)} or all")
    return ALGORITHMS[name]
