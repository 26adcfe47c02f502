"""Packet-level conformance: every conformance/cases/*.stf case against every target, and the
`inaemu conformance` command that runs them for users."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from inaemu.conformance.bmv2_target import (
    Bmv2Runner,
    bmv2_available,
    compile_p4,
    parse_counter_reads,
)
from inaemu.conformance.run import CASES_DIR, Row, main, run
from inaemu.conformance.softswitch_target import SoftswitchTarget
from inaemu.conformance.stf import load_stf, run_case

CASES = sorted(CASES_DIR.glob("*.stf"))


def test_cases_present() -> None:
    names = {p.stem for p in CASES}
    for required in ("sum_4_workers", "duplicates", "malformed", "tree_leaf", "loss_injection"):
        assert required in names


def test_stf_files_current() -> None:
    """The committed .stf files are what make_cases.py writes (nobody hand-edited them)."""
    proc = subprocess.run(
        [sys.executable, "-m", "inaemu.conformance.make_cases", "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_softswitch(path: Path) -> None:
    result = run_case(load_stf(path), SoftswitchTarget())
    assert result.ok, "\n".join(result.failures)
    assert result.packets_in > 0


BMV2_MISSING = bmv2_available()
needs_bmv2 = pytest.mark.skipif(BMV2_MISSING is not None, reason=f"bmv2 target: {BMV2_MISSING}")


@pytest.fixture(scope="module")
def bmv2_json() -> Path:
    return compile_p4()


@pytest.fixture(scope="module")
def bmv2_rows(bmv2_json: Path) -> dict[str, Row]:
    """Every case on bmv2, several simple_switch processes at once (as `inaemu conformance
    --target bmv2` runs them): this also shows that concurrent runs do not collide."""
    return {row.case: row for row in run(CASES, ["bmv2"], bmv2_json)}


@pytest.mark.bmv2
@needs_bmv2
@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_bmv2(path: Path, bmv2_rows: dict[str, Row]) -> None:
    row = bmv2_rows[path.stem]
    assert row.result is not None, row.error
    assert row.result.ok, "\n".join(row.result.failures)


@pytest.mark.bmv2
@needs_bmv2
def test_p4c_emits_the_committed_p4info(bmv2_json: Path) -> None:
    from inaemu.p4.info import load_p4info, p4info_diff, parse_p4info_text

    built = parse_p4info_text((bmv2_json.parent / "ina.p4info.txt").read_text())
    assert p4info_diff(built, load_p4info().message) == []


def test_bmv2_cli_commands_for_the_cases() -> None:
    """What the bmv2 target sends to simple_switch_CLI (checked here without bmv2)."""
    runner = Bmv2Runner(Path("unused.json"))
    cmds = runner._cli_commands(load_stf(CASES_DIR / "ipv4_forwarding.stf"))
    assert cmds == [
        "table_add InaIngress.fwd.ipv4_lpm InaIngress.fwd.ipv4_forward 167772162/32 => 2 2",
        "table_add InaIngress.fwd.ipv4_lpm InaIngress.fwd.ipv4_forward 167772160/24 => 170 3",
    ]
    cmds = runner._cli_commands(load_stf(CASES_DIR / "tree_leaf.stf"))
    assert (
        cmds[0] == "table_add InaIngress.agg.ina_job InaIngress.agg.agg_node 1 0 => 0 4 2 1 0 3 1"
    )
    assert "table_add InaIngress.agg.ina_child InaIngress.agg.set_child 1 0 2 => 1" in cmds
    assert cmds[-3:] == ["mc_mgrp_create 1", "mc_node_create 0 1 2", "mc_node_associate 1 0"]


def test_counter_reads_in_both_bmv2_formats() -> None:
    old = "RuntimeCmd: InaIngress.agg.ina_events[0]=  BmCounterValue(packets=1, bytes=100)\n"
    new = "RuntimeCmd: InaIngress.counters.ina_drops[10]= (312 bytes, 1 packets)\n"
    assert parse_counter_reads(old + new) == {
        ("InaIngress.agg.ina_events", 0): (1, 100),
        ("InaIngress.counters.ina_drops", 10): (1, 312),
    }
    assert parse_counter_reads("RuntimeCmd: Invalid counter operation (INVALID_INDEX)") == {}


# ---------------------------------------------------------------------- inaemu conformance


def test_command_runs_the_cases(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-k", "sum_", "-k", "count_wrap"]) == 0
    out = capsys.readouterr().out
    assert "sum_4_workers          softswitch  pass" in out
    assert "count_wrap" in out and "4 passed, 0 failed" in out


def test_command_reports_a_failing_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (CASES_DIR / "sum_1_worker.stf").read_text()
    expect = next(ln for ln in text.splitlines() if ln.startswith("expect "))
    broken = text.replace(expect, expect.replace("expect 1 ", "expect 2 "))
    (tmp_path / "broken.stf").write_text(broken)
    assert main(["--cases", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "broken                 softswitch  FAIL" in out
    assert "port 1: unexpected packet #0" in out and "0 passed, 1 failed" in out


def test_command_refuses_what_it_cannot_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["--cases", str(tmp_path / "nowhere")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    (tmp_path / "bad.stf").write_text("packet one two\n")
    assert main(["--cases", str(tmp_path)]) == 2
    assert "bad.stf:1:" in capsys.readouterr().err
    monkeypatch.setenv("PATH", str(tmp_path))  # no p4c, no bmv2
    assert main(["--target", "bmv2"]) == 2
    err = capsys.readouterr().err
    assert "not on PATH: p4c-bm2-ss, simple_switch, simple_switch_CLI" in err
