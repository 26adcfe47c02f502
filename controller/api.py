"""The controller's operations on a network described by files, one function each: push or
check the pipeline, add, remove and list jobs, issue a job's next run id, install the routes,
inject loss, read the statistics. `inaemu`'s subcommands (`inaemu.cli.controller`) and the
Mininet scenario (`inaemu.mininet.scenario`) both call them.

Each operation reads the topology and the job state (`NetworkFiles`), refuses bad input
before it touches a switch, connects to every switch (`p4rt.Controller`), does its work,
saves the job state if it changed it and closes the connections: a call is one command,
synchronous, and leaves nothing open. The job operations hold the state file's lock
throughout, so that two at once cannot issue one run id twice. Only `push_pipeline` changes
a switch's pipeline; every other operation that connects checks that each switch runs
ina.p4 and stops with what to run if not.

Failures are exceptions whose message says what to fix (`FAILURES`, `explain`). With
`INAEMU_PARSE_ONLY=1` (`common/args.py`) an operation makes every check and raises
`ParseOnly` where it would first touch a switch or write the job state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import finsy as fy

from inaemu.common.args import checks_done
from inaemu.controller.jobs import JobError, JobRecord, JobSpec, Placement
from inaemu.controller.p4rt import Controller, ControllerError, PipelineFiles
from inaemu.controller.state import (
    JobState,
    default_state_path,
    load_state,
    save_state,
    state_locked,
)
from inaemu.controller.stats import StatsReport
from inaemu.p4.plan import loss_threshold
from inaemu.topology.model import Topology, TopologyError

T = TypeVar("T")

# what an operation raises for bad input or a switch that refuses; anything else is a bug
FAILURES = (TopologyError, JobError, ControllerError, ValueError, OSError, fy.P4ClientError)


def explain(exc: BaseException) -> str:
    """One line for a failure in `FAILURES`: the message, a file problem with the file's name,
    a switch's refusal with its status."""
    if isinstance(exc, fy.P4ClientError):
        return f"a switch refused a request ({exc.code.name}: {exc.message})"
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}"
    return str(exc)


@dataclass(frozen=True)
class NetworkFiles:
    """What an operation works from: the topology file, its job state file (default
    `<topology>.jobs.json`), and the bmv2 JSON pushed with the P4Info to every switch without
    its own "program" (none: the softswitch takes any)."""

    topology: Path
    state: Path | None = None
    device_config: Path | None = None

    @property
    def state_path(self) -> Path:
        return self.state if self.state is not None else default_state_path(self.topology)


def controller(
    files: NetworkFiles, *, push: bool = False, force: bool = False
) -> tuple[Controller, list[JobSpec]]:
    """The topology, the installed jobs and a controller that knows them, not connected:
    bad input is refused before any switch is touched. `push`: the controller installs
    ina.p4 when it connects (`force`: even on a switch that reports the same one)."""
    state = load_state(files.state_path)
    return _replayed(files, state, push=push, force=force), [spec for spec, _ in state.jobs]


def _replayed(
    files: NetworkFiles, state: JobState, *, push: bool = False, force: bool = False
) -> Controller:
    """A controller over the topology that knows the jobs of `state`, not connected."""
    topo = Topology.load(files.topology)
    path = files.state_path
    pipeline = PipelineFiles()
    if files.device_config is not None:
        config = files.device_config
        if not config.exists():
            raise ControllerError(
                f"--device-config {config}: no such file (build bmv2's JSON with "
                "`make -C p4`, or leave the option out for softswitches)"
            )
        if not config.is_file():
            raise ControllerError(f"--device-config {config}: is not a file")
        pipeline = PipelineFiles(device_config=config)
    ctl = Controller(topo, pipeline=pipeline, push_pipeline=push, force_push=push and force)
    for spec, placed in state.jobs:  # replay: the same plans, nothing written
        try:
            ctl.jobs.commit_add(ctl.jobs.plan_add(spec, placed=placed))
        except JobError as exc:
            raise ControllerError(
                f"{path}: job {spec.job_id} does not fit the topology ({exc}); "
                "delete the file if the switches were restarted"
            ) from None
    try:
        ctl.jobs.restore_epochs(state.epochs)
    except JobError as exc:
        raise ControllerError(f"{path}: {exc}; delete it if the switches were restarted") from None
    for job_id, last_run in state.last_runs.items():
        ctl.jobs.jobs[job_id].last_run = last_run
    return ctl


def connected(ctl: Controller, body: Callable[[Controller], Awaitable[T]]) -> T:
    """`body` run with `ctl` connected to every switch; the connections closed after it."""
    checks_done()

    async def run() -> T:
        await ctl.connect()
        try:
            return await body(ctl)
        finally:
            await ctl.close()

    return asyncio.run(run())


def _switches(ctl: Controller) -> Topology:
    async def nothing(_: Controller) -> None:
        return None

    connected(ctl, nothing)
    return ctl.topology


def push_pipeline(files: NetworkFiles, *, force: bool = False) -> Topology:
    """ina.p4 (its P4Info, and bmv2's JSON where a switch needs one) on every switch; the
    topology it was pushed to."""
    return _switches(controller(files, push=True, force=force)[0])


def check_pipeline(files: NetworkFiles) -> Topology:
    """Check that every switch runs ina.p4 (`ControllerError` saying what to run if not)."""
    return _switches(controller(files)[0])


def add_job(files: NetworkFiles, spec: JobSpec) -> JobRecord:
    """Install a job on every switch of its trees in one change (rolled back on a refusal)
    and keep it in the job state; the installed job (its trees, pools and groups)."""
    with state_locked(files.state_path):
        ctl, _ = controller(files)
        ctl.jobs.plan_add(spec)  # refused before connecting

        async def add(ctl: Controller) -> JobRecord:
            record = await ctl.add_job(spec)
            save_state(files.state_path, ctl.jobs)
            return record

        return connected(ctl, add)


def remove_job(files: NetworkFiles, job_id: int) -> list[str]:
    """Remove a job from the switches and the job state; the switches that had lost some or
    all of it (restarted): not an error, there is nothing to delete there. A job state edited
    by hand that lists the job more than once, or gives it slots of another job's, is mended
    here: every entry of it is removed, one after the other (`state.check_state`)."""
    path = files.state_path
    with state_locked(path):
        state = load_state(path, removing=job_id)
        ctl = _replayed(files, state)
        entries = state.removing
        checks_done()  # the job's being installed is the state's, not the command line's
        if not entries:
            ctl.jobs.plan_remove(job_id)  # JobError: not installed; before connecting

        def replay(spec: JobSpec, placed: Placement) -> None:
            try:
                ctl.jobs.commit_add(ctl.jobs.plan_add(spec, placed=placed, shared_slots=True))
                ctl.jobs.restore_epochs(state.epochs)  # the last issued, not this entry's
            except JobError as exc:
                raise ControllerError(
                    f"{path}: job {job_id} does not fit the topology ({exc}); restore the "
                    "file, or delete it if the switches were restarted"
                ) from None

        replay(*entries[0])  # refused before connecting

        async def remove(ctl: Controller) -> list[str]:
            lacking = await ctl.remove_job(job_id, gone_ok=True)
            for spec, placed in entries[1:]:  # what is left of it after the first: its
                replay(spec, placed)  # entries are gone already where they were the same
                await ctl.remove_job(job_id, gone_ok=True)
            save_state(path, ctl.jobs)
            return lacking

        return connected(ctl, remove)


def list_jobs(files: NetworkFiles) -> list[JobRecord]:
    """The installed jobs, from the job state alone (no switch is asked)."""
    with state_locked(files.state_path):
        ctl, specs = controller(files)
        checks_done()
        return [ctl.jobs.jobs[s.job_id] for s in specs]


def new_run(files: NetworkFiles, job_id: int) -> int:
    """A run id for the next run of a job's workers, never issued before for this
    installation of the job; from the job state alone (no switch is asked)."""
    with state_locked(files.state_path):
        ctl, _ = controller(files)
        checks_done()  # the job's being installed is the state's, not the command line's
        run = ctl.jobs.next_run(job_id)
        save_state(files.state_path, ctl.jobs)
        return run


def install_routes(files: NetworkFiles) -> Topology:
    """The /32 IPv4 route to every host on every switch (`jobs.route_plans`)."""

    async def install(ctl: Controller) -> Topology:
        await ctl.install_routes()
        return ctl.topology

    return connected(controller(files)[0], install)


def set_loss(files: NetworkFiles, switch: str, ports: Iterable[int], probability: float) -> None:
    """Inject loss with `probability` on `switch`'s ingress `ports` (0 removes it)."""
    ctl, _ = controller(files)
    if switch not in ctl.topology.switches:
        raise ControllerError(
            f"unknown switch {switch!r}; the topology has {', '.join(ctl.topology.switches)}"
        )
    loss_threshold(probability)  # ValueError: refused before connecting
    ports = list(ports)

    async def inject(ctl: Controller) -> None:
        await ctl.set_loss(switch, ports, probability)

    connected(ctl, inject)


def read_stats(files: NetworkFiles) -> StatsReport:
    """Every switch's counters: per job and port, per switch, per link each way."""

    async def read(ctl: Controller) -> StatsReport:
        return await ctl.read_stats()

    return connected(controller(files)[0], read)


def describe_trees(record: JobRecord) -> str:
    """What `job add` says about a job's trees: the roots, the most trees on one link, and
    what its workers pass to InaClient."""
    spec = record.spec
    most = record.max_trees_per_link
    if most:
        a, ap, b, bp = min(k for k, n in record.link_trees.items() if n == most)
        where = f" (e.g. {a}:{ap} -> {b}:{bp})"
    else:
        where = " (one switch: no links between switches)"
    return (
        f"job {spec.job_id}: {len(record.trees)} tree(s), roots "
        + ", ".join(f"{t}:{root}" for t, root in enumerate(record.roots))
        + f"; at most {most} tree(s) per link each way{where}\n"
        f"job {spec.job_id}: workers use InaClient(job_id={spec.job_id}, "
        f"window={spec.pool_size}, n_trees={len(record.trees)})"
    )
