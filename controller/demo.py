"""`inaemu demo`: an emulated allreduce on the embedded softswitch, no root needed.

1. starts a softswitch process (loopback wires in a private wire dir, P4Runtime on 127.0.0.1),
2. programs it over gRPC with the controller (a star job; loss injection if asked),
3. runs N worker processes that all-reduce a float32 array through it with a codec,
4. checks every worker's result (bit for bit against the reference switch, and against the
   float64 sum within the codec's bound) and prints a report from the clients' statistics and
   the switch's counters.

Ctrl-C or any failure stops the workers and the switch and exits non-zero.
"""

from __future__ import annotations

import asyncio
import hashlib
import multiprocessing as mp
import queue
import secrets
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event as MpEvent
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.controller.jobs import JobSpec
from inaemu.controller.p4rt import Controller
from inaemu.controller.stats import StatsReport
from inaemu.controller.topology import Topology, star
from inaemu.hostlib.wire import FRAME_BYTES, MAX_RUN, K

JOB_ID = 1
SWITCH_START_TIMEOUT = 30.0  # seconds for the softswitch process to print READY


@dataclass
class DemoOptions:
    workers: int = 4
    size: int = 2_000_000
    codec: str = "fixedpoint"
    density: float = 1.0
    loss: float = 0.0
    window: int = 64
    wire_dir: str | None = None  # None: the softswitch makes a private one (READY wire_dir=)
    grpc_port: int = 0
    seed: int = 1
    progress: bool = True
    timeout: float = 30.0  # a worker gives up after this long without progress
    run: int | None = None  # the workers' run id; None: the parent draws a fresh one


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


def worker_input(
    seed: int, rank: int, size: int, density: float, codec: str = "fixedpoint"
) -> npt.NDArray[Any]:
    """Worker `rank`'s gradient: N(0, 0.01) float32 (int32 in +-2^20 for the int32 codec),
    a fraction `density` of it non-zero."""
    rng = np.random.default_rng([seed, rank])
    if codec == "int32":
        x: npt.NDArray[Any] = rng.integers(-(2**20), 2**20, size, dtype=np.int32)
    else:
        x = (rng.standard_normal(size) * 0.01).astype(np.float32)
    if density < 1.0:
        x[rng.random(size) >= density] = 0.0
    return x


def _verify(opts: DemoOptions, result: npt.NDArray[Any]) -> tuple[bool, float, float, bool]:
    """(bit-exact vs the reference switch, max |error| vs float64 sum, bound, within bound)."""
    from inaemu.hostlib.codecs import make_codec, simulate_allreduce
    from inaemu.hostlib.codecs.fixedpoint import DEFAULT_BLOCK_SIZE, block_exponents, error_bound

    inputs = [
        worker_input(opts.seed, r, opts.size, opts.density, opts.codec) for r in range(opts.workers)
    ]
    reference, _ = simulate_allreduce(make_codec(opts.codec), inputs)
    exact = bool(np.array_equal(reference[0], result))
    truth = np.sum(np.stack(inputs).astype(np.float64), axis=0)
    err = np.abs(result.astype(np.float64) - truth)
    max_err = float(err.max()) if err.size else 0.0
    if opts.codec == "fixedpoint":
        exps = np.max([block_exponents(x, DEFAULT_BLOCK_SIZE) for x in inputs], axis=0)
        bound = error_bound(exps, opts.workers, opts.size, DEFAULT_BLOCK_SIZE)
        bound = bound + np.spacing(np.abs(result)).astype(np.float64) / 2  # output rounding
        return exact, max_err, float(bound.max()), bool((err <= bound).all())
    # lossless codecs: the decoded sum is exactly the sum of the fixed-point inputs, so the
    # bound is the reference's own error (the quantization), met when bit-exact
    ref_err = float(np.abs(reference[0].astype(np.float64) - truth).max()) if err.size else 0.0
    return exact, max_err, ref_err, exact


def _worker(
    rank: int,
    opts: DemoOptions,
    go: MpEvent,
    done: Synchronized[int],
    results: mp.Queue[WorkerResult | str],
) -> None:
    from inaemu.hostlib.client import InaClient, InaError
    from inaemu.hostlib.codecs import make_codec
    from inaemu.hostlib.transport import LoopbackWireTransport

    try:
        x = worker_input(opts.seed, rank, opts.size, opts.density, opts.codec)

        def progress(n: int) -> None:
            with done.get_lock():
                done.value += n

        client = InaClient(
            LoopbackWireTransport(rank + 1, str(opts.wire_dir)),
            job_id=JOB_ID,
            window=opts.window,
            n_workers=opts.workers,
            run=opts.run or 0,  # the parent's, the same for every worker
            give_up_after=opts.timeout,
            on_progress=progress,
        )
        go.wait()
        start = time.perf_counter()
        out = client.allreduce(x, make_codec(opts.codec))
        seconds = time.perf_counter() - start
        client.transport.close()
        exact, max_err, bound, ok = _verify(opts, np.asarray(out))
        st = client.stats
        results.put(
            WorkerResult(
                rank,
                seconds,
                hashlib.sha256(np.ascontiguousarray(out).tobytes()).hexdigest()[:16],
                exact,
                max_err,
                bound,
                ok,
                st.bytes_sent,
                st.packets_sent,
                st.retransmissions,
                st.duplicate_results,
            )
        )
    except KeyboardInterrupt:
        pass
    except InaError as exc:
        results.put(f"worker {rank}: {exc}")
    except Exception as exc:  # reported by the parent as one clear line, not a traceback
        results.put(f"worker {rank} failed: {type(exc).__name__}: {exc}")


@dataclass
class DemoReport:
    options: DemoOptions
    wall: float
    results: list[WorkerResult]
    stats: StatsReport
    chunks: int
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Identical on every worker, bit-exact vs the reference switch, within the bound."""
        same = len({r.digest for r in self.results}) == 1
        return same and all(r.exact_vs_reference and r.within_bound for r in self.results)

    def render(self) -> str:
        o = self.options
        sw = self.stats.switches["s1"]
        rx = sum(n for (c, _), (n, _) in sw.indexed.items() if c == "port_rx")
        tx = sum(n for (c, _), (n, _) in sw.indexed.items() if c == "port_tx")
        r0 = self.results[0]
        slowest = max(r.seconds for r in self.results)
        lines = [
            f"inaemu demo: {o.workers} workers x {o.size:,} "
            f"{'int32' if o.codec == 'int32' else 'float32'}, codec {o.codec}"
            + (f", density {o.density:g}" if o.density < 1 else "")
            + f", window {o.window}, injected loss {o.loss:.1%}",
            f"  time            {slowest:.2f} s allreduce "
            f"({self.wall:.2f} s including the workers' checks)",
            f"  throughput      {o.size / slowest:,.0f} elements/s per worker"
            f" ({o.size * o.workers / slowest:,.0f} summed/s)",
            f"  packets         {rx:,} into the switch, {tx:,} out ({FRAME_BYTES} B frames, K={K})",
            f"  on the wire     {r0.bytes_sent / 1e6:.2f} MB per worker "
            f"({r0.bytes_sent / o.size:.3f} B/element, {r0.packets_sent:,} packets)",
            f"  retransmissions {sum(r.retransmissions for r in self.results):,} "
            f"(duplicate results ignored: {sum(r.duplicate_results for r in self.results):,})",
            "  switch drops    "
            + (", ".join(f"{k.lower()} {v:,}" for k, v in sw.drops().items()) or "none"),
            "  switch events   " + ", ".join(f"{k.lower()} {v:,}" for k, v in sw.events().items()),
        ]
        same = len({r.digest for r in self.results}) == 1
        exact = all(r.exact_vs_reference for r in self.results)
        worst = max(r.max_error for r in self.results)
        bound = max(r.bound for r in self.results)
        lines.append(
            f"  result          {'identical on every worker' if same else 'WORKERS DISAGREE'}; "
            f"{'bit-exact' if exact else 'NOT bit-exact'} vs the reference switch"
        )
        lines.append(
            f"  error bound     max |error| {worst:.3g} vs float64 sum; bound {bound:.3g}: "
            + ("met" if all(r.within_bound for r in self.results) else "NOT MET")
        )
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _progress_bar(done: int, total: int, started: float) -> str:
    width = 30
    frac = min(done / total, 1.0) if total else 1.0
    bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
    return f"\r  [{bar}] {frac:6.1%}  {time.monotonic() - started:5.1f} s"


def _start_switch(opts: DemoOptions) -> tuple[subprocess.Popen[str], str, str]:
    """The softswitch process, its P4Runtime address and its wire dir (from its READY line)."""
    argv = [
        sys.executable,
        "-m",
        "inaemu.softswitch",
        "--grpc",
        f"127.0.0.1:{opts.grpc_port}",
        "--wires",
        f"1-{opts.workers}",
        *(["--wire-dir", opts.wire_dir] if opts.wire_dir else []),
        "--seed",
        str(opts.seed),
    ]
    # stderr goes to a file, not a pipe: a pipe nobody drains would stall a chatty switch.
    # The child keeps its own descriptor when ours is closed.
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], SWITCH_START_TIMEOUT)
        if not ready:
            proc.kill()
            proc.wait(10)
            raise DemoError(f"the softswitch did not start within {SWITCH_START_TIMEOUT:.0f} s")
        line = proc.stdout.readline()  # READY ... or EOF if it failed
        if not line.startswith("READY"):
            proc.wait(10)
            log.seek(0)
            raise DemoError(log.read().strip() or f"softswitch exited with {proc.returncode}")
    fields = dict(kv.split("=", 1) for kv in line.split()[1:])
    return proc, fields["grpc"], fields["wire_dir"]


class DemoError(RuntimeError):
    pass


async def _program(topo: Topology, opts: DemoOptions) -> Controller:
    ctl = Controller(topo, push_pipeline=True)  # the demo starts the switch, so it programs it
    await ctl.connect()
    await ctl.add_job(JobSpec(JOB_ID, tuple(topo.hosts), pool_size=opts.window))
    if opts.loss > 0:
        await ctl.set_loss("s1", range(1, opts.workers + 1), opts.loss)
    return ctl


def run_demo(opts: DemoOptions, out: Any = sys.stdout) -> DemoReport:
    if not 1 <= opts.workers <= 32:
        raise DemoError("--workers must be 1..32 (one switch; the slot bitmap holds 32)")
    if opts.size < 1:
        raise DemoError("--size must be at least 1")
    if not 0.0 <= opts.loss < 1.0:
        raise DemoError("--loss must be in [0, 1)")
    if not 0.0 < opts.density <= 1.0:
        raise DemoError("--density must be in (0, 1]")
    from inaemu.hostlib.codecs import CODECS

    if opts.codec not in CODECS:
        raise DemoError(f"unknown codec {opts.codec!r}; choose from {', '.join(sorted(CODECS))}")
    switch, grpc, wire_dir = _start_switch(opts)
    # the workers' wires, and one fresh run id for all of them (docs/protocol.md, section 5)
    run = secrets.randbelow(MAX_RUN + 1) if opts.run is None else opts.run
    opts = replace(opts, wire_dir=wire_dir, run=run)
    ctx = mp.get_context("spawn")  # no fork after gRPC threads started
    procs: list[Any] = []
    loop = asyncio.new_event_loop()
    ctl: Controller | None = None
    try:
        topo = star(opts.workers)
        topo.switches["s1"] = replace(topo.switches["s1"], grpc=grpc)
        ctl = loop.run_until_complete(_program(topo, opts))
        go = ctx.Event()
        done = ctx.Value("q", 0)
        results: mp.Queue[WorkerResult | str] = ctx.Queue()
        procs = [
            ctx.Process(target=_worker, args=(r, opts, go, done, results), daemon=True)
            for r in range(opts.workers)
        ]
        for p in procs:
            p.start()
        time.sleep(0.3)  # let workers bind their sockets before the first packet
        started = time.monotonic()
        go.set()
        # chunks per worker: estimated from the codec's phases; the bar tracks worker 0's share
        expected_chunks = max(1, -(-opts.size // K)) * opts.workers
        collected: list[WorkerResult] = []
        show = opts.progress and out.isatty()
        while len(collected) < opts.workers:
            try:
                item = results.get(timeout=0.2)
            except queue.Empty:
                if show:
                    out.write(_progress_bar(done.value, expected_chunks, started))
                    out.flush()
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead or switch.poll() is not None:
                    raise DemoError("a worker or the switch died; see the messages above") from None
                continue
            if isinstance(item, str):
                raise DemoError(item)
            collected.append(item)
        wall = time.monotonic() - started
        if show:
            out.write(_progress_bar(expected_chunks, expected_chunks, started) + "\n")
        stats = loop.run_until_complete(ctl.read_stats())
        report = DemoReport(
            opts, wall, sorted(collected, key=lambda r: r.rank), stats, expected_chunks
        )
        if opts.codec.startswith("sketch") and opts.density == 1.0:
            report.notes.append("sketch codecs pay off on sparse gradients: try --density 0.05")
        return report
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(5)
        if ctl is not None:
            loop.run_until_complete(ctl.close())
        loop.close()
        switch.terminate()
        try:
            switch.wait(10)
        except subprocess.TimeoutExpired:
            switch.kill()


def main_demo(opts: DemoOptions) -> int:
    try:
        report = run_demo(opts)
    except DemoError as exc:
        print(f"inaemu demo: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninaemu demo: interrupted; workers and switch stopped", file=sys.stderr)
        return 130
    print(report.render())
    if not report.ok:
        print(
            "inaemu demo: the result is not identical, bit-exact and within the bound on "
            "every worker (see the report above)",
            file=sys.stderr,
        )
        return 1
    return 0
