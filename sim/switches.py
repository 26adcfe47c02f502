"""A simulated switch: the project's own pipeline (the compiled data plane, or the reference)
behind a node's point-to-point devices.

Frames that reach the switch are collected in C++ (`glue.PortGroup`) into a `FrameBatch`'s
arrays, and the pipeline processes them once per simulated instant with frames, in arrival
order, exactly as `process_batch` does for the emulator's switch and as the conformance cases
and the differential test against bmv2 pin it; what it emits leaves `latency_ps` later, each
frame on its egress port's device. The tables are the controller's plans installed in process
(`softswitch.plan.apply_to_pipeline`), as `inaemu demo` installs them over P4Runtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from inaemu.p4.plan import SwitchPlan
from inaemu.sim.engine import Simulation
from inaemu.softswitch.batch import MAX_FRAME, FrameBatch
from inaemu.softswitch.fast.dataplanes import make_pipeline
from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.plan import apply_to_pipeline

BATCH_FRAMES = 1024  # frames one switch takes per instant at most before it processes them


class FrameGroup:
    """A `glue.PortGroup` and the arrays it fills: frames received, handed to `handler` once
    per instant (or when full)."""

    def __init__(self, sim: Simulation, frames: int = BATCH_FRAMES) -> None:
        self.sim = sim
        self.batch = FrameBatch(frames, max(frames * 1600, MAX_FRAME))
        b = self.batch
        self.group = sim.glue.PortGroup()
        self.group.Bind(b.buf, len(b.buf), b.offset, b.length, b.port, frames)
        sim.hold(self.group, b)

    def add_port(self, number: int, device: Any) -> None:
        self.group.AddPort(number, device)

    def received(self) -> FrameBatch:
        """The frames collected since the last handler call."""
        self.batch.n = int(self.group.n())
        return self.batch

    def send(self, out: FrameBatch, delay_ps: int = 0) -> None:
        if out.n:
            self.group.Send(out.buf, out.offset, out.length, out.port, out.n, delay_ps)


class SimSwitch:
    """Switch `name` of a simulated network: `pipeline` on its devices (port -> device)."""

    def __init__(
        self,
        sim: Simulation,
        name: str,
        devices: Mapping[int, Any],
        *,
        dataplane: str = "fast",
        latency_ps: int = 0,
        seed: int = 0,
    ) -> None:
        self.sim, self.name, self.latency_ps = sim, name, latency_ps
        self.pipeline: Pipeline = make_pipeline(dataplane, seed=seed)
        self.frames = FrameGroup(sim)
        for port, device in devices.items():
            self.frames.add_port(port, device)
        self.frames.group.SetHandler(sim.handler(self._process))
        self.batches = 0

    def install(self, plan: SwitchPlan) -> None:
        apply_to_pipeline(self.pipeline, plan)

    def _process(self) -> None:
        batch = self.frames.received()
        self.batches += 1
        self.frames.send(self.pipeline.process_batch(batch), self.latency_ps)

    def counters(self) -> dict[str, Any]:
        """The pipeline's own counters: drops by reason, events, packets in and out."""
        p = self.pipeline
        return {
            "rx": int(np.sum(p.port_rx.packets)),
            "tx": int(np.sum(p.port_tx.packets)),
            "drops": [int(v) for v in p.ina_drops.packets],
            "events": [int(v) for v in p.ina_events.packets],
            "batches": self.batches,
            "unsent": int(self.frames.group.refused)
            + int(self.frames.group.oversized)
            + int(self.frames.group.unconnected),
        }
