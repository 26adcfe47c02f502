"""P4Runtime messages to and from the softswitch's table state, checked against the P4Info.

`parse_*` turn what a controller sent (match fields, actions, counter data) into the values
softswitch/state.py keeps, refusing what the P4Runtime spec or the P4Info forbids;
`encode_*` turn state back into messages for reads. Nothing here touches the pipeline.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from finsy.proto.p4.config.v1 import p4info_pb2
from finsy.proto.p4.v1 import p4runtime_pb2

from inaemu.p4.info import CounterInfo, P4Info, P4RuntimeFailure, TableInfo, invalid
from inaemu.softswitch.p4runtime.values import decode_bytes, encode_bytes
from inaemu.softswitch.state import ActionCall

__all__ = [
    "encode_action",
    "encode_match",
    "parse_action",
    "parse_counter_data",
    "parse_counter_index",
    "parse_entry_action",
    "parse_match",
]

MatchType = p4info_pb2.MatchField.MatchType
Scope = p4info_pb2.ActionRef.Scope


# ---------------------------------------------------------------------- match keys


def parse_match(table: TableInfo, matches: Iterable[p4runtime_pb2.FieldMatch]) -> tuple[int, ...]:
    """The state key of a match: each exact field's value, (value, prefix length) per LPM field."""
    by_id: dict[int, p4runtime_pb2.FieldMatch] = {}
    fields = {f.id: f for f in table.fields}
    for fm in matches:
        f = fields.get(fm.field_id)
        if f is None:
            known = ", ".join(f"{x.id} ({x.name})" for x in table.fields)
            raise invalid(f"{table.name}: unknown match field id {fm.field_id}; fields are {known}")
        if fm.field_id in by_id:
            raise invalid(f"{table.name}: match field {f.name} given twice")
        expected = "exact" if f.match_type == MatchType.EXACT else "lpm"
        got = fm.WhichOneof("field_match_type")
        if got != expected:
            raise invalid(
                f"{table.name}: match field {f.name} is {MatchType.Name(f.match_type)}, "
                f"got a {got or 'missing'} match"
            )
        by_id[fm.field_id] = fm
    key: list[int] = []
    for f in table.fields:
        given = by_id.get(f.id)
        what = f"{table.name}: match field {f.name}"
        if f.match_type == MatchType.EXACT:
            if given is None:
                raise invalid(f"{what} (exact) is missing; exact fields cannot be omitted")
            key.append(decode_bytes(given.exact.value, f.bitwidth, what))
            continue
        if f.match_type != MatchType.LPM:
            raise P4RuntimeFailure(
                grpc.StatusCode.UNIMPLEMENTED,
                f"{what}: match type {MatchType.Name(f.match_type)} is not supported",
            )
        if given is None:  # a don't-care LPM match is the /0 prefix
            key += [0, 0]
            continue
        plen = given.lpm.prefix_len
        if not 1 <= plen <= f.bitwidth:
            hint = " (omit the field for a don't-care match)" if plen == 0 else ""
            raise invalid(f"{what}: prefix_len {plen} not in 1..{f.bitwidth}{hint}")
        value = decode_bytes(given.lpm.value, f.bitwidth, what)
        host_bits = value & ((1 << (f.bitwidth - plen)) - 1)
        if host_bits:
            raise invalid(
                f"{what}: {value:#x}/{plen} has bits set past the prefix; "
                f"use {value & ~host_bits:#x}/{plen}"
            )
        key += [value, plen]
    return tuple(key)


def encode_match(table: TableInfo, key: tuple[int, ...]) -> list[p4runtime_pb2.FieldMatch]:
    """The match fields of a state key (a /0 LPM field is left out, as the spec wants)."""
    out: list[p4runtime_pb2.FieldMatch] = []
    values = iter(key)
    for f in table.fields:
        if f.match_type == MatchType.LPM:
            value, plen = next(values), next(values)
            if plen:
                out.append(
                    p4runtime_pb2.FieldMatch(
                        field_id=f.id,
                        lpm=p4runtime_pb2.FieldMatch.LPM(
                            value=encode_bytes(value), prefix_len=plen
                        ),
                    )
                )
        else:
            out.append(
                p4runtime_pb2.FieldMatch(
                    field_id=f.id,
                    exact=p4runtime_pb2.FieldMatch.Exact(value=encode_bytes(next(values))),
                )
            )
    return out


# ---------------------------------------------------------------------- actions


def parse_action(
    p4info: P4Info, table: TableInfo, action_id: int, params: dict[int, bytes], default: bool
) -> ActionCall:
    """The call of `action_id` with `params` (param id -> bytestring) in `table`.

    `default`: the call is for the default entry (scopes @defaultonly / @tableonly apply).
    """
    action = p4info.action(action_id)
    scope = table.scopes.get(action_id)
    if scope is None:
        allowed = ", ".join(p4info.actions[a].name for a in table.scopes)
        raise invalid(
            f"{table.name}: action {action.name} is not an action of this table "
            f"(allowed: {allowed})"
        )
    if not default and scope == Scope.DEFAULT_ONLY:
        raise P4RuntimeFailure(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{table.name}: action {action.name} is @defaultonly; it cannot be an entry's action",
        )
    if default and scope == Scope.TABLE_ONLY:
        raise P4RuntimeFailure(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{table.name}: action {action.name} is @tableonly; it cannot be the default",
        )
    known = {p.id for p in action.params}
    extra = sorted(set(params) - known)
    if extra:
        raise invalid(
            f"{action.name}: unknown param id(s) {extra}; params are "
            + ", ".join(f"{p.id} ({p.name})" for p in action.params)
        )
    values: list[int] = []
    for p in action.params:
        if p.id not in params:
            raise invalid(f"{action.name}: param {p.name} (id {p.id}) is missing")
        values.append(decode_bytes(params[p.id], p.bitwidth, f"{action.name}: param {p.name}"))
    return ActionCall(action.alias, tuple(values))


def parse_entry_action(
    p4info: P4Info, table: TableInfo, te: p4runtime_pb2.TableEntry, default: bool
) -> ActionCall:
    """The action call of a table entry (a direct action; no action profiles in ina.p4)."""
    kind = te.action.WhichOneof("type")
    if kind != "action":
        raise invalid(f"{table.name}: a direct table takes an action, not {kind}")
    action = te.action.action
    params: dict[int, bytes] = {}
    for p in action.params:
        if p.param_id in params:
            raise invalid(f"{table.name}: action param id {p.param_id} given twice")
        params[p.param_id] = p.value
    return parse_action(p4info, table, action.action_id, params, default)


def encode_action(p4info: P4Info, table: TableInfo, call: ActionCall) -> p4runtime_pb2.Action:
    """The P4Runtime action of a call the pipeline holds."""
    action = p4info.action_for_alias(table, call.name)
    if len(call.params) != len(action.params):
        raise P4RuntimeFailure(
            grpc.StatusCode.INTERNAL, f"{table.name}: bad parameters for {action.name}"
        )
    return p4runtime_pb2.Action(
        action_id=action.id,
        params=[
            p4runtime_pb2.Action.Param(param_id=p.id, value=encode_bytes(value))
            for p, value in zip(action.params, call.params, strict=True)
        ],
    )


# ---------------------------------------------------------------------- counters


def parse_counter_data(data: p4runtime_pb2.CounterData, what: str) -> tuple[int, int]:
    """(packets, bytes) of counter data a controller writes."""
    if data.packet_count < 0 or data.byte_count < 0:
        raise invalid(f"{what}: counter values must not be negative")
    return data.packet_count, data.byte_count


def parse_counter_index(counter: CounterInfo, entry: p4runtime_pb2.CounterEntry) -> int | None:
    """The index a CounterEntry names; None: no index given (all of the counter's cells)."""
    if not entry.HasField("index"):
        return None
    index = entry.index.index
    if index < 0:
        raise invalid(f"{counter.name}: negative index {index}")
    if index >= counter.size:
        raise P4RuntimeFailure(
            grpc.StatusCode.OUT_OF_RANGE,
            f"{counter.name}: index {index} out of range (size {counter.size})",
        )
    return index
