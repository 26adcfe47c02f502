"""Allreduce algorithms side by side: one row per (algorithm, size) run, its checks, the table
`inaemu mininet --algo all` prints, and the completion-time plot. Pure: nothing here needs
Mininet or root, so an embedded comparison or a benchmark can use the same rows and table.

Checking a result (`check_results`): every worker's array against what the algorithm promises
for the codec it ran,

- `exact`: equal, element for element, to the exact result: numpy's int32 sum of the inputs,
  or, for INA with another codec, that codec run against the reference switch
  (`run.expected_result`);
- `bound`: within an element-wise bound of the float64 sum of the inputs (`error_bound`):
  float32 summed in any order (`plain`) within gamma(n-1) * sum |x_i| (Higham's bound for n-1
  additions, u = 2^-24); INCEPTIONN (`inceptionn`) within n compressions of its error bound
  on top of that.

and all workers' arrays identical (an allreduce that leaves workers with different models is
wrong even when each is close). Every row also carries its error: the largest |result - float64
sum of the inputs| over every worker and element.

Traffic (`make_row`) comes from the links' byte counters (`scenario.LinkUse`: the kernel's
counters of each link's root-namespace interface, Ethernet frames with all headers, read
before and after the workers ran): a host's bytes sent are what its link carried from it to
the switch; the busiest link is the link direction whose bytes needed the most of its
bandwidth (the most bytes when a link is unshaped), shown with its share of what its bandwidth
could carry during the completion time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.hostlib.codecs.inceptionn import DEFAULT_ERROR_BOUND as INCEPTIONN_BOUND
from inaemu.mininet.scenario import LinkUse

UNIT_ROUNDOFF = 2.0**-24  # float32
CHECKS = ("exact", "bound")


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
class Row:
    """One algorithm at one size: the table's row (summary.json's `rows`)."""

    algo: str
    size: int  # elements per worker
    codec: str  # the codec the runner asked for
    check: str  # exact | bound
    verified: bool
    seconds: float  # completion time (nan: unknown)
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
    for u, bw in zip(uses, bandwidths, strict=True):
        for name, carried in ((f"{u.a} -> {u.b}", u.a_to_b), (f"{u.b} -> {u.a}", u.b_to_a)):
            need = carried / bw if shaped and bw else float(carried)
            if need > most:
                best, most = (name, carried, bw), need
    return best


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
) -> Row:
    """The row of a run: `problems` (failed workers, a dead switch) and the verdict's."""
    sent = host_bytes_sent(uses, hosts)
    per_link = [u.a_to_b + u.b_to_a for u in uses]
    name, carried, bw = busiest(uses, bandwidths)
    share = None
    if bw is not None and math.isfinite(seconds) and seconds > 0:
        share = carried / (bw * 1e6 / 8 * seconds)
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
    )


def _mb(n: float) -> str:
    return f"{n / 1e6:,.2f}"


def _error(e: float) -> str:
    if not math.isfinite(e):
        return "-"
    return "0" if e == 0 else f"{e:.2e}"


TABLE_HEADER = (
    "algorithm",
    "size",
    "check",
    "time s",
    "host sent MB max/mean",
    "per link MB",
    "busiest link",
    "busiest MB",
    "load",
    "max |error|",
)


def render_table(rows: Sequence[Row]) -> list[str]:
    """The comparison as text, one line per row (sizes in elements, bytes in MB = 10^6)."""
    cells = [TABLE_HEADER]
    for r in rows:
        seconds = f"{r.seconds:.3f}" if math.isfinite(r.seconds) else "-"
        load = f"{100 * r.busiest_share:.0f} %" if r.busiest_share is not None else "-"
        verdict = r.check if r.verified else "FAILED"
        cells.append(
            (
                r.algo,
                f"{r.size:,}",
                verdict,
                seconds,
                f"{_mb(r.host_sent_max)} / {_mb(r.host_sent_mean)}",
                _mb(r.link_bytes_mean),
                r.busiest_link,
                _mb(r.busiest_bytes),
                load,
                _error(r.max_abs_error),
            )
        )
    widths = [max(len(c[i]) for c in cells) for i in range(len(TABLE_HEADER))]
    lines = []
    for c in cells:
        parts = [
            c[i].ljust(widths[i]) if i in (0, 2, 6) else c[i].rjust(widths[i])
            for i in range(len(c))
        ]
        lines.append("  ".join(parts).rstrip())
    return lines


def plot_completion(rows: Sequence[Row], path: Path, *, title: str = "") -> Path:
    """completion time against size, one line per algorithm (verified runs only), as a PNG.
    Needs matplotlib (the `draw` extra); RuntimeError saying so if it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError(
            "the completion plot needs matplotlib: pip install 'inaemu[draw]'"
        ) from None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    try:
        for algo in dict.fromkeys(r.algo for r in rows):
            points = sorted(
                (r.size, r.seconds)
                for r in rows
                if r.algo == algo and r.verified and math.isfinite(r.seconds)
            )
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="o", label=algo)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("elements per worker")
        ax.set_ylabel("completion time (s)")
        if title:
            ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path
