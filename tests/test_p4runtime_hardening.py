"""The P4Runtime server under hostile or broken clients: limits, deadlines, bounded shutdown.

Each test drives a real server over gRPC on 127.0.0.1 (raw stubs, raw byte streams for
malformed messages, finsy for large configs, a subprocess for a frozen controller).
"""

from __future__ import annotations

import functools
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import finsy as fy
import grpc
import pytest
from finsy.proto.p4.config.v1 import p4info_pb2
from finsy.proto.p4.v1 import p4runtime_pb2 as p4r
from finsy.proto.p4.v1 import p4runtime_pb2_grpc

from inaemu.p4.constants import P4INFO_PATH
from inaemu.softswitch.p4runtime.server import (
    MAX_METADATA_SIZE,
    READ_RESPONSE_BUDGET,
    P4RuntimeServer,
)
from inaemu.softswitch.p4runtime.write import MAX_REPLICAS
from inaemu.softswitch.pipeline import Pipeline
from tests.test_p4runtime_server import (
    CODE,
    INFO,
    JOB1,
    Controller,
    agg_node,
    batch_errors,
    group_entity,
    insert,
    raw_entry,
    rpc_error,
    run,
    status,
    te_entity,
)

REPO = Path(__file__).resolve().parent.parent
STREAM = "/p4.v1.P4Runtime/StreamChannel"
BIG = 1 << 20  # a 1 MB value where a few bytes are expected


def arbitration(election_id: int | None = None, role: str = "") -> bytes:
    update = p4r.MasterArbitrationUpdate(device_id=1)
    if election_id is not None:
        update.election_id.low = election_id
    if role:
        update.role.name = role
    data: bytes = p4r.StreamMessageRequest(arbitration=update).SerializeToString()
    return data


class RawStream:
    """A StreamChannel that sends raw bytes (malformed messages) and may never read."""

    def __init__(self, address: str, *, read: bool = True) -> None:
        self.channel = grpc.insecure_channel(address)
        self._out: queue.Queue[bytes | None] = queue.Queue()
        self.call = self.channel.stream_stream(STREAM)(iter(self._out.get, None))
        self.inbox: queue.Queue[Any] = queue.Queue()
        if read:
            threading.Thread(target=self.drain, daemon=True).start()

    def drain(self) -> None:
        try:
            for message in self.call:
                self.inbox.put(p4r.StreamMessageResponse.FromString(message))
        except grpc.RpcError as err:
            self.inbox.put(err)

    def send(self, data: bytes) -> None:
        self._out.put(data)

    def end(self, timeout: float = 10) -> grpc.RpcError:
        """The error that ended the stream (skipping the messages before it)."""
        deadline = time.monotonic() + timeout
        while True:
            item = self.inbox.get(timeout=max(0.01, deadline - time.monotonic()))
            if isinstance(item, grpc.RpcError):
                return item

    def close(self) -> None:
        self.call.cancel()
        self.channel.close()


@pytest.fixture
def server() -> Iterator[P4RuntimeServer]:
    with P4RuntimeServer(Pipeline(), address="127.0.0.1:0") as srv:
        yield srv


@pytest.fixture
def primary(server: P4RuntimeServer) -> Iterator[Controller]:
    """A primary controller that has pushed the committed P4Info."""
    ctl = Controller(server.address)
    assert status(ctl.arbitrate(10)) == CODE.OK
    ctl.set_pipeline(INFO.message)
    yield ctl
    ctl.close()


# ---------------------------------------------------------------------- error messages


def test_error_messages_quote_bounded_prefixes(
    primary: Controller, server: P4RuntimeServer
) -> None:
    huge = b"\x01" * BIG
    cases = {
        "match value": raw_entry(
            "ina_job", {"hdr.ina.job_id": huge, "hdr.ina.tree_id": 0}, "agg_node", agg_node()
        ),
        "param value": raw_entry("ina_job", JOB1, "agg_node", agg_node()),
    }
    param = cases["param value"].action.action.params[0]
    param.value = huge
    for name, entry in cases.items():
        err = rpc_error(functools.partial(primary.write, insert(te_entity(entry))))
        [(code, message)] = batch_errors(err)
        assert code == CODE.INVALID_ARGUMENT, name
        assert len(message) < 1000 and len(err.details()) < 1200, (name, len(message))
        assert "1048576 bytes" in message, message
    role = "r" * BIG
    request = p4r.WriteRequest(device_id=1, role=role)
    err = rpc_error(lambda: primary.stub.Write(request, timeout=10))
    assert err.code() == CODE.NOT_FOUND and len(err.details()) < 1000
    stream = RawStream(server.address)
    stream.send(arbitration(3, role=role))
    err = stream.end()
    assert err.code() == CODE.UNIMPLEMENTED and len(err.details()) < 1000
    stream.close()
    p4info = p4info_pb2.P4Info()
    p4info.CopyFrom(INFO.message)
    p4info.tables[0].preamble.name = "t" * BIG
    p4info.actions[0].params.add(id=99, name="p" * BIG, bitwidth=8)
    err = rpc_error(lambda: primary.set_pipeline(p4info))
    assert err.code() == CODE.INVALID_ARGUMENT and len(err.details()) < 3000, len(err.details())
    assert "chars)" in err.details()


# ---------------------------------------------------------------------- malformed, stop


def stop_within(server: P4RuntimeServer, seconds: float, grace: float | None = None) -> bool:
    """Whether `server.stop(grace)` returned within `seconds` (it goes on in a daemon thread)."""
    done = threading.Event()

    def stop() -> None:
        server.stop(grace)
        done.set()

    threading.Thread(target=stop, daemon=True).start()
    return done.wait(seconds)


GARBAGE = [
    b"\xff\xff\xff\xff\xff",  # not protobuf at all
    b"\x0a\x05\x08",  # truncated arbitration
    b"\x0a\xff\xff\xff\xff\x0f",  # a length past the end
    arbitration(10)[:-1],  # cut short
]


@pytest.mark.parametrize("grace", [None, 1.0])
def test_stop_is_bounded_after_malformed_stream_messages(grace: float | None) -> None:
    server = P4RuntimeServer(Pipeline(), address="127.0.0.1:0", max_streams=32).start()
    streams: list[RawStream] = []
    try:
        for data in GARBAGE * 3:
            stream = RawStream(server.address)
            stream.send(data)
            streams.append(stream)
        for stream in streams:  # each is told what was wrong, once
            err = stream.end()
            assert err.code() == CODE.INVALID_ARGUMENT, err.details()
            assert "malformed StreamMessageRequest" in err.details()
        primary = Controller(server.address)
        assert status(primary.arbitrate(10)) == CODE.OK
        idle = RawStream(server.address)  # open, never arbitrates
        deaf = RawStream(server.address, read=False)  # arbitrates, never reads
        deaf.send(arbitration(5))
        time.sleep(0.2)
        assert stop_within(server, 10, grace), f"stop({grace}) did not return within 10 s"
        err = primary.next()
        assert isinstance(err, grpc.RpcError)
        for extra in (idle, deaf):
            extra.close()
        primary.close()
    finally:
        for stream in streams:
            stream.close()
        stop_within(server, 10)
    deadline = time.monotonic() + 10
    while any(t.name.startswith("p4rt-stream") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "stream reader threads outlived the server"
        time.sleep(0.05)


def test_softswitch_process_exits_on_sigterm_after_malformed_messages() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "inaemu.softswitch", "--grpc", "127.0.0.1:0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    streams: list[RawStream] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY"), line
        address = dict(f.split("=", 1) for f in line.split()[1:])["grpc"]
        for data in GARBAGE * 2:
            stream = RawStream(address)
            stream.send(data)
            streams.append(stream)
        for stream in streams:
            assert stream.end().code() == CODE.INVALID_ARGUMENT
        primary = RawStream(address)
        primary.send(arbitration(10))
        streams.append(primary)
        streams.append(RawStream(address))  # never arbitrates
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in streams:
            stream.close()


@pytest.mark.parametrize(
    "method",
    ["Write", "Read", "SetForwardingPipelineConfig", "GetForwardingPipelineConfig", "Capabilities"],
)
def test_malformed_requests_are_invalid_argument(method: str, server: P4RuntimeServer) -> None:
    channel = grpc.insecure_channel(server.address)
    call: Any = (channel.unary_stream if method == "Read" else channel.unary_unary)(
        f"/p4.v1.P4Runtime/{method}"
    )
    for data in GARBAGE:
        with pytest.raises(grpc.RpcError) as info:
            list(call(data, timeout=10)) if method == "Read" else call(data, timeout=10)
        assert info.value.code() == CODE.INVALID_ARGUMENT, info.value.details()
        assert f"malformed {method}Request" in info.value.details()
    channel.close()
    assert stop_within(server, 10)


# ---------------------------------------------------------------------- arbitration deadline


def test_streams_that_never_arbitrate_release_their_slot() -> None:
    with P4RuntimeServer(
        Pipeline(), address="127.0.0.1:0", arbitration_timeout=0.5, preconfigured=True
    ) as server:
        assert server.max_streams == 16
        idle = [RawStream(server.address) for _ in range(server.max_streams)]
        try:
            for stream in idle:
                err = stream.end()
                assert err.code() == CODE.DEADLINE_EXCEEDED, err.details()
                assert "MasterArbitrationUpdate" in err.details()
            ctl = Controller(server.address)
            assert status(ctl.arbitrate(10)) == CODE.OK
            time.sleep(1.0)  # past the deadline: an arbitrated stream stays
            assert ctl.no_message()
            ctl.write(insert(group_entity(1, [p4r.Replica(egress_port=1)])))
            ctl.close()
        finally:
            for stream in idle:
                stream.close()


# ---------------------------------------------------------------------- reply queues


def test_a_stream_that_is_never_read_is_dropped_when_its_queue_fills() -> None:
    with P4RuntimeServer(Pipeline(), address="127.0.0.1:0", stream_queue=8) as server:
        backup = Controller(server.address)
        assert status(backup.arbitrate(5)) == CODE.OK
        deaf = RawStream(server.address, read=False)
        deaf.send(arbitration(10))
        assert status(backup.next()) == CODE.ALREADY_EXISTS  # the deaf one is primary
        packet = p4r.StreamMessageRequest(packet=p4r.PacketOut(payload=b"x" * 60_000))
        for _ in range(300):  # each answered with a StreamError carrying the packet
            deaf.send(packet.SerializeToString())
        reply = backup.next(timeout=20)  # the deaf primary was dropped: backup promoted
        assert status(reply) == CODE.OK
        deaf.drain()
        err = deaf.end()
        assert err.code() == CODE.RESOURCE_EXHAUSTED, err.details()
        assert "8" in err.details() and "read" in err.details()
        deaf.close()
        backup.close()


# ---------------------------------------------------------------------- message sizes and metadata


def test_large_reads_are_split_under_the_byte_budget(
    primary: Controller, server: P4RuntimeServer
) -> None:
    meta = b"m" * 100_000
    entries = [
        te_entity(
            raw_entry(
                "ina_job",
                {"hdr.ina.job_id": job, "hdr.ina.tree_id": 0},
                "agg_node",
                agg_node(),
                metadata=meta,
            )
        )
        for job in range(1, 65)
    ]
    for start in range(0, len(entries), 16):
        primary.write(*(insert(e) for e in entries[start : start + 16]))
    # a default client (4 MiB receive limit) reads 6.4 MB of entries
    channel = grpc.insecure_channel(server.address)
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
    request = p4r.ReadRequest(
        device_id=1, entities=[te_entity(p4r.TableEntry(table_id=INFO.table("ina_job").id))]
    )
    responses = list(stub.Read(request, timeout=30))
    channel.close()
    assert sum(len(r.entities) for r in responses) == 64
    assert len(responses) > 1
    assert all(r.ByteSize() <= READ_RESPONSE_BUDGET for r in responses)
    assert all(e.table_entry.metadata == meta for r in responses for e in r.entities)


def test_request_metadata_size_is_capped(server: P4RuntimeServer) -> None:
    channel = grpc.insecure_channel(server.address)
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)

    def capabilities(size: int) -> str:
        try:
            stub.Capabilities(
                p4r.CapabilitiesRequest(), metadata=[("x-pad", "a" * size)], timeout=5
            )
        except grpc.RpcError as err:
            return str(err.code().name)
        return "OK"

    # gRPC's default is a soft limit: between 8 and 16 KiB some requests pass, some do not
    assert {capabilities(MAX_METADATA_SIZE - 2048) for _ in range(10)} == {"OK"}
    assert {capabilities(MAX_METADATA_SIZE + 1024) for _ in range(10)} == {"RESOURCE_EXHAUSTED"}
    channel.close()


def test_device_config_as_large_as_bmv2_json(server: P4RuntimeServer) -> None:
    blob = bytes(range(256)) * (7_000_000 // 256)  # ~7 MB, like p4/build/ina-*.json
    options = fy.SwitchOptions(p4info=P4INFO_PATH, p4blob=blob, device_id=1)

    async def push() -> None:
        async with fy.Switch("sw1", server.address, options) as sw:
            assert sw.is_primary

    run(push())
    size = 64 << 20
    channel = grpc.insecure_channel(
        server.address,
        options=[("grpc.max_receive_message_length", size), ("grpc.max_send_message_length", size)],
    )
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
    reply = stub.GetForwardingPipelineConfig(
        p4r.GetForwardingPipelineConfigRequest(
            device_id=1,
            response_type=p4r.GetForwardingPipelineConfigRequest.DEVICE_CONFIG_AND_COOKIE,
        ),
        timeout=30,
    )
    assert reply.config.p4_device_config == blob
    channel.close()


# ---------------------------------------------------------------------- keepalive

FROZEN_CLIENT = textwrap.dedent(
    """
    import queue, sys, grpc
    from finsy.proto.p4.v1 import p4runtime_pb2 as p4r, p4runtime_pb2_grpc
    channel = grpc.insecure_channel(sys.argv[1])
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
    out = queue.Queue()
    update = p4r.MasterArbitrationUpdate(device_id=1, election_id=p4r.Uint128(low=10))
    out.put(p4r.StreamMessageRequest(arbitration=update))
    for reply in stub.StreamChannel(iter(out.get, None)):
        print(reply.arbitration.status.code, flush=True)
    """
)


@pytest.fixture
def frozen_primary() -> Iterator[tuple[P4RuntimeServer, subprocess.Popen[str]]]:
    server = P4RuntimeServer(
        Pipeline(),
        address="127.0.0.1:0",
        preconfigured=True,
        keepalive_time=0.3,
        keepalive_timeout=1.0,
    ).start()
    proc = subprocess.Popen(
        [sys.executable, "-c", FROZEN_CLIENT, server.address],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        yield server, proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
        server.stop(None)


def test_keepalive_lets_a_backup_take_over_from_a_frozen_primary(
    frozen_primary: tuple[P4RuntimeServer, subprocess.Popen[str]],
) -> None:
    server, proc = frozen_primary
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "0"  # OK: the subprocess is primary
    backup = Controller(server.address)
    assert status(backup.arbitrate(5)) == CODE.ALREADY_EXISTS
    time.sleep(1.5)  # idle for several keepalive periods: pings keep flowing, all answered
    assert backup.no_message()
    os.kill(proc.pid, signal.SIGSTOP)  # frozen: its kernel still ACKs TCP, nobody answers pings
    frozen_at = time.monotonic()
    reply = backup.next(timeout=20)
    assert status(reply) == CODE.OK, reply
    assert time.monotonic() - frozen_at < 20
    backup.write(insert(group_entity(1, [p4r.Replica(egress_port=1)])))
    backup.close()


# ---------------------------------------------------------------------- multicast groups


def replicas(n: int) -> list[p4r.Replica]:
    return [p4r.Replica(egress_port=i % 500, instance=i // 500) for i in range(n)]


def test_multicast_replica_cap(primary: Controller, server: P4RuntimeServer) -> None:
    err = rpc_error(lambda: primary.write(insert(group_entity(1, replicas(30_000)))))
    [(code, message)] = batch_errors(err)
    assert code == CODE.RESOURCE_EXHAUSTED
    assert f"at most {MAX_REPLICAS}" in message and "30000" in message
    primary.write(insert(group_entity(1, replicas(MAX_REPLICAS))))
    assert len(server.pipeline.multicast.groups[1]) == MAX_REPLICAS
    [read] = primary.read(group_entity(1, []))
    assert len(read.packet_replication_engine_entry.multicast_group_entry.replicas) == MAX_REPLICAS


def test_multicast_replicas_are_checked_outside_the_pipeline_lock(
    primary: Controller, server: P4RuntimeServer
) -> None:
    bad = {
        "repeated": [*replicas(MAX_REPLICAS - 1), p4r.Replica(egress_port=0, instance=0)],
        "drop port": [*replicas(10), p4r.Replica(egress_port=511)],
        "no port": [*replicas(10), p4r.Replica(instance=3)],
    }
    results: queue.Queue[Any] = queue.Queue()
    with server.pipeline.lock:  # the data plane is busy: a refused group must not wait
        for name, group in bad.items():
            threading.Thread(
                target=lambda g=group: results.put(
                    rpc_error(lambda: primary.write(insert(group_entity(1, g))))
                ),
                daemon=True,
            ).start()
            err = results.get(timeout=10)
            [(code, message)] = batch_errors(err)
            assert code == CODE.INVALID_ARGUMENT, (name, message)
    assert server.pipeline.multicast.groups == {}


# ---------------------------------------------------------------------- rollback


@pytest.mark.parametrize(
    "atomicity", [p4r.WriteRequest.ROLLBACK_ON_ERROR, p4r.WriteRequest.DATAPLANE_ATOMIC]
)
def test_rolled_back_batch_names_the_failed_update(
    atomicity: Any, primary: Controller, server: P4RuntimeServer
) -> None:
    good = [insert(group_entity(g, [p4r.Replica(egress_port=g)])) for g in (1, 2, 3)]
    bad = insert(te_entity(raw_entry("ina_job", JOB1, "agg_node", agg_node(fanin=0))))
    err = rpc_error(lambda: primary.write(good[0], good[1], bad, good[2], atomicity=atomicity))
    assert "#2: INVALID_ARGUMENT" in err.details() and "fanin" in err.details(), err.details()
    assert "1 of 4 failed" in err.details()
    results = batch_errors(err)
    assert [c for c, _ in results] == [
        CODE.ABORTED,
        CODE.ABORTED,
        CODE.INVALID_ARGUMENT,
        CODE.ABORTED,
    ]
    assert all("#2" in m for i, (_, m) in enumerate(results) if i != 2), results
    assert server.pipeline.multicast.groups == {}
