"""The marks and axes of every plot of runs, each mark with one meaning, defined here once.

Used by the completion plots (`inaemu mininet --sizes`, `inaemu demo --algo ... --sizes`:
`compare.completion_figure`) and by bench/papers.py's plots:

- a run, or the median of repeated runs: a circle in its series' colour (another shape where
  shapes tell settings apart), **filled** when the links bounded it or nothing was found to,
  **hollow** (a white face) when the emulator did in any of the runs behind it
  (`accounting.classify`: a process or the machine's cores busy, drops outside the pipeline;
  docs/mininet.md, "What bounded a run");
- the spread of repeated runs: a bar from the fastest to the slowest, with caps; one run has
  no bar and is called "1 run", never a range;
- a link floor (the busiest link's bytes at its rate): a dashed line in its series' colour,
  no marker;
- a model's prediction (alpha-beta): a dashed, paler line with x markers;
- a paper's number: a dotted black line.

Several series at one size sit a few percent apart around it (`dodge`). Axes of sizes (or
densities) are logarithmic with a tick at exactly each value plotted and
limits a factor `PAD` beyond the outermost (one value: a factor `PAD` either side, not the
decades matplotlib would choose around a single point); axes of times and ratios are
logarithmic with 1-2-5 ticks from the one at or below the least value to the one at or above
the largest (`nice_ticks`).

matplotlib is imported by the functions that draw, so that importing this costs nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

EMULATOR_FACE = "white"
EMULATOR_LABEL = "emulator-bound (hollow; in any of its runs)"
MARKER_SIZE = 7
EDGE_WIDTH = 1.5
SPREAD: dict[str, Any] = {"capsize": 3, "elinewidth": 1}
FLOOR: dict[str, Any] = {"linestyle": "--", "linewidth": 1, "alpha": 0.7}
MODEL: dict[str, Any] = {"linestyle": "--", "marker": "x", "alpha": 0.6}
PAPER: dict[str, Any] = {"color": "black", "linestyle": ":", "alpha": 0.7}
PAD = 1.4  # a size axis's limits beyond its outermost values, as a factor
DODGE = 1.03  # neighbouring series' points this factor apart around a size


def dodge(i: int, n: int) -> float:
    """The factor that puts series `i` of `n` a little to the side of a size, so that the
    series' points and bars at one size do not hide one another (the tick stays at the size)."""
    return float(DODGE ** (i - (n - 1) / 2))


def point(colour: str, emulator_bound: bool, marker: str = "o") -> dict[str, Any]:
    """The keyword arguments of `Axes.plot` / `Axes.errorbar` for a run's marker."""
    return {
        "linestyle": "none",
        "marker": marker,
        "markersize": MARKER_SIZE,
        "markeredgecolor": colour,
        "markeredgewidth": EDGE_WIDTH,
        "markerfacecolor": EMULATOR_FACE if emulator_bound else colour,
    }


def spread_label(runs: int) -> str:
    return "1 run" if runs == 1 else f"median of up to {runs} runs, bar min-max"


def handles(
    *, emulator_bound: bool = False, floor: bool = False, model: bool = False, runs: int = 0
) -> list[Any]:
    """Legend entries for the marks in use (grey: they mean the same in every colour)."""
    from matplotlib.lines import Line2D

    out: list[Any] = []
    if floor:
        out.append(
            Line2D([], [], color="grey", **FLOOR, label="link floor: busiest link's bytes / rate")
        )
    if model:
        out.append(Line2D([], [], color="grey", **MODEL, label="model (alpha-beta)"))
    if emulator_bound:
        out.append(Line2D([], [], **point("grey", True), label=EMULATOR_LABEL))
    if runs > 1:
        out.append(
            Line2D(
                [], [], color="grey", marker="|", linestyle="none", markersize=10,
                label=spread_label(runs),
            )
        )  # fmt: skip
    return out


def nice_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks from the largest one <= lo to the smallest one >= hi, at least two
    (decades only when that makes more than 12)."""
    chosen: list[float] = []
    for mantissas in ((1, 2, 5), (1,)):
        ticks = []
        for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 2):
            ticks += [m * 10.0**e for m in mantissas]
        below = max(t for t in ticks if t <= lo * (1 + 1e-9))
        above = min(t for t in ticks if t >= hi * (1 - 1e-9))
        if below == above:  # one value on a tick: the ticks either side of it too
            below = max(t for t in ticks if t < below)
            above = min(t for t in ticks if t > above)
        chosen = [float(f"{t:.6g}") for t in ticks if below <= t <= above]
        if len(chosen) <= 12:
            break
    return chosen


def size_axis(ax: Any, values: Sequence[float], label: Callable[[float], str]) -> None:
    """A logarithmic x axis with a tick at each value (`label` writes it), limits `PAD`
    beyond the outermost, no minor ticks."""
    from matplotlib.ticker import NullLocator

    xs = sorted({v for v in values if math.isfinite(v) and v > 0})
    ax.set_xscale("log")
    if xs:
        ax.set_xticks(xs, [label(x) for x in xs])
        ax.set_xlim(xs[0] / PAD, xs[-1] * PAD)
    ax.xaxis.set_minor_locator(NullLocator())


def value_axis(ax: Any, values: Sequence[float]) -> None:
    """A logarithmic y axis spanning `values` with 1-2-5 ticks (`nice_ticks`)."""
    from matplotlib.ticker import NullLocator

    ys = [v for v in values if math.isfinite(v) and v > 0]
    ax.set_yscale("log")
    if ys:
        ticks = nice_ticks(min(ys), max(ys))
        ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
        ax.set_ylim(ticks[0], ticks[-1])
    ax.yaxis.set_minor_locator(NullLocator())
