"""The worker side of `inaemu demo`: what each worker process runs, and the result check.

Kept apart from `demo.py` so that a worker process (started with `spawn`) imports
only the host library and numpy, not the controller's gRPC stack: with sixteen workers on a
laptop that is seconds of start-up saved.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event as MpEvent
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from inaemu.cli.demo_options import DemoOptions as DemoOptions
from inaemu.common.lifeline import die_with_parent
from inaemu.hostlib.worker import digest, expected_result, worker_input, worker_inputs
from inaemu.runs.network import JOB_ID as JOB_ID  # the demo's job

if TYPE_CHECKING:
    from inaemu.hostlib.client import InaClient


@dataclass(frozen=True)
class Seat:
    """Where a worker sits and how it runs: its switch and port, the job's tree count, and
    whether it checks its own result (else the parent checks every worker's at once)."""

    switch: str = "s1"
    port: int = 1
    n_trees: int = 1
    check_here: bool = True
    host: tuple[str, str] | None = None  # (mac, ip) the worker sends from; None: by port
    agg: tuple[str, str] | None = None  # (mac, ip) of the switch's aggregation address


@dataclass
class WorkerResult:
    rank: int
    seconds: float
    digest: str
    exact_vs_reference: bool
    max_error: float
    bound: float
    within_bound: bool
    bytes_sent: int
    packets_sent: int
    retransmissions: int
    duplicate_results: int
    values: npt.NDArray[Any] | None = None  # the result, when the parent checks it
    cpu_seconds: float = 0.0  # the worker process's CPU time during its allreduce
    started: float = 0.0  # wall clock (Unix seconds) when its allreduce began


@dataclass
class Reference:
    """What every worker's result is checked against: the reference switch's result, the
    float64 sum, and the codec's error bound per element (None: lossless codecs)."""

    result: npt.NDArray[Any]
    truth: npt.NDArray[np.float64]
    bound: npt.NDArray[np.float64] | None


def reference(opts: DemoOptions) -> Reference:
    from inaemu.hostlib.codecs.fixedpoint import DEFAULT_BLOCK_SIZE, block_exponents, error_bound

    inputs = worker_inputs(opts.seed, opts.workers, opts.size, opts.density, opts.codec)
    result = expected_result(inputs, opts.codec)
    truth = np.sum(np.stack(inputs).astype(np.float64), axis=0)
    bound = None
    if opts.codec == "fixedpoint":
        exps = np.max([block_exponents(x, DEFAULT_BLOCK_SIZE) for x in inputs], axis=0)
        bound = np.asarray(
            error_bound(exps, opts.workers, opts.size, DEFAULT_BLOCK_SIZE), dtype=np.float64
        )
    return Reference(np.asarray(result), truth, bound)


def check(ref: Reference, result: npt.NDArray[Any]) -> tuple[bool, float, float, bool]:
    """(bit-exact vs the reference switch, max |error| vs float64 sum, bound, within bound)."""
    exact = bool(np.array_equal(ref.result, result))
    err = np.abs(result.astype(np.float64) - ref.truth)
    max_err = float(err.max()) if err.size else 0.0
    if ref.bound is not None:
        bound = ref.bound + np.spacing(np.abs(result)).astype(np.float64) / 2  # output rounding
        return exact, max_err, float(bound.max()), bool((err <= bound).all())
    # lossless codecs: the decoded sum is exactly the sum of the fixed-point inputs, so the
    # bound is the reference's own error (the quantization), met when bit-exact
    ref_err = float(np.abs(ref.result.astype(np.float64) - ref.truth).max()) if err.size else 0.0
    return exact, max_err, ref_err, exact


def verify(opts: DemoOptions, result: npt.NDArray[Any]) -> tuple[bool, float, float, bool]:
    return check(reference(opts), result)


def ina_client(
    opts: DemoOptions,
    seat: Seat,
    rank: int,
    on_progress: Callable[[int], None] | None = None,
) -> InaClient:
    """The INA client of the worker `rank` at `seat`, on its loopback wire in `opts.wire_dir`."""
    from inaemu.common.wire import Endpoint
    from inaemu.hostlib.client import InaClient
    from inaemu.hostlib.transport import LoopbackWireTransport

    transport = LoopbackWireTransport(
        seat.port,
        str(opts.wire_dir),
        switch_name=seat.switch,
        host=Endpoint(*seat.host) if seat.host else None,
        switch=Endpoint(*seat.agg) if seat.agg else None,
    )
    return InaClient(
        transport,
        job_id=JOB_ID,
        window=opts.window,
        n_workers=opts.workers,
        rank=rank,
        n_trees=seat.n_trees,
        run=opts.run,  # the parent's, the same for every worker
        give_up_after=opts.timeout,
        on_progress=on_progress,
    )


def end_with_parent() -> None:
    """A worker process (started by multiprocessing) ends when the process that started it
    does."""
    parent = mp.parent_process()
    if parent is not None and parent.pid is not None:
        die_with_parent(parent.pid)


def run_worker(
    rank: int,
    opts: DemoOptions,
    go: MpEvent,
    done: Synchronized[int],
    results: Queue[WorkerResult | str],
    ready: Synchronized[int] | None = None,
    seat: Seat | None = None,
) -> None:
    """One worker process: attach to its switch port, wait for `go`, all-reduce its input,
    report (checked here, or with the result for the parent to check). It ends with its
    parent (`die_with_parent`), even one killed with SIGKILL."""
    end_with_parent()
    from inaemu.hostlib.client import InaError, warm_up
    from inaemu.hostlib.codecs import make_codec

    seat = seat or Seat(port=rank + 1)
    try:
        x = worker_input(opts.seed, rank, opts.size, opts.density, opts.codec)

        def progress(n: int) -> None:
            with done.get_lock():
                done.value += n

        client = ina_client(opts, seat, rank, progress)
        codec = make_codec(opts.codec)
        warm_up(codec, x.dtype)  # compiled kernels loaded before the measured allreduce
        if ready is not None:
            with ready.get_lock():
                ready.value += 1
        go.wait()
        wall, start, cpu = time.time(), time.perf_counter(), time.process_time()
        out = np.asarray(client.allreduce(x, codec))
        seconds = time.perf_counter() - start
        cpu = time.process_time() - cpu
        client.transport.close()
        if seat.check_here:
            exact, max_err, bound, ok = verify(opts, out)
        else:
            exact, max_err, bound, ok = False, 0.0, 0.0, False
        st = client.stats
        results.put(
            WorkerResult(
                rank,
                seconds,
                digest(out),
                exact,
                max_err,
                bound,
                ok,
                st.bytes_sent,
                st.packets_sent,
                st.retransmissions,
                st.duplicate_results,
                None if seat.check_here else out,
                cpu,
                wall,
            )
        )
    except KeyboardInterrupt:
        pass
    except InaError as exc:
        results.put(f"worker {rank}: {exc}")
    except Exception as exc:  # reported by the parent as one clear line, not a traceback
        results.put(f"worker {rank} failed: {type(exc).__name__}: {exc}")
