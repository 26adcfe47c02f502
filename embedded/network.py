"""The embedded network: one softswitch process per switch of a topology, joined port to port
by loopback wires in one private wire dir, programmed over P4Runtime by the controller, no
root needed.

    with EmbeddedNetwork(topo, workers, job=spec, loss=0.01) as net:
        ...  # workers attach to their wires in net.wire_dir
        stats = net.read_stats()

`start()` (or entering it):

1. refuses a job the topology cannot hold, before any process starts;
2. opens the wire dir (`wire_dir`, a user-named one, else a new private one);
3. compiles the fast data plane here once if numba's cache lacks it, so that the switches load
   it rather than all compiling at once;
4. starts every switch (`softswitch.command.argv`: its hosts' ports on host wires, its links
   to the other switches' ports, P4Runtime on a free 127.0.0.1 port, or `grpc_port` with one
   switch; `--parent-pid`, so that it stops when this process ends, even by SIGKILL) and waits
   for each one's READY line (`softswitch.command.Ready`);
5. connects the controller, pushes the pipeline, installs with `routes` the /32 route to every
   host on every switch, the job (if any) on all switches in one change, and with `loss` loss
   injection on every port in use (workers' and links').

Switch `d` (its device id) injects loss with the seed `seed + d - 1`. Each switch's stderr
goes to `log_dir/<switch>.log` (kept: its port-drop reports, `runs.accounting`), else to a
temporary file, quoted when it fails to start. `close()` (or leaving it) closes the
controller, stops the switches and removes a private wire dir. Every failure is a
`NetworkError` whose message says what went wrong in one line.

It is also a `runs.network.Network`: what the training launcher needs (`next_run`,
`launches`, `popen`, `trouble`), workers being plain processes of this machine and gloo's
rendezvous a file.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from inaemu.common.loopback import WireDir
from inaemu.controller.jobs import JobError, JobManager, JobRecord, JobSpec
from inaemu.controller.p4rt import Controller, ControllerError
from inaemu.controller.stats import StatsReport
from inaemu.hostlib.launch import Launch
from inaemu.runs.compare import LinkUse, link_ends
from inaemu.runs.network import JOB_ID, Launching, NetworkError, host_launch
from inaemu.softswitch import command as softswitch
from inaemu.softswitch.fast.dataplanes import DEFAULT_DATAPLANE, warm_up
from inaemu.topology.model import Topology

SWITCH_START_TIMEOUT = 30.0  # seconds for every softswitch process to print READY
LABEL = "embedded softswitches (loopback wires, no root)"


class EmbeddedNetwork:
    """Softswitch processes on loopback wires for `topo`, its `workers` on host wires (the
    module doc)."""

    label = LABEL

    def __init__(
        self,
        topo: Topology,
        workers: Sequence[str],
        *,
        job: JobSpec | None = None,
        loss: float = 0.0,
        routes: bool = False,
        seed: int = 0,
        dataplane: str = DEFAULT_DATAPLANE,
        wire_dir: str | None = None,
        grpc_port: int = 0,
        log_dir: Path | None = None,
    ) -> None:
        if grpc_port and len(topo.switches) != 1:
            raise NetworkError(
                "a P4Runtime port is for one switch; with more each takes a free one"
            )
        self.topology = topo
        self.workers = tuple(workers)
        self.job = job
        self.loss = loss
        self.routes = routes
        self.seed = seed
        self.dataplane = dataplane
        self.grpc_port = grpc_port
        self.log_dir = log_dir
        self.record: JobRecord | None = None  # the job as installed: its trees and pools
        self.processes: dict[str, subprocess.Popen[str]] = {}
        self._wire_dir_arg = wire_dir
        self._wires: WireDir | None = None
        self._loop = asyncio.new_event_loop()
        self._ctl: Controller | None = None

    # ------------------------------------------------------------------ up and down

    def __enter__(self) -> EmbeddedNetwork:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Every switch started and programmed (the module doc); `close()` whatever fails."""
        try:
            if self.job is not None:
                check_job_fits(self.topology, self.job)
            try:
                self._wires = WireDir(self._wire_dir_arg) if self._wire_dir_arg else WireDir()
            except OSError as exc:
                raise NetworkError(str(exc)) from None
            self._start_switches()
            try:
                self._loop.run_until_complete(self._program())
            except (JobError, ControllerError) as exc:
                raise NetworkError(str(exc)) from None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._ctl is not None:
            self._loop.run_until_complete(self._ctl.close())
            self._ctl = None
        if not self._loop.is_closed():
            self._loop.close()
        _stop(self.processes)
        if self._wires is not None:
            self._wires.cleanup()
            self._wires = None

    @property
    def wire_dir(self) -> str:
        """Where the workers' wire ends are (`LoopbackWireTransport(port, wire_dir, ...)`)."""
        assert self._wires is not None, "start the network first"
        return self._wires.path

    def argv(self, name: str) -> list[str]:
        """Switch `name`'s command line."""
        sw = self.topology.switches[name]
        wires = sorted(
            port for h in self.workers for s, port in [self.topology.host_attachment(h)]
            if s == name
        )  # fmt: skip
        links = self.topology.adjacency()[name]
        return softswitch.argv(
            name=name,
            device_id=sw.device_id,
            grpc=f"127.0.0.1:{self.grpc_port}",
            wire_dir=self.wire_dir,
            seed=self.seed + sw.device_id - 1,
            dataplane=self.dataplane,
            wires=wires,
            links={port: f"{peer}.{peer_port}" for port, (peer, peer_port) in links.items()},
            parent_pid=os.getpid(),
        )

    def _start_switches(self) -> None:
        """Every switch at once, then every READY line; the P4Runtime addresses they took
        into the topology."""
        warm_up(self.dataplane)
        with ExitStack() as files:
            logs: dict[str, IO[str]] = {}
            for name in self.topology.switches:
                if self.log_dir is not None:
                    logs[name] = files.enter_context((self.log_dir / f"{name}.log").open("w+"))
                else:
                    logs[name] = files.enter_context(tempfile.TemporaryFile("w+"))
                # stderr to a file, not a pipe: a pipe nobody drains would stall a chatty
                # switch; the child keeps its own descriptor when ours is closed
                self.processes[name] = subprocess.Popen(
                    self.argv(name), stdout=subprocess.PIPE, stderr=logs[name], text=True
                )
            deadline = time.monotonic() + SWITCH_START_TIMEOUT
            for name, proc in self.processes.items():
                try:
                    ready = _await_ready(proc, logs[name], deadline)
                except NetworkError as exc:
                    if len(self.processes) == 1:
                        raise
                    raise NetworkError(f"switch {name}: {exc}") from None
                sw = self.topology.switches[name]
                self.topology.switches[name] = replace(sw, grpc=ready.grpc)

    async def _program(self) -> None:
        ctl = self._ctl = Controller(self.topology, push_pipeline=True)  # it started them
        await ctl.connect()
        if self.routes:
            await ctl.install_routes()
        if self.job is not None:
            self.record = await ctl.add_job(self.job)
        if self.loss > 0:
            topo = self.topology
            adj = topo.adjacency()
            for name in topo.switches:
                ports = {p for h in self.workers for s, p in [topo.host_attachment(h)] if s == name}
                ports |= set(adj[name])
                if ports:
                    await ctl.set_loss(name, sorted(ports), self.loss)

    # ------------------------------------------------------------------ while it runs

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.processes.values())

    def ended(self) -> list[str]:
        """The switches that ended, each with how: `s1 (killed by SIGKILL)`."""
        return [
            f"{name} ({_how_it_ended(proc.returncode)})"
            for name, proc in sorted(self.processes.items())
            if proc.poll() is not None
        ]

    def read_stats(self) -> StatsReport:
        """Every switch's counters; `NetworkError` if a switch cannot give them: one that
        ended meanwhile is named (finsy cancels the reads of a connection that died: a
        CancelledError that would otherwise end the caller in a traceback)."""
        assert self._ctl is not None, "start the network first"
        try:
            return self._loop.run_until_complete(self._ctl.read_stats())
        except (asyncio.CancelledError, ControllerError) as exc:
            if dead := self.ended():
                raise NetworkError(
                    f"switch {', '.join(dead)} ended before the demo read its counters (the "
                    "report's packets and drops)"
                ) from None
            raise NetworkError(
                f"reading the switches' counters failed: {exc or 'cancelled'}"
            ) from None

    def link_counters(self, stats: StatsReport) -> tuple[list[LinkUse], int]:
        """Bytes and packets each way on every link so far, from the switches' port
        counters in `stats`: a host link as its switch's port received them (from the host)
        and sent them (to it), a link between switches as each end's port sent them; and the
        frames into the switches, every port (`runs.compare.link_delta` and a subtraction give
        a run's)."""
        counts = {
            (sw, name, port): value
            for sw, c in stats.switches.items()
            for (name, port), value in c.indexed.items()
            if name in ("port_rx", "port_tx")
        }

        def at(sw: str, counter: str, port: int) -> tuple[int, int]:
            return counts.get((sw, counter, port), (0, 0))

        uses = []
        for link in self.topology.links:
            a, b = link_ends(link)
            if link.a_port is None or link.b_port is None:  # a host link: count at the switch
                sw, port = (link.b, link.b_port) if link.a_port is None else (link.a, link.a_port)
                assert port is not None
                (in_p, in_b), (out_p, out_b) = at(sw, "port_rx", port), at(sw, "port_tx", port)
                if link.a_port is not None:  # the switch is end a
                    in_p, in_b, out_p, out_b = out_p, out_b, in_p, in_b
                uses.append(LinkUse(a, b, f"{sw}:{port}", in_b, out_b, in_p, out_p))
            else:
                (ap, ab), (bp, bb) = (
                    at(link.a, "port_tx", link.a_port),
                    at(link.b, "port_tx", link.b_port),
                )
                uses.append(LinkUse(a, b, f"{link.a}:{link.a_port}", ab, bb, ap, bp))
        packets = sum(p for (_, name, _), (p, _) in counts.items() if name == "port_rx")
        return uses, packets

    # ------------------------------------------------------------------ runs.network.Network

    def next_run(self) -> int:
        """A new run id of the job (`inaemu job new-run`)."""
        assert self._ctl is not None, "start the network first"
        return self._ctl.jobs.next_run(JOB_ID)

    def launches(self, launching: Launching) -> list[Launch]:
        backend, run, records, schedule = (
            launching.backend, launching.run, launching.records, launching.schedule
        )  # fmt: skip
        topo, n = self.topology, len(self.workers)
        rendezvous = records / "gloo-rendezvous"  # a file: no port to race for
        rendezvous.unlink(missing_ok=True)
        peers = ""
        if schedule is not None:
            peers = ",".join(f"{topo.hosts[h].mac}/{topo.hosts[h].ip}" for h in schedule.hosts)
        common: dict[str, Any] = {
            "rendezvous": f"file://{rendezvous}",
            "window": self.job.pool_size if self.job is not None else 0,
            "trees": len(self.record.trees) if self.record is not None else 1,
            "timeout": launching.timeout,
            "wire_dir": self.wire_dir,
            "peers": peers,
            "schedule": "" if schedule is None else str(launching.schedule_file),
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

    def popen(
        self, rank: int, launch: Launch, argv: list[str], log: Path
    ) -> subprocess.Popen[bytes]:
        env = {**os.environ, **launch.to_env(), "GLOO_SOCKET_IFNAME": "lo"}
        with log.open("wb") as f:  # the child keeps its own descriptor
            return subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT
            )

    def trouble(self) -> str | None:
        dead = [n for n, p in self.processes.items() if p.poll() is not None]
        return f"switch {', '.join(dead)} exited" if dead else None


def check_job_fits(topo: Topology, spec: JobSpec) -> None:
    """Refuse (`NetworkError`) a job the topology cannot hold, before any process starts."""
    try:
        JobManager(topo).plan_add(spec)
    except JobError as exc:
        raise NetworkError(str(exc)) from None


def _await_ready(proc: subprocess.Popen[str], log: IO[str], deadline: float) -> softswitch.Ready:
    """A softswitch's READY line; NetworkError with its stderr if it failed to start."""
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], max(deadline - time.monotonic(), 0))
    if not readable:
        proc.kill()
        proc.wait(10)
        raise NetworkError(f"the softswitch did not start within {SWITCH_START_TIMEOUT:.0f} s")
    ready = softswitch.Ready.parse(proc.stdout.readline())  # None: EOF, it failed
    if ready is None:
        proc.wait(10)
        log.seek(0)
        raise NetworkError(log.read().strip() or f"softswitch exited with {proc.returncode}")
    return ready


def _stop(procs: dict[str, subprocess.Popen[str]]) -> None:
    for proc in procs.values():
        if proc.poll() is None:
            proc.terminate()
    for proc in procs.values():
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _how_it_ended(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            pass
    return f"exit status {returncode}"
