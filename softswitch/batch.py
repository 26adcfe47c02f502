"""Frames in batches: how the softswitch's ports and its data plane hand frames to each other.

A `FrameBatch` holds up to `capacity` frames back to back in one byte buffer, with each frame's
offset, length and port (the ingress port of a batch that goes into a data plane, the egress
port of a batch that comes out of one). Ports fill a batch from the kernel in as few system
calls as they can and send one out the same way; a data plane processes a whole batch in
arrival order, exactly as that many calls of `process(port, frame)` would, and returns what
it emits in emission order (`process_batch`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

MAX_FRAME = 9216  # the largest frame a port takes (jumbo); longer ones are truncated by recv
BATCH_FRAMES = 256  # frames per batch a port reads at most
BATCH_BYTES = BATCH_FRAMES * 1600  # typical frames are <= 1514 bytes; a batch grows if needed


class Frames(NamedTuple):
    """A `FrameBatch`'s arrays as one record (`FrameBatch.arrays`; the compiled engine's)."""

    buf: npt.NDArray[np.uint8]
    offset: npt.NDArray[np.int64]
    length: npt.NDArray[np.int32]
    port: npt.NDArray[np.int32]


class FrameBatch:
    """Frames `0 .. n-1`: frame i is `buf[offset[i] : offset[i] + length[i]]` on `port[i]`."""

    __slots__ = ("buf", "length", "n", "offset", "port")

    def __init__(self, capacity: int = BATCH_FRAMES, buf_bytes: int = BATCH_BYTES) -> None:
        self.buf: npt.NDArray[np.uint8] = np.zeros(buf_bytes, np.uint8)
        self.offset: npt.NDArray[np.int64] = np.zeros(capacity, np.int64)
        self.length: npt.NDArray[np.int32] = np.zeros(capacity, np.int32)
        self.port: npt.NDArray[np.int32] = np.zeros(capacity, np.int32)
        self.n = 0

    @classmethod
    def empty(cls, capacity: int, buf_bytes: int) -> FrameBatch:
        """A batch whose arrays are left uninitialised, for a writer that sets every byte it
        hands out (the compiled engine's output): what `__init__`'s zeroing would cost per
        batch is a good part of a small batch's time."""
        batch = cls.__new__(cls)
        batch.buf = np.empty(buf_bytes, np.uint8)
        batch.offset = np.empty(capacity, np.int64)
        batch.length = np.empty(capacity, np.int32)
        batch.port = np.empty(capacity, np.int32)
        batch.n = 0
        return batch

    @property
    def capacity(self) -> int:
        return len(self.offset)

    @property
    def used_bytes(self) -> int:
        if self.n == 0:
            return 0
        last = self.n - 1
        return int(self.offset[last]) + int(self.length[last])

    def clear(self) -> None:
        self.n = 0

    def arrays(self) -> Frames:
        return Frames(self.buf, self.offset, self.length, self.port)

    def reserve(self, frames: int, nbytes: int) -> None:
        """Room for `frames` more frames of `nbytes` more bytes (grows the arrays if needed)."""
        need_frames = self.n + frames
        if need_frames > self.capacity:
            size = max(need_frames, 2 * self.capacity)
            for name in ("offset", "length", "port"):
                old = getattr(self, name)
                new = np.zeros(size, old.dtype)
                new[: self.n] = old[: self.n]
                setattr(self, name, new)
        need_bytes = self.used_bytes + nbytes
        if need_bytes > len(self.buf):
            buf = np.zeros(max(need_bytes, 2 * len(self.buf)), np.uint8)
            buf[: self.used_bytes] = self.buf[: self.used_bytes]
            self.buf = buf

    def append(self, port: int, frame: bytes | bytearray | memoryview) -> None:
        size = len(frame)
        self.reserve(1, size)
        start = self.used_bytes
        self.buf[start : start + size] = np.frombuffer(frame, np.uint8)
        i = self.n
        self.offset[i] = start
        self.length[i] = size
        self.port[i] = port
        self.n = i + 1

    def frame(self, i: int) -> bytes:
        start = int(self.offset[i])
        return self.buf[start : start + int(self.length[i])].tobytes()

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        for i in range(self.n):
            yield int(self.port[i]), self.frame(i)

    @classmethod
    def of(cls, frames: Iterable[tuple[int, bytes]]) -> FrameBatch:
        items = list(frames)
        batch = cls(max(1, len(items)), max(1, sum(len(f) for _, f in items)))
        for port, frame in items:
            batch.append(port, frame)
        return batch


class DataPlane(Protocol):
    """What a softswitch runs: one frame at a time, or a whole batch in arrival order."""

    def process(self, ingress_port: int, frame: bytes) -> list[tuple[int, bytes]]: ...
    def process_batch(self, batch: FrameBatch) -> FrameBatch: ...
