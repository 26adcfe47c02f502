"""Message channels between the ranks of a host collective.

`PeerChannel` is what the schedule executor (`executor.py`) needs from a transport: ordered,
reliable messages to and from each other rank, sent in the background, received with a bounded
wait, and byte counters per peer. Two implementations:

- `TcpPeers` (this module): a full mesh of TCP connections, one per pair of ranks;
- `WirePeerChannel` (`wire_peers.py`): IPv4/UDP frames through the embedded softswitch network.

`MemoryMesh` (this module) connects ranks that are threads of one process (tests).

A channel that sees a peer vanish or stall raises `PeerError` naming the peer's rank and
address; nothing waits forever.
"""

from __future__ import annotations

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
