"""Jobs: aggregation trees over a topology, slot pools, multicast groups, and the entries that
make them real on every switch a job crosses. Pure planning: no I/O.

`JobManager.plan_add(spec)` computes everything and refuses clearly (pool full, unknown host,
unreachable worker, ...) without changing its state; `commit_add` records the job once the
entries are on the switches. `plan_remove` / `commit_remove` are the inverse. The ina_egress
entry of a host port is shared by every job with a worker there (reference counted); it
addresses result copies from the switch's aggregation address to the host.

Every installation of a job on a switch gets a new epoch (the agg_node parameter the switch
puts in each slot's owner): a per-switch counter, 1..65535 and round again, advanced by every
committed installation. A slot's state from an earlier installation, or from another job that
had the pool before, is then never taken for this one's (docs/protocol.md, "Runs and
installations"). The counters are part of the manager's state: whoever keeps the jobs across
processes keeps `epochs` too and hands them back (`JobManager(topo, epochs=...)`).

The workers of an installation number their runs: `next_run` issues run ids 1, 2, ... up to
65535 and never one twice (`JobRecord.last_run`, kept with the job), so a rerun of the job's
workers never takes the last run's results for its own (docs/protocol.md, "Runs and
installations"). A new installation starts again from 1: its epoch tells it apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from inaemu.common.wire import MAX_RUN
from inaemu.controller.trees import (
    DirectedLink,
    TreeError,
    auto_tree_count,
    build_trees,
    link_trees,
    max_trees_per_link,
)
from inaemu.controller.trees import TreeNode as TreeNode  # re-exported: plans name it
from inaemu.controller.trees import choose_roots as choose_roots
from inaemu.p4.constants import INA_SLOTS
from inaemu.p4.plan import (
    CHILD_TABLE,
    EGRESS_TABLE,
    JOB_TABLE,
    ROUTE_TABLE,
    MulticastGroup,
    SwitchPlan,
    TableWrite,
)
from inaemu.topology.addresses import ip_int, mac_bytes
from inaemu.topology.model import Topology, TopologyError
from inaemu.topology.routes import Router

MAX_MGID = 0xFFFF
MAX_EPOCH = 0xFFFF  # agg_node's epoch is bit<16>


def next_epoch(last: int) -> int:
    """The epoch after `last`: 1..MAX_EPOCH, then 1 again (0 is never issued)."""
    return last % MAX_EPOCH + 1


class JobError(ValueError):
    """A job that cannot be installed; the message says why and what to change."""


@dataclass(frozen=True)
class JobSpec:
    job_id: int
    workers: tuple[str, ...]  # host names, in child-index order on their switches
    pool_size: int = 64  # slots on every switch the job crosses: the workers' window W
    n_trees: int = 1  # 0: one per root candidate (`trees.auto_tree_count`)
    roots: tuple[str, ...] = ()  # root switch of tree t is roots[t % len(roots)]; () = choose


@dataclass
class JobRecord:
    spec: JobSpec  # as planned: n_trees and roots resolved (the root of tree t is roots[t])
    trees: list[dict[str, TreeNode]]
    pools: dict[str, tuple[int, int]]  # switch -> (base, size)
    mgids: dict[tuple[str, int], int]  # (switch, tree) -> multicast group
    plans: dict[str, SwitchPlan]
    epochs: dict[str, int] = field(default_factory=dict)  # switch -> this installation's epoch
    # (switch, port, peer, peer port) -> trees whose packets cross that inter-switch link
    # that way (`trees.link_trees`)
    link_trees: dict[DirectedLink, int] = field(default_factory=dict)
    last_run: int = 0  # the last run id issued to this installation's workers (0: none yet)

    @property
    def switches(self) -> list[str]:
        return sorted(self.pools)

    @property
    def roots(self) -> list[str]:
        """The root switch of each tree."""
        return [next(sw for sw, n in tree.items() if n.is_root) for tree in self.trees]

    @property
    def max_trees_per_link(self) -> int:
        """The most trees any inter-switch link carries in one direction (0: one switch)."""
        return max_trees_per_link(self.link_trees)


@dataclass(frozen=True)
class Placement:
    """Where an installed job lives: its slot pool and epoch per switch and its multicast
    group per (switch, tree); what a job state file keeps to replay a plan exactly."""

    pools: Mapping[str, tuple[int, int]]
    mgids: Mapping[tuple[str, int], int]
    epochs: Mapping[str, int]

    @staticmethod
    def of(record: JobRecord) -> Placement:
        return Placement(dict(record.pools), dict(record.mgids), dict(record.epochs))


def add_tree_node(
    plan: SwitchPlan,
    job_id: int,
    tree: int,
    node: TreeNode,
    pool: tuple[int, int],
    mgid: int,
    epoch: int,
) -> None:
    """The entries that make `node` one switch of tree `tree` of the job: its ina_job entry
    (pool, fan-in, group, root or parent port, this installation's epoch), one ina_child entry
    per child (child index = position; a child is its port and UDP source port) and the
    multicast group to its children: a copy per child, whose instance is a worker's UDP port
    (the egress rewrite sends the copy there), 0 for a switch below."""
    base, size = pool
    if not 0 <= epoch <= MAX_EPOCH:
        raise JobError(f"epoch {epoch} does not fit 16 bits")
    plan.tables.append(
        TableWrite(
            JOB_TABLE,
            (job_id, tree),
            "agg_node",
            (base, size, len(node.child_ports), mgid, int(node.is_root), node.parent_port, epoch),
        )
    )
    children = node.children()
    for index, (port, udp) in enumerate(children):
        plan.tables.append(
            TableWrite(CHILD_TABLE, (job_id, tree, port, udp), "set_child", (index,))
        )
    replicas = tuple((port, udp if port in node.host_ports else 0) for port, udp in children)
    plan.groups.append(MulticastGroup(mgid, replicas))


def host_rewrite(port: int, mac: str, ip: str, agg_mac: str, agg_ip: str) -> TableWrite:
    """The ina_egress entry that addresses result copies leaving `port` to its host (`mac`,
    `ip`), from the switch's aggregation address (`agg_mac`, `agg_ip`: what workers send to)."""
    return TableWrite(
        EGRESS_TABLE,
        (port,),
        "to_host",
        (
            int.from_bytes(mac_bytes(mac), "big"),
            ip_int(ip),
            int.from_bytes(mac_bytes(agg_mac), "big"),
            ip_int(agg_ip),
        ),
    )


def aggregation_tree(topo: Topology, workers: tuple[str, ...], root: str) -> dict[str, TreeNode]:
    """One shortest-path tree from `root` that reaches every worker's switch."""
    try:
        return build_trees(topo, workers, [root])[0]
    except TreeError as exc:
        raise JobError(str(exc)) from None


class SlotPool:
    """Free slot ranges of one switch (first fit)."""

    def __init__(self, slots: int = INA_SLOTS) -> None:
        self.slots = slots
        self.used: dict[int, tuple[int, int]] = {}  # job -> (base, size)

    def find(self, size: int) -> int | None:
        start = 0
        for base, n in sorted(self.used.values()):
            if base - start >= size:
                return start
            start = max(start, base + n)
        return start if self.slots - start >= size else None

    def free_slots(self) -> int:
        return self.slots - sum(n for _, n in self.used.values())


class JobManager:
    def __init__(self, topo: Topology, *, epochs: Mapping[str, int] | None = None) -> None:
        """`epochs`: the last epoch issued per switch, as a previous manager's `epochs` (so
        that an installation after a restart of the controller still gets a new one)."""
        self.topo = topo.validate()
        self.pools = {sw: SlotPool() for sw in topo.switches}
        self.jobs: dict[int, JobRecord] = {}
        self.mgids: dict[str, set[int]] = {sw: set() for sw in topo.switches}
        self.egress_refs: dict[tuple[str, int], int] = {}  # (switch, host port) -> jobs
        self.epochs: dict[str, int] = {sw: 0 for sw in topo.switches}  # last issued
        self.restore_epochs(epochs or {})

    def restore_epochs(self, epochs: Mapping[str, int]) -> None:
        """Set the last epoch issued per switch, as saved after the jobs were replayed."""
        for sw, last in epochs.items():
            if sw not in self.epochs:
                raise JobError(f"epochs given for switch {sw!r}, which the topology lacks")
            if not 0 <= last <= MAX_EPOCH:
                raise JobError(f"switch {sw!r}: epoch {last} does not fit 16 bits")
            self.epochs[sw] = last

    # ------------------------------------------------------------------ add

    def plan_add(
        self, spec: JobSpec, *, placed: Placement | None = None, shared_slots: bool = False
    ) -> JobRecord:
        """Plan `spec`: free slot pools, free multicast groups and a new epoch on every switch
        it crosses; or, with `placed` (what an earlier plan of it chose, saved by whoever keeps
        the jobs across processes), exactly those, so that the plan is what the switches hold.
        `shared_slots`: `placed` may overlap another job's pools (only to remove the job: a
        job state edited by hand).
        """
        if not 0 <= spec.job_id <= 0xFFFF:
            raise JobError(f"job id {spec.job_id} does not fit 16 bits")
        if spec.job_id in self.jobs:
            raise JobError(
                f"job {spec.job_id} is already installed; remove it first (`inaemu job remove "
                f"--job {spec.job_id}`: also when a restarted switch has lost it)"
            )
        if not spec.workers:
            raise JobError(f"job {spec.job_id} has no workers")
        if len(set(spec.workers)) != len(spec.workers):
            raise JobError(f"job {spec.job_id} names a worker twice")
        for h in spec.workers:
            if h not in self.topo.hosts:
                raise JobError(f"job {spec.job_id}: unknown host {h!r} (not in the topology)")
        if not 0 <= spec.n_trees <= 255:
            raise JobError(f"job {spec.job_id}: n_trees must be 1..255 (0: one per root candidate)")
        if not 1 <= spec.pool_size <= 0x7FFF:
            raise JobError(f"job {spec.job_id}: pool_size {spec.pool_size} must be 1..32767")
        try:
            if spec.n_trees == 0:
                spec = replace(
                    spec, n_trees=auto_tree_count(self.topo, spec.workers, spec.pool_size)
                )
            if spec.pool_size % spec.n_trees:
                raise JobError(
                    f"job {spec.job_id}: pool_size {spec.pool_size} must be a multiple of "
                    f"n_trees ({spec.n_trees})"
                )
            for r in spec.roots:
                if r not in self.topo.switches:
                    raise JobError(f"job {spec.job_id}: root {r!r} is not a switch of the topology")
            roots = (
                [spec.roots[t % len(spec.roots)] for t in range(spec.n_trees)]
                if spec.roots
                else choose_roots(self.topo, spec.workers, spec.n_trees)
            )
            trees = build_trees(self.topo, spec.workers, roots)
        except (TopologyError, TreeError) as exc:
            raise JobError(f"job {spec.job_id}: {exc}") from None
        spec = replace(spec, roots=tuple(roots))

        switches = sorted({s for t in trees for s in t})
        if placed is not None:
            pools, mgids, epochs = self._check_placed(spec, placed, trees, shared_slots)
        else:
            pools, mgids = self._place(spec, trees, switches)
            epochs = {sw: next_epoch(self.epochs[sw]) for sw in pools}
        plans = {sw: SwitchPlan() for sw in pools}
        for t, tree in enumerate(trees):
            for sw, n in tree.items():
                add_tree_node(plans[sw], spec.job_id, t, n, pools[sw], mgids[(sw, t)], epochs[sw])
        for sw, port, host in self._host_ports(trees):
            if self.egress_refs.get((sw, port), 0) == 0:
                plans[sw].tables.append(self._egress_write(sw, port, host))
        return JobRecord(
            spec, trees, pools, mgids, plans, dict(epochs), link_trees(self.topo, trees)
        )

    def _place(
        self, spec: JobSpec, trees: list[dict[str, TreeNode]], switches: list[str]
    ) -> tuple[dict[str, tuple[int, int]], dict[tuple[str, int], int]]:
        """A free slot pool on every switch and a free multicast group per (switch, tree)."""
        pools: dict[str, tuple[int, int]] = {}
        for sw in switches:
            base = self.pools[sw].find(spec.pool_size)
            if base is None:
                raise JobError(
                    f"job {spec.job_id}: switch {sw!r} has no {spec.pool_size} contiguous free "
                    f"slots ({self.pools[sw].free_slots()} of {INA_SLOTS} free); use a smaller "
                    "pool_size or remove a job"
                )
            pools[sw] = (base, spec.pool_size)
        mgids: dict[tuple[str, int], int] = {}
        taken = {sw: set(ids) for sw, ids in self.mgids.items()}
        for t, tree in enumerate(trees):
            for sw in tree:
                free = next((m for m in range(1, MAX_MGID + 1) if m not in taken[sw]), None)
                if free is None:
                    raise JobError(f"switch {sw!r} has no free multicast group id")
                taken[sw].add(free)
                mgids[(sw, t)] = free
        return pools, mgids

    def _check_placed(
        self,
        spec: JobSpec,
        placed: Placement,
        trees: list[dict[str, TreeNode]],
        shared_slots: bool = False,
    ) -> tuple[dict[str, tuple[int, int]], dict[tuple[str, int], int], dict[str, int]]:
        """`placed`, if it fits this plan and collides with nothing the manager holds (but
        other jobs' slots, if `shared_slots`)."""
        what = f"job {spec.job_id}: saved placement"
        switches = sorted({s for t in trees for s in t})
        if set(placed.pools) != set(switches) or set(placed.epochs) != set(switches):
            raise JobError(f"{what} names switches {sorted(placed.pools)}, the plan {switches}")
        for sw, (base, size) in placed.pools.items():
            clash = [
                j
                for j, (b, n) in self.pools[sw].used.items()
                if b < base + size and base < b + n and not shared_slots
            ]
            if size != spec.pool_size or base < 0 or base + size > INA_SLOTS or clash:
                raise JobError(f"{what}: pool [{base}, {base + size}) on {sw!r} does not fit")
        if not all(1 <= e <= MAX_EPOCH for e in placed.epochs.values()):
            raise JobError(f"{what}: epochs {placed.epochs} must be 1..{MAX_EPOCH}")
        if set(placed.mgids) != {(sw, t) for t, tree in enumerate(trees) for sw in tree}:
            raise JobError(f"{what}: multicast groups do not match the plan's trees")
        for (sw, _), mgid in placed.mgids.items():
            if not 1 <= mgid <= MAX_MGID or mgid in self.mgids[sw]:
                raise JobError(f"{what}: multicast group {mgid} on {sw!r} is taken or invalid")
        return dict(placed.pools), dict(placed.mgids), dict(placed.epochs)

    @staticmethod
    def _host_ports(trees: list[dict[str, TreeNode]]) -> list[tuple[str, int, str]]:
        seen: dict[tuple[str, int], str] = {}
        for tree in trees:
            for sw, n in tree.items():
                for port, host in n.host_ports.items():
                    seen[(sw, port)] = host
        return [(sw, port, host) for (sw, port), host in sorted(seen.items())]

    def _egress_write(self, switch: str, port: int, host: str) -> TableWrite:
        h, sw = self.topo.hosts[host], self.topo.switches[switch]
        return host_rewrite(port, h.mac, h.ip, sw.agg_mac, sw.agg_ip)

    def commit_add(self, record: JobRecord) -> None:
        spec = record.spec
        for sw, (base, size) in record.pools.items():
            self.pools[sw].used[spec.job_id] = (base, size)
        for (sw, _), mgid in record.mgids.items():
            self.mgids[sw].add(mgid)
        for sw, port, _ in self._host_ports(record.trees):
            self.egress_refs[(sw, port)] = self.egress_refs.get((sw, port), 0) + 1
        for sw, epoch in record.epochs.items():
            self.epochs[sw] = epoch
        self.jobs[spec.job_id] = record

    # ------------------------------------------------------------------ runs

    def next_run(self, job_id: int) -> int:
        """A run id for the next run of the job's workers, new for this installation: 1, 2,
        ... (`JobRecord.last_run` + 1). Refused once all 65535 are used."""
        record = self.jobs.get(job_id)
        if record is None:
            raise JobError(f"job {job_id} is not installed (`inaemu job add` first)")
        if record.last_run >= MAX_RUN:
            raise JobError(
                f"job {job_id} has used all {MAX_RUN} run ids of its installation; reinstall "
                "it (`inaemu job remove`, then `job add`: a new epoch) to number runs from 1 again"
            )
        record.last_run += 1
        return record.last_run

    # ------------------------------------------------------------------ remove

    def plan_remove(self, job_id: int) -> dict[str, SwitchPlan]:
        """What to delete: the job's entries and groups, and host rewrites no job uses any
        more."""
        record = self.jobs.get(job_id)
        if record is None:
            raise JobError(f"job {job_id} is not installed")
        plans = {sw: SwitchPlan() for sw in record.plans}
        for sw, plan in record.plans.items():
            plans[sw].tables = [w for w in plan.tables if w.table != EGRESS_TABLE]
            plans[sw].groups = list(plan.groups)
        for sw, port, host in self._host_ports(record.trees):
            if self.egress_refs.get((sw, port), 0) == 1:
                plans[sw].tables.append(self._egress_write(sw, port, host))
        return plans

    def commit_remove(self, job_id: int) -> None:
        record = self.jobs.pop(job_id)
        for sw in record.pools:
            del self.pools[sw].used[job_id]
        for (sw, _), mgid in record.mgids.items():
            self.mgids[sw].discard(mgid)
        for sw, port, _ in self._host_ports(record.trees):
            self.egress_refs[(sw, port)] -= 1
            if self.egress_refs[(sw, port)] == 0:
                del self.egress_refs[(sw, port)]


def route_plans(topo: Topology) -> dict[str, SwitchPlan]:
    """/32 routes to every host on every switch, for ordinary traffic, along `Router`'s
    paths (`inaemu.topology.routes`)."""
    router = Router(topo)
    plans = {sw: SwitchPlan() for sw in topo.switches}
    for host in topo.hosts.values():
        home, port = topo.host_attachment(host.name)
        mac = int.from_bytes(mac_bytes(host.mac), "big")
        for sw in topo.switches:
            out = port if sw == home else router.port_towards(sw, home)
            if out is None:
                continue  # unreachable: no route
            plans[sw].tables.append(
                TableWrite(ROUTE_TABLE, (ip_int(host.ip), 32), "ipv4_forward", (mac, out))
            )
    return plans
