"""P4Runtime StreamChannels and arbitration: which controller is primary (P4Runtime spec §5.4).

`Arbiter` holds the open StreamChannels of one device, runs master arbitration on them and
tells every controller whether it is primary; the server asks it `check_primary` before a
Write or SetForwardingPipelineConfig. Its state is guarded by the server's lock.

Limits (docs/p4runtime.md, "Limits"): `max_streams` streams that have arbitrated hold a slot
each, and as many again may be open without having arbitrated yet. A stream must arbitrate
within `arbitration_timeout` seconds or it is ended with DEADLINE_EXCEEDED; when every opening
place is taken, a new stream takes the place of the oldest one that has waited more than
`ARBITRATION_GRACE` seconds. When every slot is taken, a controller that arbitrates with an
election id takes the slot of the longest-idle observer (a stream without election id), or else
of the backup with the lowest election id below its own; that stream is ended with
RESOURCE_EXHAUSTED. So neither silent streams nor observers can lock a controller out; only
controllers that outrank a newcomer keep it out, and the newcomer is told so. Each stream
queues at most `queue_size` replies the client has not read yet, and a stream whose queue is
full is ended with RESOURCE_EXHAUSTED and its controller forgotten (a primary loses the role)
rather than growing the server's memory.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import grpc
from finsy.proto.p4.v1 import p4runtime_pb2

from inaemu.p4.info import P4RuntimeFailure, bounded, invalid
from inaemu.softswitch.p4runtime.values import ERROR_SPACE, Malformed, to_u128, u128

__all__ = ["ARBITRATION_GRACE", "Arbiter", "Arbitration", "check_device"]

LOG = logging.getLogger(__name__)

Arbitration = Literal["promote", "strict"]

# seconds an opening stream keeps its place without a MasterArbitrationUpdate when every
# opening place is taken (a client arbitrates as soon as its stream is open)
ARBITRATION_GRACE = 1.0


def check_device(device_id: int, this_device: int) -> None:
    """Refuse a request for a device id other than `this_device` (NOT_FOUND)."""
    if device_id != this_device:
        raise P4RuntimeFailure(
            grpc.StatusCode.NOT_FOUND,
            f"unknown device_id {device_id}: this switch is device {this_device}",
        )


@dataclass(eq=False)
class _Client:
    """One StreamChannel."""

    number: int
    context: Any = None  # the RPC's grpc.ServicerContext
    opened: float = field(default_factory=time.monotonic)
    heard: float = field(default_factory=time.monotonic)  # when it last sent a message
    outbox: queue.Queue[object] = field(default_factory=queue.Queue)
    arbitrated: bool = False
    closed: bool = False
    device_id: int = 0
    election_id: int | None = None  # None: the client sent no election id (never primary)

    def label(self) -> str:
        return f"stream #{self.number} (election id {self.election_id})"

    def kind(self) -> str:
        return "observer" if self.election_id is None else f"election id {self.election_id}"


@dataclass(frozen=True)
class _Terminate:
    """Ends a StreamChannel with an error status."""

    code: Any
    message: str


_EOF = object()


def end_rpc(context: Any, code: Any, message: str) -> None:
    """End an RPC from outside its handler thread, with status `code`.

    The handler may be blocked inside gRPC sending a reply the client does not read, so
    setting a status for it to return is not enough: the call is cancelled. gRPC's public
    `context.cancel()` always reports CANCELLED; the call object underneath takes a code and
    details, so the client learns why. If that private path is missing, a plain cancel.
    """
    if context is None:
        return
    call = getattr(getattr(context, "_rpc_event", None), "call", None)
    if call is not None:
        try:
            call.cancel(code.value[0], message)
            return
        except Exception:
            LOG.debug("cancel with a status failed; plain cancel", exc_info=True)
    context.cancel()


class Arbiter:
    """The StreamChannels of device `device_id` and its primary controller.

    `arbitration` and `max_streams` are as in `P4RuntimeServer` (`max_streams` arbitrated
    streams, and as many opening ones); `lock` is the server's lock,
    so that a request's primary check and an arbitration update never interleave.
    `arbitration_timeout` (seconds, None: no deadline) is how long a stream may stay open
    without a MasterArbitrationUpdate; `queue_size` is how many replies a stream may have
    waiting for its client to read them.
    """

    def __init__(
        self,
        *,
        device_id: int,
        arbitration: Arbitration,
        max_streams: int,
        lock: threading.RLock,
        arbitration_timeout: float | None = 10.0,
        queue_size: int = 256,
    ) -> None:
        self.device_id = device_id
        self.arbitration: Arbitration = arbitration
        self.max_streams = max_streams
        self.arbitration_timeout = arbitration_timeout
        self.queue_size = queue_size
        self._lock = lock
        self._streams: set[_Client] = set()  # every open StreamChannel
        self._clients: list[_Client] = []  # the arbitrated ones, in arrival order
        self._overflowed: list[_Client] = []  # streams whose reply queue is full, to drop
        self._primary: _Client | None = None
        self._highest_election_id: int | None = None  # strict mode: highest ever seen
        self._numbers = itertools.count(1)

    def check_primary(self, election_id: p4runtime_pb2.Uint128 | None) -> None:
        """Refuse a request whose election id is not the primary's (PERMISSION_DENIED).

        Call it with the lock held, so the primary cannot change before the request is done.
        """
        primary = self._primary
        if primary is None or election_id is None or u128(election_id) != primary.election_id:
            given = "none" if election_id is None else str(u128(election_id))
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

    def drop_all(self) -> None:
        """End every stream and forget its controller (the server is stopping)."""
        stopping = _Terminate(grpc.StatusCode.UNAVAILABLE, "the P4Runtime server is stopping")
        with self._lock:
            for client in list(self._streams):
                client.outbox.put(stopping)  # after the replies already queued
                self._drop_client(client)
            self._drop_overflowed()

    # ------------------------------------------------------------------ streams and replies

    def _open_stream(self, context: Any) -> _Client | str:
        """A new stream, or why there is no place for it."""
        with self._lock:
            opening = [c for c in self._streams if not c.arbitrated and not c.closed]
            if len(opening) >= self.max_streams:
                now = time.monotonic()
                stale = [c for c in opening if now - c.opened >= ARBITRATION_GRACE]
                if not stale:
                    return (
                        f"{len(opening)} StreamChannels are opening and none has waited "
                        f"{ARBITRATION_GRACE:g} s for its MasterArbitrationUpdate: retry"
                    )
                self._evict(
                    min(stale, key=lambda c: c.opened),
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"no MasterArbitrationUpdate within {ARBITRATION_GRACE:g} s of opening the "
                    f"StreamChannel while {len(opening)} others were opening: send one first",
                )
            client = _Client(next(self._numbers), context)
            self._streams.add(client)
            return client

    def _evict(self, client: _Client, code: Any, message: str) -> None:
        """End `client`'s stream with `code` to free its place (call with the lock held)."""
        LOG.info("%s ended: %s", client.label(), message)
        client.outbox.put(_Terminate(code, message))  # before the _EOF _drop_client puts
        self._streams.discard(client)
        self._drop_client(client)
        end_rpc(client.context, code, message)  # in case it is blocked sending a reply

    def _make_room(self, newcomer: _Client, eid: int | None) -> None:
        """A slot for `newcomer`, arbitrating for the first time with election id `eid`: when
        all are taken, a controller takes the longest-idle observer's slot, or else that of
        the backup with the lowest election id below its own. RESOURCE_EXHAUSTED if none."""
        held = [c for c in self._clients if c is not newcomer]
        if len(held) < self.max_streams:
            return
        observers = [c for c in held if c.election_id is None]
        victim: _Client | None = None
        if eid is not None and observers:
            victim, what = min(observers, key=lambda c: c.heard), "the longest-idle observer"
        elif eid is not None:
            outranked = [c for c in held if c is not self._primary and (c.election_id or 0) < eid]
            if outranked:
                victim = min(outranked, key=lambda c: c.election_id or 0)
                what = "the backup controller with the lowest election id"
        if victim is not None:
            self._evict(
                victim,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"StreamChannel closed: all {self.max_streams} slots were taken and a "
                f"controller with election id {eid} arrived; this stream was {what}",
            )
            return
        controllers = sorted(c.election_id for c in held if c.election_id is not None)
        if eid is None:
            raise P4RuntimeFailure(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"all {self.max_streams} StreamChannel slots are taken ({len(observers)} "
                f"observers, {len(controllers)} controllers): an observer (no election id) "
                "gets none; close an unused stream, or arbitrate with an election id (a "
                "controller takes the slot of the longest-idle observer)",
            )
        primary = self._primary.election_id if self._primary is not None else None
        raise P4RuntimeFailure(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"all {self.max_streams} StreamChannel slots are taken by controllers with "
            f"election ids {controllers[0]}..{controllers[-1]} (primary: {primary}), none "
            f"of them a backup below {eid}: close an unused controller's stream",
        )

    def _close_stream(self, client: _Client) -> None:
        with self._lock:
            self._streams.discard(client)
            self._drop_client(client)
            self._drop_overflowed()

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

    def _send(self, client: _Client, message: p4runtime_pb2.StreamMessageResponse) -> None:
        """Queue a reply for `client`; a full queue marks the stream to be dropped.

        Never blocks (it runs under the lock, for every controller): a client that does not
        read its stream loses it, the others are not held up.
        """
        if client.closed:
            return
        if client.outbox.qsize() >= self.queue_size:
            client.closed = True
            self._overflowed.append(client)
            return
        client.outbox.put(message)

    def _drop_overflowed(self) -> None:
        """End the streams whose reply queue filled up (call with the lock held)."""
        while self._overflowed:
            client = self._overflowed.pop(0)
            message = (
                f"StreamChannel dropped: {self.queue_size} replies were waiting for the "
                "client to read them (read the stream; this controller was forgotten, "
                "arbitrate again on a new stream)"
            )
            LOG.warning("%s: %s", client.label(), message)
            self._streams.discard(client)
            self._drop_client(client)  # may notify others, and overflow them in turn
            end_rpc(client.context, grpc.StatusCode.RESOURCE_EXHAUSTED, message)

    def _expire(self, client: _Client) -> bool:
        """True if `client` has not arbitrated yet: it is closed, its slot freed."""
        with self._lock:
            if client.arbitrated or client.closed:
                return False
            client.closed = True
            self._streams.discard(client)
            return True

    # ------------------------------------------------------------------ arbitration

    def _highest_live(self) -> _Client | None:
        candidates = [c for c in self._clients if c.election_id is not None]
        return max(candidates, key=lambda c: c.election_id or 0, default=None)

    def _arbitrate(self, client: _Client, update: p4runtime_pb2.MasterArbitrationUpdate) -> None:
        """Rules of P4Runtime spec §5.4; raises P4RuntimeFailure to end the stream."""
        with self._lock:
            if client.closed:
                return
            if update.role.name or update.role.id:
                role = bounded(update.role.name) if update.role.name else update.role.id
                raise P4RuntimeFailure(
                    grpc.StatusCode.UNIMPLEMENTED,
                    f"role {role}: this switch only supports the default role (leave role unset)",
                )
            eid = u128(update.election_id) if update.HasField("election_id") else None
            if not client.arbitrated:
                check_device(update.device_id, self.device_id)
            elif update.device_id != client.device_id:
                raise P4RuntimeFailure(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"this stream is for device {client.device_id}, not {update.device_id}",
                )
            if eid is not None and any(
                c is not client and c.election_id == eid for c in self._clients
            ):
                raise invalid(
                    f"Election id {eid} is already used by another live controller "
                    "for this device and role"
                )
            if not client.arbitrated:
                self._make_room(client, eid)
                client.arbitrated, client.device_id = True, update.device_id
                self._clients.append(client)
            client.election_id = eid
            LOG.debug("%s arbitration", client.label())
            self._elect(client)
            self._drop_overflowed()

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
            update.election_id.CopyFrom(to_u128(shown))
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
        self._send(client, self._arbitration_message(client))

    def _notify_all(self) -> None:
        for client in self._clients:
            if client is not self._primary:
                self._notify(client)
        if self._primary is not None:
            self._notify(self._primary)

    # ------------------------------------------------------------------ stream messages

    def _stream_message(self, client: _Client, request: p4runtime_pb2.StreamMessageRequest) -> None:
        client.heard = time.monotonic()
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
        with self._lock:
            self._send(client, p4runtime_pb2.StreamMessageResponse(error=error))
            self._drop_overflowed()

    def _read_requests(self, client: _Client, requests: Iterator[Any]) -> None:
        """The stream's reader thread: requests in, replies to the client's outbox."""
        try:
            for request in requests:
                if client.closed:
                    break
                try:
                    if isinstance(request, Malformed):
                        raise request.failure()
                    self._stream_message(client, request)
                except P4RuntimeFailure as failure:
                    client.outbox.put(_Terminate(failure.code, failure.message))
                    break
        except Exception:  # the RPC ended under us (cancelled, server stopping)
            LOG.debug("%s: reader ended", client.label(), exc_info=True)
        finally:
            client.outbox.put(_EOF)

    def _next_reply(self, client: _Client, deadline: float | None) -> object:
        """The next item of the outbox; a `_Terminate` if the arbitration deadline passes."""
        while True:
            if deadline is None or client.arbitrated:
                return client.outbox.get()
            try:
                return client.outbox.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                if self._expire(client):
                    return _Terminate(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"no MasterArbitrationUpdate within {self.arbitration_timeout:g} s of "
                        "opening the StreamChannel: send one first (the stream's slot is freed)",
                    )

    def stream_channel(
        self, requests: Iterator[Any], context: Any
    ) -> Iterator[p4runtime_pb2.StreamMessageResponse]:
        """Serve one StreamChannel RPC: a reader thread takes requests, this yields replies.

        `requests` are StreamMessageRequests, or `Malformed` for one that did not parse (the
        stream then ends with INVALID_ARGUMENT).
        """
        client = self._open_stream(context)
        if isinstance(client, str):
            context.set_code(grpc.StatusCode.RESOURCE_EXHAUSTED)
            context.set_details(client)
            return
        if not context.add_callback(lambda: client.outbox.put(_EOF)):
            client.outbox.put(_EOF)  # the RPC has already ended
        timeout = self.arbitration_timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        reader = threading.Thread(
            target=self._read_requests,
            args=(client, requests),
            name=f"p4rt-stream-{client.number}",
            daemon=True,
        )
        reader.start()
        try:
            while True:
                item = self._next_reply(client, deadline)
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
