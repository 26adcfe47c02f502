"""What a host collective over ns-3's TCP costs to simulate (sim/collectives.py): wall and CPU
seconds per simulated allreduce and per simulated TCP segment, for the ring and MultiTree on a
4x4 and an 8x8 torus (16 and 64 nodes, node model all), 1 MB of int32 per node, 100 Gbit/s
links, 1 us (issue 23's target: a 64-node 1 MB MultiTree allreduce in under a minute).

    python bench/bench_sim_tcp.py                    # the four points (about a minute here)
    python bench/bench_sim_tcp.py --points torus:8x8/multitree --mtu 9000

Each point runs in a process of its own (its peak resident memory is the point's; ns-3 and
cling alone take about 700 MB). Per point: the simulated time and its link floor; the
executor's recording (every rank a thread, real values: wall seconds); the simulation's wall
and CPU seconds (the network built, inputs made and results checked excluded); TCP data
segments (retransmissions included) and packet-hops (every frame, data or ACK, crossing one
link); events. What bounds the simulation: ns-3's TCP and IPv4 events (about 10 per data
segment: each hop's transmission and reception, the ACK's, the timers), not Python (one call
per message).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

POINTS = ("torus:4x4/ring", "torus:4x4/multitree", "torus:8x8/ring", "torus:8x8/multitree")


def point(spec: str, algo: str, size: int, mtu: int, ecmp: bool) -> dict[str, Any]:
    """One simulated allreduce in this process."""
    from inaemu.hostlib.worker import worker_input
    from inaemu.sim.collectives import schedule_for, simulate_schedule
    from inaemu.sim.engine import Simulation, load
    from inaemu.sim.ipnet import IpNetwork
    from inaemu.sim.network import LinkSpec
    from inaemu.sim.tcp import TcpSettings
    from inaemu.topology.builders import from_spec

    started = time.perf_counter()
    ns3 = load()
    sim = Simulation(ns3)
    topo = from_spec(spec)
    settings = TcpSettings(mtu=mtu)
    link = LinkSpec()
    net = IpNetwork(sim, topo, link, mtu=mtu, ecmp=ecmp)
    sched = schedule_for(algo, topo, list(topo.hosts), link.node_ports)
    inputs = [worker_input(1, r, size, codec="int32") for r in range(sched.n_ranks)]
    out = simulate_schedule(sim, net, sched, inputs, "int32", settings)
    hops = sum(u.a_to_b_packets + u.b_to_a_packets for u in out.uses)
    segments = out.tcp["segments"]
    result = {
        "point": f"{spec}/{algo}",
        "nodes": sched.n_ranks,
        "verified": out.verified,
        "simulated_us": out.seconds * 1e6,
        "floor_us": out.floor_seconds * 1e6,
        "record_s": out.record_seconds,
        "wall_s": out.wall_seconds,
        "cpu_s": out.cpu_seconds,
        "segments": segments,
        "hops": hops,
        "events": out.events,
        "cpu_us_per_segment": out.cpu_seconds / segments * 1e6 if segments else 0.0,
        "cpu_us_per_hop": out.cpu_seconds / hops * 1e6 if hops else 0.0,
        "retransmissions": out.tcp["retransmissions"],
        "process_s": time.perf_counter() - started,
        "load_s": ns3.load_seconds,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    sim.close()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", default=",".join(POINTS), help="topology/algorithm, ...")
    ap.add_argument("--size", type=int, default=256 * 1024, help="int32 per node (1 MB)")
    ap.add_argument("--mtu", type=int, default=1500, choices=(1500, 9000))
    ap.add_argument("--ecmp", action="store_true", help="flow-hash ECMP routing")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a point, in the child process
    args = ap.parse_args()
    if args.one:
        spec, algo = args.one.split("/")
        print(json.dumps(point(spec, algo, args.size, args.mtu, args.ecmp)))
        return 0
    print(
        f"bench_sim_tcp: {args.size:,} int32 per node ({args.size * 4 / 2**20:g} MB), "
        f"100 Gbit/s, 1 us, MTU {args.mtu}, {'ECMP' if args.ecmp else 'the project routes'}"
    )
    print(
        f"{'point':<20} {'ok':>3} {'simulated':>11} {'floor':>9} {'record s':>8} {'wall s':>7} "
        f"{'cpu s':>6} {'segments':>9} {'us/seg':>7} {'hops':>10} {'us/hop':>6} "
        f"{'events':>10} {'process s':>9} {'peak MiB':>8}"
    )
    rows = []
    for p in args.points.split(","):
        argv = [sys.executable, __file__, "--one", p, "--size", str(args.size)]
        argv += ["--mtu", str(args.mtu)] + (["--ecmp"] if args.ecmp else [])
        proc = subprocess.run(argv, capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
            print(f"{p:<20} failed: {tail[0]}")
            rows.append({"point": p, "error": tail[0]})
            continue
        r = json.loads(lines[-1])
        rows.append(r)
        print(
            f"{p:<20} {'yes' if r['verified'] else 'NO':>3} {r['simulated_us']:>8.1f} us "
            f"{r['floor_us']:>6.1f} us {r['record_s']:>8.2f} {r['wall_s']:>7.2f} "
            f"{r['cpu_s']:>6.2f} {r['segments']:>9,} {r['cpu_us_per_segment']:>7.1f} "
            f"{r['hops']:>10,} {r['cpu_us_per_hop']:>6.2f} {r['events']:>10,} "
            f"{r['process_s']:>9.1f} {r['peak_mib']:>8,.0f}"
        )
    print(json.dumps(rows))
    return 0 if all(r.get("verified") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
