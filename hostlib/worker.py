"""One training worker as a process: all-reduce a generated array through the switch with the
kernel's UDP stack, the way a worker on a Mininet host or a network namespace does.

    python -m inaemu.hostlib.worker --job 1 --workers 4 --rank 0 \\
        --local-ip 10.0.0.1 --switch-ip 10.0.0.254 --switch-mac 02:00:00:00:00:fe \\
        --size 100000 --seed 1 --codec int32 --out r0.npy

It sets up what the host needs (`--switch-mac`: a permanent ARP entry for the switch's
aggregation address, so the first packets are not lost to ARP), generates its input like the
demo's workers (`worker_input`), runs `--repeat` allreduces, writes the last result to
`--out` (.npy) and prints one JSON line per allreduce: rank, seconds, its `start` and `end`
on the wall clock (Unix seconds), the CPU seconds it took, digest of the result and the
client's counters (`ClientStats.summary()`: packets, retransmissions and the spurious ones
it saw, timeouts, congestion window, SRTT and RTO). `--start-at` holds the first allreduce
until a wall-clock time, so that workers started one by one begin together (a benchmark
measures from there); `--fixed-window` keeps the whole window in flight (SwitchML's fixed
window, no congestion control). Exit status: 0 done; 1 the allreduce failed (the message
names the job and the chunks that got no result); 2 bad arguments or host set-up.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.hostlib import args as arg
from inaemu.hostlib.client import InaClient, InaError
from inaemu.hostlib.codecs import CODECS, make_codec
from inaemu.hostlib.transport import TransportError, UdpTransport


def worker_input(
    seed: int, rank: int, size: int, density: float = 1.0, codec: str = "fixedpoint"
) -> npt.NDArray[Any]:
    """Worker `rank`'s gradient: N(0, 0.01) float32 (int32 in +-2^20 for the int32 codec),
    a fraction `density` of it non-zero. The same (seed, rank) always gives the same array."""
    rng = np.random.default_rng([seed, rank])
    if codec == "int32":
        x: npt.NDArray[Any] = rng.integers(-(2**20), 2**20, size, dtype=np.int32)
    else:
        x = (rng.standard_normal(size) * 0.01).astype(np.float32)
    if density < 1.0:
        x[rng.random(size) >= density] = 0.0
    return x


def digest(x: npt.NDArray[Any]) -> str:
    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()[:16]


def add_static_arp(ip: str, mac: str, local_ip: str) -> None:
    """A permanent neighbour entry for the switch's aggregation address on the interface that
    holds `local_ip` (needs CAP_NET_ADMIN, as on a Mininet host)."""
    out = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    devs = [ln.split()[1] for ln in out.splitlines() if f" {local_ip}/" in ln]
    if not devs:
        raise OSError(f"no interface has the address {local_ip}")
    proc = subprocess.run(
        ["ip", "neigh", "replace", ip, "lladdr", mac, "dev", devs[0], "nud", "permanent"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise OSError(f"cannot add the ARP entry {ip} -> {mac}: {proc.stderr.strip()}")


def build_parser() -> argparse.ArgumentParser:
    ap = arg.ArgumentParser(
        prog="python -m inaemu.hostlib.worker",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    ap.add_argument("--job", type=arg.JOB_ID, required=True)
    ap.add_argument("--workers", type=arg.WORKERS, required=True, help="the job's worker count")
    ap.add_argument("--rank", type=arg.RANK, required=True, help="this worker, 0..workers-1")
    ap.add_argument("--local-ip", required=True)
    ap.add_argument("--switch-ip", required=True, help="the switch's aggregation address")
    ap.add_argument("--switch-mac", help="add a permanent ARP entry for --switch-ip (root)")
    ap.add_argument("--size", type=arg.ELEMENTS, default=100_000, help="elements per worker")
    ap.add_argument("--seed", type=arg.SEED, default=1)
    ap.add_argument("--density", type=arg.DENSITY, default=1.0)
    ap.add_argument("--codec", choices=sorted(CODECS), default="int32")
    ap.add_argument("--window", type=arg.WINDOW, default=64, help="the job's pool size")
    ap.add_argument(
        "--fixed-window",
        action="store_true",
        help="keep the whole window in flight (no congestion control)",
    )
    ap.add_argument("--trees", type=arg.Integer(1, arg.MAX_TREES, "a number of trees"), default=1)
    ap.add_argument(
        "--run",
        type=arg.RUN_ID,
        default=0,
        help="run id (0..65535): the same on every worker of a run, new for each run",
    )
    ap.add_argument("--repeat", type=arg.REPEAT, default=1, help="allreduces of the same input")
    ap.add_argument("--timeout", type=arg.SECONDS, default=30.0, help="seconds without progress")
    ap.add_argument(
        "--start-at",
        type=arg.wall_clock,
        help="wall-clock time (Unix seconds) to begin the first allreduce at",
    )
    ap.add_argument("--out", type=Path, help="write the last result here (.npy)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    name = f"worker {args.rank}"
    if not 0 <= args.rank < args.workers:
        print(f"{name}: --rank must be within 0..{args.workers - 1}", file=sys.stderr)
        return 2
    if args.window % args.trees:
        print(f"{name}: --window {args.window} must be a multiple of --trees", file=sys.stderr)
        return 2
    try:
        if args.switch_mac:
            add_static_arp(args.switch_ip, args.switch_mac, args.local_ip)
        transport = UdpTransport(args.local_ip, args.switch_ip)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"{name}: host set-up failed: {exc}", file=sys.stderr)
        return 2
    x = worker_input(args.seed, args.rank, args.size, args.density, args.codec)
    client = InaClient(
        transport,
        job_id=args.job,
        window=args.window,
        n_workers=args.workers,
        n_trees=args.trees,
        give_up_after=args.timeout,
        run=args.run,
        congestion_control=not args.fixed_window,
    )
    codec = make_codec(args.codec)
    try:
        if args.start_at is not None:
            time.sleep(max(0.0, args.start_at - time.time()))
        for _ in range(args.repeat):
            wall_start = time.time()
            started, cpu = time.perf_counter(), time.process_time()
            out = client.allreduce(x, codec)
            seconds = time.perf_counter() - started
            line = {
                "rank": args.rank,
                "seconds": round(seconds, 4),
                "start": round(wall_start, 4),
                "end": round(wall_start + seconds, 4),
                "cpu_seconds": round(time.process_time() - cpu, 4),
                "digest": digest(out),
                **client.stats.summary(),
            }
            print(json.dumps(line), flush=True)
        if args.out is not None:
            np.save(args.out, out)
    except (InaError, TransportError) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    finally:
        transport.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
