"""bench/papers.py, the seed papers' comparisons emulated: how it reads the runners' summaries,
pairs repeats into ratios, judges what bounded a run and scores a training run (no root); the
warm runner's command lines (no root); and, as root with Mininet, the whole suite in --quick
mode: a table and a plot per paper and every result checked and verified. Nothing here
asserts a speedup: those are the benchmark's (docs/papers.md).
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from inaemu.mininet.papers_run import REPEAT, Warm, halved
from inaemu.runs.compare import LinkUse
from tests.test_mininet import mininet_ready  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def papers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("papers", ROOT / "bench" / "papers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["papers"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def row(algo: str, size: int, seconds: float, **more: Any) -> dict[str, Any]:
    return {
        "algo": algo,
        "codec": "int32",
        "size": size,
        "seconds": seconds,
        "verified": True,
        "check": "exact",
        "busiest_share": 0.9,
        "problems": [],
        **more,
    }


def test_a_missing_row_is_a_failed_point(papers: ModuleType) -> None:
    comp = papers.Comparison("multitree", "t", "torus:4x4", ("ring", "multitree"), "int32",
                             (4096,), 4.0)  # fmt: skip
    pts = papers.points_of(comp, 0, {"rows": [row("ring", 4096, 1.0)]})
    assert [(p.algo, p.verified) for p in pts] == [("ring", True), ("multitree", False)]
    assert pts[1].problems and math.isnan(pts[1].seconds)
    assert not any(p.verified for p in papers.points_of(comp, 0, None))  # no summary at all


def test_ina_points_are_labelled_by_codec_and_density(papers: ModuleType) -> None:
    comp = papers.Comparison("sketch", "s", "star:4", ("fixedpoint", "sketch"), "", (1024,),
                             2.0, (0.02,), warm=True)  # fmt: skip
    rows = [
        {**row("ina", 1024, 2.0), "codec": "fixedpoint", "density": 0.02},
        {**row("ina", 1024, 0.5), "codec": "sketch", "density": 0.02},
    ]
    pts = papers.points_of(comp, 0, {"rows": rows})
    assert [(p.algo, p.seconds, p.density) for p in pts] == [
        ("fixedpoint", 2.0, 0.02),
        ("sketch", 0.5, 0.02),
    ]
    argv = comp.argv(Path("/x"))
    assert "inaemu.mininet.papers_run" in argv and "--densities" in argv


def test_what_bounded_a_run(papers: ModuleType) -> None:
    assert papers.bound_of(row("ring", 1, 1.0))[0] == "links"
    assert papers.bound_of(row("ring", 1, 1.0, busiest_share=0.3))[0] == "not links"
    assert papers.bound_of(row("ring", 1, 1.0, busiest_share=None))[0] == "unknown"
    # the runner's own accounting wins when its summary has it
    by, why = papers.bound_of(row("ring", 1, 1.0, bound={"by": "emulator", "reason": "s1 95 %"}))
    assert (by, why) == ("emulator", "s1 95 %")
    by, why = papers.bound_of(row("ring", 1, 1.0, emulator_bound=True, bound_reason="cpu"))
    assert (by, why) == ("emulator", "cpu")


def test_ratios_pair_the_repeats(papers: ModuleType) -> None:
    """The baseline's best in each repeat over the system's time in the same repeat; a
    repeat the system failed in does not count."""
    P = papers.Point
    pts = []
    for r, (ring, hd, mt) in enumerate([(3.0, 4.0, 1.0), (2.0, 1.0, 2.0), (9.0, 9.0, None)]):
        for algo, t in (("ring", ring), ("hd", hd), ("multitree", mt)):
            pts.append(P("multitree", "t", "torus:4x4", algo, "int32", 8, 1.0, r,
                         math.nan if t is None else t, t is not None, "exact", 0.9, 0, "-", 0,
                         "links", ""))  # fmt: skip
    cells = [
        papers.Cell("multitree", "t", "torus:4x4", a, "int32", 8, 1.0, 3, 3, 1, 1, 1, m, None,
                    "links", "")
        for a, m in (("ring", 3.0), ("hd", 6.0), ("multitree", 1.0))
    ]  # fmt: skip
    got = papers.ratio("multitree", "best/multitree", "s", 8, pts, cells,
                       [("t", "ring"), ("t", "hd")], ("t", "multitree"), 8)  # fmt: skip
    assert got.repeats == 2
    assert (got.low, got.high) == (0.5, 3.0) and got.median == 1.75
    assert got.model == 3.0


def test_quick_mode_tables_and_plot_read_true(papers: ModuleType) -> None:
    """Quick mode: one run per point, one size per series. The tables say "1 run" with no
    range, the checker's flow count is not a run; the plot's size axes sit around the one
    size (a factor 1.4 either side, not the decades matplotlib puts around a single point),
    ticked at it; the emulator-bound point is hollow, as on the completion plots
    (`inaemu.runs.marks`), the links-bound ones filled; one run has no bar."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    from matplotlib.colors import to_rgba

    from inaemu.runs import marks

    size = 16 * 1024
    P = papers.Point
    bounds = {"ring": "links", "hd": "links", "multitree": "emulator"}
    seconds = {"ring": 3.0, "hd": 2.5, "multitree": 1.2}
    pts = [P("multitree", "torus4x4", "torus:4x4", a, "int32", size, 1.0, 0, t, True, "exact",
             0.9, 0, "-", 0, bounds[a], "") for a, t in seconds.items()]  # fmt: skip
    cells = [
        papers.Cell("multitree", "torus4x4", "torus:4x4", a, "int32", size, 1.0, 1, 1, t, t, t,
                    t / 1.2, None, bounds[a], "", int(bounds[a] == "emulator"))
        for a, t in seconds.items()
    ]  # fmt: skip
    ratios = [
        papers.ratio("multitree", f"{b}/multitree", "torus:4x4, 16K", size, pts, cells,
                     [("torus4x4", b)], ("torus4x4", "multitree"), size)
        for b in ("ring", "hd")
    ]  # fmt: skip
    assert [r.repeats for r in ratios] == [1, 1] and [r.emulator for r in ratios] == [1, 1]
    head = "\n".join(papers.headline_table("multitree", ratios, None))
    assert "2.50x (1 run)" in head and "repeats" not in head and "2.50x-2.50x" not in head
    assert "| ring/multitree | torus:4x4, 16K | 2.50x | - |" in "\n".join(
        papers.ratios_table(ratios)
    )
    assert "| 1/1 | 3.000 | - |" in "\n".join(papers.cells_table(cells, False))
    flows = papers.Ratio("eflops", "hdrm max flows", "bigraph:2x4", 0, 1.0, 1.0, 1.0, 1.0, 0)
    head = "\n".join(papers.headline_table("eflops", [flows], None))
    assert "1 (the schedule checker's count, not a run)" in head and "0 repeats" not in head
    fig = papers.figure("multitree", cells, ratios, None)
    try:
        for ax in fig.axes[:2]:
            lo, hi = ax.get_xlim()
            assert (lo, hi) == pytest.approx((size / marks.PAD, size * marks.PAD))
            assert [t.get_text() for t in ax.get_xticklabels()] == ["16K"]
            assert not [c for c in ax.collections if isinstance(c, LineCollection)]  # no bars
        (left, right) = fig.axes[:2]
        single = [ln for ln in left.get_lines() if len(ln.get_xdata()) == 1]
        face = {ln.get_ydata()[0]: to_rgba(ln.get_markerfacecolor()) for ln in single}
        assert face[1.2] == to_rgba(marks.EMULATOR_FACE)  # multitree: emulator-bound
        assert face[3.0] != to_rgba(marks.EMULATOR_FACE) != face[2.5]
        ratio_marks = [
            ln for ln in right.get_lines() if len(ln.get_xdata()) == 1 and ln.get_marker() in "os^"
        ]
        assert len(ratio_marks) == 2
        assert ratio_marks and all(
            to_rgba(ln.get_markerfacecolor()) == to_rgba(marks.EMULATOR_FACE) for ln in ratio_marks
        )
        labels = [t.get_text() for t in left.get_legend().get_texts()]
        assert marks.EMULATOR_LABEL in labels and "model (alpha-beta)" in labels
    finally:
        plt.close(fig)


def test_training_is_scored_against_the_worker_aggregator(papers: ModuleType) -> None:
    curve = [0.3, 0.5, 0.7, 0.8, 0.8, 0.8, 0.8, 0.8]
    slow = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.8, 0.8, 0.8, 0.8]
    train = {
        "backends": {
            "ps-plain": {"accuracy": curve, "time": [float(i + 1) for i in range(8)],
                         "step_seconds": [1.0] * 8, "allreduce_seconds": [0.5] * 8,
                         "iterations": list(range(8))},
            "ring-inceptionn": {"accuracy": slow, "time": [0.1 * (i + 1) for i in range(10)],
                                "step_seconds": [0.1] * 10, "allreduce_seconds": [0.01] * 10,
                                "iterations": list(range(10))},
        }
    }  # fmt: skip
    s = papers.training_summary(train)
    assert s["ok"] and s["target_accuracy"] == pytest.approx(papers.TARGET * 0.8)
    base, ring = s["backends"]["ps-plain"], s["backends"]["ring-inceptionn"]
    assert base["iterations_to_target"] < ring["iterations_to_target"]
    assert ring["seconds_to_target"] == pytest.approx(0.1 * ring["iterations_to_target"])
    assert not papers.training_summary({"backends": {}})["ok"]


def test_warm_workers_run_twice_and_the_links_count_one(papers: ModuleType) -> None:
    from inaemu.mininet.algos import RunSpec, algorithm

    class FakeScenario:
        pass

    inner = algorithm("ring")
    warm = Warm(inner, 0.05)
    inner.worker_argv = lambda *a: ["worker"]  # type: ignore[method-assign]
    spec = RunSpec(("h1", "h2"), 8, "int32", 1, 1, 64, 1.0)
    argv = warm.worker_argv(FakeScenario(), spec, 0, "h1", Path("/x"))  # type: ignore[arg-type]
    assert argv == ["worker", "--repeat", str(REPEAT), "--density", "0.05"]
    assert warm.check("inceptionn") == "bound" and warm.check("int32") == "exact"
    (u,) = halved([LinkUse("h1", "s1:1", "s1-eth1", 2000, 1000, 20, 10)])
    assert (u.a_to_b, u.b_to_a, u.a_to_b_packets, u.b_to_a_packets) == (1000, 500, 10, 5)


def test_the_suite_refuses_bad_arguments() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "papers.py"), "--paper", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--paper" in proc.stderr


# ---------------------------------------------------------------------- the suite (root)


def test_quick_suite_checks_every_result(mininet_ready: None, tmp_path: Path) -> None:  # noqa: F811
    """`bench/papers.py --quick`: one table and one plot per paper, a summary whose every
    point was checked by its runner (exact or within the bound) and verified."""
    out = tmp_path / "papers"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "papers.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "papers.json").read_text())
    assert report["mode"] == "quick" and report["verified"] and report["checked"]
    assert set(report["papers"]) == {"multitree", "eflops", "inceptionn", "sketch"}
    for name, paper in report["papers"].items():
        assert (out / f"{name}.md").read_text().startswith(f"# {name}")
        assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert paper["points"], name
        for p in paper["points"]:
            assert p["verified"] and p["checked"] in ("exact", "bound"), (name, p)
            assert math.isfinite(p["seconds"]) and p["seconds"] > 0
        for c in paper["cells"]:
            assert c["model"] > 0  # the alpha-beta prediction beside every point
    assert report["papers"]["sketch"]["densities"]  # measured from real gradients


def test_the_lock_is_opt_in_and_waits_for_its_holder(papers: ModuleType, tmp_path: Path) -> None:
    """Without --lock the suite takes no lock (run under `flock FILE` it would otherwise wait
    for itself forever); with one it waits until the holder lets go."""
    import fcntl
    import threading

    lock = tmp_path / "heavy.lock"
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with papers.heavy_lock(None) as waited:
            assert waited == 0.0
        got = threading.Event()

        def take() -> None:
            with papers.heavy_lock(lock):
                got.set()

        taker = threading.Thread(target=take, daemon=True)
        taker.start()
        assert not got.wait(0.3)  # the holder still has it
        fcntl.flock(held, fcntl.LOCK_UN)
        assert got.wait(10)
        taker.join(10)
