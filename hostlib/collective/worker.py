"""One rank of a host collective as a process: all-reduce a generated array by running an
allreduce schedule over a TCP mesh, the baseline counterpart of `inaemu.hostlib.worker`.

    python -m inaemu.hostlib.collective.worker --schedule ring.json --rank 0 \\
        --peers 10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000,10.0.0.4:7000 \\
        --size 100000 --seed 1 --codec plain --out r0.npy

Rank R listens on the R-th address of `--peers` (or on `--listen-fd`, a listening socket its
launcher bound and passed down), connects to the lower ranks and accepts the higher ones; the
hello carries a digest of `--token` (by default derived from the schedule file, the peer list
and `--run`), so connections from anything else are refused. The input is `worker_input(seed,
rank, size, density, codec)`, exactly as the INA worker's. It runs `--repeat` allreduces,
writes the last result to `--out` (.npy) and prints one JSON line per allreduce: rank, algo,
seconds, `start` and `end` on the wall clock (Unix seconds), cpu_seconds, digest of the result,
and this allreduce's bytes sent and received (message bytes, in total and per peer), messages,
steps and time per step. `--start-at` holds the first allreduce until a wall-clock time.

Codecs: plain (float32 sums in the schedule's order), fixedpoint (bit for bit the switch's
result), inceptionn (`--bound`, compression on every hop), and the other INA codecs (int32,
sketch, sketch-compact). Exit status: 0 done; 1 a peer failed (the message names its rank and
address) or the codec did (e.g. an int32 sum that overflowed); 2 bad arguments; 130
interrupted. Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import socket
import sys
import time
from pathlib import Path

import numpy as np

from inaemu.collectives.schedule import Schedule, ScheduleError
from inaemu.common import args as arg
from inaemu.common.jit import warm_up
from inaemu.hostlib.codecs import loader
from inaemu.hostlib.codecs.inceptionn import DEFAULT_ERROR_BOUND
from inaemu.hostlib.collective.executor import (
    SCHEDULE_CODECS,
    InceptionnCodec,
    ScheduleClient,
    ScheduleCodec,
    make_schedule_codec,
)
from inaemu.hostlib.collective.peers import PeerError, parse_peers
from inaemu.hostlib.collective.tcp_peers import TcpPeers
from inaemu.hostlib.worker import digest, worker_input


def build_parser() -> argparse.ArgumentParser:
    ap = arg.ArgumentParser(
        prog="python -m inaemu.hostlib.collective.worker",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    ap.add_argument("--schedule", type=Path, required=True, help="a Schedule's JSON file")
    ap.add_argument("--rank", type=arg.RANK, required=True, help="this rank, 0..ranks-1")
    ap.add_argument("--peers", required=True, help="ip:port of every rank, in rank order")
    ap.add_argument(
        "--size",
        type=arg.ARRAY,
        default=100_000,
        help="elements per rank",
    )
    ap.add_argument("--seed", type=arg.SEED, default=1)
    ap.add_argument("--density", type=arg.DENSITY, default=1.0)
    ap.add_argument("--codec", choices=SCHEDULE_CODECS, default="plain")
    ap.add_argument(
        "--bound", type=float, default=DEFAULT_ERROR_BOUND, help="INCEPTIONN's error bound"
    )
    ap.add_argument("--repeat", type=arg.REPEAT, default=1, help="allreduces of the same input")
    ap.add_argument("--timeout", type=arg.SECONDS, default=30.0, help="seconds any wait may take")
    ap.add_argument(
        "--run",
        type=arg.RUN_ID,
        default=0,
        help="run id (0..65535): the same on every rank of a run",
    )
    ap.add_argument("--token", help="job token (default: from the schedule, peers and run)")
    ap.add_argument(
        "--start-at",
        type=arg.wall_clock,
        help="wall-clock time (Unix seconds) to begin the first at",
    )
    ap.add_argument(
        "--listen-fd",
        type=arg.file_descriptor,
        help="an inherited listening socket to accept peers on",
    )
    ap.add_argument("--out", type=Path, help="write the last result here (.npy)")
    return ap


def default_token(schedule_file: Path, peers: str, run: int) -> str:
    """The same on every rank that has the same schedule file, peer list and run."""
    h = hashlib.sha256(schedule_file.read_bytes())
    h.update(f"|{peers}|{run}".encode())
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    name = f"rank {args.rank}"
    try:
        schedule = Schedule.load(args.schedule)
        addresses = parse_peers(args.peers)
        codec: ScheduleCodec = make_schedule_codec(args.codec)
        if args.codec == "inceptionn":
            codec = InceptionnCodec(args.bound)
        if len(addresses) != schedule.n_ranks:
            raise ValueError(
                f"--peers names {len(addresses)} addresses, the schedule has "
                f"{schedule.n_ranks} ranks"
            )
        if not 0 <= args.rank < schedule.n_ranks:
            raise ValueError(f"--rank must be within 0..{schedule.n_ranks - 1}")
        token = args.token or default_token(args.schedule, args.peers, args.run)
        listener = None if args.listen_fd is None else socket.socket(fileno=args.listen_fd)
    except (ScheduleError, ValueError, OSError) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    x = worker_input(args.seed, args.rank, args.size, args.density, args.codec)
    warm_up(loader(codec, x.dtype))  # compiled kernels loaded now, not in the measured allreduce
    channel: TcpPeers | None = None
    try:
        channel = TcpPeers(
            args.rank, addresses, token=token, timeout=args.timeout, listener=listener
        )
        client = ScheduleClient(schedule, args.rank, channel, timeout=args.timeout, run=args.run)
        if args.start_at is not None:
            time.sleep(max(0.0, args.start_at - time.time()))
        for _ in range(args.repeat):
            sent0, received0 = channel.bytes_sent(), channel.bytes_received()
            messages0, steps0 = client.stats.messages_sent, len(client.stats.step_log)
            wall_start = time.time()
            started, cpu = time.perf_counter(), time.process_time()
            out = client.allreduce(x, codec)
            seconds = time.perf_counter() - started
            sent = [b - b0 for b, b0 in zip(channel.bytes_sent(), sent0, strict=True)]
            got = [b - b0 for b, b0 in zip(channel.bytes_received(), received0, strict=True)]
            steps = client.stats.step_log[steps0:]  # of every phase of the codec
            line = {
                "rank": args.rank,
                "algo": schedule.algo,
                "codec": args.codec,
                "seconds": round(seconds, 4),
                "start": round(wall_start, 4),
                "end": round(wall_start + seconds, 4),
                "cpu_seconds": round(time.process_time() - cpu, 4),
                "digest": digest(out),
                "bytes_sent": sum(sent),
                "bytes_received": sum(got),
                "bytes_sent_per_peer": {str(r): b for r, b in enumerate(sent) if b},
                "bytes_received_per_peer": {str(r): b for r, b in enumerate(got) if b},
                "messages_sent": client.stats.messages_sent - messages0,
                "steps": len(steps),
                "step_seconds_max": round(max(steps), 6) if steps else None,
                "step_seconds_mean": round(sum(steps) / len(steps), 6) if steps else None,
            }
            print(json.dumps(line), flush=True)
        channel.close()
        if args.out is not None:
            np.save(args.out, out)
    except PeerError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    except (ScheduleError, ValueError, TypeError) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a codec's own failure (e.g. SumOverflow): one line, no trace
        print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if channel is not None:
            try:
                channel.close()
            except PeerError:
                pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
