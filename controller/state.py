"""The job state file: what the job commands keep between runs, so that a later command knows
the slot pools, multicast groups and epochs the switches hold, the last epoch issued per switch
and the run ids issued to each job's workers. By default it lies next to the topology
(`<topology>.jobs.json`). It is read with the same checks as a topology file (size, depth,
every field's type and range), and held with a lock while a job command runs."""

from __future__ import annotations

import dataclasses
import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from inaemu.controller.jobs import MAX_EPOCH, MAX_MGID, JobManager, JobSpec, Placement
from inaemu.controller.p4rt import ControllerError
from inaemu.hostlib.wire import MAX_RUN
from inaemu.p4.constants import INA_SLOTS
from inaemu.topology.model import Integer, Items, Named, Record, Text, TopologyError, read_json


def default_state_path(topology: Path) -> Path:
    """Where the job state of `topology` lies unless told otherwise."""
    return Path(str(topology) + ".jobs.json")


_EPOCHS = Named("switch", Integer(0, MAX_EPOCH))
_POOLS = Named(
    "switch",
    Items(Integer(0, INA_SLOTS), "pool #{}".format, lo=2, hi=2, what="a [base, size] pool"),
)
_MGIDS = Items(Named("switch", Integer(1, MAX_MGID)), "tree #{}".format)
_STATE_SCHEMA = Record(
    {
        "jobs": Items(
            Record(
                {
                    "job_id": Integer(0, 2**16 - 1),
                    "workers": Items(Text(), "worker #{}".format),
                    "pool_size": Integer(1, 2**32 - 1),
                    "n_trees": Integer(1, 2**32 - 1),
                    "roots": Items(Text(), "root #{}".format),
                    "pools": _POOLS,
                    "mgids": _MGIDS,
                    "epochs": _EPOCHS,
                    "last_run": Integer(0, MAX_RUN),
                },
                frozenset(
                    {"job_id", "workers", "pool_size", "n_trees", "pools", "mgids", "epochs"}
                ),
            ),
            "job #{}".format,
            in_place=True,
        ),
        "epochs": _EPOCHS,
    },
    frozenset({"jobs", "epochs"}),
)


@dataclass
class JobState:
    """What the job commands keep between runs: the installed jobs with where each lives (slot
    pools, multicast groups, epochs: so later commands plan exactly what the switches hold),
    and the last epoch issued per switch (so a new installation always gets a new one), and the
    last run id issued to each job (`JobRecord.last_run`; absent in older files: none)."""

    jobs: list[tuple[JobSpec, Placement]]
    epochs: dict[str, int]
    last_runs: dict[int, int] = dataclasses.field(default_factory=dict)


def load_state(path: Path) -> JobState:
    """The job state in `path` (none yet: no jobs); `ControllerError` if it cannot be used."""
    if not path.exists():
        return JobState([], {}, {})
    try:
        raw = read_json(path, "job state file")
        _STATE_SCHEMA(raw, (str(path),))
    except TopologyError as exc:
        raise ControllerError(f"{exc}; delete it if the switches were restarted") from None
    return JobState(
        [
            (
                JobSpec(
                    j["job_id"],
                    tuple(j["workers"]),
                    j["pool_size"],
                    j["n_trees"],
                    tuple(j.get("roots", ())),
                ),
                Placement(
                    {sw: (base, size) for sw, (base, size) in j["pools"].items()},
                    {(sw, t): m for t, tree in enumerate(j["mgids"]) for sw, m in tree.items()},
                    dict(j["epochs"]),
                ),
            )
            for j in raw["jobs"]
        ],
        dict(raw["epochs"]),
        {j["job_id"]: j.get("last_run", 0) for j in raw["jobs"]},
    )


def save_state(path: Path, jobs: JobManager) -> None:
    """Write what `jobs` holds to `path`; `ControllerError` (saying what to do) if it cannot."""
    text = json.dumps(
        {
            "jobs": [
                {
                    "job_id": r.spec.job_id,
                    "workers": list(r.spec.workers),
                    "pool_size": r.spec.pool_size,
                    "n_trees": r.spec.n_trees,
                    "roots": list(r.spec.roots),
                    "pools": {sw: list(pool) for sw, pool in sorted(r.pools.items())},
                    "mgids": [
                        {sw: m for (sw, t), m in sorted(r.mgids.items()) if t == tree}
                        for tree in range(len(r.trees))
                    ],
                    "epochs": r.epochs,
                    "last_run": r.last_run,
                }
                for _, r in sorted(jobs.jobs.items())
            ],
            "epochs": jobs.epochs,
        },
        indent=2,
    )
    try:
        path.write_text(text + "\n")
    except OSError as exc:
        raise ControllerError(
            f"{path}: cannot save the job state ({exc.strerror or exc}); the switches have "
            "the change, but later commands will not know it: use --state to choose a "
            "writable file"
        ) from None


@contextmanager
def state_locked(path: Path) -> Iterator[None]:
    """Hold the job state file (if there is one) against other job commands: two of them at
    once read it before either writes, and `job new-run` would issue one run id twice."""
    if not path.exists():
        yield
        return
    with path.open("rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield
