"""What a switch running p4/ina.p4 keeps, described once, and the objects that keep it.

`PipelineState` is one switch's state as the committed P4Info declares it: every table (its
name, size, match kinds, initial and const default action), every indexed counter, and the
registers of the Aggregation control (`Registers`: the cell fields of `CellFields`, the owner
per slot, the lanes), with the traffic manager's multicast groups, a seed for loss
injection and the lock the control plane writes under. Nothing here restates a table or a
counter: they are made from the P4Info (`tests/test_p4_agreement.py` checks the P4Info
against the P4 source, and the registers against both). The two engines that run frames
through this state (`softswitch/reference.py`, `softswitch/fast/engine.py`) and everything
that holds a pipeline (`Pipeline`: the P4Runtime server, plans, fabrics, the conformance
target, the switch) use it through the same attributes.

The tables and groups are plain Python objects keyed by P4 names and integer values; the
P4Runtime server translates P4Runtime entities into them, and tests may fill them directly.
Every change is counted in the state's `ChangeLog` (the compiled engine compiles its arrays
again when the count moves): the table and group methods count theirs, and so does every
release of `lock` by the control plane (`ControlLock`: the server changes entries, defaults
and groups in place under it). An engine takes the same lock through `_thread.RLock`'s own
methods, which count nothing.
"""

from __future__ import annotations

import _thread
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from inaemu.common.wire import K
from inaemu.p4.constants import INA_SLOTS
from inaemu.p4.info import P4Info, TableInfo, load_p4info


class StateError(Exception):
    """A control-plane request the state cannot honour; `code` names the P4Runtime status."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------- change tracking


class ChangeLog:
    """How many control-plane changes there have been (compared, never interpreted)."""

    def __init__(self) -> None:
        self.version = 0

    def bump(self) -> None:
        self.version += 1


class ControlLock(_thread.RLock):  # type: ignore[misc]  # typeshed: final; CPython: subclassable
    """A pipeline's `lock`: a reentrant lock whose every release by the control plane counts
    as a change (whoever held it may have changed tables or groups in place). An engine takes
    the same lock through `_thread.RLock`'s own methods, which count nothing."""

    def __init__(self, log: ChangeLog) -> None:
        self.log = log
        self.holds = 0  # the control plane's holds (only its holder changes this)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got: bool = super().acquire(blocking, timeout)
        if got:
            self.holds += 1
        return got

    def __enter__(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self.acquire(blocking, timeout)

    def release(self) -> None:
        self.holds -= 1
        self.log.bump()
        super().release()

    def __exit__(self, *exc: object) -> None:
        self.release()


# ---------------------------------------------------------------------- tables


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
    """An exact-match table; its methods count each change they make in `log`."""

    name: str
    size: int
    default: ActionCall
    const_default: bool = False
    entries: dict[tuple[int, ...], TableEntry] = field(default_factory=dict)
    log: ChangeLog = field(default_factory=ChangeLog)

    def set_default(self, action: ActionCall) -> None:
        if self.const_default:
            raise StateError("PERMISSION_DENIED", f"{self.name}: the default action is const")
        self.default = action
        self.log.bump()

    def lookup(self, key: tuple[int, ...]) -> TableEntry | None:
        return self.entries.get(key)

    def insert(self, entry: TableEntry) -> None:
        if entry.key in self.entries:
            raise StateError("ALREADY_EXISTS", f"{self.name}: entry {entry.key} exists")
        if len(self.entries) >= self.size:
            raise StateError("RESOURCE_EXHAUSTED", f"{self.name}: table full ({self.size})")
        self.entries[entry.key] = entry
        self.log.bump()

    def modify(self, key: tuple[int, ...], action: ActionCall) -> None:
        entry = self.entries.get(key)
        if entry is None:
            raise StateError("NOT_FOUND", f"{self.name}: no entry {key}")
        entry.action = action
        self.log.bump()

    def delete(self, key: tuple[int, ...]) -> None:
        if self.entries.pop(key, None) is None:
            raise StateError("NOT_FOUND", f"{self.name}: no entry {key}")
        self.log.bump()


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
    """The packet replication engine: group id -> [(egress_port, instance/rid)]; its methods
    count each change they make in `log`."""

    groups: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    log: ChangeLog = field(default_factory=ChangeLog)

    def insert(self, mgid: int, replicas: list[tuple[int, int]]) -> None:
        if mgid == 0:
            raise StateError("INVALID_ARGUMENT", "multicast group id 0 means 'no multicast'")
        if mgid in self.groups:
            raise StateError("ALREADY_EXISTS", f"multicast group {mgid} exists")
        self.groups[mgid] = list(replicas)
        self.log.bump()

    def modify(self, mgid: int, replicas: list[tuple[int, int]]) -> None:
        if mgid not in self.groups:
            raise StateError("NOT_FOUND", f"no multicast group {mgid}")
        self.groups[mgid] = list(replicas)
        self.log.bump()

    def delete(self, mgid: int) -> None:
        if self.groups.pop(mgid, None) is None:
            raise StateError("NOT_FOUND", f"no multicast group {mgid}")
        self.log.bump()


# ---------------------------------------------------------------------- registers


class CellFields(NamedTuple):
    """The Aggregation registers of one (slot, set) cell, `reg_<name>` in the P4, in the
    order of the compiled engine's row per cell (`CELL`: each field's column)."""

    bitmap: int
    count: int  # type: ignore[assignment]  # the register, over tuple.count
    contrib: int
    state: int
    seq: int


CELL = CellFields(*range(len(CellFields._fields)))
Column = list[int] | npt.NDArray[np.int64]


class Registers:
    """The Aggregation control's registers for `slots` slots: per cell (cell = (base + slot
    index) * 2 + set) the fields of `CellFields`, per slot its owner (job_id << 32 | epoch << 16
    | run), per cell K int32 lanes.

    Two storages of the same registers, one per engine: Python lists (the reference's: a
    scalar is several times cheaper to read and write in a list than in numpy), or, with
    `arrays`, one int64 row of the cell fields per cell (`cells`, one cache line: the compiled
    engine's), the fields' names being views of its columns, and `owner` an int64 array."""

    # the cell fields (set by name from CellFields) and the owners: lists or int64 arrays
    bitmap: Column
    count: Column
    contrib: Column
    state: Column
    seq: Column
    owner: Column

    def __init__(self, slots: int = INA_SLOTS, *, arrays: bool = False) -> None:
        self.slots = slots
        self.arrays = arrays
        self.reset()

    def reset(self) -> None:
        cells = self.slots * 2
        self.lanes: npt.NDArray[np.int32] = np.zeros((cells, K), dtype=np.int32)
        self.cells: npt.NDArray[np.int64] = np.zeros(
            (cells if self.arrays else 0, len(CELL)), np.int64
        )
        columns: list[Column]
        if self.arrays:
            self.owner = np.zeros(self.slots, np.int64)
            columns = [self.cells[:, column] for column in CELL]
        else:  # (`cells` empty)
            self.owner = [0] * self.slots
            columns = [[0] * cells for _ in CELL]
        for name, column in zip(CellFields._fields, columns, strict=True):
            setattr(self, name, column)


# ---------------------------------------------------------------------- the state


def _table(info: TableInfo, p4info: P4Info, log: ChangeLog) -> ExactTable:
    """`info`'s table, empty, with its initial default action (no parameters in ina.p4)."""
    default = ActionCall(p4info.action(info.initial_default.action_id).alias)
    const = info.const_default_id != 0
    lpm = [f.bitwidth for f in info.fields if f.kind == "LPM"]
    if lpm:
        return LpmTable(info.name, info.size, default, const, log=log, width=lpm[0])
    return ExactTable(info.name, info.size, default, const, log=log)


class PipelineState:
    """One switch's state (module doc): what its P4Info declares, and the multicast groups.

    The engines name the tables and counters they read: `ina_loss`, `ina_job`, `ina_child`,
    `ipv4_lpm`, `ina_egress`; `ina_events`, `port_rx`, `ina_drops`, `port_tx` (P4Info aliases;
    `tables` and `counters` hold them all by full name). `arrays` chooses the registers'
    storage (`Registers`)."""

    def __init__(self, *, seed: int = 0, slots: int = INA_SLOTS, arrays: bool = False) -> None:
        p4info = load_p4info()
        self.seed = seed
        self.changes = ChangeLog()
        self.lock = ControlLock(self.changes)
        self.tables: dict[str, ExactTable] = {
            t.name: _table(t, p4info, self.changes) for t in p4info.tables.values()
        }
        self.ina_loss = self.tables[p4info.table("ina_loss").name]
        self.ina_job = self.tables[p4info.table("ina_job").name]
        self.ina_child = self.tables[p4info.table("ina_child").name]
        self.ipv4_lpm = self.tables[p4info.table("ipv4_lpm").name]
        self.ina_egress = self.tables[p4info.table("ina_egress").name]
        self.multicast = MulticastGroups(log=self.changes)
        self.counters: dict[str, CounterArray] = {
            c.name: CounterArray(c.name, c.size) for c in p4info.counters.values()
        }
        self.ina_events = self.counters[p4info.counter("ina_events").name]
        self.port_rx = self.counters[p4info.counter("port_rx").name]
        self.ina_drops = self.counters[p4info.counter("ina_drops").name]
        self.port_tx = self.counters[p4info.counter("port_tx").name]
        self.registers = Registers(slots, arrays=arrays)
        self._rngs: dict[int, np.random.Generator] = {}

    def loss_rng(self, port: int) -> np.random.Generator:
        """One seeded generator per ingress port: reproducible whatever other ports do."""
        rng = self._rngs.get(port)
        if rng is None:
            rng = self._rngs[port] = np.random.default_rng([self.seed, port])
        return rng

    def reset_state(self) -> None:
        """Clear registers and counters (not tables): a fresh switch with the same config."""
        with self.lock:
            self.registers.reset()
            for c in self.counters.values():
                c.reset()
            for t in self.tables.values():
                for e in t.entries.values():
                    e.packets = e.bytes = 0
            self._rngs.clear()
