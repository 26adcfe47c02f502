"""A P4Runtime (v1.x) gRPC server in front of a softswitch `Pipeline`.

It serves the P4Info of p4/ina.p4 (p4/ina.p4info.txt) and translates P4Runtime entities to the
pipeline's state: table entries, default actions, multicast groups, counters and the direct
counter of `ina_child`. Semantics follow the P4Runtime specification; docs/p4runtime.md lists
what is supported, the few places where the softswitch is stricter than bmv2, and how to drive
the server with finsy or p4runtime-shell.

    with P4RuntimeServer(pipeline, address="127.0.0.1:0") as server:
        print(server.port)

or from a shell: `python -m inaemu.softswitch.p4runtime.server --address 127.0.0.1:9559`.

Concurrency: gRPC handlers run on a thread pool. Arbitration and configuration state is guarded
by the server's own lock; every read or change of data-plane state happens under
`pipeline.lock` (lock order: server lock, then pipeline lock), so a Write batch is atomic with
respect to packets going through `pipeline.process()`. A Read holds neither lock while it
streams: it copies the state in short holds of `pipeline.lock` (read.py).

This module is the server (lifecycle, request checks, pipeline config, the gRPC servicer, the
command line); the work is done beside it: values.py (bytestrings, election ids),
codec.py (messages to and from table state), write.py and read.py (Write and Read on the
pipeline), arbitration.py (StreamChannels and the primary controller). The P4Info's objects and
the `P4RuntimeFailure` a refused request raises come from `inaemu.p4.info`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NoReturn, Self

import grpc
from finsy.proto.google.rpc import status_pb2
from finsy.proto.p4.config.v1 import p4info_pb2
from finsy.proto.p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from google.protobuf import any_pb2

from inaemu.common import args as arg
from inaemu.p4.info import (
    P4Info,
    P4RuntimeFailure,
    bounded,
    invalid,
    load_p4info,
    p4info_diff,
)
from inaemu.softswitch.p4runtime.arbitration import Arbiter, Arbitration, check_device
from inaemu.softswitch.p4runtime.read import READ_RESPONSE_BUDGET, ReadLimits, ReadPlan, plan_read
from inaemu.softswitch.p4runtime.values import ERROR_SPACE, Malformed, lenient
from inaemu.softswitch.p4runtime.values import decode_bytes as decode_bytes  # re-exported
from inaemu.softswitch.p4runtime.values import encode_bytes as encode_bytes  # re-exported
from inaemu.softswitch.p4runtime.write import ForwardingState, clear_forwarding_state, write_updates
from inaemu.softswitch.pipeline import Pipeline

__all__ = [
    "API_VERSION",
    "MAX_MESSAGE_SIZE",
    "MAX_METADATA_SIZE",
    "READ_RESPONSE_BUDGET",
    "P4RuntimeServer",
    "ReadLimits",
    "main",
]

LOG = logging.getLogger(__name__)

API_VERSION = "1.4.0"
NO_PIPELINE = "No forwarding pipeline config set for this device"  # bmv2's wording (finsy)

# Limits (docs/p4runtime.md, "Limits").
MAX_MESSAGE_SIZE = 64 << 20  # bytes per gRPC message, both ways: bmv2's JSON of ina.p4 is 6.4 MB
MAX_METADATA_SIZE = 16 << 10  # bytes of request metadata (headers); more is RESOURCE_EXHAUSTED
STOP_TIMEOUT = 5.0  # seconds stop() waits past the grace for gRPC to wind down

SetAction = p4runtime_pb2.SetForwardingPipelineConfigRequest.Action
ResponseType = p4runtime_pb2.GetForwardingPipelineConfigRequest.ResponseType


@dataclass
class _Config:
    p4info: p4info_pb2.P4Info
    device_config: bytes
    cookie: int | None


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

    Limits on clients (docs/p4runtime.md, "Limits"): `max_streams` StreamChannel slots for
    streams that have arbitrated, and as many for streams still opening (who gets a slot when
    all are taken: arbitration.py); a stream that sends no MasterArbitrationUpdate within
    `arbitration_timeout` seconds (None: wait forever) is ended with DEADLINE_EXCEEDED; a
    stream with `stream_queue` replies its client has not read is ended with
    RESOURCE_EXHAUSTED. A Read is bounded by `read_limits` (entities, bytes, time; read.py).
    gRPC keepalive: every `keepalive_time` seconds (None: never) the server pings each
    connection, and closes one whose peer has not answered within `keepalive_timeout` seconds,
    which ends its streams, so a frozen primary loses its role and a backup takes over.
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
        arbitration_timeout: float | None = 10.0,
        stream_queue: int = 256,
        keepalive_time: float | None = 10.0,
        keepalive_timeout: float = 10.0,
        read_limits: ReadLimits | None = None,
    ) -> None:
        if arbitration not in ("promote", "strict"):
            raise ValueError(f"arbitration must be 'promote' or 'strict', not {arbitration!r}")
        if stream_queue < 1:
            raise ValueError(f"stream_queue must be at least 1, not {stream_queue}")
        self.pipeline = pipeline
        self.requested_address = address
        self.device_id = device_id
        self.arbitration: Arbitration = arbitration
        self.max_streams = max_streams
        self.keepalive_time = keepalive_time
        self.keepalive_timeout = keepalive_timeout
        self.read_limits = read_limits or ReadLimits()
        self._read_builders = threading.BoundedSemaphore(self.read_limits.builders)
        self._committed = load_p4info().message
        self._forwarding = ForwardingState(pipeline, P4Info(self._committed))
        self._lock = threading.RLock()
        self._config: _Config | None = None
        self._saved_uncommitted = False
        self._arbiter = Arbiter(
            device_id=device_id,
            arbitration=arbitration,
            max_streams=max_streams,
            lock=self._lock,
            arbitration_timeout=arbitration_timeout,
            queue_size=stream_queue,
        )
        self._server: Any = None
        self._executor: futures.ThreadPoolExecutor | None = None
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

    def grpc_options(self) -> list[tuple[str, int]]:
        """The gRPC server options (channel arguments) the server is started with."""
        options = [
            ("grpc.so_reuseport", 0),  # a second server on the port must fail
            ("grpc.max_receive_message_length", MAX_MESSAGE_SIZE),
            ("grpc.max_send_message_length", MAX_MESSAGE_SIZE),
            # gRPC's default is a soft limit of 8 KiB (past it, a random share of requests is
            # refused) and a hard one of 16 KiB: one hard limit, always the same answer.
            ("grpc.max_metadata_size", MAX_METADATA_SIZE),
            ("grpc.absolute_max_metadata_size", MAX_METADATA_SIZE),
        ]
        if self.keepalive_time is not None:
            timeout_ms = max(1, round(self.keepalive_timeout * 1000))
            options += [
                ("grpc.keepalive_time_ms", max(1, round(self.keepalive_time * 1000))),
                ("grpc.keepalive_timeout_ms", timeout_ms),
                # what gRPC (1.85) actually waits for a ping's ack before it closes the
                # connection; without it a frozen peer is found out only after a minute
                ("grpc.http2.ping_timeout_ms", timeout_ms),
                ("grpc.keepalive_permit_without_calls", 1),
                # gRPC stops pinging after 2 pings without data; an idle stream would go
                # unwatched after that
                ("grpc.http2.max_pings_without_data", 0),
                # clients may ping too (every 10 s at most) without being sent away
                ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
            ]
        return options

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("the P4Runtime server is already started")
        executor = futures.ThreadPoolExecutor(
            # a thread per stream (max_streams arbitrated, as many opening) and 8 for the rest
            max_workers=2 * self.max_streams + 8,
            thread_name_prefix="p4runtime",
        )
        server = grpc.server(executor, options=self.grpc_options())
        server.add_generic_rpc_handlers((_handlers(_Servicer(self)),))
        try:
            port = server.add_insecure_port(self.requested_address)
        except RuntimeError:
            port = 0
        if not port:
            server.stop(None)
            executor.shutdown(wait=False)
            raise self._bind_error()
        server.start()
        self._server, self._port, self._executor = server, port, executor
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
        """Stop serving; unary RPCs get `grace` seconds to finish (None: cancel them now).

        StreamChannels are ended at once (they would not end by themselves). Returns within
        `grace` + 5 s whatever clients do.
        """
        server, self._server = self._server, None
        if server is None:
            return
        stopped = server.stop(grace)
        self._arbiter.drop_all()
        if not stopped.wait((grace or 0.0) + STOP_TIMEOUT):
            LOG.warning("the gRPC server did not stop within %.1f s", (grace or 0) + STOP_TIMEOUT)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

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
        check_device(device_id, self.device_id)

    @staticmethod
    def _check_role(role: str, role_id: int = 0) -> None:
        if role or role_id:
            raise P4RuntimeFailure(
                grpc.StatusCode.NOT_FOUND,
                f"unknown role {bounded(role) if role else role_id}: this switch only has the "
                "default role (leave role unset)",
            )

    def _check_primary(self, election_id: p4runtime_pb2.Uint128 | None) -> None:
        self._arbiter.check_primary(election_id)

    def _require_config(self) -> _Config:
        if self._config is None:
            raise P4RuntimeFailure(grpc.StatusCode.FAILED_PRECONDITION, NO_PIPELINE)
        return self._config

    # ------------------------------------------------------------------ streams

    def stream_channel(
        self, requests: Iterator[p4runtime_pb2.StreamMessageRequest], context: Any
    ) -> Iterator[p4runtime_pb2.StreamMessageResponse]:
        """One StreamChannel RPC: arbitration updates in, arbitration and errors out."""
        return self._arbiter.stream_channel(requests, context)

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
                    raise invalid("COMMIT takes no config: it realizes the last saved one")
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
                raise invalid(f"unsupported SetForwardingPipelineConfig action {action}")
            name = SetAction.Name(action)
            if not has_config or not request.config.HasField("p4info"):
                raise invalid(f"{name} needs a config with a P4Info")
            diffs = p4info_diff(request.config.p4info, self._committed)
            if diffs:
                shown = "; ".join(bounded(_explain_diff(d), 300, quote=False) for d in diffs[:5])
                more = f" (and {len(diffs) - 5} more)" if len(diffs) > 5 else ""
                raise invalid(
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
                clear_forwarding_state(self._forwarding)
            LOG.info("pipeline config set (%s, cookie %s)", name, cookie)

    def get_pipeline_config(
        self, request: p4runtime_pb2.GetForwardingPipelineConfigRequest
    ) -> p4runtime_pb2.GetForwardingPipelineConfigResponse:
        with self._lock:
            self._check_device(request.device_id)
            kind = request.response_type
            if kind not in ResponseType.values():
                raise invalid(f"unknown response_type {kind}")
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

    # ------------------------------------------------------------------ write and read

    def write(self, request: p4runtime_pb2.WriteRequest) -> list[P4RuntimeFailure | None] | None:
        """Apply a batch; None if all updates succeeded, else one result per update."""
        with self._lock:
            self._check_device(request.device_id)
            self._check_role(request.role, request.role_id)
            self._check_primary(request.election_id if request.HasField("election_id") else None)
            self._require_config()
            return write_updates(self._forwarding, request)

    def read(self, request: p4runtime_pb2.ReadRequest) -> ReadPlan:
        """The Read, checked and counted (read.py); its `responses()` stream the entities.

        Refused as a whole (P4RuntimeFailure) for a request-wide problem or past the entity
        limit. Neither the server's lock nor the pipeline's is held while it streams.
        """
        with self._lock:
            self._check_device(request.device_id)
            self._check_role(request.role)
            self._require_config()
        return plan_read(self._forwarding, request.entities, self.read_limits, self._read_builders)


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
    """The status of a batch with failures; its message names the first update that failed.

    Updates ABORTED because another one failed (rolled back, or not attempted) are counted
    apart: the message is about the update that failed, not the first one rolled back.
    """
    failures = [(i, r) for i, r in enumerate(results) if r is not None]
    real = [(i, r) for i, r in failures if r.code != grpc.StatusCode.ABORTED]
    causes = real or failures
    first_index, first = causes[0]
    others = f", {len(failures) - len(real)} aborted" if real and len(real) < len(failures) else ""
    message = (
        f"{what} failure: {len(causes)} of {len(results)} failed{others}; "
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


def _handlers(servicer: _Servicer) -> grpc.GenericRpcHandler:
    """The P4Runtime service, with request parsing that cannot trip gRPC up (`lenient`)."""
    p4r = p4runtime_pb2
    methods = {
        "Write": grpc.unary_unary_rpc_method_handler(
            servicer.Write,
            request_deserializer=lenient(p4r.WriteRequest),
            response_serializer=p4r.WriteResponse.SerializeToString,
        ),
        "Read": grpc.unary_stream_rpc_method_handler(
            servicer.Read,
            request_deserializer=lenient(p4r.ReadRequest),
            response_serializer=p4r.ReadResponse.SerializeToString,
        ),
        "SetForwardingPipelineConfig": grpc.unary_unary_rpc_method_handler(
            servicer.SetForwardingPipelineConfig,
            request_deserializer=lenient(p4r.SetForwardingPipelineConfigRequest),
            response_serializer=p4r.SetForwardingPipelineConfigResponse.SerializeToString,
        ),
        "GetForwardingPipelineConfig": grpc.unary_unary_rpc_method_handler(
            servicer.GetForwardingPipelineConfig,
            request_deserializer=lenient(p4r.GetForwardingPipelineConfigRequest),
            response_serializer=p4r.GetForwardingPipelineConfigResponse.SerializeToString,
        ),
        "StreamChannel": grpc.stream_stream_rpc_method_handler(
            servicer.StreamChannel,
            request_deserializer=lenient(p4r.StreamMessageRequest),
            response_serializer=p4r.StreamMessageResponse.SerializeToString,
        ),
        "Capabilities": grpc.unary_unary_rpc_method_handler(
            servicer.Capabilities,
            request_deserializer=lenient(p4r.CapabilitiesRequest),
            response_serializer=p4r.CapabilitiesResponse.SerializeToString,
        ),
    }
    return grpc.method_handlers_generic_handler("p4.v1.P4Runtime", methods)


class _Servicer(p4runtime_pb2_grpc.P4RuntimeServicer):
    """The P4Runtime service methods, called by grpc's thread pool.

    A request that did not parse arrives as `Malformed` and is refused with INVALID_ARGUMENT.
    """

    def __init__(self, server: P4RuntimeServer) -> None:
        self.server = server

    @staticmethod
    def _fail(context: Any, failure: P4RuntimeFailure) -> NoReturn:
        context.abort(failure.code, failure.message)
        raise AssertionError("unreachable: abort raises")

    @classmethod
    def _parsed(cls, request: Any, context: Any) -> None:
        if isinstance(request, Malformed):
            cls._fail(context, request.failure())

    @staticmethod
    def _fail_batch(context: Any, results: list[P4RuntimeFailure | None], what: str) -> NoReturn:
        code, message, status = _batch_status(results, what)
        context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
        context.abort(code, message)
        raise AssertionError("unreachable: abort raises")

    def Write(
        self, request: p4runtime_pb2.WriteRequest, context: Any
    ) -> p4runtime_pb2.WriteResponse:
        self._parsed(request, context)
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
        self._parsed(request, context)
        try:
            plan = self.server.read(request)
            yield from plan.responses()
        except P4RuntimeFailure as failure:
            self._fail(context, failure)
        if plan.failed:
            self._fail_batch(context, plan.results, "Read")

    def SetForwardingPipelineConfig(
        self, request: p4runtime_pb2.SetForwardingPipelineConfigRequest, context: Any
    ) -> p4runtime_pb2.SetForwardingPipelineConfigResponse:
        self._parsed(request, context)
        try:
            self.server.set_pipeline_config(request)
        except P4RuntimeFailure as failure:
            self._fail(context, failure)
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(
        self, request: p4runtime_pb2.GetForwardingPipelineConfigRequest, context: Any
    ) -> p4runtime_pb2.GetForwardingPipelineConfigResponse:
        self._parsed(request, context)
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
        self._parsed(request, context)
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=API_VERSION)


# ---------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = arg.ArgumentParser(
        prog="python -m inaemu.softswitch.p4runtime.server",
        description="Serve P4Runtime for one softswitch pipeline running p4/ina.p4",
    )
    parser.add_argument(
        "--address",
        type=arg.listen_address,
        default="127.0.0.1:9559",
        help="host:port to listen on (port 0: any free)",
    )
    parser.add_argument("--device-id", type=arg.DEVICE_ID, default=1)
    parser.add_argument(
        "--preconfigured",
        action="store_true",
        help="start with the committed P4Info installed (no SetForwardingPipelineConfig needed)",
    )
    parser.add_argument("--arbitration", choices=("promote", "strict"), default="promote")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    if arg.parse_only(parser.prog):
        return 0
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
    server = P4RuntimeServer(
        Pipeline(),
        address=args.address,
        device_id=args.device_id,
        preconfigured=args.preconfigured,
        arbitration=args.arbitration,
    )
    try:
        server.start()
    except OSError as exc:  # the address is taken or cannot be bound: one line, what to change
        print(f"{parser.prog}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        print(f"P4Runtime server on {server.address}, device_id {args.device_id}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            server.wait_for_termination()
    finally:
        server.stop(None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
