"""HDRM: halving-doubling with rank mapping on EFLOPS' BiGraph (Dong et al., "EFLOPS:
Algorithm and System Co-design for a High Performance Distributed Training Platform",
HPCA'20).

BiGraph(M, N) has N switches in two parts (upper, lower) of N/2, every upper switch linked to
every lower one, M hosts per switch. Halving-doubling (`halving_doubling`) pairs rank v with
v XOR d, d a power of two, in every step. HDRM chooses which host holds which rank so that in
every step

1. every pair sits in opposite parts: each exchange crosses exactly one switch-to-switch
   link, the direct one between the two hosts' switches (no detour through a third switch);
2. no directed link carries two flows: the M hosts of a switch talk to M different switches
   of the other part, and each host sends one flow and receives one.

The mapping used here (one of many; EFLOPS' paper gives the idea, this construction is our
own). With n = M N = 2^L ranks, M = 2^a, N/2 = 2^m, L = a + m + 1:

- part(v) = the parity of v's bits. Flipping any one bit flips it, so every pair of every step
  is in opposite parts (1), and this is the only such choice.
- z = v >> 1 (bit 0 is then fixed by the parity); z_lo its low m bits, z_hi the a bits above.
  An upper rank sits on upper switch z_lo, a lower rank on lower switch z_lo XOR z_hi; on its
  switch, at host position z_hi (the switch's hosts in port order).

Why (2) holds: let v and w be two ranks on one switch, and u = (v XOR w) >> 1 (their z's
XOR; u is not 0, since v != w have the same parity). On an upper switch z_lo(u) = 0, so
z_hi(u) != 0; on a lower one z_lo(u) = z_hi(u), again != 0. In any step their partners are
v XOR 2^j and w XOR 2^j, whose z's differ by the same u: on the other part they sit on
switches numbered z_lo XOR z_hi (lower) or z_lo (upper) apart by z_hi(u) != 0 or
z_lo(u) != 0: different switches. This needs a <= m (z_hi must fit in z_lo's bits), that is
M <= N/2; and that is also necessary, since the M hosts of a switch reach the other part over
its N/2 links in every step.

Supported shapes: BiGraph(M, N) with M and N powers of two, N >= 2 and M <= N/2 (e.g. 1x2,
1x4, 2x4, 2x8, 4x8, 4x16, 8x16), every host a worker. Anything else is refused with a
`ScheduleError` that says why. Steps: 2 log2(M N), no fold-in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inaemu.collectives.halving_doubling import hd_steps
from inaemu.collectives.ranks import own_order
from inaemu.collectives.schedule import Schedule, ScheduleError
from inaemu.topology.model import Topology
from inaemu.topology.routes import ALL_PORTS


@dataclass(frozen=True)
class BiGraphShape:
    m: int  # hosts per switch
    n: int  # switches
    upper: tuple[str, ...]
    lower: tuple[str, ...]
    hosts: dict[str, tuple[str, ...]]  # switch -> its hosts in port order


def bigraph_shape(topo: Topology) -> BiGraphShape:
    """The BiGraph(M, N) that `topo` is (switch roles `upper` and `lower`, every upper switch
    linked once to every lower one and to nothing else, M hosts on every switch);
    `ScheduleError` saying what is missing otherwise."""
    upper = tuple(sw for sw, s in topo.switches.items() if s.role == "upper")
    lower = tuple(sw for sw, s in topo.switches.items() if s.role == "lower")
    if not upper or len(upper) != len(lower) or len(upper) + len(lower) != len(topo.switches):
        raise ScheduleError(
            "hdrm needs a BiGraph: as many switches of role upper as of role lower and no "
            "other (build one with bigraph:MxN)"
        )
    pairs: dict[tuple[str, str], int] = {}
    for lk in topo.links:
        if lk.a_port is None or lk.b_port is None:
            continue
        a, b = (lk.a, lk.b) if lk.a in upper else (lk.b, lk.a)
        if a not in upper or b not in lower:
            raise ScheduleError(f"hdrm needs a BiGraph: the link {lk.a}-{lk.b} is inside a part")
        pairs[(a, b)] = pairs.get((a, b), 0) + 1
    for a in upper:
        for b in lower:
            if pairs.get((a, b)) != 1:
                raise ScheduleError(
                    f"hdrm needs a BiGraph: switches {a} and {b} are joined by "
                    f"{pairs.get((a, b), 0)} links, not 1"
                )
    on: dict[str, list[tuple[int, str]]] = {sw: [] for sw in topo.switches}
    for host in topo.hosts:
        sw, port = topo.host_attachment(host)
        on[sw].append((port, host))
    hosts = {sw: tuple(h for _, h in sorted(hs)) for sw, hs in on.items()}
    m = len(hosts[upper[0]])
    if m == 0 or any(len(hs) != m for hs in hosts.values()):
        counts = ", ".join(f"{sw}: {len(hs)}" for sw, hs in hosts.items())
        raise ScheduleError(f"hdrm needs a BiGraph with as many hosts on every switch ({counts})")
    return BiGraphShape(m, 2 * len(upper), upper, lower, hosts)


def _log2(x: int) -> int | None:
    return x.bit_length() - 1 if x >= 1 and x & (x - 1) == 0 else None


def rank_hosts(shape: BiGraphShape) -> tuple[str, ...]:
    """The host of every rank (see the module's docstring); `ScheduleError` for a shape
    HDRM does not support."""
    a, m = _log2(shape.m), _log2(shape.n // 2)
    if a is None or m is None or a > m:
        raise ScheduleError(
            f"hdrm supports BiGraph(M, N) with M and N powers of two and M <= N/2, not "
            f"bigraph:{shape.m}x{shape.n}; use ring, hd or multitree there"
        )
    order = []
    for v in range(shape.m * shape.n):
        z = v >> 1
        lo, hi = z & ((1 << m) - 1), z >> m
        if bin(v).count("1") % 2 == 0:
            order.append(shape.hosts[shape.upper[lo]][hi])
        else:
            order.append(shape.hosts[shape.lower[lo ^ hi]][hi])
    return tuple(order)


def order(topo: Topology, among: Sequence[str] | None = None) -> list[str]:
    """HDRM's rank order (`rank_hosts`) over the workers `among` (default every host; HDRM
    itself runs only on all of them)."""
    return own_order(topo, rank_hosts(bigraph_shape(topo)), among)


def schedule(
    topo: Topology, hosts: Sequence[str] | None = None, *, node_ports: str = ALL_PORTS
) -> Schedule:
    """HDRM on the BiGraph `topo`. HDRM chooses the rank order itself; `hosts`, if given,
    must name every host of the topology (in any order). A BiGraph has no direct nodes: the
    node model does not change it."""
    ranks = rank_hosts(bigraph_shape(topo))
    if hosts is not None and sorted(hosts) != sorted(ranks):
        raise ScheduleError(
            "hdrm runs on every host of the BiGraph in its own rank order: leave --workers "
            "out, or name all of them"
        )
    n_chunks, steps = hd_steps(len(ranks))
    return Schedule("hdrm", ranks, n_chunks, steps).validate()
