"""End-to-end allreduce throughput through the softswitch (what `inaemu demo` runs).

    python bench/bench_allreduce.py [--size 1000000] [--workers 2 4 8] [--codec fixedpoint]

For each worker count: a softswitch process, the controller over gRPC, N worker processes
with the real client and codec; prints elements/s per worker and summed over workers, packets
and retransmissions. Seeds are fixed; numbers depend on the machine (printed first).
"""

from __future__ import annotations

import os
import platform

import numpy as np

from inaemu.cli.demo import DemoOptions, run_demo
from inaemu.common import args as arg
from inaemu.common.wire import MAX_FANIN


def main() -> None:
    ap = arg.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=arg.ELEMENTS, default=1_000_000)
    ap.add_argument(
        "--workers", type=arg.positive("workers", MAX_FANIN), nargs="+", default=[2, 4, 8]
    )
    ap.add_argument("--codec", default="fixedpoint")
    ap.add_argument("--density", type=arg.DENSITY, default=1.0)
    args = ap.parse_args()
    print(
        f"# allreduce benchmark: {args.size:,} elements/worker, codec {args.codec}, "
        f"density {args.density}, python {platform.python_version()}, "
        f"numpy {np.__version__}, {os.cpu_count()} cpus"
    )
    print(
        f"{'workers':>7} {'seconds':>8} {'elem/s/worker':>14} {'elem/s summed':>14} "
        f"{'packets in':>11} {'retx':>6}"
    )
    for n in args.workers:
        report = run_demo(
            DemoOptions(
                workers=n,
                size=args.size,
                codec=args.codec,
                density=args.density,
                progress=False,
            )
        )
        t = max(r.seconds for r in report.results)
        rx = sum(
            v for (c, _), (v, _) in report.stats.switches["s1"].indexed.items() if c == "port_rx"
        )
        retx = sum(r.retransmissions for r in report.results)
        assert report.ok, report.render()
        print(
            f"{n:>7} {t:>8.2f} {args.size / t:>14,.0f} {args.size * n / t:>14,.0f} "
            f"{rx:>11,} {retx:>6,}"
        )


if __name__ == "__main__":
    main()
