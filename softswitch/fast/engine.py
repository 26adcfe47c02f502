"""The compiled engine: a `PipelineState`'s frames run by the kernel, a batch per call.

`Pipeline(compiled=True)` runs this engine over the same state as the reference
(softswitch/state.py): the same tables, multicast groups, counters, `lock`, `seed` and
`reset_state()`, which the P4Runtime server, plans, fabrics and conformance targets use
unchanged; only `process` and `process_batch` differ: a batch goes through
`kernel.process_frames` in one call.

What it does with each piece of the state:

- **Tables and multicast groups** stay Python objects (the control plane's); the kernel reads
  arrays compiled from them (`tables.compile_tables`). Any change is seen before the next frame:
  the table methods (insert, modify, delete, set_default) count a change in the state's
  `ChangeLog`, and so does every release of `lock` by the control plane (the P4Runtime server
  changes entries and groups in place under it); a batch that finds the count moved, or that
  runs while its own thread holds the lock, compiles the tables again first (microseconds to
  milliseconds: tables are small).
- **Counters** stay the Python `CounterArray`s and the direct counter in each `ina_child`
  entry: the kernel counts a batch into a zeroed array, and the batch ends by adding what it
  counted to them, under the lock. A reader holding the lock sees every frame processed so
  far; a counter written over P4Runtime keeps its new value.
- **Registers** are the state's in their array storage (`Registers(arrays=True)`), which the
  kernel reads and writes in place.

The kernel is compiled once and cached on disk by numba; `load` loads it (or compiles it),
once per process through `common.jit.warm_up`, which says which: the first engine made in a
process asks for it, and `python -m inaemu.softswitch` before its READY line.
"""

from __future__ import annotations

import _thread

import numpy as np
import numpy.typing as npt

from inaemu.common.jit import warm_up
from inaemu.softswitch.batch import MAX_FRAME, FrameBatch, Frames
from inaemu.softswitch.fast.kernel import BatchKernel, Work, constants, make_kernel
from inaemu.softswitch.fast.tables import CompiledTables, compile_tables
from inaemu.softswitch.state import CounterArray, PipelineState, TableEntry

_CONSTANTS = constants()
_KERNEL: BatchKernel | None = None


def _kernel() -> BatchKernel:
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = make_kernel(_CONSTANTS)
    return _KERNEL


# ---------------------------------------------------------------------- the engine


class CompiledEngine:
    """Runs frames through `state` with the compiled kernel, a batch per call
    (`Pipeline(compiled=True)`; module doc)."""

    def __init__(self, state: PipelineState) -> None:
        assert state.registers.arrays, "the kernel runs on the registers as arrays"
        self.state = state
        c = _CONSTANTS
        self._ctr = np.zeros((c.counters_n, 2), np.int64)
        layout = (
            (state.ina_events, c.events_at, c.events_n),
            (state.port_rx, c.rx_at, c.ports_n),
            (state.ina_drops, c.drops_at, c.drops_n),
            (state.port_tx, c.tx_at, c.ports_n),
        )
        assert all(counter.size == size for counter, _at, size in layout)
        self._ctr_index: list[tuple[CounterArray, int]] = [
            (counter, i) for counter, _at, size in layout for i in range(size)
        ]
        assert len(self._ctr_index) == c.counters_n
        self._tables: CompiledTables | None = None
        self._tables_version = -1
        self._row_ctr = np.zeros((1, 2), np.int64)
        self._touched = np.zeros((1, 3), np.int64)
        self._work = self._work_record()
        self._child_entries: dict[int, TableEntry] = {}
        self._no_draws = np.zeros(1, np.int64)
        self._one = FrameBatch.empty(1, MAX_FRAME)  # process(): one frame in, its copies out
        self._one.offset[0] = 0
        self._one.n = 1
        self._one_out = FrameBatch.empty(8, 8 * MAX_FRAME)
        warm_up(load)  # the first in this process loads or compiles the kernel: no packet waits

    # ------------------------------------------------------------------ packets

    def process(self, ingress_port: int, frame: bytes) -> list[tuple[int, bytes]]:
        """One frame: a batch of one, through arrays kept for the purpose (what it emits is
        copied out as bytes before the next call)."""
        size = len(frame)
        one = self._one
        if size > len(one.buf):
            return list(self.process_batch(FrameBatch.of([(ingress_port, frame)])))
        lock = self.state.lock
        _thread.RLock.acquire(lock)  # the arrays are shared: one caller at a time
        try:
            one.buf[:size] = np.frombuffer(frame, np.uint8)
            one.length[0] = size
            one.port[0] = ingress_port
            return list(self._batch(one, self._one_out))
        finally:
            _thread.RLock.release(lock)

    def process_batch(self, batch: FrameBatch) -> FrameBatch:
        """Every frame of `batch` in order, as the reference would; the emitted frames."""
        return self._batch(batch, None)

    def _batch(self, batch: FrameBatch, out: FrameBatch | None) -> FrameBatch:
        lock = self.state.lock
        _thread.RLock.acquire(lock)  # as the data plane: no change counted
        try:
            # lock.holds > 0 here means this very thread holds it as the control plane (the
            # lock excludes every other thread), and may have changed a table just now.
            version = self.state.changes.version
            if lock.holds or self._tables is None or self._tables_version != version:
                self._compile()
            return self._run(batch, out)
        finally:
            _thread.RLock.release(lock)

    def _compile(self) -> None:
        self._tables_version = self.state.changes.version
        tables = compile_tables(self.state)
        self._tables = tables
        rows = len(tables.arrays.params)
        self._row_ctr = np.zeros((rows, 2), np.int64)
        self._touched = np.zeros((len(self._ctr) + rows, 3), np.int64)
        self._work = self._work_record()
        self._child_entries = dict(tables.child_rows)

    def _work_record(self) -> Work:
        """The kernel's registers and counts (made again when either is replaced)."""
        regs = self.state.registers
        return Work(
            cells=regs.cells,
            owner=np.asarray(regs.owner, np.int64),
            lanes=regs.lanes,
            ctr=self._ctr,
            row_ctr=self._row_ctr,
            touched=self._touched,
        )

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
            draws[mask] = self.state.loss_rng(port).integers(0, 0xFFFFFFFF, size=int(mask.sum()))
        return draws

    def _run(self, batch: FrameBatch, out: FrameBatch | None) -> FrameBatch:
        """The kernel over `batch`, into `out` (cleared) or a new batch."""
        tables = self._tables
        assert tables is not None
        n = batch.n
        inp = _inputs(batch)
        draws = self._draws(batch, tables.loss_ports)
        worst = max(1, tables.max_replicas)
        if out is None:
            out = FrameBatch.empty(2 * n + worst, 2 * batch.used_bytes + worst * MAX_FRAME)
        work = self._work
        if work.cells is not self.state.registers.cells:  # reset_state made new registers
            work = self._work = self._work_record()
        kernel = _kernel()
        done, frames, used = 0, 0, 0
        while True:
            done, frames, used, counted = kernel(
                inp, n, done, draws, tables.arrays, work, out.arrays(), frames, used
            )
            out.n = frames
            self._add_counts(counted)
            if done >= n:
                return out
            # The next frame's copies might not fit: room for all the rest, at worst.
            out.reserve(worst * (n - done), worst * int(inp.length[done:n].sum()))

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


def _inputs(batch: FrameBatch) -> Frames:
    """The batch's arrays as the kernel takes them (a FrameBatch makes its index arrays with
    the kernel's dtypes; its buffer is copied if it cannot be written in place)."""
    frames = batch.arrays()
    buf = frames.buf
    if not (buf.flags.writeable and buf.flags.c_contiguous):
        return frames._replace(buf=np.array(buf, np.uint8))
    return frames


def load() -> None:
    """The kernel loaded from numba's cache, or compiled (`common.jit.warm_up(load)`: once per
    process; every engine asks for it as it is made)."""
    CompiledEngine(PipelineState(arrays=True)).process_batch(FrameBatch(1, 1))
