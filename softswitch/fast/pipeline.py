"""`FastPipeline`: the reference `Pipeline`'s state and interface, its packets run by the kernel.

A `FastPipeline` is a `Pipeline` (softswitch/pipeline.py) to everything that holds one: the
same tables, multicast groups, counters, `lock`, `seed` and `reset_state()`, which the
P4Runtime server, plans, fabrics and conformance targets use unchanged. Only `process` and
`process_batch` differ: a batch goes through `kernel.process_frames` in one call.

Where each piece of state lives:

- **Tables and multicast groups** stay Python objects (the control plane's); the kernel reads
  arrays compiled from them (`tables.compile_tables`). Any change is seen before the next frame:
  the table methods (insert, modify, delete, set_default) count a change, and so does every
  release of `lock` by the control plane (the P4Runtime server changes entries and groups in
  place under it); a batch that finds the count moved, or that runs while its own thread holds
  the lock, compiles the tables again first (microseconds to milliseconds: tables are small).
- **Counters** stay the Python `CounterArray`s and the direct counter in each `ina_child`
  entry: the kernel counts a batch into a zeroed array, and the batch ends by adding what it
  counted to them, under the lock. A reader holding the lock sees every frame processed so
  far; a counter written over P4Runtime keeps its new value.
- **Registers** are numpy arrays (`FastRegisters`) that the kernel reads and writes in place.

The kernel is compiled once and cached on disk by numba; `warm_up` loads it (or compiles it)
once per process and says which; the first FastPipeline made in a process calls it, and
`python -m inaemu.softswitch` before its READY line.
"""

from __future__ import annotations

import _thread
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.common.wire import K
from inaemu.p4.constants import INA_SLOTS
from inaemu.softswitch.batch import MAX_FRAME, FrameBatch
from inaemu.softswitch.fast.kernel import (
    M_MAX_REPLICAS,
    N_CELL_FIELDS,
    R_BITMAP,
    R_CONTRIB,
    R_COUNT,
    R_SEQ,
    R_STATE,
    constants,
    make_kernel,
)
from inaemu.softswitch.fast.tables import CompiledTables, compile_tables
from inaemu.softswitch.pipeline import Pipeline, Registers
from inaemu.softswitch.state import (
    ActionCall,
    CounterArray,
    ExactTable,
    LpmTable,
    MulticastGroups,
    TableEntry,
)

_CONSTANTS = constants()
_KERNEL: Any = None


def _kernel() -> Any:
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = make_kernel(_CONSTANTS)
    return _KERNEL


# ---------------------------------------------------------------------- change tracking


class ChangeLog:
    """How many control-plane changes there have been (compared, never interpreted)."""

    def __init__(self) -> None:
        self.version = 0

    def bump(self) -> None:
        self.version += 1


class ControlLock(_thread.RLock):  # type: ignore[misc]  # typeshed: final; CPython: subclassable
    """`FastPipeline.lock`: a reentrant lock whose every release by the control plane counts
    as a change (whoever held it may have changed tables or groups in place). The data plane
    takes the same lock through `_thread.RLock`'s own methods, which count nothing."""

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


@dataclass
class WatchedExactTable(ExactTable):
    """An exact table whose methods count their changes."""

    log: ChangeLog = field(default_factory=ChangeLog)

    def insert(self, entry: TableEntry) -> None:
        super().insert(entry)
        self.log.bump()

    def modify(self, key: tuple[int, ...], action: ActionCall) -> None:
        super().modify(key, action)
        self.log.bump()

    def delete(self, key: tuple[int, ...]) -> None:
        super().delete(key)
        self.log.bump()

    def set_default(self, action: ActionCall) -> None:
        super().set_default(action)
        self.log.bump()


@dataclass
class WatchedLpmTable(LpmTable, WatchedExactTable):
    """An LPM table whose methods count their changes (LpmTable's checks, then
    WatchedExactTable's count, through the method resolution order)."""


@dataclass
class WatchedGroups(MulticastGroups):
    """Multicast groups whose methods count their changes."""

    log: ChangeLog = field(default_factory=ChangeLog)

    def insert(self, mgid: int, replicas: list[tuple[int, int]]) -> None:
        super().insert(mgid, replicas)
        self.log.bump()

    def modify(self, mgid: int, replicas: list[tuple[int, int]]) -> None:
        super().modify(mgid, replicas)
        self.log.bump()

    def delete(self, mgid: int) -> None:
        super().delete(mgid)
        self.log.bump()


def _watched(table: ExactTable, log: ChangeLog) -> WatchedExactTable:
    return WatchedExactTable(table.name, table.size, table.default, table.const_default, log=log)


def _watched_lpm(table: LpmTable, log: ChangeLog) -> WatchedLpmTable:
    return WatchedLpmTable(table.name, table.size, table.default, table.const_default, log=log)


# ---------------------------------------------------------------------- registers


@dataclass
class FastRegisters(Registers):
    """The Aggregation registers as arrays: `cells` is one (2 x slots, 5) int64 row per cell
    (bitmap, count, contrib, state, seq: one cache line), `owner` one int64 per slot, `lanes`
    (cells, K) int32. The reference's names (`bitmap`, `count`, ...) are views of `cells`."""

    def __post_init__(self) -> None:
        cells = self.slots * 2
        self.cells: npt.NDArray[np.int64] = np.zeros((cells, N_CELL_FIELDS), np.int64)
        self.lanes = np.zeros((cells, K), dtype=np.int32)
        # The same registers as the reference's lists, as views of the arrays the kernel uses.
        self.owner = np.zeros(self.slots, np.int64)  # type: ignore[assignment]
        self.bitmap = self.cells[:, R_BITMAP]  # type: ignore[assignment]
        self.count = self.cells[:, R_COUNT]  # type: ignore[assignment]
        self.contrib = self.cells[:, R_CONTRIB]  # type: ignore[assignment]
        self.state = self.cells[:, R_STATE]  # type: ignore[assignment]
        self.seq = self.cells[:, R_SEQ]  # type: ignore[assignment]


# ---------------------------------------------------------------------- the data plane


class FastPipeline(Pipeline):
    """The compiled data plane behind the reference pipeline's interface (module doc)."""

    def __init__(self, *, seed: int = 0, slots: int = INA_SLOTS) -> None:
        super().__init__(seed=seed, slots=slots)
        self.changes = ChangeLog()
        self._control = ControlLock(self.changes)
        self.lock = self._control
        log = self.changes
        self.ina_loss = _watched(self.ina_loss, log)
        self.ina_job = _watched(self.ina_job, log)
        self.ina_child = _watched(self.ina_child, log)
        self.ipv4_lpm = _watched_lpm(self.ipv4_lpm, log)
        self.ina_egress = _watched(self.ina_egress, log)
        self.tables = {
            t.name: t
            for t in (self.ina_loss, self.ina_job, self.ina_child, self.ipv4_lpm, self.ina_egress)
        }
        self.multicast = WatchedGroups(log=log)
        self.registers: FastRegisters = FastRegisters(slots)
        c = _CONSTANTS
        self._ctr = np.zeros((c.counters_n, 2), np.int64)
        self._ctr_index: list[tuple[CounterArray, int]] = [
            (counter, i)
            for counter, at, size in (
                (self.ina_events, c.events_at, c.events_n),
                (self.port_rx, c.rx_at, c.ports_n),
                (self.ina_drops, c.drops_at, c.drops_n),
                (self.port_tx, c.tx_at, c.ports_n),
            )
            for i in range(size)
        ]
        assert len(self._ctr_index) == c.counters_n
        self._tables: CompiledTables | None = None
        self._tables_version = -1
        self._row_ctr = np.zeros((1, 2), np.int64)
        self._touched = np.zeros((1, 3), np.int64)
        self._child_entries: dict[int, TableEntry] = {}
        self._no_draws = np.zeros(1, np.int64)
        self._one = _empty_batch(1, MAX_FRAME)  # process(): one frame in, its copies out
        self._one.offset[0] = 0
        self._one.n = 1
        self._one_out = _empty_batch(8, 8 * MAX_FRAME)
        warm_up()  # the first in this process loads or compiles the kernel: no packet waits

    # ------------------------------------------------------------------ packets

    def process(self, ingress_port: int, frame: bytes) -> list[tuple[int, bytes]]:
        """One frame: a batch of one, through arrays kept for the purpose (what it emits is
        copied out as bytes before the next call)."""
        size = len(frame)
        one = self._one
        if size > len(one.buf):
            return list(self.process_batch(FrameBatch.of([(ingress_port, frame)])))
        _thread.RLock.acquire(self._control)  # the arrays are shared: one caller at a time
        try:
            one.buf[:size] = np.frombuffer(frame, np.uint8)
            one.length[0] = size
            one.port[0] = ingress_port
            return list(self._batch(one, self._one_out))
        finally:
            _thread.RLock.release(self._control)

    def process_batch(self, batch: FrameBatch) -> FrameBatch:
        """Every frame of `batch` in order, as the reference would; the emitted frames."""
        return self._batch(batch, None)

    def _batch(self, batch: FrameBatch, out: FrameBatch | None) -> FrameBatch:
        lock = self._control
        _thread.RLock.acquire(lock)
        try:
            # lock.holds > 0 here means this very thread holds it as the control plane (the
            # lock excludes every other thread), and may have changed a table just now.
            if lock.holds or self._tables is None or self._tables_version != self.changes.version:
                self._compile()
            return self._run(batch, out)
        finally:
            _thread.RLock.release(lock)

    def _compile(self) -> None:
        self._tables_version = self.changes.version
        tables = compile_tables(self)
        self._tables = tables
        self._row_ctr = np.zeros((len(tables.params), 2), np.int64)
        self._touched = np.zeros((len(self._ctr) + len(tables.params), 3), np.int64)
        self._child_entries = dict(tables.child_rows)

    def _draws(self, batch: FrameBatch, loss_ports: list[int]) -> npt.NDArray[np.int64]:
        """Each frame's loss-injection draw, from its port's generator in arrival order (the
        reference draws one per frame of a port with an ina_loss entry)."""
        if not loss_ports:
            return self._no_draws
        n = batch.n
        ports = batch.port[:n]
        draws = np.zeros(n, np.int64)
        for port in set(np.unique(ports).tolist()) & set(loss_ports):
            mask = ports == port
            draws[mask] = self._loss_rng(port).integers(0, 0xFFFFFFFF, size=int(mask.sum()))
        return draws

    def _run(self, batch: FrameBatch, out: FrameBatch | None) -> FrameBatch:
        """The kernel over `batch`, into `out` (cleared) or a new batch."""
        tables = self._tables
        assert tables is not None
        n = batch.n
        in_buf, in_off, in_len, in_port = _inputs(batch)
        draws = self._draws(batch, tables.loss_ports)
        worst = max(1, int(tables.misc[M_MAX_REPLICAS]))
        if out is None:
            out = _empty_batch(2 * n + worst, 2 * batch.used_bytes + worst * MAX_FRAME)
        regs = self.registers
        kernel = _kernel()
        done, frames, used = 0, 0, 0
        while True:
            done, frames, used, counted = kernel(
                in_buf, in_off, in_len, in_port, n, done, draws,
                tables.hkeys, tables.hvals, tables.slices, tables.params, tables.mc_ports,
                tables.plens, tables.misc,
                regs.cells, regs.owner, regs.lanes, self._ctr, self._row_ctr, self._touched,
                out.buf, out.offset, out.length, out.port, frames, used,
            )  # fmt: skip
            out.n = frames
            self._add_counts(counted)
            if done >= n:
                return out
            # The next frame's copies might not fit: room for all the rest, at worst.
            out.reserve(worst * (n - done), worst * int(in_len[done:n].sum()))

    def _add_counts(self, counted: int) -> None:
        """Add what the kernel counted (in `_touched`) to the Python counters."""
        if not counted:
            return
        index = self._ctr_index
        entries = self._child_entries
        first_row = len(index)
        for i, packets, nbytes in self._touched[:counted].tolist():
            if i < first_row:
                counter, j = index[i]
                counter.packets[j] += packets
                counter.bytes[j] += nbytes
            else:
                entry = entries[i - first_row]
                entry.packets += packets
                entry.bytes += nbytes


def _empty_batch(capacity: int, buf_bytes: int) -> FrameBatch:
    """A FrameBatch with uninitialised arrays (the kernel writes every byte it hands out)."""
    out = FrameBatch(0, 0)
    out.buf = np.empty(buf_bytes, np.uint8)
    out.offset = np.empty(capacity, np.int64)
    out.length = np.empty(capacity, np.int32)
    out.port = np.empty(capacity, np.int32)
    return out


def _inputs(batch: FrameBatch) -> tuple[Any, Any, Any, Any]:
    """The batch's arrays with the dtypes the kernel was compiled for (no copy if they are)."""
    buf = batch.buf
    if buf.dtype != np.uint8 or not buf.flags.writeable or not buf.flags.c_contiguous:
        buf = np.array(buf, np.uint8)
    return (
        buf,
        np.ascontiguousarray(batch.offset, np.int64),
        np.ascontiguousarray(batch.length, np.int32),
        np.ascontiguousarray(batch.port, np.int32),
    )


@dataclass(frozen=True)
class WarmUp:
    """How the kernel got ready in this process: loaded from numba's cache, or compiled."""

    source: str  # "cache" or "compiled" ("pending" while it happens)
    seconds: float

    def __str__(self) -> str:
        return f"{self.source}:{self.seconds:.2f}s"


_WARM: WarmUp | None = None


def warm_up() -> WarmUp:
    """Load or compile everything the fast path runs, once per process, now rather than on a
    first packet (every FastPipeline does on creation); how that went."""
    global _WARM
    if _WARM is None:
        started = time.monotonic()
        _WARM = WarmUp("pending", 0.0)  # the pipeline made here must not warm up again
        FastPipeline().process_batch(FrameBatch(1, 1))
        compiled = sum(_kernel().stats.cache_misses.values())
        _WARM = WarmUp("compiled" if compiled else "cache", time.monotonic() - started)
    return _WARM
