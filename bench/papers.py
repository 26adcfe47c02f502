"""The seed papers' headline comparisons, emulated on Mininet: the paper's number, the emulated
number (median and spread over repeats) and the alpha-beta model's, side by side.

    sudo .venv/bin/python bench/papers.py [--quick] [--paper multitree|eflops|inceptionn|sketch|all]
        [--out build/papers] [--repeats N] [--alpha-ms 5] [--no-train]

- MULTITREE (ISCA'21): multitree vs ring and halving-doubling on torus:4x4, nodes driving
  their 4 links (`--node-ports all`), latency- to bandwidth-bound sizes;
- EFLOPS (HPCA'20): hdrm vs hd and ring on BiGraph, and ring and hd on a leaf-spine of the
  same hosts, every flow on shaped links;
- INCEPTIONN (MICRO'18): ring with INCEPTIONN vs the worker-aggregator (`ps`), plain and
  compressed, on 4 nodes; and `inaemu train` to the same accuracy;
- the lossless homomorphic sketch (2024): INA with the sketch vs INA with fixed point at the
  gradient densities of small models trained here (measured and printed).

Every comparison is `inaemu mininet` (or, for INA at a density, `python -m
inaemu.mininet.papers_ina`) started as a subprocess, one network per repeat (with `--lock
FILE`, each under `flock FILE`, so that other heavy runs taking that lock get in between);
every result is checked by the runner (exact, or within the codec's error bound) and its
`summary.json` is what this reads (with the runner's bottleneck accounting fields when it
writes them). The model is `collectives.check.predict_seconds` for a host collective (the
checker's steps and busiest-link bytes; alpha = `--alpha-ms` per step; TCP/IP framing of
1514-byte frames for 1448 bytes of payload), and for INA the codec's phases on the reference
switch (`codecs.simulate_allreduce`: 312-byte frames per phase on the host link, alpha per
phase).

Writes into `--out`: `<paper>.md` (the tables), `<paper>.png` (the plot), `papers.json`
(everything: every run, medians, ratios, model, claims, densities, timings), `runs/` (each
comparison's run dirs and logs). Exit status 0 when every result was checked and verified, 1
otherwise. Without root or Mininet it says so and exits 0. docs/papers.md explains the
settings, the numbers and every gap.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path("build/papers")
PAPERS = ("multitree", "eflops", "inceptionn", "sketch")
LINK_SLACK = 1.5  # completion within this of the busiest link's bytes at its rate: links-bound
TCP_FRAMING = 1514 / 1448  # Ethernet+IPv4+TCP (timestamps) bytes per payload byte, MTU 1500
SEED = 1


# ---------------------------------------------------------------------- the papers' claims


@dataclass(frozen=True)
class Claim:
    """One headline number of a paper, as the issue quotes it."""

    what: str
    paper: str  # the number as the paper states it
    value: float | None  # the ratio it amounts to (emulated / model are compared with it)
    ratio: str  # the key of the emulated ratio (`Ratio.key`) set beside it ("": none)


CLAIMS: dict[str, tuple[Claim, ...]] = {
    "multitree": (
        Claim("communication speedup over ring allreduce", "2.3x", 2.3, "ring/multitree"),
        Claim("over the best prior approach", "1.56x", 1.56, "best/multitree"),
        Claim("training time against ring", "up to 81% less", None, ""),
    ),
    "eflops": (
        Claim("BiGraph + HDRM communication speedup", "up to 6.08x", 6.08, "leaf-spine best/hdrm"),
        Claim("HDRM contention-free on BiGraph", "1 flow per link", 1.0, "hdrm max flows"),
    ),
    "inceptionn": (
        Claim(
            "communication time, compressed ring vs worker-aggregator",
            "76% lower (4.2x)",
            1 / 0.24,
            "ps-plain/ring-inceptionn",
        ),
        Claim("system (training) speedup", "2.2-3.1x", 2.65, "train ps-plain/ring-inceptionn"),
        Claim("epochs to the same accuracy", "1-2 more", None, "train iterations"),
    ),
    "sketch": (
        Claim("aggregation throughput over uncompressed INA", "up to 6.33x", 6.33, "fp/sketch"),
        Claim("iteration speed", "up to 3.74x", 3.74, ""),
    ),
}


# ---------------------------------------------------------------------- what runs


@dataclass(frozen=True)
class Comparison:
    """One Mininet invocation, run once per repeat on a network of its own: `inaemu
    mininet`, or with `warm` (compiled codecs) `mininet.papers_run`, whose workers run the
    allreduce twice and are measured on the second (docs/papers.md, "First calls")."""

    paper: str
    name: str
    topo: str
    algos: tuple[str, ...]  # the points' labels: algorithms, or INA's codecs (`densities`)
    codec: str
    sizes: tuple[int, ...]
    bw: float
    densities: tuple[float, ...] = ()  # INA with each codec of `algos` at these densities
    warm: bool = False

    def argv(self, run_dir: Path) -> list[str]:
        sizes = ",".join(str(s) for s in self.sizes)
        common = ["--run-dir", str(run_dir), "--no-install", "--bw", f"{self.bw:g}"]
        if self.densities:
            return [
                *("-m", "inaemu.mininet.papers_run", "--topo", self.topo, "--algo", "ina"),
                *("--codec", ",".join(self.algos), "--sizes", sizes),
                *("--densities", ",".join(f"{d:g}" for d in self.densities), *common),
            ]
        if self.warm:
            return [
                *("-m", "inaemu.mininet.papers_run", "--topo", self.topo),
                *("--algo", ",".join(self.algos), "--codec", self.codec, "--sizes", sizes),
                *common,
            ]
        many = "--sizes" if len(self.sizes) > 1 else "--size"
        return [
            *("-m", "inaemu.mininet", "--topo", self.topo, "--algo", ",".join(self.algos)),
            *("--codec", self.codec, many, sizes, "--node-ports", "all"),
            *("--timeout", "60", "--progress", "0", *common),
        ]


K = 1024


def plan(paper: str, quick: bool, densities: Sequence[float]) -> list[Comparison]:
    """The comparisons of one paper (docs/papers.md says why these settings)."""
    sizes: tuple[int, ...]
    if paper == "multitree":
        sizes = (16 * K,) if quick else (4 * K, 32 * K, 256 * K)
        return [
            Comparison(
                paper, "torus4x4", "torus:4x4", ("ring", "hd", "multitree"), "int32", sizes, 4.0
            ),
        ]
    if paper == "eflops":
        sizes = (16 * K,) if quick else (32 * K, 256 * K)
        out = [
            Comparison(
                paper, "bigraph2x4", "bigraph:2x4", ("ring", "hd", "hdrm"), "int32", sizes, 4.0
            ),
            Comparison(
                paper, "leafspine4x2x2", "leaf-spine:4x2x2", ("ring", "hd"), "int32", sizes, 4.0
            ),
        ]
        if not quick:  # the same comparison with half the hosts: how the ratio trends
            out += [
                Comparison(
                    paper,
                    "bigraph1x4",
                    "bigraph:1x4",
                    ("ring", "hd", "hdrm"),
                    "int32",
                    (256 * K,),
                    4.0,
                ),
                Comparison(
                    paper,
                    "leafspine2x2x2",
                    "leaf-spine:2x2x2",
                    ("ring", "hd"),
                    "int32",
                    (256 * K,),
                    4.0,
                ),
            ]
        return out
    if paper == "inceptionn":
        sizes = (64 * K,) if quick else (256 * K, 1024 * K)
        return [
            Comparison(paper, f"star4-{c}", "star:4", ("ring", "ps"), c, sizes, 16.0, warm=True)
            for c in ("plain", "inceptionn")
        ]
    if paper == "sketch":
        size = 64 * K if quick else 256 * K
        return [
            Comparison(
                paper,
                "star4-ina",
                "star:4",
                ("fixedpoint", "sketch"),
                "",
                (size,),
                2.0,
                tuple(densities),
                warm=True,
            ),
        ]
    raise ValueError(f"unknown paper {paper!r}")


# ---------------------------------------------------------------------- results


@dataclass
class Point:
    """One algorithm at one size (and density) in one repeat: a row of a runner's summary."""

    paper: str
    comparison: str
    topology: str
    algo: str
    codec: str
    size: int
    density: float
    repeat: int
    seconds: float
    verified: bool
    checked: str  # how the runner checked it: exact | bound ("" when it has no row)
    load: float | None  # the busiest link direction's bytes / what its rate carries
    host_sent_max: int
    busiest_link: str
    busiest_bytes: int
    bound: str  # links | emulator | unclear | not links | unknown
    bound_reason: str
    problems: list[str] = field(default_factory=list)


def bound_of(row: dict[str, Any]) -> tuple[str, str]:
    """What bounded a run: the runner's own accounting when its summary has it (`bound` as
    {by, reason} or `emulator_bound` and a reason), else from the link load alone: links
    when the completion time is within `LINK_SLACK` of the busiest link's bytes at its rate,
    otherwise `not links` (per-step latency or the emulator; no CPU accounting to tell)."""
    acc = row.get("bound")
    if isinstance(acc, dict) and "by" in acc:
        return str(acc["by"]), str(acc.get("reason", ""))
    if "emulator_bound" in row:
        reason = str(row.get("bound_reason") or row.get("reason") or "")
        by = "emulator" if row["emulator_bound"] else str(row.get("bound_by") or "links/unclear")
        return by, reason
    load = row.get("busiest_share")
    if load is None:
        return "unknown", "unshaped links"
    if load >= 1 / LINK_SLACK:
        return "links", f"busiest link {load:.0%} busy"
    return "not links", (
        f"busiest link {load:.0%} busy: per-step latency or the emulator "
        "(the runner reported no CPU accounting)"
    )


def points_of(comp: Comparison, repeat: int, summary: dict[str, Any] | None) -> list[Point]:
    """The points of one invocation; every expected point without a row is a failed one."""
    rows = {}
    for r in (summary or {}).get("rows", []):
        algo = r["codec"] if comp.densities else r["algo"]
        rows[(algo, int(r["size"]), float(r.get("density", 1.0)))] = r
    out = []
    for size in comp.sizes:
        for density in comp.densities or (1.0,):
            for algo in comp.algos:
                r = rows.get((algo, size, density))
                if r is None:
                    out.append(
                        Point(
                            comp.paper,
                            comp.name,
                            comp.topo,
                            algo,
                            comp.codec or algo,
                            size,
                            density,
                            repeat,
                            math.nan,
                            False,
                            "",
                            None,
                            0,
                            "-",
                            0,
                            "unknown",
                            "",
                            ["no result: see the log"],
                        )
                    )
                    continue
                by, reason = bound_of(r)
                out.append(
                    Point(
                        paper=comp.paper,
                        comparison=comp.name,
                        topology=comp.topo,
                        algo=algo,
                        codec=str(r["codec"]),
                        size=size,
                        density=density,
                        repeat=repeat,
                        seconds=float(r["seconds"]),
                        verified=bool(r["verified"]),
                        checked=str(r.get("check", "")),
                        load=r.get("busiest_share"),
                        host_sent_max=int(r.get("host_sent_max", 0)),
                        busiest_link=str(r.get("busiest_link", "-")),
                        busiest_bytes=int(r.get("busiest_bytes", 0)),
                        bound=by,
                        bound_reason=reason,
                        problems=list(r.get("problems", [])),
                    )
                )
    return out


@contextlib.contextmanager
def heavy_lock(path: Path | None) -> Iterator[float]:
    """`flock path` for one comparison (nothing without a path); yields the seconds waited.
    Opt-in (`--lock`): a suite run under `flock` on the same file would wait for itself."""
    if path is None:
        yield 0.0
        return
    started = time.monotonic()
    with path.open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"bench/papers.py: waiting for the lock {path} (another run holds it)")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield time.monotonic() - started
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run_comparison(
    comp: Comparison, repeat: int, out: Path, timings: list[dict[str, Any]], lock: Path | None
) -> list[Point]:
    run_dir = out / "runs" / comp.name / f"r{repeat}"
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log = run_dir.parent / f"r{repeat}.log"
    argv = [sys.executable, *comp.argv(run_dir)]
    (run_dir / "summary.json").unlink(missing_ok=True)
    with heavy_lock(lock) as waited, log.open("w") as f:
        started = time.monotonic()
        f.write(" ".join(argv) + "\n")
        f.flush()
        proc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
        took = time.monotonic() - started
    summary = None
    path = run_dir / "summary.json"
    if path.exists():
        summary = json.loads(path.read_text())
    pts = points_of(comp, repeat, summary)
    ok = all(p.verified for p in pts)
    print(
        f"  {comp.paper}/{comp.name} repeat {repeat}: exit {proc.returncode}, {took:.0f} s "
        f"(waited {waited:.0f} s for the lock), "
        + ("every result verified" if ok else f"FAILED (see {log})"),
        flush=True,
    )
    timings.append(
        {
            "comparison": comp.name,
            "repeat": repeat,
            "seconds": took,
            "lock_wait": waited,
            "exit": proc.returncode,
            "log": str(log),
        }
    )
    return pts


# ---------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Model:
    alpha: float  # seconds per step (host collectives) or per phase (INA)


def collective_prediction(
    topo_spec: str, algo: str, size: int, bw_mbit: float, model: Model, ratio: float = 1.0
) -> tuple[float, int, int]:
    """(seconds, steps, most flows on one link in one step) of the algorithm's own schedule on
    the topology (node model `all`) for `size` 4-byte elements, alpha-beta: every step alpha
    plus its busiest link's bytes at `bw_mbit` (TCP/IP framing included), the bytes times
    `ratio` (a codec's compression)."""
    from inaemu.collectives.algorithms import algorithm
    from inaemu.collectives.check import LinkModel, measure
    from inaemu.topology.builders import from_spec
    from inaemu.topology.routes import FlowRoutes

    topo = from_spec(topo_spec)
    sched = algorithm(algo).schedule_among(topo, list(topo.hosts), node_ports="all")
    bw = bw_mbit * 1e6 / 8 / TCP_FRAMING / ratio
    m = measure(sched, topo, 4 * size, routes=FlowRoutes(topo, "all"), model=LinkModel(bw, 0.0))
    assert m.seconds is not None
    return m.seconds + model.alpha * m.steps, m.steps, m.max_flows


def ina_frames(codec: str, inputs: Sequence[Any]) -> list[int]:
    """Frames one worker sends in each phase of `codec` on these inputs (reference switch)."""
    from inaemu.hostlib.codecs import frames_on_wire, make_codec, simulate_allreduce

    _, phases = simulate_allreduce(make_codec(codec), list(inputs))
    return [frames_on_wire([p]) for p in phases]


def ina_prediction(frames: Sequence[int], bw_mbit: float, model: Model) -> float:
    """Every phase alpha plus its frames (312 bytes each) at `bw_mbit` on the host link."""
    from inaemu.common.wire import FRAME_BYTES

    return sum(model.alpha + f * FRAME_BYTES * 8 / (bw_mbit * 1e6) for f in frames)


def inceptionn_ratio(size: int, n: int) -> float:
    """INCEPTIONN's compressed bytes over float32 bytes on the runner's inputs (N(0, 0.01)),
    the mean of one worker's array and the sum of `n` (what later hops carry)."""
    import numpy as np

    from inaemu.hostlib.codecs.inceptionn import compress
    from inaemu.hostlib.worker import worker_input

    xs = [worker_input(SEED, r, size, codec="plain") for r in range(n)]
    total = np.sum(xs, axis=0).astype(np.float32)
    return (len(compress(xs[0])) + len(compress(total))) / 2 / (4 * size)


def predict(comp: Comparison, algo: str, size: int, density: float, model: Model) -> float:
    if comp.densities:
        from inaemu.hostlib.worker import worker_input
        from inaemu.topology.builders import from_spec

        n = len(from_spec(comp.topo).hosts)
        xs = [worker_input(SEED, r, size, density, algo) for r in range(n)]
        return ina_prediction(ina_frames(algo, xs), comp.bw, model)
    ratio = 1.0
    if comp.codec == "inceptionn":
        from inaemu.topology.builders import from_spec

        ratio = inceptionn_ratio(size, len(from_spec(comp.topo).hosts))
    return collective_prediction(comp.topo, algo, size, comp.bw, model, ratio)[0]


# ---------------------------------------------------------------------- gradients


def _load_example() -> Any:
    spec = importlib.util.spec_from_file_location("train_ddp", ROOT / "examples" / "train_ddp.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _models() -> dict[str, tuple[Any, Any]]:
    """name -> (model, batch(rank, generator) -> loss): three small models on generated data,
    each with an embedding as the sketch paper's NCF, LSTM and BERT have."""
    import torch

    ex = _load_example()
    task = ex.Task(0)
    bag = ex.model(0)

    def bag_loss(g: torch.Generator) -> torch.Tensor:
        x, y = task.batch(32, g)
        return torch.nn.functional.cross_entropy(bag(x), y)

    torch.manual_seed(0)
    users, items, dim = 4000, 4000, 16
    ncf = torch.nn.ModuleDict(
        {
            "user": torch.nn.Embedding(users, dim),
            "item": torch.nn.Embedding(items, dim),
            "mlp": torch.nn.Sequential(
                torch.nn.Linear(2 * dim, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)
            ),
        }
    )

    def ncf_loss(g: torch.Generator) -> torch.Tensor:
        u = torch.randint(0, users, (64,), generator=g)
        i = torch.randint(0, items, (64,), generator=g)
        y = ((u % 8) == (i % 8)).float()  # a user likes the items of its group
        z = torch.cat([ncf["user"](u), ncf["item"](i)], dim=1)
        return torch.nn.functional.binary_cross_entropy_with_logits(ncf["mlp"](z)[:, 0], y)

    torch.manual_seed(0)
    vocab, hidden = 4000, 32
    lstm = torch.nn.ModuleDict(
        {
            "embed": torch.nn.Embedding(vocab, hidden),
            "lstm": torch.nn.LSTM(hidden, hidden, batch_first=True),
            "out": torch.nn.Linear(hidden, vocab),
        }
    )

    def lstm_loss(g: torch.Generator) -> torch.Tensor:
        start = torch.randint(0, vocab, (16, 1), generator=g)
        seq = (start + torch.arange(21) * 7) % vocab  # a generated sequence task
        h, _ = lstm["lstm"](lstm["embed"](seq[:, :-1]))
        logits = lstm["out"](h)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), seq[:, 1:].reshape(-1))

    return {
        "bag-of-tokens (examples/train_ddp.py)": (bag, bag_loss),
        "NCF-like (2 embeddings 4000x16, MLP)": (ncf, ncf_loss),
        "LSTM LM (embedding 4000x32, LSTM 32, output 4000)": (lstm, lstm_loss),
    }


def _gradients(net: Any, loss_of: Any, gen: Any) -> list[Any]:
    """One worker's gradient of every parameter (zeros where it has none) for its batch."""
    import torch

    net.zero_grad()
    loss_of(gen).backward()
    return [
        p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
        for p in net.parameters()
    ]


@dataclass
class Density:
    model: str
    layer: str  # a parameter's name, or "bucket" (the whole gradient: one DDP bucket)
    params: int
    density: float  # non-zero share of one worker's gradient, the mean over the workers
    union: float  # non-zero share of the sum over the workers


def gradient_densities(
    workers: int = 4, steps: int = 10
) -> tuple[list[Density], dict[str, list[Any]]]:
    """Train each small model `steps` SGD steps (the workers' gradients averaged, as DDP
    does), then take every worker's gradient of the next step: the density of each layer
    and of the whole gradient (one DDP bucket: each model is far under DDP's 25 MB), one
    worker's and the union over the workers. Also returns each model's per-worker bucket
    (float32 arrays), for the codec's bytes on real gradients."""
    import numpy as np
    import torch

    torch.set_num_threads(1)
    out: list[Density] = []
    buckets: dict[str, list[Any]] = {}
    for name, (net, loss_of) in _models().items():
        params = [(n, p) for n, p in net.named_parameters()]
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        gens = [torch.Generator().manual_seed(100 + r) for r in range(workers)]

        for _ in range(steps):
            per = [_gradients(net, loss_of, g) for g in gens]
            for i, (_, p) in enumerate(params):
                p.grad = sum(g[i] for g in per) / workers
            opt.step()
        per = [_gradients(net, loss_of, g) for g in gens]
        for i, (pname, p) in enumerate(params):
            nz = [float((g[i] != 0).float().mean()) for g in per]
            union = float((sum((g[i] != 0).float() for g in per) > 0).float().mean())
            out.append(Density(name, pname, p.numel(), statistics.fmean(nz), union))
        flat = [np.concatenate([g.flatten().numpy() for g in w]).astype(np.float32) for w in per]
        nz = [float(np.count_nonzero(f)) / f.size for f in flat]
        union = float(np.count_nonzero(np.any(np.asarray(flat) != 0, axis=0))) / flat[0].size
        out.append(Density(name, "bucket", flat[0].size, statistics.fmean(nz), union))
        buckets[name] = flat
    return out, buckets


def warm_codecs() -> None:
    """Compile the codecs' kernels once (numba caches them on disk), so that no measured
    worker pays the compilation (seconds) inside its allreduce."""
    import numpy as np

    from inaemu.hostlib.codecs import make_codec, simulate_allreduce
    from inaemu.hostlib.codecs.inceptionn import compress, decompress

    rng = np.random.default_rng(0)
    for density in (0.02, 1.0):
        xs = [(rng.standard_normal(4096) * 0.01).astype(np.float32) for _ in range(4)]
        for x in xs:
            x[rng.random(4096) >= density] = 0
        for codec in ("fixedpoint", "sketch"):
            simulate_allreduce(make_codec(codec), xs)
        decompress(compress(xs[0]))


# ---------------------------------------------------------------------- aggregation


def spread(xs: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max) of the finite values; nan when there are none."""
    ys = [x for x in xs if math.isfinite(x)]
    if not ys:
        return math.nan, math.nan, math.nan
    return statistics.median(ys), min(ys), max(ys)


@dataclass
class Cell:
    """An algorithm at one size and density over the repeats, with the model beside it."""

    paper: str
    comparison: str
    topology: str
    algo: str
    codec: str
    size: int
    density: float
    runs: int
    verified: int
    median: float
    low: float
    high: float
    model: float
    load: float | None  # median busiest-link load
    bound: str  # the most common bound over the repeats
    bound_reason: str
    emulator: int = 0  # runs the emulator bounded (the plot draws the point hollow)


def cells_of(points: Sequence[Point], comps: Sequence[Comparison], model: Model) -> list[Cell]:
    by_name = {c.name: c for c in comps}
    keys = list(dict.fromkeys((p.comparison, p.algo, p.size, p.density) for p in points))
    out = []
    for comp_name, algo, size, density in keys:
        ps = [
            p
            for p in points
            if (p.comparison, p.algo, p.size, p.density) == (comp_name, algo, size, density)
        ]
        med, lo, hi = spread([p.seconds for p in ps if p.verified])
        loads = [p.load for p in ps if p.load is not None]
        bounds = [p.bound for p in ps]
        common = max(set(bounds), key=bounds.count)
        reason = next(p.bound_reason for p in ps if p.bound == common)
        comp = by_name[comp_name]
        out.append(
            Cell(
                comp.paper,
                comp_name,
                comp.topo,
                algo,
                ps[0].codec,
                size,
                density,
                len(ps),
                sum(p.verified for p in ps),
                med,
                lo,
                hi,
                predict(comp, algo, size, density, model),
                statistics.median(loads) if loads else None,
                common,
                reason,
                sum(p.bound == "emulator" for p in ps),
            )
        )
    return out


@dataclass
class Ratio:
    """A headline ratio (time of the baseline / time of the paper's system) at one point."""

    paper: str
    key: str  # e.g. ring/multitree
    setting: str  # e.g. torus:4x4, 256K
    x: float  # the size or density it is plotted against
    median: float
    low: float
    high: float
    model: float
    repeats: int  # the repeats whose runs made a ratio (0: a count from the checker, no run)
    emulator: int = 0  # of them, those in which the emulator bounded a run


def _by_repeat(
    points: Sequence[Point], comp: str, algo: str, size: int, density: float
) -> dict[int, float]:
    return {
        p.repeat: p.seconds
        for p in points
        if (p.comparison, p.algo, p.size, p.density) == (comp, algo, size, density) and p.verified
    }


def ratio(
    paper: str,
    key: str,
    setting: str,
    x: float,
    points: Sequence[Point],
    cells: Sequence[Cell],
    base: Sequence[tuple[str, str]],
    system: tuple[str, str],
    size: int,
    density: float = 1.0,
) -> Ratio:
    """`base` (comparison, algo) pairs: the best (fastest) of them in each repeat, over the
    system's time in the same repeat; the model's ratio from the same cells."""
    sys_t = _by_repeat(points, *system, size, density)
    base_t = [_by_repeat(points, c, a, size, density) for c, a in base]
    paired = [r for r, t in sys_t.items() if all(r in b for b in base_t) and t > 0]
    per = [min(b[r] for b in base_t) / sys_t[r] for r in paired]
    med, lo, hi = spread(per)
    involved = {system, *base}
    emulator = {
        p.repeat
        for p in points
        if (p.comparison, p.algo) in involved
        and (p.size, p.density) == (size, density)
        and p.bound == "emulator"
    }

    def cell(c: str, a: str) -> Cell:
        return next(
            x for x in cells if (x.comparison, x.algo, x.size, x.density) == (c, a, size, density)
        )

    model = min(cell(c, a).model for c, a in base) / cell(*system).model
    return Ratio(paper, key, setting, x, med, lo, hi, model, len(per), len(emulator & set(paired)))


def _label(size: int) -> str:
    return f"{size // K}K" if size % K == 0 else str(size)


def ratios_of(
    paper: str, points: Sequence[Point], cells: Sequence[Cell], comps: Sequence[Comparison]
) -> list[Ratio]:
    out: list[Ratio] = []
    names = {c.name for c in comps}
    if paper == "multitree":
        for size in comps[0].sizes:
            s = f"torus:4x4, {_label(size)}"
            t = "torus4x4"
            out.append(
                ratio(
                    paper,
                    "ring/multitree",
                    s,
                    size,
                    points,
                    cells,
                    [(t, "ring")],
                    (t, "multitree"),
                    size,
                )
            )
            out.append(
                ratio(
                    paper,
                    "hd/multitree",
                    s,
                    size,
                    points,
                    cells,
                    [(t, "hd")],
                    (t, "multitree"),
                    size,
                )
            )
            out.append(
                ratio(
                    paper,
                    "best/multitree",
                    s,
                    size,
                    points,
                    cells,
                    [(t, "ring"), (t, "hd")],
                    (t, "multitree"),
                    size,
                )
            )
    elif paper == "eflops":
        for big, ls in (("bigraph2x4", "leafspine4x2x2"), ("bigraph1x4", "leafspine2x2x2")):
            if big not in names:
                continue
            comp = next(c for c in comps if c.name == big)
            hosts = "8 hosts" if big == "bigraph2x4" else "4 hosts"
            for size in comp.sizes:
                s = f"{comp.topo} vs {ls}, {hosts}, {_label(size)}"
                for key, base in (
                    ("hd/hdrm", [(big, "hd")]),
                    ("ring/hdrm", [(big, "ring")]),
                    ("leaf-spine hd/hdrm", [(ls, "hd")]),
                    ("leaf-spine best/hdrm", [(ls, "ring"), (ls, "hd")]),
                ):
                    out.append(ratio(paper, key, s, size, points, cells, base, (big, "hdrm"), size))
    elif paper == "inceptionn":
        for size in comps[0].sizes:
            s = f"star:4, {_label(size)}"
            pl, inc = "star4-plain", "star4-inceptionn"
            for key, base, system in (
                ("ps-plain/ring-inceptionn", [(pl, "ps")], (inc, "ring")),
                ("ps-plain/ps-inceptionn", [(pl, "ps")], (inc, "ps")),
                ("ring-plain/ring-inceptionn", [(pl, "ring")], (inc, "ring")),
                ("ps-plain/ring-plain", [(pl, "ps")], (pl, "ring")),
            ):
                out.append(ratio(paper, key, s, size, points, cells, base, system, size))
    elif paper == "sketch":
        comp = comps[0]
        for d in comp.densities:
            s = f"star:4, {_label(comp.sizes[0])}, density {d:.3g}"
            out.append(
                ratio(
                    paper,
                    "fp/sketch",
                    s,
                    d,
                    points,
                    cells,
                    [(comp.name, "fixedpoint")],
                    (comp.name, "sketch"),
                    comp.sizes[0],
                    d,
                )
            )
    return out


# ---------------------------------------------------------------------- scale (model only)


def scale_trend(paper: str, model: Model, bw: float) -> list[dict[str, Any]]:
    """The model's headline ratio at the paper's scales, beyond what one machine emulates."""
    rows: list[dict[str, Any]] = []
    if paper == "multitree":
        for spec in ("torus:3x3", "torus:4x4", "torus:8x8"):
            for size in (4 * K, 256 * K, 16 * K * K):
                ring = collective_prediction(spec, "ring", size, bw, model)[0]
                hd = collective_prediction(spec, "hd", size, bw, model)[0]
                mt = collective_prediction(spec, "multitree", size, bw, model)[0]
                rows.append(
                    {
                        "topology": spec,
                        "size": size,
                        "ring/multitree": ring / mt,
                        "best/multitree": min(ring, hd) / mt,
                    }
                )
    elif paper == "eflops":
        for big, ls in (
            ("bigraph:1x4", "leaf-spine:2x2x2"),
            ("bigraph:2x4", "leaf-spine:4x2x2"),
            ("bigraph:4x8", "leaf-spine:8x4x4"),
            ("bigraph:8x16", "leaf-spine:16x8x8"),
        ):
            size = 256 * K
            hdrm, _, flows = collective_prediction(big, "hdrm", size, bw, model)
            hd = collective_prediction(big, "hd", size, bw, model)[0]
            ls_best = min(collective_prediction(ls, a, size, bw, model)[0] for a in ("ring", "hd"))
            rows.append(
                {
                    "topology": f"{big} / {ls}",
                    "size": size,
                    "hd/hdrm": hd / hdrm,
                    "leaf-spine best/hdrm": ls_best / hdrm,
                    "hdrm max flows": flows,
                }
            )
    return rows


# ---------------------------------------------------------------------- training (INCEPTIONN)


def run_training(
    out: Path, bw: float, steps: int, timings: list[dict[str, Any]], lock: Path | None
) -> dict[str, Any]:
    """`inaemu train` on Mininet star:4: the worker-aggregator and the ring, plain and with
    INCEPTIONN; iterations and training time to the baseline's accuracy."""
    dest = out / "runs" / "train"
    backends = "ps-plain,ring-inceptionn,ps-inceptionn,ring-plain"
    argv = [
        sys.executable,
        "-m",
        "inaemu.cli",
        "train",
        "--mininet",
        "--topo",
        "star:4",
        "--bw",
        f"{bw:g}",
        "--backend",
        backends,
        "--out",
        str(dest),
        str(ROOT / "examples" / "train_ddp.py"),
        "--",
        "--steps",
        str(steps),
    ]
    dest.mkdir(parents=True, exist_ok=True)
    log = out / "runs" / "train.log"
    with heavy_lock(lock) as waited, log.open("w") as f:
        started = time.monotonic()
        proc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
        took = time.monotonic() - started
    timings.append(
        {
            "comparison": "train",
            "repeat": 0,
            "seconds": took,
            "lock_wait": waited,
            "exit": proc.returncode,
            "log": str(log),
        }
    )
    print(f"  inceptionn/train: exit {proc.returncode}, {took:.0f} s", flush=True)
    path = dest / "train.json"
    if not path.exists():
        return {"ok": False, "error": f"no train.json (see {log})"}
    return {**training_summary(json.loads(path.read_text())), "train_json": str(path)}


TARGET = 0.95  # of the baseline's best smoothed accuracy: the accuracy to reach


def smoothed(xs: Sequence[float | None], window: int = 5) -> list[float]:
    """A trailing mean over `window` evaluations (accuracy on 2,000 samples is noisy)."""
    vals = [x for x in xs if x is not None]
    return [statistics.fmean(vals[max(0, i + 1 - window) : i + 1]) for i in range(len(vals))]


def training_summary(train: dict[str, Any]) -> dict[str, Any]:
    """Per backend: final accuracy, and the iterations and training seconds until its
    smoothed accuracy reaches the target: `TARGET` of the best the worker-aggregator without
    compression (the paper's baseline) reaches (the curves flatten at 0.85-0.87 with noise of
    about 0.01, so the best itself is a matter of luck)."""
    backends = train["backends"]
    base = backends.get("ps-plain", {})
    base_acc = smoothed(base.get("accuracy", []))
    if not base_acc:
        return {"ok": False, "error": "the ps-plain backend recorded no accuracy"}
    target = TARGET * max(base_acc)
    out: dict[str, Any] = {"ok": True, "target_accuracy": target, "backends": {}}
    for name, b in backends.items():
        acc = smoothed(b.get("accuracy", []))
        hit = next((i for i, a in enumerate(acc) if a >= target), None)
        times = b.get("time", [])
        out["backends"][name] = {
            "ok": not b.get("error") and bool(b.get("iterations")),
            "final_accuracy": acc[-1] if acc else None,
            "iterations_to_target": None if hit is None else hit + 1,
            "seconds_to_target": None if hit is None or hit >= len(times) else times[hit],
            "train_seconds": times[-1] if times else None,
            "iteration_ms": 1e3 * statistics.median(b["step_seconds"])
            if b.get("step_seconds")
            else None,
            "allreduce_ms": 1e3 * statistics.median(b["allreduce_seconds"])
            if b.get("allreduce_seconds")
            else None,
        }
    return out


# ---------------------------------------------------------------------- tables


def _s(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:.3f}"


def _x(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:.2f}x"


def emulated(r: Ratio) -> str:
    """A ratio as the tables write it: the median and the range of its runs' ratios, "1 run"
    when there is one (no range), or what it is when no run made it."""
    if r.repeats == 0:
        if math.isfinite(r.median):
            return f"{r.median:g} (the schedule checker's count, not a run)"
        return "- (no verified run)"
    if r.repeats == 1:
        return f"{_x(r.median)} (1 run)"
    return f"{_x(r.median)} ({_x(r.low)}-{_x(r.high)}, {r.repeats} runs)"


def min_max(r: Ratio) -> str:
    return f"{_x(r.low)}-{_x(r.high)}" if r.repeats > 1 else "-"


def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def headline_table(paper: str, ratios: Sequence[Ratio], train: dict[str, Any] | None) -> list[str]:
    rows = []
    for c in CLAIMS[paper]:
        rs = [r for r in ratios if r.key == c.ratio]
        if rs:
            for r in rs:
                model = _x(r.model) if r.repeats else f"{r.model:g}"
                rows.append([c.what, c.paper, r.setting, emulated(r), model])
        elif c.ratio.startswith("train") and train and train.get("ok"):
            b = train["backends"]
            base, sys_ = b.get("ps-plain", {}), b.get("ring-inceptionn", {})
            if c.ratio == "train iterations":
                emu = (
                    f"ring-inceptionn {sys_.get('iterations_to_target')} vs ps-plain "
                    f"{base.get('iterations_to_target')} iterations to "
                    f"{train['target_accuracy']:.3f} accuracy"
                )
            else:
                t0, t1 = base.get("seconds_to_target"), sys_.get("seconds_to_target")
                emu = _x(t0 / t1) if t0 and t1 else "- (target not reached)"
                emu += " (training seconds to the target accuracy, 1 run)"
            rows.append([c.what, c.paper, "star:4, examples/train_ddp.py", emu, "-"])
        else:
            rows.append([c.what, c.paper, "-", "not emulated (docs/papers.md)", "-"])
    return table(
        ("claim", "paper", "emulated setting", "emulated (median, min-max)", "model"), rows
    )


def cells_table(cells: Sequence[Cell], dense: bool) -> list[str]:
    rows = []
    for c in cells:
        load = "-" if c.load is None else f"{c.load:.0%}"
        rows.append(
            [
                c.topology,
                c.algo,
                c.codec,
                _label(c.size),
                *([f"{c.density:.3g}"] if dense else []),
                f"{c.verified}/{c.runs}",
                _s(c.median),
                f"{_s(c.low)}-{_s(c.high)}" if c.verified > 1 else "-",
                _s(c.model),
                _x(c.median / c.model) if c.model > 0 else "-",
                load,
                c.bound,
            ]
        )
    head = [
        "topology",
        "algorithm",
        "codec",
        "size",
        *(["density"] if dense else []),
        "verified",
        "median s",
        "min-max s",
        "model s",
        "emulated/model",
        "busiest link",
        "bound",
    ]
    return table(head, rows)


def ratios_table(ratios: Sequence[Ratio]) -> list[str]:
    rows = [
        [r.key, r.setting, _x(r.median), min_max(r), _x(r.model), str(r.repeats)] for r in ratios
    ]
    return table(("ratio", "setting", "emulated median", "min-max", "model", "runs"), rows)


# ---------------------------------------------------------------------- plots


def plot(
    paper: str,
    cells: Sequence[Cell],
    ratios: Sequence[Ratio],
    train: dict[str, Any] | None,
    path: Path,
) -> Path:
    """`figure` as a PNG at `path`."""
    import matplotlib.pyplot as plt

    fig = figure(paper, cells, ratios, train)
    try:
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


def figure(
    paper: str, cells: Sequence[Cell], ratios: Sequence[Ratio], train: dict[str, Any] | None
) -> Any:
    """Left: completion time against size (or density), the emulated median with its
    min-max and the model (x, dashed); middle: the headline ratios, the model's dashed, the
    paper's number dotted; for INCEPTIONN a third panel: the training run's accuracy. The
    marks and axes are every plot's of runs (`inaemu.runs.marks`): an emulator-bound point
    hollow, axes of sizes around the sizes run (quick mode: one). The caller closes it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from inaemu.runs import marks

    trained = paper == "inceptionn" and bool(train and train.get("ok") and train.get("curves"))
    fig, axes = plt.subplots(1, 3 if trained else 2, figsize=(18 if trained else 12, 4.8))
    left, right = axes[0], axes[1]
    dense = paper == "sketch"
    xlabel = "gradient density (per worker)" if dense else "elements per worker (4 bytes)"

    def x_label(x: float) -> str:
        return f"{x:g}" if dense else _label(int(x))

    try:
        groups = dict.fromkeys((c.comparison, c.algo) for c in cells)
        times: list[float] = []
        hollow = False
        for i, (comp, algo) in enumerate(groups):
            cs = sorted(
                (c for c in cells if (c.comparison, c.algo) == (comp, algo)),
                key=lambda c: c.density if dense else c.size,
            )
            aside = marks.dodge(i, len(groups))
            xs = [(c.density if dense else c.size) * aside for c in cs]
            color = f"C{i % 10}"
            label = algo if len({c for c, _ in groups}) == 1 else f"{comp}: {algo}"
            left.plot(xs, [c.median for c in cs], color=color, label=label)
            for x, c in zip(xs, cs, strict=True):
                hollow |= c.emulator > 0
                left.plot([x], [c.median], **marks.point(color, c.emulator > 0))
                if c.verified > 1:
                    left.errorbar([x], [c.median], yerr=[[c.median - c.low], [c.high - c.median]],
                                  fmt="none", ecolor=color, **marks.SPREAD)  # fmt: skip
            left.plot(xs, [c.model for c in cs], color=color, **marks.MODEL)
            times += [c.low for c in cs] + [c.high for c in cs] + [c.model for c in cs]
        runs = max((c.verified for c in cells), default=0)
        marks.size_axis(left, [c.density if dense else c.size for c in cells], x_label)
        marks.value_axis(left, times)
        left.set_xlabel(xlabel)
        left.set_ylabel("completion time (s)")
        left.set_title("emulated: median (o), min-max; model (x, dashed)", fontsize=10)
        left.grid(True, which="major", alpha=0.3)
        handles, _ = left.get_legend_handles_labels()
        extra = marks.handles(emulator_bound=hollow, model=True, runs=runs)
        left.legend(handles=[*handles, *extra], fontsize=7)
        keys = dict.fromkeys(r.key for r in ratios if r.key != "hdrm max flows")
        shown = [r for r in ratios if r.key in keys]
        speedups: list[float] = [1.0]
        series: list[Any] = []
        lines = [
            (key, setting)
            for key in keys
            for setting in dict.fromkeys(r.setting.split(",")[0] for r in shown if r.key == key)
        ]
        for i, key in enumerate(keys):
            rs = sorted((r for r in ratios if r.key == key), key=lambda r: (r.setting, r.x))
            settings = dict.fromkeys(r.setting.split(",")[0] for r in rs)
            for j, setting in enumerate(settings):
                sub = [r for r in rs if r.setting.split(",")[0] == setting]
                aside = marks.dodge(lines.index((key, setting)), len(lines))
                xs = [r.x * aside for r in sub]
                color = f"C{i % 10}"
                shape = "os^"[j % 3]  # the shape tells settings apart, the fill the bound
                lab = key if len(settings) == 1 else f"{key} ({setting})"
                right.plot(xs, [r.median for r in sub], color=color)
                series.append(Line2D([], [], color=color, marker=shape, label=lab))
                for x, r in zip(xs, sub, strict=True):
                    right.plot([x], [r.median], **marks.point(color, r.emulator > 0, shape))
                    if r.repeats > 1:
                        right.errorbar([x], [r.median],
                                       yerr=[[r.median - r.low], [r.high - r.median]],
                                       fmt="none", ecolor=color, **marks.SPREAD)  # fmt: skip
                right.plot(xs, [r.model for r in sub], color=color, **marks.MODEL)
                speedups += [v for r in sub for v in (r.low, r.high, r.model)]
        right.axhline(1.0, color="grey", lw=0.8)
        for claim in CLAIMS[paper]:
            if claim.value is not None and claim.ratio in keys:
                speedups.append(claim.value)
                right.axhline(claim.value, **marks.PAPER)
                right.annotate(f"paper: {claim.paper} ({claim.ratio})", (0.01, claim.value),
                               fontsize=7,
                               xycoords=("axes fraction", "data"), va="bottom")  # fmt: skip
        marks.size_axis(right, [r.x for r in shown], x_label)
        marks.value_axis(right, speedups)
        right.set_xlabel(xlabel)
        right.set_ylabel("speedup: baseline time / system time")
        right.set_title("headline ratios: emulated (o), model (x, dashed), paper (dotted)",
                        fontsize=10)  # fmt: skip
        right.grid(True, which="major", alpha=0.3)
        extra = marks.handles(
            emulator_bound=any(r.emulator for r in shown),
            model=True,
            runs=max((r.repeats for r in shown), default=0),
        )
        right.legend(handles=[*series, *extra], fontsize=7)
        if trained:
            assert train is not None
            ax = axes[2]
            for name, curve in train["curves"].items():
                ax.plot(range(1, len(curve) + 1), curve, label=name)
            ax.axhline(train["target_accuracy"], color="grey", ls=":", label="target")
            ax.set_xlabel("iteration")
            ax.set_ylabel("held-out accuracy (trailing mean of 5)")
            ax.set_title("training, examples/train_ddp.py on Mininet star:4", fontsize=10)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle(f"{paper}: emulated on Mininet, links shaped (docs/papers.md)")
        fig.tight_layout()
    except BaseException:
        plt.close(fig)
        raise
    return fig


# ---------------------------------------------------------------------- main


def machine() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "loadavg": os.getloadavg(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def render(
    out: Path,
    papers: Sequence[str],
    comps: dict[str, list[Comparison]],
    points: Sequence[Point],
    train: dict[str, Any] | None,
    densities: Sequence[Density],
    real_sketch: Sequence[dict[str, Any]],
    model: Model,
    report: dict[str, Any],
) -> None:
    """Each paper's table (<paper>.md, also printed), plot (<paper>.png) and part of
    `report` (written to papers.json by the caller)."""
    mode, repeats = report["mode"], report["repeats"]
    for p in papers:
        pts = [x for x in points if x.paper == p]
        cells = cells_of(pts, comps[p], model)
        ratios = ratios_of(p, pts, cells, comps[p])
        if p == "eflops":
            for c in comps[p]:
                if "hdrm" in c.algos:
                    flows = collective_prediction(c.topo, "hdrm", c.sizes[0], c.bw, model)[2]
                    ratios.append(Ratio(p, "hdrm max flows", c.topo, 0, flows, flows, flows,
                                        flows, 0))  # fmt: skip
        trend = scale_trend(p, model, comps[p][0].bw)
        lines = [f"# {p}: emulated ({mode} mode, {repeats} repeat(s))", ""]
        lines += [*headline_table(p, ratios, train if p == "inceptionn" else None), ""]
        lines += [*ratios_table([r for r in ratios if r.key != "hdrm max flows"]), ""]
        lines += [*cells_table(cells, p == "sketch"), ""]
        if trend:
            keys = [k for k in trend[0] if k not in ("topology", "size")]
            lines += ["Model only, at scales one machine cannot emulate:", ""]
            lines += table(
                ["topology", "size", *keys],
                [[t["topology"], _label(t["size"]), *(f"{t[k]:.2f}" for k in keys)]
                 for t in trend],
            )  # fmt: skip
            lines += [""]
        if p == "sketch":
            lines += ["Gradient densities measured here (4 workers, after 10 SGD steps):", ""]
            lines += table(
                ("model", "layer", "params", "density (1 worker)", "union of 4"),
                [[d.model, d.layer, f"{d.params:,}", f"{d.density:.4f}", f"{d.union:.4f}"]
                 for d in densities],
            )  # fmt: skip
            lines += ["", "The codecs on those real gradients (4 workers, reference switch):", ""]
            lines += table(
                ("model", "params", "fixed-point frames", "sketch frames", "sketch phases",
                 "bytes ratio"),
                [[s["model"], f"{s['params']:,}", f"{s['fixedpoint_frames']:,}",
                  f"{s['sketch_frames']:,}", str(s["sketch_phases"]), f"{s['bytes_ratio']:.2f}x"]
                 for s in real_sketch],
            )  # fmt: skip
            lines += [""]
        if p == "inceptionn" and train:
            lines += ["Training (examples/train_ddp.py, Mininet star:4, 16 Mbit/s):", ""]
            if train.get("ok"):
                lines += table(
                    ("backend", "final accuracy", "iterations to target", "seconds to target",
                     "iteration ms", "allreduce ms"),
                    [[n, f"{b['final_accuracy']:.3f}", str(b["iterations_to_target"]),
                      _s(b["seconds_to_target"] or math.nan), _s(b["iteration_ms"] or math.nan),
                      _s(b["allreduce_ms"] or math.nan)]
                     for n, b in train["backends"].items()],
                )  # fmt: skip
                lines += ["", f"target: {train['target_accuracy']:.3f} ({TARGET:.0%} of "
                          "ps-plain's best smoothed accuracy)", ""]  # fmt: skip
            else:
                lines += [f"FAILED: {train.get('error')}", ""]
        md = out / f"{p}.md"
        md.write_text("\n".join(lines) + "\n")
        png = plot(p, cells, ratios, train if p == "inceptionn" else None, out / f"{p}.png")
        print("\n".join(lines))
        print(f"  table: {md}\n  plot: {png}\n", flush=True)
        report["papers"][p] = {
            "claims": [asdict(c) for c in CLAIMS[p]],
            "comparisons": [asdict(c) for c in comps[p]],
            "points": [asdict(x) for x in pts],
            "cells": [asdict(c) for c in cells],
            "ratios": [asdict(r) for r in ratios],
            "scale_trend": trend,
            "table": str(md),
            "plot": str(png),
            "verified": all(x.verified for x in pts),
            "checked": all(x.checked in ("exact", "bound") for x in pts),
        }
        if p == "sketch":
            report["papers"][p]["densities"] = [asdict(d) for d in densities]
            report["papers"][p]["real_gradients"] = list(real_sketch)
        if p == "inceptionn":
            report["papers"][p]["training"] = train


@dataclass
class Measured:
    """What a run measured: everything `render` needs."""

    papers: list[str]
    comps: dict[str, list[Comparison]]
    points: list[Point]
    train: dict[str, Any] | None
    densities: list[Density]
    real_sketch: list[dict[str, Any]]
    report: dict[str, Any]  # papers.json without its papers


def from_json(path: Path) -> Measured:
    """What a previous run measured (its papers.json), to render again."""
    old = json.loads(path.read_text())
    papers = list(old["papers"])
    comps = {
        p: [
            Comparison(**{**c, "algos": tuple(c["algos"]), "sizes": tuple(c["sizes"]),
                          "densities": tuple(c["densities"])})
            for c in v["comparisons"]
        ]
        for p, v in old["papers"].items()
    }  # fmt: skip
    points = [Point(**x) for v in old["papers"].values() for x in v["points"]]
    sk = old["papers"].get("sketch", {})
    densities = [Density(**d) for d in sk.get("densities", [])]
    train = old["papers"].get("inceptionn", {}).get("training")
    raw_path = Path((train or {}).get("train_json", path.parent / "runs" / "train" / "train.json"))
    if train and raw_path.is_file():  # scored again, as `training_summary` now scores
        raw = json.loads(raw_path.read_text())
        curves = {n: smoothed(b.get("accuracy", [])) for n, b in raw["backends"].items()}
        train = {**training_summary(raw), "train_json": str(raw_path), "curves": curves}
    keep = {k: v for k, v in old.items() if k != "papers"}
    return Measured(papers, comps, points, train, densities, sk.get("real_gradients", []), keep)


def main(argv: list[str] | None = None) -> int:
    from inaemu.common import args as arg

    ap = arg.ArgumentParser(prog="bench/papers.py", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one repeat, small sizes, few points")
    ap.add_argument("--paper", choices=(*PAPERS, "all"), default="all")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument(
        "--repeats",
        type=arg.positive("repeats", 100),
        default=None,
        help="repeats per point (default 3; --quick 1)",
    )
    ap.add_argument(
        "--alpha-ms",
        type=arg.Real(0.0, 1000.0, "milliseconds"),
        default=5.0,
        help="the model's cost per step (host collectives) or per phase (INA), ms (5)",
    )
    ap.add_argument(
        "--lock",
        type=Path,
        default=None,
        metavar="FILE",
        help="take `flock FILE` for each network, so that other heavy runs holding the same "
        "lock get in between (default: none)",
    )
    ap.add_argument("--no-train", action="store_true", help="skip the INCEPTIONN training run")
    ap.add_argument("--train-steps", type=arg.positive("steps", 10_000), default=100)
    ap.add_argument(
        "--from-json",
        type=Path,
        default=None,
        metavar="PAPERS_JSON",
        help="render the tables and plots again from a previous run's papers.json (no runs; "
        "--alpha-ms applies to the model)",
    )
    args = ap.parse_args(argv)
    model = Model(args.alpha_ms / 1e3)
    out: Path = args.out.absolute()
    if args.from_json is not None:
        m = from_json(args.from_json)
        m.report.update(alpha_ms=args.alpha_ms, papers={})
        out.mkdir(parents=True, exist_ok=True)
        render(out, m.papers, m.comps, m.points, m.train, m.densities, m.real_sketch, model,
               m.report)  # fmt: skip
        (out / "papers.json").write_text(json.dumps(m.report, indent=2, default=str) + "\n")
        return 0 if m.report["verified"] else 1
    repeats = args.repeats or (1 if args.quick else 3)
    papers = PAPERS if args.paper == "all" else (args.paper,)
    if os.geteuid() != 0:
        print("bench/papers.py: needs root (Mininet builds namespaces and links): skipped")
        return 0
    from inaemu.mininet import debian

    try:
        debian.ensure(install=False)
    except debian.MininetUnavailable as exc:
        print(f"bench/papers.py: Mininet is not available ({exc}): skipped")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    report: dict[str, Any] = {
        "mode": "quick" if args.quick else "full",
        "repeats": repeats,
        "alpha_ms": args.alpha_ms,
        "tcp_framing": TCP_FRAMING,
        "machine_start": machine(),
        "papers": {},
    }
    print(
        f"bench/papers.py: {report['mode']} mode, {repeats} repeat(s), papers "
        f"{', '.join(papers)}, out {out}",
        flush=True,
    )
    warm_codecs()
    densities: list[Density] = []
    real_sketch: list[dict[str, Any]] = []
    emulated_densities: list[float] = []
    if "sketch" in papers:
        densities, buckets = gradient_densities()
        per_bucket = [d for d in densities if d.layer == "bucket"]
        picked = sorted({float(f"{d.density:.2g}") for d in per_bucket})
        emulated_densities = picked[:1] if args.quick else [*picked, 1.0]
        for name, flat in buckets.items():
            fp = ina_frames("fixedpoint", flat)
            sk = ina_frames("sketch", flat)
            real_sketch.append(
                {
                    "model": name,
                    "params": flat[0].size,
                    "fixedpoint_frames": sum(fp),
                    "sketch_frames": sum(sk),
                    "sketch_phases": len(sk),
                    "bytes_ratio": sum(fp) / sum(sk),
                }
            )
        print(
            "  gradient densities (bucket, one worker / union of 4): "
            + "; ".join(
                f"{d.model.split(' (')[0]} {d.density:.4f} / {d.union:.4f}" for d in per_bucket
            ),
            flush=True,
        )
    comps = {p: plan(p, args.quick, emulated_densities) for p in papers}
    timings: list[dict[str, Any]] = []
    points: list[Point] = []
    for r in range(repeats):  # repeat-major: drift on the shared machine spreads over all
        for p in papers:
            for comp in comps[p]:
                points += run_comparison(comp, r, out, timings, args.lock)
    train: dict[str, Any] | None = None
    if "inceptionn" in papers and not args.quick and not args.no_train:
        train = run_training(out, 16.0, args.train_steps, timings, args.lock)
        if train.get("ok"):
            raw = json.loads((out / "runs" / "train" / "train.json").read_text())
            train["curves"] = {
                n: smoothed(b.get("accuracy", [])) for n, b in raw["backends"].items()
            }
    verified = all(p.verified for p in points)
    report.update(
        verified=verified,
        checked=all(x.checked in ("exact", "bound") for x in points),
        runs=timings,
        seconds=time.monotonic() - started,
        lock_wait_seconds=sum(t["lock_wait"] for t in timings),
        machine_end=machine(),
    )
    render(out, papers, comps, points, train, densities, real_sketch, model, report)
    (out / "papers.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(
        f"bench/papers.py: {len(points)} results in {report['seconds']:.0f} s "
        f"({report['lock_wait_seconds']:.0f} s of it waiting for the lock), "
        + ("every one checked and verified" if verified else "SOME FAILED (see the logs)")
        + f"; {out / 'papers.json'}"
    )
    return 0 if verified else 1


if __name__ == "__main__":
    sys.exit(main())
