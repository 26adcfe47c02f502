"""One worker of a PyTorch allreduce with the gloo backend, the baseline a training job gets
without in-network aggregation: `torch.distributed.all_reduce` (SUM) between Mininet hosts,
over TCP through the emulated switches (their IPv4 routes).

    python -m inaemu.mininet.gloo_worker --rank 0 --workers 4 --master 10.0.0.1 \\
        --port 29500 --local-ip 10.0.0.1 --size 65536 --seed 1 --codec int32 --out r0.npy

Its input is `hostlib.worker.worker_input(seed, rank, size, codec=...)`: int32 (`--codec
int32`, exact sums) or float32 (`--codec plain`, summed in gloo's order). Rank 0 serves the
rendezvous (torch's TCPStore on `--master:--port`); gloo's sockets are bound to the interface
that holds `--local-ip` (GLOO_SOCKET_IFNAME). After the rendezvous and a barrier it times one
all_reduce, writes the result to `--out` (.npy) and prints one JSON line like
`inaemu.hostlib.worker`'s: rank, seconds, start and end on the wall clock, cpu_seconds,
digest, and `bytes_sent` (what its interface sent during the all_reduce: frames, TCP headers
and ACKs included, from /proc/net/dev of its network namespace).

Every wait is bounded by `--timeout` (the rendezvous, connecting, the all_reduce). Exit status:
0 done; 1 the rendezvous or the all_reduce failed or timed out; 2 bad arguments or host set-up.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

from inaemu.common import args as arg
from inaemu.hostlib.worker import digest, worker_input

CODECS = ("int32", "plain")


def interface_of(ip: str) -> str:
    """The interface that holds `ip` in this network namespace; OSError if none."""
    out = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, timeout=10
    ).stdout
    devs = [ln.split()[1] for ln in out.splitlines() if f" {ip}/" in ln]
    if not devs:
        raise OSError(f"no interface has the address {ip}")
    return devs[0]


def tx_bytes(ifname: str) -> int:
    """Bytes `ifname` has sent (this process's network namespace: /proc/net/dev)."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, sep, counters = line.partition(":")
        if sep and name.strip() == ifname:
            return int(counters.split()[8])
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = arg.ArgumentParser(
        prog="python -m inaemu.mininet.gloo_worker",
        description="torch.distributed.all_reduce (gloo) of a generated array",
    )
    ap.add_argument("--rank", type=arg.RANK, required=True, help="this worker, 0..workers-1")
    ap.add_argument("--workers", type=arg.WORKERS, required=True, help="how many take part")
    ap.add_argument("--master", required=True, help="rank 0's IP address: the rendezvous")
    ap.add_argument("--port", type=int, default=29500, help="the rendezvous' TCP port")
    ap.add_argument("--local-ip", required=True, help="this host's address (gloo's interface)")
    ap.add_argument("--size", type=arg.ELEMENTS, required=True, help="elements")
    ap.add_argument("--seed", type=arg.SEED, default=1)
    ap.add_argument("--codec", choices=CODECS, default="int32")
    ap.add_argument("--timeout", type=arg.SECONDS, default=30.0, help="seconds any wait may take")
    ap.add_argument(
        "--start-at", type=arg.wall_clock, help="wall-clock time to begin the all_reduce at"
    )
    ap.add_argument("--out", type=Path, help="write the result here (.npy)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    name = f"gloo worker {args.rank}"
    if not 0 <= args.rank < args.workers or args.size < 1 or not 0 < args.port < 65536:
        need = "need 0 <= --rank < --workers, --size >= 1, --port 1..65535"
        print(f"{name}: {need}", file=sys.stderr)
        return 2
    if not args.timeout > 0:
        print(f"{name}: --timeout must be > 0 seconds", file=sys.stderr)
        return 2
    try:
        ifname = interface_of(args.local_ip)
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"{name}: host set-up failed: {exc}", file=sys.stderr)
        return 2
    os.environ["GLOO_SOCKET_IFNAME"] = ifname
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")  # its failure is our one line
    import torch  # after GLOO_SOCKET_IFNAME; slow to import, so after the argument checks
    import torch.distributed as dist

    torch.set_num_threads(1)
    x = worker_input(args.seed, args.rank, args.size, codec=args.codec)
    tensor = torch.from_numpy(x.copy())
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{args.master}:{args.port}",
            rank=args.rank,
            world_size=args.workers,
            timeout=timedelta(seconds=args.timeout),
        )
        try:
            dist.barrier()
            if args.start_at is not None:
                time.sleep(max(0.0, args.start_at - time.time()))
            sent = tx_bytes(ifname)
            wall_start = time.time()
            started, cpu = time.perf_counter(), time.process_time()
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            seconds = time.perf_counter() - started
            cpu_seconds = time.process_time() - cpu
            sent = tx_bytes(ifname) - sent
            dist.barrier()  # nobody leaves while another still reads from it
        finally:
            dist.destroy_process_group()
    except (RuntimeError, ValueError, OSError) as exc:  # torch's DistError is a RuntimeError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        print(f"{name}: {first}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    result = tensor.numpy()
    line = {
        "rank": args.rank,
        "seconds": round(seconds, 4),
        "start": round(wall_start, 4),
        "end": round(wall_start + seconds, 4),
        "cpu_seconds": round(cpu_seconds, 4),
        "digest": digest(result),
        "bytes_sent": sent,
    }
    print(json.dumps(line), flush=True)
    if args.out is not None:
        np.save(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
