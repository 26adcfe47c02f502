"""Packet-level conformance: every tests/conformance/*.stf case against every target."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from softswitch.stf import load_stf, run_case
from softswitch.stf_softswitch import SoftswitchTarget

CASE_DIR = Path(__file__).parent / "conformance"
CASES = sorted(CASE_DIR.glob("*.stf"))


def test_cases_present() -> None:
    names = {p.stem for p in CASES}
    for required in ("sum_4_workers", "duplicates", "malformed", "tree_leaf", "loss_injection"):
        assert required in names


def test_stf_files_current() -> None:
    """The committed .stf files are what make_cases.py writes (nobody hand-edited them)."""
    proc = subprocess.run(
        [sys.executable, str(CASE_DIR / "make_cases.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_softswitch(path: Path) -> None:
    result = run_case(load_stf(path), SoftswitchTarget())
    assert result.ok, "\n".join(result.failures)
    assert result.packets_in > 0
