"""The worker-aggregator allreduce (a parameter server), the baseline INCEPTIONN (Li et al.,
MICRO'18) measures its compressed ring against: one aggregator; the others push their whole
array to it and pull the sum back.

Rank 0 is the aggregator, and it is one of the workers: it adds its own array too, so `ps`
runs on the same hosts, with the same inputs and checks, as every other algorithm (a
dedicated aggregator would be a rank without an input of its own, which the schedule format
does not have). One chunk, the whole array. Step 0: every other rank adds its array into rank
0's (REDUCE, all at once); step 1: rank 0 copies the sum to every other rank (COPY). 2 steps
whatever n; the aggregator receives and sends n - 1 arrays, every other rank sends one, so the
aggregator's link carries n - 1 flows each way in each step: contention-free only for n <= 2.
Run with INCEPTIONN's codec (`hostlib.collective.executor`), every worker compresses its array
once, the aggregator decompresses and adds each, then compresses the sum once and sends the
same bytes to everyone.

Default order: the aggregator is the host nearest the workers (the fewest switch hops summed
over them; the first in the topology's host order among equals: the centre of a mesh, h1 of a
star, a leaf-spine, a BiGraph or a torus), the others follow in host order.
"""

from __future__ import annotations

from collections.abc import Sequence

from inaemu.collectives.ranks import host_order, own_order, worker_hosts
from inaemu.collectives.schedule import Op, Schedule, Step, Transfer
from inaemu.topology.model import Topology
from inaemu.topology.routes import ALL_PORTS


def ps_steps(n: int) -> tuple[Step, ...]:
    """Push to rank 0, then pull from it; one chunk (none for one rank)."""
    if n < 2:
        return ()
    push = tuple(Transfer(r, 0, 0, 1, Op.REDUCE) for r in range(1, n))
    pull = tuple(Transfer(0, r, 0, 1, Op.COPY) for r in range(1, n))
    return push, pull


def aggregator(topo: Topology, workers: Sequence[str]) -> str:
    """The worker whose switch is nearest the others' (fewest hops summed; the first in
    `workers` among equals)."""
    homes = {h: topo.host_attachment(h)[0] for h in workers}
    hops = {sw: topo.distances(sw) for sw in set(homes.values())}
    far = len(topo.switches)  # a switch it cannot reach: routing refuses such a pair anyway
    return min(workers, key=lambda h: sum(hops[homes[h]].get(homes[w], far) for w in workers))


def order(topo: Topology, among: Sequence[str] | None = None) -> list[str]:
    """The aggregator first (`aggregator`), then the other workers `among` (default every
    host) in the topology's host order."""
    workers = own_order(topo, host_order(topo), among)
    if not workers:
        return workers
    first = aggregator(topo, workers)
    return [first, *(h for h in workers if h != first)]


def schedule(
    topo: Topology, hosts: Sequence[str] | None = None, *, node_ports: str = ALL_PORTS
) -> Schedule:
    """The worker-aggregator allreduce over `hosts` (rank order, rank 0 the aggregator;
    default: `order`). The node model does not change it."""
    ranks = worker_hosts(topo, hosts, order(topo))
    return Schedule("ps", ranks, 1, ps_steps(len(ranks))).validate()
