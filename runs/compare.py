"""Allreduce algorithms side by side, on any network: one row per (algorithm, size) run
(`Row`: the same for Mininet, the embedded softswitches and a simulator), its checks, the
table (`render_table`, one renderer: each network picks the columns it measures), and the
completion-time plot. Pure: nothing here needs a network, Mininet or root.

Checking a result (`check_results`): every worker's array against what the algorithm promises
for the codec it ran,

- `exact`: equal, element for element, to the exact result: numpy's int32 sum of the inputs,
  or, for INA with another codec, that codec run against the reference switch
  (`hostlib.worker.expected_result`);
- `bound`: within an element-wise bound of the float64 sum of the inputs (`error_bound`):
  float32 summed in any order (`plain`) within gamma(n-1) * sum |x_i| (Higham's bound for n-1
  additions, u = 2^-24); INCEPTIONN (`inceptionn`) within n compressions of its error bound
  on top of that.

and all workers' arrays identical (an allreduce that leaves workers with different models is
wrong even when each is close). Every row also carries its error: the largest |result - float64
sum of the inputs| over every worker and element.

Traffic (`make_row`) comes from each link's bytes each way (`LinkUse`), however the network
counted them: Mininet, the kernel's counters of each link's root-namespace interface (Ethernet
frames with all headers, read before and after the workers ran); the embedded network, its
switches' port counters; a simulator, its links. A host's bytes sent are what its link carried
from it to the switch; the busiest link is the link direction whose bytes needed the most of
its bandwidth (the most bytes when a link is unshaped), shown with its share of what its
bandwidth could carry during the completion time.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.common import args as arg
from inaemu.hostlib.codecs.inceptionn import DEFAULT_ERROR_BOUND as INCEPTIONN_BOUND
from inaemu.hostlib.worker import expected_result, expected_sum, worker_input
from inaemu.runs import marks
from inaemu.runs.accounting import (
    Bound,
    LinkLoad,
    Usage,
    classify,
    emulator_drops,
    link_floor,
    link_loads,
)
from inaemu.topology.model import Link

UNIT_ROUNDOFF = 2.0**-24  # float32
CHECKS = ("exact", "bound")
# the comparison's sizes and repeats: argument types of every command line that has them
MAX_REPEATS = arg.MAX_REPEATS
REPEATS = arg.REPEATS
parse_size = arg.elements
parse_sizes = arg.element_list


def size_label(size: int) -> str:
    """A size as `parse_size` reads it: 64K, 1M, 100000 (the largest exact binary suffix)."""
    for suffix in ("G", "M", "K"):
        if size % arg.SIZE_SUFFIX[suffix] == 0:
            return f"{size // arg.SIZE_SUFFIX[suffix]}{suffix}"
    return str(size)


def gamma(k: int) -> float:
    """Higham's gamma_k = k u / (1 - k u) for float32: the relative error bound of k roundings."""
    ku = k * UNIT_ROUNDOFF
    return ku / (1.0 - ku)


def error_bound(codec: str, n_workers: int, abs_sum: npt.NDArray[np.float64]) -> Any:
    """Element-wise bound on |result - exact sum| of `n_workers` float32 inputs whose absolute
    values sum to `abs_sum`, summed by a host collective with `codec` (plain, inceptionn)."""
    if codec == "plain":
        return gamma(max(n_workers - 1, 0)) * abs_sum
    if codec == "inceptionn":  # n compressions, each < its bound, then the additions' rounding
        lossy = n_workers * INCEPTIONN_BOUND
        return lossy + gamma(2 * n_workers) * (abs_sum + lossy)
    raise ValueError(f"no error bound for codec {codec!r}: use plain or inceptionn")


@dataclass
class LinkUse:
    """One link's traffic during a measurement (`link_ends` names its ends)."""

    a: str  # "h1" or "l1:3"
    b: str  # "s1:1"
    ifname: str  # where it was counted, as a user reads it: on Mininet the interface on b's
    # side (a's for a link between switches), `s1-eth1` (its network's prefix left out); on the
    # embedded network the switch port, `s1:1`
    a_to_b: int = 0  # bytes
    b_to_a: int = 0
    a_to_b_packets: int = 0
    b_to_a_packets: int = 0
    shaping: str = ""  # e.g. "rate 20Mbit" (tc on the counted interface), "" if unshaped


def link_ends(link: Link) -> tuple[str, str]:
    """The names of a link's ends in `LinkUse` and the table: a host by its name, a switch's
    end as switch:port ("h1", "s1:1")."""
    a = link.a if link.a_port is None else f"{link.a}:{link.a_port}"
    b = link.b if link.b_port is None else f"{link.b}:{link.b_port}"
    return a, b


def link_delta(before: list[LinkUse], after: list[LinkUse]) -> list[LinkUse]:
    return [
        dataclasses.replace(
            y,
            a_to_b=y.a_to_b - x.a_to_b,
            b_to_a=y.b_to_a - x.b_to_a,
            a_to_b_packets=y.a_to_b_packets - x.a_to_b_packets,
            b_to_a_packets=y.b_to_a_packets - x.b_to_a_packets,
        )
        for x, y in zip(before, after, strict=True)
    ]


@dataclass
class Verdict:
    """What `check_results` found."""

    problems: list[str] = field(default_factory=list)
    max_abs_error: float = float("nan")  # vs the float64 sum, over every worker's result


def check_results(
    results: Mapping[str, npt.NDArray[Any] | None],
    *,
    check: str,
    exact: npt.NDArray[Any] | None,
    sum64: npt.NDArray[np.float64],
    bound: npt.NDArray[np.float64] | None = None,
) -> Verdict:
    """Every host's result (None: it has none; the caller says why elsewhere) against
    `exact` (check "exact") or within `bound` of `sum64` (check "bound"); all must be
    identical. Never raises for a wrong result: the problems say what is wrong."""
    if check not in CHECKS:
        raise ValueError(f"unknown check {check!r}: use one of {', '.join(CHECKS)}")
    verdict = Verdict()
    errors = []
    first: tuple[str, npt.NDArray[Any]] | None = None
    for host, got in results.items():
        if got is None:
            continue
        if got.shape != sum64.shape:
            verdict.problems.append(f"{host}: result of {got.size} elements, not {sum64.size}")
            continue
        err = np.abs(got.astype(np.float64) - sum64)
        errors.append(float(err.max()) if err.size else 0.0)
        if check == "exact":
            assert exact is not None, "an exact check needs the exact result"
            if got.dtype != exact.dtype:
                verdict.problems.append(f"{host}: result {got.dtype}, expected {exact.dtype}")
                continue
            wrong = np.flatnonzero(got != exact)
            if wrong.size:
                i = int(wrong[0])
                verdict.problems.append(
                    f"{host}: {wrong.size} of {exact.size} elements wrong (first at {i}: "
                    f"{got[i]!r}, expected {exact[i]!r})"
                )
        else:
            assert bound is not None, "a bounded check needs the bound"
            over = np.flatnonzero(err > bound)
            if over.size:
                i = int(over[0])
                verdict.problems.append(
                    f"{host}: {over.size} of {err.size} elements beyond the error bound (first "
                    f"at {i}: {got[i]!r}, exact {sum64[i]!r}, bound {bound[i]:.3g})"
                )
        if first is None:
            first = (host, got)
        elif got.dtype != first[1].dtype or not np.array_equal(got, first[1]):
            verdict.problems.append(f"{host}: result differs from {first[0]}'s")
    if errors:
        verdict.max_abs_error = max(errors)
    return verdict


@dataclass
class Truth:
    """What the results of one size are checked against (`compare.check_results`)."""

    size: int
    sum64: npt.NDArray[np.float64]  # the float64 sum of the inputs
    abs_sum: npt.NDArray[np.float64]  # the sum of their absolute values
    exact: npt.NDArray[Any] | None  # `expected_sum`, if an algorithm checks "exact"


def truth(codec: str, seed: int, n: int, size: int, *, exact: bool, density: float = 1.0) -> Truth:
    """The truth of the inputs `hostlib.worker.worker_input(seed, rank, size, density)` of n
    workers (generated one at a time: the float sums need no more)."""
    arrays = (worker_input(seed, rank, size, density, codec) for rank in range(n))
    sum64, abs_sum = _sums(arrays, size)
    want = expected_sum(seed, n, size, density, codec) if exact else None
    return Truth(size, sum64, abs_sum, want)


def truth_of(inputs: Sequence[npt.NDArray[Any]], codec: str, *, exact: bool) -> Truth:
    """The truth of all-reducing `inputs` (one per worker) with `codec`."""
    size = inputs[0].size if len(inputs) else 0
    sum64, abs_sum = _sums(inputs, size)
    return Truth(size, sum64, abs_sum, expected_result(list(inputs), codec) if exact else None)


def _sums(
    arrays: Iterable[npt.NDArray[Any]], size: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The float64 sum of `arrays` and the sum of their absolute values."""
    sum64 = np.zeros(size, np.float64)
    abs_sum = np.zeros(size, np.float64)
    for a in arrays:
        x = a.astype(np.float64)
        sum64 += x
        abs_sum += np.abs(x)
    return sum64, abs_sum


@dataclass
class Row:
    """One run of an algorithm at one size on a network (Mininet, the embedded softswitches, a
    simulator): a row of summary.json's `rows` (repeated runs of one algorithm and size share
    one line of the table: `Point`). A network fills what it measures and leaves the rest at
    its default (None: not measured)."""

    algo: str
    size: int  # elements per worker
    codec: str  # the codec the runner asked for
    check: str  # exact | bound (`check_results`); "-" when skipped
    verified: bool
    seconds: float  # completion time (nan: unknown), on `clock`
    host_sent_max: int  # bytes a host's link carried from it (frames), the largest
    host_sent_mean: float
    link_bytes_mean: float  # bytes per link, both ways together, mean over the links
    link_bytes_total: int  # every link, both ways
    busiest_link: str  # "h1 -> s1:1": the busiest link direction (`busiest`)
    busiest_bytes: int
    busiest_share: float | None  # of what its bandwidth carries in `seconds`; None: unshaped
    max_abs_error: float  # vs the float64 sum of the inputs
    problems: list[str] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)  # what the algorithm's set-up said
    repeat: int = 1  # which run of this algorithm and size (1..--repeat)
    floor_seconds: float | None = None  # the busiest link's bytes at its rate; None: unshaped
    # what bounded the run (`accounting.classify`): links | emulator | unclear | unknown; a
    # network that can tell them apart may also say switch (a switch's data plane) or host
    # (a host's CPU)
    bound_by: str = "unknown"
    emulator_bound: bool = False
    bound_reason: str = ""
    # the measurements behind it: `usage` (CPU per process and of the machine over the
    # completion window), `port_drops` (per switch, during the run), `link_queue_drops`, `links`
    # (each direction's bytes, rate and load); a simulator adds its own (events, drops per
    # queue)
    accounting: dict[str, Any] = field(default_factory=dict)
    clock: str = "wall"  # what `seconds` is: wall (this machine's time) | simulated
    wall_seconds: float | None = None  # the run's wall time when `seconds` is simulated
    skipped: str = ""  # why the algorithm did not run on this network (nothing measured)
    steps: int | None = None  # a host collective's schedule steps (None: INA, or not said)
    exact: bool | None = None  # bit for bit the expected result (None: not checked so)
    within_bound: bool | None = None  # within the error bound (None: not checked so)
    host_sent: dict[str, int] = field(default_factory=dict)  # bytes each host sent
    links: list[LinkUse] = field(default_factory=list)  # every link's bytes each way
    packets: int | None = None  # frames into the switches, every port
    retransmissions: int | None = None  # the workers' retransmitted frames

    @classmethod
    def skip(cls, algo: str, size: int, codec: str, why: str) -> Row:
        """The row of an algorithm that does not run here, and why."""
        return cls(
            algo, size, codec, "-", False, float("nan"), 0, 0.0, 0.0, 0, "-", 0, None,
            float("nan"), skipped=why,
        )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def host_bytes_sent(uses: Sequence[LinkUse], hosts: Sequence[str]) -> dict[str, int]:
    """Bytes each host sent: what its link carried from it towards its switch."""
    sent = {}
    for u in uses:
        if u.a in hosts:
            sent[u.a] = u.a_to_b
        elif u.b in hosts:
            sent[u.b] = u.b_to_a
    return sent


def directions(
    uses: Sequence[LinkUse], bandwidths: Sequence[float | None]
) -> list[tuple[str, int, float | None]]:
    """(link direction, bytes, its bandwidth in Mbit/s or None) of every link, both ways."""
    out = []
    for u, bw in zip(uses, bandwidths, strict=True):
        out.append((f"{u.a} -> {u.b}", u.a_to_b, bw))
        out.append((f"{u.b} -> {u.a}", u.b_to_a, bw))
    return out


def busiest(
    uses: Sequence[LinkUse], bandwidths: Sequence[float | None]
) -> tuple[str, int, float | None]:
    """(link direction, bytes, its bandwidth in Mbit/s or None) of the busiest link: the
    one whose bytes need the most time at its bandwidth when every link is shaped (a torus
    node's host link may be shaped wider than the others: `scenario.link_shaping`), else the
    one that carried the most bytes."""
    shaped = all(bw for bw in bandwidths)
    best: tuple[str, int, float | None] = ("-", 0, None)
    most = 0.0
    for name, carried, bw in directions(uses, bandwidths):
        need = carried / bw if shaped and bw else float(carried)
        if need > most:
            best, most = (name, carried, bw), need
    return best


def bound_of(
    seconds: float,
    uses: Sequence[LinkUse],
    bandwidths: Sequence[float | None],
    usage: Usage | None,
    drops: Mapping[str, Mapping[str, int]] | None,
    queue_drops: Mapping[str, int] | None,
) -> tuple[list[LinkLoad], LinkLoad | None, Bound]:
    """Each link direction's load, the busiest (the floor) and what bounded the run
    (`accounting.classify`; the arguments as `make_row`'s)."""
    loads = link_loads(directions(uses, bandwidths), seconds)
    floor = link_floor(loads)
    lost = None if drops is None else emulator_drops(drops, queue_drops or {})
    queued = sum((queue_drops or {}).values())
    bound = classify(seconds, floor, usage, lost, shaped=floor is not None, queued=queued)
    return loads, floor, bound


def make_row(
    algo: str,
    size: int,
    codec: str,
    check: str,
    *,
    seconds: float,
    uses: Sequence[LinkUse],
    bandwidths: Sequence[float | None],
    hosts: Sequence[str],
    verdict: Verdict,
    problems: Sequence[str] = (),
    facts: Mapping[str, str] | None = None,
    usage: Usage | None = None,
    drops: Mapping[str, Mapping[str, int]] | None = None,
    queue_drops: Mapping[str, int] | None = None,
    repeat: int = 1,
    steps: int | None = None,
    packets: int | None = None,
    retransmissions: int | None = None,
) -> Row:
    """The row of a run: `problems` (failed workers, a dead switch) and the verdict's; with
    `usage` (CPU over the completion window), `drops` (per switch, its port drops during the
    run) and `queue_drops` (per switch, what its interfaces' queues dropped: the shaped links'
    buffers, taken off the port drops), what bounded it (`accounting.classify`)."""
    sent = host_bytes_sent(uses, hosts)
    per_link = [u.a_to_b + u.b_to_a for u in uses]
    name, carried, bw = busiest(uses, bandwidths)
    share = None
    if bw is not None and math.isfinite(seconds) and seconds > 0:
        share = carried / (bw * 1e6 / 8 * seconds)
    loads, floor, bound = bound_of(seconds, uses, bandwidths, usage, drops, queue_drops)
    all_problems = [*problems, *verdict.problems]
    return Row(
        algo=algo,
        size=size,
        codec=codec,
        check=check,
        verified=not all_problems,
        seconds=seconds,
        host_sent_max=max(sent.values(), default=0),
        host_sent_mean=float(np.mean(list(sent.values()))) if sent else 0.0,
        link_bytes_mean=float(np.mean(per_link)) if per_link else 0.0,
        link_bytes_total=sum(per_link),
        busiest_link=name,
        busiest_bytes=carried,
        busiest_share=share,
        max_abs_error=verdict.max_abs_error,
        problems=all_problems,
        facts=dict(facts or {}),
        repeat=repeat,
        floor_seconds=None if floor is None else floor.seconds_needed,
        bound_by=bound.by,
        emulator_bound=bound.emulator,
        bound_reason=bound.reason,
        accounting=accounting_json(usage, drops, loads, queue_drops),
        steps=steps,
        exact=not verdict.problems if check == "exact" else None,
        within_bound=not verdict.problems if check == "bound" else None,
        host_sent=sent,
        links=list(uses),
        packets=packets,
        retransmissions=retransmissions,
    )


def accounting_json(
    usage: Usage | None,
    drops: Mapping[str, Mapping[str, int]] | None,
    loads: Sequence[LinkLoad],
    queue_drops: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """A row's `accounting`: what the bound was judged from."""
    return {
        "usage": None if usage is None else usage.to_json(),
        "port_drops": None if drops is None else {k: dict(v) for k, v in drops.items()},
        "link_queue_drops": None if queue_drops is None else dict(queue_drops),
        "links": [asdict(x) for x in loads],
    }


# ---------------------------------------------------------------------- repeated runs


@dataclass
class Point:
    """One algorithm at one size over its repeated runs: the table's line, the plot's point."""

    algo: str
    size: int
    runs: int  # every run, verified or not
    seconds: list[float] = field(default_factory=list)  # each verified run's completion time
    floors: list[float] = field(default_factory=list)  # their link floors (none: unshaped)
    emulator_bound: int = 0  # verified runs marked emulator-bound

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) if self.seconds else float("nan")

    @property
    def low(self) -> float:
        return min(self.seconds, default=float("nan"))

    @property
    def high(self) -> float:
        return max(self.seconds, default=float("nan"))

    @property
    def floor(self) -> float | None:
        return statistics.median(self.floors) if self.floors else None

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "median_seconds": self.median,
            "min_seconds": self.low,
            "max_seconds": self.high,
            "floor_seconds": self.floor,
        }


def groups(rows: Sequence[Row]) -> list[list[Row]]:
    """The rows of each (algorithm, size), in the order they first appear."""
    out: dict[tuple[str, int], list[Row]] = {}
    for r in rows:
        out.setdefault((r.algo, r.size), []).append(r)
    return list(out.values())


def _timed(r: Row) -> bool:
    return r.verified and math.isfinite(r.seconds)


def make_point(group: Sequence[Row]) -> Point:
    ok = [r for r in group if _timed(r)]
    return Point(
        group[0].algo,
        group[0].size,
        len(group),
        [r.seconds for r in ok],
        [r.floor_seconds for r in ok if r.floor_seconds is not None],
        sum(r.emulator_bound for r in ok),
    )


def points(rows: Sequence[Row]) -> list[Point]:
    """Each algorithm and size that ran: the table's lines, the plot's points."""
    return [make_point(g) for g in groups(rows) if not g[0].skipped]


def median_row(group: Sequence[Row]) -> Row:
    """The run whose time is the median of its group's verified runs (the lower of the two
    middle ones), else the first run."""
    ok = sorted((r for r in group if _timed(r)), key=lambda r: r.seconds)
    return ok[(len(ok) - 1) // 2] if ok else group[0]


def bound_cell(group: Sequence[Row]) -> str:
    """links | emulator | unclear, or `emulator k/n` when only k of the n runs were."""
    kinds = [r.bound_by for r in group]
    if len(set(kinds)) == 1:
        return kinds[0]
    marked = sum(r.emulator_bound for r in group)
    if marked:
        return f"emulator {marked}/{len(group)}"
    return max(set(kinds), key=kinds.count) + " ~"


def _process_cell(r: Row) -> str:
    usage = r.accounting.get("usage")
    if not usage or not usage.get("processes"):
        return "-"
    p = max(usage["processes"], key=lambda x: x["busy"])
    return f"{p['name']} {100 * p['busy']:.0f} %"


def _machine_cell(r: Row) -> str:
    usage = r.accounting.get("usage")
    if not usage or usage.get("machine_busy") is None:
        return "-"
    return f"{100 * usage['machine_busy']:.0f} %"


# ---------------------------------------------------------------------- the table


def _mb(n: float) -> str:
    return f"{n / 1e6:,.2f}"


def _error(e: float) -> str:
    if not math.isfinite(e):
        return "-"
    return "0" if e == 0 else f"{e:.2e}"


def _s(x: float | None) -> str:
    return f"{x:.3f}" if x is not None and math.isfinite(x) else "-"


def _verdict(group: Sequence[Row]) -> str:
    """What the checks found, of the first failed run, else of all: bit-exact, within bound."""
    r = next((x for x in group if not x.verified), group[0])
    parts = []
    if r.exact is not None:
        parts.append("bit-exact" if r.exact else "NOT bit-exact")
    if r.within_bound is not None:
        parts.append("within bound" if r.within_bound else "BOUND NOT MET")
    return ", ".join(parts) or ("verified" if r.verified else "FAILED")


def _count(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


Cell = Callable[[Sequence[Row], Row, Point], str]  # (the runs, the median run, their point)

# Every column a table of runs can have, by its header, with what its cell says. A network
# shows the columns it measures (`TABLE_HEADER`: Mininet's; the embedded network's own list
# is `cli/compare.py`'s): unshaped links have no floor or load, a kernel's interfaces count
# no switch's packets.
COLUMNS: dict[str, Cell] = {
    "algorithm": lambda g, r, pt: r.algo,
    "size": lambda g, r, pt: f"{r.size:,}",
    "check": lambda g, r, pt: r.check if all(x.verified for x in g) else "FAILED",
    "steps": lambda g, r, pt: "-" if r.steps is None else str(r.steps),
    "time s": lambda g, r, pt: _s(pt.median if pt.seconds else r.seconds),
    "min-max s": lambda g, r, pt: f"{pt.low:.3f}-{pt.high:.3f}" if len(pt.seconds) > 1 else "-",
    "floor s": lambda g, r, pt: _s(r.floor_seconds),
    "load": lambda g, r, pt: (
        f"{100 * r.busiest_share:.0f} %" if r.busiest_share is not None else "-"
    ),
    "MB/host out": lambda g, r, pt: _mb(r.host_sent_max),
    "host sent MB max/mean": lambda g, r, pt: f"{_mb(r.host_sent_max)} / {_mb(r.host_sent_mean)}",
    "MB all links": lambda g, r, pt: _mb(r.link_bytes_total),
    "busiest MB": lambda g, r, pt: _mb(r.busiest_bytes),
    "busiest link": lambda g, r, pt: r.busiest_link,
    "packets": lambda g, r, pt: _count(r.packets),
    "retx": lambda g, r, pt: _count(r.retransmissions),
    "busiest process": lambda g, r, pt: _process_cell(r),
    "machine": lambda g, r, pt: _machine_cell(r),
    "bound": lambda g, r, pt: bound_cell(g),
    "max |error|": lambda g, r, pt: _error(max((x.max_abs_error for x in g), key=_nan_low)),
    "result": lambda g, r, pt: _verdict(g),
}
LEFT = {"algorithm", "check", "busiest link", "busiest process", "bound", "result"}
SPREAD = "min-max s"  # shown only when some algorithm and size ran more than once

TABLE_HEADER = (
    "algorithm",
    "size",
    "check",
    "time s",
    SPREAD,
    "floor s",
    "load",
    "busiest link",
    "busiest MB",
    "host sent MB max/mean",
    "busiest process",
    "machine",
    "bound",
    "max |error|",
)


def render_table(rows: Sequence[Row], columns: Sequence[str] = TABLE_HEADER) -> list[str]:
    """The comparison as text, one line per algorithm and size (repeated runs: the median
    time, its range, the rest from the median run), in `columns` (`COLUMNS`' headers), sizes
    in elements, bytes in MB = 10^6; an algorithm that was skipped says why in the last
    column."""
    gs = groups(rows)
    spread = any(len(g) > 1 for g in gs)
    header = tuple(h for h in columns if spread or h != SPREAD)
    cells = [header]
    for g in gs:
        r, pt = median_row(g), make_point(g)
        if r.skipped:
            cells.append((r.algo, *["-"] * (len(header) - 2), f"skipped: {r.skipped}"))
            continue
        cells.append(tuple(COLUMNS[h](g, r, pt) for h in header))
    widths = [max(len(c[i]) for c in cells if i < len(c)) for i in range(len(header))]
    lines = []
    for c in cells:
        parts = [
            c[i].ljust(widths[i]) if header[i] in LEFT else c[i].rjust(widths[i])
            for i in range(len(c))
        ]
        lines.append("  ".join(parts).rstrip())
    return lines


def _nan_low(x: float) -> float:
    return x if math.isfinite(x) else -math.inf


def bound_notes(rows: Sequence[Row]) -> list[str]:
    """Under the table: why each algorithm and size that was not links-bound was not (the
    median run's reason; the median emulator-bound run's if any was)."""
    out = []
    for g in groups(rows):
        if g[0].skipped:
            continue
        marked = sum(r.emulator_bound for r in g)
        r = median_row([x for x in g if x.emulator_bound] if marked else g)
        if not marked and r.bound_by == "links":
            continue
        runs = f" ({marked} of {len(g)} runs)" if marked and len(g) > 1 else ""
        what = "emulator-bound" if marked else f"{r.bound_by}"
        out.append(f"  {r.algo} x {size_label(r.size)}: {what}{runs}: {r.bound_reason}")
    return out


# ---------------------------------------------------------------------- the plot


def completion_figure(pts: Sequence[Point], *, title: str = "") -> Any:
    """The figure of completion time against size (log-log): per algorithm the median of its
    verified runs (a line), the spread min-max (bars), its link floor (dashed, its colour),
    emulator-bound points hollow (`marks`: the same marks as every plot of runs); x ticks at
    exactly the sizes (`size_label`), y ticks 1-2-5. The caller closes it
    (`matplotlib.pyplot.close`). RuntimeError if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except ImportError:
        raise RuntimeError(
            "the completion plot needs matplotlib: pip install 'inaemu[draw]'"
        ) from None
    fig, ax = plt.subplots(figsize=(9, 5))
    sizes = sorted({p.size for p in pts})
    values: list[float] = []
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    legend: list[Any] = []
    any_floor = any_marked = False
    algos = list(dict.fromkeys(p.algo for p in pts if p.seconds))
    for i, algo in enumerate(algos):
        colour = colours[i % len(colours)]
        mine = sorted((p for p in pts if p.algo == algo and p.seconds), key=lambda p: p.size)
        # each algorithm a little to the side of the size, so that bars do not overlap
        dodge = marks.dodge(i, len(algos))
        xs, ys = [p.size * dodge for p in mine], [p.median for p in mine]
        values += [p.low for p in mine] + [p.high for p in mine]
        ax.plot(xs, ys, color=colour, linewidth=1.5)
        legend.append(Line2D([], [], color=colour, marker="o", label=algo))
        for x, p in zip(xs, mine, strict=True):
            hollow = p.emulator_bound > 0
            any_marked |= hollow
            ax.plot([x], [p.median], **marks.point(colour, hollow))
            if len(p.seconds) > 1:
                ax.errorbar(
                    [x], [p.median],
                    yerr=[[p.median - p.low], [p.high - p.median]],
                    fmt="none", ecolor=colour, **marks.SPREAD,
                )  # fmt: skip
        floors = [(p.size, p.floor) for p in mine if p.floor is not None]
        if floors:
            any_floor = True
            fx, fy = zip(*floors, strict=True)
            values += list(fy)
            ax.plot(fx, fy, color=colour, **marks.FLOOR)
    runs = max((p.runs for p in pts), default=0)
    legend += marks.handles(emulator_bound=any_marked, floor=any_floor, runs=runs)
    marks.size_axis(ax, sizes, lambda n: size_label(int(n)))
    marks.value_axis(ax, values)
    ax.set_xlabel("elements per worker")
    ax.set_ylabel("completion time (s)")
    if not any_floor:
        title = (title + "\n" if title else "") + "links unshaped: no link floor"
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    if legend:
        ax.legend(handles=legend, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    return fig


def plot_points(pts: Sequence[Point], path: Path, *, title: str = "") -> Path:
    """`completion_figure` as a PNG at `path`."""
    fig = completion_figure(pts, title=title)
    import matplotlib.pyplot as plt

    try:
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


def plot_completion(rows: Sequence[Row], path: Path, *, title: str = "") -> Path:
    """The rows' completion time against size (`completion_figure`, verified runs only) as a
    PNG. Needs matplotlib (the `draw` extra); RuntimeError saying so if it is missing."""
    return plot_points(points(rows), path, title=title)
