"""The embedded network of `inaemu train` (the default, no root): softswitch processes on
loopback wires, started and programmed as `inaemu demo --topo` does; the workers are plain
processes of this machine, gloo's rendezvous a file."""

from __future__ import annotations

import asyncio
import os
import subprocess
from dataclasses import replace
from pathlib import Path

from inaemu.cli.demo import (
    DemoError,
    check_job_fits,
    open_wire_dir,
    program_topology,
    start_switches,
    stop_switches,
)
from inaemu.cli.demo_worker import JOB_ID, DemoOptions
from inaemu.cli.train.network import TrainError, TrainOptions, schedule_path
from inaemu.collectives.schedule import Schedule
from inaemu.common.loopback import WireDir
from inaemu.controller.jobs import JobError, JobSpec
from inaemu.controller.p4rt import Controller, ControllerError
from inaemu.hostlib.launch import Backend, Launch
from inaemu.runs.network import host_launch
from inaemu.topology.model import Topology


class EmbeddedNetwork:
    """Softswitch processes on loopback wires, started and programmed as `inaemu demo --topo`
    does (`cli/demo.py`); workers are plain processes of this machine."""

    def __init__(self, topo: Topology, workers: tuple[str, ...], opts: TrainOptions) -> None:
        self.topology = topo
        self.workers = workers
        self.opts = opts
        self.label = "embedded softswitches (loopback wires, no root)"
        self.n_trees = 1
        self._loop = asyncio.new_event_loop()
        self._ctl: Controller | None = None
        self._switches: dict[str, subprocess.Popen[str]] = {}
        self._wires: WireDir | None = None

    def __enter__(self) -> EmbeddedNetwork:
        spec = JobSpec(JOB_ID, self.workers, pool_size=self.opts.window)
        try:
            check_job_fits(self.topology, spec)
            self._wires = open_wire_dir(DemoOptions())
            self._switches, addresses = start_switches(
                self.topology, self.workers, self._wires.path, DemoOptions()
            )
            for name, address in addresses.items():
                self.topology.switches[name] = replace(self.topology.switches[name], grpc=address)
            self._ctl, record = self._loop.run_until_complete(
                program_topology(self.topology, spec, self.workers, 0.0, routes=True)
            )
        except (DemoError, JobError, ControllerError) as exc:
            self.close()
            raise TrainError(str(exc)) from None
        except BaseException:
            self.close()
            raise
        assert record is not None
        self.n_trees = len(record.trees)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._ctl is not None:
            self._loop.run_until_complete(self._ctl.close())
            self._ctl = None
        if not self._loop.is_closed():
            self._loop.close()
        stop_switches(self._switches)
        if self._wires is not None:
            self._wires.cleanup()
            self._wires = None

    def next_run(self) -> int:
        assert self._ctl is not None
        return self._ctl.jobs.next_run(JOB_ID)

    def launches(
        self, backend: Backend, run: int, schedule: Schedule | None, records: Path
    ) -> list[Launch]:
        assert self._wires is not None, "enter the network first"
        topo, n = self.topology, len(self.workers)
        rendezvous = records / "gloo-rendezvous"  # a file: no port to race for
        rendezvous.unlink(missing_ok=True)
        peers = ""
        if schedule is not None:
            peers = ",".join(f"{topo.hosts[h].mac}/{topo.hosts[h].ip}" for h in schedule.hosts)
        common = {
            "rendezvous": f"file://{rendezvous}",
            "window": self.opts.window,
            "trees": self.n_trees,
            "timeout": self.opts.timeout,
            "wire_dir": self._wires.path,
            "peers": peers,
            "schedule": "" if schedule is None else str(schedule_path(self.opts.out, backend)),
        }
        out = []
        for rank, host in enumerate(self.workers):
            sw, port = topo.host_attachment(host)
            records_file = str(records / f"rank{rank}.jsonl")
            out.append(
                host_launch(
                    topo,
                    host,
                    rank,
                    n,
                    backend,
                    run,
                    records=records_file,
                    switch=sw,
                    port=port,
                    **common,
                )
            )
        return out

    def start(
        self, rank: int, launch: Launch, argv: list[str], log: Path
    ) -> subprocess.Popen[bytes]:
        env = {**os.environ, **launch.to_env(), "GLOO_SOCKET_IFNAME": "lo"}
        with log.open("wb") as f:  # the child keeps its own descriptor
            return subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT
            )

    def trouble(self) -> str | None:
        dead = [n for n, p in self._switches.items() if p.poll() is not None]
        return f"switch {', '.join(dead)} exited" if dead else None
