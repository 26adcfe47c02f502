"""Host collectives through the schedule executor (inaemu.hostlib.collective): numbers.

1. INCEPTIONN over each schedule (ranks as threads on an in-memory mesh): compressions per
   result (`inceptionn_quantizations`), measured max |error| against the exact float64 sum,
   the schedule's bound, and bytes sent per element and rank, against plain float32.
2. Worker processes on a TCP mesh over loopback (`python -m inaemu.hostlib.collective.worker`):
   seconds per allreduce (median of --repeat, the slowest rank) per schedule and codec.

    .venv/bin/python bench/bench_collective_exec.py [--size 1000000] [--ranks 4,8]
        [--tcp-ranks 4] [--repeat 5] [--only errors|tcp]
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.collectives.algorithms import algorithm
from inaemu.collectives.schedule import Schedule
from inaemu.common import args as arg
from inaemu.hostlib.codecs.inceptionn import DEFAULT_ERROR_BOUND
from inaemu.hostlib.collective.executor import (
    InceptionnCodec,
    ScheduleClient,
    ScheduleCodec,
    inceptionn_error_bound,
    inceptionn_quantizations,
)
from inaemu.hostlib.collective.peers import MemoryMesh
from inaemu.hostlib.worker import worker_input
from inaemu.topology.builders import star


def in_memory(
    schedule: Schedule, inputs: list[npt.NDArray[Any]], codec: ScheduleCodec | None
) -> tuple[list[npt.NDArray[Any]], int]:
    """Every rank's result and the bytes all ranks sent."""
    mesh = MemoryMesh(schedule.n_ranks)
    results: list[Any] = [None] * schedule.n_ranks

    def go(r: int) -> None:
        client = ScheduleClient(schedule, r, mesh.channels[r], timeout=60)
        results[r] = client.allreduce(inputs[r], codec)
        mesh.channels[r].close()

    threads = [threading.Thread(target=go, args=(r,)) for r in range(schedule.n_ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    if any(r is None for r in results):
        raise SystemExit("a rank failed")
    sent = sum(sum(ch.bytes_sent()) for ch in mesh.channels)
    return results, sent


def error_table(ranks: list[int], size: int, bound: float) -> None:
    print(f"INCEPTIONN, bound {bound:g}, {size:,} float32 N(0, 0.01) per rank (worker_input)")
    print("algo       ranks  q  max|err|   q x bound  err/bound  B/elem inceptionn  B/elem plain")
    for n in ranks:
        inputs = [worker_input(1, r, size, codec="inceptionn") for r in range(n)]
        stack = np.array(inputs, dtype=np.float64)
        exact, abs_sum = stack.sum(axis=0), np.abs(stack).sum(axis=0)
        for name in ("ring", "hd", "multitree"):
            schedule = algorithm(name).schedule(star(n))
            q = int(inceptionn_quantizations(schedule).max())
            got, comp = in_memory(schedule, inputs, InceptionnCodec(bound))
            _, plain = in_memory(schedule, inputs, None)
            err = max(float(np.abs(g.astype(np.float64) - exact).max()) for g in got)
            limit = inceptionn_error_bound(schedule, abs_sum, bound)
            assert all((np.abs(g.astype(np.float64) - exact) <= limit).all() for g in got)
            same = all(np.array_equal(g, got[0]) for g in got)
            print(
                f"{name:10} {n:5} {q:2}  {err:.3e}  {q * bound:.3e}  {err / bound:9.2f}  "
                f"{comp / n / size:17.3f}  {plain / n / size:12.3f}"
                + ("" if same else "  (ranks differ)")
            )


def tcp_run(schedule: Schedule, size: int, codec: str, repeat: int) -> tuple[float, int]:
    """(median over repeats of the slowest rank's seconds, bytes rank 0 sent per allreduce)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "schedule.json"
        schedule.save(path)
        socks = [socket.create_server(("127.0.0.1", 0)) for _ in range(schedule.n_ranks)]
        peers = ",".join(f"127.0.0.1:{s.getsockname()[1]}" for s in socks)
        procs = []
        for r, s in enumerate(socks):
            cmd = [sys.executable, "-m", "inaemu.hostlib.collective.worker", "--schedule"]
            cmd += [str(path), "--rank", str(r), "--peers", peers, "--size", str(size)]
            cmd += ["--codec", codec, "--repeat", str(repeat), "--listen-fd", str(s.fileno())]
            procs.append(
                subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, pass_fds=[s.fileno()])
            )
            s.close()
        lines = []
        for p in procs:
            out, _ = p.communicate(timeout=600)
            if p.returncode != 0:
                raise SystemExit(f"a worker failed ({p.returncode})")
            lines.append([json.loads(x) for x in out.splitlines()])
    if len({line[-1]["digest"] for line in lines}) != 1:
        raise SystemExit("the ranks' results differ")
    slowest = [max(rank[i]["seconds"] for rank in lines) for i in range(repeat)]
    return statistics.median(slowest), int(lines[0][-1]["bytes_sent"])


RANKS = arg.Integer(2, 64, "a number of ranks")  # worker processes on this machine


def rank_counts(text: str) -> list[int]:
    """'4,8' -> [4, 8], each a `RANKS`."""
    return [RANKS(n) for n in text.split(",")]


def main() -> None:
    ap = arg.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--size", type=arg.ELEMENTS, default=1_000_000, help="float32 per rank")
    ap.add_argument(
        "--ranks", type=rank_counts, default=[4, 8], help="rank counts for the error table"
    )
    ap.add_argument("--tcp-ranks", type=RANKS, default=4)
    ap.add_argument("--repeat", type=arg.REPEAT, default=5)
    ap.add_argument("--only", choices=("errors", "tcp"), help="one of the two parts")
    args = ap.parse_args()
    if args.only != "tcp":
        error_table(args.ranks, args.size, DEFAULT_ERROR_BOUND)
    if args.only == "errors":
        return
    n = args.tcp_ranks
    print(f"\nTCP on loopback, {n} worker processes, {args.size:,} float32 per rank, median of")
    print(f"{args.repeat} allreduces (the slowest rank's time)")
    print("algo       codec        seconds   MB/s per rank (input)  bytes sent by rank 0")
    for name in ("ring", "hd"):
        schedule = algorithm(name).schedule(star(n))
        for codec in ("plain", "fixedpoint", "inceptionn"):
            secs, sent = tcp_run(schedule, args.size, codec, args.repeat)
            rate = 4 * args.size / secs / 1e6
            print(f"{name:10} {codec:11} {secs:8.4f}   {rate:21.1f}  {sent:20,}")


if __name__ == "__main__":
    main()
