"""The AF_PACKET port layer (what Mininet scenarios use), on a veth pair inside a network
namespace this test creates and removes. Needs root and iproute2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None,
    reason="needs root and iproute2 (ip) to create a network namespace with a veth pair",
)


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True)


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> Iterator[str]:
    """A network namespace of the test's own, removed (with its veths) even if it fails."""
    ns = f"inaemu-afp-{request.node.name[5:15]}-{os.getpid()}"
    try:
        sh("ip", "netns", "add", ns)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create a network namespace here: {exc.stderr.strip()}")
    try:
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_softswitch_on_a_veth_pair(namespace: str) -> None:
    ns = namespace
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


def test_an_interface_a_port_cannot_use_is_refused_in_one_line(namespace: str) -> None:
    """`inaemu softswitch --iface`: an interface that does not exist, is down, or has an MTU
    below an INA frame's is refused before anything starts, one line saying how to fix it;
    checked in a namespace of the test's own (the ioctls ask the switch's namespace)."""
    ns = namespace
    sh("ip", "-n", ns, "link", "add", "b0", "type", "veth", "peer", "name", "b1")
    sh("ip", "-n", ns, "link", "add", "c0", "type", "veth", "peer", "name", "c1")
    for ifname in ("c0", "c1"):
        sh("ip", "-n", ns, "link", "set", ifname, "up")
    sh("ip", "-n", ns, "link", "set", "c0", "mtu", "200")
    cases = {
        "nope0": "interface 'nope0' does not exist here",
        "b0": "interface 'b0' is down: `ip link set b0 up` first",
        "c0": "interface 'c0' has MTU 200, less than the 298 bytes an INA frame needs",
    }
    for ifname, said in cases.items():
        proc = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "inaemu.softswitch",
             "--iface", f"1={ifname}", "--grpc", "127.0.0.1:0"],
            capture_output=True, text=True, timeout=120, cwd=ROOT,
        )  # fmt: skip
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"softswitch: {said}"), lines
        assert "READY" not in proc.stdout
