"""One training worker as a process: it all-reduces a generated array through the switch with
the kernel's UDP stack, as a worker on a Mininet host or in a network namespace does.

    python -m inaemu.hostlib.worker --job 1 --workers 4 --rank 0 \\
        --local-ip 10.0.0.1 --mac 00:00:00:00:00:01 \\
        --switch-ip 10.0.0.254 --switch-mac 02:00:00:00:00:fe \\
        --run "$(inaemu job new-run -t topology.json --job 1)" \\
        --size 100000 --seed 1 --codec int32 --check --out r0.npy

Before it sends anything it checks the host (docs/protocol.md, "What a host needs"): the
interface facing the switch (the route from --local-ip to --switch-ip) must have --mac, the
MAC topology.json gives this host, because the switch addresses every result to that MAC and
the kernel drops frames to any other. With --switch-mac it adds a permanent ARP entry for the
switch's aggregation address (CAP_NET_ADMIN, as a Mininet host's processes have), since the
switch answers no ARP.

--run is the run id, required: the same on every worker of a run and new for every run of
the job's installation (`inaemu job new-run` issues 1, 2, ... and never one twice). A rerun
with the last run's id would get that run's sums back, or stall.

Its input is `worker_input(seed, rank, size, density, codec)`, the demo workers' input. It runs
--repeat allreduces, writes the last result to --out (.npy) and prints one JSON line per
allreduce: rank, seconds, its start and end on the wall clock (Unix seconds), the CPU seconds
it took, digest of the result (sha256, 16 hex digits: the same on every worker), "check" with
--check, and the client's counters (`ClientStats.summary()`: packets, retransmissions and the
spurious ones it saw, timeouts, congestion window, SRTT and RTO). With --check it compares
every result with the exact expected sum of all ranks' inputs (`expected_sum`: numpy's int32
sum, or the codec run against the reference switch), which it computes before starting.

Exit status: 0 done (and, with --check, every result exact); 1 an allreduce failed (the
message names the job and the chunks that got no result); 2 bad arguments or host set-up;
3 a result differs from the expected sum (--check); 130 interrupted. Errors are one line on
stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.common import args as arg
from inaemu.common.wire import INA_UDP_PORT
from inaemu.hostlib.client import InaClient, InaError, InaTimeoutError, warm_up
from inaemu.hostlib.codecs import CODECS, make_codec
from inaemu.hostlib.codecs.base import simulate_allreduce
from inaemu.hostlib.transport import TransportError, UdpTransport
from inaemu.topology.addresses import mac_bytes


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


def worker_inputs(
    seed: int, n_workers: int, size: int, density: float = 1.0, codec: str = "fixedpoint"
) -> list[npt.NDArray[Any]]:
    """Every one of `n_workers` workers' `worker_input`, in rank order."""
    return [worker_input(seed, rank, size, density, codec) for rank in range(n_workers)]


def expected_sum(
    seed: int, n_workers: int, size: int, density: float = 1.0, codec: str = "fixedpoint"
) -> npt.NDArray[Any]:
    """What every one of `n_workers` workers with `worker_input` must get
    (`expected_result`)."""
    return expected_result(worker_inputs(seed, n_workers, size, density, codec), codec)


def expected_result(inputs: Sequence[npt.NDArray[Any]], codec: str) -> npt.NDArray[Any]:
    """What every worker that all-reduces `inputs` with `codec` must get: numpy's exact sum
    of the inputs for the int32 codec (ValueError if it overflows int32), else the codec run
    against the reference switch (`simulate_allreduce`), which the switch matches bit for bit."""
    if codec == "int32":
        total = np.zeros(inputs[0].size if inputs else 0, np.int64)
        for x in inputs:
            total += x
        if total.size and (
            total.min() < np.iinfo(np.int32).min or total.max() > np.iinfo(np.int32).max
        ):
            raise ValueError("the int32 sum of the inputs overflows; use fewer workers")
        return np.asarray(total, dtype=np.int32)
    results, _ = simulate_allreduce(make_codec(codec), list(inputs))
    return results[0]


def digest(x: npt.NDArray[Any]) -> str:
    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()[:16]


def _ip(*args: str) -> str:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def facing_interface(switch_ip: str, local_ip: str) -> str:
    """The interface (of this network namespace) that traffic from `local_ip` to the switch's
    `switch_ip` leaves by, and its results arrive on."""
    out = _ip("-o", "route", "get", switch_ip, "from", local_ip)
    found = re.search(r" dev (\S+)", out)
    if found is None:
        raise OSError(f"no route from {local_ip} to {switch_ip}: {out.strip()}")
    return found.group(1)


def interface_mac(dev: str) -> str:
    """The MAC address of interface `dev`, lower case."""
    found = re.search(r"link/\S+ ([0-9a-fA-F:]{17})", _ip("-o", "link", "show", "dev", dev))
    if found is None:
        raise OSError(f"{dev} has no MAC address")
    return found.group(1).lower()


def check_mac(dev: str, mac: str) -> None:
    """Refuse, with the fix, if `dev` does not have `mac` (the topology's MAC of this host,
    the one the switch addresses results to)."""
    have = interface_mac(dev)
    if mac_bytes(have) != mac_bytes(mac):
        raise OSError(
            f"{dev} has MAC {have}, but results come addressed to {mac} (--mac: this host's "
            "mac in topology.json) and the kernel drops them: set it with `ip link set dev "
            f"{dev} address {mac}`, or give the host {have} in topology.json and reinstall "
            "the job"
        )


def add_static_arp(ip: str, mac: str, local_ip: str) -> None:
    """A permanent neighbour entry for the switch's aggregation address `ip` on the interface
    that faces the switch (needs CAP_NET_ADMIN, as on a Mininet host)."""
    dev = facing_interface(ip, local_ip)
    try:
        _ip("neigh", "replace", ip, "lladdr", mac, "dev", dev, "nud", "permanent")
    except OSError as exc:
        raise OSError(f"cannot add the ARP entry {ip} -> {mac}: {exc}") from None


def build_parser() -> argparse.ArgumentParser:
    ap = arg.ArgumentParser(
        prog="python -m inaemu.hostlib.worker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    job = ap.add_argument_group("the job (as `inaemu job add` installed it)")
    job.add_argument("--job", type=arg.JOB_ID, required=True, help="job id")
    job.add_argument("--workers", type=arg.WORKERS, required=True, help="the job's worker count")
    job.add_argument("--rank", type=arg.RANK, required=True, help="this worker, 0..workers-1")
    job.add_argument(
        "--window", type=arg.WINDOW, default=64, help="the job's pool size (default 64)"
    )
    job.add_argument(
        "--trees",
        type=arg.Integer(1, arg.MAX_TREES, "a number of trees"),
        default=1,
        help="the job's aggregation trees, as `job add` printed (n_trees, default 1)",
    )
    job.add_argument(
        "--run",
        type=arg.RUN_ID,
        help="run id, 1..65535: the same on every worker of a run and new for every run "
        "(`inaemu job new-run -t topology.json --job J` prints one); required",
    )
    host = ap.add_argument_group("this host and its switch")
    host.add_argument("--local-ip", required=True, help="this host's IPv4 address")
    host.add_argument(
        "--mac",
        help="this host's MAC in topology.json; the interface facing the switch must have it "
        "(checked: the switch addresses results to it); required",
    )
    host.add_argument(
        "--switch-ip", required=True, help="the switch's aggregation address (agg_ip)"
    )
    host.add_argument(
        "--udp-port",
        type=arg.UDP_PORT,
        default=INA_UDP_PORT,
        help="the UDP port this worker sends from and gets results at: its host's udp_port in "
        "topology.json plus its local rank (default %(default)s: a host of one worker)",
    )
    host.add_argument(
        "--switch-mac",
        help="the switch's agg_mac: add a permanent ARP entry for --switch-ip (CAP_NET_ADMIN)",
    )
    data = ap.add_argument_group("the allreduce")
    data.add_argument(
        "--size", type=arg.ARRAY, default=100_000, help="elements per worker (default 100,000)"
    )
    data.add_argument(
        "--seed", type=arg.SEED, default=1, help="input seed (worker_input; default 1)"
    )
    data.add_argument(
        "--density",
        type=arg.DENSITY,
        default=1.0,
        help="fraction of non-zero input elements (default 1.0)",
    )
    data.add_argument(
        "--codec", choices=sorted(CODECS), default="int32", help="codec (default int32)"
    )
    data.add_argument(
        "--repeat", type=arg.REPEAT, default=1, help="allreduces of the same input (default 1)"
    )
    data.add_argument(
        "--fixed-window",
        action="store_true",
        help="keep the whole window in flight (SwitchML's fixed window, no congestion control)",
    )
    data.add_argument(
        "--timeout",
        type=arg.SECONDS,
        default=30.0,
        help="give up after this many seconds without progress (default 30)",
    )
    data.add_argument(
        "--start-at",
        type=arg.wall_clock,
        help="wall-clock time (Unix seconds) to begin the first allreduce at, so that workers "
        "started one by one begin together",
    )
    data.add_argument(
        "--check",
        action="store_true",
        help="compare every result with the exact expected sum of all ranks' inputs; exit 3 "
        "on a difference",
    )
    data.add_argument("--out", type=Path, help="write the last result here (.npy)")
    return ap


def _refused(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments, if anything (one line)."""
    if not 0 <= args.rank < args.workers:
        return f"--rank must be within 0..{args.workers - 1}"
    if args.run is None:
        return (
            f"--run is required: the same new run id on every worker of this run of job "
            f"{args.job} (`inaemu job new-run -t topology.json --job {args.job}` prints one); "
            "a reused one gets the last run's sums back, or stalls"
        )
    if args.mac is None:
        return "--mac is required: this host's MAC in topology.json (results come to it)"
    try:
        mac_bytes(args.mac)
    except ValueError as exc:
        return f"--mac: {exc}"
    if args.window % args.trees:
        return f"--window {args.window} must be a multiple of --trees ({args.trees})"
    return None


def mismatch(got: npt.NDArray[Any], want: npt.NDArray[Any]) -> str | None:
    """None if `got` is `want` bit for bit, else one line on where it is not."""
    if got.shape == want.shape and np.array_equal(got, want):
        return None
    if got.shape != want.shape:
        return f"result has shape {got.shape}, expected {want.shape}"
    wrong = np.flatnonzero(got != want)
    i = int(wrong[0])
    return (
        f"{len(wrong)} of {got.size} elements differ from the expected sum "
        f"(first at [{i}]: {got[i].item()}, expected {want[i].item()})"
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    name = f"worker {args.rank}"
    why = _refused(args)
    if why is not None:
        print(f"{name}: {why}", file=sys.stderr)
        return 2
    want = None
    if args.check:  # before the host set-up: a sum that cannot be checked is refused at once
        try:
            want = expected_sum(args.seed, args.workers, args.size, args.density, args.codec)
        except ValueError as exc:
            print(f"{name}: --check: {exc}", file=sys.stderr)
            return 2
    try:
        dev = facing_interface(args.switch_ip, args.local_ip)
        check_mac(dev, args.mac)
        if args.switch_mac:
            add_static_arp(args.switch_ip, args.switch_mac, args.local_ip)
        transport = UdpTransport(args.local_ip, args.switch_ip, local_port=args.udp_port)
    except (OSError, ValueError) as exc:
        print(f"{name}: host set-up failed: {exc}", file=sys.stderr)
        return 2
    x = worker_input(args.seed, args.rank, args.size, args.density, args.codec)
    client = InaClient(
        transport,
        job_id=args.job,
        window=args.window,
        n_workers=args.workers,
        rank=args.rank,
        n_trees=args.trees,
        give_up_after=args.timeout,
        run=args.run,
        congestion_control=not args.fixed_window,
    )
    codec = make_codec(args.codec)
    warm_up(codec, x.dtype)  # compiled kernels loaded now, not inside the measured allreduce
    try:
        if args.start_at is not None:
            time.sleep(max(0.0, args.start_at - time.time()))
        for _ in range(args.repeat):
            wall_start = time.time()
            started, cpu = time.perf_counter(), time.process_time()
            out = client.allreduce(x, codec)
            seconds = time.perf_counter() - started
            wrong = None if want is None else mismatch(np.asarray(out), want)
            line = {
                "rank": args.rank,
                "seconds": round(seconds, 4),
                "start": round(wall_start, 4),
                "end": round(wall_start + seconds, 4),
                "cpu_seconds": round(time.process_time() - cpu, 4),
                "digest": digest(out),
                **({} if want is None else {"check": "wrong" if wrong else "exact"}),
                **client.stats.summary(),
            }
            print(json.dumps(line), flush=True)
            if wrong is not None:
                print(f"{name}: wrong result: {wrong}", file=sys.stderr)
                return 3
        if args.out is not None:
            np.save(args.out, out)
    except InaTimeoutError as exc:
        print(
            f"{name}: {exc} Results come addressed to the MAC that the job's topology gives "
            f"this host; {dev} has {args.mac} (--mac): if that topology says another, the "
            "kernel drops them",
            file=sys.stderr,
        )
        return 1
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
