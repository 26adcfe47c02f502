"""Softswitch throughput on the aggregation path (K=64 lanes per packet).

    python bench/bench_softswitch.py [--chunks N] [--workers 4 8] [--repeat R] [--window 64 256]

1. in-process, both data planes side by side: the same frames of n workers (round robin per
   chunk, SUM) handed to `process_batch` in batches of BATCH_FRAMES, to the reference
   pipeline (softswitch/reference.py, frame by frame in Python) and to the fast one
   (softswitch/fast/, compiled; warmed up before the clock starts), repetitions alternating
   so that both see the same machine; reports packets/s into the switch, aggregated
   elements/s (packets x K) and the ratio fast / reference measured in this run. Both run one
   thread: the ratio is what the compiled path buys on this machine, whatever else runs;
2. over loopback wires, each data plane: a SoftSwitch thread with loopback wires (AF_UNIX
   stream connections in a private wire dir) and n worker processes running the real INA
   client, for each `--window` (the job's slot pool: 64, and 256, the demo's default);
   reports the same from the switch's counters, the wall time of the whole allreduce, and
   the frames per system call on each side (the switch's ports, the hosts' ends). Beside it,
   measured in the same run, the raw ceiling: the same ports, batching and window with a
   data plane that sends every frame back unchanged (`EchoPlane`), `--raw-frames` per worker
   (longer than the allreduce: the ceiling is many times faster); the pipeline's packets/s
   are given as a share of it. And the hosts' ceiling: the real clients (`--raw-frames`
   chunks each) against a data plane that answers every chunk at once (`AnswerPlane`), what
   bounds the path when the data plane costs next to nothing.

Numbers depend on the machine; the run prints its own configuration. Seeds are fixed.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Event as MpEvent

import numpy as np

from inaemu.cli.demo_worker import DemoOptions
from inaemu.common import args as arg
from inaemu.common.batch_io import IoCounts
from inaemu.common.wire import (
    INA_OFFSET,
    MAX_FANIN,
    Endpoint,
    Flag,
    FrameTemplate,
    K,
    Opcode,
    pack_frames,
    pack_payloads,
    slot_field,
)
from inaemu.controller.star import Worker, star_job_plan
from inaemu.hostlib import client as ina_client
from inaemu.hostlib.client import InaClient
from inaemu.hostlib.transport import LoopbackWireTransport
from inaemu.p4.constants import DropReason, Event
from inaemu.softswitch.batch import BATCH_FRAMES, DataPlane, FrameBatch
from inaemu.softswitch.fast.dataplanes import make_pipeline, warm_up
from inaemu.softswitch.plan import apply_to_pipeline
from inaemu.softswitch.switch import SoftSwitch

WINDOW = 64
PLANES = ("reference", "fast")  # the old and the new data plane, side by side


def star(n: int) -> list[Worker]:
    return [Worker(p, f"02:00:00:00:00:{p:02x}", f"10.0.0.{p}") for p in range(1, n + 1)]


def traffic(n: int, chunks: int) -> list[FrameBatch]:
    """n workers' frames for `chunks` chunks, in batches of BATCH_FRAMES as a port hands them
    over; every chunk completes (and is multicast to n ports)."""
    rng = np.random.default_rng(0)
    switch = Endpoint("02:00:00:00:00:fe", "10.0.0.254")
    ids = np.arange(chunks)
    frames = []
    for w in star(n):
        rec = pack_frames(
            FrameTemplate(Endpoint(w.mac, w.ip), switch),
            pack_payloads(
                opcode=Opcode.SUM,
                job_id=1,
                tree_id=0,
                slot=[slot_field(int(i % WINDOW), int(i // WINDOW) % 2) for i in ids],
                seq=ids,
                values=rng.integers(-1000, 1000, (chunks, K), dtype=np.int32),
            ),
        )
        frames.append([r.tobytes() for r in rec])
    arrivals = [(j + 1, frames[j][i]) for i in range(chunks) for j in range(n)]
    return [
        FrameBatch.of(arrivals[k : k + BATCH_FRAMES]) for k in range(0, len(arrivals), BATCH_FRAMES)
    ]


def bench_in_process(dataplane: str, n: int, batches: list[FrameBatch]) -> float:
    """Packets/s of `dataplane` over `batches`, on a fresh switch with the job installed."""
    pipe = make_pipeline(dataplane)
    apply_to_pipeline(pipe, star_job_plan(1, star(n), base=0, pool_size=WINDOW, mgid=1))
    packets = sum(b.n for b in batches)
    start = time.perf_counter()
    emitted = sum(pipe.process_batch(b).n for b in batches)
    elapsed = time.perf_counter() - start
    assert emitted == packets, "every chunk completed and was multicast"
    assert pipe.ina_events.packets[Event.COMPLETE_ROOT] * n == packets
    return packets / elapsed


# ---------------------------------------------------------------- over loopback wires


@dataclass
class WireRun:
    """One run over loopback wires: packets into the switch per second (of the slowest
    worker's time), the ports' frames per system call each way, the hosts' likewise."""

    pps: float
    wall: float
    switch: IoCounts
    hosts: IoCounts
    wakeups: int
    retransmissions: int = 0
    duplicates: int = 0

    def per_call(self) -> str:
        def ratio(frames: int, calls: int) -> str:
            return f"{frames / calls:.1f}" if calls else "-"

        sw, h = self.switch, self.hosts
        return (
            f"switch in {ratio(sw.rx_frames, sw.rx_calls)} out {ratio(sw.tx_frames, sw.tx_calls)}"
            f" per call ({ratio(sw.rx_frames, self.wakeups)} per wake-up), "
            f"hosts in {ratio(h.rx_frames, h.rx_calls)} out {ratio(h.tx_frames, h.tx_calls)}"
        )


WorkerResult = tuple[float, int, IoCounts]


class EchoPlane:
    """A data plane that sends every frame back out of the port it came in on, unchanged: the
    raw ceiling of the ports and their batching, with no pipeline."""

    def process(self, ingress_port: int, frame: bytes) -> list[tuple[int, bytes]]:
        return [(ingress_port, frame)]

    def process_batch(self, batch: FrameBatch) -> FrameBatch:
        return batch


class AnswerPlane:
    """A data plane that answers every chunk at once: each frame back to its port with the
    RESULT flag (a job of one worker per port). The real clients' ceiling over the wires:
    what bounds the path once the data plane costs next to nothing."""

    def process(self, ingress_port: int, frame: bytes) -> list[tuple[int, bytes]]:
        out = bytearray(frame)
        out[INA_OFFSET] |= int(Flag.RESULT)
        return [(ingress_port, bytes(out))]

    def process_batch(self, batch: FrameBatch) -> FrameBatch:
        batch.buf[batch.offset[: batch.n] + INA_OFFSET] |= int(Flag.RESULT)
        return batch


def _worker(
    port: int,
    wire_dir: str,
    size: int,
    n: int,
    window: int,
    go: MpEvent,
    q: mp.Queue[WorkerResult],
) -> None:
    x = np.random.default_rng(port).integers(-1000, 1000, size, dtype=np.int32)
    transport = LoopbackWireTransport(port, wire_dir)
    ina_client.warm_up()  # the client's compiled kernels loaded before the clock starts
    client = InaClient(
        transport, job_id=1, run=1, rank=port - 1, window=window, n_workers=n, give_up_after=60
    )
    go.wait()  # every worker ready: process start-up skew is not measured
    start = time.perf_counter()
    client.allreduce_int32(x, Opcode.SUM)
    q.put((time.perf_counter() - start, client.stats.retransmissions, transport.counts))


def _echo_worker(
    port: int, wire_dir: str, frames: int, window: int, go: MpEvent, q: mp.Queue[WorkerResult]
) -> None:
    """`window` frames in flight through an echoing switch until `frames` came back."""
    transport = LoopbackWireTransport(port, wire_dir)
    payloads = pack_payloads(
        opcode=Opcode.SUM,
        job_id=1,
        tree_id=0,
        slot=np.arange(window),
        seq=np.arange(window),
        values=np.zeros((window, K), np.int32),
    )
    ina_client.warm_up()
    go.wait()
    start = time.perf_counter()
    transport.send(payloads)
    sent, got = window, 0
    while got < frames:
        back = len(transport.recv(5.0))
        if not back:
            raise RuntimeError(f"worker {port}: frames stopped coming back ({got} of {frames})")
        got += back
        more = min(back, frames - sent)
        if more > 0:
            transport.send(payloads[:more])
            sent += more
    q.put((time.perf_counter() - start, 0, transport.counts))


def run_over_wires(
    n: int,
    chunks: int,
    *,
    window: int,
    echo: bool,
    plane: DataPlane | None = None,
    dataplane: str = "reference",
) -> WireRun:
    """n worker processes on loopback wires to one switch thread: the real INA client
    through the pipeline (`dataplane`: fast or reference) or `plane`, or (`echo`) frames
    through `EchoPlane`."""
    sw = SoftSwitch(make_pipeline(dataplane), dataplane=EchoPlane() if echo else plane)
    plan = star_job_plan(1, star(n), base=0, pool_size=window, mgid=1)
    apply_to_pipeline(sw.pipeline, plan)
    sw.add_loopback_wires(range(1, n + 1))
    sw.start()
    try:
        q: mp.Queue[WorkerResult] = mp.Queue()
        go = mp.Event()
        procs = [
            mp.Process(
                target=_echo_worker if echo else _worker,
                args=(p, sw.wire_dir, chunks, window, go, q)
                if echo
                else (p, sw.wire_dir, chunks * K, n, window, go, q),
            )
            for p in range(1, n + 1)
        ]
        for proc in procs:
            proc.start()
        time.sleep(1.0)
        start = time.perf_counter()
        go.set()
        outs = [q.get(timeout=600) for _ in procs]
        for proc in procs:
            proc.join()
        wall = time.perf_counter() - start
    finally:
        sw.stop()
    hosts = IoCounts()
    for _, _, counts in outs:
        hosts.add(counts)
    slowest = max(t for t, _, _ in outs)
    run = WireRun(sw.frames_in / slowest, wall, sw.counts, hosts, sw.wakeups)
    if not echo and plane is None:
        run.retransmissions = sum(r for _, r, _ in outs)
        run.duplicates = sw.pipeline.ina_drops.packets[DropReason.DUPLICATE]
        replies = sw.pipeline.ina_events.packets[Event.RETX_REPLY]
        print(
            f"   switch: {run.duplicates} duplicate drops, {replies} retransmissions answered, "
            f"{sw.tx_dropped} frames found no room, {sw.rx_foreign} foreign frames"
        )
    return run


def report_over_wires(
    workers: list[int], windows: list[int], chunks: int, raw_frames: int, repeat: int
) -> None:
    """The pipeline over wires beside the raw ceiling (same ports, batching and window, with
    `EchoPlane`) and the hosts' ceiling (`AnswerPlane`), measured in the same run; each data
    plane `repeat` times, the two alternating: medians, spread and their ratio."""
    for window in windows:
        for n in workers:
            raw = run_over_wires(n, raw_frames, window=window, echo=True)
            hosts = run_over_wires(n, raw_frames, window=window, echo=False, plane=AnswerPlane())
            runs: dict[str, list[WireRun]] = {plane: [] for plane in PLANES}
            for _ in range(repeat):
                for plane in PLANES:
                    runs[plane].append(
                        run_over_wires(n, chunks, window=window, echo=False, dataplane=plane)
                    )
            label = f"wires w{window}"
            print(
                f"{label + ' raw':<16} {n:>7} {raw.pps:>12,.0f} {'':>12} "
                f"wall {raw.wall:.2f}s; {raw.per_call()}"
            )
            print(
                f"{label + ' hosts':<16} {n:>7} {hosts.pps:>12,.0f} {hosts.pps * K:>12,.0f} "
                f"wall {hosts.wall:.2f}s, real clients, every chunk answered at once; "
                f"{hosts.per_call()}"
            )
            median: dict[str, float] = {}
            for plane, rs in runs.items():
                ranked = sorted(rs, key=lambda r: r.pps)
                run = ranked[len(ranked) // 2]
                median[plane] = run.pps
                print(
                    f"{label:<16} {n:>7} {run.pps:>12,.0f} {run.pps * K:>12,.0f} {plane}: "
                    f"median of {len(rs)} ({ranked[0].pps:,.0f}-{ranked[-1].pps:,.0f}), wall "
                    f"{run.wall:.2f}s, {run.retransmissions} retransmissions "
                    f"({run.duplicates} were spurious); {100 * run.pps / raw.pps:.0f}% of raw, "
                    f"{100 * run.pps / hosts.pps:.0f}% of the hosts'; {run.per_call()}"
                )
            pairs = [f.pps / r.pps for f, r in zip(runs["fast"], runs["reference"], strict=True)]
            print(
                f"{label:<16} {n:>7} fast / reference {median['fast'] / median['reference']:.1f}x "
                f"(medians; pairs {min(pairs):.1f}-{max(pairs):.1f}x); raw / reference "
                f"{raw.pps / median['reference']:.1f}x, hosts' / reference "
                f"{hosts.pps / median['reference']:.1f}x"
            )


def main() -> None:
    ap = arg.ArgumentParser(description=__doc__.splitlines()[0])
    chunks = arg.positive("chunks", arg.MAX_ELEMENTS // K)
    ap.add_argument("--chunks", type=chunks, default=4000, help="chunks per worker")
    workers = arg.positive("workers", MAX_FANIN)
    ap.add_argument("--workers", type=workers, nargs="+", default=[4, 8])
    ap.add_argument(
        "--repeat", type=arg.REPEAT, default=3, help="in-process repetitions (best kept)"
    )
    ap.add_argument("--skip-loopback", action="store_true")
    ap.add_argument(
        "--window",
        type=arg.WINDOW,
        nargs="+",
        default=[WINDOW, DemoOptions.window],
        help=f"the job's windows over wires (default {WINDOW} and the demo's {DemoOptions.window})",
    )
    ap.add_argument(
        "--wire-repeat",
        type=arg.REPEAT,
        default=3,
        help="runs of each data plane over wires, alternating (medians; default 3)",
    )
    ap.add_argument(
        "--raw-frames",
        type=arg.positive("raw frames", arg.MAX_ELEMENTS // K),
        default=20_000,
        help="frames per worker of the raw ceiling and the hosts' ceiling",
    )
    args = ap.parse_args()
    print(
        f"# softswitch benchmark: K={K}, window={WINDOW} in-process, "
        f"{' and '.join(map(str, args.window))} over wires, chunks/worker={args.chunks}, "
        f"batches of {BATCH_FRAMES} frames, python {platform.python_version()}, "
        f"numpy {np.__version__}, {os.cpu_count()} cpus; {warm_up('fast')}"
    )
    print(f"{'mode':<12} {'workers':>7} {'packets/s':>12} {'elements/s':>12} {'notes'}")
    for n in args.workers:
        batches = traffic(n, args.chunks)
        best = dict.fromkeys(PLANES, 0.0)
        for _ in range(args.repeat):  # alternating, so that both see the same machine
            for plane in PLANES:
                best[plane] = max(best[plane], bench_in_process(plane, n, batches))
        for plane, pps in best.items():
            note = "" if plane == "reference" else f" {pps / best['reference']:.1f}x the reference"
            print(f"{'in-process':<12} {n:>7} {pps:>12,.0f} {pps * K:>12,.0f} {plane}{note}")
    if not args.skip_loopback:
        report_over_wires(args.workers, args.window, args.chunks, args.raw_frames, args.wire_repeat)


if __name__ == "__main__":
    main()
