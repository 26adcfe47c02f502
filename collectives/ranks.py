"""The workers of a collective in rank order: a topology's hosts as listed (the default), the
workers a run names, an algorithm's own order kept to the workers. `RouteError` names a
worker that is not a host of the topology, or one named twice."""

from __future__ import annotations

from collections.abc import Sequence

from inaemu.topology.model import Topology
from inaemu.topology.routes import RouteError


def host_order(topo: Topology) -> list[str]:
    """The topology's hosts, the default rank order: as the topology lists them (the
    builders list them switch by switch, in port order)."""
    return list(topo.hosts)


def worker_hosts(
    topo: Topology, hosts: Sequence[str] | None, default: Sequence[str]
) -> tuple[str, ...]:
    """The workers in rank order: `hosts` if given (each a host of the topology, once),
    else `default`."""
    if hosts is None:
        return tuple(default)
    if not hosts:
        raise RouteError("no workers: name at least one host")
    for h in hosts:
        if h not in topo.hosts:
            names = list(topo.hosts)
            shown = ", ".join(names[:4]) + (f", ... {names[-1]}" if len(names) > 4 else "")
            raise RouteError(f"unknown worker {h!r}; the topology's hosts are {shown}")
    seen = [h for i, h in enumerate(hosts) if h in hosts[:i]]
    if seen:
        raise RouteError(f"worker {seen[0]!r} is named twice")
    return tuple(hosts)


def own_order(topo: Topology, default: Sequence[str], among: Sequence[str] | None) -> list[str]:
    """An algorithm's rank order over the workers `among` (every host if None): its order
    for the whole topology, `default`, keeping only the workers. `RouteError` for a worker
    that is not a host, or one named twice."""
    if among is None:
        return list(default)
    wanted = set(worker_hosts(topo, among, ()))
    return [h for h in default if h in wanted]
