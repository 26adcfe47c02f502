"""The codec interface: a codec turns a worker's array into one or more *phases*.

A phase is an int32 vector and the opcode the switch combines it with (SUM, OR or MAX). The
INA client (or a simulator) all-reduces each phase through the switch and sends the aggregated
vector back into the codec, which may then ask for the next phase (e.g. the sketch codec ORs
non-zero bitmaps first and SUMs a count-sketch sized from the union next). When the codec is
done it returns the decoded result: the element-wise sum over workers.

Written as a generator so that a codec keeps its state in local variables. The driver loop
(`run_phases` implements it for one worker):

    gen = codec.phases(x, n_workers)     # validates x eagerly (ValueError / TypeError)
    try:
        phase = next(gen)                # may finish at once (empty input): StopIteration
        while True:
            agg, overflowed = allreduce(phase.values, phase.opcode)
            if overflowed:               # a SUM result came back with Flag.OVERFLOW
                phase = gen.throw(SumOverflow(f"phase {phase.label!r} saturated"))
            else:
                phase = gen.send(agg)
    except StopIteration as stop:
        result = stop.value

Overflow protocol: when any packet of a SUM phase's result carries the switch's OVERFLOW flag,
the driver throws `SumOverflow` into the generator instead of sending the (saturated) result.
A codec may catch it and yield the *same* phase again with a safer encoding (the fixed-point
codecs halve their scale, a bounded number of times), or let it propagate out of the
generator to the caller. Every worker sees the same result flags, so all workers take the same
branch and stay in lockstep; `SumOverflow.lanes` (optional) marks the lanes whose packets were
flagged, and must then be identical on every worker too.

Phase values may alias the caller's input array (no defensive copy on the hot path): drivers
must not modify them, and callers must not modify their input until the codec has finished.
A SUM phase's values may be a buffer the codec object reuses in its next allreduce (the
fixed-point and sketch codecs do, to spare a large array's first-touch page faults): they
stay valid until the codec has finished and until that object starts another allreduce, so
a driver that keeps phases beyond that (`simulate_allreduce` returns them for accounting)
may rely on their opcode, label and size only.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from inaemu.common.wire import FRAME_BYTES, INT32_MAX, INT32_MIN, K, Opcode

Int32Array = npt.NDArray[np.int32]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Phase:
    """One switch exchange: every worker contributes `values` (same length on all workers)."""

    opcode: Opcode
    values: Int32Array  # 1-D int32; OR phases carry uint32 bit patterns viewed as int32
    label: str = ""


PhaseGenerator = Generator[Phase, Int32Array, npt.NDArray[np.generic]]


class HomomorphicCodec(Protocol):
    """A codec whose encodings the switch can combine with a plain integer SUM / OR / MAX."""

    name: str

    def phases(self, x: npt.NDArray[np.generic], n_workers: int) -> PhaseGenerator: ...


class SumOverflow(Exception):
    """A SUM phase saturated in the switch (its result carried Flag.OVERFLOW).

    Thrown into a codec's generator by the driver (`gen.throw(SumOverflow(...))`). `lanes`, if
    given, is a bool vector as long as the phase, True where the result may be saturated (a
    superset is fine, e.g. every lane of a flagged packet); None means "somewhere".
    """

    def __init__(self, message: str = "", *, label: str = "", lanes: BoolArray | None = None):
        super().__init__(message or f"SUM phase {label!r} overflowed int32 in the switch")
        self.label = label
        self.lanes = lanes


def _combine(opcode: Opcode, contributions: Sequence[Int32Array]) -> tuple[Int32Array, BoolArray]:
    """The switch's combine in numpy: (aggregate, per-lane overflow mask)."""
    if len(contributions) == 0:
        raise ValueError("no contributions")
    stack = np.stack([np.asarray(c, dtype=np.int32) for c in contributions])
    if opcode == Opcode.SUM:
        # Contributions are added in list (= arrival) order; the switch saturates per addition,
        # so a lane overflowed if any prefix sum left the int32 range.
        prefix = np.cumsum(stack.astype(np.int64), axis=0)
        lanes: BoolArray = np.asarray(
            ((prefix > INT32_MAX) | (prefix < INT32_MIN)).any(axis=0), dtype=np.bool_
        )
        return np.clip(prefix[-1], INT32_MIN, INT32_MAX).astype(np.int32), lanes
    no_overflow = np.zeros(stack.shape[1], dtype=np.bool_)
    if opcode == Opcode.OR:
        return np.bitwise_or.reduce(stack, axis=0).astype(np.int32), no_overflow
    if opcode == Opcode.MAX:
        return stack.max(axis=0).astype(np.int32), no_overflow
    raise ValueError(f"unknown opcode {opcode}")


def aggregate_reference(
    opcode: Opcode, contributions: Sequence[Int32Array]
) -> tuple[Int32Array, bool]:
    """What the switch computes for one phase, in numpy: (aggregate, overflowed).

    SUM saturates at int32 bounds *per addition in arrival order* in the switch (arrival order
    = list order here): `overflowed` is True iff some prefix sum left the int32 range. The
    aggregate is only trusted when `overflowed` is False, and then equals the exact sum.
    """
    agg, lanes = _combine(opcode, contributions)
    return agg, bool(lanes.any())


def words_on_wire(phases: Iterable[Phase]) -> int:
    """int32 lanes one worker sends for these phases (payload only, no headers)."""
    return sum(int(p.values.size) for p in phases)


def frames_on_wire(phases: Iterable[Phase]) -> int:
    """Packets one worker sends: each phase is cut into ceil(len / K) frames of K lanes."""
    return sum(-(-int(p.values.size) // K) for p in phases)


def bytes_on_wire(phases: Iterable[Phase], *, framed: bool = False) -> int:
    """Bytes one worker sends: 4 per lane, or whole frames (FRAME_BYTES each) if `framed`."""
    phases = list(phases)
    return frames_on_wire(phases) * FRAME_BYTES if framed else 4 * words_on_wire(phases)


def run_phases(
    gen: PhaseGenerator,
    allreduce: Callable[[Phase], tuple[Int32Array, bool | BoolArray]],
) -> npt.NDArray[np.generic]:
    """Drive one worker's codec generator: `allreduce(phase) -> (aggregate, overflowed)`.

    `overflowed` is a bool or a per-lane bool mask (see `SumOverflow.lanes`). A SumOverflow
    the codec does not handle propagates to the caller.
    """
    steps: Generator[None, None, npt.NDArray[np.generic]] = phase_steps(
        gen, lambda phase: _at_once(allreduce(phase))
    )
    try:
        next(steps)
    except StopIteration as stop:
        result: npt.NDArray[np.generic] = stop.value
        return result
    raise AssertionError("an allreduce that runs at once yields no step")


S = TypeVar("S")
R = TypeVar("R")


def _at_once(value: R) -> Generator[S, None, R]:
    """A step generator that yields nothing and returns `value`."""
    yield from ()
    return value


def phase_steps(
    gen: PhaseGenerator,
    allreduce: Callable[[Phase], Generator[S, None, tuple[Int32Array, bool | BoolArray]]],
) -> Generator[S, None, npt.NDArray[np.generic]]:
    """`run_phases` for an allreduce that runs in steps (a generator that yields whatever its
    driver runs, e.g. the INA client's exchanges, and returns (aggregate, overflowed)): the
    phases' steps in order; returns the codec's result. The one driver loop of the module
    doc: `run_phases` is this with an allreduce that runs at once."""
    try:
        phase = next(gen)
        while True:
            agg, overflowed = yield from allreduce(phase)
            if phase.opcode == Opcode.SUM and np.any(overflowed):
                lanes = None if isinstance(overflowed, bool) else np.asarray(overflowed, bool)
                phase = gen.throw(SumOverflow(label=phase.label, lanes=lanes))
            else:
                phase = gen.send(agg)
    except StopIteration as stop:
        result: npt.NDArray[np.generic] = stop.value
        return result


def simulate_allreduce(
    codec: HomomorphicCodec, inputs: Sequence[npt.NDArray[np.generic]]
) -> tuple[list[npt.NDArray[np.generic]], list[Phase]]:
    """Run `codec` for len(inputs) workers against the reference switch (no network).

    Returns every worker's decoded result and worker 0's phases (for byte accounting; a phase
    retried after an overflow appears once per attempt; their values hold until `codec` runs
    again, see the module docstring). When a SUM phase saturates, every
    worker's generator gets `SumOverflow` thrown in (with the per-lane mask), exactly as the
    real client does; a SumOverflow no codec handles propagates out of this function.
    """
    n = len(inputs)
    if n == 0:
        raise ValueError("simulate_allreduce needs at least one worker")
    gens = [codec.phases(x, n) for x in inputs]
    results: list[npt.NDArray[np.generic] | None] = [None] * n
    current: list[Phase] = []
    for i, g in enumerate(gens):
        try:
            current.append(next(g))
        except StopIteration as stop:
            results[i] = stop.value
    seen: list[Phase] = []
    while current:
        if len(current) != n:
            raise AssertionError("workers finished after different numbers of phases")
        ops = {p.opcode for p in current}
        shapes = {(p.values.dtype.str, p.values.shape) for p in current}
        if len(ops) != 1 or len(shapes) != 1 or current[0].values.ndim != 1:
            raise AssertionError(f"workers disagree on the phase: opcodes {ops}, arrays {shapes}")
        if current[0].values.dtype != np.int32:
            raise AssertionError(f"phase values must be int32, got {current[0].values.dtype}")
        seen.append(current[0])
        agg, lanes = _combine(current[0].opcode, [p.values for p in current])
        overflowed = bool(lanes.any())
        nxt: list[Phase] = []
        for i, g in enumerate(gens):
            try:
                if overflowed:
                    exc = SumOverflow(label=current[0].label, lanes=lanes.copy())
                    nxt.append(g.throw(exc))
                else:
                    nxt.append(g.send(agg.copy()))
            except StopIteration as stop:
                results[i] = stop.value
        current = nxt
    if any(r is None for r in results):
        raise AssertionError("workers finished after different numbers of phases")
    return [r for r in results if r is not None], seen
