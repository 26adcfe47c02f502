"""The job state file: what the job commands keep between runs, so that a later command knows
the slot pools, multicast groups and epochs the switches hold, the last epoch issued per switch
and the run ids issued to each job's workers. By default it lies next to the topology
(`<topology>.jobs.json`). It is read with the same checks as a topology file (size, depth,
every field's type and range), then checked as a whole (`check_state`: no job listed twice,
no two jobs' slot pools overlapping or sharing a multicast group on a switch, no job holding
the epoch the next installation would get), and held with a lock while a job command runs.
A file that fails says which file, what is wrong and what to do, in one line."""

from __future__ import annotations

import dataclasses
import fcntl
import itertools
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inaemu.common.args import MAX_TREES, MAX_WORKERS
from inaemu.common.wire import MAX_RUN, SLOT_INDEX_MASK
from inaemu.controller.jobs import (
    MAX_EPOCH,
    MAX_MGID,
    JobManager,
    JobSpec,
    Placement,
    next_epoch,
)
from inaemu.controller.p4rt import ControllerError
from inaemu.p4.constants import INA_SLOTS
from inaemu.topology.model import (
    Fields,
    Integer,
    Items,
    Named,
    Record,
    Text,
    TopologyError,
    read_json,
)


def default_state_path(topology: Path) -> Path:
    """Where the job state of `topology` lies unless told otherwise."""
    return Path(str(topology) + ".jobs.json")


_EPOCHS = Named("switch", Integer(0, MAX_EPOCH))  # the last issued per switch (0: none yet)
_JOB_EPOCHS = Named("switch", Integer(1, MAX_EPOCH))  # an installation's (next_epoch: 1..)
_POOLS = Named(
    "switch",
    Fields(
        (("base", Integer(0, INA_SLOTS - 1)), ("size", Integer(1, INA_SLOTS))),
        "a [base, size] pool",
    ),
)
_MGIDS = Items(Named("switch", Integer(1, MAX_MGID)), "tree #{}".format, lo=1, hi=MAX_TREES)
_STATE_SCHEMA = Record(
    {
        "jobs": Items(
            Record(
                {
                    "job_id": Integer(0, 2**16 - 1),
                    "workers": Items(Text(), "worker #{}".format, lo=1, hi=MAX_WORKERS),
                    "pool_size": Integer(1, SLOT_INDEX_MASK),
                    "n_trees": Integer(1, MAX_TREES),
                    "roots": Items(Text(), "root #{}".format, hi=MAX_TREES),
                    "pools": _POOLS,
                    "mgids": _MGIDS,
                    "epochs": _JOB_EPOCHS,
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


def check_state(raw: dict[str, Any], path: Path, *, removing: int | None = None) -> None:
    """`ControllerError` naming `path`, what is wrong and what to do, unless the jobs of a
    job state that passed `_STATE_SCHEMA` can all be what the switches hold: each job listed
    once, each pool `pool_size` slots within the switch's, no two jobs' pools overlapping on
    a switch (they would sum into each other's slots), no two sharing a multicast group on a
    switch, and no job holding the epoch a new installation on a switch would be given next
    (the last one issued rewound).

    `removing`: the job `inaemu job remove` is about to remove; its being listed more than
    once, or its pools overlapping another job's, is what removing it mends."""
    jobs = raw["jobs"]
    counts = Counter(j["job_id"] for j in jobs)
    for job_id, n in sorted(counts.items()):
        if n > 1 and job_id != removing:
            raise ControllerError(
                f"{path}: job {job_id} is listed {n} times (edited by hand?); `inaemu job "
                f"remove --job {job_id}` removes every entry of it, from the switches and the file"
            )
    pools: dict[str, list[tuple[int, int, int]]] = {}
    groups: dict[tuple[str, int], int] = {}
    for j in jobs:
        job_id = j["job_id"]
        fix = f"restore the file, or remove the job (`inaemu job remove --job {job_id}`)"
        for sw, (base, size) in sorted(j["pools"].items()):
            if size != j["pool_size"] or base + size > INA_SLOTS:
                raise ControllerError(
                    f"{path}: job {job_id}'s pool [{base}, {base + size}) on switch {sw!r} is "
                    f"not its pool_size {j['pool_size']} slots within the switch's {INA_SLOTS}; "
                    + fix
                )
            if job_id != removing:  # its overlaps are what removing it mends
                pools.setdefault(sw, []).append((base, size, job_id))
        for tree in j["mgids"]:
            for sw, mgid in sorted(tree.items()):
                other = groups.setdefault((sw, mgid), job_id)
                if other != job_id:
                    raise ControllerError(
                        f"{path}: jobs {other} and {job_id} both use multicast group {mgid} on "
                        f"switch {sw!r}; restore the file (removing either job would delete "
                        "the other's group)"
                    )
        for sw, epoch in sorted(j["epochs"].items()):
            last = raw["epochs"].get(sw, 0)
            if epoch == next_epoch(last):
                raise ControllerError(
                    f"{path}: job {job_id} holds epoch {epoch} on switch {sw!r}, the one the "
                    f"next installation there would be given (the last issued is {last}): "
                    f'restore the file (or set "epochs" of {sw!r} to the highest epoch its '
                    "jobs hold)"
                )
    for sw, held in sorted(pools.items()):  # by base: if any two overlap, two neighbours do
        for (b1, n1, j1), (b2, n2, j2) in itertools.pairwise(sorted(held)):
            if b2 < b1 + n1:
                raise ControllerError(
                    f"{path}: the slot pools of jobs {j1} and {j2} overlap on switch {sw!r} "
                    f"([{b1}, {b1 + n1}) and [{b2}, {b2 + n2})): they would sum into each "
                    f"other's slots; restore the file, or remove one (`inaemu job remove "
                    f"--job {j2}`)"
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
    # `load_state(removing=N)`: every entry of job N, which the file's other jobs leave out
    removing: list[tuple[JobSpec, Placement]] = dataclasses.field(default_factory=list)


def load_state(path: Path, *, removing: int | None = None) -> JobState:
    """The job state in `path` (none yet: no jobs); `ControllerError` if it cannot be used.
    With `removing` (a job `inaemu job remove` removes), that job's entries, however many,
    are in `JobState.removing` and not in `jobs` (`check_state`)."""
    if not path.exists():
        return JobState([], {}, {})
    try:
        raw = read_json(path, "job state file")
        _STATE_SCHEMA(raw, (str(path),))
    except TopologyError as exc:
        raise ControllerError(f"{exc}; delete it if the switches were restarted") from None
    check_state(raw, path, removing=removing)
    entries = [
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
    ]
    return JobState(
        [e for e in entries if e[0].job_id != removing],
        dict(raw["epochs"]),
        {j["job_id"]: j.get("last_run", 0) for j in raw["jobs"] if j["job_id"] != removing},
        [e for e in entries if e[0].job_id == removing],
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
