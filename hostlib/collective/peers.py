"""Message channels between the ranks of a host collective.

`PeerChannel` is what the schedule executor (`executor.py`) needs from a transport: ordered,
reliable messages to and from each other rank, sent in the background, received with a bounded
wait, and byte counters per peer. Two implementations:

- `TcpPeers` (`tcp_peers.py`): a full mesh of TCP connections, one per pair of ranks;
- `WirePeerChannel` (`wire_peers.py`): IPv4/UDP frames through the embedded softswitch network.

`MemoryMesh` (this module) connects ranks that are threads of one process (tests).

A channel that sees a peer vanish or stall raises `PeerError` naming the peer's rank and
address; nothing waits forever.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Protocol

Message = bytes | bytearray | memoryview


class PeerError(RuntimeError):
    """A peer that vanished, stalled or sent something unexpected, or a channel used wrongly:
    one line naming the peer (`rank`, `address` when known)."""

    def __init__(self, message: str, *, rank: int | None = None, address: str = "") -> None:
        super().__init__(message)
        self.rank = rank
        self.address = address


class PeerChannel(Protocol):
    """Reliable, ordered messages between rank `rank` and every other of `n_ranks` ranks.

    - `send(dst, data)` queues a message for rank `dst` and returns; it is delivered in the
      background, in order, while this rank sends to and receives from others (so two ranks
      that send each other large messages at once do not deadlock). The caller must not
      change `data` afterwards. A failure raises `PeerError`, at once or at a later call.
    - `recv(src, timeout)` returns rank `src`'s next message, or raises `PeerError` naming
      `src` (or the peer whose failure stopped the exchange) after at most `timeout` seconds.
    - `flush(timeout)` waits until everything sent was delivered (`PeerError` after timeout);
      `close()` flushes (bounded) and releases the channel; it is idempotent.
    - `who(rank)` names a rank for messages: "rank 2 (10.0.0.3:7002)".
    - `bytes_sent()`, `bytes_received()`: message bytes (what `send` took and `recv` gave)
      per rank so far, a list of `n_ranks` counts (0 for this rank).
    """

    @property
    def rank(self) -> int: ...

    @property
    def n_ranks(self) -> int: ...

    def send(self, dst: int, data: Message) -> None: ...

    def recv(self, src: int, timeout: float) -> bytes | bytearray: ...

    def flush(self, timeout: float | None = None) -> None: ...

    def close(self) -> None: ...

    def who(self, rank: int) -> str: ...

    def bytes_sent(self) -> list[int]: ...

    def bytes_received(self) -> list[int]: ...


# ---------------------------------------------------------------------------- addresses

Address = tuple[str, int]


def parse_address(text: str) -> Address:
    """ "host:port" or "[v6]:port" -> (host, port); ValueError saying what is wrong."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"peer address {text!r}: expected host:port (port 0..65535)")
    return host.removeprefix("[").removesuffix("]"), int(port)


def parse_peers(text: str) -> list[Address]:
    """ "ip:port,ip:port,..." (rank order) -> addresses; ValueError on a bad or repeated one."""
    addrs = [parse_address(a) for a in text.split(",") if a.strip()]
    if not addrs:
        raise ValueError("no peer addresses: expected ip:port,ip:port,... in rank order")
    if len(set(addrs)) != len(addrs):
        raise ValueError(f"peer addresses repeat: {text!r}")
    return addrs


def format_address(addr: Address) -> str:
    host, port = addr
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# ---------------------------------------------------------------------------- in memory


class MemoryMesh:
    """`n_ranks` channels connected in memory, for ranks that are threads of one process:
    `MemoryMesh(4).channels[r]` is rank r's. A closed rank's peers get `PeerError` once its
    messages are taken. One lock; a condition per rank, which a message to it wakes (one
    for all woke every waiting rank for every message: hundreds of ranks crawled)."""

    def __init__(self, n_ranks: int) -> None:
        if n_ranks < 1:
            raise ValueError(f"a mesh needs at least one rank, got {n_ranks}")
        self.lock = threading.Lock()
        self.conds = [threading.Condition(self.lock) for _ in range(n_ranks)]
        self.boxes = [[deque[bytes]() for _ in range(n_ranks)] for _ in range(n_ranks)]
        self.closed = [False] * n_ranks
        self.channels = [MemoryChannel(self, r) for r in range(n_ranks)]


class MemoryChannel:
    """Rank `rank`'s end of a `MemoryMesh` (a `PeerChannel`)."""

    def __init__(self, mesh: MemoryMesh, rank: int) -> None:
        self.mesh = mesh
        self._rank = rank
        self._sent = [0] * len(mesh.closed)
        self._received = [0] * len(mesh.closed)

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def n_ranks(self) -> int:
        return len(self.mesh.closed)

    def who(self, rank: int) -> str:
        return f"rank {rank} (in memory)"

    def _check(self, peer: int) -> None:
        if not (0 <= peer < self.n_ranks and peer != self._rank):
            raise PeerError(f"rank {self._rank}: no peer rank {peer} (0..{self.n_ranks - 1})")

    def send(self, dst: int, data: Message) -> None:
        self._check(dst)
        with self.mesh.lock:
            if self.mesh.closed[self._rank]:
                raise PeerError(f"rank {self._rank}: send on a closed channel")
            if self.mesh.closed[dst]:
                raise PeerError(f"{self.who(dst)} has closed", rank=dst, address="memory")
            self.mesh.boxes[self._rank][dst].append(bytes(data))
            self._sent[dst] += len(data)
            self.mesh.conds[dst].notify_all()

    def recv(self, src: int, timeout: float) -> bytes:
        self._check(src)
        deadline = time.monotonic() + timeout
        box = self.mesh.boxes[src][self._rank]
        with self.mesh.conds[self._rank]:
            while not box:
                if self.mesh.closed[src]:
                    raise PeerError(
                        f"{self.who(src)} closed with no message left for rank {self._rank}",
                        rank=src,
                        address="memory",
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PeerError(
                        f"{self.who(src)}: no message within {timeout:g} s (stalled?)",
                        rank=src,
                        address="memory",
                    )
                self.mesh.conds[self._rank].wait(left)
            msg = box.popleft()
        self._received[src] += len(msg)
        return msg

    def flush(self, timeout: float | None = None) -> None:
        """Messages are delivered when sent."""

    def close(self) -> None:
        with self.mesh.lock:
            self.mesh.closed[self._rank] = True
            for cond in self.mesh.conds:  # whoever waits on this rank
                cond.notify_all()

    def bytes_sent(self) -> list[int]:
        return list(self._sent)

    def bytes_received(self) -> list[int]:
        return list(self._received)
