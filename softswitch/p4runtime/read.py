"""P4Runtime Read: the entities a ReadRequest asks for, from the pipeline state.

`read_entities` answers each requested entity (a table's entries or default entry, counters,
the direct counter, multicast groups; wildcards included) under `pipeline.lock`, echoing what
a controller wrote that the pipeline does not keep (see `ForwardingState` in write.py).
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from finsy.proto.p4.v1 import p4runtime_pb2

from inaemu.p4.info import P4RuntimeFailure, invalid
from inaemu.softswitch.p4runtime.codec import (
    encode_action,
    encode_match,
    parse_counter_index,
    parse_match,
)
from inaemu.softswitch.p4runtime.values import encode_bytes
from inaemu.softswitch.p4runtime.write import ForwardingState, GroupCache

__all__ = ["read_entities"]


def read_entities(
    state: ForwardingState, entities: Iterable[p4runtime_pb2.Entity]
) -> tuple[list[p4runtime_pb2.Entity], list[P4RuntimeFailure | None]]:
    """Entities found, and one result per requested entity (None: fine)."""
    found: list[p4runtime_pb2.Entity] = []
    results: list[P4RuntimeFailure | None] = []
    with state.pipeline.lock:
        for entity in entities:
            try:
                found += _read_entity(state, entity)
                results.append(None)
            except P4RuntimeFailure as failure:
                results.append(failure)
    return found, results


def _read_entity(
    state: ForwardingState, entity: p4runtime_pb2.Entity
) -> list[p4runtime_pb2.Entity]:
    kind = entity.WhichOneof("entity")
    if kind == "table_entry":
        return _read_table_entries(state, entity.table_entry)
    if kind == "counter_entry":
        return _read_counters(state, entity.counter_entry)
    if kind == "direct_counter_entry":
        return _read_direct_counters(state, entity.direct_counter_entry)
    if kind == "packet_replication_engine_entry":
        return _read_pre(state, entity.packet_replication_engine_entry)
    if kind == "register_entry":
        raise P4RuntimeFailure(
            grpc.StatusCode.UNIMPLEMENTED, "RegisterEntry reads are not supported"
        )
    if kind is None:
        raise invalid("the entity to read is not set")
    ids = {
        "action_profile_member": (
            "action_profiles",
            entity.action_profile_member.action_profile_id,
        ),
        "action_profile_group": (
            "action_profiles",
            entity.action_profile_group.action_profile_id,
        ),
        "meter_entry": ("meters", entity.meter_entry.meter_id),
        "direct_meter_entry": ("direct_meters", entity.direct_meter_entry.table_entry.table_id),
        "value_set_entry": ("value_sets", entity.value_set_entry.value_set_id),
        "digest_entry": ("digests", entity.digest_entry.digest_id),
        "extern_entry": ("externs", entity.extern_entry.extern_type_id),
    }
    _, object_id = ids.get(kind, ("", 0))
    if object_id:
        raise invalid(f"{kind}: unknown id {object_id} (ina.p4 has no such objects)")
    return []  # a wildcard read of objects the program does not have


def _read_table_entries(
    state: ForwardingState, te: p4runtime_pb2.TableEntry
) -> list[p4runtime_pb2.Entity]:
    p4info = state.p4info
    if te.table_id == 0:
        if te.match or te.priority or te.HasField("action") or te.metadata:
            raise invalid("a read of all tables (table_id 0) takes no other filter")
        tables = list(p4info.tables.values())
    else:
        tables = [p4info.table(te.table_id)]
    out: list[p4runtime_pb2.Entity] = []
    if te.is_default_action:
        if te.match:
            raise invalid("a default-entry read takes no match fields")
        for table in tables:
            tstate = state.pipeline.tables[table.name]
            entry = p4runtime_pb2.TableEntry(
                table_id=table.id,
                is_default_action=True,
                action=p4runtime_pb2.TableAction(
                    action=encode_action(p4info, table, tstate.default)
                ),
            )
            meta = state.entry_meta.get((table.name, None))
            if meta is not None:
                entry.metadata, entry.controller_metadata = meta
            out.append(p4runtime_pb2.Entity(table_entry=entry))
        return out
    key = parse_match(tables[0], te.match) if te.match else None
    if te.priority:
        return []  # no entry of these tables has a priority
    action_filter = te.action.action.action_id if te.HasField("action") else 0
    with_counters = te.HasField("counter_data")
    for table in tables:
        entries = state.pipeline.tables[table.name].entries
        if key is not None:
            selected = [entries[key]] if key in entries else []
        else:
            selected = [entries[k] for k in sorted(entries)]
        for state_entry in selected:
            entry = p4runtime_pb2.TableEntry(
                table_id=table.id,
                match=encode_match(table, state_entry.key),
                action=p4runtime_pb2.TableAction(
                    action=encode_action(p4info, table, state_entry.action)
                ),
            )
            if action_filter and entry.action.action.action_id != action_filter:
                continue
            meta = state.entry_meta.get((table.name, state_entry.key))
            if meta is not None:
                entry.metadata, entry.controller_metadata = meta
            if te.metadata and entry.metadata != te.metadata:
                continue
            if te.controller_metadata and entry.controller_metadata != te.controller_metadata:
                continue
            if with_counters and table.direct_counter_id:
                entry.counter_data.packet_count = state_entry.packets
                entry.counter_data.byte_count = state_entry.bytes
            out.append(p4runtime_pb2.Entity(table_entry=entry))
    return out


def _read_counters(
    state: ForwardingState, ce: p4runtime_pb2.CounterEntry
) -> list[p4runtime_pb2.Entity]:
    if ce.counter_id == 0:
        if ce.HasField("index"):
            raise invalid("CounterEntry: an index needs a counter_id")
        counters = list(state.p4info.counters.values())
    else:
        counters = [state.p4info.counter(ce.counter_id)]
    out: list[p4runtime_pb2.Entity] = []
    for counter in counters:
        index = parse_counter_index(counter, ce)
        cstate = state.pipeline.counters[counter.name]
        for i in range(counter.size) if index is None else (index,):
            out.append(
                p4runtime_pb2.Entity(
                    counter_entry=p4runtime_pb2.CounterEntry(
                        counter_id=counter.id,
                        index=p4runtime_pb2.Index(index=i),
                        data=p4runtime_pb2.CounterData(
                            packet_count=cstate.packets[i], byte_count=cstate.bytes[i]
                        ),
                    )
                )
            )
    return out


def _read_direct_counters(
    state: ForwardingState, dce: p4runtime_pb2.DirectCounterEntry
) -> list[p4runtime_pb2.Entity]:
    te = dce.table_entry
    if te.table_id == 0:
        if te.match:
            raise invalid("DirectCounterEntry: match fields need a table_id")
        tables = [t for t in state.p4info.tables.values() if t.direct_counter_id]
    else:
        tables = [state.p4info.direct_table(te.table_id, "DirectCounterEntry")]
    out: list[p4runtime_pb2.Entity] = []
    for table in tables:
        entries = state.pipeline.tables[table.name].entries
        if te.match:
            key = parse_match(table, te.match)
            if key not in entries:
                raise P4RuntimeFailure(
                    grpc.StatusCode.NOT_FOUND, f"{table.name}: no entry with key {key}"
                )
            selected = [entries[key]]
        else:
            selected = [entries[k] for k in sorted(entries)]
        for entry in selected:
            out.append(
                p4runtime_pb2.Entity(
                    direct_counter_entry=p4runtime_pb2.DirectCounterEntry(
                        table_entry=p4runtime_pb2.TableEntry(
                            table_id=table.id, match=encode_match(table, entry.key)
                        ),
                        data=p4runtime_pb2.CounterData(
                            packet_count=entry.packets, byte_count=entry.bytes
                        ),
                    )
                )
            )
    return out


def _read_pre(
    state: ForwardingState, pre: p4runtime_pb2.PacketReplicationEngineEntry
) -> list[p4runtime_pb2.Entity]:
    kind = pre.WhichOneof("type")
    if kind == "clone_session_entry":
        return []  # no clone sessions exist (writing them is refused)
    if kind is None:
        raise invalid("PacketReplicationEngineEntry: set multicast_group_entry to read")
    mgid = pre.multicast_group_entry.multicast_group_id
    groups = state.pipeline.multicast.groups
    ids = sorted(groups) if mgid == 0 else [mgid] if mgid in groups else []
    out: list[p4runtime_pb2.Entity] = []
    for gid in ids:
        replicas = groups[gid]
        cache = state.groups.get(gid)
        if cache is None or cache.replicas != replicas:
            cache = GroupCache(list(replicas), [False] * len(replicas), b"")
        entry = p4runtime_pb2.MulticastGroupEntry(multicast_group_id=gid, metadata=cache.metadata)
        for (port, instance), as_bytes in zip(replicas, cache.bytes_port, strict=True):
            if as_bytes:
                entry.replicas.add(port=encode_bytes(port), instance=instance)
            else:
                entry.replicas.add(egress_port=port, instance=instance)
        out.append(
            p4runtime_pb2.Entity(
                packet_replication_engine_entry=p4runtime_pb2.PacketReplicationEngineEntry(
                    multicast_group_entry=entry
                )
            )
        )
    return out
