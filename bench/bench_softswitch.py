"""Softswitch throughput on the aggregation path (K=64 lanes per packet).

    python bench/bench_softswitch.py [--chunks N] [--workers 4 8] [--repeat R]

1. in-process, both data planes side by side: the same frames of n workers (round robin per
   chunk, SUM) handed to `process_batch` in batches of BATCH_FRAMES, first by the reference
   pipeline (softswitch/pipeline.py, frame by frame in Python), then by the fast one
   (softswitch/fast/, compiled; warmed up before the clock starts); reports packets/s into
   the switch, aggregated elements/s (packets x K) and the ratio fast / reference, measured
   in this run. Both run one thread on one core: the ratio is what the compiled path buys
   on this machine, whatever else is running (the two measurements alternate).
2. loopback wires, each data plane: a SoftSwitch thread with loopback wires (AF_UNIX
   datagrams in a private wire dir) and n worker processes running the real INA client
   (window 64); reports the same from the switch's counters and the wall time of the whole
   allreduce. With the fast data plane the ports, the workers and the client bound the rate,
   not the pipeline.

Numbers depend on the machine; the run prints its own configuration. Seeds are fixed.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import time
from multiprocessing.synchronize import Event as MpEvent

import numpy as np

from inaemu.controller.star import Worker, star_job_plan
from inaemu.hostlib.client import InaClient
from inaemu.hostlib.transport import LoopbackWireTransport
from inaemu.hostlib.wire import (
    Endpoint,
    FrameTemplate,
    K,
    Opcode,
    pack_frames,
    pack_payloads,
    slot_field,
)
from inaemu.p4.constants import DropReason, Event
from inaemu.softswitch.batch import BATCH_FRAMES, FrameBatch
from inaemu.softswitch.fast.dataplanes import make_pipeline, warm_up
from inaemu.softswitch.plan import apply_to_pipeline
from inaemu.softswitch.switch import SoftSwitch

WINDOW = 64


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


def _worker(
    port: int, wire_dir: str, size: int, n: int, go: MpEvent, q: mp.Queue[tuple[float, int]]
) -> None:
    x = np.random.default_rng(port).integers(-1000, 1000, size, dtype=np.int32)
    client = InaClient(
        LoopbackWireTransport(port, wire_dir),
        job_id=1,
        window=WINDOW,
        n_workers=n,
        give_up_after=60,
    )
    go.wait()  # every worker ready: process start-up skew is not measured
    start = time.perf_counter()
    client.allreduce_int32(x, Opcode.SUM)
    q.put((time.perf_counter() - start, client.stats.retransmissions))


def bench_loopback(dataplane: str, n: int, chunks: int) -> tuple[float, float, float, int, int]:
    sw = SoftSwitch(make_pipeline(dataplane))
    apply_to_pipeline(sw.pipeline, star_job_plan(1, star(n), base=0, pool_size=WINDOW, mgid=1))
    sw.add_loopback_wires(range(1, n + 1))
    sw.start()
    try:
        q: mp.Queue[tuple[float, int]] = mp.Queue()
        go = mp.Event()
        ctx_procs = [
            mp.Process(target=_worker, args=(p, sw.wire_dir, chunks * K, n, go, q))
            for p in range(1, n + 1)
        ]
        for proc in ctx_procs:
            proc.start()
        time.sleep(1.0)
        start = time.perf_counter()
        go.set()
        outs = [q.get(timeout=600) for _ in ctx_procs]
        for proc in ctx_procs:
            proc.join()
        wall = time.perf_counter() - start
    finally:
        sw.stop()
    rx = sum(sw.pipeline.port_rx.packets)
    slowest = max(t for t, _ in outs)
    retx = sum(r for _, r in outs)
    dups = sw.pipeline.ina_drops.packets[DropReason.DUPLICATE]
    replies = sw.pipeline.ina_events.packets[Event.RETX_REPLY]
    print(
        f"   switch: {dups} duplicate drops, {replies} retransmissions answered, "
        f"{sw.tx_dropped} frames lost on full sockets, {sw.rx_foreign} foreign datagrams"
    )
    return rx / slowest, rx * K / slowest, wall, retx, dups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=4000, help="chunks per worker")
    ap.add_argument("--workers", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--repeat", type=int, default=3, help="in-process repetitions (best kept)")
    ap.add_argument("--skip-loopback", action="store_true")
    args = ap.parse_args()
    print(
        f"# softswitch benchmark: K={K}, window={WINDOW}, chunks/worker={args.chunks}, "
        f"batches of {BATCH_FRAMES} frames, python {platform.python_version()}, "
        f"numpy {np.__version__}, {os.cpu_count()} cpus; {warm_up('fast')}"
    )
    print(f"{'mode':<12} {'workers':>7} {'packets/s':>12} {'elements/s':>12} {'notes'}")
    for n in args.workers:
        batches = traffic(n, args.chunks)
        best = {plane: 0.0 for plane in ("reference", "fast")}
        for _ in range(args.repeat):  # alternating, so that both see the same machine
            for plane in best:
                best[plane] = max(best[plane], bench_in_process(plane, n, batches))
        for plane, pps in best.items():
            note = "" if plane == "reference" else f"{pps / best['reference']:.1f}x the reference"
            print(f"{'in-process':<12} {n:>7} {pps:>12,.0f} {pps * K:>12,.0f} {plane} {note}")
    if not args.skip_loopback:
        for n in args.workers:
            for plane in ("reference", "fast"):
                pps, eps, wall, retx, dups = bench_loopback(plane, n, args.chunks)
                print(
                    f"{'loopback':<12} {n:>7} {pps:>12,.0f} {eps:>12,.0f} {plane}: "
                    f"wall {wall:.2f}s, {retx} retransmissions ({dups} were spurious)"
                )


if __name__ == "__main__":
    main()
