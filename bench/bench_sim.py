"""How far the simulator scales: wall seconds and peak memory per simulated allreduce, and
simulated packet-hops per second of wall time, for INA and the ring at 16, 64, 256 and 1,024
hosts (leaf-spine), and MultiTree on an 8x8 torus, 1 MB of int32 per host (issue 23's targets:
at least 100,000 packet-hops per second of wall time; a 64-node 1 MB MultiTree allreduce in
under a minute; a 1,024-host INA allreduce of 1 MB per host in under 10 minutes and 8 GB).

    python bench/bench_sim.py                          # every point (about 20 minutes here)
    python bench/bench_sim.py --hosts 16,64 --algos ina --host-poll 0
    python bench/bench_sim.py --quick                  # 16 and 64 hosts, 64K per host

Each point is one `inaemu sim` run in a process of its own (its child's peak resident memory
is the point's memory: `getrusage(RUSAGE_CHILDREN)` of a wrapper that runs only it), at
100 Gbit/s, 1 us. A packet-hop is one frame or TCP segment crossing one link (ns-3's
transmissions, every link direction); wall seconds are the simulation's (ns-3 loaded, the
network built, inputs made and results checked excluded), what bounds them is said per
algorithm: INA, the Python of the hosts' client and the switches' pipeline calls per batch of
frames; host collectives, ns-3's TCP events and one Python call per message.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LEAF_SPINE = {16: "leaf-spine:4x2x4", 64: "leaf-spine:8x4x8", 256: "leaf-spine:16x8x16",
              1024: "leaf-spine:32x16x32"}  # fmt: skip
WRAPPER = (
    "import resource, subprocess, sys; "
    "code = subprocess.run(sys.argv[1:]).returncode; "
    "print('PEAK_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
    "sys.exit(code)"
)


def point(topo: str, algo: str, size: int, host_poll: str, out: Path) -> dict[str, object]:
    """One `inaemu sim` run; its row's numbers, and the child's peak memory."""
    argv = [sys.executable, "-c", WRAPPER, sys.executable, "-m", "inaemu.cli", "sim"]
    argv += ["--topo", topo, "--algo", algo, "--size", str(size), "--run-dir", str(out)]
    argv += ["--host-poll", host_poll, "--progress", "60", "--limit", "3600"]
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    total = time.perf_counter() - started
    peak = next(
        (int(ln.split()[1]) for ln in proc.stdout.splitlines() if ln.startswith("PEAK_KB")), 0
    )
    if proc.returncode != 0 or not (out / "summary.json").is_file():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        return {"topo": topo, "algo": algo, "error": " | ".join(tail)}
    (row,) = json.loads((out / "summary.json").read_text())["rows"]
    hops = sum(u["a_to_b_packets"] + u["b_to_a_packets"] for u in row["links"])
    wall = row["wall_seconds"]
    return {
        "topo": topo,
        "algo": algo,
        "hosts": len(row["host_sent"]),
        "verified": row["verified"],
        "simulated_us": row["seconds"] * 1e6,
        "wall_s": wall,
        "command_s": total,
        "events": row["accounting"]["events"],
        "hops": hops,
        "hops_per_s": hops / wall if wall else 0.0,
        "peak_mib": peak / 1024,
        "bound": row["bound_by"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", default="16,64,256,1024", help="leaf-spine host counts")
    ap.add_argument("--algos", default="ina,ring", help="on the leaf-spines")
    ap.add_argument("--multitree", action=argparse.BooleanOptionalAction, default=True,
                    help="also MultiTree and the ring on torus:8x8 (64 nodes)")  # fmt: skip
    ap.add_argument("--size", type=int, default=256 * 1024, help="int32 per host (1 MB)")
    ap.add_argument("--host-poll", default="0", help="inaemu sim --host-poll (default 0)")
    ap.add_argument("--quick", action="store_true", help="16 and 64 hosts, 64K per host")
    args = ap.parse_args()
    hosts = [16, 64] if args.quick else [int(h) for h in args.hosts.split(",")]
    size = 64 * 1024 if args.quick else args.size
    plan = [(LEAF_SPINE[h], a) for h in hosts for a in args.algos.split(",")]
    if args.multitree:
        plan += [("torus:8x8", "multitree"), ("torus:8x8", "ring")]
    print(f"bench_sim: {size:,} int32 per host ({size * 4 / 2**20:g} MB), 100 Gbit/s, 1 us, "
          f"host poll {args.host_poll}")  # fmt: skip
    head = (
        f"{'topology':<22} {'algo':<10} {'hosts':>5} {'ok':>3} {'simulated':>11} "
        f"{'wall s':>8} {'events':>11} {'hops':>11} {'hops/s':>9} {'peak MiB':>9}  bound"
    )
    print(head)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (topo, algo) in enumerate(plan):
            r = point(topo, algo, size, args.host_poll, Path(tmp) / str(i))
            rows.append(r)
            if "error" in r:
                print(f"{topo:<22} {algo:<10} failed: {r['error']}")
                continue
            print(
                f"{topo:<22} {algo:<10} {r['hosts']:>5} {'yes' if r['verified'] else 'NO':>3} "
                f"{r['simulated_us']:>8.1f} us {r['wall_s']:>8.1f} {r['events']:>11,} "
                f"{r['hops']:>11,} {r['hops_per_s']:>9,.0f} {r['peak_mib']:>9,.0f}  {r['bound']}"
            )
    print(json.dumps(rows))
    return 0 if all(r.get("verified") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
