"""P4Runtime Read: the entities a ReadRequest asks for, from the pipeline state, within limits.

A Read goes in two steps (docs/p4runtime.md, "Limits" and "Read"):

- `plan_read` checks every requested entity (a table's entries or default entry, counters, the
  direct counter, multicast groups; wildcards included), answers an entity repeated in one
  request once, and counts what the request would return, a multicast replica counting as one
  entity, in short holds of `pipeline.lock`. Past `ReadLimits.max_entities` the whole Read is
  refused with RESOURCE_EXHAUSTED before any work.
- `ReadPlan.responses` copies the state in slices of at most `ReadLimits.slice` items per hold
  of `pipeline.lock` and builds the messages outside it, so the data plane waits for one
  slice's copy at most; at most `ReadLimits.builders` Reads build messages at once (each then
  leaves the interpreter to the others, the data plane first); ReadResponses are cut at
  `READ_RESPONSE_BUDGET` bytes; a Read past `max_bytes` in all or `time_limit` seconds since it
  arrived (waiting for a slow client included) is ended with RESOURCE_EXHAUSTED.

Each slice is one state of what it covers; a Read as a whole is not one snapshot (as on a
hardware switch, whose counters count on while they are read).

What the server reads of the data plane (`ForwardingState.pipeline`), and nothing else:
`lock` (held only to copy); `tables[name].entries` (match key -> entry with `key`, `action`,
`packets`, `bytes`) and `tables[name].default`; `counters[name].packets` and `.bytes` (indexable,
sliceable sequences of ints); `multicast.groups` (group id -> list of (port, instance), replaced
by a write, never changed in place). Beside them it echoes what writes left in
`ForwardingState` (entry metadata, the form of replicas).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import grpc
from finsy.proto.p4.v1 import p4runtime_pb2

from inaemu.p4.info import P4RuntimeFailure, TableInfo, invalid
from inaemu.softswitch.p4runtime.codec import (
    encode_action,
    encode_match,
    parse_counter_index,
    parse_match,
)
from inaemu.softswitch.p4runtime.values import encode_bytes
from inaemu.softswitch.p4runtime.write import ForwardingState, GroupCache
from inaemu.softswitch.state import ActionCall

__all__ = [
    "READ_MAX_BUILDERS",
    "READ_MAX_BYTES",
    "READ_MAX_ENTITIES",
    "READ_RESPONSE_BUDGET",
    "READ_SLICE",
    "READ_TIME_LIMIT",
    "ReadLimits",
    "ReadPlan",
    "plan_read",
]

READ_RESPONSE_BUDGET = 1 << 20  # bytes per ReadResponse: far below any client's 4 MiB default
READ_MAX_ENTITIES = 1 << 16  # entities one Read may return (a multicast replica counts as one)
READ_MAX_BYTES = 32 << 20  # bytes of entities one Read may return, all responses together
READ_TIME_LIMIT = 10.0  # seconds from a Read's arrival to its last response
READ_SLICE = 1024  # entries, counter cells or replicas copied per hold of pipeline.lock
READ_MAX_BUILDERS = 2  # Reads building messages at the same time

Entity = p4runtime_pb2.Entity
Slices = Iterator[list[Entity]]
NARROW = (
    "narrow it: one table, counter or multicast group per Read, a counter by index, "
    "an entry by its match"
)


@dataclass(frozen=True)
class ReadLimits:
    """What one Read may cost (docs/p4runtime.md, "Limits")."""

    max_entities: int = READ_MAX_ENTITIES
    max_bytes: int = READ_MAX_BYTES
    time_limit: float = READ_TIME_LIMIT
    slice: int = READ_SLICE
    builders: int = READ_MAX_BUILDERS


@dataclass(eq=False)
class _Part:
    """One distinct requested entity: how many entities it returns (`measure`, called with the
    pipeline lock held) and the entities themselves, slice by slice (`slices`, which takes the
    lock itself)."""

    measure: Callable[[], int]
    slices: Callable[[], Slices]
    requested: list[int] = field(default_factory=list)  # positions in the request


def _exhausted(message: str) -> P4RuntimeFailure:
    return P4RuntimeFailure(grpc.StatusCode.RESOURCE_EXHAUSTED, message)


def plan_read(
    state: ForwardingState,
    entities: Sequence[Entity],
    limits: ReadLimits,
    builders: threading.Semaphore,
) -> ReadPlan:
    """The Read of `entities`, checked and counted; raises RESOURCE_EXHAUSTED past the entity
    limit. `builders` is the server's semaphore of `limits.builders` Reads building at once."""
    started = time.monotonic()
    if len(entities) > limits.max_entities:
        raise _exhausted(
            f"Read of {len(entities):,} entities; at most {limits.max_entities:,} per Read: "
            "split it"
        )
    results: list[P4RuntimeFailure | None] = [None] * len(entities)
    seen: dict[bytes, _Part | P4RuntimeFailure] = {}
    parts: list[_Part] = []
    for index, entity in enumerate(entities):
        key = entity.SerializeToString(deterministic=True)
        known = seen.get(key)
        if known is None:  # repeats of one entity are read once
            try:
                known = _plan_entity(state, entity, limits.slice)
                parts.append(known)
            except P4RuntimeFailure as failure:
                known = failure
            seen[key] = known
        if isinstance(known, P4RuntimeFailure):
            results[index] = known
        else:
            known.requested.append(index)
    total = 0
    for start in range(0, len(parts), limits.slice):
        with state.pipeline.lock:
            total += sum(part.measure() for part in parts[start : start + limits.slice])
    if total > limits.max_entities:
        raise _exhausted(
            f"Read would return {total:,} entities (a multicast replica counts as one); at "
            f"most {limits.max_entities:,} per Read: {NARROW}"
        )
    return ReadPlan(parts, results, limits, builders, started)


class ReadPlan:
    """A checked Read: `responses()` streams it, `results` says how each requested entity
    fared (None: fine), complete once `responses()` is exhausted."""

    def __init__(
        self,
        parts: list[_Part],
        results: list[P4RuntimeFailure | None],
        limits: ReadLimits,
        builders: threading.Semaphore,
        started: float,
    ) -> None:
        self.parts = parts
        self.results = results
        self.limits = limits
        self.started = started
        self._builders = builders

    @property
    def failed(self) -> bool:
        return any(r is not None for r in self.results)

    def responses(self, budget: int = READ_RESPONSE_BUDGET) -> Iterator[p4runtime_pb2.ReadResponse]:
        """The entities in ReadResponses of at most `budget` bytes each (an entity larger than
        the budget goes alone); RESOURCE_EXHAUSTED past the byte or time limit."""
        chunk: list[Entity] = []
        size = total = 0
        for entities in self._built():
            for entity in entities:
                need = entity.ByteSize() + 6  # the field's tag and length prefix: at most 6 bytes
                total += need
                if total > self.limits.max_bytes:
                    raise _exhausted(
                        f"Read returns more than {self.limits.max_bytes:,} bytes of entities; "
                        f"{NARROW}"
                    )
                if chunk and size + need > budget:
                    yield p4runtime_pb2.ReadResponse(entities=chunk)
                    self._check_time()
                    chunk, size = [], 0
                chunk.append(entity)
                size += need
        if chunk:
            yield p4runtime_pb2.ReadResponse(entities=chunk)

    def _check_time(self) -> float:
        """Seconds left; RESOURCE_EXHAUSTED if none."""
        left = self.started + self.limits.time_limit - time.monotonic()
        if left <= 0:
            raise _exhausted(
                f"Read took longer than {self.limits.time_limit:g} s (reading fewer entities "
                f"at once helps, and so does reading the responses as they come); {NARROW}"
            )
        return left

    def _built(self) -> Slices:
        """Slices of entities, each built while holding one of the builders' places."""
        returned = 0
        for part in self.parts:
            slices = part.slices()
            while True:
                if not self._builders.acquire(timeout=self._check_time()):
                    self._check_time()
                    continue
                try:
                    entities = next(slices, None)
                except P4RuntimeFailure as failure:
                    for index in part.requested:
                        self.results[index] = failure
                    entities = None
                finally:
                    self._builders.release()
                if entities is None:
                    break
                returned += sum(_weight(e) for e in entities)
                if returned > self.limits.max_entities:  # writes since the plan added some
                    raise _exhausted(
                        f"Read returns more than {self.limits.max_entities:,} entities (a "
                        f"multicast replica counts as one); {NARROW}"
                    )
                time.sleep(0)  # let the data plane's thread have the interpreter
                yield entities


def _weight(entity: Entity) -> int:
    if entity.WhichOneof("entity") == "packet_replication_engine_entry":
        return 1 + len(entity.packet_replication_engine_entry.multicast_group_entry.replicas)
    return 1


def _nothing() -> Slices:
    return iter(())


def _plan_entity(state: ForwardingState, entity: Entity, slice_: int) -> _Part:
    kind = entity.WhichOneof("entity")
    if kind == "table_entry":
        return _plan_table_entries(state, entity.table_entry, slice_)
    if kind == "counter_entry":
        return _plan_counters(state, entity.counter_entry, slice_)
    if kind == "direct_counter_entry":
        return _plan_direct_counters(state, entity.direct_counter_entry, slice_)
    if kind == "packet_replication_engine_entry":
        return _plan_pre(state, entity.packet_replication_engine_entry, slice_)
    if kind == "register_entry":
        raise P4RuntimeFailure(
            grpc.StatusCode.UNIMPLEMENTED, "RegisterEntry reads are not supported"
        )
    if kind is None:
        raise invalid("the entity to read is not set")
    ids = {
        "action_profile_member": entity.action_profile_member.action_profile_id,
        "action_profile_group": entity.action_profile_group.action_profile_id,
        "meter_entry": entity.meter_entry.meter_id,
        "direct_meter_entry": entity.direct_meter_entry.table_entry.table_id,
        "value_set_entry": entity.value_set_entry.value_set_id,
        "digest_entry": entity.digest_entry.digest_id,
        "extern_entry": entity.extern_entry.extern_type_id,
    }
    object_id = ids.get(kind, 0)
    if object_id:
        raise invalid(f"{kind}: unknown id {object_id} (ina.p4 has no such objects)")
    return _Part(lambda: 0, _nothing)  # a wildcard read of objects the program does not have


# ---------------------------------------------------------------------- table entries


# what a slice copies of a table entry: key, action, packets, bytes, (metadata, controller's)
_Row = tuple[tuple[int, ...], ActionCall, int, int, tuple[bytes, int] | None]


def _entry_rows(
    state: ForwardingState, table: TableInfo, slice_: int, key: tuple[int, ...] | None
) -> Iterator[list[_Row]]:
    """The entries of `table` (or the one with `key`), in key order, a slice per lock hold."""
    pipeline, meta = state.pipeline, state.entry_meta
    entries = pipeline.tables[table.name].entries
    if key is not None:
        keys = [key]
    else:
        with pipeline.lock:
            keys = list(entries)
        keys.sort()
    for start in range(0, len(keys), slice_):
        with pipeline.lock:
            rows = [
                (e.key, e.action, e.packets, e.bytes, meta.get((table.name, k)))
                for k in keys[start : start + slice_]
                if (e := entries.get(k)) is not None
            ]
        yield rows


def _plan_table_entries(state: ForwardingState, te: p4runtime_pb2.TableEntry, slice_: int) -> _Part:
    p4info, pipeline = state.p4info, state.pipeline
    if te.table_id == 0:
        if te.match or te.priority or te.HasField("action") or te.metadata:
            raise invalid("a read of all tables (table_id 0) takes no other filter")
        tables = list(p4info.tables.values())
    else:
        tables = [p4info.table(te.table_id)]
    if te.is_default_action:
        if te.match:
            raise invalid("a default-entry read takes no match fields")

        def defaults() -> Slices:
            with pipeline.lock:
                rows = [
                    (t, pipeline.tables[t.name].default, state.entry_meta.get((t.name, None)))
                    for t in tables
                ]
            out = []
            for table, call, meta in rows:
                entry = p4runtime_pb2.TableEntry(
                    table_id=table.id,
                    is_default_action=True,
                    action=p4runtime_pb2.TableAction(action=encode_action(p4info, table, call)),
                )
                if meta is not None:
                    entry.metadata, entry.controller_metadata = meta
                out.append(Entity(table_entry=entry))
            yield out

        return _Part(lambda: len(tables), defaults)
    key = parse_match(tables[0], te.match) if te.match else None
    if te.priority:
        return _Part(lambda: 0, _nothing)  # no entry of these tables has a priority
    action_filter = te.action.action.action_id if te.HasField("action") else 0
    with_counters = te.HasField("counter_data")

    def measure() -> int:
        if key is not None:
            return 1
        return sum(len(pipeline.tables[t.name].entries) for t in tables)

    def entries() -> Slices:
        for table in tables:
            counted = with_counters and bool(table.direct_counter_id)
            for rows in _entry_rows(state, table, slice_, key):
                out = []
                for row_key, call, packets, nbytes, meta in rows:
                    entry = p4runtime_pb2.TableEntry(
                        table_id=table.id,
                        match=encode_match(table, row_key),
                        action=p4runtime_pb2.TableAction(action=encode_action(p4info, table, call)),
                    )
                    if action_filter and entry.action.action.action_id != action_filter:
                        continue
                    if meta is not None:
                        entry.metadata, entry.controller_metadata = meta
                    if te.metadata and entry.metadata != te.metadata:
                        continue
                    if te.controller_metadata and (
                        entry.controller_metadata != te.controller_metadata
                    ):
                        continue
                    if counted:
                        entry.counter_data.packet_count = packets
                        entry.counter_data.byte_count = nbytes
                    out.append(Entity(table_entry=entry))
                yield out

    return _Part(measure, entries)


# ---------------------------------------------------------------------- counters


def _plan_counters(state: ForwardingState, ce: p4runtime_pb2.CounterEntry, slice_: int) -> _Part:
    if ce.counter_id == 0:
        if ce.HasField("index"):
            raise invalid("CounterEntry: an index needs a counter_id")
        counters = list(state.p4info.counters.values())
    else:
        counters = [state.p4info.counter(ce.counter_id)]
    spans = []  # (counter, first index, end)
    for counter in counters:
        index = parse_counter_index(counter, ce)
        spans.append((counter, 0, counter.size) if index is None else (counter, index, index + 1))
    pipeline = state.pipeline

    def cells() -> Slices:
        for counter, first, end in spans:
            cstate = pipeline.counters[counter.name]
            for start in range(first, end, slice_):
                stop = min(end, start + slice_)
                with pipeline.lock:
                    packets = list(cstate.packets[start:stop])
                    nbytes = list(cstate.bytes[start:stop])
                yield [
                    Entity(
                        counter_entry=p4runtime_pb2.CounterEntry(
                            counter_id=counter.id,
                            index=p4runtime_pb2.Index(index=i),
                            data=p4runtime_pb2.CounterData(packet_count=int(p), byte_count=int(b)),
                        )
                    )
                    for i, p, b in zip(range(start, stop), packets, nbytes, strict=True)
                ]

    count = sum(end - first for _, first, end in spans)
    return _Part(lambda: count, cells)


def _plan_direct_counters(
    state: ForwardingState, dce: p4runtime_pb2.DirectCounterEntry, slice_: int
) -> _Part:
    te = dce.table_entry
    if te.table_id == 0:
        if te.match:
            raise invalid("DirectCounterEntry: match fields need a table_id")
        tables = [t for t in state.p4info.tables.values() if t.direct_counter_id]
    else:
        tables = [state.p4info.direct_table(te.table_id, "DirectCounterEntry")]
    key = parse_match(tables[0], te.match) if te.match else None
    pipeline = state.pipeline

    def measure() -> int:
        if key is not None:
            return 1
        return sum(len(pipeline.tables[t.name].entries) for t in tables)

    def cells() -> Slices:
        for table in tables:
            for rows in _entry_rows(state, table, slice_, key):
                if key is not None and not rows:
                    raise P4RuntimeFailure(
                        grpc.StatusCode.NOT_FOUND, f"{table.name}: no entry with key {key}"
                    )
                yield [
                    Entity(
                        direct_counter_entry=p4runtime_pb2.DirectCounterEntry(
                            table_entry=p4runtime_pb2.TableEntry(
                                table_id=table.id, match=encode_match(table, row_key)
                            ),
                            data=p4runtime_pb2.CounterData(packet_count=packets, byte_count=nbytes),
                        )
                    )
                    for row_key, _, packets, nbytes, _ in rows
                ]

    return _Part(measure, cells)


# ---------------------------------------------------------------------- multicast groups


def _plan_pre(
    state: ForwardingState, pre: p4runtime_pb2.PacketReplicationEngineEntry, slice_: int
) -> _Part:
    kind = pre.WhichOneof("type")
    if kind == "clone_session_entry":
        return _Part(lambda: 0, _nothing)  # no clone sessions exist (writing them is refused)
    if kind is None:
        raise invalid("PacketReplicationEngineEntry: set multicast_group_entry to read")
    mgid = pre.multicast_group_entry.multicast_group_id
    pipeline = state.pipeline
    groups = pipeline.multicast.groups

    def measure() -> int:
        if mgid:
            return 1 + len(groups[mgid]) if mgid in groups else 0
        return sum(1 + len(replicas) for replicas in groups.values())

    def entries() -> Slices:
        if mgid:
            ids = [mgid]
        else:
            with pipeline.lock:
                ids = list(groups)
            ids.sort()
        position = 0
        while position < len(ids):
            taken: list[tuple[int, list[tuple[int, int]], GroupCache | None]] = []
            replicas_taken = 0
            with pipeline.lock:  # whole groups, up to about a slice of replicas
                while position < len(ids) and replicas_taken < slice_:
                    gid = ids[position]
                    position += 1
                    replicas = groups.get(gid)
                    if replicas is not None:
                        taken.append((gid, replicas, state.groups.get(gid)))
                        replicas_taken += 1 + len(replicas)
            yield [_group_entity(gid, replicas, cache) for gid, replicas, cache in taken]

    return _Part(measure, entries)


def _group_entity(gid: int, replicas: list[tuple[int, int]], cache: GroupCache | None) -> Entity:
    if cache is None or cache.replicas != replicas:
        cache = GroupCache(list(replicas), [False] * len(replicas), b"")
    entry = p4runtime_pb2.MulticastGroupEntry(multicast_group_id=gid, metadata=cache.metadata)
    for (port, instance), as_bytes in zip(replicas, cache.bytes_port, strict=True):
        if as_bytes:
            entry.replicas.add(port=encode_bytes(port), instance=instance)
        else:
            entry.replicas.add(egress_port=port, instance=instance)
    return Entity(
        packet_replication_engine_entry=p4runtime_pb2.PacketReplicationEngineEntry(
            multicast_group_entry=entry
        )
    )
