"""The one model of the P4Info: tables, actions and counters by name and by id.

The controller (names from its plans) and the softswitch's P4Runtime server (ids from
requests) both look objects up here; a refused look-up is a `P4RuntimeFailure` that carries
the P4Runtime status code, so the server can answer it as it is and the controller can say it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import grpc
from finsy.proto.p4.config.v1 import p4info_pb2
from google.protobuf import text_format

from inaemu.p4.constants import P4INFO_PATH

__all__ = [
    "ActionInfo",
    "CounterInfo",
    "FieldInfo",
    "P4Info",
    "P4RuntimeFailure",
    "ParamInfo",
    "TableInfo",
    "bounded",
    "invalid",
    "load_p4info",
    "p4info_diff",
    "parse_p4info_text",
]

MatchType = p4info_pb2.MatchField.MatchType


class P4RuntimeFailure(Exception):
    """A request (or one update of a batch) refused with a gRPC status code."""

    def __init__(self, code: Any, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> P4RuntimeFailure:
    """An INVALID_ARGUMENT failure."""
    return P4RuntimeFailure(grpc.StatusCode.INVALID_ARGUMENT, message)


def bounded(value: str | bytes, limit: int = 64, *, quote: bool = True) -> str:
    """A value a client sent, for an error message: never more than about `limit` characters.

    A str is quoted (`repr`; `quote=False` leaves it as it is), bytes are shown in hex; past
    `limit` the value is cut and its length said, e.g. `0x0101... (1048576 bytes)`, so a 1 MB
    match value or P4Info name never ends up in a status message.
    """
    if isinstance(value, bytes):
        digits = max(1, limit // 2)
        if len(value) <= digits:
            return "0x" + value.hex()
        return f"0x{value[:digits].hex()}... ({len(value)} bytes)"
    if len(value) <= limit:
        return repr(value) if quote else value
    cut = value[:limit]
    return f"{repr(cut) if quote else cut}... ({len(value)} chars)"


@dataclass(frozen=True)
class FieldInfo:
    """A match field of a table."""

    id: int
    name: str
    bitwidth: int
    match_type: int  # p4info MatchField.MatchType

    @property
    def kind(self) -> str:
        """EXACT, LPM, TERNARY, ..."""
        return str(MatchType.Name(self.match_type))


@dataclass(frozen=True)
class ParamInfo:
    """A parameter of an action."""

    id: int
    name: str
    bitwidth: int


@dataclass(frozen=True)
class ActionInfo:
    """An action and its parameters in P4 order."""

    id: int
    name: str  # fully qualified, e.g. InaIngress.agg.agg_node
    alias: str
    params: tuple[ParamInfo, ...]


@dataclass(frozen=True)
class TableInfo:
    """A table: its match fields, the actions it may hold, its defaults and direct counter."""

    id: int
    name: str
    alias: str
    fields: tuple[FieldInfo, ...]
    scopes: Mapping[int, int]  # action id -> ActionRef.Scope
    const_default_id: int
    initial_default: p4info_pb2.TableActionCall
    direct_counter_id: int
    size: int


@dataclass(frozen=True)
class CounterInfo:
    """An indexed counter."""

    id: int
    name: str
    alias: str
    size: int


_Info = TypeVar("_Info", TableInfo, ActionInfo, CounterInfo)


class P4Info:
    """The objects of a P4Info by id and by name.

    Look-ups by id (what a P4Runtime request carries) and by name (fully qualified, alias, or
    a unique dotted suffix such as `ina_job`) refuse unknown objects with a `P4RuntimeFailure`
    whose status is the one the P4Runtime spec asks for (INVALID_ARGUMENT for an id) or
    NOT_FOUND (for a name), and whose message lists what the P4Info has.
    """

    def __init__(self, message: p4info_pb2.P4Info) -> None:
        self.message = message
        self.actions: dict[int, ActionInfo] = {
            a.preamble.id: ActionInfo(
                a.preamble.id,
                a.preamble.name,
                a.preamble.alias,
                tuple(ParamInfo(p.id, p.name, p.bitwidth) for p in a.params),
            )
            for a in message.actions
        }
        direct = {d.direct_table_id: d.preamble.id for d in message.direct_counters}
        self.direct_counters: dict[int, int] = {
            d.preamble.id: d.direct_table_id for d in message.direct_counters
        }
        self.tables: dict[int, TableInfo] = {
            t.preamble.id: TableInfo(
                t.preamble.id,
                t.preamble.name,
                t.preamble.alias,
                tuple(FieldInfo(m.id, m.name, m.bitwidth, m.match_type) for m in t.match_fields),
                {r.id: r.scope for r in t.action_refs},
                t.const_default_action_id,
                t.initial_default_action,
                direct.get(t.preamble.id, 0),
                t.size,
            )
            for t in message.tables
        }
        self.counters: dict[int, CounterInfo] = {
            c.preamble.id: CounterInfo(c.preamble.id, c.preamble.name, c.preamble.alias, c.size)
            for c in message.counters
        }
        self.registers: set[int] = {r.preamble.id for r in message.registers}
        self.other_ids: dict[str, set[int]] = {
            kind: {o.preamble.id for o in getattr(message, kind)}
            for kind in ("meters", "direct_meters", "action_profiles", "digests", "value_sets")
        }

    # ------------------------------------------------------------------ look-ups

    def table(self, key: int | str) -> TableInfo:
        return _look_up(self.tables, key, "table")

    def action(self, key: int | str) -> ActionInfo:
        return _look_up(self.actions, key, "action")

    def counter(self, key: int | str) -> CounterInfo:
        return _look_up(self.counters, key, "counter")

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

    def action_for_alias(self, table: TableInfo, alias: str) -> ActionInfo:
        """The action of `table` that state names `alias` (reads turn state into ids)."""
        for action_id in table.scopes:
            action = self.actions[action_id]
            if alias in (action.alias, action.name):
                return action
        raise P4RuntimeFailure(
            grpc.StatusCode.INTERNAL, f"{table.name}: the pipeline holds unknown action {alias!r}"
        )


def _look_up(items: dict[int, _Info], key: int | str, kind: str) -> _Info:
    if isinstance(key, int):
        found = items.get(key)
        if found is None:
            raise invalid(f"unknown {kind} id {key}; the P4Info has {kind}s {_listed(items)}")
        return found
    exact = [o for o in items.values() if key in (o.name, o.alias)]
    if len(exact) != 1:
        exact = [o for o in items.values() if o.name.endswith("." + key)]
    if len(exact) == 1:
        return exact[0]
    raise P4RuntimeFailure(
        grpc.StatusCode.NOT_FOUND,
        f"no single {kind} named {bounded(key, 80)}; the P4Info has {kind}s {_listed(items)}",
    )


def _listed(items: Mapping[int, TableInfo | ActionInfo | CounterInfo]) -> str:
    return ", ".join(f"{o.id} ({o.name})" for o in items.values())


def parse_p4info_text(text: str) -> p4info_pb2.P4Info:
    info = p4info_pb2.P4Info()
    text_format.Parse(text, info)
    return info


@cache
def load_p4info(path: Path = P4INFO_PATH) -> P4Info:
    return P4Info(parse_p4info_text(path.read_text()))


def p4info_diff(built: p4info_pb2.P4Info, committed: p4info_pb2.P4Info) -> list[str]:
    """Differences that matter to a controller: objects, ids, names, keys, params, sizes.

    Documentation, aliases and annotations are ignored, as is the order of objects.
    """

    def summary(info: p4info_pb2.P4Info) -> dict[str, object]:
        out: dict[str, object] = {}
        for t in info.tables:
            out[f"table {t.preamble.name}"] = (
                t.preamble.id,
                [(m.id, m.name, m.bitwidth, m.match_type) for m in t.match_fields],
                sorted((r.id, r.scope) for r in t.action_refs),
                t.const_default_action_id,
                list(t.direct_resource_ids),
                t.size,
            )
        for a in info.actions:
            out[f"action {a.preamble.name}"] = (
                a.preamble.id,
                [(p.id, p.name, p.bitwidth) for p in a.params],
            )
        for c in info.counters:
            out[f"counter {c.preamble.name}"] = (c.preamble.id, c.spec.unit, c.size)
        for d in info.direct_counters:
            out[f"direct_counter {d.preamble.name}"] = (
                d.preamble.id,
                d.spec.unit,
                d.direct_table_id,
            )
        for r in info.registers:
            out[f"register {r.preamble.name}"] = (
                r.preamble.id,
                r.type_spec.bitstring.bit.bitwidth,
                r.size,
            )
        for kind in ("meters", "direct_meters", "action_profiles", "digests", "value_sets"):
            for obj in getattr(info, kind):
                out[f"{kind} {obj.preamble.name}"] = obj.preamble.id
        if info.pkg_info.arch:
            out["arch"] = info.pkg_info.arch
        return out

    a, b = summary(built), summary(committed)
    diffs = [f"only in built: {k}" for k in sorted(a.keys() - b.keys())]
    diffs += [f"only in committed: {k}" for k in sorted(b.keys() - a.keys())]
    diffs += [
        f"{k}: built {a[k]} != committed {b[k]}"
        for k in sorted(a.keys() & b.keys())
        if a[k] != b[k]
    ]
    return diffs
