"""The AF_PACKET port layer (what Mininet scenarios use), on a veth pair inside a network
namespace this test creates and removes. Needs root and iproute2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None,
    reason="needs root and iproute2 (ip) to create a network namespace with a veth pair",
)


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True)


def test_softswitch_on_a_veth_pair() -> None:
    ns = f"inaemu-afp-{os.getpid()}"
    try:
        sh("ip", "netns", "add", ns)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create a network namespace here: {exc.stderr.strip()}")
    try:
        sh("ip", "-n", ns, "link", "add", "a0", "type", "veth", "peer", "name", "a1")
        for ifname in ("lo", "a0", "a1"):
            sh("ip", "-n", ns, "link", "set", ifname, "up")
        proc = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, str(ROOT / "tests" / "af_packet_check.py")],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "result received" in proc.stdout
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
