"""What every network that inaemu starts gives the code that runs workers on it: the job id
it installs (`JOB_ID`), its one failure (`NetworkError`), the launcher's view of it once
programmed (`Network`: the embedded softswitches, `inaemu.embedded`; Mininet's,
`cli/train/mininet_network.py`), and what every network tells a worker about its place in
the topology (`host_launch`)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Protocol

from inaemu.collectives.schedule import Schedule
from inaemu.hostlib.launch import Backend, Launch
from inaemu.topology.model import Topology

JOB_ID = 1  # the job every network inaemu starts installs for its workers


class NetworkError(RuntimeError):
    """A network could not be built, programmed or read; the message says what, in one line
    (a switch named with its own words, a job the topology cannot hold)."""


class Network(Protocol):
    """What the launcher needs of a network (embedded or Mininet), once it is programmed."""

    topology: Topology
    workers: tuple[str, ...]
    label: str  # for the report: "embedded softswitches", "Mininet, softswitch, 100 Mbit/s"

    def next_run(self) -> int: ...

    def launches(
        self,
        backend: Backend,
        run: int,
        records: Path,
        *,
        schedule: Schedule | None,
        schedule_file: Path | None,
        timeout: float,
    ) -> list[Launch]:
        """What each worker is told for one run of `backend` (`records`: where each rank
        writes its records; `schedule`, saved at `schedule_file`: a host collective's;
        `timeout`: its client's wait without progress)."""
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
