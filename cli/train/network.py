"""What the training launcher and the networks it runs on share: its options
(`TrainOptions`), its one failure (`TrainError`) and where a backend's schedule lies. What it
needs of a network once programmed is `runs.network.Network`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from inaemu.hostlib.launch import Backend


class TrainError(RuntimeError):
    """Refused or failed; the message says what to fix."""


@dataclass(frozen=True)
class TrainOptions:
    script: Path
    script_args: tuple[str, ...]
    backends: tuple[Backend, ...]
    workers: int  # 0: every host of the topology
    topo: str | None  # spec or file; None: star of `workers`
    mininet: bool
    switch: str  # with mininet: softswitch | bmv2
    bw: float | None  # with mininet: Mbit/s on every link
    out: Path
    window: int
    timeout: float
    limit: float  # seconds one backend's workers may take in all
    prefix: str | None = None  # with mininet: of the switch interfaces' names; None: chosen


def schedule_path(out: Path, backend: Backend) -> Path:
    return out / f"schedule-{backend.kind}.json"
