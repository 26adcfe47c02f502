"""Allreduces on Mininet with warm workers, for `bench/papers.py` (root): each worker runs its
allreduce twice and the second one is measured, as in training, where a worker's codec has
loaded its compiled kernels long before; and INA at a gradient density. Every result is
checked as `inaemu mininet` checks it, and one `summary.json` is written in its row format.

    python -m inaemu.mininet.papers_run --topo star:4 --algo ring,ps --codec inceptionn \\
        --sizes 256K,1M --bw 16 --run-dir DIR
    python -m inaemu.mininet.papers_run --topo star:4 --algo ina --codec fixedpoint,sketch \\
        --densities 0.024,0.14 --sizes 256K --bw 2 --run-dir DIR

Why: `inaemu mininet` starts a fresh worker process per run, whose first call of a compiled
codec (INCEPTIONN, fixed point, the sketch) loads its kernels from numba's cache inside the
measured allreduce: 0.2-0.5 s on this machine, more than a whole allreduce of 32K elements on
the compressed ring. Here every worker gets `--repeat 2` (both worker programs run that many
allreduces of the same input and report the last), the completion time is the second's
(each worker's last report: its `start` and `end`), and the link counters, which saw both
allreduces, are halved: both carried the same bytes. The rest is the runner's own pieces:
`Scenario`, `run_algorithm`, `row_of` (exact, or within the codec's error bound), its
algorithms (`mininet/algos.py`); for INA at a density every worker also gets `--density D`
(`worker_input(seed, rank, size, D, codec)`) and the results are checked against the codec
run on the reference switch with the same sparse inputs (`hostlib.worker.expected_sum`).
Rows carry `density` and `warm` besides the runner's fields.

Exit status: 0 every run verified; 1 a run failed its check; 2 bad arguments or the network
could not be built; 130 interrupted. The network is gone when it exits.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import secrets
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.common import args as arg
from inaemu.mininet import debian
from inaemu.mininet.algo_run import natural, row_of, run_algorithm
from inaemu.mininet.algos import CODECS, Algorithm, RunSpec, algorithm
from inaemu.mininet.run import algo_names, parse_sizes
from inaemu.mininet.scenario import (
    BW,
    NetOptions,
    RunDir,
    Scenario,
    ScenarioError,
    link_shaping,
)
from inaemu.runs.compare import LinkUse, truth
from inaemu.topology.builders import from_spec
from inaemu.topology.model import Topology, TopologyError

REPEAT = 2  # allreduces per worker: the first warms the codec, the second is measured


class Warm(Algorithm):
    """One of the runner's algorithms whose workers run `REPEAT` allreduces (and, for INA,
    draw inputs of a density); everything else is the algorithm's own."""

    name = "warm"

    def __init__(self, inner: Algorithm, density: float = 1.0) -> None:
        super().__init__(inner.node_ports)
        self.inner = inner
        self.density = density

    def refuse(self, topo: Topology, workers: tuple[str, ...], codec: str) -> str | None:
        return self.inner.refuse(topo, workers, codec)

    def check(self, codec: str) -> str:
        return self.inner.check(codec)

    def error_bound(
        self, codec: str, n_workers: int, abs_sum: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.float64]:
        return self.inner.error_bound(codec, n_workers, abs_sum)

    def prepare(self, sc: Scenario, spec: RunSpec) -> dict[str, str]:
        return self.inner.prepare(sc, spec)

    def finish(self, sc: Scenario, spec: RunSpec) -> None:
        self.inner.finish(sc, spec)

    def worker_argv(
        self, sc: Scenario, spec: RunSpec, rank: int, host: str, out: Path
    ) -> list[str]:
        argv = [*self.inner.worker_argv(sc, spec, rank, host, out), "--repeat", str(REPEAT)]
        return argv + (["--density", repr(self.density)] if self.density < 1.0 else [])


def halved(uses: list[LinkUse]) -> list[LinkUse]:
    """The bytes and packets of one of the `REPEAT` identical allreduces."""
    return [
        dataclasses.replace(
            u,
            a_to_b=u.a_to_b // REPEAT,
            b_to_a=u.b_to_a // REPEAT,
            a_to_b_packets=u.a_to_b_packets // REPEAT,
            b_to_a_packets=u.b_to_a_packets // REPEAT,
        )
        for u in uses
    ]


def _densities(text: str) -> list[float]:
    ds = [arg.DENSITY(p) for p in text.split(",")]
    if len(set(ds)) != len(ds):
        raise argparse.ArgumentTypeError(f"--densities {text}: a density is named twice")
    return ds


def _codecs(text: str) -> list[str]:
    names = [c.strip() for c in text.split(",")]
    for c in names:
        if c not in CODECS:
            raise argparse.ArgumentTypeError(f"--codec {text}: {c!r} is not one of {CODECS}")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"--codec {text}: a codec is named twice")
    return names


def build_parser() -> argparse.ArgumentParser:
    ap = arg.ArgumentParser(
        prog="python -m inaemu.mininet.papers_run",
        description="Allreduces with warm workers (and INA at densities) on Mininet (root).",
    )
    ap.add_argument("--topo", default="star:4", help="a built-in topology (default star:4)")
    ap.add_argument("--algo", default="ina", help="a comma list of the runner's algorithms")
    ap.add_argument("--codec", type=_codecs, default=["int32"], help="a comma list of codecs")
    ap.add_argument("--densities", type=_densities, default=[1.0], help="INA: e.g. 0.024,0.14")
    ap.add_argument("--sizes", type=parse_sizes, default=[1 << 16], help="elements, e.g. 64K")
    ap.add_argument("--bw", type=BW, default=None)
    ap.add_argument("--seed", type=arg.SEED, default=1)
    ap.add_argument("--timeout", type=arg.SECONDS, default=60.0)
    ap.add_argument("--limit", type=arg.SECONDS, default=900.0, help="seconds per run")
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--no-install", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    prog = "papers_run"
    try:
        topo = from_spec(args.topo)
        workers = tuple(
            sorted((h for h, x in topo.hosts.items() if x.role == "worker"), key=natural)
        )
        names = algo_names(args.algo)
        if any(d < 1.0 for d in args.densities) and any(not n.startswith("ina") for n in names):
            raise ValueError("--densities: only INA runs inputs of a density")
        plan: list[tuple[Warm, RunSpec]] = []
        for size in args.sizes:
            for density in args.densities:
                for codec in args.codec:
                    for name in names:
                        algo = Warm(algorithm(name), density)
                        why = algo.refuse(topo, workers, codec)
                        if why is not None:
                            raise ValueError(f"{name} with {codec}: {why}")
                        spec = RunSpec(
                            workers=workers,
                            size=size,
                            codec=codec,
                            seed=args.seed,
                            run_id=secrets.randbelow(0xFFFF) + 1,
                            window=64,
                            timeout=args.timeout,
                        )
                        plan.append((algo, spec))
        bandwidths = [p.get("bw") for p in link_shaping(topo, args.bw, "all")]
        debian.ensure(install=not args.no_install)
        run = RunDir.make(args.run_dir)
    except (TopologyError, ValueError, debian.MininetUnavailable, ScenarioError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    print(
        f"{prog}: {args.topo}, {len(workers)} workers, {len(plan)} runs of {REPEAT} allreduces "
        f"(the last measured)" + (f", links {args.bw:g} Mbit/s" if args.bw else ""),
        flush=True,
    )
    runs = []
    try:
        with Scenario(topo, run, NetOptions(switch="softswitch", bw=args.bw)) as sc:
            sc.program()
            for algo, spec in plan:
                tag = f"{algo.inner.name}-{spec.codec}-{spec.size}-{algo.density:g}"
                r = run_algorithm(sc, algo, spec, args.limit, tag)
                ok = sum(o.returncode == 0 for o in r.outcomes)
                print(f"  {tag}: {ok}/{len(workers)} workers done in {r.wall:.1f} s", flush=True)
                runs.append(r)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; network removed", file=sys.stderr)
        return 130
    except (ScenarioError, OSError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    for r in runs:
        warm = r.algo
        assert isinstance(warm, Warm)
        codec = r.spec.codec
        t = truth(
            codec,
            args.seed,
            len(workers),
            r.spec.size,
            exact=warm.check(codec) == "exact",
            density=warm.density,
        )
        r.links = halved(r.links)
        row, _, how = row_of(r, t, bandwidths)
        row = dataclasses.replace(row, algo=warm.inner.name)
        rows.append(
            {
                **row.to_json(),
                "density": warm.density,
                "warm": f"{REPEAT} allreduces per worker, the last measured; link bytes halved",
                "completion_measured": how,
                "wall_seconds": r.wall,
                "links": [asdict(u) for u in r.links],
                "worker_reports": [o.report for o in r.outcomes],
            }
        )
        mark = "verified" if row.verified else "FAILED: " + "; ".join(row.problems)
        print(
            f"  {row.algo:<10} {codec:<11} {r.spec.size:>9,} density {warm.density:<6g} "
            f"{row.seconds:8.3f} s  load {row.busiest_share or 0:.0%}  {mark}"
        )
        if row.verified:
            for o in r.outcomes:
                (r.results / f"{o.host}.npy").unlink(missing_ok=True)
    summary = {
        "topology": args.topo,
        "switch": "softswitch",
        "workers": list(workers),
        "sizes": args.sizes,
        "bw_mbit": args.bw,
        "codecs": args.codec,
        "densities": args.densities,
        "verified": all(r["verified"] for r in rows),
        "rows": rows,
        "run_dir": str(run.root),
    }
    (run.root / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return 0 if summary["verified"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
