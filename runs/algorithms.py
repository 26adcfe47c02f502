"""The allreduce algorithms every network runs, as facts: their names, what each is, the codecs
each runs and how its results are checked, the schedule a host collective runs (built over
the topology in the algorithm's own rank order, under a node model, and proved to all-reduce),
and why one cannot run somewhere. Mininet's runner (`mininet/algos.py`) and the simulator
(`sim/run.py`) run them each their own way; what an algorithm is, is stated here once.

- `ina`, `ina-1tree`: in-network aggregation, over the trees the controller chooses (one per
  root candidate, e.g. per spine), or over one;
- `ring`, `hd`, `hdrm`, `multitree`, `ps`: the host collectives of `inaemu.collectives`;
- `gloo`: PyTorch's gloo allreduce (on Mininet, the real one; in the simulator, the ring it
  runs between the hosts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from inaemu.collectives.algorithms import algorithm as collective_algorithm
from inaemu.collectives.check import simulate
from inaemu.collectives.schedule import Schedule, ScheduleError
from inaemu.hostlib.codecs import CODECS as INA_CODECS
from inaemu.hostlib.codecs.inceptionn import DEFAULT_ERROR_BOUND as INCEPTIONN_BOUND
from inaemu.hostlib.collective.executor import inceptionn_error_bound
from inaemu.runs import compare
from inaemu.topology.model import Topology
from inaemu.topology.routes import ALL_PORTS

# the runners' --codec: the INA codecs (homomorphic: a switch adds their encodings), plain
# float32 (summed by the hosts) and INCEPTIONN (lossy, for host collectives)
CODECS = (*sorted(INA_CODECS), "plain", "inceptionn")
# homomorphic codecs: integer sums, bit for bit the switch's; plain and INCEPTIONN: floats
_INA_CHECKS = {c: "exact" for c in sorted(INA_CODECS)}
_COLLECTIVE_CHECKS = {**_INA_CHECKS, "plain": "bound", "inceptionn": "bound"}


@dataclass(frozen=True)
class Algorithm:
    """What an allreduce algorithm is, on any network."""

    name: str
    summary: str
    kind: str  # ina | collective | gloo
    codecs: dict[str, str] = field(default_factory=dict)  # codec -> check: exact | bound
    trees: int = 0  # ina: the job's trees (0: one per root candidate)
    collective: str = ""  # collective: its name in `inaemu.collectives`

    def check(self, codec: str) -> str:
        """How its results are checked with `codec`: "exact" or "bound"."""
        return self.codecs[codec]

    def schedule(
        self, topo: Topology, workers: Sequence[str], node_ports: str = ALL_PORTS
    ) -> Schedule:
        """A host collective's schedule among `workers` in its own rank order, proved to
        all-reduce; ScheduleError if the topology is not one it supports (the message says
        which it does)."""
        sched = collective_algorithm(self.collective or "ring").schedule_among(
            topo, tuple(workers), node_ports=node_ports
        )
        if set(sched.hosts) != set(workers):
            raise ScheduleError(
                f"{self.name}: the schedule's hosts {list(sched.hosts)} are not the workers"
            )
        simulate(sched)
        return sched

    def refuse(
        self, topo: Topology, workers: Sequence[str], codec: str, node_ports: str = ALL_PORTS
    ) -> str | None:
        """Why it cannot run on `topo` with these workers and codec, or None."""
        if codec not in self.codecs:
            return f"{self.name} does not run codec {codec} (it runs {', '.join(self.codecs)})"
        if self.kind == "collective":
            try:
                self.schedule(topo, workers, node_ports)
            except ScheduleError as exc:
                return str(exc)
        return None

    def error_bound(
        self,
        codec: str,
        n_workers: int,
        abs_sum: npt.NDArray[np.float64],
        schedule: Schedule | None = None,
    ) -> npt.NDArray[np.float64]:
        """Element-wise bound on |result - float64 sum| (check "bound"), given the sum over
        the workers of |input|: INCEPTIONN through a schedule, that schedule's own bound;
        else `compare.error_bound`."""
        if codec == "inceptionn" and schedule is not None:
            return inceptionn_error_bound(schedule, abs_sum, INCEPTIONN_BOUND)
        bound: npt.NDArray[np.float64] = compare.error_bound(codec, n_workers, abs_sum)
        return bound


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm(
            "ina",
            "in-network aggregation, trees as the controller chooses (job add --trees 0)",
            "ina",
            _INA_CHECKS,
        ),
        Algorithm(
            "ina-1tree",
            "in-network aggregation over one tree (job add --trees 1)",
            "ina",
            _INA_CHECKS,
            trees=1,
        ),
        Algorithm(
            "ring",
            "host ring: reduce-scatter + all-gather over TCP (inaemu.collectives)",
            "collective",
            _COLLECTIVE_CHECKS,
            collective="ring",
        ),
        Algorithm(
            "hd",
            "halving-doubling (Rabenseifner) over TCP",
            "collective",
            _COLLECTIVE_CHECKS,
            collective="hd",
        ),
        Algorithm(
            "hdrm",
            "halving-doubling with EFLOPS' rank mapping (BiGraph only) over TCP",
            "collective",
            _COLLECTIVE_CHECKS,
            collective="hdrm",
        ),
        Algorithm(
            "multitree",
            "MULTITREE: one tree per rank under per-step link constraints, over TCP",
            "collective",
            _COLLECTIVE_CHECKS,
            collective="multitree",
        ),
        Algorithm(
            "ps",
            "worker-aggregator: push to one aggregator, pull the sum (INCEPTIONN's baseline)",
            "collective",
            _COLLECTIVE_CHECKS,
            collective="ps",
        ),
        Algorithm(
            "gloo",
            "torch.distributed.all_reduce, gloo backend, TCP between the hosts",
            "gloo",
            {"int32": "exact", "plain": "bound"},
        ),
    )
}


def algorithm(name: str) -> Algorithm:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(
            f"unknown algorithm {name!r}; use one of {', '.join(sorted(ALGORITHMS))}"
        ) from None


def describe(names: Sequence[str] | None = None) -> str:
    """`name: summary; ...` of `names` (default: every algorithm)."""
    chosen = sorted(ALGORITHMS) if names is None else names
    return "; ".join(f"{n}: {ALGORITHMS[n].summary}" for n in chosen)
