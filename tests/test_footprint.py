"""What a demo or a Mininet network takes in memory (`runs/footprint.py`): a network that
this machine cannot hold is refused before anything starts (issue 22, item 14: `demo --topo
torus:8x8` was within the caps and passed 12 GB), and the per-process figures the estimate
stands on are measured again here on a real demo."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from inaemu.cli import demo
from inaemu.cli import main as cli
from inaemu.mininet import debian
from inaemu.mininet import run as mininet_run
from inaemu.runs import footprint

ROOT = Path(__file__).resolve().parents[1]


class Reached(Exception):
    """What a command was about to do next, once it was let through."""


def _reached(*_: Any, **__: Any) -> None:
    raise Reached


@pytest.fixture
def small_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine, with 4 GiB available (as /proc/meminfo says it)."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       25000000 kB\nMemAvailable:    4194304 kB\n")
    monkeypatch.setattr(footprint, "MEMINFO", meminfo)


@pytest.mark.usefixtures("small_machine")
def test_a_demo_this_machine_cannot_hold_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "main_demo", _reached)
    assert cli.main(["demo", "--topo", "torus:8x8"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "inaemu demo: a demo on torus:8x8 needs about 9,882 MiB of memory (64 softswitch "
        "processes x 70 MiB, 64 workers x 76 MiB, the demo itself 432 MiB, the shared "
        "libraries 100 MiB); this machine has 4,096 MiB available (MemAvailable): choose a "
        "smaller --topo, fewer --workers or a smaller --size, or --no-memory-check if you know "
        "better\n"
    )
    with pytest.raises(Reached):  # about 2.6 GB: it fits
        cli.main(["demo", "--topo", "torus:4x4"])
    with pytest.raises(Reached):
        cli.main(["demo", "--topo", "torus:8x8", "--no-memory-check"])


@pytest.mark.usefixtures("small_machine")
def test_a_mininet_network_this_machine_cannot_hold_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(debian, "ensure", _reached)
    argv = ["--topo", "torus:8x8", "--no-install", "--switch", "bmv2", "--algo", "ina,gloo"]
    assert mininet_run.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("inaemu mininet: a Mininet network of torus:8x8 needs about ")
    assert "(64 bmv2 processes x 140 MiB, 128 node shells x 5 MiB, 64 workers x 218 MiB" in err
    assert "4,096 MiB available (MemAvailable)" in err and "--no-memory-check" in err
    with pytest.raises(Reached):
        mininet_run.main([*argv, "--no-memory-check"])


def test_mem_available_is_read_from_meminfo(tmp_path: Path) -> None:
    assert footprint.mem_available_mib(tmp_path / "none") is None
    (tmp_path / "m").write_text("MemTotal: 100 kB\n")
    assert footprint.mem_available_mib(tmp_path / "m") is None
    real = footprint.mem_available_mib()
    assert real is None or real > 0


def _private_mib(pid: int) -> float | None:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    kib = sum(int(line.split()[1]) for line in text.splitlines() if line.startswith("Private_"))
    return kib / 1024


def _descendants(root: int) -> dict[int, str]:
    """pid -> command line of every process under `root`."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        for child, p in parent.items():
            if p == pid and child not in found:
                try:
                    found[child] = Path(f"/proc/{child}/cmdline").read_text().replace("\0", " ")
                except OSError:
                    continue
                todo.append(child)
    return found


@pytest.mark.parametrize("where", [["--workers", "2"], ["--topo", "leaf-spine:2x2x1"]])
def test_the_figures_hold_for_a_real_demo(where: list[str]) -> None:
    """The peak private memory of the softswitches, the workers and the demo's own process,
    sampled through a real demo (one switch, whose workers check their own results; a
    topology, whose demo checks them all), is within the figures the estimate uses, and not
    far below them (a figure far too high would refuse what fits)."""
    size = 1 << 20
    argv = [sys.executable, "-m", "inaemu.cli", "demo", *where, "--no-progress"]
    warm = subprocess.run([*argv, "--size", "1000"], capture_output=True, text=True, cwd=ROOT)
    assert warm.returncode == 0, warm.stderr  # every kernel compiled and cached before
    proc = subprocess.Popen(
        [*argv, "--size", str(size)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    peak: dict[str, float] = {}
    try:
        while proc.poll() is None:
            procs = {proc.pid: "demo", **_descendants(proc.pid)}
            for pid, cmd in procs.items():
                kind = (
                    "demo"
                    if cmd == "demo"
                    else "softswitch"
                    if "inaemu.softswitch" in cmd
                    else "worker"
                    if "multiprocessing" in cmd and "resource_tracker" not in cmd
                    else None
                )
                mib = _private_mib(pid) if kind else None
                if kind and mib is not None:
                    peak[kind] = max(peak.get(kind, 0.0), mib)
            time.sleep(0.1)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    one_switch = "--topo" not in where  # its workers check their own results
    figures = {
        "softswitch": footprint.SOFTSWITCH_MIB,
        "worker": footprint.worker_mib(size, checks=one_switch),
        "demo": footprint.parent_mib(0 if one_switch else 2 * size),
    }
    assert set(peak) == set(figures), peak
    for kind, figure in figures.items():
        assert figure / 2 <= peak[kind] <= figure, (kind, peak[kind], figure)
