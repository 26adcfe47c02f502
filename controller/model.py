"""What the controller writes into a switch, independent of how it gets there.

A plan is a list of `TableWrite` and `MulticastGroup` per switch. Two backends apply it: the
P4Runtime client (bmv2 or the softswitch over gRPC) and `apply_to_pipeline` (an in-process
softswitch, for tests and benchmarks).
"""

from __future__ import annotations

from dataclasses import dataclass

from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.state import ActionCall, TableEntry

JOB_TABLE = "InaIngress.agg.ina_job"
CHILD_TABLE = "InaIngress.agg.ina_child"
EGRESS_TABLE = "InaEgress.rewrite.ina_egress"
LOSS_TABLE = "InaIngress.loss.ina_loss"
ROUTE_TABLE = "InaIngress.fwd.ipv4_lpm"


@dataclass(frozen=True)
class TableWrite:
    """One table entry: P4Info table name, key values in key order (LPM: value, prefix
    length), action alias and its parameters in P4 order."""

    table: str
    key: tuple[int, ...]
    action: str
    params: tuple[int, ...]


@dataclass(frozen=True)
class MulticastGroup:
    mgid: int
    ports: tuple[int, ...]


@dataclass
class SwitchPlan:
    tables: list[TableWrite]
    groups: list[MulticastGroup]

    def __init__(self) -> None:
        self.tables = []
        self.groups = []


def loss_threshold(probability: float) -> int:
    """The ina_loss threshold that drops with `probability` (0 never, 1 always)."""
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"loss probability must be within 0..1, got {probability}")
    return round(probability * 0xFFFFFFFF)


def apply_to_pipeline(pipeline: Pipeline, plan: SwitchPlan) -> None:
    """Install a plan into an in-process pipeline (all or nothing)."""
    with pipeline.lock:
        done: list[TableWrite] = []
        groups: list[int] = []
        try:
            for w in plan.tables:
                pipeline.tables[w.table].insert(TableEntry(w.key, ActionCall(w.action, w.params)))
                done.append(w)
            for g in plan.groups:
                pipeline.multicast.insert(g.mgid, [(p, 0) for p in g.ports])
                groups.append(g.mgid)
        except BaseException:
            for w in done:
                pipeline.tables[w.table].delete(w.key)
            for mgid in groups:
                pipeline.multicast.delete(mgid)
            raise


def remove_from_pipeline(pipeline: Pipeline, plan: SwitchPlan) -> None:
    with pipeline.lock:
        for w in plan.tables:
            pipeline.tables[w.table].delete(w.key)
        for g in plan.groups:
            pipeline.multicast.delete(g.mgid)
