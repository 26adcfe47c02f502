"""The controller over P4Runtime (finsy): bmv2's simple_switch_grpc and the softswitch alike.

    async with Controller(topology) as ctl:          # connects, becomes primary, checks the P4
        await ctl.install_routes()
        await ctl.add_job(JobSpec(1, ("h1", "h2", "h3", "h4"), pool_size=64))
        print((await ctl.read_stats()).render())
        await ctl.remove_job(1)

A controller changes a switch's pipeline only when asked (`push_pipeline=True`, what
`inaemu pipeline push` does): otherwise it checks that every switch already runs ina.p4 (the
same P4Info) and stops with what to run if one has no pipeline or another program.

Every change is planned first (`controller.jobs`) and applied switch by switch; if a switch
refuses any update, everything this change already wrote is deleted again, so the switches
are left as they were, and `ControllerError` says in one line which switch refused what and
why. `remove_job(..., gone_ok=True)` (what `inaemu job remove` does) takes an entry a switch
no longer holds, e.g. after a restart, as removed already.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import finsy as fy
from finsy.p4schema import P4ConfigResponseType

from inaemu.controller.jobs import JobManager, JobRecord, JobSpec, route_plans
from inaemu.controller.stats import StatsReport, SwitchCounters
from inaemu.p4.constants import P4INFO_PATH
from inaemu.p4.info import P4Info, load_p4info, p4info_diff
from inaemu.p4.plan import (
    CHILD_TABLE,
    JOB_TABLE,
    LOSS_TABLE,
    SwitchPlan,
    TableWrite,
    loss_threshold,
)
from inaemu.topology.addresses import ip_str
from inaemu.topology.model import Switch, Topology

CONNECT_TIMEOUT = 10.0
SAME_ID_WAIT = 5.0  # seconds to wait for an earlier connection with our election id to end


class ControllerError(RuntimeError):
    """A switch refused a change (the change was rolled back) or cannot be reached."""


@dataclass
class PipelineFiles:
    """What SetForwardingPipelineConfig sends: the P4Info, and the device config (bmv2's JSON;
    the softswitch accepts any bytes)."""

    p4info: Path = P4INFO_PATH
    device_config: Path | bytes = b"inaemu-softswitch"


class Controller:
    def __init__(
        self,
        topology: Topology,
        *,
        pipeline: PipelineFiles | None = None,
        election_id: int = 10,
        push_pipeline: bool = False,
        force_push: bool = False,
        epochs: Mapping[str, int] | None = None,
    ) -> None:
        self.topology = topology.validate()
        # epochs: the last epoch per switch of an earlier controller (its `jobs.epochs`), so
        # that installations after a restart still get new ones (docs/protocol.md, section 5)
        self.jobs = JobManager(topology, epochs=epochs)
        self.files = pipeline or PipelineFiles()
        self.election_id = election_id
        self.push_pipeline = push_pipeline
        self.force_push = force_push  # push even when the switch's cookie says it has this one
        self.p4info: P4Info = load_p4info(self.files.p4info)
        self.switches: dict[str, fy.Switch] = {}
        self.routes_installed = False

    # ------------------------------------------------------------------ connection

    async def __aenter__(self) -> Controller:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        configs: dict[str, Path | bytes] = {}
        for sw in self.topology.switches.values():  # refuse a bad topology before any I/O
            if not sw.grpc:
                raise ControllerError(
                    f'switch {sw.name!r} has no "grpc" address in the '
                    'topology; add e.g. "grpc": "127.0.0.1:9559"'
                )
            configs[sw.name] = self._device_config(sw)
        for sw in self.topology.switches.values():
            switch = await self._connect_primary(sw, configs[sw.name])
            self.switches[sw.name] = switch
            if not self.push_pipeline:
                try:
                    await self._verify_pipeline(sw, switch)
                except BaseException:
                    await self.close()
                    raise

    async def _verify_pipeline(self, sw: Switch, switch: fy.Switch) -> None:
        """The switch must run the P4Info this controller writes against; never replace it."""
        push = "inaemu pipeline push -t TOPOLOGY"
        try:
            # finsy has no public call for this; its own pipeline check only logs a warning
            reply = await switch._get_pipeline_config_request(
                response_type=P4ConfigResponseType.P4INFO_AND_COOKIE
            )
        except fy.P4ClientError as exc:
            if not exc.is_pipeline_missing:
                raise ControllerError(
                    f"switch {sw.name!r} at {sw.grpc}: cannot read its pipeline: {_reason(exc)}"
                ) from None
            reply = None
        if reply is None or not reply.config.HasField("p4info"):
            raise ControllerError(
                f"switch {sw.name!r} at {sw.grpc} has no forwarding pipeline; run `{push}` "
                '(bmv2 needs its JSON: "program" in the topology or --device-config)'
            )
        diffs = [
            d.replace("built", "the switch's").replace("committed", "ours")
            for d in p4info_diff(reply.config.p4info, self.p4info.message)
        ]
        if diffs:
            raise ControllerError(
                f"switch {sw.name!r} at {sw.grpc} runs another P4 program than "
                f"{self.files.p4info.name} ({len(diffs)} differences, e.g. {diffs[0][:120]}); "
                f"nothing was changed: run `{push}` to replace it"
            )

    async def _connect_primary(self, sw: Switch, config: Path | bytes) -> fy.Switch:
        """A connection to `sw` as its primary controller. A primary with our own election id
        is an earlier connection of this controller that the switch has not seen end yet
        (commands run back to back): wait for it, at most SAME_ID_WAIT seconds."""
        deadline = time.monotonic() + SAME_ID_WAIT
        while True:
            switch = await self._open(sw, config)
            if switch.is_primary:
                return switch
            primary = switch.primary_id
            try:
                await switch.__aexit__(None, None, None)
            except Exception:
                pass
            if primary != self.election_id or time.monotonic() > deadline:
                await self.close()
                held = (
                    f"a connection with this controller's election id ({self.election_id}) "
                    "has not ended"
                    if primary == self.election_id
                    else f"another controller is primary (election id {primary})"
                )
                raise ControllerError(f"switch {sw.name!r}: {held}; this controller may not write")
            await asyncio.sleep(0.2)

    async def _open(self, sw: Switch, config: Path | bytes) -> fy.Switch:
        options = fy.SwitchOptions(
            p4info=self.files.p4info,
            p4blob=config if self.push_pipeline else None,
            p4force=self.force_push,
            device_id=sw.device_id,
            initial_election_id=self.election_id,
        )
        switch = fy.Switch(sw.name, sw.grpc, options)
        failures = _FinsyFailures()
        logging.getLogger("finsy").addHandler(failures)
        try:
            await asyncio.wait_for(switch.__aenter__(), CONNECT_TIMEOUT)
        except (TimeoutError, OSError, fy.P4ClientError, asyncio.CancelledError) as exc:
            task = asyncio.current_task()
            if isinstance(exc, asyncio.CancelledError) and task and task.cancelling():
                raise  # we are being cancelled ourselves
            await self.close()
            # finsy reports a failed pipeline push only in its log: recover the reason
            cause = failures.errors[-1] if failures.errors else exc
            hint = _connect_hint(cause) if failures.errors else "is the switch running?"
            raise ControllerError(
                f"cannot program switch {sw.name!r} at {sw.grpc} (device {sw.device_id}): "
                f"{_reason(cause)}; {hint}"
            ) from None
        finally:
            logging.getLogger("finsy").removeHandler(failures)
        return switch

    def _device_config(self, sw: Switch) -> Path | bytes:
        """The switch's own `program` (bmv2 JSON) from the topology, else the default."""
        if not sw.program:
            return self.files.device_config
        path = Path(sw.program)
        if not path.is_file():
            raise ControllerError(
                f"switch {sw.name!r}: program {sw.program!r} not found "
                '(build it with `make -C p4`, or drop "program" for a softswitch)'
            )
        return path

    async def close(self) -> None:
        for switch in self.switches.values():
            try:
                await switch.__aexit__(None, None, None)
            except Exception:
                pass
        self.switches.clear()

    # ------------------------------------------------------------------ entities

    def _entities(self, plan: SwitchPlan) -> list[Any]:
        out: list[Any] = []
        for w in plan.tables:
            out.append(self._table_entry(w))
        for g in plan.groups:
            out.append(fy.P4MulticastGroupEntry(g.mgid, replicas=list(g.replicas)))
        return out

    def _table_entry(self, w: TableWrite) -> fy.P4TableEntry:
        table = self.p4info.table(w.table)
        match: dict[str, Any] = {}
        values = list(w.key)
        for f in table.fields:
            if f.kind == "LPM":
                value, plen = values.pop(0), values.pop(0)
                match[f.name] = f"{ip_str(value)}/{plen}" if f.bitwidth == 32 else (value, plen)
            else:
                match[f.name] = values.pop(0)
        action = self.p4info.action(w.action)
        params = {p.name: v for p, v in zip(action.params, w.params, strict=True)}
        return fy.P4TableEntry(
            table.name, match=fy.P4TableMatch(match), action=fy.P4TableAction(action.name, **params)
        )

    async def apply(
        self, plans: dict[str, SwitchPlan], *, delete: bool = False, gone_ok: bool = False
    ) -> list[str]:
        """Write (or delete) plans on their switches; on any refusal undo what was done. With
        `delete` and `gone_ok`, an entry a switch does not hold (NOT_FOUND) counts as deleted;
        returns the switches that lacked any."""
        done: list[tuple[str, list[Any]]] = []
        lacking: list[str] = []
        for name in sorted(plans):
            entities = self._entities(plans[name])
            if delete:
                entities.reverse()  # groups and children before the job entry
            if not entities:
                continue
            switch = self._switch(name)
            if delete and gone_ok:
                held = await self._delete_held(name, entities, done)
                if len(held) < len(entities):
                    lacking.append(name)
                done.append((name, held))
                continue
            try:
                if delete:
                    await switch.delete(entities)
                else:
                    await switch.insert(entities)
            except fy.P4ClientError as exc:
                failed = set(exc.details)
                ok = [e for i, e in enumerate(entities) if i not in failed] if failed else []
                await self._undo([*done, (name, ok)], delete)
                raise ControllerError(_describe(name, exc, entities)) from None
            done.append((name, entities))
        return lacking

    async def _delete_held(
        self, name: str, entities: list[Any], done: list[tuple[str, list[Any]]]
    ) -> list[Any]:
        """Delete each of `entities` that switch `name` holds, one per request (a batch with
        a missing entry is refused whole by some switches, not by others); those it holds.
        Any other refusal undoes `done` and this switch's deletions: ControllerError."""
        switch = self._switch(name)
        held: list[Any] = []
        for entity in entities:
            try:
                await switch.delete([entity])
            except fy.P4ClientError as exc:
                if exc.is_not_found_only or exc.code == fy.GRPCStatusCode.NOT_FOUND:
                    continue
                await self._undo([*done, (name, held)], True)
                raise ControllerError(_describe(name, exc, [entity])) from None
            held.append(entity)
        return held

    async def _undo(self, done: list[tuple[str, list[Any]]], was_delete: bool) -> None:
        for name, entities in reversed(done):
            if not entities:
                continue
            switch = self._switch(name)
            if was_delete:
                await switch.insert(list(reversed(entities)), warn_only=True)
            else:
                await switch.delete(entities, warn_only=True)

    def _switch(self, name: str) -> fy.Switch:
        try:
            return self.switches[name]
        except KeyError:
            raise ControllerError(f"not connected to switch {name!r}") from None

    # ------------------------------------------------------------------ jobs, routes, loss

    async def add_job(self, spec: JobSpec) -> JobRecord:
        record = self.jobs.plan_add(spec)  # JobError: refused before anything is written
        for sw in sorted(record.pools):
            await self._check_slots_free(sw, spec.job_id, record.pools[sw])
        await self.apply(record.plans)
        self.jobs.commit_add(record)
        return record

    async def held_pools(self, switch: str) -> dict[tuple[int, int], tuple[int, int]]:
        """(job, tree) -> (base, size) of the slot pool of every ina_job entry `switch` holds."""
        held: dict[tuple[int, int], tuple[int, int]] = {}
        try:
            async for row in self._switch(switch).read(  # type: ignore[attr-defined]
                fy.P4TableEntry(JOB_TABLE)
            ):
                if row.match is None or row.action is None or row.is_default_action:
                    continue
                m, args = dict(row.match), dict(row.action.args)
                key = (int(m["job_id"]), int(m["tree_id"]))
                held[key] = (int(args["base"]), int(args["pool_size"]))
        except fy.P4ClientError as exc:
            raise ControllerError(
                f"switch {switch!r} refused to read its jobs: {_reason(exc)}"
            ) from None
        return held

    async def _check_slots_free(self, switch: str, job_id: int, pool: tuple[int, int]) -> None:
        """ControllerError if `switch` holds a job whose slots overlap `pool`, which the plan
        took to be free: the job state does not say what the switch holds (edited by hand, or
        another controller's), and the two jobs would sum into each other's slots."""
        base, size = pool
        for (other, _), (b, n) in sorted((await self.held_pools(switch)).items()):
            if b < base + size and base < b + n:
                saved = self.jobs.jobs.get(other)
                if saved is not None and switch in saved.pools:
                    b0, n0 = saved.pools[switch]
                    fix = (
                        f"the job state places it at [{b0}, {b0 + n0}): restore the file, or "
                        f"remove job {other} (`inaemu job remove --job {other}`) first"
                    )
                else:
                    fix = (
                        "the job state does not list it there (another controller's, or the "
                        "file was replaced): restore the file"
                    )
                raise ControllerError(
                    f"switch {switch!r} holds job {other} in slots [{b}, {b + n}), which job "
                    f"{job_id} would get: {fix}"
                )

    async def remove_job(self, job_id: int, *, gone_ok: bool = False) -> list[str]:
        """Delete the job from its switches and forget it. With `gone_ok`, what a switch no
        longer holds (it restarted) counts as deleted; returns the switches that lacked any of
        it (else a missing entry is refused: NOT_FOUND, nothing changed)."""
        plans = self.jobs.plan_remove(job_id)
        lacking = await self.apply(plans, delete=True, gone_ok=gone_ok)
        self.jobs.commit_remove(job_id)
        return lacking

    async def install_routes(self) -> None:
        if not self.routes_installed:
            await self.apply(route_plans(self.topology))
            self.routes_installed = True

    async def set_loss(self, switch: str, ports: Iterable[int], probability: float) -> None:
        """Drop packets arriving on `ports` with `probability` (0 removes the entries)."""
        threshold = loss_threshold(probability)
        ports = list(ports)
        sw = self._switch(switch)
        entries = [
            self._table_entry(TableWrite(LOSS_TABLE, (p,), "set_loss", (threshold,))) for p in ports
        ]
        try:
            await sw.delete(entries, strict=False)
            if probability > 0:
                await sw.insert(entries)
        except fy.P4ClientError as exc:
            raise ControllerError(
                f"switch {switch!r} refused the loss entries for ports "
                f"{', '.join(map(str, ports))}: {_reason(exc)}"
            ) from None

    # ------------------------------------------------------------------ statistics

    async def read_counters(self, switch: str) -> SwitchCounters:
        sw = self._switch(switch)
        counters = SwitchCounters(switch)
        try:
            async for entry in sw.read(fy.P4CounterEntry()):  # type: ignore[attr-defined]
                if entry.data is not None and entry.index is not None:
                    counters.indexed[(entry.counter_id, entry.index)] = (
                        entry.data.packet_count,
                        entry.data.byte_count,
                    )
            request = fy.P4TableEntry(CHILD_TABLE, counter_data=fy.P4CounterData())
            async for row in sw.read(request):  # type: ignore[attr-defined]
                if row.counter_data is None or row.match is None:
                    continue
                m = dict(row.match)
                key = (
                    int(m["job_id"]),
                    int(m["tree_id"]),
                    int(m["ingress_port"]),
                    int(m["udp_port"]),
                )
                counters.children[key] = (
                    row.counter_data.packet_count,
                    row.counter_data.byte_count,
                )
        except fy.P4ClientError as exc:
            raise ControllerError(
                f"switch {switch!r} refused to read counters: {_reason(exc)}"
            ) from None
        return counters

    async def read_stats(self) -> StatsReport:
        report = StatsReport(self.topology, dict(self.jobs.jobs))
        for name in sorted(self.switches):
            report.switches[name] = await self.read_counters(name)
        return report


class _FinsyFailures(logging.Handler):
    """Collects the exceptions finsy logs when a switch task fails."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.errors: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.errors.append(record.exc_info[1])


def _connect_hint(cause: BaseException) -> str:
    """What a failure finsy logged while connecting means, by the request that failed."""
    operation = getattr(cause, "_operation", "")  # finsy: "send"/"receive" on the stream
    if not isinstance(cause, fy.P4ClientError):
        return "the connection to the switch failed"
    if operation.startswith("SetForwardingPipelineConfig"):
        return "the switch refused the pipeline"
    if operation in ("send", "receive"):
        if cause.code == fy.GRPCStatusCode.RESOURCE_EXHAUSTED:
            return "the switch has no StreamChannel slot for this controller"
        return "the switch ended the controller's StreamChannel"
    return f"the switch refused {operation or 'a request'}"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer in {CONNECT_TIMEOUT:.0f}s"
    if isinstance(exc, fy.P4ClientError):
        if exc.details:  # a batch: the first update's own reason says more
            _, err = min(exc.details.items())
            return f"{err.canonical_code.name}: {err.message}"
        return f"{exc.code.name}: {exc.message}"
    return str(exc) or type(exc).__name__


def _describe(switch: str, exc: fy.P4ClientError, entities: list[Any]) -> str:
    """One line: how many updates the switch refused, the first one's reason (one that
    failed, not one aborted because another did)."""
    if not exc.details:
        return f"switch {switch!r} refused the change ({exc.code.name}: {exc.message}); rolled back"
    errors = sorted(exc.details.items())
    index, err = next(
        ((i, e) for i, e in errors if e.canonical_code != fy.GRPCStatusCode.ABORTED), errors[0]
    )
    return (
        f"switch {switch!r} refused {len(exc.details)} of {len(entities)} updates, e.g. "
        f"{_entity_name(entities[index])}: {err.canonical_code.name}: {err.message}; "
        "everything this change wrote was rolled back"
    )


def _entity_name(entity: Any) -> str:
    """A P4Runtime entity in a few words: `table T entry {key}`, `multicast group G`."""
    if isinstance(entity, fy.P4TableEntry):
        match = dict(entity.match) if entity.match is not None else {}
        return f"table {entity.table_id} entry {match}"
    if isinstance(entity, fy.P4MulticastGroupEntry):
        return f"multicast group {entity.multicast_group_id}"
    return type(entity).__name__
