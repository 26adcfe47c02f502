"""The seed papers at their own settings, simulated: every run is `inaemu sim` (ns-3, the
project's switch pipeline and host protocols, docs/sim.md), every result checked.

    .venv/bin/python bench/papers_sim.py [--quick] [--paper multitree|eflops|ina|all]
        [--out build/papers-sim]

- MULTITREE (ISCA'21): its setting, an 8x8 torus whose nodes drive their four links at once,
  16 GB/s (128 Gbit/s) links with 150 ns per hop and 256-byte payloads (TCP segments of 256 B,
  `--mtu 308`); multitree against ring, 2D ring and the double binary tree from 16 KB to 4 MB
  per node (latency- to bandwidth-bound); the average speedups beside 2.3x (over ring) and
  1.56x (over 2D-RING); weak scaling at 16, 64 and 256 nodes beside about 3x and 1.4x.
- EFLOPS (HPCA'20): HDRM on BiGraph against halving-doubling and ring on the same BiGraph,
  and against both on a leaf-spine of the same hosts with ECMP (flows hashed over the
  spines: the congestion EFLOPS names), 8 to 128 hosts at 100 Gbit/s; the largest ratio
  beside "up to 6.08x" and the trend with the host count.
- INA at scale: in-network aggregation (multi-tree and one tree) against ring,
  halving-doubling and MultiTree on leaf-spines of 16 to 1,024 hosts at 100 Gbit/s.
- training: INCEPTIONN's and the sketch paper's per-iteration speedups, an iteration being a
  model's published compute then the all-reduce of its gradients (`bench/paper_models.py`),
  the all-reduce simulated at two sizes and fitted to the model's.

`--quick` runs the smallest of each (about 2 minutes); the full run (about 33 minutes here)
prints its time at the end; docs/papers.md states both and the full run's tables. Writes
into `--out`:
`papers_sim.md` (the tables), `papers_sim.json` (every row of every run, the ratios, the
claims) and each run's `inaemu sim` run dir. Exit status 0 when every result was verified,
1 otherwise; without ns-3 (the `[sim]` extra) it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path("build/papers-sim")
PAPERS = ("multitree", "eflops", "ina", "training")
KIB = 1024

# the papers' settings (docs/papers.md quotes each with its source)
MULTITREE_LINKS = ("--rate", "128G", "--delay", "150ns", "--mtu", "308", "--node-ports", "all")
DATACENTER_LINKS = ("--rate", "100G", "--delay", "1us")


@dataclass(frozen=True)
class Sim:
    """One `inaemu sim` invocation: every algorithm at every size on one network."""

    paper: str
    name: str  # what the run is for: "main", "weak", "bigraph", "leaf-spine", ...
    topo: str
    algos: tuple[str, ...]
    sizes: tuple[int, ...]  # elements per worker
    options: tuple[str, ...] = ()
    codec: str = "int32"
    density: float = 1.0

    @property
    def label(self) -> str:
        """The run's directory name."""
        what = f"{self.paper}-{self.name}-{self.topo.replace(':', '-')}"
        if self.codec != "int32":
            what += f"-{self.codec}"
        return what + (f"-d{self.density:g}" if self.density < 1 else "")

    def argv(self, run_dir: Path) -> list[str]:
        density = ("--density", f"{self.density:g}") if self.density < 1 else ()
        return [
            *("-m", "inaemu.sim", "--topo", self.topo, "--algo", ",".join(self.algos)),
            *("--sizes", ",".join(str(s) for s in self.sizes), "--codec", self.codec),
            *density,
            *("--progress", "0", "--run-dir", str(run_dir), *self.options),
        ]


@dataclass
class Outcome:
    sim: Sim
    rows: list[dict[str, Any]] = field(default_factory=list)
    wall: float = 0.0
    error: str = ""

    def seconds(self, algo: str, size: int) -> float | None:
        for r in self.rows:
            if r["algo"] == algo and r["size"] == size and r["verified"]:
                return float(r["seconds"])
        return None


def bigraph_for(hosts: int) -> tuple[int, int]:
    """BiGraph(M, N) of `hosts` = M N hosts where HDRM runs (M, N powers of two, M <= N/2),
    as square as that allows."""
    best = None
    n = 2
    while n <= hosts:
        m = hosts // n
        if m * n == hosts and m <= n // 2 and (best is None or n - m < best[1] - best[0]):
            best = (m, n)
        n *= 2
    if best is None:
        raise ValueError(f"no BiGraph(M, N) with M <= N/2 has {hosts} hosts")
    return best


def plan(paper: str, quick: bool) -> list[Sim]:
    """The runs of one paper."""
    if paper == "multitree":
        algos = ("ring", "ring2d", "dtree", "multitree")
        if quick:
            return [Sim(paper, "main", "torus:4x4", algos, (4 * KIB, 64 * KIB), MULTITREE_LINKS)]
        sizes: tuple[int, ...] = (4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, 1024 * KIB)  # 16 KB-4 MB
        weak = ("ring", "ring2d", "multitree")
        return [
            Sim(paper, "main", "torus:8x8", algos, sizes, MULTITREE_LINKS),
            Sim(paper, "weak", "torus:4x4", weak, (256 * KIB,), MULTITREE_LINKS),
            Sim(paper, "weak", "torus:16x16", weak, (256 * KIB,), MULTITREE_LINKS),
        ]  # weak scaling at 64 nodes is the main run's 256K point
    if paper == "eflops":
        counts = (8, 16) if quick else (8, 16, 32, 64, 128)
        sizes = (64 * KIB,) if quick else (64 * KIB, 1024 * KIB)  # 256 KB and 4 MB per host
        runs = []
        for hosts in counts:
            m, n = bigraph_for(hosts)
            leaf = f"leaf-spine:{n // 2}x{2 * m}x{2 * m}"  # the same hosts, full bisection
            runs.append(
                Sim(paper, "bigraph", f"bigraph:{m}x{n}", ("hdrm", "hd", "ring"), sizes,
                    DATACENTER_LINKS)
            )  # fmt: skip
            runs.append(
                Sim(paper, "leaf-spine", leaf, ("hd", "ring"), sizes, (*DATACENTER_LINKS, "--ecmp"))
            )
        return runs
    if paper == "ina":
        size = (64 * KIB,) if quick else (256 * KIB,)  # 1 MB per worker
        shapes = ("2x4x4", "4x4x4") if quick else ("2x8x8", "8x8x8", "16x16x16")
        every = ("ina", "ina-1tree", "ring", "hd", "multitree")
        runs = [
            Sim(paper, "leaf-spine", f"leaf-spine:{s}", every, size, DATACENTER_LINKS)
            for s in shapes
        ]
        for k in (4,) if quick else (4, 8):  # fat trees of 16 and 128 hosts
            runs.append(Sim(paper, "fat-tree", f"fat-tree:{k}", every, size, DATACENTER_LINKS))
        if not quick:  # INA with each codec that runs on a switch, on 64 hosts
            for codec in ("fixedpoint", "sketch"):
                runs.append(
                    Sim(paper, "codec", "leaf-spine:8x8x8", ("ina",), size, DATACENTER_LINKS,
                        codec=codec)
                )  # fmt: skip
        if not quick:  # 1,024 hosts: INA and the ring only, to keep the full run near 30 min
            runs.append(
                Sim(paper, "leaf-spine", "leaf-spine:32x32x32", ("ina", "ring"), size,
                    DATACENTER_LINKS)
            )  # fmt: skip
        return runs
    if paper == "training":
        return training_plan(quick)
    raise ValueError(paper)


def run(sim: Sim, out: Path) -> Outcome:
    run_dir = out / "runs" / sim.label
    run_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, *sim.argv(run_dir)], capture_output=True, text=True, check=False
    )
    outcome = Outcome(sim, wall=time.monotonic() - t0)
    (run_dir / "stdout.txt").write_text(proc.stdout + proc.stderr)
    summary = run_dir / "summary.json"
    if summary.exists():
        outcome.rows = json.loads(summary.read_text())["rows"]
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["(no output)"]
        outcome.error = f"exit {proc.returncode}: {tail[0]}"
    return outcome


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else a / b


def fmt_x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def fmt_s(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e6:.1f} us" if s < 1e-3 else f"{s * 1e3:.2f} ms"


def size_bytes(elements: int) -> str:
    b = 4 * elements
    return f"{b // KIB} KB" if b < KIB * KIB else f"{b // (KIB * KIB)} MB"


# ---------------------------------------------------------------------- MULTITREE


def multitree_report(outcomes: Sequence[Outcome]) -> tuple[list[str], dict[str, Any]]:
    main = next(o for o in outcomes if o.sim.name == "main")
    lines = [
        f"MULTITREE's setting: {main.sim.topo}, nodes driving their 4 links, 16 GB/s links, "
        "150 ns, 256-byte payloads (TCP segments of 256 B)",
        "",
        "| per node | ring | 2D ring | double binary tree | multitree | ring / multitree "
        "| 2D ring / multitree | dbtree / multitree |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    over: dict[str, list[float]] = {"ring": [], "ring2d": [], "dtree": []}
    for size in main.sim.sizes:
        t = {a: main.seconds(a, size) for a in main.sim.algos}
        r = {a: ratio(t[a], t["multitree"]) for a in over}
        for a, x in r.items():
            if x is not None:
                over[a].append(x)
        lines.append(
            f"| {size_bytes(size)} | {fmt_s(t['ring'])} | {fmt_s(t['ring2d'])} | "
            f"{fmt_s(t['dtree'])} | {fmt_s(t['multitree'])} | {fmt_x(r['ring'])} | "
            f"{fmt_x(r['ring2d'])} | {fmt_x(r['dtree'])} |"
        )
    mean = {a: statistics.fmean(xs) if xs else None for a, xs in over.items()}
    lines += [
        "",
        f"average over the sizes: multitree {fmt_x(mean['ring'])} over ring (paper 2.3x), "
        f"{fmt_x(mean['ring2d'])} over 2D ring (paper 1.56x), {fmt_x(mean['dtree'])} over "
        "the double binary tree",
    ]
    weak: dict[int, dict[str, float | None]] = {}
    for o in outcomes:
        if o.sim.name in ("weak", "main") and "multitree" in o.sim.algos:
            nodes = _nodes(o.sim.topo)
            size = 256 * KIB if 256 * KIB in o.sim.sizes else o.sim.sizes[-1]
            weak[nodes] = {a: o.seconds(a, size) for a in ("ring", "ring2d", "multitree")}
    if len(weak) > 1:
        lines += [
            "",
            "weak scaling, 1 MB per node:",
            "",
            "| nodes | ring | 2D ring | multitree | ring / multitree | 2D ring / multitree |",
            "| ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for nodes in sorted(weak):
            t = weak[nodes]
            lines.append(
                f"| {nodes} | {fmt_s(t['ring'])} | {fmt_s(t['ring2d'])} | "
                f"{fmt_s(t['multitree'])} | {fmt_x(ratio(t['ring'], t['multitree']))} | "
                f"{fmt_x(ratio(t['ring2d'], t['multitree']))} |"
            )
    data = {"average_over": mean, "per_size": over, "weak": {str(k): v for k, v in weak.items()}}
    return lines, data


def _nodes(topo: str) -> int:
    dims = [int(x) for x in topo.split(":", 1)[1].split("x")]
    if topo.startswith(("torus", "mesh", "bigraph")):
        return dims[0] * dims[1]
    if topo.startswith("leaf-spine"):
        return dims[0] * dims[2]
    if topo.startswith("fat-tree"):
        return dims[0] ** 3 // 4
    raise ValueError(topo)


# ---------------------------------------------------------------------- EFLOPS


def eflops_report(outcomes: Sequence[Outcome]) -> tuple[list[str], dict[str, Any]]:
    by_hosts: dict[int, dict[str, Outcome]] = {}
    for o in outcomes:
        by_hosts.setdefault(_nodes(o.sim.topo), {})[o.sim.name] = o
    sizes = outcomes[0].sim.sizes
    lines = [
        "EFLOPS: HDRM on BiGraph against halving-doubling (hd) and ring on it, and against both "
        "on a leaf-spine of the same hosts with ECMP; 100 Gbit/s, 1 us",
        "",
        "| hosts | per host | BiGraph | leaf-spine | hdrm | hd | ring | hd ECMP | ring ECMP "
        "| hd / hdrm | best leaf-spine / hdrm |",
        "| ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    table = []
    for hosts in sorted(by_hosts):
        bg, ls = by_hosts[hosts]["bigraph"], by_hosts[hosts]["leaf-spine"]
        for size in sizes:
            t = {a: bg.seconds(a, size) for a in ("hdrm", "hd", "ring")}
            e = {a: ls.seconds(a, size) for a in ("hd", "ring")}
            known = [x for x in e.values() if x is not None]
            best_ls = min(known) if known else None
            row = {
                "hosts": hosts, "size": size, **t,
                "hd_ecmp": e["hd"], "ring_ecmp": e["ring"],
                "hd_over_hdrm": ratio(t["hd"], t["hdrm"]),
                "leaf_spine_over_hdrm": ratio(best_ls, t["hdrm"]),
            }  # fmt: skip
            table.append(row)
            lines.append(
                f"| {hosts} | {size_bytes(size)} | {bg.sim.topo} | {ls.sim.topo} | "
                f"{fmt_s(t['hdrm'])} | {fmt_s(t['hd'])} | {fmt_s(t['ring'])} | "
                f"{fmt_s(e['hd'])} | {fmt_s(e['ring'])} | {fmt_x(row['hd_over_hdrm'])} | "
                f"{fmt_x(row['leaf_spine_over_hdrm'])} |"
            )
    ratios = [
        x for r in table for x in (r["hd_over_hdrm"], r["leaf_spine_over_hdrm"]) if x is not None
    ]
    largest = max(ratios, default=None)
    lines += ["", f"largest ratio over HDRM: {fmt_x(largest)} (paper: up to 6.08x)"]
    return lines, {"rows": table, "largest": largest}


# ---------------------------------------------------------------------- INA at scale


def ina_report(outcomes: Sequence[Outcome]) -> tuple[list[str], dict[str, Any]]:
    algos = ("ina", "ina-1tree", "ring", "hd", "multitree")
    lines = [
        "In-network aggregation at scale: leaf-spines (L leaves x S spines x H hosts a leaf) "
        "and fat trees, 100 Gbit/s, 1 us; int32 unless the codec says otherwise",
        "",
        "| hosts | topology | codec | per host | " + " | ".join(algos) + " | ring / ina | best "
        "host collective / ina |",
        "| ---: | --- | --- | ---: | " + " | ".join("---:" for _ in algos) + " | ---: | ---: |",
    ]
    table = []
    for o in sorted(outcomes, key=lambda o: (o.sim.name == "codec", _nodes(o.sim.topo))):
        for size in o.sim.sizes:
            t = {a: o.seconds(a, size) for a in algos}
            hosts_best = [x for a in ("ring", "hd", "multitree") if (x := t[a]) is not None]
            ring_x = ratio(t["ring"], t["ina"])
            best_x = ratio(min(hosts_best), t["ina"]) if hosts_best else None
            row: dict[str, Any] = {
                "hosts": _nodes(o.sim.topo), "topo": o.sim.topo, "codec": o.sim.codec,
                "size": size, **t,
                "ring_over_ina": ring_x, "best_over_ina": best_x,
            }  # fmt: skip
            table.append(row)
            lines.append(
                f"| {row['hosts']} | {o.sim.topo} | {o.sim.codec} | {size_bytes(size)} | "
                + " | ".join(fmt_s(t[a]) for a in algos)
                + f" | {fmt_x(ring_x)} | {fmt_x(best_x)} |"
            )
    return lines, {"rows": table}


# ---------------------------------------------------------------------- training speedups
#
# An iteration is its compute, then the all-reduce of every gradient (bench/paper_models.py:
# the models' sizes from their layer shapes, published compute times with their sources). The
# all-reduce is simulated at two sizes on the paper's kind of network; both algorithms are
# links- or window-bound there, so their time is a + b x size, and the fit gives it at the
# model's size (the largest models are 60-140 M elements: simulated whole, they would take
# this machine hours). The speedup is the baseline's iteration over the system's.

INCEPTIONN_NET = ("star:4", ("--rate", "10G", "--delay", "1us"))  # 4 nodes, 10 GbE (recalled)
SKETCH_NET = ("star:8", ("--rate", "100G", "--delay", "1us"))  # not found: our choice
SKETCH_DENSITY = {"ncf": 0.024, "lstm": 0.77, "bert_base": 0.78, "vgg19": 1.0}


def _paper_models() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "paper_models", Path(__file__).resolve().parent / "paper_models.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["paper_models"] = module
    spec.loader.exec_module(module)
    return module


def training_plan(quick: bool) -> list[Sim]:
    sizes = (64 * KIB, 256 * KIB) if quick else (1024 * KIB, 4096 * KIB)
    topo, links = INCEPTIONN_NET
    runs = [
        Sim("training", "inceptionn", topo, ("ps",), sizes, links, codec="plain"),
        Sim("training", "inceptionn", topo, ("ring",), sizes, links, codec="inceptionn"),
    ]
    topo, links = SKETCH_NET
    runs.append(Sim("training", "sketch", topo, ("ina",), sizes, links, codec="fixedpoint"))
    densities = sorted(set(SKETCH_DENSITY.values()))
    for d in densities[:1] if quick else densities:
        runs.append(Sim("training", "sketch", topo, ("ina",), sizes, links, "sketch", d))
    return runs


def fit(outcome: Outcome, algo: str) -> tuple[float, float] | None:
    """(a, b) of time = a + b x elements through the run's two sizes; None if either failed."""
    (n1, n2) = outcome.sim.sizes[:2]
    t1, t2 = outcome.seconds(algo, n1), outcome.seconds(algo, n2)
    if t1 is None or t2 is None:
        return None
    b = (t2 - t1) / (n2 - n1)
    return t1 - b * n1, b


def at(line: tuple[float, float] | None, elements: int) -> float | None:
    return None if line is None else line[0] + line[1] * elements


def training_report(outcomes: Sequence[Outcome]) -> tuple[list[str], dict[str, Any]]:
    pm = _paper_models()
    find = {(o.sim.name, o.sim.codec, o.sim.density): o for o in outcomes}
    lines = [
        "Per-iteration speedups with the papers' compute: iteration = compute + all-reduce "
        "(no overlap); the all-reduce simulated at "
        + " and ".join(size_bytes(n) for n in outcomes[0].sim.sizes)
        + " per worker and fitted linearly to the model's gradient",
        "",
        "| paper | model | gradient | density | compute (GPU, batch) | baseline all-reduce "
        "| system all-reduce | all-reduce speedup | iteration speedup | paper |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    table = []

    def add(paper: str, key: str, density: float, base: Any, system: Any) -> None:
        model = pm.MODELS[key]
        setting = pm.PAPERS[paper]
        comm_a, comm_b = at(base, model.params), at(system, model.params)
        compute = None  # the sketch, the newer paper: its models' newest GPU found
        if model.compute:
            compute = model.compute[-1 if paper == "sketch" else 0]
        comm_x = ratio(comm_a, comm_b)
        iter_x = None
        if compute is not None and comm_a is not None and comm_b is not None:
            iter_x = pm.iteration_speedup(compute.seconds, comm_a, comm_b)
        gpu = (
            "not found"
            if compute is None
            else f"{compute.seconds * 1e3:.1f} ms ({compute.gpu}, {compute.batch})"
        )
        claim = (
            f"{setting.speedup_low:g}-{setting.speedup_high:g}x"
            if setting.speedup_low != setting.speedup_high
            else f"up to {setting.speedup_high:g}x"
        )
        table.append({"paper": paper, "model": key, "params": model.params, "density": density,
                      "compute_s": None if compute is None else compute.seconds,
                      "compute_gpu": None if compute is None else compute.gpu,
                      "baseline_s": comm_a, "system_s": comm_b, "allreduce_speedup": comm_x,
                      "iteration_speedup": iter_x})  # fmt: skip
        lines.append(
            f"| {paper} | {model.name} | {model.gradient_bytes / 2**20:.0f} MiB | {density:g} | "
            f"{gpu} | {fmt_s(comm_a)} | {fmt_s(comm_b)} | {fmt_x(comm_x)} | {fmt_x(iter_x)} | "
            f"{claim} |"
        )

    ps, ring = find.get(("inceptionn", "plain", 1.0)), find.get(("inceptionn", "inceptionn", 1.0))
    if ps and ring:
        for key in pm.PAPERS["inceptionn"].models:
            add("inceptionn", key, 1.0, fit(ps, "ps"), fit(ring, "ring"))
    fixed = find.get(("sketch", "fixedpoint", 1.0))
    for key in pm.PAPERS["sketch"].models:
        sketch = find.get(("sketch", "sketch", SKETCH_DENSITY[key]))
        if fixed and sketch:
            add("sketch", key, SKETCH_DENSITY[key], fit(fixed, "ina"), fit(sketch, "ina"))
    lines += [
        "",
        "INCEPTIONN: the worker-aggregator without compression (ps, plain) against the ring with "
        "INCEPTIONN's codec, star:4 at 10 Gbit/s; the sketch: INA with the sketch against INA "
        "with fixed point, star:8 at 100 Gbit/s, at each model's gradient density "
        "(bench/paper_models.py and docs/papers.md say where each number comes from)",
    ]
    return lines, {"rows": table}


REPORTS = {
    "multitree": multitree_report,
    "eflops": eflops_report,
    "ina": ina_report,
    "training": training_report,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the smallest of each: a few minutes")
    ap.add_argument("--paper", choices=(*PAPERS, "all"), default="all")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    from inaemu.sim.engine import ns3_available

    missing = ns3_available()
    if missing is not None:
        print(f"papers_sim: skipped: {missing}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    papers = PAPERS if args.paper == "all" else (args.paper,)
    t0 = time.monotonic()
    report: list[str] = []
    data: dict[str, Any] = {"quick": args.quick, "papers": {}}
    ok = True
    for paper in papers:
        outcomes = []
        for sim in plan(paper, args.quick):
            print(f"{paper}: {sim.topo} {','.join(sim.algos)} ...", flush=True)
            o = run(sim, args.out)
            bad = [r for r in o.rows if not r["skipped"] and not r["verified"]]
            ok = ok and not o.error and not bad
            note = o.error or (f"{len(bad)} not verified" if bad else "every result verified")
            print(f"  {o.wall:.0f} s wall: {note}", flush=True)
            outcomes.append(o)
        lines, summary = REPORTS[paper](outcomes)
        report += [f"## {paper}", "", *lines, ""]
        data["papers"][paper] = {
            "summary": summary,
            "runs": [
                {"topo": o.sim.topo, "name": o.sim.name, "argv": o.sim.argv(Path("RUN")),
                 "wall": o.wall, "error": o.error, "rows": o.rows}
                for o in outcomes
            ],
        }  # fmt: skip
    wall = time.monotonic() - t0
    report.append(f"({'quick' if args.quick else 'full'} run: {wall / 60:.1f} min on this machine)")
    data["wall_seconds"] = wall
    text = "\n".join(report) + "\n"
    (args.out / "papers_sim.md").write_text(text)
    (args.out / "papers_sim.json").write_text(json.dumps(data, indent=1, default=str) + "\n")
    print(text)
    print(f"written: {args.out}/papers_sim.md, papers_sim.json, runs/")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
