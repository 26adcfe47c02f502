"""The Mininet network of `inaemu train --mininet` (`launcher.py`): the Mininet runner's
own `Scenario`, programmed as `inaemu mininet` programs it, with the training script started
on every worker host.

Every backend crosses the switches here: INA over the kernel's UDP to the host's switch, the
host collectives over TCP between the hosts' addresses (the switches' IPv4 routes), and gloo
(also the process group every backend's DDP needs) over TCP, rank 0's host serving the
rendezvous. Ports are the Mininet runner's (`algos.run_port`), new for every run id.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

from inaemu.cli.train.network import TrainError, TrainOptions
from inaemu.hostlib.launch import Launch
from inaemu.mininet import debian
from inaemu.mininet.algos import Collective, Gloo, Ina, RunSpec, run_port
from inaemu.mininet.scenario import (
    NetOptions,
    RunDir,
    Scenario,
    ScenarioError,
    interface_name,
)
from inaemu.runs.network import JOB_ID, Launching, host_launch
from inaemu.topology.model import Topology


class MininetNetwork:
    """A `Network` for the launcher (see the module doc)."""

    def __init__(self, topo: Topology, workers: tuple[str, ...], opts: TrainOptions) -> None:
        self.topology = topo
        self.workers = workers
        self.opts = opts
        links = f"links {opts.bw:g} Mbit/s" if opts.bw else "links unshaped"
        self.label = f"Mininet, {opts.switch} switches, {links}"
        self.n_trees = 1
        self._sc: Scenario | None = None
        self._spec = RunSpec(
            workers=workers,
            size=0,
            codec="fixedpoint",
            seed=0,
            run_id=0,
            window=opts.window,
            timeout=opts.timeout,
        )

    def __enter__(self) -> MininetNetwork:
        from inaemu.mininet.run import bmv2_program

        try:
            debian.ensure(install=True)
            run = RunDir.make(self.opts.out / "mininet")
            program = bmv2_program(run) if self.opts.switch == "bmv2" else None
            self._sc = Scenario(
                self.topology,
                run,
                NetOptions(switch=self.opts.switch, bw=self.opts.bw, prefix=self.opts.prefix),
                program=program,
            )
            self._sc.__enter__()
        except (ScenarioError, debian.MininetUnavailable) as exc:
            raise TrainError(str(exc)) from None
        try:
            self._sc.program()
            ina = Ina()  # the job: `inaemu job add` over the workers, trees as chosen
            ina.prepare(self._sc, self._spec)
            self.n_trees = ina.n_trees
        except BaseException as exc:
            self._sc.__exit__(type(exc), exc, exc.__traceback__)
            if isinstance(exc, ScenarioError):
                raise TrainError(str(exc)) from None
            raise
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if self._sc is not None:
            try:
                self._sc.__exit__(kind, exc, tb)
            except ScenarioError as failed:  # CleanupError: what was left
                raise TrainError(str(failed)) from None

    @property
    def sc(self) -> Scenario:
        assert self._sc is not None, "enter the network first"
        return self._sc

    def next_run(self) -> int:
        """`inaemu job new-run`: the job state's next run id."""
        return self.sc.new_run(JOB_ID)

    def launches(self, launching: Launching) -> list[Launch]:
        backend, run, records, schedule = (
            launching.backend, launching.run, launching.records, launching.schedule
        )  # fmt: skip
        sc, spec = self.sc, replace(self._spec, run_id=run)
        master = sc.host_ip(self.workers[0])
        peers = ""
        if schedule is not None:
            port = run_port(spec, Collective.PORT_BASE)
            peers = ",".join(f"{sc.host_ip(h)}:{port}" for h in schedule.hosts)
        common = {
            "rendezvous": f"tcp://{master}:{run_port(spec, Gloo.PORT_BASE)}",
            "window": self.opts.window,
            "trees": self.n_trees,
            "timeout": launching.timeout,
            "peers": peers,
            "schedule": "" if schedule is None else str(launching.schedule_file),
        }
        n = len(self.workers)
        return [
            host_launch(
                self.topology,
                host,
                rank,
                n,
                backend,
                run,
                records=str(records / f"rank{rank}.jsonl"),
                **common,
            )
            for rank, host in enumerate(self.workers)
        ]

    def popen(
        self, rank: int, launch: Launch, argv: list[str], log: Path
    ) -> subprocess.Popen[bytes]:
        """The script on worker `rank`'s host, its environment given by `env` (Mininet's
        popen takes none): gloo on the host's interface, stderr to `log`."""
        host = self.workers[rank]
        env = {**launch.to_env(), "GLOO_SOCKET_IFNAME": interface_name(host, 0)}
        command = ["env", *(f"{k}={v}" for k, v in env.items()), *argv]
        return self.sc.popen(host, command, stdout=log.with_suffix(".out"), stderr=log)

    def trouble(self) -> str | None:
        dead = [sw for sw in self.sc.net.switches if sw.proc is None or sw.proc.poll() is not None]
        if dead:
            return "; ".join(f"switch {sw.name} exited: {sw.log_tail()}" for sw in dead)
        return None
