"""The worker side of the comparison (`compare.py`): one process per host that
runs every algorithm in turn on its loopback wire, as the parent tells it.

For each `Task` the worker attaches (an INA client, or a `WirePeerChannel` for a host
collective's schedule), waits at the parent's barrier so that every worker is attached before
the first frame, all-reduces its input (`worker_input`, the same for every algorithm), detaches
(a channel first delivers what it queued and answers late retransmissions) and reports the
result with its wall-clock start and end. Like `demo_worker`, it imports only the host
library, the schedules and numpy.
"""

from __future__ import annotations

import contextlib
import queue
import time
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.cli.demo_worker import DemoOptions, Seat, end_with_parent, ina_client
from inaemu.hostlib.worker import digest, worker_input

ATTACH_TIMEOUT = 60.0  # seconds the workers have to attach before an algorithm starts
IDLE_TIMEOUT = 600.0  # a worker whose parent sends nothing for this long exits


@dataclass(frozen=True)
class Task:
    algo: str  # "ina", or the schedule's algorithm
    run: int  # run id: INA's, and the channel's and executor's
    schedule: dict[str, Any] | None = None  # Schedule.to_json() of a host collective
    peers: tuple[tuple[str, str], ...] = ()  # (mac, ip) of each schedule rank
    size: int = 0  # elements per worker; 0: the options' size


@dataclass
class AlgoResult:
    worker: int
    algo: str
    start: float  # time.time() when the allreduce began
    end: float
    digest: str
    values: npt.NDArray[Any] | None
    retransmissions: int
    frames_sent: int
    message_bytes: int  # what the algorithm sent: INA payload frames, or schedule messages


def task_rank(task: Task, seat: Seat) -> int:
    """The worker's rank in a host collective's schedule: where its (mac, ip) stands in the
    task's peers, which follow the schedule's rank order."""
    assert seat.host is not None
    return list(task.peers).index(seat.host)


def serve(
    worker: int,
    opts: DemoOptions,
    seat: Seat,
    tasks: Queue[Task | None],
    results: Queue[AlgoResult | str],
    go: Barrier,
) -> None:
    """Run tasks until the parent sends None (or ends: `end_with_parent`); a failure is one
    line on `results`."""
    end_with_parent()
    inputs: dict[int, npt.NDArray[Any]] = {}  # by size: the same input for every algorithm
    try:
        while True:
            try:
                task = tasks.get(timeout=IDLE_TIMEOUT)
            except queue.Empty:
                return
            if task is None:
                return
            size = task.size or opts.size
            if size not in inputs:
                inputs.clear()  # sizes come in turn: keep one array
                inputs[size] = worker_input(opts.seed, worker, size, opts.density, opts.codec)
            try:
                results.put(_run(worker, opts, seat, task, inputs[size], go))
            except Exception as exc:  # one clear line for the parent, not a traceback
                go.abort()
                results.put(f"worker {worker} ({task.algo}): {type(exc).__name__}: {exc}")
    except KeyboardInterrupt:
        pass


def _run(
    worker: int,
    opts: DemoOptions,
    seat: Seat,
    task: Task,
    x: npt.NDArray[Any],
    go: Barrier,
) -> AlgoResult:
    from dataclasses import replace

    from inaemu.hostlib.client import warm_up
    from inaemu.hostlib.codecs import make_codec

    codec = make_codec(opts.codec)
    warm_up(codec, x.dtype)  # compiled kernels (client, codec) loaded before the clock starts
    if task.algo == "ina":
        client = ina_client(replace(opts, run=task.run), seat, worker)
        try:
            go.wait(ATTACH_TIMEOUT)
            start = time.time()
            out = np.asarray(client.allreduce(x, codec))
            end = time.time()
        finally:
            client.transport.close()
        st = client.stats
        return AlgoResult(
            worker,
            task.algo,
            start,
            end,
            digest(out),
            out,
            st.retransmissions,
            st.packets_sent,
            st.bytes_sent,
        )
    from inaemu.collectives.schedule import Schedule
    from inaemu.common.wire import Endpoint
    from inaemu.hostlib.collective.executor import ScheduleClient
    from inaemu.hostlib.collective.peers import PeerError
    from inaemu.hostlib.collective.wire_peers import on_host_wire

    assert task.schedule is not None and seat.host is not None
    sched = Schedule.from_json(task.schedule, source=f"{task.algo} schedule")
    rank = task_rank(task, seat)
    channel = on_host_wire(
        rank,
        [Endpoint(mac, ip) for mac, ip in task.peers],
        str(opts.wire_dir),
        seat.switch,
        seat.port,
        run=task.run,
        mtu=opts.mtu,
        give_up=opts.timeout,
    )
    try:
        sc = ScheduleClient(sched, rank, channel, timeout=opts.timeout, run=task.run)
        go.wait(ATTACH_TIMEOUT)
        start = time.time()
        out = np.asarray(sc.allreduce(x, codec))
        end = time.time()
    except BaseException:
        with contextlib.suppress(PeerError):  # the first failure is the one to report
            channel.close()
        raise
    channel.close()
    cs = channel.stats
    return AlgoResult(
        worker,
        task.algo,
        start,
        end,
        digest(out),
        out,
        cs.retransmissions,
        cs.frames_sent,
        sum(channel.bytes_sent()),
    )
