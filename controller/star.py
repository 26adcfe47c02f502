"""The simplest job: every worker on one switch, which is the root of a one-level tree."""

from __future__ import annotations

from dataclasses import dataclass

from controller.model import (
    CHILD_TABLE,
    EGRESS_TABLE,
    JOB_TABLE,
    MulticastGroup,
    SwitchPlan,
    TableWrite,
)
from hostlib.wire import MAX_FANIN, ip_int, mac_bytes
from softswitch.constants import INA_SLOTS


@dataclass(frozen=True)
class Worker:
    port: int  # switch port the worker is attached to
    mac: str
    ip: str


def star_job_plan(
    job_id: int,
    workers: list[Worker],
    *,
    base: int,
    pool_size: int,
    mgid: int,
    n_trees: int = 1,
) -> SwitchPlan:
    """Entries for `job_id` on one switch with `workers`, slots [base, base + pool_size).

    With several trees, each tree gets its own ina_job entry over the same pool (chunk i uses
    tree (i mod W) mod T, so trees never share a slot).
    """
    if not 1 <= len(workers) <= MAX_FANIN:
        raise ValueError(f"a job needs 1..{MAX_FANIN} workers per switch, got {len(workers)}")
    if len({w.port for w in workers}) != len(workers):
        raise ValueError("two workers of the job share a switch port")
    if base < 0 or pool_size < 1 or base + pool_size > INA_SLOTS:
        raise ValueError(
            f"slot pool [{base}, {base + pool_size}) does not fit the switch's {INA_SLOTS} slots"
        )
    plan = SwitchPlan()
    for tree in range(n_trees):
        plan.tables.append(
            TableWrite(
                JOB_TABLE, (job_id, tree), "agg_node", (base, pool_size, len(workers), mgid, 1, 0)
            )
        )
        for index, w in enumerate(workers):
            plan.tables.append(
                TableWrite(CHILD_TABLE, (job_id, tree, w.port), "set_child", (index,))
            )
    for w in workers:
        plan.tables.append(
            TableWrite(
                EGRESS_TABLE,
                (w.port,),
                "to_host",
                (int.from_bytes(mac_bytes(w.mac), "big"), ip_int(w.ip)),
            )
        )
    plan.groups.append(MulticastGroup(mgid, tuple(w.port for w in workers)))
    return plan
