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

from inaemu.collectives.algorithms import algorithm as collective_algorithm
from inaemu.collectives.check import simulate
from inaemu.collectives.schedule import Schedule, ScheduleError
from inaemu.controller.api import describe_trees
from inaemu.controller.jobs import JobSpec
from inaemu.hostlib.codecs import CODECS as INA_CODECS
from inaemu.hostlib.codecs.inceptionn import DEFAULT_ERROR_BOUND as INCEPTIONN_BOUND
from inaemu.hostlib.collective.executor import inceptionn_error_bound
from inaemu.mininet.scenario import Scenario, ScenarioError
from inaemu.runs import compare
from inaemu.topology.model import Topology
from inaemu.topology.routes import ALL_PORTS, check_node_ports

# the runner's --codec: the INA codecs (homomorphic: a switch adds their encodings), plain
# float32 (summed by the hosts) and INCEPTIONN (lossy, for host collectives)
CODECS = (*sorted(INA_CODECS), "plain", "inceptionn")


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
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    codecs: ClassVar[dict[str, str]] = {}  # runner codec -> check ("exact" or "bound")

    def __init__(self, node_ports: str = ALL_PORTS) -> None:
        self.node_ports = check_node_ports(node_ports)  # torus and mesh nodes (`routes`)

    def refuse(self, topo: Topology, workers: tuple[str, ...], codec: str) -> str | None:
        """Why this algorithm cannot run on `topo` with these workers and codec, or None."""
        if codec not in self.codecs:
            return f"{self.name} does not run codec {codec} (it runs {', '.join(self.codecs)})"
        return None

    def check(self, codec: str) -> str:
        """How its results are checked with `codec`: "exact" or "bound"."""
        return self.codecs[codec]

    def error_bound(
        self, codec: str, n_workers: int, abs_sum: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.float64]:
        """Element-wise bound on |result - float64 sum| (check "bound"), given the sum over
        the workers of |input|: `compare.error_bound` unless the algorithm knows better."""
        bound: npt.NDArray[np.float64] = compare.error_bound(codec, n_workers, abs_sum)
        return bound

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
    """Class decorator: make `cls` available as `--algo cls.name`."""
    if not cls.name or cls.name in ALGORITHMS:
        raise ValueError(f"algorithm name {cls.name!r} is empty or taken")
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
    return "; ".join(f"{n}: {c.summary}" for n, c in sorted(ALGORITHMS.items()))


@register
class Ina(Algorithm):
    """In-network aggregation: `inaemu job add` with the job's trees as the controller chooses
    them (one per root candidate, e.g. per spine), then `python -m inaemu.hostlib.worker` on
    every host, striping its chunks over the trees."""

    name = "ina"
    summary = "in-network aggregation, trees as the controller chooses (job add --trees 0)"
    codecs = {c: "exact" for c in sorted(INA_CODECS)}  # int32 exact, others as the reference
    trees = 0
    n_trees = 1

    def prepare(self, sc: Scenario, spec: RunSpec) -> dict[str, str]:
        record = sc.add_job(JobSpec(spec.job, spec.workers, spec.window, self.trees))
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
    summary = "in-network aggregation over one tree (job add --trees 1)"
    trees = 1


def run_port(spec: RunSpec, base: int) -> int:
    """A TCP port for this run (`base` + 0..9999): a rerun on the same hosts never meets a
    socket of the last one still in TIME_WAIT."""
    return base + spec.run_id % 10_000


class Collective(Algorithm):
    """A host collective of `inaemu.collectives` (the schedule of `collective_name` over the
    scenario's worker hosts in the algorithm's own rank order, under the run's node model:
    `Algorithm.schedule_among`, the schedule `inaemu schedule` checks; proved by
    `collectives.check.simulate`, saved as build/schedule-<name>.json), executed by `python
    -m inaemu.hostlib.collective.worker` on every host over TCP, peers at the hosts' IP
    addresses in the schedule's rank order."""

    collective_name: ClassVar[str] = ""
    # homomorphic codecs: integer sums, bit for bit the switch's; plain and INCEPTIONN: floats
    codecs = {**{c: "exact" for c in sorted(INA_CODECS)}, "plain": "bound", "inceptionn": "bound"}
    PORT_BASE = 30_000
    schedule: Schedule | None = None

    def build(self, topo: Topology, workers: tuple[str, ...]) -> Schedule:
        """The schedule, proved to all-reduce; ScheduleError if the topology is not one the
        algorithm supports (the message says which it does)."""
        sched = collective_algorithm(self.collective_name).schedule_among(
            topo, workers, node_ports=self.node_ports
        )
        if set(sched.hosts) != set(workers):
            raise ScheduleError(
                f"{self.name}: the schedule's hosts {list(sched.hosts)} are not the workers"
            )
        simulate(sched)
        return sched

    def refuse(self, topo: Topology, workers: tuple[str, ...], codec: str) -> str | None:
        why = super().refuse(topo, workers, codec)
        if why is None:
            try:
                self.build(topo, workers)
            except ScheduleError as exc:
                return str(exc)
        return why

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
        if codec == "inceptionn" and self.schedule is not None:  # this schedule's own bound
            return inceptionn_error_bound(self.schedule, abs_sum, INCEPTIONN_BOUND)
        return super().error_bound(codec, n_workers, abs_sum)

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
    name = collective_name = "ring"
    summary = "host ring: reduce-scatter + all-gather over TCP (inaemu.collectives)"


@register
class HalvingDoubling(Collective):
    name = collective_name = "hd"
    summary = "halving-doubling (Rabenseifner) over TCP"


@register
class Hdrm(Collective):
    name = collective_name = "hdrm"
    summary = "halving-doubling with EFLOPS' rank mapping (BiGraph only) over TCP"


@register
class MultiTree(Collective):
    name = collective_name = "multitree"
    summary = "MULTITREE: one tree per rank under per-step link constraints, over TCP"


@register
class ParameterServer(Collective):
    name = collective_name = "ps"
    summary = "worker-aggregator: push to one aggregator, pull the sum (INCEPTIONN's baseline)"


@register
class Gloo(Algorithm):
    """PyTorch's `torch.distributed.all_reduce` with the gloo backend between the worker hosts
    (`python -m inaemu.mininet.gloo_worker`): TCP through the switches' IPv4 routes, rank 0's
    host serving the rendezvous."""

    name = "gloo"
    summary = "torch.distributed.all_reduce, gloo backend, TCP between the hosts"
    codecs = {"int32": "exact", "plain": "bound"}
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
