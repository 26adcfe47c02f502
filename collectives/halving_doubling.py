"""Halving-doubling allreduce (Rabenseifner's algorithm; Thakur, Rabenseifner and Gropp,
"Optimization of Collective Communication Operations in MPICH", 2005).

For p = 2^k ranks the array is cut into p chunks. Reduce-scatter by recursive halving: in
step i (0..k-1) rank v exchanges with v XOR d, d = p / 2^(i+1): both hold the same block of
2d chunks (all p at first), v keeps the half on the side of its bit d (the upper half if
v AND d) and adds the other half into its partner's. After k steps rank v holds the whole sum
of chunk v. All-gather by recursive doubling, the same exchanges in reverse order (d = 1, 2,
.., p/2): v copies the block of d chunks it holds whole to v XOR d. 2k steps; every rank
sends 2(p - 1)/p of the array.

Any n >= 1 (the standard fold-in): with p the largest power of two <= n and r = n - p, first
each of the ranks 2i (i < r) adds its whole array into rank 2i + 1's and sits out; the p
remaining ranks (the odd ranks below 2r and every rank from 2r on) run the algorithm above
as ranks 0..p-1 in that order; last, each rank 2i + 1 copies the whole result back to 2i.
2k + 2 steps when n is not a power of two.
"""

from __future__ import annotations

from collections.abc import Sequence

from inaemu.collectives.ranks import host_order, own_order, worker_hosts
from inaemu.collectives.schedule import Op, Schedule, Step, Transfer
from inaemu.topology.model import Topology
from inaemu.topology.routes import ALL_PORTS


def hd_steps(n: int) -> tuple[int, tuple[Step, ...]]:
    """(chunks, steps) of halving-doubling over n ranks (see the module's docstring)."""
    if n < 1:
        raise ValueError(f"halving-doubling needs at least 1 rank, got {n}")
    p = 1 << (n.bit_length() - 1)
    extra = n - p
    # the real rank of each of the p ranks that take part in halving-doubling
    real = [2 * w + 1 if w < extra else w + extra for w in range(p)]
    k = p.bit_length() - 1
    halving: list[Step] = []
    block = {v: (0, p) for v in range(p)}  # the chunks v is responsible for
    for i in range(k):
        d = p >> (i + 1)
        step = []
        for v in range(p):
            lo, hi = block[v]
            mid = (lo + hi) // 2
            keep, give = ((mid, hi), (lo, mid)) if v & d else ((lo, mid), (mid, hi))
            step.append(Transfer(real[v], real[v ^ d], give[0], give[1], Op.REDUCE))
            block[v] = keep
        halving.append(tuple(step))
    doubling: list[Step] = []
    for i in reversed(range(k)):
        d = p >> (i + 1)
        step = []
        for v in range(p):
            lo, hi = block[v]
            step.append(Transfer(real[v], real[v ^ d], lo, hi, Op.COPY))
        for v in range(p):  # v now holds its own block and its partner's, side by side
            lo, hi = block[v]
            plo, phi = block[v ^ d]
            block[v] = (min(lo, plo), max(hi, phi))
        doubling.append(tuple(step))
    if not extra:
        return p, (*halving, *doubling)
    fold_in = tuple(Transfer(2 * i, 2 * i + 1, 0, p, Op.REDUCE) for i in range(extra))
    fold_out = tuple(Transfer(2 * i + 1, 2 * i, 0, p, Op.COPY) for i in range(extra))
    return p, (fold_in, *halving, *doubling, fold_out)


def order(topo: Topology, among: Sequence[str] | None = None) -> list[str]:
    """Halving-doubling's own rank order over the workers `among` (default every host): the
    topology's host order."""
    return own_order(topo, host_order(topo), among)


def schedule(
    topo: Topology, hosts: Sequence[str] | None = None, *, node_ports: str = ALL_PORTS
) -> Schedule:
    """Halving-doubling over `hosts` (rank order; default: `order`). The node model does not
    change it."""
    ranks = worker_hosts(topo, hosts, order(topo))
    n_chunks, steps = hd_steps(len(ranks))
    return Schedule("hd", ranks, n_chunks, steps).validate()
