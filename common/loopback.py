"""Loopback wires: Ethernet frames between two named ends in a private directory. No root.

A wire joins two ends, each an AF_UNIX socket bound to a path in a *wire dir*. Either end may
be a softswitch port or a host (`hostlib.transport.LoopbackWireTransport`); two switch ports
make a link. The two ends share one AF_UNIX *stream* connection that carries the frames as
records, each frame's length (2 bytes, little-endian) in front of it, so that one system call
moves as many frames as are ready, in either direction.

Names, in the wire dir (one dir may hold several switches' ends):

- `port_end("s1", 3)` = `s1.3`: port 3 of switch s1, whatever is on the other side;
- `host_end("s1", 3)` = `s1.3.host`: the host on that port (what `--wires` wires it to).

A link is two ports naming each other: s1 `--link 5=s2.3` and s2 `--link 3=s1.5`.

Who connects: of the two ends, the one whose name sorts after the other's (`s1.3.host` after
`s1.3`; `s2.3` after `s1.5`) is *active*: it binds its own path and connects from it to its
peer's path, again whenever the connection ends (a host on its next send or receive, a switch
port every `RETRY_CONNECT` seconds). The other end is *passive*: it listens on its path and
takes one connection at a time from its peer.

Why this cannot collide or be spoofed:

- no port numbers: ends are paths in a directory made private (mode 0700) by
  `tempfile.mkdtemp`, or a user-named one that must be private and owned by the user; other
  users cannot reach its sockets at all. A name that is taken is refused with what to change;
  a stale path left by a killed process is reused (the check runs under a lock on the dir).
  A mkdtemp'd dir is marked (`.owner`) and its maker holds a shared `flock` on it while it
  lives; a marked dir in the temp dir whose lock is free outlived its maker (SIGKILL) and is
  removed when the next one is made (`remove_stale_wire_dirs`).
- only the peer gets in: a passive end accepts a connection as its peer's only if it comes
  from a socket bound to the peer's path (the kernel reports the connecting socket's address)
  and no connection from the peer is live. Any other connection (unbound, another path, or a
  second one while the peer's is live) is foreign: its frames are read, dropped and counted in
  `rx_foreign`, never handed on (a port reads 16 foreign connections at once; more are closed
  unread and counted once each). An active end listens to nobody: other sockets cannot reach
  it at all (the kernel refuses a connection to a socket that is not listening).
- a live wire cannot be taken over: the connection, not the path, is the wire. A process of
  the same user can unlink a live end's path and bind its own socket there, but the passive
  end keeps its peer's live connection and treats the newcomer as foreign; frames still flow
  on the connection, so the thief receives nothing. A restarted peer is taken at once: a
  process that exits closes its connection, the passive end sees the end of the stream
  before the new connection (it reads the old one to its end first), and takes the new one.
  What the same user can still do is stand in for an end that is not connected (or unlink a
  passive end's path before its peer connects): like attaching to the switch with a debugger,
  that is within that user's rights; other users can do nothing.

Flow control and queues: the kernel buffers about `SOCKET_BUFFER` bytes per direction of a
connection; behind it each end keeps a user-space output queue of at most `OUT_QUEUE_BYTES`.
A sender never waits: whole frames that find both full are dropped and counted in
`tx_dropped`, like a full output queue; so are frames sent while nothing is connected and
frames still queued when a connection ends. A link between two switch ports therefore holds
thousands of frames each way (datagram wires held `net.unix.max_dgram_qlen`, often 10).

Why a stream and not datagrams with `recvmmsg`/`sendmmsg`: a datagram socket's peer is a path,
and whoever binds the path next is the peer (issue 14, item 5); an unconnected receiver queues
only `max_dgram_qlen` datagrams, which bounded links between switches and made the sender
sleep; and every datagram is still one kernel buffer and one address check, where a stream
moves hundreds of frames as one copy. Shared-memory rings would spare the copies too, but
need a wake-up channel, memory ordering that Python cannot express, and their own
credentials check; the stream has the kernel do all three.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import select
import shutil
import socket
import stat
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.common.batch_io import IoCounts

MAX_PATH = 107  # sun_path is 108 bytes with its NUL
LOCK_NAME = ".lock"
OWNER_MARK = ".owner"  # in a dir WireDir() made, once its maker holds the dir's flock
TEMP_PREFIX = "inaemu-wires-"
HOST_SUFFIX = ".host"
MAX_FRAME = 9216  # the longest frame a wire carries (jumbo)
RECORD_HEADER = 2  # bytes of a frame's length (little-endian) in front of it on the stream
SOCKET_BUFFER = 512 << 10  # SO_SNDBUF / SO_RCVBUF asked of the kernel per connection
OUT_QUEUE_BYTES = 256 << 10  # an end's output queue behind the kernel's buffer
READ_BYTES = 256 << 10  # bytes one read takes at most
RETRY_CONNECT = 0.02  # seconds between connection attempts of an active switch port
LISTEN_BACKLOG = 16
FEW = 16  # fewer frames than this are handled one by one: numpy's set-up costs more
_SEND_FLAGS = socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL
_MAX_IOV = 64  # buffers per sendmsg
_SWITCH_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*\Z")
_END_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")

Bytes = npt.NDArray[np.uint8]
IntArray = npt.NDArray[np.int64]
AnyInts = npt.NDArray[np.integer[Any]]
_NONE: IntArray = np.zeros(0, np.int64)
DRAINED, FULL, ENDED = 0, 1, 2  # what a read found: nothing more now, maybe more, the end


class WireError(OSError):
    """A wire that cannot be set up; the message is one line saying what to change."""


def check_switch_name(name: str) -> str:
    if not _SWITCH_NAME.match(name):
        raise WireError(
            errno.EINVAL,
            f"switch name {name!r} cannot name wire ends: use letters, digits, '_' and '-'",
        )
    return name


def port_end(switch: str, port: int) -> str:
    """The end of switch `switch`'s port `port`: `s1.3`."""
    if not 0 <= port < 512:
        raise WireError(errno.EINVAL, f"port {port} out of range 0..511")
    return f"{check_switch_name(switch)}.{port}"


def host_end(switch: str, port: int) -> str:
    """The host end of the wire on switch `switch`'s port `port`: `s1.3.host`."""
    return port_end(switch, port) + HOST_SUFFIX


def check_end_name(name: str) -> str:
    if not _END_NAME.match(name):
        raise WireError(
            errno.EINVAL,
            f"bad wire end name {name!r}: use letters, digits, '_', '-' and '.' "
            "(a switch port's end is SWITCH.PORT, e.g. s2.3)",
        )
    return name


class WireFormatError(ValueError):
    """A stream that does not hold records: a length of 0 or over MAX_FRAME."""


def split_records(buf: Bytes, start: int, end: int) -> tuple[IntArray, IntArray, int]:
    """The frames of the whole records in `buf[start:end]`: (offsets, lengths, the end of the
    last whole record). A run of records of the first one's length is split with numpy; the
    rest one by one."""
    view = buf.data
    pos = start
    offsets: list[IntArray] = []
    lengths: list[IntArray] = []
    if end - pos >= FEW * (RECORD_HEADER + 64):  # enough for numpy to pay (else one by one)
        first = view[pos] | view[pos + 1] << 8
        _check_length(first, pos)
        size = first + RECORD_HEADER
        count = (end - pos) // size
        if count > 1:
            rows = buf[pos : pos + count * size].reshape(count, size)
            same = (rows[:, 0] == first & 0xFF) & (rows[:, 1] == first >> 8)
            count = count if bool(same.all()) else int(same.argmin())
        if count:
            offsets.append(np.arange(count, dtype=np.int64) * size + (pos + RECORD_HEADER))
            lengths.append(np.full(count, first, np.int64))
            pos += count * size
    more_offsets: list[int] = []
    more_lengths: list[int] = []
    while end - pos >= RECORD_HEADER:
        n = view[pos] | view[pos + 1] << 8
        _check_length(n, pos)
        if end - pos - RECORD_HEADER < n:
            break
        more_offsets.append(pos + RECORD_HEADER)
        more_lengths.append(n)
        pos += n + RECORD_HEADER
    if more_offsets:
        offsets.append(np.array(more_offsets, np.int64))
        lengths.append(np.array(more_lengths, np.int64))
    if not offsets:
        return _NONE, _NONE, pos
    if len(offsets) == 1:
        return offsets[0], lengths[0], pos
    return np.concatenate(offsets), np.concatenate(lengths), pos


def _check_length(n: int, pos: int) -> None:
    if not 0 < n <= MAX_FRAME:
        raise WireFormatError(f"a record of {n} bytes at byte {pos}: not a wire's stream")


def encode_records(
    buf: Bytes, offsets: AnyInts, lengths: AnyInts
) -> tuple[memoryview | bytes, IntArray]:
    """Records of the frames `buf[offsets[i] : offsets[i] + lengths[i]]`, back to back, and
    where each record ends. Frames of one length at evenly spaced offsets (a batch's frames
    to one port, say) are copied by numpy in one go; others are joined one by one."""
    count = len(offsets)
    if count == 0:
        return b"", _NONE
    size = int(lengths[0])
    step = int(offsets[1] - offsets[0]) if count > 1 else size
    if count >= FEW and step > 0 and bool((lengths == size).all()):
        steps = np.diff(offsets)
        if count == 1 or bool((steps == step).all()):
            out = np.empty((count, size + RECORD_HEADER), np.uint8)
            out[:, 0] = size & 0xFF
            out[:, 1] = size >> 8
            first = int(offsets[0])
            out[:, RECORD_HEADER:] = np.lib.stride_tricks.as_strided(
                buf[first:], shape=(count, size), strides=(step, 1), writeable=False
            )
            ends = np.arange(1, count + 1, dtype=np.int64) * (size + RECORD_HEADER)
            return out.reshape(-1).data, ends
    view = buf.data
    parts: list[bytes | memoryview] = []
    ends_list: list[int] = []
    end = 0
    for off, n in zip(offsets.tolist(), lengths.tolist(), strict=True):
        parts.append(n.to_bytes(RECORD_HEADER, "little"))
        parts.append(view[off : off + n])
        end += n + RECORD_HEADER
        ends_list.append(end)
    return b"".join(parts), np.array(ends_list, np.int64)


def encode_frames(frames: list[bytes]) -> tuple[bytes, IntArray]:
    """Records of `frames` (for ends that build frames one by one)."""
    parts: list[bytes] = []
    for frame in frames:
        parts.append(len(frame).to_bytes(RECORD_HEADER, "little"))
        parts.append(frame)
    ends = np.cumsum(np.array([len(f) + RECORD_HEADER for f in frames], np.int64))
    return b"".join(parts), ends


class OutQueue:
    """Records a connection has not taken yet, at most `limit` bytes of them; whole records
    beyond that are refused (the caller counts them as dropped)."""

    def __init__(self, limit: int = OUT_QUEUE_BYTES) -> None:
        self.limit = limit
        self.chunks: deque[tuple[memoryview, IntArray]] = deque()  # records, their ends
        self.head = 0  # bytes of the first chunk already sent
        self.bytes = 0  # bytes not yet sent

    def __bool__(self) -> bool:
        return self.bytes > 0

    def push(self, data: memoryview | bytes, ends: IntArray, *, started: bool = False) -> int:
        """Queue records (`ends`: where each ends in `data`); how many did not fit. With
        `started`, the first record is the rest of one partly sent, and is always taken."""
        if not len(ends):
            return 0
        room = self.limit - self.bytes
        taken = len(ends)
        if int(ends[-1]) > room:
            taken = max(int(np.searchsorted(ends, room, side="right")), int(started))
            if taken == 0:
                return len(ends)
        size = int(ends[taken - 1])
        self.chunks.append((memoryview(data)[:size], ends[:taken]))
        self.bytes += size
        return len(ends) - taken

    def send(self, sock: socket.socket) -> int:
        """Hand the kernel all it takes now; the system calls made. OSError: connection lost."""
        calls = 0
        while self.chunks:
            bufs = [data for data, _ in list(self.chunks)[:_MAX_IOV]]
            bufs[0] = bufs[0][self.head :]
            try:
                sent = sock.sendmsg(bufs, [], _SEND_FLAGS)
            except (BlockingIOError, InterruptedError):
                return calls + 1
            calls += 1
            full = sent < sum(len(b) for b in bufs)
            self.bytes -= sent
            sent += self.head
            while self.chunks and sent >= len(self.chunks[0][0]):
                sent -= len(self.chunks.popleft()[0])
            self.head = sent
            if full:
                return calls
        self.head = 0
        return calls

    def frames(self) -> int:
        """Records not (wholly) sent yet."""
        total = 0
        for i, (_, ends) in enumerate(self.chunks):
            done = int(np.searchsorted(ends, self.head, side="right")) if i == 0 else 0
            total += len(ends) - done
        return total


class WireStream:
    """One connection of a wire: records in (a partial one carried to the next read) and out
    (through an `OutQueue`), counted in `counts`."""

    def __init__(self, sock: socket.socket, counts: IoCounts) -> None:
        sock.setblocking(False)
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
        self.sock = sock
        self.counts = counts
        self.out = OutQueue()
        self.carry = b""

    def fileno(self) -> int:
        return self.sock.fileno()

    def write(self, data: memoryview | bytes, ends: IntArray) -> int:
        """Send records: what the kernel takes now, the rest queued; how many records found
        no room. OSError: the connection is lost."""
        count = len(ends)
        if self.out:  # behind what is queued already
            dropped = self.out.push(data, ends)
            self.flush()
        else:
            self.counts.tx_calls += 1
            try:
                sent = self.sock.send(data, _SEND_FLAGS)
            except (BlockingIOError, InterruptedError):
                sent = 0
            dropped = 0
            if sent < len(data):
                done = int(np.searchsorted(ends, sent, side="right"))  # records wholly sent
                rest = memoryview(data)[sent:]
                dropped = self.out.push(rest, ends[done:] - sent, started=sent > 0)
        self.counts.tx_frames += count - dropped
        return dropped

    def flush(self) -> None:
        if self.out:
            self.counts.tx_calls += self.out.send(self.sock)

    def read(self, buf: Bytes, start: int, budget: int) -> tuple[IntArray, IntArray, int, int]:
        """One read of at most `budget` bytes into `buf[start:]` (the carried partial record
        first): (offsets, lengths, end of the last whole record, `DRAINED`, `FULL` (more may
        be waiting) or `ENDED`). WireFormatError: not a stream of records."""
        carry = len(self.carry)
        if carry:
            buf[start : start + carry] = np.frombuffer(self.carry, np.uint8)
        self.counts.rx_calls += 1
        try:
            got = self.sock.recv_into(buf.data[start + carry : start + budget])
        except (BlockingIOError, InterruptedError):
            return _NONE, _NONE, start, DRAINED
        except ConnectionError:
            got = 0
        if got == 0:
            return _NONE, _NONE, start, ENDED
        end = start + carry + got
        offsets, lengths, done = split_records(buf, start, end)
        self.carry = bytes(buf.data[done:end])
        self.counts.rx_frames += len(offsets)
        return offsets, lengths, done, FULL if end == start + budget else DRAINED

    def close(self) -> int:
        """Close the connection; the queued records it loses."""
        lost = self.out.frames()
        self.sock.close()
        return lost


WIRE_DIR_ROOM = 16  # bytes a wire dir leaves for its ends' names, e.g. /s1.12.host


def check_wire_dir_path(path: str | os.PathLike[str]) -> str:
    """`path` made absolute (`realpath`) if it is UTF-8 text and leaves room for the socket
    paths of the wire ends in it; WireError saying so otherwise. Creates nothing."""
    real = os.path.realpath(os.fspath(path))
    if not real.isascii():
        try:
            real.encode("utf-8")  # a byte that is not UTF-8 is a lone surrogate here
        except UnicodeEncodeError:
            shown = os.fsencode(real).decode("ascii", "backslashreplace")
            raise WireError(
                errno.EINVAL,
                f"wire dir {shown} is not UTF-8 text (the switches and workers pass it on as "
                "text): pick a name in UTF-8",
            ) from None
    if len(os.fsencode(real)) + WIRE_DIR_ROOM > MAX_PATH:
        raise WireError(
            errno.ENAMETOOLONG,
            f"wire dir {real} is too long for socket paths "
            f"(at most {MAX_PATH - WIRE_DIR_ROOM} bytes): pick a shorter one",
        )
    return real


class WireDir:
    """The private directory of wire ends.

    `WireDir()` makes a new one with `tempfile.mkdtemp` (owned: `cleanup()` removes it);
    `WireDir(path)` uses a named one, made 0700 if missing (`create=False`: it must exist);
    either way it must be a directory owned by this user with no group or other access.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, create: bool = True) -> None:
        # room for ends such as s1.12.host; each end's path is checked again in end_path
        self._owner_fd: int | None = None
        if path is None:
            remove_stale_wire_dirs()
            self.path = os.path.realpath(tempfile.mkdtemp(prefix=TEMP_PREFIX))
            self.owned = True
            try:
                check_wire_dir_path(self.path)
            except WireError:
                os.rmdir(self.path)  # $TMPDIR is too long: leave nothing behind
                raise
            # the lock first, then the mark: a marked dir whose lock is free has no maker
            self._owner_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            fcntl.flock(self._owner_fd, fcntl.LOCK_SH)
            with open(os.path.join(self.path, OWNER_MARK), "x"):
                pass
        else:
            self.path = check_wire_dir_path(path)  # before anything is made
            self.owned = False
            if create:
                try:
                    os.mkdir(self.path, 0o700)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise WireError(
                        exc.errno, f"cannot make wire dir {self.path}: {exc.strerror}"
                    ) from None
            self._check_private()

    def _check_private(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise WireError(
                errno.ENOENT,
                f"wire dir {self.path} does not exist: start the softswitch first and use "
                "the wire_dir of its READY line",
            ) from None
        if not stat.S_ISDIR(st.st_mode):
            raise WireError(errno.ENOTDIR, f"wire dir {self.path} is not a directory")
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise WireError(
                errno.EACCES,
                f"wire dir {self.path} is not private (mode {stat.S_IMODE(st.st_mode):o}, "
                f"owner uid {st.st_uid}): chmod 700 it, or pick another wire dir",
            )

    def __str__(self) -> str:
        return self.path

    def end_path(self, name: str) -> str:
        path = os.path.join(self.path, check_end_name(name))
        if len(os.fsencode(path)) > MAX_PATH:
            raise WireError(
                errno.ENAMETOOLONG,
                f"wire end path {path} is longer than {MAX_PATH} bytes: "
                "pick a shorter wire dir or switch name",
            )
        return path

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Serialize binds and unlinks in this dir across processes (`flock`)."""
        fd = os.open(
            os.path.join(self.path, LOCK_NAME),
            os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def bind(self, name: str, hint: str) -> tuple[socket.socket, int]:
        """A stream socket bound to end `name`; (socket, inode of its path). A stale path
        (no live socket behind it) is replaced; a live one is refused, with `hint` saying
        what to change."""
        path = self.end_path(name)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self.locked():
                try:
                    sock.bind(path)
                except OSError as exc:
                    if exc.errno != errno.EADDRINUSE:
                        raise
                    if _alive(path):
                        raise WireError(
                            errno.EADDRINUSE,
                            f"wire end {name} in {self.path} is held by another process: {hint}",
                        ) from None
                    os.unlink(path)
                    sock.bind(path)
                inode = os.stat(path).st_ino
        except WireError:
            sock.close()
            raise
        except OSError as exc:
            sock.close()
            raise WireError(
                exc.errno, f"cannot bind wire end {name} in {self.path}: {exc.strerror}"
            ) from None
        return sock, inode

    def release(self, name: str, inode: int) -> None:
        """Remove end `name`'s path if it is still the one bound with `inode`."""
        path = os.path.join(self.path, name)
        try:
            with self.locked():
                if os.stat(path).st_ino == inode:
                    os.unlink(path)
        except FileNotFoundError:  # the dir (or the path) is gone already
            pass

    def cleanup(self) -> None:
        """Remove the directory if this object made it."""
        if self.owned:
            shutil.rmtree(self.path, ignore_errors=True)
        if self._owner_fd is not None:
            os.close(self._owner_fd)
            self._owner_fd = None


def remove_stale_wire_dirs(root: str | None = None) -> None:
    """Remove this user's wire dirs in `root` (the temp dir) that `WireDir()` made for a
    process that is gone: marked, and nobody holds their lock."""
    root = root or tempfile.gettempdir()
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(TEMP_PREFIX):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != os.geteuid() or not os.path.exists(
                os.path.join(entry.path, OWNER_MARK)
            ):
                continue
            fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:  # its maker lives (EWOULDBLOCK)
            pass
        finally:
            os.close(fd)


def _alive(path: str) -> bool:
    """Whether a live socket is bound to `path`: a datagram probe's connect is refused
    (ECONNREFUSED) only by a stale path; a live stream socket answers EPROTOTYPE."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.connect(path)
        return True
    except ConnectionRefusedError:
        return False
    except FileNotFoundError:
        return False
    except OSError:  # EPROTOTYPE (a stream socket), EPERM (a connected datagram socket)
        return True
    finally:
        probe.close()


class WireEnd:
    """One end of a loopback wire: a stream socket bound to `wire_dir/name`, whose peer is
    `wire_dir/peer`. An active end (its name sorts after the peer's) connects to the peer;
    a passive one listens (its owner accepts: `softswitch.ports.LoopbackWire`). `stream` is
    the live connection, if any. Subclasses add the frame paths (switch port, host ends)."""

    def __init__(self, wire_dir: WireDir, name: str, peer: str, *, hint: str) -> None:
        self.wire_dir = wire_dir
        self.end = name
        self.peer_end = check_end_name(peer)
        if peer == name:
            raise WireError(errno.EINVAL, f"wire end {name} cannot be its own peer")
        self.path = wire_dir.end_path(name)
        self.peer = wire_dir.end_path(peer)
        self.active = name > peer
        self._hint = hint
        self.sock, self._inode = wire_dir.bind(name, hint)
        self.sock.setblocking(False)
        if not self.active:
            self.sock.listen(LISTEN_BACKLOG)
        self._fresh = True  # an active end's socket has not connected yet
        self._closed = False
        self.stream: WireStream | None = None
        self.counts = IoCounts()
        self.rx_foreign = 0  # frames from anyone but the peer, dropped
        self.tx_dropped = 0  # frames not delivered: nobody connected, or no room

    @property
    def connected(self) -> bool:
        return self.stream is not None

    def fileno(self) -> int:
        return self.sock.fileno()

    def connect(self) -> bool:
        """An active end: connect to the peer unless connected (from a new socket on the same
        path after a connection ended). Whether a connection is live now."""
        if self.stream is not None:
            return True
        if not self._fresh:
            try:
                self._rebind()
            except WireError:  # someone else holds our path now
                return False
        try:
            self.sock.connect(self.peer)
        except OSError:  # no peer (yet), a stale path, or its backlog is full
            return False
        self._fresh = False
        self.stream = WireStream(self.sock, self.counts)
        return True

    def _rebind(self) -> None:
        self.sock.close()
        self.wire_dir.release(self.end, self._inode)
        self.sock, self._inode = self.wire_dir.bind(self.end, self._hint)
        self.sock.setblocking(False)
        self._fresh = True

    def lose_stream(self) -> None:
        """The connection ended (or failed): its queued frames are lost and counted."""
        if self.stream is not None:
            self.tx_dropped += self.stream.close()
            self.stream = None

    def write(self, data: memoryview | bytes, ends: IntArray) -> None:
        """Send records (an active end connects first if it must); whatever cannot go out
        now or be queued is dropped and counted in `tx_dropped`."""
        if self.stream is None and not (self.active and self.connect()):
            self.tx_dropped += len(ends)
            return
        assert self.stream is not None
        try:
            self.tx_dropped += self.stream.write(data, ends)
        except OSError:  # the peer went away
            self.lose_stream()

    def read(self, buf: Bytes, start: int, budget: int) -> tuple[IntArray, IntArray, int, int]:
        """One read from the live connection (`WireStream.read`; `DRAINED` if none). A
        connection that ends, or breaks the record format, is dropped (`ENDED`)."""
        stream = self.stream
        if stream is None:
            return _NONE, _NONE, start, DRAINED
        try:
            got = stream.read(buf, start, budget)
        except WireFormatError:
            got = _NONE, _NONE, start, ENDED
        if got[3] == ENDED:
            self.lose_stream()
        return got

    def wait(self, timeout: float, lock: AbstractContextManager[object] | None = None) -> bool:
        """A host end: wait at most `timeout` for frames, sending queued ones as the peer
        takes them (connecting first if need be); whether frames, or the end of the
        connection, are waiting. `lock`, if given, is held around everything but the wait
        itself (for ends that another thread sends on)."""
        guard = lock if lock is not None else nullcontext()
        deadline = time.monotonic() + max(timeout, 0.0)
        with guard:
            connected = self.stream is not None or (self.active and self.connect())
        if not connected:
            time.sleep(max(timeout, 0.0))
            return False
        while True:
            with guard:
                stream = self.stream
                if stream is None:
                    return False
                out = [stream.sock] if stream.out else []
            left = max(deadline - time.monotonic(), 0.0)
            try:
                readable, writable, _ = select.select([stream.sock], out, [], left)
            except (OSError, ValueError):  # closed by another thread meanwhile
                return False
            if writable:
                with guard:
                    if self.stream is stream:
                        try:
                            stream.flush()
                        except OSError:
                            self.lose_stream()
                            return False
            if readable:
                return True
            if not writable or time.monotonic() >= deadline:
                return False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.lose_stream()
        self.sock.close()
        self.wire_dir.release(self.end, self._inode)
