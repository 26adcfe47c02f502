"""In-network aggregation on Mininet under a link bandwidth: how close an allreduce of M bytes
per worker comes to M * 8 / bw, per topology and switch kind (root).

    sudo .venv/bin/python bench/bench_mininet.py [--topo star:4 leaf-spine:2x2x2]
        [--switch softswitch bmv2] [--seconds 4] [--repeat 2] [--dataplane fast reference]
        [--probes 3] [--window W]

For every switch kind and topology, with `inaemu mininet` (algo `ina`, int32, every result
verified by the runner):

1. **the switch's limit**: an allreduce on unshaped links (`--bw` unset) is bounded by the
   switch; the busiest link's bytes per second in it, in Mbit/s, is the bandwidth at which
   the switch becomes the bottleneck (printed as `limit`; `runs.accounting.capacity`, what
   `inaemu mininet --bw auto` measures). The softswitch's is measured for each of its data
   planes (`--dataplane`: the compiled one and the Python reference), `--probes` pairs
   interleaved, and printed side by side: the median limit of each, its spread, the ratio of
   the medians (and per pair), and what bounded the median run (the runner's accounting).
2. **shaped**: the links set to `--share` (default 0.5) of that limit
   (`accounting.choose_bw`), checked as `--bw auto` checks it (a shaped run of each
   algorithm, here INA alone, of about a second of link time; not links-bound: step down,
   `accounting.next_bw`), so that the links
   and not the switch bound the run, and M chosen
   so that M * 8 / bw is about `--seconds`. Per run: `x M*8/bw`, the completion time over the
   time the payload alone needs at the link rate, and `x wire`, over the time the busiest host
   link's bytes (frames with their headers, every retransmission included) need at that rate;
   and what bounded it (`bound`: links, emulator or unclear, the runner's bottleneck
   accounting, docs/mininet.md), with the busiest process's share of a core (`cpu`) and the
   machine's cores busy (`machine`) over the run. A shaped run that is not links-bound is
   listed under the table with the runner's reason.

A frame carries K = 64 int32 lanes (256 bytes) in 312 bytes on the wire (Ethernet, IPv4, UDP
and INA headers), so an allreduce can at best reach 312 / 256 = 1.22 x M * 8 / bw: a target of
1.2 x is out of reach by the wire format alone, and `x wire` shows how close the rest comes.
TCLink shapes each direction of a link, so the upward partials and the downward results do not
share a rate.

Prints a table; asserts nothing. Without root (or Mininet's namespaces) it says so and exits 0;
bmv2 is skipped with the reason when it is not installed. The defaults take 3-6 minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from inaemu.common import args as arg  # noqa: E402
from inaemu.common.wire import FRAME_BYTES, K  # noqa: E402
from inaemu.runs.accounting import (  # noqa: E402
    BW_CHECKS,
    Capacity,
    capacity,
    check_size,
    choose_bw,
    next_bw,
)
from inaemu.softswitch.fast.dataplanes import DATAPLANES  # noqa: E402

PAYLOAD_BYTES = 4 * K  # int32 lanes per frame
MIN_SIZE = 16 * 1024  # elements: below this, start-up dominates


@dataclass
class Run:
    bw: float | None  # Mbit/s, None: unshaped
    size: int  # elements per worker
    seconds: float
    host_link_bytes: int  # the busiest host link, the busier direction
    retransmissions: int
    verified: bool
    row: dict[str, Any]  # summary.json's row: the accounting (bound_by, bound_reason, ...)
    directions: list[tuple[str, int, float | None]]  # every link direction's bytes, scale 1

    @property
    def bound(self) -> str:
        return str(self.row.get("bound_by", "-"))

    def cpu(self) -> tuple[str, str]:
        """The busiest process's share of a core over the run, and the machine's cores."""
        usage = self.row.get("accounting", {}).get("usage") or {}
        procs = usage.get("processes") or []
        machine = usage.get("machine_busy")
        top = max(procs, key=lambda p: p["busy"], default=None)
        return (
            "-" if top is None else f"{top['name']} {top['busy']:.0%}",
            "-" if machine is None else f"{machine:.0%}",
        )

    @property
    def payload_bytes(self) -> int:
        return 4 * self.size

    def x_payload(self) -> float:
        assert self.bw is not None
        return self.seconds / (self.payload_bytes * 8 / (self.bw * 1e6))

    def x_wire(self) -> float:
        assert self.bw is not None
        return self.seconds / (self.host_link_bytes * 8 / (self.bw * 1e6))


def run_scenario(
    topo: str,
    switch: str,
    size: int,
    bw: float | None,
    tmp: Path,
    dataplane: str | None = None,
    window: int | None = None,
) -> Run:
    """One `inaemu mininet` run (the softswitch's `dataplane`, the job's `window`: the
    runner's defaults if None); its summary.json read back."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"{switch}-{topo.replace(':', '-')}-", dir=tmp))
    argv = [sys.executable, "-m", "inaemu.mininet", "--topo", topo, "--switch", switch]
    argv += ["--algo", "ina", "--size", str(size), "--run-dir", str(run_dir), "--no-install"]
    argv += ["--timeout", "60", "--bmv2-log-level", "off"]
    if bw is not None:
        argv += ["--bw", f"{bw:g}"]
    if dataplane is not None:
        argv += ["--dataplane", dataplane]
    if window is not None:
        argv += ["--window", str(window)]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    summary_file = run_dir / "summary.json"
    if not summary_file.exists():
        raise RuntimeError(f"{' '.join(argv[2:])}: exit {proc.returncode}: {proc.stderr[-800:]}")
    summary: dict[str, Any] = json.loads(summary_file.read_text())
    host_bytes = max(
        max(int(u["a_to_b"]), int(u["b_to_a"]))
        for u in summary["links"]
        if ":" not in u["a"]  # a host's link: "h1" - "s1:1"
    )
    retx = sum(int(r.get("retransmissions", 0)) for r in summary["worker_reports"] if r)
    ways: list[tuple[str, int, float | None]] = []
    for u in summary["links"]:
        ways += [(f"{u['a']} -> {u['b']}", int(u["a_to_b"]), 1.0)]
        ways += [(f"{u['b']} -> {u['a']}", int(u["b_to_a"]), 1.0)]
    return Run(
        bw,
        size,
        float(summary["completion_seconds"]),
        host_bytes,
        retx,
        summary["verified"],
        summary["rows"][0],
        ways,
    )


def switch_missing(kind: str) -> str | None:
    if kind == "softswitch":
        return None
    from inaemu.conformance.bmv2_target import TOOLS
    from inaemu.p4.tools import SIMPLE_SWITCH_GRPC, missing_tools

    return missing_tools((*TOOLS, SIMPLE_SWITCH_GRPC))


def limits(
    topo: str, planes: list[str], probes: int, size: int, window: int | None, tmp: Path
) -> Capacity:
    """The softswitch's limit on `topo` with each data plane, `probes` unshaped runs each,
    interleaved; prints them side by side and returns the first plane's median run's."""
    caps: dict[str, list[tuple[Capacity, Run]]] = {p: [] for p in planes}
    for _ in range(probes):
        for plane in planes:
            run = run_scenario(topo, "softswitch", size, None, tmp, plane, window)
            cap = capacity("ina", run.size, run.seconds, run.directions)
            if cap is None:
                raise RuntimeError(f"{topo} on softswitch ({plane}): the unshaped run has no time")
            caps[plane].append((cap, run))
    medians: dict[str, tuple[Capacity, Run]] = {}
    for plane, got in caps.items():
        ranked = sorted(got, key=lambda cr: cr[0].mbit)
        medians[plane] = ranked[len(ranked) // 2]
        cap, run = medians[plane]
        mbits = [c.mbit for c, _ in got]
        cpu, machine = run.cpu()
        print(
            f"# {topo} on softswitch, {plane} data plane: limit {cap.mbit:.1f} Mbit/s "
            f"({min(mbits):.1f}-{max(mbits):.1f}, {probes} unshaped runs of "
            f"{run.payload_bytes / 2**20:.1f} MiB per worker, busiest link {cap.link}); the "
            f"median run {run.seconds:.3f} s, busiest process {cpu}, machine {machine}; "
            f"{run.row.get('bound_reason', '')}",
            flush=True,
        )
    first = planes[0]
    for other in planes[1:]:
        pairs = [a.mbit / b.mbit for (a, _), (b, _) in zip(caps[first], caps[other], strict=True)]
        ratio = medians[first][0].mbit / medians[other][0].mbit
        print(
            f"# {topo} on softswitch: {first} / {other} limit {ratio:.1f}x (medians; pairs "
            f"{min(pairs):.1f}-{max(pairs):.1f}x)",
            flush=True,
        )
    return medians[first][0]


def checked_bw(
    topo: str,
    kind: str,
    cap: Capacity,
    bw: float,
    tmp: Path,
    dataplane: str | None,
    window: int | None,
) -> float:
    """As `inaemu mininet --bw auto` checks its rate (`mininet.run.check_bw`, which runs every
    algorithm; here INA is the only one): one shaped run of about a second of link time at
    `bw`; if the links did not bound it, step down (`accounting.next_bw`) and check again, at
    most `BW_CHECKS` runs. Prints each check."""
    for _ in range(BW_CHECKS):
        size = check_size(cap, bw)
        run = run_scenario(topo, kind, size, bw, tmp, dataplane, window)
        carried = capacity("ina", run.size, run.seconds, run.directions)
        after = next_bw(bw, run.bound, None if carried is None else carried.mbit)
        step = "kept" if after == bw else f"stepping down to {after:g} Mbit/s"
        print(
            f"# {topo} on {kind}: checked {bw:g} Mbit/s ({run.payload_bytes / 2**20:.1f} MiB "
            f"per worker, {run.seconds:.2f} s): {run.bound}-bound, {step}; "
            f"{run.row.get('bound_reason', '')}",
            flush=True,
        )
        if after == bw:
            return bw
        bw = after
    print(f"# {topo} on {kind}: no rate links-bound in {BW_CHECKS} checks; {bw:g} unchecked")
    return bw


def main(argv: list[str] | None = None) -> int:
    try:
        return bench(argv)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"bench_mininet: {exc}", file=sys.stderr)
        return 1


def bench(argv: list[str] | None) -> int:
    ap = arg.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--topo", nargs="+", default=["star:4", "leaf-spine:2x2x2"])
    ap.add_argument("--switch", nargs="+", default=["softswitch", "bmv2"])
    ap.add_argument("--seconds", type=arg.SECONDS, default=4.0, help="M * 8 / bw of a shaped run")
    share = arg.Real(0.0, 1.0, "a share", lo_open=True)
    ap.add_argument("--share", type=share, default=0.5, help="bw = share x the switch's limit")
    ap.add_argument(
        "--probe-size", type=arg.ELEMENTS, default=256 * 1024, help="elements, unshaped run"
    )
    ap.add_argument(
        "--repeat", type=arg.REPEAT, default=2, help="shaped runs per topology and switch"
    )
    ap.add_argument(
        "--dataplane",
        nargs="+",
        choices=DATAPLANES,
        default=list(DATAPLANES),
        help="the softswitch's data planes whose limits are measured side by side; the first "
        "also runs the shaped runs (default: fast reference)",
    )
    ap.add_argument(
        "--probes", type=arg.REPEAT, default=3, help="unshaped runs per softswitch data plane"
    )
    ap.add_argument(
        "--window", type=arg.WINDOW, default=None, help="the job's window (the runner's default)"
    )
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_mininet skipped: Mininet needs root")
        return 0
    from tests.netns import namespaces_missing

    missing = namespaces_missing()
    if missing is not None:
        print(f"bench_mininet skipped: {missing}")
        return 0
    print(
        f"# INA allreduce on Mininet under TCLink bandwidth: {', '.join(args.topo)}; int32, "
        f"{K} lanes = {PAYLOAD_BYTES} B payload in {FRAME_BYTES} B frames (floor "
        f"{FRAME_BYTES / PAYLOAD_BYTES:.2f} x M*8/bw); {os.cpu_count()} cpus"
    )
    header = f"{'topology':<18} {'switch':<10} {'limit':>9} {'bw':>6} {'MiB':>8} {'seconds':>7}"
    header += f" {'x M*8/bw':>8} {'x wire':>6} {'retx':>5} {'ok':>3} {'bound':<8} {'cpu':<9}"
    header += f" {'machine':>7}"
    rows: list[str] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-mininet-") as tmpdir:
        tmp = Path(tmpdir)
        for kind in args.switch:
            why = switch_missing(kind)
            if why is not None:
                print(f"# {kind} skipped: {why}")
                continue
            plane = args.dataplane[0] if kind == "softswitch" else None
            for topo in args.topo:
                if kind == "softswitch":
                    cap = limits(
                        topo, args.dataplane, args.probes, args.probe_size, args.window, tmp
                    )
                    limit, bw = cap.mbit, choose_bw([cap], margin=args.share).bw
                    bw = checked_bw(topo, kind, cap, bw, tmp, plane, args.window)
                    print(f"# {topo} on {kind}: shaped at {bw:g} Mbit/s ({plane})", flush=True)
                else:
                    probe = run_scenario(topo, kind, args.probe_size, None, tmp, None, args.window)
                    found = capacity("ina", probe.size, probe.seconds, probe.directions)
                    if found is None:
                        raise RuntimeError(f"{topo} on {kind}: the unshaped run has no time")
                    limit, bw = found.mbit, choose_bw([found], margin=args.share).bw
                    first = bw
                    bw = checked_bw(topo, kind, found, bw, tmp, None, args.window)
                    print(
                        f"# {topo} on {kind}: unshaped {probe.seconds:.2f} s for "
                        f"{probe.payload_bytes / 2**20:.1f} MiB per worker: the switch's limit "
                        f"{limit:.1f} Mbit/s on the busiest link ({found.link}); shaped at "
                        f"{bw:g} Mbit/s (first {first:g}); {probe.row.get('bound_reason', '')}",
                        flush=True,
                    )
                size = max(MIN_SIZE, int(args.seconds * bw * 1e6 / 8 / 4) // K * K)
                for _ in range(args.repeat):
                    r = run_scenario(topo, kind, size, bw, tmp, plane, args.window)
                    cpu, machine = r.cpu()
                    rows.append(
                        f"{topo:<18} {kind:<10} {limit:>9.1f} {bw:>6g} "
                        f"{r.payload_bytes / 2**20:>8.2f} {r.seconds:>7.2f} "
                        f"{r.x_payload():>8.2f} {r.x_wire():>6.2f} {r.retransmissions:>5} "
                        f"{'yes' if r.verified else 'NO':>3} {r.bound:<8} {cpu:<9} {machine:>7}"
                    )
                    print(f"#   {rows[-1]}", flush=True)
                    if r.bound != "links":
                        notes.append(f"{topo} on {kind}, {bw:g} Mbit/s: {r.row['bound_reason']}")
    print("# limit: Mbit/s on the busiest link where the emulator, unshaped, was the bottleneck")
    print("# M: payload bytes per worker (MiB); x wire: over the busiest host link's bytes")
    print("# bound: what bounded the run (links, emulator, unclear); cpu: the busiest process's")
    print("# share of a core over the run; machine: all cores busy, anybody's work")
    print(header)
    for row in rows:
        print(row)
    for note in notes:
        print(f"# not links-bound: {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
