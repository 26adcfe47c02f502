"""bench/papers_sim.py, the seed papers at their own settings in the simulator: the runs it
plans, how it pairs rows into the papers' ratios, and (with ns-3) its quick MULTITREE
comparison end to end, every result checked. Nothing here asserts a speedup: those are the
benchmark's (docs/papers.md)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from inaemu.sim.engine import ns3_available

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("papers_sim", ROOT / "bench" / "papers_sim.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["papers_sim"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def row(algo: str, size: int, seconds: float, verified: bool = True) -> dict[str, Any]:
    return {"algo": algo, "size": size, "seconds": seconds, "verified": verified, "skipped": ""}


def test_bigraphs_where_hdrm_runs(bench: ModuleType) -> None:
    assert [bench.bigraph_for(h) for h in (8, 16, 32, 64, 128)] == [
        (2, 4), (2, 8), (4, 8), (4, 16), (8, 16)
    ]  # fmt: skip
    with pytest.raises(ValueError, match="no BiGraph"):
        bench.bigraph_for(12)


def test_the_plans_run_the_papers_settings(bench: ModuleType) -> None:
    multitree = bench.plan("multitree", quick=False)
    main = multitree[0]
    assert main.topo == "torus:8x8" and main.algos == ("ring", "ring2d", "dtree", "multitree")
    argv = main.argv(Path("RUN"))
    for option in ("--rate 128G", "--delay 150ns", "--mtu 308", "--node-ports all"):
        assert option in " ".join(argv)
    assert {s.topo for s in multitree} == {"torus:4x4", "torus:8x8", "torus:16x16"}
    eflops = bench.plan("eflops", quick=False)
    assert [s.topo for s in eflops if s.name == "bigraph"][-1] == "bigraph:8x16"
    assert all("--ecmp" in s.options for s in eflops if s.name == "leaf-spine")
    assert {bench._nodes(s.topo) for s in eflops} == {8, 16, 32, 64, 128}
    ina = bench.plan("ina", quick=False)
    assert max(bench._nodes(s.topo) for s in ina) == 1024
    assert {bench._nodes(s.topo) for s in ina if s.topo.startswith("fat-tree")} == {16, 128}
    assert {s.codec for s in ina if s.name == "codec"} == {"fixedpoint", "sketch"}


def test_multitree_s_ratios_are_paired_by_size(bench: ModuleType) -> None:
    sim = bench.Sim("multitree", "main", "torus:4x4", ("ring", "ring2d", "dtree", "multitree"),
                    (10, 20))  # fmt: skip
    rows = [row("ring", 10, 3.0), row("ring2d", 10, 1.5), row("dtree", 10, 6.0),
            row("multitree", 10, 1.0), row("ring", 20, 4.0), row("ring2d", 20, 2.0),
            row("dtree", 20, 2.0, verified=False), row("multitree", 20, 2.0)]  # fmt: skip
    lines, data = bench.multitree_report([bench.Outcome(sim, rows)])
    assert data["average_over"]["ring"] == pytest.approx(2.5)  # 3x and 2x
    assert data["average_over"]["ring2d"] == pytest.approx(1.25)
    assert data["per_size"]["dtree"] == [6.0]  # an unverified result is no time
    assert any("| - |" in line for line in lines)


def test_eflops_largest_ratio(bench: ModuleType) -> None:
    bg = bench.Sim("eflops", "bigraph", "bigraph:2x4", ("hdrm", "hd", "ring"), (5,))
    ls = bench.Sim("eflops", "leaf-spine", "leaf-spine:2x4x4", ("hd", "ring"), (5,))
    outcomes = [
        bench.Outcome(bg, [row("hdrm", 5, 1.0), row("hd", 5, 2.0), row("ring", 5, 1.2)]),
        bench.Outcome(ls, [row("hd", 5, 3.0), row("ring", 5, 1.5)]),
    ]
    _, data = bench.eflops_report(outcomes)
    assert data["rows"][0]["hd_over_hdrm"] == 2.0
    assert data["rows"][0]["leaf_spine_over_hdrm"] == 1.5  # the best of the leaf-spine's
    assert data["largest"] == 2.0


@pytest.mark.skipif(ns3_available() is not None, reason=str(ns3_available()))
def test_quick_multitree_end_to_end(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "papers_sim.py"), "--quick", "--paper",
         "multitree", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "papers_sim.json").read_text())
    rows = data["papers"]["multitree"]["runs"][0]["rows"]
    assert {r["algo"] for r in rows} == {"ring", "ring2d", "dtree", "multitree"}
    assert all(r["verified"] and r["exact"] for r in rows)
    assert "average over the sizes: multitree" in (tmp_path / "papers_sim.md").read_text()
