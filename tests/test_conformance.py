"""Packet-level conformance: every tests/conformance/*.stf case against every target."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import inaemu.conformance
from inaemu.conformance.bmv2_target import Bmv2Runner, bmv2_available, compile_p4
from inaemu.conformance.softswitch_target import SoftswitchTarget
from inaemu.conformance.stf import load_stf, run_case

CASE_DIR = Path(inaemu.conformance.__file__).resolve().parent / "cases"
CASES = sorted(CASE_DIR.glob("*.stf"))


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


@pytest.fixture(scope="module")
def bmv2_json() -> Path:
    return compile_p4()


@pytest.mark.bmv2
@pytest.mark.skipif(BMV2_MISSING is not None, reason=f"bmv2 target: {BMV2_MISSING}")
@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_bmv2(path: Path, bmv2_json: Path) -> None:
    result = Bmv2Runner(bmv2_json).run(load_stf(path))
    assert result.ok, "\n".join(result.failures)


@pytest.mark.bmv2
@pytest.mark.skipif(BMV2_MISSING is not None, reason=f"bmv2 target: {BMV2_MISSING}")
def test_p4c_emits_the_committed_p4info(bmv2_json: Path) -> None:
    from inaemu.p4.info import load_p4info, p4info_diff, parse_p4info_text

    built = parse_p4info_text((bmv2_json.parent / "ina.p4info.txt").read_text())
    assert p4info_diff(built, load_p4info().message) == []


def test_bmv2_cli_commands_for_the_cases() -> None:
    """What the bmv2 target sends to simple_switch_CLI (checked here without bmv2)."""
    runner = Bmv2Runner(Path("unused.json"))
    cmds = runner._cli_commands(load_stf(CASE_DIR / "ipv4_forwarding.stf"))
    assert cmds == [
        "table_add InaIngress.fwd.ipv4_lpm InaIngress.fwd.ipv4_forward 167772162/32 => 2 2",
        "table_add InaIngress.fwd.ipv4_lpm InaIngress.fwd.ipv4_forward 167772160/24 => 170 3",
    ]
    cmds = runner._cli_commands(load_stf(CASE_DIR / "tree_leaf.stf"))
    assert cmds[0] == "table_add InaIngress.agg.ina_job InaIngress.agg.agg_node 1 0 => 0 4 2 1 0 3"
    assert "table_add InaIngress.agg.ina_child InaIngress.agg.set_child 1 0 2 => 1" in cmds
    assert cmds[-3:] == ["mc_mgrp_create 1", "mc_node_create 0 1 2", "mc_node_associate 1 0"]
