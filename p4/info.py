"""The P4Info of p4/ina.p4 (the committed p4/ina.p4info.txt), with name and id look-ups."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from finsy.proto.p4.config.v1 import p4info_pb2
from google.protobuf import text_format

from inaemu.p4.constants import P4INFO_PATH


@dataclass(frozen=True)
class ActionInfo:
    id: int
    name: str  # fully qualified, e.g. InaIngress.agg.agg_node
    alias: str
    params: tuple[tuple[str, int], ...]  # (name, bitwidth) in P4 order


@dataclass(frozen=True)
class TableInfo:
    id: int
    name: str
    alias: str
    keys: tuple[tuple[str, int, str], ...]  # (name, bitwidth, EXACT|LPM|...)
    action_ids: tuple[int, ...]
    size: int


class P4Info:
    def __init__(self, message: p4info_pb2.P4Info) -> None:
        self.message = message
        self.actions: dict[int, ActionInfo] = {
            a.preamble.id: ActionInfo(
                a.preamble.id,
                a.preamble.name,
                a.preamble.alias,
                tuple((p.name, p.bitwidth) for p in a.params),
            )
            for a in message.actions
        }
        self.tables: dict[int, TableInfo] = {
            t.preamble.id: TableInfo(
                t.preamble.id,
                t.preamble.name,
                t.preamble.alias,
                tuple(
                    (m.name, m.bitwidth, p4info_pb2.MatchField.MatchType.Name(m.match_type))
                    for m in t.match_fields
                ),
                tuple(r.id for r in t.action_refs),
                t.size,
            )
            for t in message.tables
        }

    @staticmethod
    def _find(items: dict[int, ActionInfo] | dict[int, TableInfo], name: str, kind: str) -> int:
        exact = [i for i, o in items.items() if name in (o.name, o.alias)]
        if len(exact) == 1:
            return exact[0]
        suffix = [i for i, o in items.items() if o.name.endswith("." + name)]
        if len(suffix) == 1:
            return suffix[0]
        known = ", ".join(sorted(o.name for o in items.values()))
        raise KeyError(f"no single {kind} named {name!r}; known: {known}")

    def table(self, name: str) -> TableInfo:
        return self.tables[self._find(self.tables, name, "table")]

    def action(self, name: str) -> ActionInfo:
        return self.actions[self._find(self.actions, name, "action")]


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
