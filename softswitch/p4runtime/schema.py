"""The P4Info as the P4Runtime server uses it: tables, actions, counters and their ids.

`Schema` is built once from the committed P4Info (p4/ina.p4info.txt, the one the pipeline
implements); its look-ups refuse unknown ids with the P4Runtime status the spec asks for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import grpc
from finsy.proto.p4.config.v1 import p4info_pb2

from inaemu.softswitch.p4runtime.values import P4RuntimeFailure, invalid

__all__ = ["ActionInfo", "CounterInfo", "FieldInfo", "Schema", "TableInfo"]


@dataclass(frozen=True)
class FieldInfo:
    """A match field of a table."""

    id: int
    name: str
    bitwidth: int
    match_type: int


@dataclass(frozen=True)
class ActionInfo:
    """An action and its parameters."""

    id: int
    name: str
    alias: str
    params: tuple[tuple[int, str, int], ...]  # (id, name, bitwidth) in P4 order


@dataclass(frozen=True)
class TableInfo:
    """A table: its match fields, the actions it may hold, its defaults and direct counter."""

    id: int
    name: str
    fields: tuple[FieldInfo, ...]
    scopes: dict[int, int]  # action id -> ActionRef.Scope
    const_default_id: int
    initial_default: p4info_pb2.TableActionCall
    direct_counter_id: int
    size: int


@dataclass(frozen=True)
class CounterInfo:
    """An indexed counter."""

    id: int
    name: str
    size: int


class Schema:
    """Id look-ups over the committed P4Info (the one the pipeline implements)."""

    def __init__(self, info: p4info_pb2.P4Info) -> None:
        self.actions = {
            a.preamble.id: ActionInfo(
                a.preamble.id,
                a.preamble.name,
                a.preamble.alias,
                tuple((p.id, p.name, p.bitwidth) for p in a.params),
            )
            for a in info.actions
        }
        direct = {d.direct_table_id: d.preamble.id for d in info.direct_counters}
        self.direct_counters = {d.preamble.id: d.direct_table_id for d in info.direct_counters}
        self.tables = {
            t.preamble.id: TableInfo(
                t.preamble.id,
                t.preamble.name,
                tuple(FieldInfo(m.id, m.name, m.bitwidth, m.match_type) for m in t.match_fields),
                {r.id: r.scope for r in t.action_refs},
                t.const_default_action_id,
                t.initial_default_action,
                direct.get(t.preamble.id, 0),
                t.size,
            )
            for t in info.tables
        }
        self.counters = {
            c.preamble.id: CounterInfo(c.preamble.id, c.preamble.name, c.size)
            for c in info.counters
        }
        self.registers = {r.preamble.id for r in info.registers}
        self.other_ids = {
            kind: {o.preamble.id for o in getattr(info, kind)}
            for kind in ("meters", "direct_meters", "action_profiles", "digests", "value_sets")
        }

    def table(self, table_id: int) -> TableInfo:
        table = self.tables.get(table_id)
        if table is None:
            raise _unknown("table", table_id, self.tables.values())
        return table

    def direct_table(self, table_id: int, what: str) -> TableInfo:
        """The table `table_id`, which must have a direct counter (`what` names the request)."""
        table = self.table(table_id)
        if not table.direct_counter_id:
            with_counter = [t.name for t in self.tables.values() if t.direct_counter_id]
            raise invalid(
                f"{what}: table {table.name} has no direct counter (tables with one: "
                f"{', '.join(with_counter)})"
            )
        return table

    def action(self, action_id: int) -> ActionInfo:
        action = self.actions.get(action_id)
        if action is None:
            raise invalid(f"unknown action id {action_id}")
        return action

    def counter(self, counter_id: int) -> CounterInfo:
        counter = self.counters.get(counter_id)
        if counter is None:
            raise _unknown("counter", counter_id, self.counters.values())
        return counter

    def action_for_alias(self, table: TableInfo, alias: str) -> ActionInfo:
        """The action of `table` the pipeline names `alias` (reads turn state into ids)."""
        for action_id in table.scopes:
            action = self.actions[action_id]
            if alias in (action.alias, action.name):
                return action
        raise P4RuntimeFailure(
            grpc.StatusCode.INTERNAL, f"{table.name}: the pipeline holds unknown action {alias!r}"
        )


def _unknown(
    kind: str, object_id: int, known: Iterable[TableInfo | CounterInfo]
) -> P4RuntimeFailure:
    listed = ", ".join(f"{o.id} ({o.name})" for o in known)
    return invalid(f"unknown {kind} id {object_id}; the P4Info has {kind}s {listed}")
