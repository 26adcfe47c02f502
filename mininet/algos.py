"""Allreduce algorithms the Mininet runner can run: a registry, so that more (ring, halving-
doubling, multitree, gloo, ...) plug into the same runner.

An algorithm is a class with a `name` and a one-line `summary`, registered with `@register`.
The runner makes one instance per run and calls

1. `prepare(scenario, spec)` once, after the switches run ina.p4 and have their routes: it
   programs whatever else the algorithm needs (through the controller's commands,
   `scenario.inaemu(...)`) and returns facts worth reporting (`dict[str, str]`);
2. `worker_argv(scenario, spec, rank, host, out)` for every worker: the command the runner
   starts on that Mininet host. The worker must allreduce (SUM) its input,
   `hostlib.worker.worker_input(spec.seed, rank, spec.size, codec=spec.codec)`, write the
   result to `out` (.npy), print one JSON line per allreduce with at least `seconds` (and,
   if it can, `start` and `end` on the wall clock), and exit 0; non-zero on failure.

The runner starts every worker at once, waits for all, and checks every result against the
sum of the inputs (`run.verify`), whatever the algorithm.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from inaemu.mininet.scenario import Scenario, ScenarioError


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

    def prepare(self, sc: Scenario, spec: RunSpec) -> dict[str, str]:
        return {}

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


def algorithm(name: str) -> Algorithm:
    try:
        return ALGORITHMS[name]()
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
    trees = 0
    n_trees = 1

    def prepare(self, sc: Scenario, spec: RunSpec) -> dict[str, str]:
        out = sc.inaemu(
            "job", "add", *sc.topo_args(), "--job", str(spec.job),
            "--workers", ",".join(spec.workers), "--pool", str(spec.window),
            "--trees", str(self.trees),
        )  # fmt: skip
        state = Path(str(sc.topology_file) + ".jobs.json")
        try:
            (job,) = [j for j in json.loads(state.read_text())["jobs"] if j["job_id"] == spec.job]
            self.n_trees = int(job["n_trees"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ScenarioError(f"{state}: cannot read job {spec.job}'s trees ({exc!r})") from None
        facts = {"trees": str(self.n_trees)}
        first = out.splitlines()[0] if out else ""
        if first:
            facts["job"] = first
        return facts

    def worker_argv(
        self, sc: Scenario, spec: RunSpec, rank: int, host: str, out: Path
    ) -> list[str]:
        agg_ip, _ = sc.agg_address(host)  # its ARP entry and route: the host's set-up
        argv = [sys.executable, "-m", "inaemu.hostlib.worker", "--job", str(spec.job)]
        argv += ["--workers", str(len(spec.workers)), "--rank", str(rank)]
        argv += ["--local-ip", sc.host_ip(host), "--switch-ip", agg_ip]
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
