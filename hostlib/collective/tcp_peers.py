"""`TcpPeers`: the ranks of a host collective joined by a full mesh of TCP connections, one per
pair of ranks (a `PeerChannel`, `peers.py`). Each connection starts with a hello that names
both ranks and the job (a hash of its token); every message is a frame with its length, sent
in the background and received with a bounded wait; a peer that vanishes, stalls or reports a
failure is named in a `PeerError`, and nothing waits forever.
"""

from __future__ import annotations

import hashlib
import selectors
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from queue import Empty, SimpleQueue

from inaemu.hostlib.collective.peers import Address, Message, PeerError, format_address

HELLO_MAGIC = b"INACOLL1"
# magic, sender's rank, receiver's rank, rank count, sha256 of the job token
_HELLO = struct.Struct("<8sIII32s")
# every frame after the hello: kind, body bytes
_FRAME = struct.Struct("<BQ")
FRAME_BYTES = _FRAME.size  # what each message adds on its connection (the simulator counts it)
# frame kinds: a message; "I am done"; "rank r failed: why"; "what are you doing?"; its answer
DATA, BYE, ABORT, PING, PONG = 0, 1, 2, 3, 4
_ABORT = struct.Struct("<ii")  # the failed rank (-1: none), who saw it; the reason in UTF-8
_PONG = struct.Struct("<id")  # the rank a recv waits on (-1: none), seconds it has waited
MAX_MESSAGE = 1 << 34  # a longer frame is garbage, not a message
HELLO_WAIT = 5.0  # seconds an accepted connection has to say hello
# seconds a timed-out recv waits for a ping's answer (the wait on a failure report: twice
# that): ABORT_GRACE, or a tenth of the timeout if longer (a busy machine answers late)
ABORT_GRACE = 0.5
LINGER = 2.0  # seconds close() waits for the peers' goodbyes
SEND_PIECE = 1 << 20
SMALL = 1 << 16  # frames up to this size go out in one send with their header, and others
SEND_GROUP = 256  # queued frames a sender takes at once
READ_AHEAD = 1 << 18  # bytes a receiver reads per call for small frames


class _Stop(Exception):
    """The channel is closing: a receiver thread ends."""


class _ReadAhead:
    """Bytes a receiver read from a peer's connection beyond the frame it was reading."""

    __slots__ = ("buf", "end", "start")

    def __init__(self) -> None:
        self.buf = bytearray(READ_AHEAD)
        self.start = self.end = 0


class TcpPeers:
    """A full mesh of TCP connections between `len(addresses)` ranks (a `PeerChannel`).

    Rank r listens on `addresses[r]` (or on `listener`, a listening socket its launcher bound
    beforehand, e.g. to port 0), connects to every lower rank and accepts every higher one.
    Each side sends a hello naming both ranks, the rank count and a digest of `token` (the
    job/run token, the same on every rank): a connection whose hello does not match is closed,
    so a stray client or a rank of another job never joins. The constructor returns once the
    mesh is complete, or raises `PeerError` naming the first rank missing after `timeout`.

    Per peer, a sender thread writes queued messages (length-prefixed frames, TCP_NODELAY;
    everything queued at once goes out together, small frames joined into one send) and a
    receiver thread reads frames into an inbox (small ones many per system call) whatever
    the executor is doing: sending and receiving never wait on each other.

    Every wait is bounded, and every rank names the rank that failed:

    - a peer whose connection closes without a goodbye (BYE) vanished (killed);
    - `recv(src, timeout)` waits while bytes come from `src`, at most `timeout` without any;
      then it asks `src` what it is doing (PING; the receiver thread answers, PONG). No
      answer within a grace (ABORT_GRACE): `src` is stopped or hung. Not waiting for anyone:
      `src` is alive but sends nothing. Waiting on this rank: a cycle. Waiting on another rank k
      (for less than its timeout): k is `src`'s to judge, so this rank waits for that report
      and asks again;
    - a send that makes no progress for `timeout` blames its receiver;
    - the first failure is reported to every other rank (ABORT), so that all ranks fail at
      once naming the same culprit.

    A clean `close` flushes, says goodbye and waits (at most LINGER) for the peers' goodbyes.

    Counters: `bytes_sent()` / `bytes_received()` count message bytes handed to `send` and
    returned by `recv`; `wire_sent` / `wire_received` count the bytes of every frame written
    and read (headers included) per rank.
    """

    def __init__(
        self,
        rank: int,
        addresses: Sequence[Address],
        *,
        token: str | bytes,
        timeout: float = 30.0,
        listener: socket.socket | None = None,
    ) -> None:
        n = len(addresses)
        if not 0 <= rank < n:
            raise ValueError(f"rank {rank} out of 0..{n - 1} ({n} peer addresses)")
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self._rank, self._n = rank, n
        self.addresses = list(addresses)
        self.timeout = timeout
        raw = token.encode() if isinstance(token, str) else token
        self._token = hashlib.sha256(raw).digest()
        self._cond = threading.Condition(threading.RLock())
        self._inbox = [deque[bytearray]() for _ in range(n)]
        self._outbox = [SimpleQueue[tuple[int, Message] | None]() for _ in range(n)]
        self._pending = [0] * n  # messages queued and not yet written
        self._finished = [False] * n  # said goodbye
        self._sent, self._received = [0] * n, [0] * n
        self.wire_sent, self.wire_received = [0] * n, [0] * n
        self._failure: PeerError | None = None
        self._last_rx = [0.0] * n  # monotonic time of the last bytes from each rank
        self._pong: list[tuple[int, float] | None] = [None] * n  # (waits on, waited seconds)
        self._waiting: tuple[int, float] | None = None  # (rank, since) a recv waits on
        self._closing = False
        self._closed = False
        self._socks: list[socket.socket | None] = [None] * n
        self._ahead = [_ReadAhead() for _ in range(n)]
        self._threads: list[threading.Thread] = []
        self._senders: list[threading.Thread] = []
        try:
            self._connect_mesh(listener, time.monotonic() + timeout)
        except BaseException:
            for s in self._socks:
                if s is not None:
                    s.close()
            raise
        for peer, sock in enumerate(self._socks):
            if sock is None:
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(timeout)
            for target, role in ((self._send_loop, "send"), (self._recv_loop, "recv")):
                t = threading.Thread(
                    target=target, args=(peer, sock), name=f"peers-{rank}-{role}-{peer}"
                )
                t.daemon = True
                t.start()
                self._threads.append(t)
                if role == "send":
                    self._senders.append(t)

    # ------------------------------------------------------------------ PeerChannel

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def n_ranks(self) -> int:
        return self._n

    def who(self, rank: int) -> str:
        if 0 <= rank < self._n:
            return f"rank {rank} ({format_address(self.addresses[rank])})"
        return f"rank {rank}"

    def send(self, dst: int, data: Message) -> None:
        self._check(dst)
        with self._cond:
            if self._failure is not None:
                raise self._failure
            if self._closing:
                raise PeerError(f"rank {self._rank}: send on a closed channel")
            self._pending[dst] += 1
            self._sent[dst] += len(memoryview(data).cast("B"))
        self._outbox[dst].put((DATA, data))

    def recv(self, src: int, timeout: float) -> bytearray:
        """Rank `src`'s next message, waiting while `src` makes progress, at most `timeout`
        seconds without any (see the class doc)."""
        self._check(src)
        start = time.monotonic()
        with self._cond:
            self._waiting = (src, start)  # what a ping from another rank is told
            try:
                return self._recv_locked(src, timeout)
            finally:
                self._waiting = None

    def _recv_locked(self, src: int, timeout: float) -> bytearray:
        grace = min(timeout, max(ABORT_GRACE, timeout / 10))
        # Idle: no bytes from `src` since `since` (or since its last answer that it waits on
        # someone else, whose own wait is younger than `timeout`: progress further down).
        while True:
            since = self._idle_since(src)
            msg = self._wait_for(src, lambda: self._idle_since(src) + timeout)
            if msg is not None:
                return msg
            self._pong[src] = None
            self._outbox[src].put((PING, b""))
            asked = time.monotonic()
            msg = self._wait_for(src, asked + grace, until=lambda: self._pong[src] is not None)
            if msg is not None:
                return msg
            idle = f"{asked - since:.1f} s"
            pong = self._pong[src]
            if pong is None:
                what = f"sent nothing for {idle} and does not answer a ping: stopped or hung?"
                break
            waits_on, waited = pong
            if waits_on == self._rank:
                what = (
                    f"waits on rank {self._rank}, as rank {self._rank} waits on it: do all "
                    "ranks run the same schedule and calls?"
                )
                break
            if not 0 <= waits_on < self._n:
                what = f"alive, but sent nothing for {idle} (busy, or not running the same calls?)"
                break
            if waited > timeout + 4 * grace:
                what = (
                    f"has waited {waited:.1f} s on {self.who(waits_on)} without reporting "
                    "it: a cycle of ranks waiting on each other (the same schedule?)"
                )
                break
            # `src` waits on another rank; its own bounded wait judges that one, and a
            # failure is reported to every rank. Wait for that, then ask again.
            assert self._waiting is not None
            self._waiting = (src, time.monotonic())
            report_by = time.monotonic() + max(0.0, timeout - waited) + 2 * grace
            msg = self._wait_for(src, report_by, until=partial(self._heard_since, src, asked))
            if msg is not None:
                return msg
        raise self._fail(self._peer_error(src, what))

    def _heard_since(self, src: int, t: float) -> bool:
        return self._last_rx[src] > t

    def _idle_since(self, src: int) -> float:
        assert self._waiting is not None
        return max(self._waiting[1], self._last_rx[src])

    def _wait_for(
        self,
        src: int,
        deadline: float | Callable[[], float],
        until: Callable[[], bool] = lambda: False,
    ) -> bytearray | None:
        """With the lock held: `src`'s next message, or None once `deadline` (a time, or a
        function giving one) passed or `until()` is true; raises the channel's failure, or
        PeerError if `src` finished."""
        inbox = self._inbox[src]
        while True:
            if self._failure is not None:
                raise self._failure
            if inbox:
                return self._take(src)
            if self._finished[src]:
                raise self._fail(
                    self._peer_error(
                        src,
                        f"finished and closed with no message left for rank {self._rank}: do "
                        "all ranks run the same schedule and calls?",
                    )
                )
            left = (deadline() if callable(deadline) else deadline) - time.monotonic()
            if left <= 0 or until():
                return None
            self._cond.wait(left)

    def flush(self, timeout: float | None = None) -> None:
        wait = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        with self._cond:
            while any(self._pending):
                if self._failure is not None:
                    raise self._failure
                left = deadline - time.monotonic()
                if left <= 0:
                    late = min(r for r, p in enumerate(self._pending) if p)
                    what = f"did not take rank {self._rank}'s messages within {wait:g} s"
                    raise self._fail(self._peer_error(late, what))
                self._cond.wait(left)

    def close(self) -> None:
        """Flush (at most `timeout`), say goodbye, wait briefly for the peers' goodbyes and
        release the sockets. Raises the flush's `PeerError`, after releasing everything."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._failure is None:
                self.flush()
        finally:
            clean = self._failure is None
            with self._cond:
                self._closing = True
            for peer, sock in enumerate(self._socks):
                if sock is not None:
                    if clean:
                        self._outbox[peer].put((BYE, b""))
                    self._outbox[peer].put(None)
            end = time.monotonic() + min(self.timeout, LINGER)
            for t in self._senders:
                t.join(max(0.0, end - time.monotonic()))
            for sock in self._socks:
                if sock is not None:
                    try:
                        sock.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
            if clean:  # the peers' goodbyes: nothing of theirs is left unread when we close
                with self._cond:
                    while not all(self._finished[p] for p in self._peers()):
                        left = end - time.monotonic()
                        if left <= 0 or self._failure is not None:
                            break
                        self._cond.wait(left)
            for sock in self._socks:
                if sock is not None:
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    sock.close()
            for t in self._threads:
                t.join(1.0)

    def bytes_sent(self) -> list[int]:
        with self._cond:
            return list(self._sent)

    def bytes_received(self) -> list[int]:
        with self._cond:
            return list(self._received)

    def __enter__(self) -> TcpPeers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _peers(self) -> list[int]:
        return [p for p in range(self._n) if p != self._rank]

    def _check(self, peer: int) -> None:
        if not (0 <= peer < self._n and peer != self._rank):
            raise PeerError(f"rank {self._rank}: no peer rank {peer} (0..{self._n - 1})")

    def _take(self, src: int) -> bytearray:
        msg = self._inbox[src].popleft()
        self._received[src] += len(msg)
        return msg

    def _fail(self, err: PeerError, *, seen_by: int | None = None, reason: str = "") -> PeerError:
        """Record the channel's first failure and tell every peer (also when it is another
        rank's report, `reason` as `seen_by` saw it: a peer that reads this rank's goodbye-less
        end after the report knows the cause); returns the failure."""
        with self._cond:
            if self._failure is not None:
                return self._failure
            self._failure = err
            self._cond.notify_all()
            closing = self._closing
        if not closing:
            culprit = -1 if err.rank is None else err.rank
            seen = self._rank if seen_by is None else seen_by
            body = _ABORT.pack(culprit, seen) + (reason or str(err)).encode()
            for peer in self._peers():
                if self._socks[peer] is not None:
                    self._outbox[peer].put((ABORT, body))
        return err

    def _peer_error(self, peer: int, what: str) -> PeerError:
        return PeerError(
            f"{self.who(peer)}: {what}",
            rank=peer,
            address=format_address(self.addresses[peer]),
        )

    # -- threads

    def _send_loop(self, peer: int, sock: socket.socket) -> None:
        outbox = self._outbox[peer]
        while True:
            items = [outbox.get()]
            while items[-1] is not None and len(items) < SEND_GROUP:  # all that is queued
                try:
                    items.append(outbox.get_nowait())
                except Empty:
                    break
            frames = [item for item in items if item is not None]
            try:
                _write_frames(sock, frames)
            except OSError as exc:
                with self._cond:
                    quiet = self._closing or self._failure is not None
                if not quiet:
                    what = (
                        f"took nothing for {self.timeout:g} s (stalled, not reading?)"
                        if isinstance(exc, TimeoutError)
                        else f"connection lost while sending ({exc})"
                    )
                    self._fail(self._peer_error(peer, what))
                return
            with self._cond:
                for kind, data in frames:
                    self.wire_sent[peer] += _FRAME.size + len(memoryview(data).cast("B"))
                    if kind == DATA:
                        self._pending[peer] -= 1
                self._cond.notify_all()
            if items[-1] is None:
                return

    def _recv_loop(self, peer: int, sock: socket.socket) -> None:
        try:
            while True:
                head = self._read(sock, _FRAME.size, peer)
                kind, size = _FRAME.unpack(head)
                if kind not in (DATA, BYE, ABORT, PING, PONG) or size > MAX_MESSAGE:
                    raise ValueError(f"sent a frame of kind {kind}, {size} bytes")
                body = self._read(sock, size, peer) if size else bytearray()
                with self._cond:
                    self.wire_received[peer] += _FRAME.size + size
                    if kind == DATA:
                        self._inbox[peer].append(body)
                    elif kind == BYE:
                        self._finished[peer] = True
                    elif kind == PONG:
                        self._pong[peer] = _PONG.unpack_from(body)
                    elif kind == PING:
                        on, since = self._waiting or (-1, time.monotonic())
                        if on >= 0:
                            since = max(since, self._last_rx[on])
                        self._outbox[peer].put((PONG, _PONG.pack(on, time.monotonic() - since)))
                    self._cond.notify_all()
                if kind == BYE:
                    return
                if kind == ABORT:
                    culprit, seen_by = _ABORT.unpack_from(body)
                    reason = bytes(body[_ABORT.size :]).decode(errors="replace")
                    self._fail(
                        PeerError(
                            f"{reason} (reported by rank {seen_by})",
                            rank=None if culprit < 0 else culprit,
                            address=(
                                format_address(self.addresses[culprit])
                                if 0 <= culprit < self._n
                                else ""
                            ),
                        ),
                        seen_by=seen_by,
                        reason=reason,
                    )
        except _Stop:
            return
        except EOFError:
            what = "vanished: its connection closed without a goodbye (process killed?)"
            self._fail(self._peer_error(peer, what))
        except (OSError, ValueError) as exc:
            with self._cond:
                if self._closing:
                    return
            self._fail(self._peer_error(peer, f"connection failed ({exc})"))

    def _read(self, sock: socket.socket, n: int, peer: int) -> bytearray:
        """Exactly n bytes; EOFError at the end of the stream, _Stop when closing. Small
        reads are served from bytes read ahead (`READ_AHEAD` per system call: many small
        frames per call); large ones go straight into the message."""
        ahead = self._ahead[peer]
        buf = bytearray(n)
        view = memoryview(buf)
        got = min(n, ahead.end - ahead.start)
        if got:
            view[:got] = memoryview(ahead.buf)[ahead.start : ahead.start + got]
            ahead.start += got
        while got < n:
            direct = n - got >= READ_AHEAD // 2
            try:
                k = sock.recv_into(view[got:] if direct else ahead.buf)
            except TimeoutError:  # idle: a stall is the recv()'s or the sender's to judge
                if self._closing:
                    raise _Stop() from None
                continue
            if k == 0:
                if self._closing:
                    raise _Stop()
                raise EOFError
            self._last_rx[peer] = time.monotonic()
            if direct:
                got += k
            else:
                take = min(n - got, k)
                view[got : got + take] = memoryview(ahead.buf)[:take]
                ahead.start, ahead.end = take, k
                got += take
        return buf

    # -- the mesh

    def _hello(self, dst: int) -> bytes:
        return _HELLO.pack(HELLO_MAGIC, self._rank, dst, self._n, self._token)

    def _connect_mesh(self, listener: socket.socket | None, deadline: float) -> None:
        own = self.addresses[self._rank]
        if listener is None and self._rank < self._n - 1:
            try:
                family = socket.AF_INET6 if ":" in own[0] else socket.AF_INET
                listener = socket.create_server(own, family=family, backlog=self._n + 8)
            except OSError as exc:
                raise PeerError(
                    f"rank {self._rank}: cannot listen on {format_address(own)}: {exc}"
                ) from None
        try:
            for peer in range(self._rank):
                self._socks[peer] = self._connect(peer, deadline)
            if self._rank < self._n - 1:
                assert listener is not None
                self._accept_all(listener, deadline)
        finally:
            if listener is not None:
                listener.close()

    def _connect(self, peer: int, deadline: float) -> socket.socket:
        addr = self.addresses[peer]
        last: OSError | None = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._peer_error(
                    peer, f"no connection within {self.timeout:g} s: is it running? ({last})"
                )
            try:
                sock = socket.create_connection(addr, timeout=min(left, 2.0))
            except OSError as exc:  # not listening yet, or unreachable: try again
                last = exc
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
                continue
            try:
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                sock.sendall(self._hello(peer))
                reply = _read_exact(sock, _HELLO.size)
            except (OSError, EOFError) as exc:
                sock.close()
                raise self._peer_error(
                    peer,
                    f"refused our hello ({type(exc).__name__}): another job's or run's "
                    "token, rank count or rank order?",
                ) from None
            if reply != self._expected_hello(peer):
                sock.close()
                raise self._peer_error(peer, "answered with another job's hello (token?)")
            return sock

    def _expected_hello(self, src: int) -> bytes:
        return _HELLO.pack(HELLO_MAGIC, src, self._rank, self._n, self._token)

    def _accept_all(self, listener: socket.socket, deadline: float) -> None:
        """Accept every higher rank. Hellos are read from all accepted connections at once
        (a selector), so a stray connection that says nothing delays no one; it is closed
        after HELLO_WAIT."""
        waiting = set(range(self._rank + 1, self._n))
        refused = 0
        hellos: dict[socket.socket, tuple[bytearray, float]] = {}  # conn: (bytes, until)
        sel = selectors.DefaultSelector()
        listener.setblocking(False)
        sel.register(listener, selectors.EVENT_READ)
        try:
            while waiting:
                now = time.monotonic()
                if now >= deadline:
                    stray = f"; refused {refused} stray connection(s)" if refused else ""
                    raise self._peer_error(
                        min(waiting),
                        f"did not connect to rank {self._rank} within {self.timeout:g} s: is "
                        f"it running, with the same peers and token?{stray}",
                    )
                for conn, (_, until) in list(hellos.items()):
                    if now >= until:
                        refused += _drop(sel, hellos, conn)
                wake = min([deadline, *(until for _, until in hellos.values())])
                for key, _ in sel.select(max(0.0, wake - now)):
                    if key.fileobj is listener:
                        try:
                            conn, _ = listener.accept()
                        except (BlockingIOError, InterruptedError):
                            continue
                        conn.setblocking(False)
                        hellos[conn] = (bytearray(), min(deadline, now + HELLO_WAIT))
                        sel.register(conn, selectors.EVENT_READ)
                        continue
                    fileobj = key.fileobj
                    assert isinstance(fileobj, socket.socket)
                    conn = fileobj
                    buf = hellos[conn][0]
                    try:
                        piece = conn.recv(_HELLO.size - len(buf))
                    except BlockingIOError:
                        continue
                    except OSError:
                        piece = b""
                    buf += piece
                    if piece and len(buf) < _HELLO.size:
                        continue
                    src = self._hello_from(buf, waiting) if piece else None
                    if src is None:
                        refused += _drop(sel, hellos, conn)
                        continue
                    sel.unregister(conn)
                    del hellos[conn]
                    try:
                        conn.settimeout(max(0.01, deadline - time.monotonic()))
                        conn.sendall(self._hello(src))
                    except OSError:
                        conn.close()
                        refused += 1
                        continue
                    self._socks[src] = conn
                    waiting.discard(src)
        finally:
            for conn in hellos:
                conn.close()
            sel.close()

    def _hello_from(self, hello: bytearray, waiting: set[int]) -> int | None:
        """The rank a hello names, if it is this job's and that rank is still expected."""
        magic, src, dst, n, token = _HELLO.unpack(hello)
        ok = (magic, dst, n, token) == (HELLO_MAGIC, self._rank, self._n, self._token)
        return int(src) if ok and src in waiting else None


def _drop(
    sel: selectors.BaseSelector,
    hellos: dict[socket.socket, tuple[bytearray, float]],
    conn: socket.socket,
) -> int:
    """Close a connection whose hello failed; returns 1 (one refused)."""
    sel.unregister(conn)
    del hellos[conn]
    conn.close()
    return 1


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        piece = sock.recv(n - len(buf))
        if not piece:
            raise EOFError
        buf += piece
    return bytes(buf)


def _write_frames(sock: socket.socket, frames: list[tuple[int, Message]]) -> None:
    """Frames in order: small ones joined with their headers into one send (up to
    SEND_PIECE), large ones in pieces; each send call waits at most the socket's timeout for
    progress."""
    group: list[bytes | memoryview] = []
    size = 0
    for kind, data in frames:
        view = memoryview(data).cast("B")
        head = _FRAME.pack(kind, len(view))
        if len(view) <= SMALL:
            group += [head, view]
            size += len(head) + len(view)
            if size < SEND_PIECE:
                continue
            sock.sendall(b"".join(group))
            group, size = [], 0
            continue
        group.append(head)
        sock.sendall(b"".join(group))
        group, size = [], 0
        off = 0
        while off < len(view):
            off += sock.send(view[off : off + SEND_PIECE])
    if group:
        sock.sendall(b"".join(group))
