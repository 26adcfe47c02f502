"""Loopback wires: Ethernet frames between two named ends in a private directory. No root.

A wire joins two ends; an end is an AF_UNIX datagram socket bound to a path in a *wire dir*
and sends to the other end's path, one frame per datagram. Either end may be a softswitch
port or a host (`hostlib.transport.LoopbackWireTransport`); two switch ports make a link.

Names, in the wire dir (one dir may hold several switches' ends):

- `port_end("s1", 3)` = `s1.3`: port 3 of switch s1, whatever is on the other side;
- `host_end("s1", 3)` = `s1.3.host`: the host on that port (what `--wires` wires it to).

A link is two ports naming each other: s1 `--link 5=s2.3` and s2 `--link 3=s1.5`.

Why this cannot collide or be spoofed:

- no port numbers: ends are paths in a directory made private (mode 0700) by
  `tempfile.mkdtemp`, or a user-named one that must be private and owned by the user; other
  users cannot reach its sockets at all. A name that is taken is refused with what to change;
  a stale path left by a killed process is reused (the check runs under a lock on the dir).
  A mkdtemp'd dir is marked (`.owner`) and its maker holds a shared `flock` on it while it
  lives; a marked dir in the temp dir whose lock is free outlived its maker (SIGKILL) and is
  removed when the next one is made (`remove_stale_wire_dirs`).
- only the peer gets in: a datagram carries its sender's bound path. A softswitch port keeps
  its socket unconnected, reads with `recvfrom` and drops every datagram not sent from its
  peer's path, counting it in `rx_foreign`. A host end `connect()`s to its switch port, so
  the kernel itself refuses (EPERM) datagrams to it from any other socket; before it is
  connected it filters and counts like a switch port. A process can bind a path only if
  nobody holds it, so it cannot take the path of a live peer.

Flow control: Linux queues at most `net.unix.max_dgram_qlen` (often 10) datagrams on a socket
for senders it is not connected to; a sender then sleeps in `sendto` until the reader drains
(bounded by `SO_SNDTIMEO`, the output-queue wait). Frames from a switch to a host are not
limited that way, because the host end is connected to the switch port; that is why hosts
connect (with unconnected host ends the switch stalls on every slow worker: ~10x fewer
packets/s in bench/bench_softswitch.py). Switch ports do not connect, so that they can count
what they drop and take a restarted peer at once; a link between two switch ports therefore
has about max_dgram_qlen frames in flight each way before its sender waits.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import socket
import stat
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

SOCKET_BUFFER = 4 << 20
MAX_PATH = 107  # sun_path is 108 bytes with its NUL
LOCK_NAME = ".lock"
OWNER_MARK = ".owner"  # in a dir WireDir() made, once its maker holds the dir's flock
TEMP_PREFIX = "inaemu-wires-"
HOST_SUFFIX = ".host"
_SWITCH_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*\Z")
_END_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")


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


def set_send_timeout(sock: socket.socket, seconds: float) -> None:
    """Bound how long a blocking send waits for room at the receiver (`SO_SNDTIMEO`)."""
    usec = max(int(seconds * 1e6), 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", *divmod(usec, 10**6)))


WIRE_DIR_ROOM = 16  # bytes a wire dir leaves for its ends' names, e.g. /s1.12.host


def check_wire_dir_path(path: str | os.PathLike[str]) -> str:
    """`path` made absolute (`realpath`) if it leaves room for the socket paths of the wire
    ends in it; WireError saying so otherwise. Creates nothing."""
    real = os.path.realpath(os.fspath(path))
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
        """A datagram socket bound to end `name`; (socket, inode of its path). A stale path
        (no live socket behind it) is replaced; a live one is refused, with `hint` saying
        what to change."""
        path = self.end_path(name)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
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
    """Whether a live socket is bound to `path` (a stale path refuses connections)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.connect(path)
        return True
    except ConnectionRefusedError:
        return False
    except PermissionError:  # a live socket connected to someone else
        return True
    finally:
        probe.close()


class WireEnd:
    """One end of a loopback wire: a datagram socket bound to `wire_dir/name`, whose peer is
    `wire_dir/peer`. Subclasses add the frame paths (switch port, host transport)."""

    def __init__(
        self, wire_dir: WireDir, name: str, peer: str, *, hint: str, send_timeout: float
    ) -> None:
        self.wire_dir = wire_dir
        self.end = name
        self.peer_end = check_end_name(peer)
        self.path = wire_dir.end_path(name)
        self.peer = wire_dir.end_path(peer)
        self.sock, self._inode = wire_dir.bind(name, hint)
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            self.sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
        set_send_timeout(self.sock, send_timeout)
        self.rx_foreign = 0  # datagrams from anyone but the peer, dropped
        self.tx_dropped = 0  # frames not delivered: peer absent, or no room in time

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            self.wire_dir.release(self.end, self._inode)
            self.sock.close()
