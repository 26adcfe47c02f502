"""What every network that inaemu starts gives the code that runs workers on it: the job id
it installs (`JOB_ID`), its one failure (`NetworkError`), the launcher's view of it once
programmed (`Network`: the embedded softswitches, `inaemu.embedded`; Mininet's,
`cli/train/mininet_network.py`), and what every network tells a worker about its place in
the topology (`host_launch`)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from inaemu.collectives.schedule import Schedule
from inaemu.hostlib.launch import Backend, Launch
from inaemu.topology.model import Topology

JOB_ID = 1  # the job every network inaemu starts installs for its workers


class NetworkError(RuntimeError):
    """A network could not be built, programmed or read; the message says what, in one line
    (a switch named with its own words, a job the topology cannot hold)."""


@dataclass(frozen=True)
class Launching:
    """One run of a backend, as the launcher asks a network to launch it."""

    backend: Backend
    run: int  # its run id (`Network.next_run`)
    records: Path  # where each rank writes its records
    timeout: float  # a worker's client gives up after this long without progress
    schedule: Schedule | None = None  # a host collective's
    schedule_file: Path | None = None  # where that schedule is saved for the workers


class Network(Protocol):
    """What the launcher needs of a network (embedded or Mininet), once it is programmed."""

    topology: Topology
    workers: tuple[str, ...]
    label: str  # for the report: "embedded softswitches", "Mininet, softswitch, 100 Mbit/s"

    def next_run(self) -> int: ...

    def launches(self, launching: Launching) -> list[Launch]:
        """What each worker is told for one run of a backend."""
        ...

    def popen(
        self, rank: int, launch: Launch, argv: list[str], log: Path
    ) -> subprocess.Popen[bytes]:
        """`argv` started as worker `rank` on its host, told `launch`; its output to `log`."""
        ...

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
