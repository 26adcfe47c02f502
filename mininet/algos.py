"""Allreduce algorithms the Mininet runner can run: a registry, so that every algorithm (INA,
host collectives, gloo) runs on the same network, with the same measurements and checks.

An algorithm is a class with a `name`, a one-line `summary` and `codecs`: the runner's codecs
it runs (`CODECS`), each with how its results are checked (`compare.CHECKS`: "exact" or
"bound"). It is registered with `@register`. The runner makes one instance per run and calls

0. `refuse(topology, workers, codec)` before anything starts: the reason it cannot run there
   (a topology it does not support, a codec it does not run), or None;
1. `prepare(scenario, spec)` once, after the switches run ina.p4 and have their routes: it
   programs whatever else the algorithm needs (through the controller's operations,
   `scenario.add_job(...)`) and returns facts worth reporting (`dict[str, str]`);
2. `worker_argv(scenario, spec, rank, host, out)` for every worker: the command the runner
   starts on that Mininet host. The worker must allreduce (SUM) its input,
   `hostlib.worker.worker_input(spec.seed, rank, spec.size, codec=spec.codec)`, write the
   result to `out` (.npy), print one JSON line per allreduce with at least `seconds` (and,
   if it can, `start` and `end` on the wall clock), and exit 0; non-zero on failure;
3. `finish(scenario, spec)` after the workers and the measurements: undo what `prepare` set
   up that would be in the way of the next algorithm on the same network.

The runner starts every worker at once, waits for all, and checks every result
(`compare.check_results`), whatever the algorithm.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from inaemu.collectives.schedule import Schedule, ScheduleError
from inaemu.controller.api import describe_trees
from inaemu.controller.jobs import JobSpec
from inaemu.mininet.scenario import Scenario, ScenarioError
from inaemu.runs import algorithms as facts
from inaemu.runs.algorithms import CODECS
from inaemu.topology.model import Topology
from inaemu.topology.routes import ALL_PORTS, check_node_ports

__all__ = ["CODECS", "Algorithm", "RunSpec", "algorithm", "describe"]


@dataclass(frozen=True)
class RunSpec:
    """What every worker of a run is told."""

    workers: tuple[str, ...]  # Mininet host names, in rank order
    size: int  # elements per worker
    codec: str  # hostlib codec (int32: exact sums)
    seed: int  # inputs: worker_input(seed, rank, size, codec=codec)
    run_id: int  # 1..65535, new for every run
    window: int  # slots per switch for the job = the workers' window
    timeout: float  # a worker gives up after this long without progress
    job: int = 1


class Algorithm:
    """How the Mininet runner runs one of `runs.algorithms`' algorithms (`facts`: its name,
    summary, codecs and checks, schedule and refusals, stated there once)."""

    name: ClassVar[str] = ""
    facts: ClassVar[facts.Algorithm]

    def __init__(self, node_ports: str = ALL_PORTS) -> None:
        self.node_ports = check_node_ports(node_ports)  # torus and mesh nodes (`routes`)

    @property
    def summary(self) -> str:
        return self.facts.summary

    @property
    def codecs(self) -> dict[str, str]:
        return self.facts.codecs

    def refuse(self, topo: Topology, workers: tuple[str, ...], codec: str) -> str | None:
        """Why this algorithm cannot run on `topo` with these workers and codec, or None."""
        return self.facts.refuse(topo, workers, codec, self.node_ports)

    def check(self, codec: str) -> str:
        """How its results are checked with `codec`: "exact" or "bound"."""
        return self.facts.check(codec)

    def error_bound(
        self, codec: str, n_workers: int, abs_sum: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.float64]:
        """Element-wise bound on |result - float64 sum| (check "bound"), given the sum over
        the workers of |input| (`runs.algorithms.Algorithm.error_bound`)."""
        return self.facts.error_bound(codec, n_workers, abs_sum)

    def prepare(self, sc: Scenario, spec: RunSpec) -> dict[str, str]:
        return {}

    def finish(self, sc: Scenario, spec: RunSpec) -> None:
        return None

    def worker_argv(
        self, sc: Scenario, spec: RunSpec, rank: int, host: str, out: Path
    ) -> list[str]:
        raise NotImplementedError


ALGORITHMS: dict[str, type[Algorithm]] = {}


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator: make `cls` available as `--algo cls.name`, with the facts of
    `runs.algorithms` of that name."""
    if not cls.name or cls.name in ALGORITHMS:
        raise ValueError(f"algorithm name {cls.name!r} is empty or taken")
    try:
        cls.facts = facts.algorithm(cls.name)
    except ValueError:
        raise ValueError(
            f"algorithm {cls.name!r} has no facts in runs/algorithms.py: add it there first"
        ) from None
    ALGORITHMS[cls.name] = cls
    return cls


def algorithm(name: str, node_ports: str = ALL_PORTS) -> Algorithm:
    """An instance of the algorithm called `name`, for runs under the node model
    `node_ports` (`topology.routes`: what a host collective's schedule is built for)."""
    try:
        return ALGORITHMS[name](node_ports)
    except KeyError:
        raise ValueError(
            f"unknown algorithm {name!r}; use one of {', '.join(sorted(ALGORITHMS))}"
        ) from None


def describe() -> str:
    return facts.describe(sorted(ALGORITHMS))


@register
class Ina(Algorithm):
    """In-network aggregation: `inaemu job add` with the job's trees as the controller chooses
    them (one per root candidate, e.g. per spine), then `python -m inaemu.hostlib.worker` on
    every host, striping its chunks over the trees."""

    name = "ina"
    n_trees = 1

    def prepare(self, sc: Scenario, spec: RunSpec) -> dict[str, str]:
        record = sc.add_job(JobSpec(spec.job, spec.workers, spec.window, self.facts.trees))
        self.n_trees = record.spec.n_trees
        return {"trees": str(self.n_trees), "job": describe_trees(record).splitlines()[0]}

    def finish(self, sc: Scenario, spec: RunSpec) -> None:
        """The job's slots back, so that the next run on this network can take them."""
        sc.remove_job(spec.job)

    def worker_argv(
        self, sc: Scenario, spec: RunSpec, rank: int, host: str, out: Path
    ) -> list[str]:
        agg_ip, _ = sc.agg_address(host)  # its ARP entry and route: the host's set-up
        argv = [sys.executable, "-m", "inaemu.hostlib.worker", "--job", str(spec.job)]
        argv += ["--workers", str(len(spec.workers)), "--rank", str(rank)]
        argv += ["--local-ip", sc.host_ip(host), "--mac", sc.topology.hosts[host].mac]
        argv += ["--switch-ip", agg_ip]
        argv += ["--size", str(spec.size), "--seed", str(spec.seed), "--codec", spec.codec]
        argv += ["--window", str(spec.window), "--trees", str(self.n_trees)]
        argv += ["--run", str(spec.run_id), "--timeout", str(spec.timeout), "--out", str(out)]
        return argv


@register
class InaOneTree(Ina):
    """In-network aggregation over a single tree (`job add --trees 1`)."""

    name = "ina-1tree"


def run_port(spec: RunSpec, base: int) -> int:
    """A TCP port for this run (`base` + 0..9999): a rerun on the same hosts never meets a
    socket of the last one still in TIME_WAIT."""
    return base + spec.run_id % 10_000


class Collective(Algorithm):
    """A host collective of `inaemu.collectives` (the schedule of its name over the
    scenario's worker hosts in the algorithm's own rank order, under the run's node model:
    `Algorithm.schedule_among`, the schedule `inaemu schedule` checks; proved by
    `collectives.check.simulate`, saved as build/schedule-<name>.json), executed by `python
    -m inaemu.hostlib.collective.worker` on every host over TCP, peers at the hosts' IP
    addresses in the schedule's rank order."""

    PORT_BASE = 30_000
    schedule: Schedule | None = None

    def build(self, topo: Topology, workers: tuple[str, ...]) -> Schedule:
        """The schedule, proved to all-reduce (`runs.algorithms.Algorithm.schedule`)."""
        return self.facts.schedule(topo, workers, self.node_ports)

    def prepare(self, sc: Scenario, spec: RunSpec) -> dict[str, str]:
        try:
            self.schedule = self.build(sc.topology, spec.workers)
        except ScheduleError as exc:
            raise ScenarioError(str(exc)) from None
        path = self.schedule_file(sc)
        self.schedule.save(path)
        steps = len(self.schedule.steps)
        return {"schedule": f"{path.name}: {steps} steps, {self.schedule.n_chunks} chunks"}

    def schedule_file(self, sc: Scenario) -> Path:
        return sc.run.build / f"schedule-{self.name}.json"

    def error_bound(
        self, codec: str, n_workers: int, abs_sum: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.float64]:
        return self.facts.error_bound(codec, n_workers, abs_sum, self.schedule)

    def worker_argv(
        self, sc: Scenario, spec: RunSpec, rank: int, host: str, out: Path
    ) -> list[str]:
        assert self.schedule is not None, "prepare() first"
        port = run_port(spec, self.PORT_BASE)
        peers = ",".join(f"{sc.host_ip(h)}:{port}" for h in self.schedule.hosts)
        argv = [sys.executable, "-m", "inaemu.hostlib.collective.worker"]
        argv += ["--schedule", str(self.schedule_file(sc))]
        argv += ["--rank", str(self.schedule.hosts.index(host)), "--peers", peers]
        argv += ["--size", str(spec.size), "--seed", str(spec.seed), "--codec", spec.codec]
        argv += ["--run", str(spec.run_id), "--timeout", str(spec.timeout), "--out", str(out)]
        return argv


@register
class Ring(Collective):
    name = "ring"


@register
class HalvingDoubling(Collective):
    name = "hd"


@register
class Hdrm(Collective):
    name = "hdrm"


@register
class MultiTree(Collective):
    name = "multitree"


@register
class ParameterServer(Collective):
    name = "ps"


@register
class Ring2d(Collective):
    name = "ring2d"


@register
class DoubleTree(Collective):
    name = "dtree"


@register
class Gloo(Algorithm):
    """PyTorch's `torch.distributed.all_reduce` with the gloo backend between the worker hosts
    (`python -m inaemu.mininet.gloo_worker`): TCP through the switches' IPv4 routes, rank 0's
    host serving the rendezvous."""

    name = "gloo"
    PORT_BASE = 20_000  # the rendezvous' port: run_port

    def refuse(self, topo: Topology, workers: tuple[str, ...], codec: str) -> str | None:
        why = super().refuse(topo, workers, codec)
        if why is None and importlib.util.find_spec("torch") is None:  # no import: slow
            return "gloo needs PyTorch in the venv (make installs its CPU build)"
        return why

    def worker_argv(
        self, sc: Scenario, spec: RunSpec, rank: int, host: str, out: Path
    ) -> list[str]:
        argv = [sys.executable, "-m", "inaemu.mininet.gloo_worker", "--rank", str(rank)]
        argv += ["--workers", str(len(spec.workers)), "--master", sc.host_ip(spec.workers[0])]
        argv += ["--port", str(run_port(spec, self.PORT_BASE)), "--local-ip", sc.host_ip(host)]
        argv += ["--size", str(spec.size), "--seed", str(spec.seed), "--codec", spec.codec]
        argv += ["--timeout", str(spec.timeout), "--out", str(out)]
        return argv
