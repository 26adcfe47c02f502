"""The softswitch P4Runtime server over real gRPC (127.0.0.1, port 0).

Controllers are finsy switches (the project's client library) or, where finsy cannot express a
case (bad ids, host bits, raw replica fields, arbitration corner cases), raw gRPC stubs.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import finsy as fy
import grpc
import numpy as np
import numpy.typing as npt
import pytest
from finsy.p4entity import P4Entity, P4Replica
from finsy.proto.google.rpc import status_pb2
from finsy.proto.p4.config.v1 import p4info_pb2
from finsy.proto.p4.v1 import p4runtime_pb2 as p4r
from finsy.proto.p4.v1 import p4runtime_pb2_grpc

from inaemu.common.wire import (
    INA_UDP_PORT,
    Endpoint,
    Flag,
    FrameTemplate,
    K,
    Opcode,
    pack_frames,
    pack_payloads,
    parse_frames,
)
from inaemu.p4.constants import (
    INA_DROP_REASONS,
    INA_EVENTS,
    INA_PORTS,
    INA_SLOTS,
    P4INFO_PATH,
    DropReason,
    Event,
)
from inaemu.p4.info import load_p4info
from inaemu.softswitch.p4runtime.arbitration import Arbitration
from inaemu.softswitch.p4runtime.server import P4RuntimeServer, decode_bytes, encode_bytes
from inaemu.softswitch.pipeline import Pipeline

REPO = Path(__file__).resolve().parent.parent
INFO = load_p4info()
CODE = grpc.StatusCode
T = TypeVar("T")
E = TypeVar("E", bound=P4Entity)

# ---------------------------------------------------------------------- helpers


def run(coro: Awaitable[T], timeout: float = 60) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def u128(value: int) -> p4r.Uint128:
    return p4r.Uint128(high=value >> 64, low=value & (2**64 - 1))


def table_id(name: str) -> int:
    return INFO.table(name).id


def action_id(name: str) -> int:
    return INFO.action(name).id


def field_ids(table: str) -> dict[str, int]:
    msg = next(t for t in INFO.message.tables if t.preamble.id == table_id(table))
    return {m.name: m.id for m in msg.match_fields}


def raw_entry(
    table: str,
    match: dict[str, Any] | None = None,
    action: str | None = None,
    params: dict[str, Any] | None = None,
    **fields: Any,
) -> p4r.TableEntry:
    """A raw TableEntry from names.

    match: field name -> int | bytes (exact) or (value, prefix_len) (LPM);
    params: param name -> int | bytes.
    """
    te = p4r.TableEntry(table_id=table_id(table), **fields)
    ids = field_ids(table)
    for name, value in (match or {}).items():
        fm = te.match.add(field_id=ids[name])
        if isinstance(value, tuple):
            fm.lpm.value = value[0] if isinstance(value[0], bytes) else encode_bytes(value[0])
            fm.lpm.prefix_len = value[1]
        else:
            fm.exact.value = value if isinstance(value, bytes) else encode_bytes(value)
    if action is not None:
        info = INFO.action(action)
        te.action.action.action_id = info.id
        pids = {p.name: p.id for p in info.params}
        for name, value in (params or {}).items():
            te.action.action.params.add(
                param_id=pids[name],
                value=value if isinstance(value, bytes) else encode_bytes(value),
            )
    return te


def agg_node(**overrides: int) -> dict[str, int]:
    params = dict(base=0, pool_size=4, fanin=2, child_mgid=1, is_root=1, parent_port=0, epoch=1)
    params.update(overrides)
    return params


def insert(entity: p4r.Entity) -> p4r.Update:
    return p4r.Update(type=p4r.Update.INSERT, entity=entity)


def modify(entity: p4r.Entity) -> p4r.Update:
    return p4r.Update(type=p4r.Update.MODIFY, entity=entity)


def delete(entity: p4r.Entity) -> p4r.Update:
    return p4r.Update(type=p4r.Update.DELETE, entity=entity)


def te_entity(te: p4r.TableEntry) -> p4r.Entity:
    return p4r.Entity(table_entry=te)


def group_entity(mgid: int, replicas: list[p4r.Replica], metadata: bytes = b"") -> p4r.Entity:
    return p4r.Entity(
        packet_replication_engine_entry=p4r.PacketReplicationEngineEntry(
            multicast_group_entry=p4r.MulticastGroupEntry(
                multicast_group_id=mgid, replicas=replicas, metadata=metadata
            )
        )
    )


def batch_errors(err: grpc.RpcError) -> list[tuple[Any, str]]:
    """The p4.v1.Error list of a batch failure, as (grpc code, message) per update."""
    assert err.code() == CODE.UNKNOWN, (err.code(), err.details())
    blob = dict(err.trailing_metadata())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(blob)
    out = []
    for detail in status.details:
        error = p4r.Error()
        assert detail.Unpack(error)
        code = next(c for c in CODE if c.value[0] == error.canonical_code)
        out.append((code, error.message))
    return out


class Controller:
    """A raw P4Runtime client: a StreamChannel plus the unary stubs."""

    def __init__(self, address: str, device_id: int = 1) -> None:
        # A failed batch carries one p4.v1.Error per update in its trailer: a few hundred
        # updates pass gRPC's default 8 KiB metadata limit (finsy raises it to 64 KiB too).
        self.channel = grpc.insecure_channel(address, options=[("grpc.max_metadata_size", 1 << 16)])
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self.device_id = device_id
        self.election_id: int | None = None
        self._out: queue.Queue[p4r.StreamMessageRequest | None] = queue.Queue()
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.call = self.stub.StreamChannel(iter(self._out.get, None))
        threading.Thread(target=self._receive, daemon=True).start()

    def _receive(self) -> None:
        try:
            for message in self.call:
                self.inbox.put(message)
        except grpc.RpcError as err:
            self.inbox.put(err)

    def arbitrate(self, election_id: int | None, device_id: int | None = None) -> Any:
        update = p4r.MasterArbitrationUpdate(
            device_id=self.device_id if device_id is None else device_id
        )
        if election_id is not None:
            update.election_id.CopyFrom(u128(election_id))
        self.election_id = election_id
        self._out.put(p4r.StreamMessageRequest(arbitration=update))
        return self.next()

    def send(self, request: p4r.StreamMessageRequest) -> None:
        self._out.put(request)

    def next(self, timeout: float = 5) -> Any:
        return self.inbox.get(timeout=timeout)

    def no_message(self, wait: float = 0.2) -> bool:
        try:
            self.inbox.get(timeout=wait)
        except queue.Empty:
            return True
        return False

    def write(
        self,
        *updates: p4r.Update,
        atomicity: p4r.WriteRequest.Atomicity.ValueType = p4r.WriteRequest.CONTINUE_ON_ERROR,
    ) -> None:
        request = p4r.WriteRequest(device_id=self.device_id, updates=updates, atomicity=atomicity)
        if self.election_id is not None:
            request.election_id.CopyFrom(u128(self.election_id))
        self.stub.Write(request, timeout=10)

    def read(self, *entities: p4r.Entity) -> list[p4r.Entity]:
        request = p4r.ReadRequest(device_id=self.device_id, entities=entities)
        return [e for response in self.stub.Read(request, timeout=10) for e in response.entities]

    def set_pipeline(
        self,
        p4info: p4info_pb2.P4Info | None = None,
        action: p4r.SetForwardingPipelineConfigRequest.Action.ValueType = (
            p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        ),
        device_config: bytes = b"softswitch",
        cookie: int | None = None,
    ) -> None:
        request = p4r.SetForwardingPipelineConfigRequest(device_id=self.device_id, action=action)
        if self.election_id is not None:
            request.election_id.CopyFrom(u128(self.election_id))
        if p4info is not None:
            request.config.p4info.CopyFrom(p4info)
            request.config.p4_device_config = device_config
            if cookie is not None:
                request.config.cookie.cookie = cookie
        self.stub.SetForwardingPipelineConfig(request, timeout=10)

    def close(self) -> None:
        self.call.cancel()
        self.channel.close()


def status(message: Any) -> Any:
    assert isinstance(message, p4r.StreamMessageResponse), message
    code = message.arbitration.status.code
    return next(c for c in CODE if c.value[0] == code)


def rpc_error(fn: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        fn()
    return info.value


def snapshot(p: Pipeline) -> object:
    """Everything a control-plane error must leave untouched."""
    with p.lock:
        return (
            {n: (copy.deepcopy(t.entries), t.default) for n, t in p.tables.items()},
            copy.deepcopy(p.multicast.groups),
            {n: (list(c.packets), list(c.bytes)) for n, c in p.counters.items()},
        )


# ---------------------------------------------------------------------- fixtures


@pytest.fixture
def pipeline() -> Pipeline:
    return Pipeline()


@pytest.fixture
def server(pipeline: Pipeline) -> Iterator[P4RuntimeServer]:
    with P4RuntimeServer(pipeline, address="127.0.0.1:0") as srv:
        yield srv


@pytest.fixture
def primary(server: P4RuntimeServer) -> Iterator[Controller]:
    """A primary controller that has pushed the committed P4Info."""
    ctl = Controller(server.address)
    assert status(ctl.arbitrate(10)) == CODE.OK
    ctl.set_pipeline(INFO.message)
    yield ctl
    ctl.close()


def finsy_switch(
    server: P4RuntimeServer, election_id: int = 10, *, push_pipeline: bool = True
) -> fy.Switch:
    options = fy.SwitchOptions(
        p4info=P4INFO_PATH,
        p4blob=b"softswitch" if push_pipeline else None,
        device_id=server.device_id,
        initial_election_id=election_id,
    )
    return fy.Switch(f"sw{election_id}", server.address, options)


def finsy_read(sw: fy.Switch, entity: E) -> AsyncIterator[E]:
    """`sw.read(entity)`: the entities the switch returns, as finsy decodes them."""
    # finsy declares the Switch.read overloads `async def ... -> AsyncGenerator`, which mypy
    # takes for a coroutine returning a generator; at run time it is the async generator.
    return sw.read(entity)  # type: ignore[return-value]


def match_of(entry: fy.P4TableEntry | None) -> fy.P4TableMatch:
    """The match of a table entry read back (finsy decodes it, aliases as keys)."""
    assert entry is not None and entry.match is not None, entry
    return entry.match


# ---------------------------------------------------------------------- server lifecycle


def test_port_zero_picks_a_port_and_capabilities(server: P4RuntimeServer) -> None:
    assert server.port > 0
    assert server.address == f"127.0.0.1:{server.port}"
    ctl = Controller(server.address)
    reply = ctl.stub.Capabilities(p4r.CapabilitiesRequest(), timeout=5)
    assert reply.p4runtime_api_version == "1.4.0"
    ctl.close()


def test_port_in_use_error_names_the_address(server: P4RuntimeServer) -> None:
    address = server.address
    with pytest.raises(OSError, match="in use") as info:
        P4RuntimeServer(Pipeline(), address=address).start()
    assert address in str(info.value)
    # Also against a non-gRPC listener.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = f"127.0.0.1:{sock.getsockname()[1]}"
        with pytest.raises(OSError, match="in use") as info:
            P4RuntimeServer(Pipeline(), address=taken).start()
        assert taken in str(info.value)


# ---------------------------------------------------------------------- arbitration


def test_arbitration_primary_backup_and_failover(server: P4RuntimeServer) -> None:
    a, b, c = Controller(server.address), Controller(server.address), Controller(server.address)
    reply = a.arbitrate(10)
    assert status(reply) == CODE.OK and reply.arbitration.election_id.low == 10
    a.set_pipeline(INFO.message)

    reply = b.arbitrate(5)
    assert status(reply) == CODE.ALREADY_EXISTS  # a backup, told who the primary is
    assert reply.arbitration.election_id.low == 10
    assert a.no_message()  # a backup joining does not disturb the primary

    # Only the primary writes; a backup (or a stale election id) is refused.
    group = group_entity(7, [p4r.Replica(egress_port=1)])
    err = rpc_error(lambda: b.write(insert(group)))
    assert err.code() == CODE.PERMISSION_DENIED and "primary" in err.details()
    b.election_id = 10
    b.write(insert(group))  # the spec identifies a writer by (device, role, election id)
    b.election_id = 5
    assert server.pipeline.multicast.groups == {7: [(1, 0)]}

    # Same election id as a live controller: the stream ends with INVALID_ARGUMENT.
    dup = Controller(server.address)
    err = dup.arbitrate(5)
    assert isinstance(err, grpc.RpcError) and err.code() == CODE.INVALID_ARGUMENT
    assert "already used" in err.details()
    # Unknown device: NOT_FOUND.
    other = Controller(server.address)
    err = other.arbitrate(99, device_id=7)
    assert isinstance(err, grpc.RpcError) and err.code() == CODE.NOT_FOUND
    assert "device_id 7" in err.details()
    # A non-default role is refused.
    roled = Controller(server.address)
    roled.send(
        p4r.StreamMessageRequest(
            arbitration=p4r.MasterArbitrationUpdate(
                device_id=1, election_id=u128(3), role=p4r.Role(name="ops")
            )
        )
    )
    err = roled.next()
    assert isinstance(err, grpc.RpcError) and err.code() == CODE.UNIMPLEMENTED

    # A higher election id takes over; everyone hears about it.
    reply = c.arbitrate(20)
    assert status(reply) == CODE.OK
    for ctl in (a, b):
        note = ctl.next()
        assert status(note) == CODE.ALREADY_EXISTS and note.arbitration.election_id.low == 20
    assert rpc_error(lambda: a.write(delete(group))).code() == CODE.PERMISSION_DENIED

    # The primary leaves: the next highest (a, 10) is promoted and told; b hears too.
    c.close()
    note = a.next()
    assert status(note) == CODE.OK and note.arbitration.election_id.low == 10
    note = b.next()
    assert status(note) == CODE.ALREADY_EXISTS and note.arbitration.election_id.low == 10
    a.write(delete(group))
    assert server.pipeline.multicast.groups == {}

    # The primary downgrades itself below b: b becomes primary.
    reply = a.arbitrate(1)
    assert status(reply) == CODE.ALREADY_EXISTS
    assert status(b.next()) == CODE.OK

    # Backups may not send packets; a stream cannot switch devices.
    a.send(p4r.StreamMessageRequest(packet=p4r.PacketOut(payload=b"x")))
    error = a.next().error
    assert error.canonical_code == CODE.PERMISSION_DENIED.value[0]
    err = a.arbitrate(1, device_id=2)
    assert isinstance(err, grpc.RpcError) and err.code() == CODE.FAILED_PRECONDITION
    assert b.no_message()  # a backup leaving changes nothing for the others
    for ctl in (a, b, dup, other, roled):
        ctl.close()


def test_strict_arbitration_has_no_primary_until_a_controller_claims_it(
    pipeline: Pipeline,
) -> None:
    with P4RuntimeServer(pipeline, address="127.0.0.1:0", arbitration="strict") as server:
        a, b = Controller(server.address), Controller(server.address)
        assert status(a.arbitrate(10)) == CODE.OK
        assert status(b.arbitrate(5)) == CODE.ALREADY_EXISTS
        a.close()
        note = b.next()
        assert status(note) == CODE.NOT_FOUND and note.arbitration.election_id.low == 10
        a2 = Controller(server.address)
        assert status(a2.arbitrate(7)) == CODE.NOT_FOUND  # below the highest seen (10)
        reply = b.arbitrate(10)  # claim it with an id >= the highest seen
        assert status(reply) == CODE.OK
        assert status(a2.next()) == CODE.ALREADY_EXISTS
        b.set_pipeline(INFO.message)  # b is primary: allowed
        a2.close()
        b.close()


@pytest.mark.parametrize("mode", ["promote", "strict"])
def test_finsy_backup_takes_over_when_the_primary_leaves(mode: Arbitration) -> None:
    pipeline = Pipeline()
    server = P4RuntimeServer(pipeline, address="127.0.0.1:0", arbitration=mode).start()

    async def scenario() -> None:
        first: fy.Switch | None
        first = await finsy_switch(server, 10).__aenter__()
        try:
            assert first.is_primary
            async with finsy_switch(server, 5, push_pipeline=False) as backup:
                assert not backup.is_primary and backup.primary_id == 10
                became_primary = backup.ee.event_future(fy.SwitchEvent.BECOME_PRIMARY)
                await first.__aexit__(None, None, None)  # the primary goes away
                first = None
                await asyncio.wait_for(became_primary, 10)
                assert backup.is_primary
                await backup.insert([fy.P4MulticastGroupEntry(3, replicas=[1, 2])])
        finally:
            if first is not None:
                await first.__aexit__(None, None, None)

    try:
        run(scenario())
    finally:
        server.stop()
    assert pipeline.multicast.groups[3] == [(1, 0), (2, 0)]


def test_observer_without_election_id_and_stream_limit(pipeline: Pipeline) -> None:
    with P4RuntimeServer(pipeline, address="127.0.0.1:0", max_streams=2) as server:
        observer = Controller(server.address)
        reply = observer.arbitrate(None)  # no election id: never primary
        assert status(reply) == CODE.NOT_FOUND and not reply.arbitration.HasField("election_id")
        a = Controller(server.address)
        assert status(a.arbitrate(4)) == CODE.OK
        note = observer.next()  # told about the new primary
        assert status(note) == CODE.ALREADY_EXISTS and note.arbitration.election_id.low == 4
        third = Controller(server.address)  # both slots taken: an observer gets none
        err = third.arbitrate(None)
        assert isinstance(err, grpc.RpcError) and err.code() == CODE.RESOURCE_EXHAUSTED
        fourth = Controller(server.address)  # a controller takes the observer's slot
        assert status(fourth.arbitrate(3)) == CODE.ALREADY_EXISTS
        err = observer.next()
        assert isinstance(err, grpc.RpcError) and err.code() == CODE.RESOURCE_EXHAUSTED
        for ctl in (observer, a, third, fourth):
            ctl.close()


def test_writes_while_packets_flow(primary: Controller, server: P4RuntimeServer) -> None:
    """Packets and control-plane writes from different threads: each sees whole updates."""
    p = server.pipeline
    primary.write(insert(group_entity(1, [p4r.Replica(egress_port=1), p4r.Replica(egress_port=2)])))
    for port in (1, 2):
        child = {**JOB1, "standard_metadata.ingress_port": port, "udp_port": INA_UDP_PORT}
        primary.write(
            insert(te_entity(raw_entry("ina_child", child, "set_child", {"index": port - 1})))
        )
    job = te_entity(raw_entry("ina_job", JOB1, "agg_node", agg_node()))
    stop = threading.Event()
    errors: list[BaseException] = []
    values = np.ones(K, dtype=np.int32)

    def traffic() -> None:
        seq = 0
        try:
            while not stop.is_set():
                for port in (1, 2):
                    p.process(port, worker_frame(port, values, seq))
                seq += 1
        except BaseException as err:  # reported below
            errors.append(err)

    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        for _ in range(20):
            primary.write(insert(job))
            primary.write(delete(job))
    finally:
        stop.set()
        thread.join(10)
    assert not errors
    assert p.port_rx.packets[1] > 0 and p.ina_drops.packets[DropReason.UNKNOWN_JOB] > 0


def test_packet_out_is_answered_with_a_stream_error(primary: Controller) -> None:
    primary.send(p4r.StreamMessageRequest(packet=p4r.PacketOut(payload=b"\x00" * 60)))
    message = primary.next()
    assert message.WhichOneof("update") == "error"
    assert message.error.canonical_code == CODE.UNIMPLEMENTED.value[0]
    assert message.error.HasField("packet_out")
    assert "no controller" in message.error.message


# ---------------------------------------------------------------------- pipeline config


def test_no_pipeline_config_yet(server: P4RuntimeServer) -> None:
    ctl = Controller(server.address)
    assert status(ctl.arbitrate(1)) == CODE.OK
    reply = ctl.stub.GetForwardingPipelineConfig(
        p4r.GetForwardingPipelineConfigRequest(device_id=1), timeout=5
    )
    assert not reply.HasField("config")
    group = group_entity(1, [p4r.Replica(egress_port=1)])
    for attempt in (lambda: ctl.write(insert(group)), lambda: ctl.read(group)):
        err = rpc_error(attempt)
        assert err.code() == CODE.FAILED_PRECONDITION
        assert "No forwarding pipeline config" in err.details()
    ctl.close()


def test_set_and_get_pipeline_config(primary: Controller, server: P4RuntimeServer) -> None:
    Get = p4r.GetForwardingPipelineConfigRequest
    Set = p4r.SetForwardingPipelineConfigRequest
    primary.set_pipeline(INFO.message, device_config=b"\x01json", cookie=42)

    def get(
        kind: p4r.GetForwardingPipelineConfigRequest.ResponseType.ValueType,
    ) -> p4r.ForwardingPipelineConfig:
        request = Get(device_id=1, response_type=kind)
        reply: p4r.GetForwardingPipelineConfigResponse = primary.stub.GetForwardingPipelineConfig(
            request, timeout=5
        )
        return reply.config

    full = get(Get.ALL)
    assert full.p4info == INFO.message and full.p4_device_config == b"\x01json"
    assert full.cookie.cookie == 42
    only = get(Get.COOKIE_ONLY)
    assert only.cookie.cookie == 42 and not only.HasField("p4info") and not only.p4_device_config
    info = get(Get.P4INFO_AND_COOKIE)
    assert info.HasField("p4info") and not info.p4_device_config
    dev = get(Get.DEVICE_CONFIG_AND_COOKIE)
    assert dev.p4_device_config == b"\x01json" and not dev.HasField("p4info")
    err = rpc_error(lambda: primary.stub.GetForwardingPipelineConfig(Get(device_id=3), timeout=5))
    assert err.code() == CODE.NOT_FOUND

    # An incompatible P4Info: refused, naming the mismatch; nothing changes.
    bad = p4info_pb2.P4Info()
    bad.CopyFrom(INFO.message)
    next(t for t in bad.tables if t.preamble.alias == "ina_job").size = 128
    next(a for a in bad.actions if a.preamble.alias == "set_child").params[0].bitwidth = 16
    for action in (Set.VERIFY, Set.VERIFY_AND_COMMIT, Set.RECONCILE_AND_COMMIT):
        err = rpc_error(functools.partial(primary.set_pipeline, bad, action=action))
        assert err.code() == CODE.INVALID_ARGUMENT
        assert "InaIngress.agg.ina_job" in err.details()
        assert "InaIngress.agg.set_child" in err.details()
    assert get(Get.COOKIE_ONLY).cookie.cookie == 42
    missing = p4info_pb2.P4Info()
    missing.CopyFrom(INFO.message)
    del missing.counters[0]
    err = rpc_error(lambda: primary.set_pipeline(missing))
    assert "missing from the given P4Info: counter" in err.details()

    # State is kept by VERIFY and RECONCILE_AND_COMMIT, cleared by VERIFY_AND_COMMIT.
    primary.write(insert(group_entity(1, [p4r.Replica(egress_port=1)])))
    primary.set_pipeline(INFO.message, action=Set.VERIFY)
    primary.set_pipeline(INFO.message, action=Set.RECONCILE_AND_COMMIT, cookie=43)
    assert server.pipeline.multicast.groups and get(Get.COOKIE_ONLY).cookie.cookie == 43
    primary.set_pipeline(INFO.message, action=Set.VERIFY_AND_COMMIT)
    assert not server.pipeline.multicast.groups
    assert not get(Get.COOKIE_ONLY).HasField("cookie")

    # COMMIT needs a saved config and takes none itself.
    assert rpc_error(lambda: primary.set_pipeline(action=Set.COMMIT)).code() == CODE.NOT_FOUND
    primary.set_pipeline(INFO.message, action=Set.VERIFY_AND_SAVE, cookie=7)
    err = rpc_error(lambda: primary.set_pipeline(INFO.message, action=Set.COMMIT))
    assert err.code() == CODE.INVALID_ARGUMENT
    primary.set_pipeline(action=Set.COMMIT)
    assert get(Get.COOKIE_ONLY).cookie.cookie == 7
    err = rpc_error(lambda: primary.set_pipeline(action=Set.VERIFY))
    assert err.code() == CODE.INVALID_ARGUMENT

    # Only the primary may set it.
    backup = Controller(server.address)
    assert status(backup.arbitrate(3)) == CODE.ALREADY_EXISTS
    err = rpc_error(lambda: backup.set_pipeline(INFO.message))
    assert err.code() == CODE.PERMISSION_DENIED
    backup.close()


def test_preconfigured_server_serves_without_set_pipeline(pipeline: Pipeline) -> None:
    with P4RuntimeServer(pipeline, address="127.0.0.1:0", preconfigured=True) as server:
        ctl = Controller(server.address)
        assert status(ctl.arbitrate(1)) == CODE.OK
        ctl.write(insert(group_entity(2, [p4r.Replica(egress_port=3)])))
        assert pipeline.multicast.groups == {2: [(3, 0)]}
        ctl.close()


# ---------------------------------------------------------------------- tables (finsy)


def test_finsy_table_entries_insert_modify_delete_read(server: P4RuntimeServer) -> None:
    p = server.pipeline

    def job(job_id: int, **params: int) -> fy.P4TableEntry:
        return fy.P4TableEntry(
            "ina_job",
            match=fy.P4TableMatch({"hdr.ina.job_id": job_id, "hdr.ina.tree_id": 0}),
            action=fy.P4TableAction("agg_node", **agg_node(**params)),
        )

    async def scenario() -> None:
        async with finsy_switch(server) as sw:
            await sw.insert([job(1), job(2, base=4)])
            await sw.insert(
                [
                    fy.P4TableEntry(
                        "ipv4_lpm",
                        match=fy.P4TableMatch({"hdr.ipv4.dstAddr": "10.1.0.0/16"}),
                        action=fy.P4TableAction(
                            "ipv4_forward", dstAddr="00:00:00:00:00:02", port=2
                        ),
                    )
                ]
            )
            assert p.ina_job.entries[(2, 0)].action.params == (4, 4, 2, 1, 1, 0, 1)
            assert p.ipv4_lpm.entries[(0x0A010000, 16)].action.params == (2, 2)

            await sw.modify([job(2, base=8, fanin=3)])
            assert p.ina_job.entries[(2, 0)].action.params == (8, 4, 3, 1, 1, 0, 1)

            # One entry, one table (wildcard), all tables.
            [one] = [e async for e in finsy_read(sw, job(2))]
            assert one.action == fy.P4TableAction("agg_node", **agg_node(base=8, fanin=3))
            jobs = [e async for e in finsy_read(sw, fy.P4TableEntry("ina_job"))]
            assert sorted(match_of(e)["job_id"] for e in jobs) == [1, 2]  # finsy decodes aliases
            everything = [e async for e in finsy_read(sw, fy.P4TableEntry())]
            assert {e.table_id for e in everything} == {"ina_job", "ipv4_lpm"}
            [route] = [e async for e in finsy_read(sw, fy.P4TableEntry("ipv4_lpm"))]
            assert match_of(route)["dstAddr"] == (0x0A010000, 16)

            await sw.delete([job(1)])
            assert list(p.ina_job.entries) == [(2, 0)]
            with pytest.raises(fy.P4ClientError) as info:
                await sw.delete([job(1)])
            assert info.value.details[0].canonical_code == fy.GRPCStatusCode.NOT_FOUND

            # The default action of a non-const table can be set and reset.
            default = fy.P4TableEntry(
                "ipv4_lpm",
                is_default_action=True,
                action=fy.P4TableAction("ipv4_forward", dstAddr="00:00:00:00:00:09", port=9),
            )
            await sw.modify([default])
            assert p.ipv4_lpm.default.name == "ipv4_forward"
            assert p.ipv4_lpm.default.params == (9, 9)
            [read_back] = [
                e async for e in finsy_read(sw, fy.P4TableEntry("ipv4_lpm", is_default_action=True))
            ]
            assert read_back.is_default_action
            assert read_back.action == fy.P4TableAction("ipv4_forward", dstAddr=9, port=9)
            await sw.modify([fy.P4TableEntry("ipv4_lpm", is_default_action=True)])  # reset
            assert p.ipv4_lpm.default.name == "drop"

            # ... but not of a table whose default is const.
            with pytest.raises(fy.P4ClientError) as info:
                await sw.modify(
                    [
                        fy.P4TableEntry(
                            "ina_job", is_default_action=True, action=fy.P4TableAction("miss")
                        )
                    ]
                )
            [error] = info.value.details.values()
            assert error.canonical_code == fy.GRPCStatusCode.PERMISSION_DENIED
            assert "InaIngress.agg.ina_job" in error.message and "const" in error.message

            # finsy's delete_all: wildcard reads and deletes, default entries reset.
            await sw.delete_all()
            assert all(not t.entries for t in p.tables.values())

    run(scenario())


def test_finsy_multicast_groups(server: P4RuntimeServer) -> None:
    groups = server.pipeline.multicast.groups

    async def scenario() -> None:
        async with finsy_switch(server) as sw:
            await sw.insert(
                [
                    fy.P4MulticastGroupEntry(1, replicas=[1, 2, (3, 7)]),
                    fy.P4MulticastGroupEntry(2, replicas=[4], metadata=b"cookie"),
                ]
            )
            assert groups == {1: [(1, 0), (2, 0), (3, 7)], 2: [(4, 0)]}
            read = {
                e.multicast_group_id: e async for e in finsy_read(sw, fy.P4MulticastGroupEntry())
            }
            assert read[1].replicas == (1, 2, P4Replica(3, instance=7))
            assert read[2].metadata == b"cookie"
            [one] = [e async for e in finsy_read(sw, fy.P4MulticastGroupEntry(2))]
            assert one.replicas == (4,)
            await sw.modify([fy.P4MulticastGroupEntry(1, replicas=[5])])
            assert groups[1] == [(5, 0)]
            await sw.delete([fy.P4MulticastGroupEntry(1)])
            assert list(groups) == [2]
            with pytest.raises(fy.P4ClientError) as info:
                await sw.insert([fy.P4MulticastGroupEntry(2, replicas=[1])])
            assert info.value.details[0].canonical_code == fy.GRPCStatusCode.ALREADY_EXISTS

    run(scenario())


def test_multicast_replica_port_field_forms(primary: Controller, server: P4RuntimeServer) -> None:
    """Both the deprecated uint32 egress_port and the 1.4 `port` bytes are accepted and echoed."""
    primary.write(
        insert(group_entity(1, [p4r.Replica(egress_port=1), p4r.Replica(port=b"\x00\x02")])),
        insert(group_entity(2, [p4r.Replica(port=b"\x05", instance=3)], metadata=b"m")),
    )
    assert server.pipeline.multicast.groups == {1: [(1, 0), (2, 0)], 2: [(5, 3)]}
    [g1, g2] = primary.read(group_entity(0, []))
    r1 = g1.packet_replication_engine_entry.multicast_group_entry.replicas
    assert r1[0].WhichOneof("port_kind") == "egress_port" and r1[0].egress_port == 1
    assert r1[1].WhichOneof("port_kind") == "port" and r1[1].port == b"\x02"  # canonical
    g2e = g2.packet_replication_engine_entry.multicast_group_entry
    assert g2e.replicas[0].port == b"\x05" and g2e.metadata == b"m"


# ---------------------------------------------------------------------- error paths


def _fill(primary: Controller) -> None:
    primary.write(
        insert(
            te_entity(
                raw_entry(
                    "ina_job", {"hdr.ina.job_id": 1, "hdr.ina.tree_id": 0}, "agg_node", agg_node()
                )
            )
        ),
        insert(
            te_entity(
                raw_entry(
                    "ipv4_lpm",
                    {"hdr.ipv4.dstAddr": (0x0A000000, 8)},
                    "ipv4_forward",
                    {"dstAddr": 2, "port": 2},
                )
            )
        ),
        insert(group_entity(1, [p4r.Replica(egress_port=1)])),
    )


JOB1 = {"hdr.ina.job_id": 1, "hdr.ina.tree_id": 0}
JOB2 = {"hdr.ina.job_id": 2, "hdr.ina.tree_id": 0}
CHILD = {
    "hdr.ina.job_id": 1,
    "hdr.ina.tree_id": 0,
    "standard_metadata.ingress_port": 1,
    "udp_port": INA_UDP_PORT,
}

BAD_UPDATES: dict[str, tuple[p4r.Update, Any, str]] = {
    "duplicate insert": (
        insert(te_entity(raw_entry("ina_job", JOB1, "agg_node", agg_node()))),
        CODE.ALREADY_EXISTS,
        "exists",
    ),
    "delete of missing": (
        delete(te_entity(raw_entry("ina_job", JOB2))),
        CODE.NOT_FOUND,
        "no entry",
    ),
    "modify of missing": (
        modify(te_entity(raw_entry("ina_job", JOB2, "agg_node", agg_node()))),
        CODE.NOT_FOUND,
        "no entry",
    ),
    "param wider than its bitwidth": (
        insert(te_entity(raw_entry("ina_job", JOB2, "agg_node", agg_node(parent_port=512)))),
        CODE.INVALID_ARGUMENT,
        "parent_port: value 0x200 does not fit in 9 bits",
    ),
    "match value wider than its bitwidth": (
        insert(
            te_entity(
                raw_entry(
                    "ina_job", {"hdr.ina.job_id": 1, "hdr.ina.tree_id": 256}, "agg_node", agg_node()
                )
            )
        ),
        CODE.INVALID_ARGUMENT,
        "hdr.ina.tree_id: value 0x100 does not fit in 8 bits",
    ),
    "empty bytestring": (
        insert(
            te_entity(
                raw_entry(
                    "ina_job", {"hdr.ina.job_id": b"", "hdr.ina.tree_id": 0}, "agg_node", agg_node()
                )
            )
        ),
        CODE.INVALID_ARGUMENT,
        "empty bytestring",
    ),
    "unknown table id": (
        insert(te_entity(p4r.TableEntry(table_id=12345))),
        CODE.INVALID_ARGUMENT,
        "unknown table id 12345",
    ),
    "unknown action id": (
        insert(
            te_entity(
                p4r.TableEntry(
                    table_id=table_id("ina_job"),
                    match=raw_entry("ina_job", JOB2).match,
                    action=p4r.TableAction(action=p4r.Action(action_id=99)),
                )
            )
        ),
        CODE.INVALID_ARGUMENT,
        "unknown action id 99",
    ),
    "action of another table": (
        insert(te_entity(raw_entry("ina_job", JOB2, "set_child", {"index": 1}))),
        CODE.INVALID_ARGUMENT,
        "not an action of this table",
    ),
    "default-only action in an entry": (
        insert(te_entity(raw_entry("ina_job", JOB2, "miss"))),
        CODE.PERMISSION_DENIED,
        "@defaultonly",
    ),
    "unknown match field id": (
        insert(
            te_entity(
                p4r.TableEntry(
                    table_id=table_id("ina_job"),
                    match=[
                        *raw_entry("ina_job", JOB2).match,
                        p4r.FieldMatch(field_id=9, exact=p4r.FieldMatch.Exact(value=b"\x01")),
                    ],
                    action=raw_entry("ina_job", None, "agg_node", agg_node()).action,
                )
            )
        ),
        CODE.INVALID_ARGUMENT,
        "unknown match field id 9",
    ),
    "duplicate match field": (
        insert(
            te_entity(
                p4r.TableEntry(
                    table_id=table_id("ina_job"),
                    match=[*raw_entry("ina_job", JOB2).match, raw_entry("ina_job", JOB2).match[0]],
                    action=raw_entry("ina_job", None, "agg_node", agg_node()).action,
                )
            )
        ),
        CODE.INVALID_ARGUMENT,
        "given twice",
    ),
    "missing exact field": (
        insert(te_entity(raw_entry("ina_job", {"hdr.ina.job_id": 2}, "agg_node", agg_node()))),
        CODE.INVALID_ARGUMENT,
        "hdr.ina.tree_id (exact) is missing",
    ),
    "lpm match on an exact field": (
        insert(
            te_entity(
                raw_entry(
                    "ina_job",
                    {"hdr.ina.job_id": 2, "hdr.ina.tree_id": (0, 8)},
                    "agg_node",
                    agg_node(),
                )
            )
        ),
        CODE.INVALID_ARGUMENT,
        "is EXACT, got a lpm match",
    ),
    "missing param": (
        insert(
            te_entity(
                raw_entry(
                    "ipv4_lpm", {"hdr.ipv4.dstAddr": (0x0B000000, 8)}, "ipv4_forward", {"port": 1}
                )
            )
        ),
        CODE.INVALID_ARGUMENT,
        "param dstAddr (id 1) is missing",
    ),
    "unknown param id": (
        insert(
            te_entity(
                p4r.TableEntry(
                    table_id=table_id("ina_child"),
                    match=raw_entry("ina_child", CHILD).match,
                    action=p4r.TableAction(
                        action=p4r.Action(
                            action_id=action_id("set_child"),
                            params=[
                                p4r.Action.Param(param_id=1, value=b"\x00"),
                                p4r.Action.Param(param_id=2, value=b"\x00"),
                            ],
                        )
                    ),
                )
            )
        ),
        CODE.INVALID_ARGUMENT,
        "unknown param id(s) [2]",
    ),
    "lpm with bits past the prefix": (
        insert(te_entity(raw_entry("ipv4_lpm", {"hdr.ipv4.dstAddr": (0x0A010203, 16)}, "drop"))),
        CODE.INVALID_ARGUMENT,
        "0xa010203/16 has bits set past the prefix; use 0xa010000/16",
    ),
    "lpm prefix 0": (
        insert(te_entity(raw_entry("ipv4_lpm", {"hdr.ipv4.dstAddr": (0, 0)}, "drop"))),
        CODE.INVALID_ARGUMENT,
        "omit the field",
    ),
    "pool past the register file": (
        insert(
            te_entity(
                raw_entry("ina_job", JOB2, "agg_node", agg_node(base=INA_SLOTS - 2, pool_size=4))
            )
        ),
        CODE.INVALID_ARGUMENT,
        f"runs past the register file ({INA_SLOTS} slots)",
    ),
    "fanin 0": (
        insert(te_entity(raw_entry("ina_job", JOB2, "agg_node", agg_node(fanin=0)))),
        CODE.INVALID_ARGUMENT,
        "fanin 0 not in 1..32",
    ),
    "fanin 33": (
        insert(te_entity(raw_entry("ina_job", JOB2, "agg_node", agg_node(fanin=33)))),
        CODE.INVALID_ARGUMENT,
        "fanin 33 not in 1..32",
    ),
    "modify to a pool past the register file": (
        modify(te_entity(raw_entry("ina_job", JOB1, "agg_node", agg_node(base=INA_SLOTS)))),
        CODE.INVALID_ARGUMENT,
        "runs past the register file",
    ),
    "child index 32": (
        insert(te_entity(raw_entry("ina_child", CHILD, "set_child", {"index": 32}))),
        CODE.INVALID_ARGUMENT,
        "index 32 not in 0..31",
    ),
    "priority on an exact table": (
        insert(te_entity(raw_entry("ina_job", JOB2, "agg_node", agg_node(), priority=10))),
        CODE.INVALID_ARGUMENT,
        "priority must be 0",
    ),
    "insert without action": (
        insert(te_entity(raw_entry("ina_job", JOB2))),
        CODE.INVALID_ARGUMENT,
        "INSERT needs an action",
    ),
    "counter_data on a table without direct counter": (
        insert(
            te_entity(
                raw_entry("ina_job", JOB2, "agg_node", agg_node(), counter_data=p4r.CounterData())
            )
        ),
        CODE.INVALID_ARGUMENT,
        "no direct counter",
    ),
    "insert of a default entry": (
        insert(te_entity(raw_entry("ipv4_lpm", None, "drop", is_default_action=True))),
        CODE.INVALID_ARGUMENT,
        "can only be modified",
    ),
    "const default action": (
        modify(te_entity(raw_entry("ina_child", None, "miss", is_default_action=True))),
        CODE.PERMISSION_DENIED,
        "InaIngress.agg.ina_child: the default action is const",
    ),
    "multicast group 0": (
        insert(group_entity(0, [p4r.Replica(egress_port=1)])),
        CODE.INVALID_ARGUMENT,
        "multicast_group_id 0",
    ),
    "duplicate multicast group": (
        insert(group_entity(1, [p4r.Replica(egress_port=2)])),
        CODE.ALREADY_EXISTS,
        "exists",
    ),
    "delete of a missing multicast group": (
        delete(group_entity(9, [])),
        CODE.NOT_FOUND,
        "no multicast group 9",
    ),
    "repeated replica": (
        insert(group_entity(3, [p4r.Replica(egress_port=2), p4r.Replica(port=b"\x02")])),
        CODE.INVALID_ARGUMENT,
        "is repeated",
    ),
    "replica to the drop port": (
        insert(group_entity(3, [p4r.Replica(egress_port=511)])),
        CODE.INVALID_ARGUMENT,
        "drop port",
    ),
    "backup replicas": (
        insert(
            group_entity(
                3, [p4r.Replica(port=b"\x01", backup_replicas=[p4r.BackupReplica(port=b"\x02")])]
            )
        ),
        CODE.UNIMPLEMENTED,
        "backup replicas",
    ),
    "clone session": (
        insert(
            p4r.Entity(
                packet_replication_engine_entry=p4r.PacketReplicationEngineEntry(
                    clone_session_entry=p4r.CloneSessionEntry(session_id=1)
                )
            )
        ),
        CODE.UNIMPLEMENTED,
        "never clones",
    ),
    "counter index out of range": (
        modify(
            p4r.Entity(
                counter_entry=p4r.CounterEntry(
                    counter_id=INFO.message.counters[0].preamble.id,
                    index=p4r.Index(index=9),
                    data=p4r.CounterData(),
                )
            )
        ),
        CODE.OUT_OF_RANGE,
        "index 9 out of range",
    ),
    "counter insert": (
        insert(
            p4r.Entity(
                counter_entry=p4r.CounterEntry(counter_id=INFO.message.counters[0].preamble.id)
            )
        ),
        CODE.INVALID_ARGUMENT,
        "only MODIFY",
    ),
    "update type unspecified": (
        p4r.Update(entity=group_entity(5, [])),
        CODE.INVALID_ARGUMENT,
        "INSERT, MODIFY or DELETE",
    ),
}


@pytest.mark.parametrize("case", list(BAD_UPDATES))
def test_error_leaves_state_unchanged(
    case: str, primary: Controller, server: P4RuntimeServer
) -> None:
    update, code, text = BAD_UPDATES[case]
    _fill(primary)
    before = snapshot(server.pipeline)
    err = rpc_error(lambda: primary.write(update))
    [(got, message)] = batch_errors(err)
    assert got == code, message
    assert text in message
    assert snapshot(server.pipeline) == before


def test_table_full_is_resource_exhausted(primary: Controller, server: P4RuntimeServer) -> None:
    size = server.pipeline.ina_job.size
    jobs = [
        insert(
            te_entity(
                raw_entry(
                    "ina_job", {"hdr.ina.job_id": j, "hdr.ina.tree_id": 0}, "agg_node", agg_node()
                )
            )
        )
        for j in range(size + 1)
    ]
    err = rpc_error(lambda: primary.write(*jobs))
    results = batch_errors(err)
    assert [c for c, _ in results[:size]] == [CODE.OK] * size
    assert results[size][0] == CODE.RESOURCE_EXHAUSTED
    assert len(server.pipeline.ina_job.entries) == size


def test_batch_continue_on_error_and_rollback(primary: Controller, server: P4RuntimeServer) -> None:
    good1 = insert(group_entity(1, [p4r.Replica(egress_port=1)]))
    bad = insert(te_entity(raw_entry("ina_job", JOB1, "agg_node", agg_node(fanin=0))))
    good2 = insert(group_entity(2, [p4r.Replica(egress_port=2)]))
    err = rpc_error(
        lambda: primary.write(good1, bad, good2, atomicity=p4r.WriteRequest.ROLLBACK_ON_ERROR)
    )
    codes = [c for c, _ in batch_errors(err)]
    assert codes == [CODE.ABORTED, CODE.INVALID_ARGUMENT, CODE.ABORTED]
    assert server.pipeline.multicast.groups == {}
    err = rpc_error(lambda: primary.write(good1, bad, good2))  # CONTINUE_ON_ERROR
    assert [c for c, _ in batch_errors(err)] == [CODE.OK, CODE.INVALID_ARGUMENT, CODE.OK]
    assert sorted(server.pipeline.multicast.groups) == [1, 2]
    assert "1 of 3 failed" in err.details()


def test_bytestrings_with_leading_zeros_are_accepted_and_read_canonical(
    primary: Controller, server: P4RuntimeServer
) -> None:
    assert decode_bytes(b"\x00\x00\x01", 9, "x") == 1 and encode_bytes(0) == b"\x00"
    te = raw_entry(
        "ina_child",
        {
            "hdr.ina.job_id": b"\x00\x00\x00\x01",
            "hdr.ina.tree_id": b"\x00",
            "standard_metadata.ingress_port": b"\x00\x01",
            "udp_port": b"\x00\xb9\x8c",
        },
        "set_child",
        {"index": b"\x00\x00\x05"},
    )
    primary.write(insert(te_entity(te)))
    assert server.pipeline.ina_child.entries[(1, 0, 1, INA_UDP_PORT)].action.params == (5,)
    [read] = primary.read(te_entity(p4r.TableEntry(table_id=te.table_id)))
    assert [m.exact.value for m in read.table_entry.match] == [
        b"\x01",
        b"\x00",
        b"\x01",
        b"\xb9\x8c",
    ]
    assert read.table_entry.action.action.params[0].value == b"\x05"


def test_read_errors_are_reported_per_entity(primary: Controller) -> None:
    primary.write(insert(group_entity(4, [p4r.Replica(egress_port=4)])))
    request = p4r.ReadRequest(
        device_id=1,
        entities=[
            group_entity(0, []),
            p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=77)),
            p4r.Entity(
                counter_entry=p4r.CounterEntry(
                    counter_id=INFO.message.counters[0].preamble.id, index=p4r.Index(index=-1)
                )
            ),
        ],
    )
    call = primary.stub.Read(request, timeout=5)
    got = []
    with pytest.raises(grpc.RpcError) as info:
        for response in call:
            got += response.entities
    assert len(got) == 1  # the valid request's entity still arrives
    codes = [c for c, _ in batch_errors(info.value)]
    assert codes == [CODE.OK, CODE.INVALID_ARGUMENT, CODE.INVALID_ARGUMENT]
    err = rpc_error(lambda: primary.stub.Read(p4r.ReadRequest(device_id=2), timeout=5).next())
    assert err.code() == CODE.NOT_FOUND


# ---------------------------------------------------------------------- counters & end to end

SWITCH = Endpoint("00:00:00:00:00:fe", "10.0.0.254")
HOSTS = {p: Endpoint(f"00:00:00:00:00:{p:02x}", f"10.0.0.{p}") for p in (1, 2)}


def job_entities() -> list[P4Entity]:
    """One INA job (1, tree 0) on a root switch with workers on ports 1 and 2."""
    entities: list[P4Entity] = [
        fy.P4TableEntry(
            "ina_job",
            match=fy.P4TableMatch({"hdr.ina.job_id": 1, "hdr.ina.tree_id": 0}),
            action=fy.P4TableAction("agg_node", **agg_node()),
        ),
        fy.P4MulticastGroupEntry(1, replicas=[1, 2]),
    ]
    for index, port in enumerate(HOSTS):
        entities.append(
            fy.P4TableEntry(
                "ina_child",
                match=fy.P4TableMatch(
                    {
                        "hdr.ina.job_id": 1,
                        "hdr.ina.tree_id": 0,
                        "standard_metadata.ingress_port": port,
                        "udp_port": INA_UDP_PORT,
                    }
                ),
                action=fy.P4TableAction("set_child", index=index),
            )
        )
        entities.append(
            fy.P4TableEntry(
                "ina_egress",
                match=fy.P4TableMatch({"standard_metadata.egress_port": port}),
                action=fy.P4TableAction(
                    "to_host",
                    dmac=HOSTS[port].mac,
                    dip=HOSTS[port].ip,
                    smac=SWITCH.mac,
                    sip=SWITCH.ip,
                ),
            )
        )
    return entities


def worker_frame(port: int, values: npt.NDArray[np.int32], seq: int = 0) -> bytes:
    return pack_frames(
        FrameTemplate(HOSTS[port], SWITCH),
        pack_payloads(
            opcode=Opcode.SUM,
            job_id=1,
            tree_id=0,
            slot=seq % 4,
            seq=seq,
            values=values[None, :],
        ),
    ).tobytes()


def test_end_to_end_ina_job_programmed_over_grpc(server: P4RuntimeServer) -> None:
    p = server.pipeline
    rng = np.random.default_rng(1)
    a = rng.integers(-1000, 1000, K, dtype=np.int32)
    b = rng.integers(-1000, 1000, K, dtype=np.int32)

    async def program() -> None:
        async with finsy_switch(server) as sw:
            await sw.insert(job_entities())

    run(program())
    assert p.process(1, worker_frame(1, a)) == []  # held until the second worker arrives
    out = p.process(2, worker_frame(2, b))
    assert sorted(port for port, _ in out) == [1, 2]
    for port, data in out:
        rec = parse_frames(data)[0]
        assert np.array_equal(rec["values"], a + b)
        assert int(rec["ver_flags"]) & 0xF == Flag.RESULT
        assert int(rec["contrib"]) == 2
        assert bytes(rec["eth_dst"]) == bytes.fromhex(HOSTS[port].mac.replace(":", ""))
        assert int(rec["ip_dst"]) == int.from_bytes(
            bytes(map(int, HOSTS[port].ip.split("."))), "big"
        )
    p.process(3, b"\x00" * 10)  # a runt: dropped as TRUNCATED
    length = len(worker_frame(1, a))

    async def check_counters() -> None:
        async with finsy_switch(server, push_pipeline=False) as sw:
            rx = {e.index: e async for e in finsy_read(sw, fy.P4CounterEntry("port_rx"))}
            assert len(rx) == 512
            assert (rx[1].packet_count, rx[1].byte_count) == (1, length)
            assert (rx[2].packet_count, rx[2].byte_count) == (1, length)
            tx = [e async for e in finsy_read(sw, fy.P4CounterEntry("port_tx", index=2))]
            assert [(e.packet_count, e.byte_count) for e in tx] == [(1, length)]
            events = {
                e.index: e.packet_count
                async for e in finsy_read(sw, fy.P4CounterEntry("ina_events"))
            }
            assert events[Event.CONTRIBUTION] == 2 and events[Event.COMPLETE_ROOT] == 1
            every = [e async for e in finsy_read(sw, fy.P4CounterEntry())]
            assert len(every) == INA_EVENTS + INA_PORTS + INA_DROP_REASONS + INA_PORTS
            drops = [
                e
                async for e in finsy_read(
                    sw, fy.P4CounterEntry("ina_drops", index=DropReason.TRUNCATED)
                )
            ]
            assert drops[0].packet_count == 1

            # The ina_child direct counter, both ways.
            direct = [e async for e in finsy_read(sw, fy.P4DirectCounterEntry("ina_child_stats"))]
            assert sorted(
                (match_of(e.table_entry)["ingress_port"], e.packet_count, e.byte_count)
                for e in direct
            ) == [(1, 1, length), (2, 1, length)]
            children = [
                e
                async for e in finsy_read(
                    sw, fy.P4TableEntry("ina_child", counter_data=fy.P4CounterData())
                )
            ]
            assert all(
                e.counter_data == fy.P4CounterData(byte_count=length, packet_count=1)
                for e in children
            )
            plain = [e async for e in finsy_read(sw, fy.P4TableEntry("ina_child"))]
            assert all(e.counter_data is None for e in plain)

            # Counters can be written (reset) too.
            await sw.modify([fy.P4CounterEntry("port_rx", data=fy.P4CounterData())])
            await sw.modify(
                [
                    fy.P4DirectCounterEntry(
                        table_entry=fy.P4TableEntry(
                            "ina_child",
                            match=fy.P4TableMatch(
                                {
                                    "hdr.ina.job_id": 1,
                                    "hdr.ina.tree_id": 0,
                                    "standard_metadata.ingress_port": 1,
                                    "udp_port": INA_UDP_PORT,
                                }
                            ),
                        ),
                        data=fy.P4CounterData(byte_count=5, packet_count=6),
                    )
                ]
            )

    run(check_counters())
    assert sum(p.port_rx.packets) == 0
    child = p.ina_child.entries[(1, 0, 1, INA_UDP_PORT)]
    assert (child.packets, child.bytes) == (6, 5)


# ---------------------------------------------------------------------- p4runtime-shell

SHELL_VENV = REPO / ".venv-p4rt-shell"


def _shell_python() -> Path:
    python = SHELL_VENV / "bin" / "python"
    probe = [str(python), "-c", "import p4runtime_sh.shell"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    base = shutil.which("python3.11") or sys.executable
    try:
        subprocess.run(
            [base, "-m", "venv", str(SHELL_VENV)], check=True, capture_output=True, timeout=120
        )
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "p4runtime-shell"],
            check=True,
            capture_output=True,
            timeout=600,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
        lines = (getattr(err, "stderr", b"") or b"").decode(errors="replace").splitlines()
        last = next((line for line in reversed(lines) if line.strip()), str(err))
        pytest.skip(f"cannot install p4runtime-shell into {SHELL_VENV} (no network?): {last}")
    return python


@pytest.mark.slow
@pytest.mark.parametrize("push_config", [True, False], ids=["with-config", "switch-config"])
def test_p4runtime_shell_client(push_config: bool, pipeline: Pipeline) -> None:
    python = _shell_python()
    with P4RuntimeServer(pipeline, address="127.0.0.1:0", preconfigured=not push_config) as server:
        args = [
            str(python),
            str(REPO / "tests" / "p4runtime_shell_check.py"),
            "--grpc-addr",
            server.address,
            "--drop-reasons",
            str(INA_DROP_REASONS),
        ]
        if push_config:
            args += ["--config", f"{P4INFO_PATH},{P4INFO_PATH}"]  # any bytes do as device config
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        result = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "p4runtime-shell check: OK" in result.stdout
        assert pipeline.ina_job.entries[(1, 0)].action.params == (0, 4, 2, 1, 1, 0, 1)
        assert pipeline.multicast.groups[1] == [(1, 0), (2, 0)]
