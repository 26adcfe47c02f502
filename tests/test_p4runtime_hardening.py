"""The P4Runtime server under hostile or broken clients: limits, deadlines, bounded shutdown.

Each test drives a real server over gRPC on 127.0.0.1 (raw stubs, raw byte streams for
malformed messages, finsy for large configs, a subprocess for a frozen controller).
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from finsy.proto.p4.config.v1 import p4info_pb2
from finsy.proto.p4.v1 import p4runtime_pb2 as p4r

from inaemu.softswitch.p4runtime.server import P4RuntimeServer
from inaemu.softswitch.pipeline import Pipeline
from tests.test_p4runtime_server import (
    CODE,
    INFO,
    JOB1,
    Controller,
    agg_node,
    batch_errors,
    insert,
    raw_entry,
    rpc_error,
    status,
    te_entity,
)

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
