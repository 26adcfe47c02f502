"""Many frames per system call: `recvmmsg`/`sendmmsg` through ctypes, and the counts that show
how many frames each call moved.

Python's socket module has no `recvmmsg`/`sendmmsg`; `Mmsg` calls libc's on a socket's file
descriptor with message headers prepared once:

    mm = Mmsg(slots=256, slot_bytes=2048)          # receive slots, and room for 256 sends
    n = mm.recv(sock.fileno())                     # frames in slots 0..n-1, lengths mm.lengths
    frames = mm.slots[:n]                           # (n, slot_bytes) uint8, views, no copy
    sent, err, calls = mm.send(fd, buf, offsets, lengths)   # frames buf[o:o+l], from the
                                                            # caller's buffer, no copy

`send` stops at a frame the kernel refuses and says why (its errno), so that a caller can
count it as lost and go on, or wait for room and try it again. Linux only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import socket
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


class _Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _Msghdr(ctypes.Structure):
    _fields_ = [
        ("msg_name", ctypes.c_void_p),
        ("msg_namelen", ctypes.c_uint32),
        ("msg_iov", ctypes.POINTER(_Iovec)),
        ("msg_iovlen", ctypes.c_size_t),
        ("msg_control", ctypes.c_void_p),
        ("msg_controllen", ctypes.c_size_t),
        ("msg_flags", ctypes.c_int),
    ]


class _Mmsghdr(ctypes.Structure):
    _fields_ = [("msg_hdr", _Msghdr), ("msg_len", ctypes.c_uint)]


_libc.recvmmsg.argtypes = [
    ctypes.c_int,
    ctypes.POINTER(_Mmsghdr),
    ctypes.c_uint,
    ctypes.c_int,
    ctypes.c_void_p,
]
_libc.recvmmsg.restype = ctypes.c_int
_libc.sendmmsg.argtypes = [ctypes.c_int, ctypes.POINTER(_Mmsghdr), ctypes.c_uint, ctypes.c_int]
_libc.sendmmsg.restype = ctypes.c_int

_MSG_LEN = _Mmsghdr.msg_len.offset
_IOV_BASE, _IOV_LEN = _Iovec.iov_base.offset, _Iovec.iov_len.offset
_DONTWAIT = socket.MSG_DONTWAIT


@dataclass
class IoCounts:
    """Frames moved and the system calls that moved them, for one port or transport:
    `rx_calls` reads that returned frames or nothing, `tx_calls` sends. A frame read from a
    memory-mapped ring costs no call (`rx_calls` stays)."""

    rx_frames: int = 0
    rx_calls: int = 0
    tx_frames: int = 0
    tx_calls: int = 0

    def add(self, other: IoCounts) -> None:
        self.rx_frames += other.rx_frames
        self.rx_calls += other.rx_calls
        self.tx_frames += other.tx_frames
        self.tx_calls += other.tx_calls


def sockaddr_in(ip: str, port: int) -> bytes:
    """A `struct sockaddr_in` for `sendmmsg`'s message names."""
    return (
        socket.AF_INET.to_bytes(2, "little")
        + port.to_bytes(2, "big")
        + socket.inet_aton(ip)
        + bytes(8)
    )


class Mmsg:
    """Message headers for `recvmmsg` into `slots` buffers of `slot_bytes`, and for
    `sendmmsg` of up to `slots` frames from any buffer (optionally all to `name`, a packed
    socket address)."""

    def __init__(self, slots: int, slot_bytes: int, *, name: bytes | None = None) -> None:
        self.capacity = slots
        self.slot_bytes = slot_bytes
        self.buf: npt.NDArray[np.uint8] = np.zeros(slots * slot_bytes, np.uint8)
        self.slots = self.buf.reshape(slots, slot_bytes)
        base = self.buf.ctypes.data
        self._rx_iov = (_Iovec * slots)()
        self._rx = (_Mmsghdr * slots)()
        for i in range(slots):
            self._rx_iov[i].iov_base = base + i * slot_bytes
            self._rx_iov[i].iov_len = slot_bytes
            self._rx[i].msg_hdr.msg_iov = ctypes.pointer(self._rx_iov[i])
            self._rx[i].msg_hdr.msg_iovlen = 1
        self._rx_len = _field_view(self._rx, _MSG_LEN, ctypes.sizeof(_Mmsghdr), np.uint32)
        self._tx_iov = (_Iovec * slots)()
        self._tx = (_Mmsghdr * slots)()
        self._name = ctypes.create_string_buffer(name) if name else None
        for i in range(slots):
            hdr = self._tx[i].msg_hdr
            hdr.msg_iov = ctypes.pointer(self._tx_iov[i])
            hdr.msg_iovlen = 1
            if self._name is not None and name is not None:
                hdr.msg_name = ctypes.addressof(self._name)
                hdr.msg_namelen = len(name)
        stride = ctypes.sizeof(_Iovec)
        self._tx_base = _field_view(self._tx_iov, _IOV_BASE, stride, np.uint64)
        self._tx_len = _field_view(self._tx_iov, _IOV_LEN, stride, np.uint64)

    @property
    def lengths(self) -> npt.NDArray[np.uint32]:
        """Bytes of each message the last `recv` took (slot i: `lengths[i]`)."""
        return self._rx_len

    def recv(self, fd: int) -> int:
        """Messages waiting on `fd` into the slots, at most `capacity`, without waiting: how
        many (0 when there were none). Longer messages are cut at `slot_bytes`."""
        n = _libc.recvmmsg(fd, self._rx, self.capacity, _DONTWAIT, None)
        if n >= 0:
            return int(n)
        err = ctypes.get_errno()
        if err in (errno.EAGAIN, errno.EINTR):
            return 0
        raise OSError(err, os.strerror(err))

    def send(
        self, fd: int, buf: npt.NDArray[np.uint8], offsets: IntArray, lengths: IntArray
    ) -> tuple[int, int, int]:
        """Frames `buf[offsets[i] : offsets[i] + lengths[i]]` in order, `capacity` per call,
        until the kernel refuses one: (frames sent, the refused frame's errno or 0 if all
        went, calls made). The refused frame is frame number `sent`."""
        total = len(offsets)
        base = buf.ctypes.data
        sent = calls = 0
        while sent < total:
            n = min(total - sent, self.capacity)
            self._tx_base[:n] = base + offsets[sent : sent + n]
            self._tx_len[:n] = lengths[sent : sent + n]
            k = _libc.sendmmsg(fd, self._tx, n, _DONTWAIT)
            calls += 1
            if k > 0:
                sent += k
                continue
            err = ctypes.get_errno()
            if err != errno.EINTR:
                return sent, err, calls
        return sent, 0, calls


def _field_view(
    array: ctypes.Array[Any], offset: int, stride: int, dtype: type[np.generic]
) -> npt.NDArray[Any]:
    """One field of every element of a ctypes array of structures, as a writable numpy view."""
    count = len(array)
    raw = np.ctypeslib.as_array(
        (ctypes.c_uint8 * (count * stride)).from_address(ctypes.addressof(array))
    )
    view: npt.NDArray[Any] = np.ndarray(
        (count,), dtype=dtype, buffer=raw, offset=offset, strides=(stride,)
    )
    return view
