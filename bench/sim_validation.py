"""The simulator against the emulator: the same algorithms, sizes and link rates on Mininet
(`inaemu mininet`, links shaped by htb, softswitch) and in the simulator (`inaemu sim`), side by
side (issue 23's acceptance test: completion times within 15 % of the emulated ones, ratios
between algorithms within 10 %, or a precise account of each difference). Root: Mininet.

    python bench/sim_validation.py                      # every setting (about 30 minutes here)
    python bench/sim_validation.py --only star:4 --repeat 1
    python bench/sim_validation.py --sim-only            # the simulator's side, no root

The settings are ones the Mininet runner measures as links-bound (docs/collectives.md,
docs/mininet.md: 2 Mbit/s per link on these topologies; the node model `all` on the tori).
The simulator runs what the emulator's links are: the same rate, no per-frame overhead beyond
the Ethernet frame (htb counts the frame as the kernel does; ns-3's point-to-point adds 2
bytes), queues of 1,000 frames (a veth's txqueuelen under htb), and a one-way delay standing
for the emulator's per-hop processing (`--delay`, 50 us by default: kernel, veth, AF_PACKET,
the softswitch's batch); the INA window of the Mininet runner (64).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SETTINGS = [  # (topology, algorithms, int32 per worker, Mbit/s)
    ("star:4", "ina,ring,ps", 128 * 1024, 2.0),
    ("leaf-spine:2x2x2", "ina,ring,hd", 128 * 1024, 2.0),
    ("bigraph:2x4", "ina,hd,hdrm,ring", 128 * 1024, 2.0),
    ("torus:3x3", "ina,ring,multitree", 128 * 1024, 2.0),
    ("torus:4x4", "ina,ring,multitree", 128 * 1024, 2.0),
]


def rows(argv: list[str], run_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Run one inaemu command; its summary's rows by algorithm."""
    proc = subprocess.run(
        [sys.executable, "-m", "inaemu.cli", *argv, "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
    )
    summary = run_dir / "summary.json"
    if not summary.is_file():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        raise RuntimeError(f"inaemu {' '.join(argv[:3])}: {' | '.join(tail)}")
    out: dict[str, list[dict[str, Any]]] = {}
    for row in json.loads(summary.read_text())["rows"]:
        out.setdefault(row["algo"], []).append(row)
    return out


def median(group: list[dict[str, Any]]) -> float:
    times = [r["seconds"] for r in group if r["verified"] and r["seconds"] is not None]
    return statistics.median(times) if times else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="one topology of the settings")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--delay", default="50us", help="the simulator's one-way link delay")
    ap.add_argument("--sim-only", action="store_true", help="no Mininet (no root needed)")
    args = ap.parse_args()
    if not args.sim_only and os.geteuid() != 0:
        print("sim_validation: Mininet needs root (or --sim-only)", file=sys.stderr)
        return 2
    chosen = [s for s in SETTINGS if args.only in (None, s[0])]
    results = []
    print(f"sim_validation: simulator delay {args.delay}, queue 1000p, overhead 0, window 64")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (topo, algos, size, mbit) in enumerate(chosen):
            common = ["--topo", topo, "--algo", algos, "--size", str(size), "--codec", "int32"]
            common += ["--repeat", str(args.repeat), "--window", "64"]
            sim = rows(
                ["sim", *common, "--rate", f"{mbit}M", "--delay", args.delay,
                 "--queue", "1000p", "--overhead", "0", "--timeout", "30"],
                Path(tmp) / f"sim{i}",
            )  # fmt: skip
            emu = (
                {}
                if args.sim_only
                else rows(["mininet", *common, "--bw", f"{mbit:g}"], Path(tmp) / f"emu{i}")
            )
            base = algos.split(",")[0]
            for algo in algos.split(","):
                s, e = median(sim.get(algo, [])), median(emu.get(algo, []))
                sb, eb = median(sim.get(base, [])), median(emu.get(base, []))
                r: dict[str, Any] = {
                    "topology": topo,
                    "algo": algo,
                    "size": size,
                    "mbit": mbit,
                    "emulated_s": e,
                    "simulated_s": s,
                    "sim_over_emu": s / e if e == e and e else None,
                    "ratio_to": base,
                    "emulated_ratio": e / eb if eb == eb and eb else None,
                    "simulated_ratio": s / sb if sb == sb and sb else None,
                    "emulated_bound": (emu.get(algo) or [{}])[0].get("bound_by"),
                    "simulated_bound": (sim.get(algo) or [{}])[0].get("bound_by"),
                }
                results.append(r)
                print(
                    f"{topo:<17} {algo:<10} emulated {e:8.3f} s  simulated {s:8.3f} s  "
                    f"sim/emu {_x(r['sim_over_emu'])}  vs {base}: emulated "
                    f"{_x(r['emulated_ratio'])} simulated {_x(r['simulated_ratio'])}  "
                    f"bound {r['emulated_bound']}/{r['simulated_bound']}",
                    flush=True,
                )
    print(json.dumps(results))
    return 0


def _x(v: Any) -> str:
    return "   -  " if v is None else f"{v:5.2f}x"


if __name__ == "__main__":
    sys.exit(main())
