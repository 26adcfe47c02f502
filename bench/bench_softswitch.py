"""Softswitch throughput on the aggregation path (K=64 lanes per packet).

    python bench/bench_softswitch.py [--chunks N] [--workers 4 8] [--repeat R]

1. in-process: frames of n workers pushed straight into Pipeline.process(), round robin per
   chunk, SUM; reports packets/s into the switch and aggregated elements/s (packets x K);
2. loopback wires: a SoftSwitch thread with loopback wires (AF_UNIX datagrams in a private
   wire dir) and n worker processes running the real INA client (window 64); reports the
   same from the switch's counters and the wall time of the whole allreduce.

Numbers depend on the machine; the run prints its own configuration. Seeds are fixed.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import time
from multiprocessing.synchronize import Event as MpEvent

import numpy as np

from inaemu.controller.star import Worker, star_job_plan
from inaemu.hostlib import args as arg
from inaemu.hostlib.client import InaClient
from inaemu.hostlib.transport import LoopbackWireTransport
from inaemu.hostlib.wire import (
    MAX_FANIN,
    Endpoint,
    FrameTemplate,
    K,
    Opcode,
    pack_frames,
    pack_payloads,
    slot_field,
)
from inaemu.p4.constants import DropReason, Event
from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.plan import apply_to_pipeline
from inaemu.softswitch.switch import SoftSwitch

WINDOW = 64


def star(n: int) -> list[Worker]:
    return [Worker(p, f"02:00:00:00:00:{p:02x}", f"10.0.0.{p}") for p in range(1, n + 1)]


def bench_in_process(n: int, chunks: int) -> tuple[float, float]:
    pipe = Pipeline()
    apply_to_pipeline(pipe, star_job_plan(1, star(n), base=0, pool_size=WINDOW, mgid=1))
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
    process = pipe.process
    start = time.perf_counter()
    emitted = 0
    for i in range(chunks):
        for j in range(n):
            emitted += len(process(j + 1, frames[j][i]))
    elapsed = time.perf_counter() - start
    assert emitted == chunks * n, "every chunk completed and was multicast"
    pps = chunks * n / elapsed
    return pps, pps * K


def _worker(
    port: int, wire_dir: str, size: int, n: int, go: MpEvent, q: mp.Queue[tuple[float, int]]
) -> None:
    x = np.random.default_rng(port).integers(-1000, 1000, size, dtype=np.int32)
    client = InaClient(
        LoopbackWireTransport(port, wire_dir),
        job_id=1,
        run=1,
        window=WINDOW,
        n_workers=n,
        give_up_after=60,
    )
    go.wait()  # every worker ready: process start-up skew is not measured
    start = time.perf_counter()
    client.allreduce_int32(x, Opcode.SUM)
    q.put((time.perf_counter() - start, client.stats.retransmissions))


def bench_loopback(n: int, chunks: int) -> tuple[float, float, float, int, int]:
    sw = SoftSwitch()
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
    ap = arg.ArgumentParser(description=__doc__.splitlines()[0])
    chunks = arg.positive("chunks", arg.MAX_ELEMENTS // K)
    ap.add_argument("--chunks", type=chunks, default=4000, help="chunks per worker")
    workers = arg.positive("workers", MAX_FANIN)
    ap.add_argument("--workers", type=workers, nargs="+", default=[4, 8])
    ap.add_argument(
        "--repeat", type=arg.REPEAT, default=3, help="in-process repetitions (best kept)"
    )
    ap.add_argument("--skip-loopback", action="store_true")
    args = ap.parse_args()
    print(
        f"# softswitch benchmark: K={K}, window={WINDOW}, chunks/worker={args.chunks}, "
        f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} cpus"
    )
    print(f"{'mode':<12} {'workers':>7} {'packets/s':>12} {'elements/s':>12} {'notes'}")
    for n in args.workers:
        best = max(bench_in_process(n, args.chunks) for _ in range(args.repeat))
        print(f"{'in-process':<12} {n:>7} {best[0]:>12,.0f} {best[1]:>12,.0f}")
    if not args.skip_loopback:
        for n in args.workers:
            pps, eps, wall, retx, dups = bench_loopback(n, args.chunks)
            print(
                f"{'loopback':<12} {n:>7} {pps:>12,.0f} {eps:>12,.0f} "
                f"wall {wall:.2f}s, {retx} retransmissions ({dups} were spurious)"
            )


if __name__ == "__main__":
    main()
