"""Data-plane state the control plane fills: tables, multicast groups, counters.

These are plain Python objects keyed by P4 names and integer values; the P4Runtime server
translates P4Runtime entities into them, and tests may fill them directly. Registers live in
the pipeline (they are the aggregation state, not control-plane state).
"""

from __future__ import annotations

from dataclasses import dataclass, field


class StateError(Exception):
    """A control-plane request the state cannot honour; `code` names the P4Runtime status."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class ActionCall:
    """An action (short P4 name, e.g. "agg_node") and its parameter values in P4 order."""

    name: str
    params: tuple[int, ...] = ()


@dataclass
class TableEntry:
    key: tuple[int, ...]  # exact: the values; lpm: (value, prefix_len)
    action: ActionCall
    packets: int = 0  # direct counter
    bytes: int = 0


@dataclass
class ExactTable:
    name: str
    size: int
    default: ActionCall
    const_default: bool = False
    entries: dict[tuple[int, ...], TableEntry] = field(default_factory=dict)

    def set_default(self, action: ActionCall) -> None:
        if self.const_default:
            raise StateError("PERMISSION_DENIED", f"{self.name}: the default action is const")
        self.default = action

    def lookup(self, key: tuple[int, ...]) -> TableEntry | None:
        return self.entries.get(key)

    def insert(self, entry: TableEntry) -> None:
        if entry.key in self.entries:
            raise StateError("ALREADY_EXISTS", f"{self.name}: entry {entry.key} exists")
        if len(self.entries) >= self.size:
            raise StateError("RESOURCE_EXHAUSTED", f"{self.name}: table full ({self.size})")
        self.entries[entry.key] = entry

    def modify(self, key: tuple[int, ...], action: ActionCall) -> None:
        entry = self.entries.get(key)
        if entry is None:
            raise StateError("NOT_FOUND", f"{self.name}: no entry {key}")
        entry.action = action

    def delete(self, key: tuple[int, ...]) -> None:
        if self.entries.pop(key, None) is None:
            raise StateError("NOT_FOUND", f"{self.name}: no entry {key}")


@dataclass
class LpmTable(ExactTable):
    """Longest-prefix match on one 32-bit field; keys are (value, prefix_len)."""

    width: int = 32

    def insert(self, entry: TableEntry) -> None:
        value, plen = entry.key
        if not 0 <= plen <= self.width:
            raise StateError("INVALID_ARGUMENT", f"{self.name}: prefix length {plen}")
        mask = self._mask(plen)
        if value & ~mask & ((1 << self.width) - 1):
            raise StateError(
                "INVALID_ARGUMENT", f"{self.name}: {value:#x}/{plen} has bits set past the prefix"
            )
        super().insert(entry)

    def _mask(self, plen: int) -> int:
        return ((1 << plen) - 1) << (self.width - plen) if plen else 0

    def lookup(self, key: tuple[int, ...]) -> TableEntry | None:
        (value,) = key
        best: TableEntry | None = None
        for (prefix, plen), entry in self.entries.items():
            if (value & self._mask(plen)) == prefix and (best is None or plen > best.key[1]):
                best = entry
        return best


@dataclass
class CounterArray:
    """An indexed counter with packets and bytes (CounterType.packets_and_bytes)."""

    name: str
    size: int
    packets: list[int] = field(init=False)  # lists: a scalar += is 20x cheaper than numpy's
    bytes: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.packets = [0] * self.size
        self.bytes = [0] * self.size

    def count(self, index: int, length: int) -> None:
        # bmv2 ignores an out-of-range index (logs an error); so do we.
        if 0 <= index < self.size:
            self.packets[index] += 1
            self.bytes[index] += length

    def reset(self) -> None:
        self.__post_init__()


@dataclass
class MulticastGroups:
    """The packet replication engine: group id -> [(egress_port, instance/rid)]."""

    groups: dict[int, list[tuple[int, int]]] = field(default_factory=dict)

    def insert(self, mgid: int, replicas: list[tuple[int, int]]) -> None:
        if mgid == 0:
            raise StateError("INVALID_ARGUMENT", "multicast group id 0 means 'no multicast'")
        if mgid in self.groups:
            raise StateError("ALREADY_EXISTS", f"multicast group {mgid} exists")
        self.groups[mgid] = list(replicas)

    def modify(self, mgid: int, replicas: list[tuple[int, int]]) -> None:
        if mgid not in self.groups:
            raise StateError("NOT_FOUND", f"no multicast group {mgid}")
        self.groups[mgid] = list(replicas)

    def delete(self, mgid: int) -> None:
        if self.groups.pop(mgid, None) is None:
            raise StateError("NOT_FOUND", f"no multicast group {mgid}")
