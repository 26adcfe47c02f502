"""One switch's data plane: the state of p4/ina.p4 and an engine that runs frames through it.

    pipe = Pipeline()                  # the reference engine (Python, frame by frame)
    pipe = Pipeline(compiled=True)     # the compiled engine (numba, a batch per call)
    out = pipe.process_batch(batch)    # or pipe.process(port, frame)

The state is described once (`PipelineState`, softswitch/state.py: every table and counter
as the P4Info declares it, the registers, the multicast groups, the lock), and the two
engines run over it: `ReferenceEngine` (softswitch/reference.py, one method per P4 control)
and `CompiledEngine` (softswitch/fast/engine.py, one compiled call per batch). Whatever holds
a pipeline (the P4Runtime server, plans, fabrics, the conformance target, the switch) uses
the state's attributes and `process` / `process_batch`, the same for both. numba is imported
only when a compiled pipeline is made.
"""

from __future__ import annotations

from typing import Protocol

from inaemu.p4.constants import INA_SLOTS
from inaemu.softswitch.batch import FrameBatch
from inaemu.softswitch.reference import ReferenceEngine
from inaemu.softswitch.state import PipelineState


class Engine(Protocol):
    """What runs frames through a pipeline's state, in arrival order."""

    def process(self, ingress_port: int, frame: bytes) -> list[tuple[int, bytes]]: ...
    def process_batch(self, batch: FrameBatch) -> FrameBatch: ...


class Pipeline(PipelineState):
    """A `PipelineState` and its engine: the reference (`compiled=False`, the default here:
    the model every test pins) or the compiled one (what the softswitch runs by default:
    `softswitch.fast.dataplanes.make_pipeline`)."""

    def __init__(self, *, seed: int = 0, slots: int = INA_SLOTS, compiled: bool = False) -> None:
        super().__init__(seed=seed, slots=slots, arrays=compiled)
        self.compiled = compiled
        self.engine: Engine
        if compiled:
            from inaemu.softswitch.fast.engine import CompiledEngine

            self.engine = CompiledEngine(self)
        else:
            self.engine = ReferenceEngine(self)

    def process(self, ingress_port: int, frame: bytes) -> list[tuple[int, bytes]]:
        """One frame in: the frames it makes leave, as (egress port, frame)."""
        return self.engine.process(ingress_port, frame)

    def process_batch(self, batch: FrameBatch) -> FrameBatch:
        """Every frame of `batch` in order, as `process` would; the emitted frames, in order."""
        return self.engine.process_batch(batch)
