"""What the controller writes into a switch, independent of how it gets there.

A plan is a list of `TableWrite` and `MulticastGroup` per switch. Two backends apply it: the
P4Runtime client (bmv2 or the softswitch over gRPC) and `inaemu.softswitch.plan` (an
in-process softswitch, for tests and benchmarks).
"""

from __future__ import annotations

from dataclasses import dataclass

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
