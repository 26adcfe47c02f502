"""`inaemu conformance`: run the packet-level conformance cases against a switch.

    inaemu conformance                              # every shipped case, on the softswitch
    inaemu conformance --target bmv2                # ... on simple_switch (p4c-bm2-ss compiles)
    inaemu conformance --target all -k sum_ -k tree_
    inaemu conformance --cases my_cases/ --target bmv2 --json build/ina.json
    inaemu conformance --target softswitch:fast     # one of the softswitch's two data planes
    inaemu conformance --target sim                 # the simulator's switches and links

Targets: `softswitch:fast` (the compiled data plane, softswitch/fast/), `softswitch:reference`
(the Python pipeline it must agree with), `bmv2`, `sim` (the simulator's switches on ns-3's
links: `sim_target.py`; needs the [sim] extra); `softswitch` is both softswitch data planes,
`all` all four.

Cases are .stf files (one switch, p4c's STF format) and .mstf files (several switches joined
by links: stf.py's docstring); on bmv2 a multi-switch case starts one simple_switch per switch
and the runner relays frames between them. Prints one row per case and target, then what
failed. Exit status: 0 when every case passed, 1 when any failed, 2 when the cases or the
target cannot be had (the message says why).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from inaemu.common.args import ArgumentParser, parse_only, parse_only_requested
from inaemu.conformance.bmv2_network import Bmv2NetworkRunner
from inaemu.conformance.bmv2_target import Bmv2Runner, bmv2_available
from inaemu.conformance.nanomsg import library
from inaemu.conformance.network import NETWORK_SUFFIX, NetworkCase, load_network, run_network
from inaemu.conformance.softswitch_target import SoftswitchTarget
from inaemu.conformance.stf import CaseResult, StfCase, StfError, load_stf, run_case
from inaemu.p4.build import compile_p4
from inaemu.softswitch.fast.dataplanes import (
    DATAPLANES,
    DEFAULT_DATAPLANE,
    make_pipeline,
    warm_up,
)

CASES_DIR = Path(__file__).resolve().parent / "cases"
SOFTSWITCH_TARGETS = tuple(f"softswitch:{plane}" for plane in DATAPLANES)
SIM_TARGET = "sim"  # the simulator's switches and links (ns-3; sim_target.py)
TARGETS = (*SOFTSWITCH_TARGETS, "bmv2", SIM_TARGET)
TARGET_GROUPS = {"softswitch": SOFTSWITCH_TARGETS, "all": TARGETS}
FAILURES_SHOWN = 8  # failure lines printed per failed case
BMV2_PARALLEL = 4  # cases at once on bmv2 (each simple_switch has its own ports and sockets)
CASE_SUFFIXES = (".stf", NETWORK_SUFFIX)  # one switch; several (network.py)

AnyCase = StfCase | NetworkCase


class ConformanceError(Exception):
    """The run cannot start (no cases, no bmv2, a case that does not parse)."""


@dataclass(frozen=True)
class Row:
    case: str
    target: str
    result: CaseResult | None  # None: the target failed to run the case
    seconds: float
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result.ok


def find_cases(paths: Sequence[Path], names: Sequence[str]) -> list[Path]:
    """The .stf and .mstf files under `paths` (files or folders) whose name contains one of
    `names`."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.iterdir() if p.suffix in CASE_SUFFIXES)
        elif path.is_file():
            found.append(path)
        else:
            raise ConformanceError(f"{path}: no such file or folder")
    if names:
        found = [p for p in found if any(n in p.stem for n in names)]
    if not found:
        where = ", ".join(str(p) for p in paths)
        raise ConformanceError(
            f"no .stf or .mstf cases in {where}" + (f" matching {names}" if names else "")
        )
    return found


def load_case(path: Path) -> AnyCase:
    return load_network(path) if path.suffix == NETWORK_SUFFIX else load_stf(path)


def run_softswitch(case: AnyCase, dataplane: str = DEFAULT_DATAPLANE) -> CaseResult:
    """A case on fresh in-process softswitches running `dataplane` (fast or reference), one
    per switch of a multi-switch case."""

    def target() -> SoftswitchTarget:
        return SoftswitchTarget(make_pipeline(dataplane))

    if isinstance(case, NetworkCase):
        return run_network(case, {sw: target() for sw in case.setups})
    return run_case(case, target())


def _runner(target: str, json_path: Path | None) -> Callable[[AnyCase], CaseResult]:
    if target in SOFTSWITCH_TARGETS:
        dataplane = target.partition(":")[2]
        warm_up(dataplane)  # the fast one compiles (or loads) here, not in the first case
        return partial(run_softswitch, dataplane=dataplane)
    if target == SIM_TARGET:
        from inaemu.conformance.sim_target import run_sim
        from inaemu.sim.engine import SimError, load, ns3_available

        why = ns3_available()
        if why is not None:
            raise ConformanceError(f"sim target: {why}")
        try:
            load()
        except SimError as exc:
            raise ConformanceError(f"sim target: {exc}") from None
        warm_up(DEFAULT_DATAPLANE)
        return run_sim
    missing = bmv2_available()
    if missing is not None:
        raise ConformanceError(f"bmv2 target: {missing}")
    if json_path is None:
        try:
            json_path = compile_p4()
        except subprocess.CalledProcessError as exc:
            raise ConformanceError(f"p4c-bm2-ss failed:\n{exc.stderr.strip()[:2000]}") from None
    else:
        _check_json(json_path)
    single, network = Bmv2Runner(json_path), Bmv2NetworkRunner(json_path)

    def run_bmv2(case: AnyCase) -> CaseResult:
        if isinstance(case, NetworkCase):
            library()  # a NanomsgError that says what is missing, before any switch starts
            return network.run(case)
        return single.run(case)

    return run_bmv2


def _check_json(path: Path) -> None:
    if not path.is_file():
        raise ConformanceError(f"--json {path}: no such file")


def run(cases: Sequence[Path], targets: Sequence[str], json_path: Path | None) -> list[Row]:
    """Every case on every target; bmv2 runs BMV2_PARALLEL cases at once (each simple_switch
    spends most of a case waiting), the in-process softswitch one at a time."""
    try:
        parsed = [(p.stem, load_case(p)) for p in cases]
    except StfError as exc:
        raise ConformanceError(str(exc)) from None
    except OSError as exc:  # unreadable
        raise ConformanceError(f"{exc.filename}: {exc.strerror or exc}") from None
    runners = {t: _runner(t, json_path) for t in targets}
    print(HEADER, flush=True)
    rows: list[Row] = []
    for target, runner in runners.items():
        workers = BMV2_PARALLEL if target == "bmv2" else 1
        with ThreadPoolExecutor(workers) as pool:
            for row in pool.map(partial(_run_one, target, runner), parsed):
                rows.append(row)
                print(_format_row(row), flush=True)
    return rows


def _run_one(
    target: str, runner: Callable[[AnyCase], CaseResult], named: tuple[str, AnyCase]
) -> Row:
    name, case = named
    started = time.monotonic()
    try:
        return Row(name, target, runner(case), time.monotonic() - started)
    except Exception as exc:  # a target that breaks is a failed row, not a traceback
        return Row(name, target, None, time.monotonic() - started, f"{type(exc).__name__}: {exc}")


def _format_row(row: Row) -> str:
    verdict = "pass" if row.ok else "FAIL"
    packets = (
        f"{row.result.packets_in:>6} {row.result.packets_out:>6}"
        if row.result is not None
        else f"{'-':>6} {'-':>6}"
    )
    return f"{row.case:<22} {row.target:<20} {verdict:<5} {packets} {row.seconds:>7.2f}"


HEADER = f"{'case':<22} {'target':<20} {'':<5} {'in':>6} {'out':>6} {'seconds':>7}"


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(
        prog="inaemu conformance", description=__doc__.splitlines()[0] if __doc__ else None
    )
    ap.add_argument(
        "--target",
        choices=(*TARGETS, *TARGET_GROUPS),
        default="softswitch",
        help="softswitch:fast, softswitch:reference, bmv2; softswitch (both of its data "
        "planes) or all (default %(default)s)",
    )
    ap.add_argument(
        "--cases",
        type=Path,
        action="append",
        help=f"a .stf or .mstf file or a folder of them (repeatable; default {CASES_DIR})",
    )
    ap.add_argument(
        "-k", dest="names", action="append", default=[], help="only cases whose name contains"
    )
    ap.add_argument("--json", type=Path, help="bmv2 JSON to run (default: compile p4/ina.p4)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    targets = TARGET_GROUPS.get(args.target, (args.target,))
    try:
        cases = find_cases(args.cases or [CASES_DIR], args.names)
        if parse_only_requested():
            if args.json is not None:
                _check_json(args.json)
            try:
                for path in cases:
                    load_case(path)  # a case that does not parse is refused here too
            except StfError as exc:
                raise ConformanceError(str(exc)) from None
            parse_only("inaemu conformance")
            return 0
        rows = run(cases, targets, args.json)
    except ConformanceError as exc:
        print(f"inaemu conformance: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("inaemu conformance: interrupted", file=sys.stderr)
        return 130
    failed = [r for r in rows if not r.ok]
    for row in failed:
        print(f"\n{row.case} on {row.target}:")
        lines = [row.error] if row.result is None else row.result.failures
        for line in lines[:FAILURES_SHOWN]:
            print(f"  {line[:300]}")
        if len(lines) > FAILURES_SHOWN:
            print(f"  ... {len(lines) - FAILURES_SHOWN} more")
    print(f"\n{len(rows) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
