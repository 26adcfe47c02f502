"""What the training launcher and the networks it runs on share: its options
(`TrainOptions`), its one failure (`TrainError`), what it needs of a network once programmed
(`Network`: the embedded one, `embedded_network.py`; Mininet's, `mininet_network.py`), what
every network tells a worker (`host_launch`), and where a backend's schedule lies."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from inaemu.cli.demo_worker import JOB_ID
from inaemu.collectives.schedule import Schedule
from inaemu.hostlib.launch import Backend, Launch
from inaemu.topology.model import Topology


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


class Network(Protocol):
    """What the launcher needs of a network (embedded or Mininet), once it is programmed."""

    topology: Topology
    workers: tuple[str, ...]
    label: str  # for the report: "embedded softswitches", "Mininet, softswitch, 100 Mbit/s"

    def next_run(self) -> int: ...

    def launches(
        self, backend: Backend, run: int, schedule: Schedule | None, records: Path
    ) -> list[Launch]: ...

    def start(
        self, rank: int, launch: Launch, argv: list[str], log: Path
    ) -> subprocess.Popen[bytes]: ...

    def trouble(self) -> str | None:
        """A switch that died, or None."""
        ...


def host_launch(
    topo: Topology, host: str, rank: int, world: int, backend: Backend, run: int, **more: Any
) -> Launch:
    """What every network tells worker `rank` on `host`: addresses from the topology."""
    sw, _ = topo.host_attachment(host)
    h, agg = topo.hosts[host], topo.switches[sw]
    return Launch(
        rank=rank,
        world_size=world,
        backend=backend.name,
        run=run,
        job=JOB_ID,
        mac=h.mac,
        ip=h.ip,
        agg_mac=agg.agg_mac,
        agg_ip=agg.agg_ip,
        **more,
    )
