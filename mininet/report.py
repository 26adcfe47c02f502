"""What `inaemu mininet` prints: a single run's report (completion, links, the switches'
counters, what bounded it) and the comparison of several algorithms or sizes (one table, and
the plot with several sizes)."""

from __future__ import annotations

import argparse
from typing import Any

from inaemu.common.wire import FRAME_BYTES, K
from inaemu.mininet.algo_run import AlgoRun, fmt_bytes
from inaemu.mininet.algos import (
    Ina,
)
from inaemu.mininet.scenario import RunDir
from inaemu.runs.accounting import (
    Usage,
)
from inaemu.runs.compare import (
    LinkUse,
    Row,
    bound_notes,
    groups,
    plot_completion,
)
from inaemu.runs.compare import render_table as render_comparison


def render_links(uses: list[LinkUse]) -> list[str]:
    width = max((len(f"{u.a} -> {u.b}") for u in uses), default=10)
    lines = [f"  {'link (a -> b)':<{width}}  {'a -> b':>14}  {'b -> a':>14}  shaping"]
    for u in uses:
        lines.append(
            f"  {f'{u.a} -> {u.b}':<{width}}  {u.a_to_b:>12,} B  {u.b_to_a:>12,} B  "
            f"{u.shaping or '-'}"
        )
    return lines


def report_single(run: AlgoRun, row: Row, how: str, args: argparse.Namespace, say: Any) -> None:
    """One algorithm at one size: completion, every link, the switch counters, the verdict."""
    seconds, size = row.seconds, run.spec.size
    frames = -(-size // K)
    say(f"completion: {seconds:.3f} s ({how}); workers ran {run.wall:.1f} s in all")
    if seconds == seconds and seconds > 0:
        rate = 8 * 4 * size / seconds / 1e6
        say(f"  algorithm bandwidth {rate:,.1f} Mbit/s (a worker's input / completion time)")
    if isinstance(run.algo, Ina):
        say(
            f"bytes per link during the allreduce (each worker sends at least {frames:,} "
            f"frames = {fmt_bytes(frames * FRAME_BYTES)} per phase):"
        )
    else:
        say("bytes per link during the allreduce (Ethernet frames, TCP headers included):")
    for line in render_links(run.links):
        say(line)
    say("switch counters (inaemu stats):")
    for line in run.stats.rstrip().splitlines():
        say(f"  {line}")
    for line in usage_lines(run.usage):
        say(line)
    if row.floor_seconds is not None:
        say(
            f"link floor: {row.floor_seconds:.3f} s (the busiest link's bytes at its rate; "
            f"completion {row.seconds / row.floor_seconds:.2f}x)"
        )
    say(f"bound by {row.bound_by}: {row.bound_reason}")
    if row.problems:
        say(f"FAILED: {len(row.problems)} problem(s):")
        for p in row.problems:
            say(f"  {p}")
    else:
        if row.check == "bound":
            what = f"the float64 sum within the {args.codec} error bound"
        elif args.codec == "int32":
            what = "numpy's sum of the inputs"
        else:
            what = "the reference"
        say(
            f"verified: {len(run.outcomes)} workers' results identical and equal to {what} "
            f"({size:,} elements; max |error| {row.max_abs_error:.3g})"
        )


def usage_lines(usage: Usage | None) -> list[str]:
    """The CPU of a run's processes and of the machine, as the report prints it."""
    if usage is None:
        return []
    each = ", ".join(
        f"{p.name} {p.busy:.0%}" for p in sorted(usage.processes, key=lambda p: -p.busy)
    )
    machine = "-" if usage.machine_busy is None else f"{usage.machine_busy:.0%}"
    return [
        f"CPU over the completion window ({usage.window:.3f} s), share of one core: {each}; "
        f"the machine's {usage.cores} cores {machine} busy"
    ]


def report_comparison(
    rows: list[Row], run: RunDir, args: argparse.Namespace, say: Any, *, title: str
) -> None:
    """Several runs: one table, what its columns count, the plot, the problems."""
    repeated = any(len(g) > 1 for g in groups(rows))
    for line in render_comparison(rows):
        say(line)
    say(
        "bytes: Ethernet frames counted by the kernel on each link's root-namespace interface "
        "(Mininet's veths), from the workers' start to their exit; host sent: its link towards "
        "the switch; floor: the time the busiest link direction's bytes need at its rate; "
        "load: floor / completion time; busiest process: the switch or worker process that "
        "used the most of a core over the completion window; machine: all its cores, "
        "anybody's work; bound: what bounded the time (links, emulator, unclear: docs/"
        "mininet.md); max |error|: against the float64 sum of the inputs"
        + ("; with --repeat: the median run, min-max of the times" if repeated else "")
    )
    notes = bound_notes(rows)
    if notes:
        say("not bound by the links:")
        for line in notes:
            say(line)
    if len(args.sizes or []) > 1:
        try:
            path = plot_completion(rows, run.root / "completion.png", title=title)
            say(f"completion time against size: {path}")
        except RuntimeError as exc:
            say(f"no plot: {exc}")
    failed = [r for r in rows if not r.verified]
    if failed:
        say(f"FAILED: {len(failed)} of {len(rows)} run(s):")
        for r in failed:
            for p in r.problems:
                say(f"  {r.algo} x {r.size:,}: {p}")
    else:
        say(f"verified: every run ({len(rows)}), each worker's result as its check requires")
