"""How long building and checking the host-collective schedules takes:
`python bench/bench_schedules.py [--topo SPEC ...] [--reps R]`.

For every algorithm that runs on each topology (default torus:8x8, bigraph:8x8,
bigraph:8x16, mesh:8x8): the seconds to build the schedule and to check it (symbolic
simulation plus routing and measuring every transfer, routes computed afresh), best of R
runs, with the schedule's ranks, steps and transfers. `inaemu schedule` does exactly this
work, once per algorithm: it should stay within seconds for 64 ranks.
"""

from __future__ import annotations

import time

from inaemu.collectives.algorithms import ALGORITHMS
from inaemu.collectives.check import check
from inaemu.collectives.schedule import Schedule, ScheduleError
from inaemu.common import args as arg
from inaemu.topology.builders import from_spec
from inaemu.topology.routes import FlowRoutes

SIZE = 100_000_000


def main() -> None:
    ap = arg.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--topo",
        action="append",
        help="topology specs (default torus:8x8, bigraph:8x8, bigraph:8x16, mesh:8x8)",
    )
    ap.add_argument("--reps", type=arg.REPEAT, default=3)
    args = ap.parse_args()
    specs = args.topo or ["torus:8x8", "bigraph:8x8", "bigraph:8x16", "mesh:8x8"]
    print(
        f"{'topology':14} {'algorithm':10} {'ranks':>5} {'steps':>5} {'transfers':>9} "
        f"{'build s':>8} {'check s':>8}"
    )
    for spec in specs:
        topo = from_spec(spec)
        for name, algo in ALGORITHMS.items():
            build = check_time = float("inf")
            sched: Schedule | None = None
            try:
                for _ in range(args.reps):
                    t0 = time.perf_counter()
                    sched = algo.schedule(topo)
                    t1 = time.perf_counter()
                    check(sched, topo, SIZE, promised=algo.promises(topo), routes=FlowRoutes(topo))
                    t2 = time.perf_counter()
                    build, check_time = min(build, t1 - t0), min(check_time, t2 - t1)
            except ScheduleError:
                continue  # not for this topology
            assert sched is not None
            transfers = sum(len(s) for s in sched.steps)
            print(
                f"{spec:14} {name:10} {sched.n_ranks:5} {len(sched.steps):5} {transfers:9} "
                f"{build:8.3f} {check_time:8.3f}"
            )


if __name__ == "__main__":
    main()
