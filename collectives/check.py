"""The schedule checker: does a schedule all-reduce, and what does it cost on a topology?

`simulate` runs a schedule on symbols: for every rank and chunk it keeps the set of ranks whose
contributions the chunk holds (a bit mask), every rank starting with its own. A step reads
what every rank held when it began. It raises `ScheduleError` naming the step, rank and chunk
of the first of these faults:

- a REDUCE that adds contributions the chunk already holds (double counting);
- two transfers writing one chunk of one rank in one step when one of them is a COPY (which
  value would it hold?);
- a COPY that drops contributions the receiving chunk holds, or copies exactly what it holds
  (a wasted transfer), or overwrites a value the rank received in an earlier step and never
  used (neither sent on nor added to: that transfer was wasted);
- after the last step, a rank whose chunk does not hold every rank's contribution.

So a dropped transfer (something never arrives) and a duplicated one (counted twice, or
wasted) are both caught.

`measure` routes every transfer over the topology (`routes.FlowRoutes`, under its node model)
and reports, for an array of `size` bytes: the steps, the bytes each host sends (max and mean
over the ranks), the most flows on any directed link in any step (a flow is a (source,
destination) pair of a step: transfers between one pair in one step travel together; the
flows per link of every step are `step_loads`) and the total link-bytes (bytes times links
crossed, over the links that can be contended: see `routes`). Given a `LinkModel`, it also
predicts the time (alpha-beta): every step costs alpha plus the time its busiest link needs,
the bytes the step puts on that link over the link's bandwidth (one network link's, times
`FlowRoutes.capacity`: a torus node's host link under node model `all` carries its network
ports' bandwidth together). `check` does both and refuses a schedule that is promised
contention-free (at most one flow per link per step) but is not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from inaemu.collectives.schedule import Op, Schedule, ScheduleError, Transfer, chunk_bounds
from inaemu.topology.model import Topology
from inaemu.topology.routes import ALL_PORTS, FlowRoutes, Link


def ranks_text(mask: int) -> str:
    """The ranks in a bit mask, runs shortened: `0-3, 5`."""
    ranks = [r for r in range(mask.bit_length()) if mask >> r & 1]
    runs: list[list[int]] = []
    for r in ranks:
        if runs and runs[-1][1] == r - 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"


def simulate(sched: Schedule) -> None:
    """Raise `ScheduleError` at the first fault (see the module's docstring) unless `sched`
    leaves every rank with every chunk holding every rank's contribution exactly once."""
    sched.validate()
    n, chunks = sched.n_ranks, sched.n_chunks
    full = (1 << n) - 1
    state = [[1 << r] * chunks for r in range(n)]
    written = [[-1] * chunks for _ in range(n)]  # step of the value's last write, -1: own
    used = [[True] * chunks for _ in range(n)]  # the value was sent or added to since

    def where(i: int, r: int, c: int) -> str:
        return f"{sched.algo}, step {i}: rank {r} ({sched.hosts[r]}) chunk {c}"

    for i, step in enumerate(sched.steps):
        writers: dict[tuple[int, int], list[Transfer]] = {}
        for t in step:
            for c in range(t.lo, t.hi):
                used[t.src][c] = True
                writers.setdefault((t.dst, c), []).append(t)
        nxt = {key: state[key[0]][key[1]] for key in writers}
        for (r, c), ts in writers.items():
            if len(ts) > 1 and any(t.op is Op.COPY for t in ts):
                srcs = ", ".join(f"{t.op.value} from {t.src}" for t in ts)
                raise ScheduleError(f"{where(i, r, c)}: written twice in one step ({srcs})")
            old = state[r][c]
            t = ts[0]
            if t.op is Op.COPY:
                value = state[t.src][c]
                if written[r][c] >= 0 and not used[r][c]:
                    raise ScheduleError(
                        f"{where(i, r, c)}: a COPY from {t.src} overwrites what the rank "
                        f"received in step {written[r][c]} before it was used (a wasted "
                        "transfer)"
                    )
                if value == old:
                    raise ScheduleError(
                        f"{where(i, r, c)}: a COPY from {t.src} of what the rank already "
                        f"holds (ranks {ranks_text(old)}): a wasted transfer"
                    )
                if old & ~value:
                    raise ScheduleError(
                        f"{where(i, r, c)}: a COPY from {t.src} drops the contributions of "
                        f"ranks {ranks_text(old & ~value)}"
                    )
                nxt[(r, c)] = value
                continue
            for t in ts:
                value = state[t.src][c]
                twice = nxt[(r, c)] & value
                if twice:
                    raise ScheduleError(
                        f"{where(i, r, c)}: a REDUCE from {t.src} counts ranks "
                        f"{ranks_text(twice)} twice"
                    )
                nxt[(r, c)] |= value
        for (r, c), value in nxt.items():
            state[r][c], written[r][c], used[r][c] = value, i, False
    for r in range(n):
        for c in range(chunks):
            if state[r][c] != full:
                last = written[r][c]
                since = f"last written in step {last}" if last >= 0 else "never written"
                raise ScheduleError(
                    f"{sched.algo}, after the last step ({len(sched.steps) - 1}): rank {r} "
                    f"({sched.hosts[r]}) chunk {c} lacks the contributions of ranks "
                    f"{ranks_text(full & ~state[r][c])} ({since})"
                )


@dataclass(frozen=True)
class LinkModel:
    """The alpha-beta model of `measure`'s prediction."""

    bw: float  # bytes per second of one network link
    alpha: float = 0.0  # seconds every step costs on top of its bytes

    def __post_init__(self) -> None:
        if not (self.bw > 0 and self.alpha >= 0):
            raise ValueError(f"link model: bw {self.bw} must be > 0, alpha {self.alpha} >= 0")


def step_loads(sched: Schedule, routes: FlowRoutes) -> list[Counter[Link]]:
    """For every step: the flows (distinct source-destination pairs) on each directed link
    on which flows can contend (`FlowRoutes.contended_links`)."""
    loads = []
    for step in sched.steps:
        load: Counter[Link] = Counter()
        for src, dst in sorted({(t.src, t.dst) for t in step}):
            load.update(routes.contended_links(sched.hosts[src], sched.hosts[dst]))
        loads.append(load)
    return loads


def step_bytes(sched: Schedule, routes: FlowRoutes, size: int) -> list[Counter[Link]]:
    """For every step: the bytes each directed link carries (host links included), for an
    array of `size` bytes."""
    bounds = chunk_bounds(size, sched.n_chunks)
    out = []
    for step in sched.steps:
        nbytes: Counter[Link] = Counter()
        for t in step:
            moved = bounds[t.hi - 1][1] - bounds[t.lo][0]
            for link in routes.links(sched.hosts[t.src], sched.hosts[t.dst]):
                nbytes[link] += moved
        out.append(nbytes)
    return out


def predict_seconds(sched: Schedule, routes: FlowRoutes, size: int, model: LinkModel) -> float:
    """The alpha-beta time of `sched` for an array of `size` bytes (module docstring)."""
    total = 0.0
    for nbytes in step_bytes(sched, routes, size):
        busiest = max((b / routes.capacity(lk) for lk, b in nbytes.items()), default=0.0)
        total += model.alpha + busiest / model.bw
    return total


@dataclass(frozen=True)
class Measures:
    """What one schedule costs on one topology, for an array of `size` bytes."""

    algo: str
    topology: str
    ranks: int
    chunks: int
    steps: int
    size: int
    sent_max: int  # bytes one host sends, the most over the ranks
    sent_mean: float
    max_flows: int  # the most flows on one directed link in one step
    busiest: tuple[int, Link] | None  # (step, link) where that happens first
    link_bytes: int  # bytes times contended links crossed, summed over the transfers
    promised: bool  # the registry promises at most one flow per link per step
    node_ports: str = ALL_PORTS  # the node model it was measured under (`routes`)
    seconds: float | None = None  # the alpha-beta prediction, given a LinkModel

    @property
    def contention_free(self) -> bool:
        return self.max_flows <= 1


def measure(
    sched: Schedule,
    topo: Topology,
    size: int,
    *,
    topology: str = "",
    promised: bool = False,
    routes: FlowRoutes | None = None,
    model: LinkModel | None = None,
) -> Measures:
    """Route every transfer of `sched` over `topo` and measure it (see the module's
    docstring) for an array of `size` bytes; `routes` brings the node model (default:
    `FlowRoutes(topo)`, node model `all`)."""
    if size < 0:
        raise ValueError(f"size {size}: a number of bytes >= 0")
    routes = routes or FlowRoutes(topo)
    bounds = chunk_bounds(size, sched.n_chunks)
    sent = [0] * sched.n_ranks
    link_bytes = 0
    for _, t in sched.transfers():
        nbytes = bounds[t.hi - 1][1] - bounds[t.lo][0]
        sent[t.src] += nbytes
        link_bytes += nbytes * len(routes.contended_links(sched.hosts[t.src], sched.hosts[t.dst]))
    max_flows, busiest = 0, None
    for i, load in enumerate(step_loads(sched, routes)):
        if load:
            link, most = load.most_common(1)[0]
            if most > max_flows:
                max_flows, busiest = most, (i, link)
    return Measures(
        algo=sched.algo,
        topology=topology,
        ranks=sched.n_ranks,
        chunks=sched.n_chunks,
        steps=len(sched.steps),
        size=size,
        sent_max=max(sent),
        sent_mean=sum(sent) / len(sent),
        max_flows=max_flows,
        busiest=busiest,
        link_bytes=link_bytes,
        promised=promised,
        node_ports=routes.node_ports,
        seconds=None if model is None else predict_seconds(sched, routes, size, model),
    )


def check(
    sched: Schedule,
    topo: Topology,
    size: int,
    *,
    topology: str = "",
    promised: bool = False,
    routes: FlowRoutes | None = None,
    model: LinkModel | None = None,
) -> Measures:
    """`simulate`, then `measure`; `ScheduleError` also if `promised` (contention-free) does
    not hold."""
    simulate(sched)
    m = measure(sched, topo, size, topology=topology, promised=promised, routes=routes, model=model)
    if promised and not m.contention_free and m.busiest is not None:
        step, (a, b) = m.busiest
        raise ScheduleError(
            f"{sched.algo} on {topology or 'the topology'}: promised contention-free, but "
            f"step {step} puts {m.max_flows} flows on the link {a} -> {b}"
        )
    return m


def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:,.2f} MB"


TABLE_HEADER = (
    "algorithm",
    "topology",
    "ranks",
    "steps",
    "chunks",
    "sent/host max",
    "sent/host mean",
    "max flows/link",
    "link-bytes",
    "model s",
    "contention-free",
)


def table_row(m: Measures) -> tuple[str, ...]:
    free = "yes" if m.contention_free else "no"
    return (
        m.algo,
        m.topology,
        str(m.ranks),
        str(m.steps),
        str(m.chunks),
        _mb(m.sent_max),
        _mb(m.sent_mean),
        str(m.max_flows),
        _mb(m.link_bytes),
        "-" if m.seconds is None else f"{m.seconds:.4f}",
        f"{free} (promised)" if m.promised else free,
    )


def render_table(rows: Sequence[tuple[str, ...]]) -> str:
    """Rows under `TABLE_HEADER` as aligned text (text columns left, numbers right)."""
    every = [TABLE_HEADER, *rows]
    widths = [max(len(r[i]) for r in every) for i in range(len(TABLE_HEADER))]
    left = {0, 1, len(TABLE_HEADER) - 1}
    lines = []
    for row in every:
        cells = [
            cell.ljust(w) if i in left or row is TABLE_HEADER else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
