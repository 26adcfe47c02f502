"""Shared test helpers: a softswitch on loopback wires with a star job installed."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from inaemu.controller.star import Worker, star_job_plan
from inaemu.p4.constants import Event
from inaemu.p4.plan import LOSS_TABLE, SwitchPlan, TableWrite, loss_threshold
from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.plan import apply_to_pipeline
from inaemu.softswitch.switch import SoftSwitch

T = TypeVar("T")


def workers(n: int, first_port: int = 1) -> list[Worker]:
    return [
        Worker(p, f"02:00:00:00:00:{p:02x}", f"10.0.0.{p}")
        for p in range(first_port, first_port + n)
    ]


@contextmanager
def running_switch(
    ports: list[int], *, seed: int = 0, wire_dir: str | None = None
) -> Iterator[tuple[SoftSwitch, str]]:
    """A started softswitch with loopback wires on `ports`, in `wire_dir` or else in a new
    private wire dir (nothing another process can hold); yields (switch, wire dir)."""
    sw = SoftSwitch(wire_dir=wire_dir)
    sw.pipeline.seed = seed
    sw.add_loopback_wires(ports)
    sw.start()
    try:
        yield sw, sw.wire_dir
    finally:
        sw.stop()


def install_star(
    sw: SoftSwitch,
    job_id: int,
    ws: list[Worker],
    *,
    base: int = 0,
    pool: int = 16,
    mgid: int = 1,
    loss: float = 0.0,
) -> SwitchPlan:
    plan = star_job_plan(job_id, ws, base=base, pool_size=pool, mgid=mgid)
    if loss:
        for w in ws:
            plan.tables.append(
                TableWrite(LOSS_TABLE, (w.port,), "set_loss", (loss_threshold(loss),))
            )
    apply_to_pipeline(sw.pipeline, plan)
    return plan


def run_threads(fns: list[Callable[[], T]], timeout: float = 120.0) -> list[T]:
    """Run each fn in a thread; return results in order, re-raise the first error."""
    results: list[T | None] = [None] * len(fns)
    errors: list[BaseException] = []

    def wrap(i: int, fn: Callable[[], T]) -> None:
        try:
            results[i] = fn()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(i, f), daemon=True) for i, f in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    if errors:
        raise errors[0]
    if any(t.is_alive() for t in threads):
        raise TimeoutError(f"worker threads still running after {timeout}s")
    return [r for r in results if r is not None]


def accounted(pipe: Pipeline) -> tuple[int, int]:
    """(packets in, packets accounted for): every INA packet that enters a switch is counted
    exactly once, as a drop (by reason) or as one of the events that consume or answer it."""
    ev = pipe.ina_events.packets
    answered = (
        ev[Event.CONTRIBUTION] + ev[Event.RETX_REPLY] + ev[Event.RETX_UP] + ev[Event.PARENT_RESULT]
    )
    return sum(pipe.port_rx.packets), sum(pipe.ina_drops.packets) + answered
