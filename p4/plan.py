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
    """A multicast group: one copy per replica, (egress port, instance). The instance is the
    copy's egress_rid: for a worker behind a host port, its UDP port, which the egress rewrite
    sends the copy to (several workers behind one port get a copy each); 0 for a switch port
    (the copy keeps its UDP ports)."""

    mgid: int
    replicas: tuple[tuple[int, int], ...]

    @property
    def ports(self) -> tuple[int, ...]:
        """The egress port of each replica, in order."""
        return tuple(port for port, _ in self.replicas)


@dataclass
class SwitchPlan:
    tables: list[TableWrite]
    groups: list[MulticastGroup]

    def __init__(self) -> None:
        self.tables = []
        self.groups = []


# ina_loss drops a frame when a draw uniform over 0..0xFFFFFFFE is below the threshold (loss.p4):
# threshold t drops with probability t / LOSS_SCALE
LOSS_SCALE = 0xFFFFFFFF
MIN_LOSS = 1 / LOSS_SCALE  # the smallest loss rate but 0 a threshold says: about 2.3e-10


def loss_threshold(probability: float) -> int:
    """The ina_loss threshold that drops with `probability` (0 never, 1 always); ValueError
    for a probability outside 0..1, or one above 0 that no threshold but 0 comes nearest to
    (it would inject no loss at all)."""
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"loss probability must be within 0..1, got {probability}")
    threshold = round(probability * LOSS_SCALE)
    if probability > 0 and threshold == 0:
        raise ValueError(
            f"loss probability {probability:g} rounds to 0 (the switch's threshold has 32 "
            f"bits): the smallest loss it injects is {MIN_LOSS:.3g}; give 0 for none"
        )
    return threshold
