"""A P4Runtime (v1.x) gRPC server in front of a softswitch `Pipeline`.

It serves the P4Info of p4/ina.p4 (p4/ina.p4info.txt) and translates P4Runtime entities to the
pipeline's state: table entries, default actions, multicast groups, counters and the direct
counter of `ina_child`. Semantics follow the P4Runtime specification; docs/p4runtime.md lists
what is supported, the few places where the softswitch is stricter than bmv2, and how to drive
the server with finsy or p4runtime-shell.

    with P4RuntimeServer(pipeline, address="127.0.0.1:0") as server:
        print(server.port)

or from a shell: `python -m softswitch.p4runtime_server --address 127.0.0.1:9559`.

Concurrency: gRPC handlers run on a thread pool. Arbitration and configuration state is guarded
by the server's own lock; every read or change of data-plane state happens under
`pipeline.lock` (lock order: server lock, then pipeline lock), so a Write batch is atomic with
respect to packets going through `pipeline.process()`.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import itertools
import logging
import queue
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, NoReturn, Self

import grpc
from finsy.proto.google.rpc import status_pb2
from finsy.proto.p4.config.v1 import p4info_pb2
from finsy.proto.p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from google.protobuf import any_pb2

from hostlib.wire import MAX_FANIN
from softswitch.constants import DROP_PORT
from softswitch.p4info import load_p4info, p4info_diff
from softswitch.pipeline import Pipeline
from softswitch.state import ActionCall, ExactTable, StateError, TableEntry

__all__ = ["API_VERSION", "P4RuntimeServer", "main"]

LOG = logging.getLogger(__name__)

API_VERSION = "1.4.0"
ERROR_SPACE = "inaemu-softswitch-v1model"
NO_PIPELINE = "No forwarding pipeline config set for this device"  # bmv2's wording (finsy)
MAX_MULTICAST_GROUP = 0xFFFF  # v1model mcast_grp is bit<16>
MAX_INSTANCE = 0xFFFF  # v1model egress_rid is bit<16>
READ_CHUNK = 1000  # entities per ReadResponse

Arbitration = Literal["promote", "strict"]

MatchType = p4info_pb2.MatchField.MatchType
Scope = p4info_pb2.ActionRef.Scope
UpdateType = p4runtime_pb2.Update.Type
SetAction = p4runtime_pb2.SetForwardingPipelineConfigRequest.Action
ResponseType = p4runtime_pb2.GetForwardingPipelineConfigRequest.ResponseType
Atomicity = p4runtime_pb2.WriteRequest.Atomicity


class P4RuntimeFailure(Exception):
    """A request (or one update of a batch) refused with a gRPC status code."""

    def __init__(self, code: Any, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _invalid(message: str) -> P4RuntimeFailure:
    return P4RuntimeFailure(grpc.StatusCode.INVALID_ARGUMENT, message)


def _from_state_error(err: StateError) -> P4RuntimeFailure:
    return P4RuntimeFailure(grpc.StatusCode[err.code], str(err))


# ---------------------------------------------------------------------- bytestrings


def decode_bytes(value: bytes, bitwidth: int, what: str) -> int:
    """A P4Runtime bytestring (canonical or with leading zeros) that must fit `bitwidth` bits."""
    if not value:
        raise _invalid(f"{what}: empty bytestring; send at least one byte")
    number = int.from_bytes(value, "big")
    if number >> bitwidth:
        raise _invalid(
            f"{what}: value {number:#x} does not fit in {bitwidth} bits "
            f"(maximum {(1 << bitwidth) - 1:#x})"
        )
    return number


def encode_bytes(value: int) -> bytes:
    """The canonical bytestring of a non-negative integer (the shortest, at least one byte)."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def _u128(value: p4runtime_pb2.Uint128) -> int:
    return (value.high << 64) | value.low


def _to_u128(value: int) -> p4runtime_pb2.Uint128:
    return p4runtime_pb2.Uint128(high=value >> 64, low=value & 0xFFFFFFFFFFFFFFFF)


# ---------------------------------------------------------------------- schema


@dataclass(frozen=True)
class _Field:
    id: int
    name: str
    bitwidth: int
    match_type: int


@dataclass(frozen=True)
class _Action:
    id: int
    name: str
    alias: str
    params: tuple[tuple[int, str, int], ...]  # (id, name, bitwidth) in P4 order


@dataclass(frozen=True)
class _Table:
    id: int
    name: str
    fields: tuple[_Field, ...]
    scopes: dict[int, int]  # action id -> ActionRef.Scope
    const_default_id: int
    initial_default: p4info_pb2.TableActionCall
    direct_counter_id: int
    size: int


@dataclass(frozen=True)
class _Counter:
    id: int
    name: str
    size: int


class _Schema:
    """Id look-ups over the committed P4Info (the one the pipeline implements)."""

    def __init__(self, info: p4info_pb2.P4Info) -> None:
        self.actions = {
            a.preamble.id: _Action(
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
            t.preamble.id: _Table(
                t.preamble.id,
                t.preamble.name,
                tuple(_Field(m.id, m.name, m.bitwidth, m.match_type) for m in t.match_fields),
                {r.id: r.scope for r in t.action_refs},
                t.const_default_action_id,
                t.initial_default_action,
                direct.get(t.preamble.id, 0),
                t.size,
            )
            for t in info.tables
        }
        self.counters = {
            c.preamble.id: _Counter(c.preamble.id, c.preamble.name, c.size) for c in info.counters
        }
        self.registers = {r.preamble.id for r in info.registers}
        self.other_ids = {
            kind: {o.preamble.id for o in getattr(info, kind)}
            for kind in ("meters", "direct_meters", "action_profiles", "digests", "value_sets")
        }

    def table(self, table_id: int) -> _Table:
        table = self.tables.get(table_id)
        if table is None:
            known = ", ".join(f"{t.id} ({t.name})" for t in self.tables.values())
            raise _invalid(f"unknown table id {table_id}; the P4Info has tables {known}")
        return table

    def action(self, action_id: int) -> _Action:
        action = self.actions.get(action_id)
        if action is None:
            raise _invalid(f"unknown action id {action_id}")
        return action

    def counter(self, counter_id: int) -> _Counter:
        counter = self.counters.get(counter_id)
        if counter is None:
            known = ", ".join(f"{c.id} ({c.name})" for c in self.counters.values())
            raise _invalid(f"unknown counter id {counter_id}; the P4Info has counters {known}")
        return counter

    def action_for_alias(self, table: _Table, alias: str) -> _Action:
        for action_id in table.scopes:
            action = self.actions[action_id]
            if alias in (action.alias, action.name):
                return action
        raise P4RuntimeFailure(
            grpc.StatusCode.INTERNAL, f"{table.name}: the pipeline holds unknown action {alias!r}"
        )


# ---------------------------------------------------------------------- stream clients


@dataclass(eq=False)
class _Client:
    """One StreamChannel."""

    number: int
    outbox: queue.Queue[object] = field(default_factory=queue.Queue)
    arbitrated: bool = False
    closed: bool = False
    device_id: int = 0
    election_id: int | None = None  # None: the client sent no election id (never primary)

    def label(self) -> str:
        return f"stream #{self.number} (election id {self.election_id})"


@dataclass(frozen=True)
class _Terminate:
    """Ends a StreamChannel with an error status."""

    code: Any
    message: str


_EOF = object()


@dataclass
class _Config:
    p4info: p4info_pb2.P4Info
    device_config: bytes
    cookie: int | None


@dataclass
class _GroupCache:
    """How a multicast group was written, to echo it on read (port field form, metadata)."""

    replicas: list[tuple[int, int]]
    bytes_port: list[bool]
    metadata: bytes


Undo = Callable[[], None]


# ---------------------------------------------------------------------- the server


class P4RuntimeServer:
    """A P4Runtime gRPC server for one softswitch `Pipeline` (one device).

    `address` is host:port (port 0 picks a free port; `.port` tells which). `device_id` is the
    P4Runtime device id clients must use. With `preconfigured=True` the server starts as if a
    controller had pushed the committed P4Info (empty device config, no cookie) with
    RECONCILE_AND_COMMIT, so clients may read and write without setting a pipeline first.

    `arbitration` chooses what happens when the primary controller goes away (or lowers its
    election id): "promote" (default, as bmv2's simple_switch_grpc does) makes the live
    controller with the highest election id primary and tells it with an OK arbitration update;
    "strict" follows the P4Runtime spec to the letter: there is no primary until a controller
    sends an election id at least as high as any seen before, and backups are told NOT_FOUND.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        address: str = "127.0.0.1:9559",
        device_id: int = 1,
        preconfigured: bool = False,
        arbitration: Arbitration = "promote",
        max_streams: int = 16,
    ) -> None:
        if arbitration not in ("promote", "strict"):
            raise ValueError(f"arbitration must be 'promote' or 'strict', not {arbitration!r}")
        self.pipeline = pipeline
        self.requested_address = address
        self.device_id = device_id
        self.arbitration: Arbitration = arbitration
        self.max_streams = max_streams
        self._committed = load_p4info().message
        self._schema = _Schema(self._committed)
        self._lock = threading.RLock()
        self._config: _Config | None = None
        self._saved_uncommitted = False
        self._clients: list[_Client] = []
        self._open_streams = 0
        self._primary: _Client | None = None
        self._highest_election_id: int | None = None  # strict mode: highest ever seen
        self._numbers = itertools.count(1)
        self._entry_meta: dict[tuple[str, tuple[int, ...] | None], tuple[bytes, int]] = {}
        self._groups: dict[int, _GroupCache] = {}
        self._server: Any = None
        self._port = 0
        if preconfigured:
            self._config = _Config(self._committed, b"", None)

    # ------------------------------------------------------------------ lifecycle

    @property
    def port(self) -> int:
        """The TCP port the server listens on (after `start()`)."""
        if self._server is None:
            raise RuntimeError("the P4Runtime server is not started")
        return self._port

    @property
    def address(self) -> str:
        """host:port actually bound, for clients (e.g. "127.0.0.1:50123")."""
        host = self.requested_address.rsplit(":", 1)[0]
        return f"{host}:{self.port}"

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("the P4Runtime server is already started")
        server = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=self.max_streams + 8, thread_name_prefix="p4runtime"
            ),
            options=[("grpc.so_reuseport", 0)],  # a second server on the port must fail
        )
        p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(_Servicer(self), server)
        try:
            port = server.add_insecure_port(self.requested_address)
        except RuntimeError:
            port = 0
        if not port:
            server.stop(None)
            raise self._bind_error()
        server.start()
        self._server, self._port = server, port
        LOG.info("P4Runtime server for device %d listening on %s", self.device_id, self.address)
        return self

    def _bind_error(self) -> OSError:
        host, _, port_text = self.requested_address.rpartition(":")
        code, reason = errno.EADDRNOTAVAIL, "cannot bind to it"
        with contextlib.suppress(ValueError), socket.socket() as probe:
            try:
                probe.bind((host.strip("[]"), int(port_text)))
            except OSError as err:
                code = err.errno or code
                reason = "address already in use" if code == errno.EADDRINUSE else str(err)
        return OSError(
            code,
            f"P4Runtime server cannot listen on {self.requested_address}: {reason} "
            "(another P4Runtime server or simple_switch_grpc on that port? use port 0 "
            "to pick a free one)",
        )

    def stop(self, grace: float | None = None) -> None:
        """Stop serving; open RPCs get `grace` seconds to finish (None: cancel them now)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.stop(grace).wait()
        with self._lock:
            for client in list(self._clients):
                self._drop_client(client)

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        if self._server is None:
            return True
        return bool(self._server.wait_for_termination(timeout))

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop(None)

    # ------------------------------------------------------------------ common checks

    def _check_device(self, device_id: int) -> None:
        if device_id != self.device_id:
            raise P4RuntimeFailure(
                grpc.StatusCode.NOT_FOUND,
                f"unknown device_id {device_id}: this switch is device {self.device_id}",
            )

    @staticmethod
    def _check_role(role: str, role_id: int = 0) -> None:
        if role or role_id:
            raise P4RuntimeFailure(
                grpc.StatusCode.NOT_FOUND,
                f"unknown role {role or role_id!r}: this switch only has the default role "
                "(leave role unset)",
            )

    def _check_primary(self, election_id: p4runtime_pb2.Uint128 | None) -> None:
        primary = self._primary
        if primary is None or election_id is None or _u128(election_id) != primary.election_id:
            given = "none" if election_id is None else str(_u128(election_id))
            who = (
                f"the primary has election id {primary.election_id}"
                if primary is not None
                else "there is no primary controller (open a StreamChannel and send a "
                "MasterArbitrationUpdate)"
            )
            raise P4RuntimeFailure(
                grpc.StatusCode.PERMISSION_DENIED,
                f"not the primary controller: request election id {given}, {who}",
            )

    def _require_config(self) -> _Config:
        if self._config is None:
            raise P4RuntimeFailure(grpc.StatusCode.FAILED_PRECONDITION, NO_PIPELINE)
        return self._config

    # ------------------------------------------------------------------ arbitration

    def _open_stream(self) -> _Client | None:
        with self._lock:
            if self._open_streams >= self.max_streams:
                return None
            self._open_streams += 1
            return _Client(next(self._numbers))

    def _close_stream(self, client: _Client) -> None:
        with self._lock:
            self._open_streams -= 1
            self._drop_client(client)

    def _drop_client(self, client: _Client) -> None:
        client.closed = True
        client.outbox.put(_EOF)
        if client not in self._clients:
            return
        self._clients.remove(client)
        LOG.debug("%s left", client.label())
        if client is self._primary:
            self._primary = None
            if self.arbitration == "promote":
                self._primary = self._highest_live()
            self._notify_all()

    def _highest_live(self) -> _Client | None:
        candidates = [c for c in self._clients if c.election_id is not None]
        return max(candidates, key=lambda c: c.election_id or 0, default=None)

    def _arbitrate(self, client: _Client, update: p4runtime_pb2.MasterArbitrationUpdate) -> None:
        """Rules of P4Runtime spec §5.4; raises P4RuntimeFailure to end the stream."""
        with self._lock:
            if client.closed:
                return
            if update.role.name or update.role.id:
                raise P4RuntimeFailure(
                    grpc.StatusCode.UNIMPLEMENTED,
                    f"role {update.role.name or update.role.id!r}: this switch only supports "
                    "the default role (leave role unset)",
                )
            eid = _u128(update.election_id) if update.HasField("election_id") else None
            if not client.arbitrated:
                self._check_device(update.device_id)
            elif update.device_id != client.device_id:
                raise P4RuntimeFailure(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"this stream is for device {client.device_id}, not {update.device_id}",
                )
            if eid is not None and any(
                c is not client and c.election_id == eid for c in self._clients
            ):
                raise _invalid(
                    f"Election id {eid} is already used by another live controller "
                    "for this device and role"
                )
            if not client.arbitrated:
                client.arbitrated, client.device_id = True, update.device_id
                self._clients.append(client)
            client.election_id = eid
            LOG.debug("%s arbitration", client.label())
            self._elect(client)

    def _elect(self, sender: _Client) -> None:
        old = self._primary
        eid = sender.election_id
        if self.arbitration == "promote":
            self._primary = self._highest_live()
            if self._primary is not old or sender is self._primary:
                self._notify_all()
            else:
                self._notify(sender)
            return
        # strict: primary iff election id >= the highest ever seen for this device and role
        past = self._highest_election_id
        if eid is not None and (past is None or eid >= past):
            self._primary, self._highest_election_id = sender, eid
            self._notify_all()  # others first, then the new primary
        elif old is sender:  # the primary downgraded itself: no primary any more
            self._primary = None
            self._notify_all()
        else:
            self._notify(sender)

    def _arbitration_message(self, client: _Client) -> p4runtime_pb2.StreamMessageResponse:
        update = p4runtime_pb2.MasterArbitrationUpdate(device_id=self.device_id)
        primary = self._primary
        if self.arbitration == "promote":
            shown = primary.election_id if primary is not None else None
        else:
            shown = self._highest_election_id
        if shown is not None:
            update.election_id.CopyFrom(_to_u128(shown))
        if client is primary:
            update.status.code = grpc.StatusCode.OK.value[0]
            update.status.message = "is primary"
        elif primary is not None:
            update.status.code = grpc.StatusCode.ALREADY_EXISTS.value[0]
            update.status.message = f"is backup: the primary has election id {shown}"
        else:
            update.status.code = grpc.StatusCode.NOT_FOUND.value[0]
            update.status.message = (
                "no primary: send a MasterArbitrationUpdate with an election id "
                + (f">= {shown}" if shown is not None else "")
                + " to become primary"
            )
        return p4runtime_pb2.StreamMessageResponse(arbitration=update)

    def _notify(self, client: _Client) -> None:
        client.outbox.put(self._arbitration_message(client))

    def _notify_all(self) -> None:
        for client in self._clients:
            if client is not self._primary:
                self._notify(client)
        if self._primary is not None:
            self._notify(self._primary)

    def _stream_message(self, client: _Client, request: p4runtime_pb2.StreamMessageRequest) -> None:
        kind = request.WhichOneof("update")
        if kind == "arbitration":
            self._arbitrate(client, request.arbitration)
            return
        error = p4runtime_pb2.StreamError(space=ERROR_SPACE)
        with self._lock:
            is_primary = client is self._primary
        if kind == "packet":
            error.packet_out.packet_out.CopyFrom(request.packet)
            if not is_primary:
                error.canonical_code = grpc.StatusCode.PERMISSION_DENIED.value[0]
                error.message = "PacketOut is only accepted from the primary controller"
            else:
                error.canonical_code = grpc.StatusCode.UNIMPLEMENTED.value[0]
                error.message = (
                    "ina.p4 has no controller (CPU) port and no packet_out header: "
                    "PacketOut is not supported; the packet was dropped"
                )
        elif kind == "digest_ack":
            error.digest_list_ack.digest_list_ack.CopyFrom(request.digest_ack)
            error.canonical_code = grpc.StatusCode.INVALID_ARGUMENT.value[0]
            error.message = "ina.p4 has no digests"
        else:
            if kind == "other":
                error.other.other.CopyFrom(request.other)
            else:
                error.other.SetInParent()
            error.canonical_code = grpc.StatusCode.UNIMPLEMENTED.value[0]
            error.message = f"unsupported stream message {kind!r}"
        client.outbox.put(p4runtime_pb2.StreamMessageResponse(error=error))

    def stream_channel(
        self, requests: Iterator[p4runtime_pb2.StreamMessageRequest], context: Any
    ) -> Iterator[p4runtime_pb2.StreamMessageResponse]:
        client = self._open_stream()
        if client is None:
            context.set_code(grpc.StatusCode.RESOURCE_EXHAUSTED)
            context.set_details(f"too many StreamChannels (at most {self.max_streams})")
            return
        context.add_callback(lambda: client.outbox.put(_EOF))

        def read() -> None:
            try:
                for request in requests:
                    if client.closed:
                        break
                    try:
                        self._stream_message(client, request)
                    except P4RuntimeFailure as failure:
                        client.outbox.put(_Terminate(failure.code, failure.message))
                        break
            except Exception:  # the RPC ended under us (cancelled, server stopping)
                LOG.debug("%s: reader ended", client.label(), exc_info=True)
            finally:
                client.outbox.put(_EOF)

        reader = threading.Thread(target=read, name=f"p4rt-stream-{client.number}", daemon=True)
        reader.start()
        try:
            while True:
                item = client.outbox.get()
                if item is _EOF:
                    return
                if isinstance(item, _Terminate):
                    LOG.info("%s closed: %s", client.label(), item.message)
                    context.set_code(item.code)
                    context.set_details(item.message)
                    return
                assert isinstance(item, p4runtime_pb2.StreamMessageResponse)
                yield item
        finally:
            self._close_stream(client)

    # ------------------------------------------------------------------ pipeline config

    def set_pipeline_config(
        self, request: p4runtime_pb2.SetForwardingPipelineConfigRequest
    ) -> None:
        with self._lock:
            self._check_device(request.device_id)
            self._check_role(request.role, request.role_id)
            self._check_primary(request.election_id if request.HasField("election_id") else None)
            action = request.action
            has_config = request.HasField("config")
            if action == SetAction.COMMIT:
                if has_config:
                    raise _invalid("COMMIT takes no config: it realizes the last saved one")
                if not self._saved_uncommitted:
                    raise P4RuntimeFailure(
                        grpc.StatusCode.NOT_FOUND,
                        "COMMIT: no saved config (send VERIFY_AND_SAVE first)",
                    )
                self._saved_uncommitted = False  # the saved config is already the one in force
                return
            if action not in (
                SetAction.VERIFY,
                SetAction.VERIFY_AND_SAVE,
                SetAction.VERIFY_AND_COMMIT,
                SetAction.RECONCILE_AND_COMMIT,
            ):
                raise _invalid(f"unsupported SetForwardingPipelineConfig action {action}")
            name = SetAction.Name(action)
            if not has_config or not request.config.HasField("p4info"):
                raise _invalid(f"{name} needs a config with a P4Info")
            diffs = p4info_diff(request.config.p4info, self._committed)
            if diffs:
                shown = "; ".join(_explain_diff(d) for d in diffs[:5])
                more = f" (and {len(diffs) - 5} more)" if len(diffs) > 5 else ""
                raise _invalid(
                    "this softswitch only realizes p4/ina.p4; the P4Info differs from "
                    f"p4/ina.p4info.txt: {shown}{more}"
                )
            if action == SetAction.VERIFY:
                return
            config = request.config
            cookie = config.cookie.cookie if config.HasField("cookie") else None
            self._config = _Config(config.p4info, config.p4_device_config, cookie)
            self._saved_uncommitted = action == SetAction.VERIFY_AND_SAVE
            if action == SetAction.VERIFY_AND_COMMIT:
                self._clear_forwarding_state()
            LOG.info("pipeline config set (%s, cookie %s)", name, cookie)

    def _clear_forwarding_state(self) -> None:
        p = self.pipeline
        with p.lock:
            for table in self._schema.tables.values():
                state = p.tables[table.name]
                state.entries.clear()
                state.default = self._action_call(
                    table, table.initial_default.action_id, self._initial_params(table), True
                )
            p.multicast.groups.clear()
            p.reset_state()
            self._entry_meta.clear()
            self._groups.clear()

    def _initial_params(self, table: _Table) -> dict[int, bytes]:
        return {a.param_id: a.value for a in table.initial_default.arguments}

    def get_pipeline_config(
        self, request: p4runtime_pb2.GetForwardingPipelineConfigRequest
    ) -> p4runtime_pb2.GetForwardingPipelineConfigResponse:
        with self._lock:
            self._check_device(request.device_id)
            kind = request.response_type
            if kind not in ResponseType.values():
                raise _invalid(f"unknown response_type {kind}")
            response = p4runtime_pb2.GetForwardingPipelineConfigResponse()
            config = self._config
            if config is None:
                return response  # spec: the config field is left unset
            out = response.config
            out.SetInParent()
            if config.cookie is not None:
                out.cookie.cookie = config.cookie
            if kind in (ResponseType.ALL, ResponseType.P4INFO_AND_COOKIE):
                out.p4info.CopyFrom(config.p4info)
            if kind in (ResponseType.ALL, ResponseType.DEVICE_CONFIG_AND_COOKIE):
                out.p4_device_config = config.device_config
            return response

    # ------------------------------------------------------------------ write

    def write(self, request: p4runtime_pb2.WriteRequest) -> list[P4RuntimeFailure | None] | None:
        """Apply a batch; None if all updates succeeded, else one result per update."""
        with self._lock:
            self._check_device(request.device_id)
            self._check_role(request.role, request.role_id)
            self._check_primary(request.election_id if request.HasField("election_id") else None)
            self._require_config()
            if request.atomicity not in Atomicity.values():
                raise _invalid(f"unknown atomicity {request.atomicity}")
            atomic = request.atomicity != Atomicity.CONTINUE_ON_ERROR
            results: list[P4RuntimeFailure | None] = []
            undos: list[Undo] = []
            failed = False
            with self.pipeline.lock:
                for index, update in enumerate(request.updates):
                    if failed and atomic:
                        results.append(
                            P4RuntimeFailure(
                                grpc.StatusCode.ABORTED,
                                f"not attempted: an earlier update failed and atomicity is "
                                f"{Atomicity.Name(request.atomicity)}",
                            )
                        )
                        continue
                    try:
                        undos.append(self._apply(update))
                        results.append(None)
                    except P4RuntimeFailure as failure:
                        LOG.debug("update %d refused: %s", index, failure.message)
                        results.append(failure)
                        failed = True
                    except StateError as err:
                        results.append(_from_state_error(err))
                        failed = True
                if failed and atomic:
                    for undo in reversed(undos):
                        undo()
                    results = [
                        r
                        if r is not None
                        else P4RuntimeFailure(
                            grpc.StatusCode.ABORTED, "rolled back: another update failed"
                        )
                        for r in results
                    ]
            return results if failed else None

    def _apply(self, update: p4runtime_pb2.Update) -> Undo:
        kind = update.entity.WhichOneof("entity")
        utype = update.type
        if utype not in (UpdateType.INSERT, UpdateType.MODIFY, UpdateType.DELETE):
            raise _invalid("update type must be INSERT, MODIFY or DELETE")
        entity = update.entity
        if kind == "table_entry":
            return self._write_table_entry(utype, entity.table_entry)
        if kind == "packet_replication_engine_entry":
            return self._write_pre(utype, entity.packet_replication_engine_entry)
        if kind == "counter_entry":
            return self._write_counter(utype, entity.counter_entry)
        if kind == "direct_counter_entry":
            return self._write_direct_counter(utype, entity.direct_counter_entry)
        if kind == "register_entry":
            raise P4RuntimeFailure(
                grpc.StatusCode.UNIMPLEMENTED,
                "RegisterEntry writes are not supported (registers hold the aggregation state)",
            )
        if kind is None:
            raise _invalid("the update has no entity")
        raise _invalid(f"{kind}: ina.p4 has no such objects")

    # .................................................................. table entries

    def _check_table_entry_fields(self, table: _Table, te: p4runtime_pb2.TableEntry) -> None:
        if te.is_const:
            raise _invalid(f"{table.name}: is_const must be false in a write")
        if te.priority:
            raise _invalid(
                f"{table.name}: priority must be 0 (the table has only exact/LPM fields), "
                f"got {te.priority}"
            )
        if te.HasField("meter_config") or te.HasField("meter_counter_data"):
            raise _invalid(f"{table.name}: the table has no direct meter")
        if te.idle_timeout_ns or te.HasField("time_since_last_hit"):
            raise _invalid(f"{table.name}: the table does not support idle timeouts")
        if te.HasField("counter_data") and not table.direct_counter_id:
            raise _invalid(f"{table.name}: the table has no direct counter (drop counter_data)")

    def _parse_match(
        self, table: _Table, matches: Iterable[p4runtime_pb2.FieldMatch]
    ) -> tuple[int, ...]:
        by_id: dict[int, p4runtime_pb2.FieldMatch] = {}
        fields = {f.id: f for f in table.fields}
        for fm in matches:
            f = fields.get(fm.field_id)
            if f is None:
                known = ", ".join(f"{x.id} ({x.name})" for x in table.fields)
                raise _invalid(
                    f"{table.name}: unknown match field id {fm.field_id}; fields are {known}"
                )
            if fm.field_id in by_id:
                raise _invalid(f"{table.name}: match field {f.name} given twice")
            expected = "exact" if f.match_type == MatchType.EXACT else "lpm"
            got = fm.WhichOneof("field_match_type")
            if got != expected:
                raise _invalid(
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
                    raise _invalid(f"{what} (exact) is missing; exact fields cannot be omitted")
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
                raise _invalid(f"{what}: prefix_len {plen} not in 1..{f.bitwidth}{hint}")
            value = decode_bytes(given.lpm.value, f.bitwidth, what)
            host_bits = value & ((1 << (f.bitwidth - plen)) - 1)
            if host_bits:
                raise _invalid(
                    f"{what}: {value:#x}/{plen} has bits set past the prefix; "
                    f"use {value & ~host_bits:#x}/{plen}"
                )
            key += [value, plen]
        return tuple(key)

    def _action_call(
        self, table: _Table, action_id: int, params: dict[int, bytes], default: bool
    ) -> ActionCall:
        action = self._schema.action(action_id)
        scope = table.scopes.get(action_id)
        if scope is None:
            allowed = ", ".join(self._schema.actions[a].name for a in table.scopes)
            raise _invalid(
                f"{table.name}: action {action.name} is not an action of this table "
                f"(allowed: {allowed})"
            )
        if not default and scope == Scope.DEFAULT_ONLY:
            raise P4RuntimeFailure(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{table.name}: action {action.name} is @defaultonly; "
                "it cannot be an entry's action",
            )
        if default and scope == Scope.TABLE_ONLY:
            raise P4RuntimeFailure(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{table.name}: action {action.name} is @tableonly; it cannot be the default",
            )
        known = {pid for pid, _, _ in action.params}
        extra = sorted(set(params) - known)
        if extra:
            raise _invalid(
                f"{action.name}: unknown param id(s) {extra}; params are "
                + ", ".join(f"{pid} ({n})" for pid, n, _ in action.params)
            )
        values: list[int] = []
        for pid, pname, width in action.params:
            if pid not in params:
                raise _invalid(f"{action.name}: param {pname} (id {pid}) is missing")
            values.append(decode_bytes(params[pid], width, f"{action.name}: param {pname}"))
        call = ActionCall(action.alias, tuple(values))
        self._check_semantics(call)
        return call

    def _check_semantics(self, call: ActionCall) -> None:
        """Values bmv2 would accept but that would make the softswitch corrupt its state."""
        if call.name == "agg_node":
            base, pool_size, fanin = call.params[:3]
            slots = self.pipeline.registers.slots
            if base + pool_size > slots:
                raise _invalid(
                    f"agg_node: base {base} + pool_size {pool_size} = {base + pool_size} runs "
                    f"past the register file ({slots} slots): lower base or pool_size"
                )
            if not 1 <= fanin <= MAX_FANIN:
                raise _invalid(
                    f"agg_node: fanin {fanin} not in 1..{MAX_FANIN} "
                    "(the per-slot bitmap register is 32 bits wide)"
                )
        elif call.name == "set_child":
            (index,) = call.params
            if index >= MAX_FANIN:
                raise _invalid(
                    f"set_child: index {index} not in 0..{MAX_FANIN - 1} "
                    "(the per-slot bitmap register is 32 bits wide)"
                )

    def _entry_action(
        self, table: _Table, te: p4runtime_pb2.TableEntry, default: bool
    ) -> ActionCall:
        kind = te.action.WhichOneof("type")
        if kind != "action":
            raise _invalid(f"{table.name}: a direct table takes an action, not {kind}")
        action = te.action.action
        params: dict[int, bytes] = {}
        for p in action.params:
            if p.param_id in params:
                raise _invalid(f"{table.name}: action param id {p.param_id} given twice")
            params[p.param_id] = p.value
        return self._action_call(table, action.action_id, params, default)

    @staticmethod
    def _counter_values(data: p4runtime_pb2.CounterData, what: str) -> tuple[int, int]:
        if data.packet_count < 0 or data.byte_count < 0:
            raise _invalid(f"{what}: counter values must not be negative")
        return data.packet_count, data.byte_count

    def _write_table_entry(self, utype: int, te: p4runtime_pb2.TableEntry) -> Undo:
        if te.table_id == 0:
            raise _invalid("table_id 0 (wildcard) is only valid in a read")
        table = self._schema.table(te.table_id)
        self._check_table_entry_fields(table, te)
        state = self.pipeline.tables[table.name]
        meta = (te.metadata, te.controller_metadata)
        if te.is_default_action:
            return self._write_default(utype, table, state, te, meta)
        key = self._parse_match(table, te.match)
        meta_key = (table.name, key)
        old_meta = self._entry_meta.get(meta_key)

        def restore_meta() -> None:
            if old_meta is None:
                self._entry_meta.pop(meta_key, None)
            else:
                self._entry_meta[meta_key] = old_meta

        if utype == UpdateType.DELETE:
            deleted = state.entries.get(key)
            if deleted is None:
                raise P4RuntimeFailure(
                    grpc.StatusCode.NOT_FOUND, f"{table.name}: no entry with key {key}"
                )
            state.delete(key)
            self._entry_meta.pop(meta_key, None)

            def undo_delete() -> None:
                state.entries[key] = deleted
                restore_meta()

            return undo_delete
        counters = (
            self._counter_values(te.counter_data, table.name)
            if te.HasField("counter_data")
            else None
        )
        if utype == UpdateType.INSERT:
            if not te.HasField("action"):
                raise _invalid(f"{table.name}: INSERT needs an action")
            packets, nbytes = counters or (0, 0)
            try:
                state.insert(TableEntry(key, self._entry_action(table, te, False), packets, nbytes))
            except StateError as err:
                raise _from_state_error(err) from None
            self._entry_meta[meta_key] = meta

            def undo_insert() -> None:
                state.entries.pop(key, None)
                restore_meta()

            return undo_insert
        # MODIFY
        call = self._entry_action(table, te, False) if te.HasField("action") else None
        entry = state.entries.get(key)
        if entry is None:
            raise P4RuntimeFailure(
                grpc.StatusCode.NOT_FOUND, f"{table.name}: no entry with key {key} to modify"
            )
        before = (entry.action, entry.packets, entry.bytes)
        if call is not None:
            entry.action = call
            self._entry_meta[meta_key] = meta
        if counters is not None:
            entry.packets, entry.bytes = counters

        def undo_modify() -> None:
            entry.action, entry.packets, entry.bytes = before
            restore_meta()

        return undo_modify

    def _write_default(
        self,
        utype: int,
        table: _Table,
        state: ExactTable,
        te: p4runtime_pb2.TableEntry,
        meta: tuple[bytes, int],
    ) -> Undo:
        if utype != UpdateType.MODIFY:
            raise _invalid(
                f"{table.name}: the default entry can only be modified (INSERT and DELETE "
                "are not allowed)"
            )
        if te.match:
            raise _invalid(f"{table.name}: a default entry has no match fields")
        if table.const_default_id:
            const = self._schema.actions[table.const_default_id].name
            raise P4RuntimeFailure(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{table.name}: the default action is const ({const}) and cannot be modified",
            )
        if te.HasField("counter_data"):
            raise _invalid(f"{table.name}: the default entry has no direct counter here")
        if te.HasField("action"):
            call = self._entry_action(table, te, True)
            new_meta: tuple[bytes, int] | None = meta
        else:  # reset to the P4 program's default
            call = self._action_call(
                table, table.initial_default.action_id, self._initial_params(table), True
            )
            new_meta = None
        old_call = state.default
        meta_key = (table.name, None)
        old_meta = self._entry_meta.get(meta_key)
        try:
            state.set_default(call)
        except StateError as err:
            raise _from_state_error(err) from None
        if new_meta is None:
            self._entry_meta.pop(meta_key, None)
        else:
            self._entry_meta[meta_key] = new_meta

        def undo() -> None:
            state.default = old_call
            if old_meta is None:
                self._entry_meta.pop(meta_key, None)
            else:
                self._entry_meta[meta_key] = old_meta

        return undo

    # .................................................................. multicast

    def _write_pre(self, utype: int, pre: p4runtime_pb2.PacketReplicationEngineEntry) -> Undo:
        kind = pre.WhichOneof("type")
        if kind == "clone_session_entry":
            raise P4RuntimeFailure(
                grpc.StatusCode.UNIMPLEMENTED,
                "clone sessions are not supported: ina.p4 never clones packets",
            )
        if kind != "multicast_group_entry":
            raise _invalid("PacketReplicationEngineEntry: set multicast_group_entry")
        mg = pre.multicast_group_entry
        mgid = mg.multicast_group_id
        if mgid == 0:
            raise _invalid("multicast_group_id 0 is reserved (wildcard read / no multicast)")
        if mgid > MAX_MULTICAST_GROUP:
            raise _invalid(f"multicast_group_id {mgid} does not fit v1model's 16-bit mcast_grp")
        groups = self.pipeline.multicast.groups
        old = groups.get(mgid)
        old_cache = self._groups.get(mgid)

        def undo() -> None:
            if old is None:
                groups.pop(mgid, None)
            else:
                groups[mgid] = old
            if old_cache is None:
                self._groups.pop(mgid, None)
            else:
                self._groups[mgid] = old_cache

        if utype == UpdateType.DELETE:
            try:
                self.pipeline.multicast.delete(mgid)
            except StateError as err:
                raise _from_state_error(err) from None
            self._groups.pop(mgid, None)
            return undo
        replicas: list[tuple[int, int]] = []
        forms: list[bool] = []
        for n, r in enumerate(mg.replicas):
            what = f"multicast group {mgid}: replica {n}"
            form = r.WhichOneof("port_kind")
            if form is None:
                raise _invalid(f"{what} has no port (set port or egress_port)")
            port = decode_bytes(r.port, 32, f"{what} port") if form == "port" else r.egress_port
            if port >= DROP_PORT:
                raise _invalid(
                    f"{what}: port {port} is not a front-panel port of this v1model switch "
                    f"(ports are 0..{DROP_PORT - 1}; {DROP_PORT} is the drop port)"
                )
            if r.backup_replicas:
                raise P4RuntimeFailure(
                    grpc.StatusCode.UNIMPLEMENTED, f"{what}: backup replicas are not supported"
                )
            if r.instance > MAX_INSTANCE:
                raise _invalid(
                    f"{what}: instance {r.instance} does not fit v1model's 16-bit egress_rid"
                )
            if (port, r.instance) in replicas:
                raise _invalid(f"{what}: (port {port}, instance {r.instance}) is repeated")
            replicas.append((port, r.instance))
            forms.append(form == "port")
        try:
            if utype == UpdateType.INSERT:
                self.pipeline.multicast.insert(mgid, replicas)
            else:
                self.pipeline.multicast.modify(mgid, replicas)
        except StateError as err:
            raise _from_state_error(err) from None
        self._groups[mgid] = _GroupCache(list(replicas), forms, mg.metadata)
        return undo

    # .................................................................. counters

    def _counter_index(self, counter: _Counter, entry: p4runtime_pb2.CounterEntry) -> int | None:
        if not entry.HasField("index"):
            return None
        index = entry.index.index
        if index < 0:
            raise _invalid(f"{counter.name}: negative index {index}")
        if index >= counter.size:
            raise P4RuntimeFailure(
                grpc.StatusCode.OUT_OF_RANGE,
                f"{counter.name}: index {index} out of range (size {counter.size})",
            )
        return index

    def _write_counter(self, utype: int, ce: p4runtime_pb2.CounterEntry) -> Undo:
        if utype != UpdateType.MODIFY:
            raise _invalid("CounterEntry: only MODIFY is allowed")
        if ce.counter_id == 0:
            raise _invalid("CounterEntry: counter_id 0 (wildcard) is only valid in a read")
        counter = self._schema.counter(ce.counter_id)
        index = self._counter_index(counter, ce)
        state = self.pipeline.counters[counter.name]
        if not ce.HasField("data"):
            return lambda: None
        packets, nbytes = self._counter_values(ce.data, counter.name)
        old_packets, old_bytes = list(state.packets), list(state.bytes)
        indices = range(counter.size) if index is None else (index,)
        for i in indices:
            state.packets[i], state.bytes[i] = packets, nbytes

        def undo() -> None:
            state.packets[:], state.bytes[:] = old_packets, old_bytes

        return undo

    def _direct_table(self, te: p4runtime_pb2.TableEntry, what: str) -> _Table:
        table = self._schema.table(te.table_id)
        if not table.direct_counter_id:
            with_counter = [t.name for t in self._schema.tables.values() if t.direct_counter_id]
            raise _invalid(
                f"{what}: table {table.name} has no direct counter (tables with one: "
                f"{', '.join(with_counter)})"
            )
        return table

    def _write_direct_counter(self, utype: int, dce: p4runtime_pb2.DirectCounterEntry) -> Undo:
        if utype != UpdateType.MODIFY:
            raise _invalid("DirectCounterEntry: only MODIFY is allowed")
        table = self._direct_table(dce.table_entry, "DirectCounterEntry")
        if dce.table_entry.is_default_action:
            raise _invalid(f"{table.name}: the default entry has no direct counter here")
        key = self._parse_match(table, dce.table_entry.match)
        entry = self.pipeline.tables[table.name].entries.get(key)
        if entry is None:
            raise P4RuntimeFailure(
                grpc.StatusCode.NOT_FOUND, f"{table.name}: no entry with key {key}"
            )
        if not dce.HasField("data"):
            return lambda: None
        before = (entry.packets, entry.bytes)
        entry.packets, entry.bytes = self._counter_values(dce.data, table.name)

        def undo() -> None:
            entry.packets, entry.bytes = before

        return undo

    # ------------------------------------------------------------------ read

    def read(
        self, request: p4runtime_pb2.ReadRequest
    ) -> tuple[list[p4runtime_pb2.Entity], list[P4RuntimeFailure | None]]:
        """Entities found, and one result per requested entity (None: fine)."""
        with self._lock:
            self._check_device(request.device_id)
            self._check_role(request.role)
            self._require_config()
            found: list[p4runtime_pb2.Entity] = []
            results: list[P4RuntimeFailure | None] = []
            with self.pipeline.lock:
                for entity in request.entities:
                    try:
                        found += self._read_entity(entity)
                        results.append(None)
                    except P4RuntimeFailure as failure:
                        results.append(failure)
            return found, results

    def _read_entity(self, entity: p4runtime_pb2.Entity) -> list[p4runtime_pb2.Entity]:
        kind = entity.WhichOneof("entity")
        if kind == "table_entry":
            return self._read_table_entries(entity.table_entry)
        if kind == "counter_entry":
            return self._read_counters(entity.counter_entry)
        if kind == "direct_counter_entry":
            return self._read_direct_counters(entity.direct_counter_entry)
        if kind == "packet_replication_engine_entry":
            return self._read_pre(entity.packet_replication_engine_entry)
        if kind == "register_entry":
            raise P4RuntimeFailure(
                grpc.StatusCode.UNIMPLEMENTED, "RegisterEntry reads are not supported"
            )
        if kind is None:
            raise _invalid("the entity to read is not set")
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
            raise _invalid(f"{kind}: unknown id {object_id} (ina.p4 has no such objects)")
        return []  # a wildcard read of objects the program does not have

    def _encode_action(self, table: _Table, call: ActionCall) -> p4runtime_pb2.Action:
        action = self._schema.action_for_alias(table, call.name)
        if len(call.params) != len(action.params):
            raise P4RuntimeFailure(
                grpc.StatusCode.INTERNAL, f"{table.name}: bad parameters for {action.name}"
            )
        return p4runtime_pb2.Action(
            action_id=action.id,
            params=[
                p4runtime_pb2.Action.Param(param_id=pid, value=encode_bytes(value))
                for (pid, _, _), value in zip(action.params, call.params, strict=True)
            ],
        )

    def _encode_match(self, table: _Table, key: tuple[int, ...]) -> list[p4runtime_pb2.FieldMatch]:
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

    def _read_table_entries(self, te: p4runtime_pb2.TableEntry) -> list[p4runtime_pb2.Entity]:
        if te.table_id == 0:
            if te.match or te.priority or te.HasField("action") or te.metadata:
                raise _invalid("a read of all tables (table_id 0) takes no other filter")
            tables = list(self._schema.tables.values())
        else:
            tables = [self._schema.table(te.table_id)]
        out: list[p4runtime_pb2.Entity] = []
        if te.is_default_action:
            if te.match:
                raise _invalid("a default-entry read takes no match fields")
            for table in tables:
                state = self.pipeline.tables[table.name]
                entry = p4runtime_pb2.TableEntry(
                    table_id=table.id,
                    is_default_action=True,
                    action=p4runtime_pb2.TableAction(
                        action=self._encode_action(table, state.default)
                    ),
                )
                meta = self._entry_meta.get((table.name, None))
                if meta is not None:
                    entry.metadata, entry.controller_metadata = meta
                out.append(p4runtime_pb2.Entity(table_entry=entry))
            return out
        key = self._parse_match(tables[0], te.match) if te.match else None
        if te.priority:
            return []  # no entry of these tables has a priority
        action_filter = te.action.action.action_id if te.HasField("action") else 0
        with_counters = te.HasField("counter_data")
        for table in tables:
            entries = self.pipeline.tables[table.name].entries
            if key is not None:
                selected = [entries[key]] if key in entries else []
            else:
                selected = [entries[k] for k in sorted(entries)]
            for state_entry in selected:
                entry = p4runtime_pb2.TableEntry(
                    table_id=table.id,
                    match=self._encode_match(table, state_entry.key),
                    action=p4runtime_pb2.TableAction(
                        action=self._encode_action(table, state_entry.action)
                    ),
                )
                if action_filter and entry.action.action.action_id != action_filter:
                    continue
                meta = self._entry_meta.get((table.name, state_entry.key))
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

    def _read_counters(self, ce: p4runtime_pb2.CounterEntry) -> list[p4runtime_pb2.Entity]:
        if ce.counter_id == 0:
            if ce.HasField("index"):
                raise _invalid("CounterEntry: an index needs a counter_id")
            counters = list(self._schema.counters.values())
        else:
            counters = [self._schema.counter(ce.counter_id)]
        out: list[p4runtime_pb2.Entity] = []
        for counter in counters:
            index = self._counter_index(counter, ce)
            state = self.pipeline.counters[counter.name]
            for i in range(counter.size) if index is None else (index,):
                out.append(
                    p4runtime_pb2.Entity(
                        counter_entry=p4runtime_pb2.CounterEntry(
                            counter_id=counter.id,
                            index=p4runtime_pb2.Index(index=i),
                            data=p4runtime_pb2.CounterData(
                                packet_count=state.packets[i], byte_count=state.bytes[i]
                            ),
                        )
                    )
                )
        return out

    def _read_direct_counters(
        self, dce: p4runtime_pb2.DirectCounterEntry
    ) -> list[p4runtime_pb2.Entity]:
        te = dce.table_entry
        if te.table_id == 0:
            if te.match:
                raise _invalid("DirectCounterEntry: match fields need a table_id")
            tables = [t for t in self._schema.tables.values() if t.direct_counter_id]
        else:
            tables = [self._direct_table(te, "DirectCounterEntry")]
        out: list[p4runtime_pb2.Entity] = []
        for table in tables:
            entries = self.pipeline.tables[table.name].entries
            if te.match:
                key = self._parse_match(table, te.match)
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
                                table_id=table.id, match=self._encode_match(table, entry.key)
                            ),
                            data=p4runtime_pb2.CounterData(
                                packet_count=entry.packets, byte_count=entry.bytes
                            ),
                        )
                    )
                )
        return out

    def _read_pre(
        self, pre: p4runtime_pb2.PacketReplicationEngineEntry
    ) -> list[p4runtime_pb2.Entity]:
        kind = pre.WhichOneof("type")
        if kind == "clone_session_entry":
            return []  # no clone sessions exist (writing them is refused)
        if kind is None:
            raise _invalid("PacketReplicationEngineEntry: set multicast_group_entry to read")
        mgid = pre.multicast_group_entry.multicast_group_id
        groups = self.pipeline.multicast.groups
        ids = sorted(groups) if mgid == 0 else [mgid] if mgid in groups else []
        out: list[p4runtime_pb2.Entity] = []
        for gid in ids:
            replicas = groups[gid]
            cache = self._groups.get(gid)
            if cache is None or cache.replicas != replicas:
                cache = _GroupCache(list(replicas), [False] * len(replicas), b"")
            entry = p4runtime_pb2.MulticastGroupEntry(
                multicast_group_id=gid, metadata=cache.metadata
            )
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


# ---------------------------------------------------------------------- gRPC glue


def _explain_diff(diff: str) -> str:
    """p4info_diff speaks of built/committed; here the given P4Info is checked against ina.p4."""
    return (
        diff.replace("only in built:", "only in the given P4Info:")
        .replace("only in committed:", "missing from the given P4Info:")
        .replace(": built ", ": given ", 1)
        .replace(" != committed ", " != expected ", 1)
    )


def _batch_status(
    results: list[P4RuntimeFailure | None], what: str
) -> tuple[Any, str, status_pb2.Status]:
    failures = [(i, r) for i, r in enumerate(results) if r is not None]
    first_index, first = failures[0]
    message = (
        f"{what} failure: {len(failures)} of {len(results)} failed; "
        f"#{first_index}: {first.code.name}: {first.message}"
    )
    status = status_pb2.Status(code=grpc.StatusCode.UNKNOWN.value[0], message=message)
    for result in results:
        error = p4runtime_pb2.Error(canonical_code=grpc.StatusCode.OK.value[0])
        if result is not None:
            error = p4runtime_pb2.Error(
                canonical_code=result.code.value[0], message=result.message, space=ERROR_SPACE
            )
        detail = any_pb2.Any()
        detail.Pack(error)
        status.details.append(detail)
    return grpc.StatusCode.UNKNOWN, message, status


class _Servicer(p4runtime_pb2_grpc.P4RuntimeServicer):
    """The P4Runtime service methods, called by grpc's thread pool."""

    def __init__(self, server: P4RuntimeServer) -> None:
        self.server = server

    @staticmethod
    def _fail(context: Any, failure: P4RuntimeFailure) -> NoReturn:
        context.abort(failure.code, failure.message)
        raise AssertionError("unreachable: abort raises")

    @staticmethod
    def _fail_batch(context: Any, results: list[P4RuntimeFailure | None], what: str) -> NoReturn:
        code, message, status = _batch_status(results, what)
        context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
        context.abort(code, message)
        raise AssertionError("unreachable: abort raises")

    def Write(
        self, request: p4runtime_pb2.WriteRequest, context: Any
    ) -> p4runtime_pb2.WriteResponse:
        try:
            results = self.server.write(request)
        except P4RuntimeFailure as failure:
            self._fail(context, failure)
        if results is not None:
            self._fail_batch(context, results, "Write")
        return p4runtime_pb2.WriteResponse()

    def Read(
        self, request: p4runtime_pb2.ReadRequest, context: Any
    ) -> Iterator[p4runtime_pb2.ReadResponse]:
        try:
            found, results = self.server.read(request)
        except P4RuntimeFailure as failure:
            self._fail(context, failure)
        for start in range(0, len(found), READ_CHUNK):
            yield p4runtime_pb2.ReadResponse(entities=found[start : start + READ_CHUNK])
        if any(r is not None for r in results):
            self._fail_batch(context, results, "Read")

    def SetForwardingPipelineConfig(
        self, request: p4runtime_pb2.SetForwardingPipelineConfigRequest, context: Any
    ) -> p4runtime_pb2.SetForwardingPipelineConfigResponse:
        try:
            self.server.set_pipeline_config(request)
        except P4RuntimeFailure as failure:
            self._fail(context, failure)
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(
        self, request: p4runtime_pb2.GetForwardingPipelineConfigRequest, context: Any
    ) -> p4runtime_pb2.GetForwardingPipelineConfigResponse:
        try:
            return self.server.get_pipeline_config(request)
        except P4RuntimeFailure as failure:
            self._fail(context, failure)

    def StreamChannel(
        self, requests: Iterator[p4runtime_pb2.StreamMessageRequest], context: Any
    ) -> Iterator[p4runtime_pb2.StreamMessageResponse]:
        return self.server.stream_channel(requests, context)

    def Capabilities(
        self, request: p4runtime_pb2.CapabilitiesRequest, context: Any
    ) -> p4runtime_pb2.CapabilitiesResponse:
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=API_VERSION)


# ---------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Serve P4Runtime for one softswitch pipeline running p4/ina.p4"
    )
    parser.add_argument("--address", default="127.0.0.1:9559", help="host:port to listen on")
    parser.add_argument("--device-id", type=int, default=1)
    parser.add_argument(
        "--preconfigured",
        action="store_true",
        help="start with the committed P4Info installed (no SetForwardingPipelineConfig needed)",
    )
    parser.add_argument("--arbitration", choices=("promote", "strict"), default="promote")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
    server = P4RuntimeServer(
        Pipeline(),
        address=args.address,
        device_id=args.device_id,
        preconfigured=args.preconfigured,
        arbitration=args.arbitration,
    )
    with server:
        print(f"P4Runtime server on {server.address}, device_id {args.device_id}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            server.wait_for_termination()


if __name__ == "__main__":
    main()
