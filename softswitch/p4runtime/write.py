"""P4Runtime Write: a batch of updates applied to the pipeline state, atomically if asked.

`write_updates` applies one WriteRequest's updates (table entries, default actions, multicast
groups, counters, the direct counter) under `pipeline.lock`; every update returns an undo, so a
failed batch is rolled back unless the request says CONTINUE_ON_ERROR. `ForwardingState` is what
writes change and read.py reads: the pipeline, and what a controller wrote that the pipeline
does not keep (entry metadata, the form of multicast replicas), to echo it back.

Checks that need no state (multicast replicas: ports, instances, repeats, the per-group cap) are
made before the pipeline lock is taken, so the data plane waits only for the changes themselves.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import grpc
from finsy.proto.p4.v1 import p4runtime_pb2

from inaemu.common.wire import MAX_FANIN
from inaemu.p4.constants import DROP_PORT
from inaemu.p4.info import P4Info, P4RuntimeFailure, TableInfo, invalid
from inaemu.softswitch.p4runtime.codec import (
    parse_action,
    parse_counter_data,
    parse_counter_index,
    parse_entry_action,
    parse_match,
)
from inaemu.softswitch.p4runtime.values import decode_bytes, from_state_error
from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.state import ActionCall, ExactTable, StateError, TableEntry

__all__ = [
    "MAX_REPLICAS",
    "ForwardingState",
    "GroupCache",
    "clear_forwarding_state",
    "write_updates",
]

LOG = logging.getLogger(__name__)

MAX_MULTICAST_GROUP = 0xFFFF  # v1model mcast_grp is bit<16>
MAX_INSTANCE = 0xFFFF  # v1model egress_rid is bit<16>
MAX_REPLICAS = 4096  # replicas per multicast group (every packet to the group is copied to each)

UpdateType = p4runtime_pb2.Update.Type
Atomicity = p4runtime_pb2.WriteRequest.Atomicity
UPDATE_TYPES = (UpdateType.INSERT, UpdateType.MODIFY, UpdateType.DELETE)

Undo = Callable[[], None]
Change = Callable[[], Undo]  # an update, checked as far as it can be without the state
K = TypeVar("K")
V = TypeVar("V")


@dataclass
class GroupCache:
    """How a multicast group was written, to echo it on read (port field form, metadata)."""

    replicas: list[tuple[int, int]]
    bytes_port: list[bool]
    metadata: bytes


@dataclass(eq=False)
class ForwardingState:
    """The data-plane state P4Runtime writes and reads, and what writes said beside it.

    `entry_meta`: (metadata, controller_metadata) of table entries, by (table name, match key;
    None for the default entry). `groups`: how each multicast group was written.
    """

    pipeline: Pipeline
    p4info: P4Info
    entry_meta: dict[tuple[str, tuple[int, ...] | None], tuple[bytes, int]] = field(
        default_factory=dict
    )
    groups: dict[int, GroupCache] = field(default_factory=dict)


def write_updates(
    state: ForwardingState, request: p4runtime_pb2.WriteRequest
) -> list[P4RuntimeFailure | None] | None:
    """Apply a batch; None if all updates succeeded, else one result per update.

    With ROLLBACK_ON_ERROR or DATAPLANE_ATOMIC the first failure stops the batch; the updates
    before it are undone and those after it not attempted, both ABORTED with the number of the
    update that failed.
    """
    if request.atomicity not in Atomicity.values():
        raise invalid(f"unknown atomicity {request.atomicity}")
    atomic = request.atomicity != Atomicity.CONTINUE_ON_ERROR
    mode = Atomicity.Name(request.atomicity)
    changes = [_prepare(state, update) for update in request.updates]  # no lock yet
    first_refused = next(
        (i for i, c in enumerate(changes) if isinstance(c, P4RuntimeFailure)), len(changes)
    )
    attempted = changes[:first_refused] if atomic else changes
    needs_lock = any(not isinstance(c, P4RuntimeFailure) for c in attempted)
    results: list[P4RuntimeFailure | None] = []
    undos: list[Undo] = []
    failed_at: int | None = None
    with state.pipeline.lock if needs_lock else contextlib.nullcontext():
        for index, change in enumerate(changes):
            if failed_at is not None and atomic:
                results.append(
                    P4RuntimeFailure(
                        grpc.StatusCode.ABORTED,
                        f"not attempted: update #{failed_at} failed and atomicity is {mode}",
                    )
                )
                continue
            try:
                if isinstance(change, P4RuntimeFailure):
                    raise change
                undos.append(change())
                results.append(None)
            except (P4RuntimeFailure, StateError) as err:
                failure = from_state_error(err) if isinstance(err, StateError) else err
                LOG.debug("update %d refused: %s", index, failure.message)
                results.append(failure)
                if failed_at is None:
                    failed_at = index
        if failed_at is not None and atomic:
            for undo in reversed(undos):
                undo()
            rolled_back = P4RuntimeFailure(
                grpc.StatusCode.ABORTED, f"rolled back: update #{failed_at} failed ({mode})"
            )
            results = [rolled_back if r is None else r for r in results]
    return results if failed_at is not None else None


def _prepare(state: ForwardingState, update: p4runtime_pb2.Update) -> Change | P4RuntimeFailure:
    """The change `update` asks for, after the checks that need no state (made here, before
    the pipeline lock); or why it is refused."""
    kind = update.entity.WhichOneof("entity")
    try:
        if kind == "packet_replication_engine_entry" and update.type in UPDATE_TYPES:
            pre = update.entity.packet_replication_engine_entry
            return _prepare_pre(state, update.type, pre)
        return functools.partial(_apply, state, update)
    except P4RuntimeFailure as failure:
        return failure


def clear_forwarding_state(state: ForwardingState) -> None:
    """Back to a fresh device: no entries or groups, P4 defaults, registers and counters zeroed."""
    p = state.pipeline
    with p.lock:
        for table in state.p4info.tables.values():
            tstate = p.tables[table.name]
            tstate.entries.clear()
            tstate.default = _initial_default(state, table)
        p.multicast.groups.clear()
        p.reset_state()
        state.entry_meta.clear()
        state.groups.clear()


def _restore(mapping: dict[K, V], key: K, old: V | None) -> None:
    """Undo a change of `mapping[key]`: put `old` back, or remove the key if it had none."""
    if old is None:
        mapping.pop(key, None)
    else:
        mapping[key] = old


def _apply(state: ForwardingState, update: p4runtime_pb2.Update) -> Undo:
    kind = update.entity.WhichOneof("entity")
    utype = update.type
    if utype not in UPDATE_TYPES:
        raise invalid("update type must be INSERT, MODIFY or DELETE")
    entity = update.entity
    if kind == "table_entry":
        return _write_table_entry(state, utype, entity.table_entry)
    if kind == "packet_replication_engine_entry":
        return _prepare_pre(state, utype, entity.packet_replication_engine_entry)()
    if kind == "counter_entry":
        return _write_counter(state, utype, entity.counter_entry)
    if kind == "direct_counter_entry":
        return _write_direct_counter(state, utype, entity.direct_counter_entry)
    if kind == "register_entry":
        raise P4RuntimeFailure(
            grpc.StatusCode.UNIMPLEMENTED,
            "RegisterEntry writes are not supported (registers hold the aggregation state)",
        )
    if kind is None:
        raise invalid("the update has no entity")
    raise invalid(f"{kind}: ina.p4 has no such objects")


# ---------------------------------------------------------------------- actions


def _check_semantics(state: ForwardingState, call: ActionCall) -> None:
    """Values bmv2 would accept but that would make the softswitch corrupt its state."""
    if call.name == "agg_node":
        base, pool_size, fanin = call.params[:3]
        slots = state.pipeline.registers.slots
        if base + pool_size > slots:
            raise invalid(
                f"agg_node: base {base} + pool_size {pool_size} = {base + pool_size} runs "
                f"past the register file ({slots} slots): lower base or pool_size"
            )
        if not 1 <= fanin <= MAX_FANIN:
            raise invalid(
                f"agg_node: fanin {fanin} not in 1..{MAX_FANIN} "
                "(the per-slot bitmap register is 32 bits wide)"
            )
    elif call.name == "set_child":
        (index,) = call.params
        if index >= MAX_FANIN:
            raise invalid(
                f"set_child: index {index} not in 0..{MAX_FANIN - 1} "
                "(the per-slot bitmap register is 32 bits wide)"
            )


def _entry_action(
    state: ForwardingState, table: TableInfo, te: p4runtime_pb2.TableEntry, default: bool
) -> ActionCall:
    call = parse_entry_action(state.p4info, table, te, default)
    _check_semantics(state, call)
    return call


def _initial_default(state: ForwardingState, table: TableInfo) -> ActionCall:
    """The default action the P4 program gives `table`."""
    params = {a.param_id: a.value for a in table.initial_default.arguments}
    call = parse_action(state.p4info, table, table.initial_default.action_id, params, True)
    _check_semantics(state, call)
    return call


# ---------------------------------------------------------------------- table entries


def _check_table_entry_fields(table: TableInfo, te: p4runtime_pb2.TableEntry) -> None:
    if te.is_const:
        raise invalid(f"{table.name}: is_const must be false in a write")
    if te.priority:
        raise invalid(
            f"{table.name}: priority must be 0 (the table has only exact/LPM fields), "
            f"got {te.priority}"
        )
    if te.HasField("meter_config") or te.HasField("meter_counter_data"):
        raise invalid(f"{table.name}: the table has no direct meter")
    if te.idle_timeout_ns or te.HasField("time_since_last_hit"):
        raise invalid(f"{table.name}: the table does not support idle timeouts")
    if te.HasField("counter_data") and not table.direct_counter_id:
        raise invalid(f"{table.name}: the table has no direct counter (drop counter_data)")


def _write_table_entry(state: ForwardingState, utype: int, te: p4runtime_pb2.TableEntry) -> Undo:
    if te.table_id == 0:
        raise invalid("table_id 0 (wildcard) is only valid in a read")
    table = state.p4info.table(te.table_id)
    _check_table_entry_fields(table, te)
    tstate = state.pipeline.tables[table.name]
    meta = (te.metadata, te.controller_metadata)
    if te.is_default_action:
        return _write_default(state, utype, table, tstate, te, meta)
    key = parse_match(table, te.match)
    meta_key = (table.name, key)
    entry_meta = state.entry_meta
    old_meta = entry_meta.get(meta_key)

    def restore_meta() -> None:
        _restore(entry_meta, meta_key, old_meta)

    if utype == UpdateType.DELETE:
        deleted = tstate.entries.get(key)
        if deleted is None:
            raise P4RuntimeFailure(
                grpc.StatusCode.NOT_FOUND, f"{table.name}: no entry with key {key}"
            )
        tstate.delete(key)
        entry_meta.pop(meta_key, None)

        def undo_delete() -> None:
            tstate.entries[key] = deleted
            restore_meta()

        return undo_delete
    counters = (
        parse_counter_data(te.counter_data, table.name) if te.HasField("counter_data") else None
    )
    if utype == UpdateType.INSERT:
        if not te.HasField("action"):
            raise invalid(f"{table.name}: INSERT needs an action")
        packets, nbytes = counters or (0, 0)
        try:
            tstate.insert(TableEntry(key, _entry_action(state, table, te, False), packets, nbytes))
        except StateError as err:
            raise from_state_error(err) from None
        entry_meta[meta_key] = meta

        def undo_insert() -> None:
            tstate.entries.pop(key, None)
            restore_meta()

        return undo_insert
    # MODIFY
    call = _entry_action(state, table, te, False) if te.HasField("action") else None
    entry = tstate.entries.get(key)
    if entry is None:
        raise P4RuntimeFailure(
            grpc.StatusCode.NOT_FOUND, f"{table.name}: no entry with key {key} to modify"
        )
    before = (entry.action, entry.packets, entry.bytes)
    if call is not None:
        entry.action = call
        entry_meta[meta_key] = meta
    if counters is not None:
        entry.packets, entry.bytes = counters

    def undo_modify() -> None:
        entry.action, entry.packets, entry.bytes = before
        restore_meta()

    return undo_modify


def _write_default(
    state: ForwardingState,
    utype: int,
    table: TableInfo,
    tstate: ExactTable,
    te: p4runtime_pb2.TableEntry,
    meta: tuple[bytes, int],
) -> Undo:
    if utype != UpdateType.MODIFY:
        raise invalid(
            f"{table.name}: the default entry can only be modified (INSERT and DELETE "
            "are not allowed)"
        )
    if te.match:
        raise invalid(f"{table.name}: a default entry has no match fields")
    if table.const_default_id:
        const = state.p4info.actions[table.const_default_id].name
        raise P4RuntimeFailure(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{table.name}: the default action is const ({const}) and cannot be modified",
        )
    if te.HasField("counter_data"):
        raise invalid(f"{table.name}: the default entry has no direct counter here")
    if te.HasField("action"):
        call = _entry_action(state, table, te, True)
        new_meta: tuple[bytes, int] | None = meta
    else:  # reset to the P4 program's default
        call = _initial_default(state, table)
        new_meta = None
    old_call = tstate.default
    meta_key = (table.name, None)
    entry_meta = state.entry_meta
    old_meta = entry_meta.get(meta_key)
    try:
        tstate.set_default(call)
    except StateError as err:
        raise from_state_error(err) from None
    if new_meta is None:
        entry_meta.pop(meta_key, None)
    else:
        entry_meta[meta_key] = new_meta

    def undo() -> None:
        tstate.default = old_call
        _restore(entry_meta, meta_key, old_meta)

    return undo


# ---------------------------------------------------------------------- multicast


def _prepare_pre(
    state: ForwardingState, utype: int, pre: p4runtime_pb2.PacketReplicationEngineEntry
) -> Change:
    """A multicast group change: everything about the group is checked here, without the
    pipeline lock (constant time per replica); the change itself is a swap of its list."""
    kind = pre.WhichOneof("type")
    if kind == "clone_session_entry":
        raise P4RuntimeFailure(
            grpc.StatusCode.UNIMPLEMENTED,
            "clone sessions are not supported: ina.p4 never clones packets",
        )
    if kind != "multicast_group_entry":
        raise invalid("PacketReplicationEngineEntry: set multicast_group_entry")
    mg = pre.multicast_group_entry
    mgid = mg.multicast_group_id
    if mgid == 0:
        raise invalid("multicast_group_id 0 is reserved (wildcard read / no multicast)")
    if mgid > MAX_MULTICAST_GROUP:
        raise invalid(f"multicast_group_id {mgid} does not fit v1model's 16-bit mcast_grp")
    multicast = state.pipeline.multicast
    groups = multicast.groups
    caches = state.groups
    if utype == UpdateType.DELETE:

        def delete() -> Undo:
            old, old_cache = groups.get(mgid), caches.get(mgid)
            try:
                multicast.delete(mgid)
            except StateError as err:
                raise from_state_error(err) from None
            caches.pop(mgid, None)
            return functools.partial(_restore_group, state, mgid, old, old_cache)

        return delete
    replicas, forms = _parse_replicas(mgid, mg.replicas)
    cache = GroupCache(replicas, forms, mg.metadata)
    store = multicast.insert if utype == UpdateType.INSERT else multicast.modify

    def change() -> Undo:
        old, old_cache = groups.get(mgid), caches.get(mgid)
        try:
            store(mgid, replicas)
        except StateError as err:
            raise from_state_error(err) from None
        caches[mgid] = cache
        return functools.partial(_restore_group, state, mgid, old, old_cache)

    return change


def _restore_group(
    state: ForwardingState,
    mgid: int,
    old: list[tuple[int, int]] | None,
    old_cache: GroupCache | None,
) -> None:
    _restore(state.pipeline.multicast.groups, mgid, old)
    _restore(state.groups, mgid, old_cache)


def _parse_replicas(
    mgid: int, given: Sequence[p4runtime_pb2.Replica]
) -> tuple[list[tuple[int, int]], list[bool]]:
    """(port, instance) of each replica, and whether its port came as bytes (`port`)."""
    if len(given) > MAX_REPLICAS:
        raise P4RuntimeFailure(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"multicast group {mgid}: {len(given)} replicas; this switch takes at most "
            f"{MAX_REPLICAS} per group",
        )
    replicas: list[tuple[int, int]] = []
    forms: list[bool] = []
    seen: set[tuple[int, int]] = set()
    for n, r in enumerate(given):
        what = f"multicast group {mgid}: replica {n}"
        form = r.WhichOneof("port_kind")
        if form is None:
            raise invalid(f"{what} has no port (set port or egress_port)")
        port = decode_bytes(r.port, 32, f"{what} port") if form == "port" else r.egress_port
        if port >= DROP_PORT:
            raise invalid(
                f"{what}: port {port} is not a front-panel port of this v1model switch "
                f"(ports are 0..{DROP_PORT - 1}; {DROP_PORT} is the drop port)"
            )
        if r.backup_replicas:
            raise P4RuntimeFailure(
                grpc.StatusCode.UNIMPLEMENTED, f"{what}: backup replicas are not supported"
            )
        if r.instance > MAX_INSTANCE:
            raise invalid(f"{what}: instance {r.instance} does not fit v1model's 16-bit egress_rid")
        key = (port, r.instance)
        if key in seen:
            raise invalid(f"{what}: (port {port}, instance {r.instance}) is repeated")
        seen.add(key)
        replicas.append(key)
        forms.append(form == "port")
    return replicas, forms


# ---------------------------------------------------------------------- counters


def _write_counter(state: ForwardingState, utype: int, ce: p4runtime_pb2.CounterEntry) -> Undo:
    if utype != UpdateType.MODIFY:
        raise invalid("CounterEntry: only MODIFY is allowed")
    if ce.counter_id == 0:
        raise invalid("CounterEntry: counter_id 0 (wildcard) is only valid in a read")
    counter = state.p4info.counter(ce.counter_id)
    index = parse_counter_index(counter, ce)
    cstate = state.pipeline.counters[counter.name]
    if not ce.HasField("data"):
        return lambda: None
    packets, nbytes = parse_counter_data(ce.data, counter.name)
    old_packets, old_bytes = list(cstate.packets), list(cstate.bytes)
    indices = range(counter.size) if index is None else (index,)
    for i in indices:
        cstate.packets[i], cstate.bytes[i] = packets, nbytes

    def undo() -> None:
        cstate.packets[:], cstate.bytes[:] = old_packets, old_bytes

    return undo


def _write_direct_counter(
    state: ForwardingState, utype: int, dce: p4runtime_pb2.DirectCounterEntry
) -> Undo:
    if utype != UpdateType.MODIFY:
        raise invalid("DirectCounterEntry: only MODIFY is allowed")
    table = state.p4info.direct_table(dce.table_entry.table_id, "DirectCounterEntry")
    if dce.table_entry.is_default_action:
        raise invalid(f"{table.name}: the default entry has no direct counter here")
    key = parse_match(table, dce.table_entry.match)
    entry = state.pipeline.tables[table.name].entries.get(key)
    if entry is None:
        raise P4RuntimeFailure(grpc.StatusCode.NOT_FOUND, f"{table.name}: no entry with key {key}")
    if not dce.HasField("data"):
        return lambda: None
    before = (entry.packets, entry.bytes)
    entry.packets, entry.bytes = parse_counter_data(dce.data, table.name)

    def undo() -> None:
        entry.packets, entry.bytes = before

    return undo
