"""bmv2's packet-in socket: a nanomsg PAIR socket (`simple_switch --packet-in ipc://...`)
through which a program feeds frames into the switch's ports and receives every frame it
sends out, instead of network interfaces or pcap files.

libnanomsg is loaded with ctypes: simple_switch links it, so it is there wherever bmv2 is.
A message is a header of three native ints, (type, port, length), then the frame; type 3
(PACKET_IN) goes into the switch, type 4 (PACKET_OUT) comes out (bmv2's
src/bm_sim/dev_mgr_packet_in.cpp).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import struct
from collections.abc import Sequence

AF_SP = 1
NN_PAIR = 16  # NN_PROTO_PAIR * 16
NN_POLLIN = 1
NN_DONTWAIT = 1
NN_MSG = ctypes.c_size_t(-1).value
NN_SOL_SOCKET = 0
NN_LINGER = 1
NN_SNDTIMEO = 4
SEND_TIMEOUT_MS = 5000  # a switch that takes no frame for this long has stopped reading
EAGAIN = 11
MSG_PACKET_IN = 3
MSG_PACKET_OUT = 4
_HEADER = struct.Struct("<iii")
LIBRARY = "libnanomsg.so.5"


class NanomsgError(RuntimeError):
    pass


class _PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


_lib: ctypes.CDLL | None = None


def library() -> ctypes.CDLL:
    """libnanomsg, loaded once; NanomsgError saying what to install when it is missing."""
    global _lib
    if _lib is None:
        name = ctypes.util.find_library("nanomsg") or LIBRARY
        try:
            lib = ctypes.CDLL(name, use_errno=True)
        except OSError as exc:
            raise NanomsgError(
                f"cannot load libnanomsg ({exc}); it comes with bmv2 (Debian: libnanomsg5)"
            ) from None
        lib.nn_socket.argtypes = [ctypes.c_int, ctypes.c_int]
        lib.nn_connect.argtypes = [ctypes.c_int, ctypes.c_char_p]
        lib.nn_send.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.nn_recv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.nn_freemsg.argtypes = [ctypes.c_void_p]
        lib.nn_close.argtypes = [ctypes.c_int]
        lib.nn_setsockopt.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_size_t,
        ]
        lib.nn_poll.argtypes = [ctypes.POINTER(_PollFd), ctypes.c_int, ctypes.c_int]
        lib.nn_strerror.argtypes = [ctypes.c_int]
        lib.nn_strerror.restype = ctypes.c_char_p
        _lib = lib
    return _lib


def _failed(what: str) -> NanomsgError:
    err = ctypes.get_errno()
    return NanomsgError(f"nanomsg {what}: {library().nn_strerror(err).decode()}")


class PacketSocket:
    """The program's end of one switch's packet-in socket."""

    def __init__(self, address: str) -> None:
        lib = library()
        self.address = address
        self.fd = lib.nn_socket(AF_SP, NN_PAIR)
        if self.fd < 0:
            raise _failed("socket")
        for option, value in ((NN_LINGER, 0), (NN_SNDTIMEO, SEND_TIMEOUT_MS)):
            c_value = ctypes.c_int(value)
            lib.nn_setsockopt(self.fd, NN_SOL_SOCKET, option, ctypes.byref(c_value), 4)
        if lib.nn_connect(self.fd, address.encode()) < 0:
            self.close()
            raise _failed(f"connect {address}")

    def send(self, port: int, frame: bytes) -> None:
        """Feed `frame` into the switch's `port` (queued until the switch is connected)."""
        msg = _HEADER.pack(MSG_PACKET_IN, port, len(frame)) + frame
        if library().nn_send(self.fd, msg, len(msg), 0) != len(msg):
            raise _failed(f"send to {self.address}")

    def receive(self) -> tuple[int, bytes] | None:
        """A frame the switch sent out, as (port, frame), if one is waiting; other messages
        are skipped."""
        lib = library()
        buf = ctypes.c_void_p()
        while True:
            n = lib.nn_recv(self.fd, ctypes.byref(buf), NN_MSG, NN_DONTWAIT)
            if n < 0:
                if ctypes.get_errno() == EAGAIN:
                    return None
                raise _failed(f"receive from {self.address}")
            try:
                msg = ctypes.string_at(buf, n)
            finally:
                lib.nn_freemsg(buf)
            if n >= _HEADER.size:
                kind, port, length = _HEADER.unpack_from(msg)
                if kind == MSG_PACKET_OUT:
                    return port, msg[_HEADER.size : _HEADER.size + length]

    def close(self) -> None:
        if self.fd >= 0:
            library().nn_close(self.fd)
            self.fd = -1


def wait_readable(sockets: Sequence[PacketSocket], timeout_s: float) -> list[PacketSocket]:
    """The sockets with a message waiting, after at most `timeout_s` seconds."""
    fds = (_PollFd * len(sockets))(*(_PollFd(s.fd, NN_POLLIN, 0) for s in sockets))
    n = library().nn_poll(fds, len(sockets), max(0, round(timeout_s * 1000)))
    if n < 0:
        raise _failed("poll")
    return [s for s, fd in zip(sockets, fds, strict=True) if fd.revents & NN_POLLIN]
