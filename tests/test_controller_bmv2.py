"""The controller's commands against real simple_switch_grpc (bmv2): the pipeline is pushed
only by `inaemu pipeline push`, and no later command replaces it (today's bmv2 wipes every
entry on a new pipeline, so a re-push would silently remove the job)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from inaemu.conformance.bmv2_target import bmv2_available
from inaemu.p4.build import compile_p4
from tests.bmv2_grpc import grpc_missing, simple_switch_grpc

MISSING = grpc_missing() or bmv2_available()
pytestmark = [
    pytest.mark.bmv2,
    pytest.mark.skipif(MISSING is not None, reason=f"bmv2: {MISSING}"),
]


def inaemu(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inaemu.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_pipeline_push_then_jobs_on_simple_switch_grpc(tmp_path: Path) -> None:
    program = compile_p4()
    topo_file = tmp_path / "topology.json"
    with simple_switch_grpc() as bmv2:
        out = inaemu(
            *("topo", "star", "--hosts", "3", "--program", str(program)),
            *("--grpc", bmv2.grpc, "-o", str(topo_file)),
        )
        assert out.returncode == 0, out.stderr

        out = inaemu("stats", "-t", str(topo_file))
        assert out.returncode == 1
        assert "has no forwarding pipeline; run `inaemu pipeline push" in out.stderr
        assert "Traceback" not in out.stderr

        out = inaemu("pipeline", "push", "-t", str(topo_file))
        assert out.returncode == 0, out.stderr
        out = inaemu("job", "add", "-t", str(topo_file), "--job", "1", "--workers", "h1,h2,h3")
        assert out.returncode == 0, out.stderr
        for _ in range(2):  # neither stats nor a check pushes again: the job stays
            out = inaemu("stats", "-t", str(topo_file))
            assert out.returncode == 0, out.stderr
            assert "job 1" in out.stdout
            assert inaemu("pipeline", "check", "-t", str(topo_file)).returncode == 0
        out = inaemu("job", "remove", "-t", str(topo_file), "--job", "1")
        assert out.returncode == 0, out.stderr
        # a second add after a removal works on the same pipeline
        out = inaemu("job", "add", "-t", str(topo_file), "--job", "2", "--workers", "h1,h2")
        assert out.returncode == 0, out.stderr
