"""Every allreduce algorithm side by side on one Mininet network (`inaemu mininet --algo all`),
and the parts of the comparison that need no network: the registry, argument errors, result
checks and their error bounds, the rows, the table and the plot.

The scenario (root) runs every algorithm on a star of four hosts through the softswitch and
checks that the table has a verified row for each one that can run there (hdrm is refused
on a star, with the reason), that every host's traffic crossed the switch, and that nothing
of the network is left. It is skipped only where network namespaces cannot be made or
Mininet cannot be installed (the reason is printed with -ra).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inaemu.collectives.algorithms import algorithm as collective
from inaemu.collectives.check import step_bytes
from inaemu.common.wire import FRAME_BYTES, K
from inaemu.hostlib.worker import worker_input
from inaemu.mininet.algo_run import AlgoRun, WorkerOutcome, row_of
from inaemu.mininet.algos import ALGORITHMS, CODECS, Collective, RunSpec, algorithm
from inaemu.mininet.report import report_comparison
from inaemu.mininet.run import algo_names, bw_scales, choose, links_text, main, parse_sizes
from inaemu.mininet.scenario import RunDir, link_shaping
from inaemu.mininet.shaping import htb_burst, htb_commands
from inaemu.runs.accounting import (
    BW_CHECKS,
    ProcessUse,
    Usage,
    next_bw_all,
    two_digits_down,
)
from inaemu.runs.compare import (
    CHECKS,
    TABLE_HEADER,
    LinkUse,
    Point,
    Verdict,
    bound_notes,
    check_results,
    completion_figure,
    error_bound,
    link_ends,
    make_row,
    plot_completion,
    points,
    render_table,
    size_label,
    truth,
)
from inaemu.topology.builders import from_spec, star
from inaemu.topology.model import Topology
from inaemu.topology.routes import FlowRoutes
from tests.test_mininet import assert_removed, mininet, mininet_ready  # noqa: F401 (fixture)

STAR4 = ("h1", "h2", "h3", "h4")


# ---------------------------------------------------------------------- the registry


def test_every_algorithm_says_what_it_runs() -> None:
    assert list(ALGORITHMS) == [
        "ina", "ina-1tree", "ring", "hd", "hdrm", "multitree", "ps", "ring2d", "dtree", "gloo"
    ]  # fmt: skip
    for name, cls in ALGORITHMS.items():
        algo = algorithm(name)
        assert algo.summary and cls.facts.summary and algo.codecs, name
        assert set(algo.codecs) <= set(CODECS) and set(algo.codecs.values()) <= set(CHECKS)
        assert algo.check("int32") == "exact", name  # every algorithm sums integers exactly


def test_what_each_algorithm_refuses() -> None:
    topo = from_spec("star:4")
    assert algorithm("ina").refuse(topo, STAR4, "int32") is None
    assert "does not run codec plain" in str(algorithm("ina").refuse(topo, STAR4, "plain"))
    assert "does not run codec inceptionn" in str(
        algorithm("gloo").refuse(topo, STAR4, "inceptionn")
    )
    assert algorithm("gloo").refuse(topo, STAR4, "plain") is None
    for name in ("ring", "hd", "multitree", "ps"):
        assert algorithm(name).refuse(topo, STAR4, "inceptionn") is None, name
    assert "supports bigraph" in str(algorithm("hdrm").refuse(topo, STAR4, "int32"))
    bigraph = from_spec("bigraph:2x4")
    workers = tuple(sorted(bigraph.hosts, key=lambda h: int(h[1:])))
    assert algorithm("hdrm").refuse(bigraph, workers, "int32") is None


def test_a_collective_worker_gets_its_schedule_rank_and_every_peer(tmp_path: Path) -> None:
    """The schedule names the host of each rank: a worker's --rank and the --peers order are
    the schedule's (HDRM maps ranks to hosts in an order of its own)."""
    topo = from_spec("bigraph:2x4")
    workers = tuple(sorted(topo.hosts, key=lambda h: int(h[1:])))
    algo = algorithm("hdrm")
    assert isinstance(algo, Collective)
    sc: Any = SimpleNamespace(
        topology=topo, run=SimpleNamespace(build=tmp_path), host_ip=lambda h: topo.hosts[h].ip
    )
    spec = RunSpec(workers, size=1000, codec="plain", seed=3, run_id=77, window=64, timeout=5)
    facts = algo.prepare(sc, spec)
    assert "steps" in facts["schedule"] and (tmp_path / "schedule-hdrm.json").is_file()
    assert algo.schedule is not None
    for host in workers:
        argv = algo.worker_argv(sc, spec, workers.index(host), host, tmp_path / "x.npy")
        opt = dict(zip(argv[3::2], argv[4::2], strict=False))
        rank = int(opt["--rank"])
        assert algo.schedule.hosts[rank] == host
        peers = opt["--peers"].split(",")
        assert [p.split(":")[0] for p in peers] == [topo.hosts[h].ip for h in algo.schedule.hosts]
        assert len({p.split(":")[1] for p in peers}) == 1
        assert opt["--run"] == "77" and opt["--codec"] == "plain"


def test_an_ina_worker_gets_everything_the_worker_requires(tmp_path: Path) -> None:
    """The INA worker's command line as the runner builds it is one the worker accepts: its
    run id, and its host's MAC from the topology (which the worker checks on the interface)."""
    from inaemu.hostlib import worker

    topo = from_spec("leaf-spine:2x2x2")
    workers = tuple(sorted(topo.hosts))
    sc: Any = SimpleNamespace(
        topology=topo,
        host_ip=lambda h: topo.hosts[h].ip,
        agg_address=lambda h: ("10.0.0.254", "02:00:00:00:00:fe"),
    )
    spec = RunSpec(workers, size=1000, codec="int32", seed=3, run_id=77, window=64, timeout=5)
    algo = algorithm("ina")
    for rank, host in enumerate(workers):
        argv = algo.worker_argv(sc, spec, rank, host, tmp_path / "x.npy")
        assert argv[1:3] == ["-m", "inaemu.hostlib.worker"]
        args = worker.build_parser().parse_args(argv[3:])
        assert worker._refused(args) is None
        assert (args.run, args.mac, args.rank) == (77, topo.hosts[host].mac, rank)


# ---------------------------------------------------------------------- the gloo worker


def gloo_worker(*args: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "inaemu.mininet.gloo_worker", *args]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_the_gloo_worker_refuses_bad_arguments_in_one_line() -> None:
    for args, message in (
        (["--rank", "2", "--workers", "2", "--size", "4"], "need 0 <= --rank < --workers"),
        (["--rank", "0", "--workers", "2", "--size", "4", "--timeout", "0"], "--timeout"),
        (["--rank", "0", "--workers", "1", "--size", "4", "--local-ip", "192.0.2.77"],
         "host set-up failed: no interface has the address 192.0.2.77"),
    ):  # fmt: skip
        if "--local-ip" not in args:
            args += ["--local-ip", "127.0.0.1"]
        proc = gloo_worker("--master", "127.0.0.1", *args)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 2 and message in err and len(err.splitlines()) == 1, err
        assert out == ""  # no report line


def test_two_gloo_workers_all_reduce_over_loopback(tmp_path: Path) -> None:
    """Two ranks on 127.0.0.1 (no root): the exact int32 sum, the same digest, a report line
    like inaemu.hostlib.worker's."""
    port = str(29400 + os.getpid() % 500)
    procs = [
        gloo_worker("--rank", str(r), "--workers", "2", "--master", "127.0.0.1", "--port", port,
                    "--local-ip", "127.0.0.1", "--size", "1000", "--seed", "4", "--timeout",
                    "20", "--out", str(tmp_path / f"r{r}.npy"))
        for r in range(2)
    ]  # fmt: skip
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=90)
        assert p.returncode == 0, err
        reports.append(json.loads(out.splitlines()[-1]))
    expected = sum(worker_input(4, r, 1000, codec="int32").astype(np.int64) for r in range(2))
    for r in range(2):
        got = np.load(tmp_path / f"r{r}.npy")
        assert got.dtype == np.int32 and np.array_equal(got, expected)
        assert reports[r]["rank"] == r and reports[r]["end"] >= reports[r]["start"]
    assert reports[0]["digest"] == reports[1]["digest"]
    assert {"seconds", "cpu_seconds", "bytes_sent"} <= set(reports[0])


# ---------------------------------------------------------------------- arguments


def test_algorithm_lists() -> None:
    assert algo_names("all") == list(ALGORITHMS)
    assert algo_names("ina, ring,gloo") == ["ina", "ring", "gloo"]
    with pytest.raises(ValueError, match="unknown algorithm 'rign'"):
        algo_names("ina,rign")
    for bad in ("ina,ina", "ina,,ring", ""):
        with pytest.raises(ValueError):
            algo_names(bad)
    topo = from_spec("star:4")
    chosen, skipped = choose("all", topo, STAR4, "int32")
    assert [a.name for a in chosen] == [n for n in ALGORITHMS if n not in ("hdrm", "ring2d")]
    assert "supports bigraph" in skipped["hdrm"]
    assert "supports torus, mesh" in skipped["ring2d"]
    with pytest.raises(ValueError, match=r"--algo hdrm: hdrm does not run on a star"):
        choose("ina,hdrm", topo, STAR4, "int32")
    with pytest.raises(ValueError, match="no algorithm runs here"):
        choose("all", from_spec("star:4"), STAR4, "sketch-compact-nope")


def test_sizes() -> None:
    assert parse_sizes("256K,1M,4M") == [256 << 10, 1 << 20, 4 << 20]
    assert parse_sizes("1000") == [1000]
    for typed in ("64K", "1M", "100000", "3K", "256M", "1536K"):
        assert size_label(parse_sizes(typed)[0]) == typed
    for bad in ("1K,1K", "1K,", "1K,x"):
        with pytest.raises(Exception, match=r"twice|bad size"):
            parse_sizes(bad)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--algo", "ina,ina"], "name each algorithm once"),
        (["--algo", "ring,nope"], "unknown algorithm 'nope'"),
        (["--algo", "hdrm"], "hdrm does not run on a star topology; it supports bigraph"),
        (["--algo", "ina,gloo", "--codec", "inceptionn"], "does not run codec inceptionn"),
        (["--sizes", "1K,1K"], "a size is named twice"),
        (["--size", "1K", "--sizes", "2K,4K"], "not allowed with argument"),
        (["--bw", "fast"], "bad bandwidth 'fast': Mbit/s, e.g. 20, or auto"),
        (["--repeat", "0"], "--repeat"),
    ],
)
def test_argument_errors_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before anything is built (no root needed)."""
    try:
        rc = main(["--topo", "star:4", "--no-install", *argv])
    except SystemExit as exc:  # argparse's own errors
        rc = int(str(exc.code))
    err = capsys.readouterr().err
    assert rc == 2 and message in err, err
    assert "Traceback" not in err


# ---------------------------------------------------------------------- checks


def floats(n: int, size: int, seed: int) -> list[np.ndarray[Any, np.dtype[np.float32]]]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(size) * 10.0 ** rng.integers(-3, 3)).astype(np.float32)
            for _ in range(n)]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 9),
    size=st.integers(1, 300),
    seed=st.integers(0, 2**32 - 1),
    order_seed=st.integers(0, 2**32 - 1),
)
def test_float32_sums_in_any_order_meet_the_plain_bound(
    n: int, size: int, seed: int, order_seed: int
) -> None:
    """Whatever order a collective adds float32 inputs in (a different one per element,
    pairwise or sequential), its result is within `error_bound("plain", ...)` of the exact
    sum, and the check accepts it."""
    xs = floats(n, size, seed)
    sum64 = np.sum(np.array(xs, dtype=np.float64), axis=0)
    abs_sum = np.sum(np.abs(np.array(xs, dtype=np.float64)), axis=0)
    rng = np.random.default_rng(order_seed)
    got = np.empty(size, np.float32)
    for i in range(size):
        terms = [x[i] for x in rng.permutation(np.array(xs))]
        while len(terms) > 1:  # combine two random partial sums, in float32
            a = terms.pop(int(rng.integers(len(terms))))
            b = terms.pop(int(rng.integers(len(terms))))
            terms.append(np.float32(a + b))
        got[i] = terms[0]
    bound = error_bound("plain", n, abs_sum)
    assert np.all(np.abs(got.astype(np.float64) - sum64) <= bound)
    verdict = check_results({"h1": got, "h2": got.copy()}, check="bound", exact=None,
                            sum64=sum64, bound=bound)  # fmt: skip
    assert verdict.problems == []


def test_results_are_checked_exactly_or_within_the_bound() -> None:
    exact = np.arange(10, dtype=np.int32)
    sum64 = exact.astype(np.float64)
    ok = check_results({"h1": exact.copy(), "h2": exact.copy(), "h3": None}, check="exact",
                       exact=exact, sum64=sum64)  # fmt: skip
    assert ok.problems == [] and ok.max_abs_error == 0.0
    wrong = exact.copy()
    wrong[4] += 1
    bad = check_results({"h1": exact, "h2": wrong}, check="exact", exact=exact, sum64=sum64)
    assert bad.max_abs_error == 1.0
    assert any("h2: 1 of 10 elements wrong (first at 4" in p for p in bad.problems)
    assert any("differs from h1's" in p for p in bad.problems)
    floats32 = sum64.astype(np.float32)
    bound = np.full(10, 0.5)
    near = floats32 + np.float32(0.25)
    within = check_results({"h1": near, "h2": near.copy()}, check="bound", exact=None,
                           sum64=sum64, bound=bound)  # fmt: skip
    assert within.problems == [] and within.max_abs_error == 0.25
    far = floats32.copy()
    far[7] += 1
    beyond = check_results({"h1": far}, check="bound", exact=None, sum64=sum64, bound=bound)
    assert beyond.problems == ["h1: 1 of 10 elements beyond the error bound (first at 7: "
                               "np.float32(8.0), exact np.float64(7.0), bound 0.5)"]  # fmt: skip
    short = check_results({"h1": exact[:3]}, check="exact", exact=exact, sum64=sum64)
    assert short.problems == ["h1: result of 3 elements, not 10"]
    with pytest.raises(ValueError, match="unknown check"):
        check_results({}, check="close", exact=None, sum64=sum64)


def test_the_inceptionn_bound_is_wider_than_plain_float_rounding() -> None:
    abs_sum = np.array([0.0, 1.0, 100.0])
    plain, lossy = error_bound("plain", 4, abs_sum), error_bound("inceptionn", 4, abs_sum)
    assert plain[0] == 0.0 and np.all(lossy > plain) and lossy[0] >= 4 * 2.0**-10
    with pytest.raises(ValueError, match="no error bound for codec 'int32'"):
        error_bound("int32", 4, abs_sum)


# ---------------------------------------------------------------------- rows, table, plot


def uses() -> list[LinkUse]:
    return [
        LinkUse("h1", "s1:1", "s1-eth1", a_to_b=1000, b_to_a=3000),
        LinkUse("h2", "s1:2", "s1-eth2", a_to_b=2000, b_to_a=500),
        LinkUse("s1:3", "h3", "s1-eth3", a_to_b=100, b_to_a=4000),  # a host on the b end
        LinkUse("s1:4", "s2:1", "s1-eth4", a_to_b=6000, b_to_a=0),  # between switches
    ]


def test_a_row_counts_hosts_links_and_the_busiest_link() -> None:
    verdict = Verdict(max_abs_error=1e-7)
    row = make_row("ring", 4096, "plain", "bound", seconds=0.008, uses=uses(),
                   bandwidths=[50.0, 50.0, 50.0, 10.0], hosts=("h1", "h2", "h3"),
                   verdict=verdict, facts={"schedule": "3 steps"})  # fmt: skip
    assert row.verified and row.host_sent_max == 4000 and row.host_sent_mean == 7000 / 3
    assert row.link_bytes_total == 16600 and row.link_bytes_mean == 16600 / 4
    assert (row.busiest_link, row.busiest_bytes) == ("s1:4 -> s2:1", 6000)
    assert row.busiest_share == pytest.approx(6000 / (10e6 / 8 * 0.008))
    unshaped = make_row("ina", 4096, "int32", "exact", seconds=0.008, uses=uses(),
                        bandwidths=[None] * 4, hosts=("h1", "h2", "h3"), verdict=Verdict(),
                        problems=["h2 (rank 1): exit 1"])  # fmt: skip
    assert unshaped.busiest_share is None and not unshaped.verified
    assert (unshaped.busiest_link, unshaped.busiest_bytes) == ("s1:4 -> s2:1", 6000)
    # shaped unevenly (a torus node's wide host link): the busiest is the one that needs the
    # most time at its bandwidth, h1's 3000 B at 10 Mbit/s, not the 6000 B at 50
    narrow = make_row("ring", 4096, "plain", "bound", seconds=0.008, uses=uses(),
                      bandwidths=[10.0, 50.0, 50.0, 50.0], hosts=("h1", "h2", "h3"),
                      verdict=verdict)  # fmt: skip
    assert (narrow.busiest_link, narrow.busiest_bytes) == ("s1:1 -> h1", 3000)
    assert narrow.busiest_share == pytest.approx(3000 / (10e6 / 8 * 0.008))
    assert json.loads(json.dumps(row.to_json()))["facts"] == {"schedule": "3 steps"}

    lines = render_table([row, unshaped])
    assert len(lines) == 3
    for word in TABLE_HEADER[:4]:
        assert word in lines[0]
    assert "min-max s" not in lines[0]  # one run each
    assert lines[1].split()[:5] == ["ring", "4,096", "bound", "0.008", "0.005"]  # floor
    assert "60 %" in lines[1] and "1.00e-07" in lines[1]
    assert "FAILED" in lines[2] and lines[2].split()[-2:] == ["emulator", "-"]  # unshaped
    assert row.floor_seconds == pytest.approx(6000 * 8 / 10e6)
    assert unshaped.floor_seconds is None and unshaped.emulator_bound


def test_the_completion_plot_is_a_png(tmp_path: Path) -> None:
    rows = [
        make_row(
            algo,
            size,
            "int32",
            "exact",
            seconds=size / scale,
            uses=uses(),
            bandwidths=[None] * 4,
            hosts=("h1",),
            verdict=Verdict(),
        )
        for algo, scale in (("ina", 1e6), ("ring", 2e6))
        for size in (1024, 4096, 16384)
    ]
    path = plot_completion(rows, tmp_path / "completion.png", title="star:4")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def busy(machine: float, **cores: float) -> Usage:
    procs = [ProcessUse(n, "softswitch" if n.startswith("s") else "worker", 10 + i, c, c, c)
             for i, (n, c) in enumerate(cores.items())]  # fmt: skip
    return Usage(1.0, 2, machine, procs)


def test_a_row_says_what_bounded_it_and_keeps_the_numbers() -> None:
    """The floor from the busiest direction at its rate; a softswitch at 97 % of a core while
    that link ran at a third of its rate: emulator-bound, and the row keeps the CPU of every
    process, the machine, the drops and every direction's load for summary.json."""
    links = [LinkUse("h1", "s1:1", "s1-eth1", 2_500_000, 2_500_000),
             LinkUse("h2", "s1:2", "s1-eth2", 1_000_000, 2_500_000)]  # fmt: skip
    common = dict(uses=links, bandwidths=[20.0, 20.0], hosts=("h1", "h2"), verdict=Verdict())
    row = make_row("ina", 1 << 20, "int32", "exact", seconds=3.0, **common,  # type: ignore[arg-type]
                   usage=busy(0.7, s1=0.97, h1=0.2), drops={"s1": {"tx_dropped": 0}})  # fmt: skip
    assert row.floor_seconds == pytest.approx(2_500_000 * 8 / 20e6)  # 1 s
    assert (row.bound_by, row.emulator_bound) == ("emulator", True)
    assert row.bound_reason.startswith("s1 (softswitch) 97% of a core; busiest link h1 -> s1:1")
    data = json.loads(json.dumps(row.to_json()))
    assert data["emulator_bound"] is True and data["floor_seconds"] == pytest.approx(1.0)
    acct = data["accounting"]
    assert [p["name"] for p in acct["usage"]["processes"]] == ["s1", "h1"]
    assert acct["usage"]["machine_busy"] == 0.7 and acct["usage"]["cores"] == 2
    assert acct["port_drops"] == {"s1": {"tx_dropped": 0}}
    assert [(x["link"], round(x["load"], 3)) for x in acct["links"]] == [
        ("h1 -> s1:1", 0.333), ("s1:1 -> h1", 0.333), ("h2 -> s1:2", 0.133), ("s1:2 -> h2", 0.333)
    ]  # fmt: skip
    fast = make_row("ina", 1 << 20, "int32", "exact", seconds=1.1, **common,  # type: ignore[arg-type]
                    usage=busy(0.7, s1=0.97))  # fmt: skip
    assert fast.bound_by == "links" and not fast.emulator_bound


def rows_of(seconds: list[float], size: int = 4096, algo: str = "ina") -> list[Any]:
    """One row per run of `algo` at `size`; the runs at 0.5 s and over are emulator-bound (a
    saturated switch), the others links-bound (floor 0.1 s)."""
    links = [LinkUse("h1", "s1:1", "s1-eth1", 250_000, 250_000)]
    out = []
    for i, t in enumerate(seconds):
        use = busy(0.5, s1=0.95 if t >= 0.5 else 0.3)
        out.append(make_row(algo, size, "int32", "exact", seconds=t, uses=links,
                            bandwidths=[20.0], hosts=("h1",), verdict=Verdict(max_abs_error=0.0),
                            usage=use, repeat=i + 1))  # fmt: skip
    return out


def test_repeated_runs_are_one_line_with_their_median_and_spread() -> None:
    rows = rows_of([0.13, 0.11, 0.6]) + rows_of([0.12, 0.14], size=8192, algo="ring")
    failed = rows_of([0.01])[0]
    failed.verified, failed.problems, failed.repeat = False, ["h1 (rank 0): exit 1"], 4
    rows.insert(3, failed)
    pts = points(rows)
    assert [(p.algo, p.size, p.runs) for p in pts] == [("ina", 4096, 4), ("ring", 8192, 2)]
    ina = pts[0]
    assert ina.seconds == [0.13, 0.11, 0.6]  # the failed run is no point of the plot
    assert (ina.median, ina.low, ina.high, ina.emulator_bound) == (0.13, 0.11, 0.6, 1)
    assert ina.floor == pytest.approx(0.1) and pts[1].median == pytest.approx(0.13)
    assert json.loads(json.dumps(ina.to_json()))["median_seconds"] == 0.13
    lines = render_table(rows)
    assert len(lines) == 3 and "min-max s" in lines[0]
    ina_line, ring_line = lines[1].split(), lines[2].split()
    assert ina_line[:6] == ["ina", "4,096", "FAILED", "0.130", "0.110-0.600", "0.100"]
    assert "emulator 1/4" in lines[1] and ring_line[-2] == "links"
    assert ring_line[3:5] == ["0.130", "0.120-0.140"]
    notes = bound_notes(rows)
    assert len(notes) == 1 and notes[0].startswith("  ina x 4K: emulator-bound (1 of 4 runs): s1")


def test_the_plot_is_log_log_at_the_sizes_given_with_spread_floors_and_marks() -> None:
    """Read back from the figure: log axes, x ticks exactly at the sizes labelled as given,
    no minor ticks, every y tick labelled and inside the axis, each algorithm's median,
    min-max bar and dashed floor, the emulator-bound points hollow, a legend entry each."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    from matplotlib.colors import to_rgba

    sizes = [64 << 10, 100_000, 1 << 20]
    pts = [Point("ina", n, 3, [n * 3e-6, n * 2e-6, n * 4e-6], [n * 1e-6] * 3,
                 3 if n > 70_000 else 0) for n in sizes]  # fmt: skip
    pts += [Point("ring", n, 3, [n * 1.5e-6], [n * 1.2e-6], 0) for n in sizes]
    fig = completion_figure(pts, title="star:4")
    try:
        (ax,) = fig.axes
        assert ax.get_xscale() == ax.get_yscale() == "log"
        assert [round(x) for x in ax.get_xticks()] == sizes
        assert [t.get_text() for t in ax.get_xticklabels()] == ["64K", "100000", "1M"]
        assert len(ax.xaxis.get_minorticklocs()) == len(ax.yaxis.get_minorticklocs()) == 0
        lo, hi = ax.get_ylim()
        yticks = list(ax.get_yticks())
        assert len(yticks) >= 2 and all(lo <= y <= hi for y in yticks)
        assert all(t.get_text() for t in ax.get_yticklabels())  # no empty tick
        assert lo <= min(p.low for p in pts) and max(p.high for p in pts) <= hi
        dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        assert sorted(tuple(ln.get_ydata()) for ln in dashed) == sorted(
            [tuple(n * 1e-6 for n in sizes), tuple(n * 1.2e-6 for n in sizes)]
        )
        markers = [
            ln for ln in ax.get_lines() if ln.get_marker() == "o" and len(ln.get_xdata()) == 1
        ]
        hollow = sorted(
            ln.get_ydata()[0] for ln in markers if to_rgba(ln.get_markerfacecolor()) == (1, 1, 1, 1)
        )
        assert hollow == pytest.approx([100_000 * 3e-6, (1 << 20) * 3e-6])  # ina's marked ones
        bars = [c for c in ax.collections if isinstance(c, LineCollection)]
        spans = sorted((round(seg[0][1], 9), round(seg[1][1], 9))
                       for c in bars for seg in c.get_segments())  # fmt: skip
        assert spans == sorted((round(n * 2e-6, 9), round(n * 4e-6, 9)) for n in sizes)
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend[:2] == ["ina", "ring"]
        assert any(t.startswith("link floor") for t in legend)
        assert any(t.startswith("emulator-bound") for t in legend)
        assert "median of up to 3 runs, bar min-max" in legend
    finally:
        plt.close(fig)
    unshaped = completion_figure([Point("ina", 1024, 1, [0.5], [], 1)])
    try:
        assert "links unshaped: no link floor" in unshaped.axes[0].get_title()
        assert [t.get_text() for t in unshaped.axes[0].get_xticklabels()] == ["1K"]
    finally:
        plt.close(unshaped)


@pytest.mark.parametrize(
    ("spec", "node_ports", "algo"),
    [
        ("star:4", "all", "ring"),
        ("leaf-spine:2x2x2", "all", "hd"),
        ("torus:3x3", "all", "multitree"),
        ("torus:3x3", "1", "ring"),
        ("mesh:3x3", "all", "ring"),
    ],
)
def test_the_floor_is_what_the_checkers_bytes_need_at_the_shaped_rates(
    spec: str, node_ports: str, algo: str
) -> None:
    """A row of links that carried exactly the checker's bytes (`check.step_bytes`, every
    step), shaped as Mininet shapes them (`link_shaping`), has the floor the checker's model
    gives: the most time any directed link's bytes need at its capacity (`FlowRoutes.capacity`:
    a torus node's host link under `all` is its 4 network ports wide)."""
    topo = from_spec(spec)
    hosts = tuple(topo.hosts)
    sched = collective(algo).schedule_among(topo, hosts, node_ports=node_ports)
    routes = FlowRoutes(topo, node_ports)
    carried: dict[tuple[str, str], int] = {}
    for step in step_bytes(sched, routes, 4 * 10_000):
        for link, nbytes in step.items():
            carried[link] = carried.get(link, 0) + nbytes
    uses = []
    for lk in topo.links:
        a, b = link_ends(lk)
        uses.append(LinkUse(a, b, "-", carried.get((lk.a, lk.b), 0), carried.get((lk.b, lk.a), 0)))
    bw = 10.0
    shaping = [p["bw"] for p in link_shaping(topo, bw, node_ports)]
    row = make_row(algo, 10_000, "int32", "exact", seconds=1.0, uses=uses, bandwidths=shaping,
                   hosts=hosts, verdict=Verdict())  # fmt: skip
    model = max(n / (routes.capacity(lk) * bw * 1e6 / 8) for lk, n in carried.items())
    assert row.floor_seconds == pytest.approx(model)
    assert sum(carried.values()) == row.link_bytes_total  # every byte found its link


def test_a_shaped_link_may_catch_up_on_five_milliseconds_of_its_rate() -> None:
    """Both htb buckets (burst and cburst) hold 5 ms of the link's rate, at least 1,600 bytes:
    with Mininet's one-frame cburst a link shaped to 44 or 88 Mbit/s carried about 20 on a
    busy machine (docs/mininet.md, "Links")."""
    assert [htb_burst(bw) for bw in (2.0, 44.0, 88.0, 1000.0)] == [1600, 27500, 55000, 625000]
    qdisc, cls = htb_commands(44.0)
    assert qdisc == "%s qdisc add dev %s root handle 5:0 htb default 1"
    assert cls.endswith("htb rate 44.000000Mbit burst 27500 cburst 27500")


def test_bw_auto_counts_each_link_in_units_of_bw() -> None:
    torus = from_spec("torus:3x3")
    host = [i for i, lk in enumerate(torus.links) if lk.a_port is None or lk.b_port is None]
    scales = bw_scales(torus, "all")
    assert {scales[i] for i in host} == {4.0} and set(bw_scales(torus, "1")) == {1.0}
    assert {s for i, s in enumerate(scales) if i not in host} == {1.0}
    torus.links[0] = dataclasses.replace(torus.links[0], options="bw=5")
    assert bw_scales(torus, "all")[0] is None  # its own rate: --bw does not set it
    assert links_text("auto", "all", False) == ", links auto (measured first)"
    assert links_text(13.0, "all", False, auto=True) == ", links 13 Mbit/s (auto)"
    assert links_text(None, "1", True) == ", node ports 1"


def test_the_report_prints_the_table_plots_several_sizes_and_lists_problems(
    tmp_path: Path,
) -> None:
    run = RunDir.make(tmp_path / "run")
    rows = [
        make_row(algo, size, "int32", "exact", seconds=size / 1e6, uses=uses(),
                 bandwidths=[None] * 4, hosts=("h1",), verdict=Verdict(max_abs_error=0.0),
                 problems=["h1 (rank 0): exit 1"] if (algo, size) == ("ring", 4096) else [])
        for algo in ("ina", "ring")
        for size in (1024, 4096)
    ]  # fmt: skip
    said: list[str] = []
    args = Namespace(sizes=[1024, 4096], codec="int32")
    report_comparison(rows, run, args, lambda line, **_: said.append(line), title="star:4")
    text = "\n".join(said)
    assert said[0].startswith("algorithm") and len([ln for ln in said[:5] if "4,096" in ln]) == 2
    assert f"completion time against size: {run.root / 'completion.png'}" in text
    assert (run.root / "completion.png").stat().st_size > 0
    assert "FAILED: 1 of 4 run(s):\n  ring x 4,096: h1 (rank 0): exit 1" in text
    said.clear()
    report_comparison(rows[:1], run, Namespace(sizes=None, codec="int32"), said.append, title="")
    assert said[-1] == "verified: every run (1), each worker's result as its check requires"


def test_a_run_with_a_failed_worker_and_a_wrong_result_is_a_failed_row(tmp_path: Path) -> None:
    """row_of: each worker's outcome and result file checked against the truth of its size;
    completion from the reports; the row lists every problem."""
    workers = ("h1", "h2", "h3", "h4")
    spec = RunSpec(workers, size=500, codec="int32", seed=9, run_id=5, window=64, timeout=5)
    t = truth("int32", 9, 4, 500, exact=True)
    assert t.exact is not None and np.array_equal(t.exact.astype(np.float64), t.sum64)
    outcomes = []
    for rank, host in enumerate(workers):
        result = t.exact.copy()
        if host == "h2":
            result[17] += 3
        if host != "h4":
            np.save(tmp_path / f"{host}.npy", result)
        report = {"seconds": 0.5, "start": 100.0 + rank / 10, "end": 100.9}
        outcomes.append(WorkerOutcome(host, rank, 1 if host == "h4" else 0, report,
                                      "boom" if host == "h4" else ""))  # fmt: skip
    links = [LinkUse(h, f"s1:{i + 1}", f"s1-eth{i + 1}", 3000, 3000) for i, h in enumerate(workers)]
    run = AlgoRun(algorithm("ring"), spec, {}, outcomes, tmp_path, links, "", 1.0, [])
    row, verdict, how = row_of(run, t, [50.0] * 4)
    assert how == "from the last worker's start" and row.seconds == pytest.approx(0.6)
    assert not row.verified and row.max_abs_error == 3.0 and row.host_sent_max == 3000
    assert row.problems[0] == "h4 (rank 3): exit 1: boom"
    assert row.problems[1].startswith("h2: 1 of 500 elements wrong (first at 17")
    assert "h2: result differs from h1's" in row.problems
    assert verdict.problems == row.problems[1:]  # the failed worker is the run's, not the check's


# ---------------------------------------------------------------------- the scenario (root)


def star_named(switch: str, hosts: int = 4) -> Topology:
    """star(hosts) with its switch called `switch`: its interfaces (`<switch>-eth<port>`)
    clash with no other Mininet scenario running on the machine at the same time."""
    topo = star(hosts)
    topo.switches = {switch: dataclasses.replace(topo.switches["s1"], name=switch)}
    topo.links = [dataclasses.replace(lk, b=switch) for lk in topo.links]
    return topo.validate()


@pytest.mark.usefixtures("mininet_ready")
def test_every_algorithm_on_a_star_of_four(tmp_path: Path) -> None:
    star_named("cmp1").save(tmp_path / "star4.json")
    run = tmp_path / "run"
    size = 64 << 10
    proc = mininet(run, "-t", str(tmp_path / "star4.json"), "--algo", "all", "--size", "64K",
                   "--bw", "100", timeout=150)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((run / "summary.json").read_text())
    expected = [n for n in ALGORITHMS if n not in ("hdrm", "ring2d")]
    assert summary["algos"] == expected and summary["verified"] is True
    assert "supports bigraph" in summary["skipped"]["hdrm"]
    assert "skipped hdrm: hdrm does not run on a star topology" in proc.stdout
    rows = {r["algo"]: r for r in summary["rows"]}
    assert list(rows) == expected
    table = proc.stdout[proc.stdout.index("algorithm  ") :].splitlines()
    for name in expected:
        row = rows[name]
        assert row["verified"] and row["problems"] == [] and row["max_abs_error"] == 0.0, row
        assert row["check"] == "exact" and 0 < row["seconds"] < 30
        line = next(ln for ln in table if ln.split()[0] == name)  # one table line each
        assert line.split()[1:3] == ["65,536", "exact"]
        # every host's traffic crossed the switch: at least what the algorithm must send
        # (INA: one frame per K elements; any host allreduce: 2 (n-1)/n of the array)
        least = -(-size // K) * FRAME_BYTES if name.startswith("ina") else 2 * 3 * size
        assert row["host_sent_max"] >= row["host_sent_mean"] >= least, (name, row)
        assert 0 < row["busiest_share"] < 1.5, row
        assert len(row["links"]) == 4 and len(row["worker_reports"]) == 4
        assert row["floor_seconds"] == pytest.approx(row["busiest_bytes"] * 8 / 100e6)
        assert row["bound_by"] in ("links", "emulator", "unclear") and row["bound_reason"]
        usage = row["accounting"]["usage"]
        assert {p["name"] for p in usage["processes"]} == {"cmp1", "h1", "h2", "h3", "h4"}
        logs = run / "logs" / f"{name}-{size}"
        assert sorted(p.name for p in logs.glob("*.json")) == [f"h{i}.json" for i in range(1, 5)]
    schedules = sorted(p.name for p in (run / "build").glob("schedule-*.json"))
    assert schedules == [
        "schedule-dtree.json", "schedule-hd.json", "schedule-multitree.json", "schedule-ps.json",
        "schedule-ring.json",
    ]  # fmt: skip
    assert not list((run / "build" / "results").rglob("*.npy"))  # verified: removed
    assert f"verified: every run ({len(expected)})" in proc.stdout
    assert_removed(run)


@pytest.mark.usefixtures("mininet_ready")
def test_bw_auto_repeats_and_sizes_on_a_star_of_three(tmp_path: Path) -> None:
    """`--bw auto`: an unshaped run of each algorithm first (its own network, under probe/),
    half the slowest one's busiest-link rate, checked by a shaped run of every algorithm (their
    own network, under bw-check-1/; stepped down while the links do not bound each of them),
    said and recorded; then every
    algorithm twice at each size, each run with its accounting, each point its median and
    spread, the plot; nothing of either network left."""
    star_named("cmp2", 3).save(tmp_path / "star3.json")
    run = tmp_path / "run"
    proc = mininet(run, "-t", str(tmp_path / "star3.json"), "--algo", "ina,ring",
                   "--sizes", "16K,32K", "--repeat", "2", "--bw", "auto", timeout=150)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((run / "summary.json").read_text())
    auto = summary["bw_auto"]
    caps = {c["algo"]: c["mbit"] for c in auto["capacities"]}
    assert sorted(caps) == ["ina", "ring"] and auto["probe_size"] == 32 << 10
    assert auto["first_mbit"] == two_digits_down(0.5 * min(caps.values()))
    assert f"--bw auto: {auto['reason']}" in proc.stdout
    assert f"links set to {auto['first_mbit']:g} Mbit/s, 50% of it" in auto["reason"]
    checks = auto["checks"]
    assert checks[0]["mbit"] == auto["first_mbit"] and 1 <= len(checks) <= BW_CHECKS
    for c in checks:  # every algorithm checked at the rate, not only the slowest
        assert [x["algo"] for x in c["runs"]] == ["ina", "ring"]
        verdicts = [(x["bound_by"], x["carried_mbit"]) for x in c["runs"]]
        assert c["next_mbit"] == next_bw_all(c["mbit"], verdicts)
    for c, after in itertools.pairwise(checks):  # each step down from a run not links-bound
        assert any(x["bound_by"] != "links" for x in c["runs"])
        assert after["mbit"] == c["next_mbit"]
    last = checks[-1]
    if last["next_mbit"] == last["mbit"]:
        assert all(x["bound_by"] == "links" for x in last["runs"])
        assert f"--bw auto: {last['mbit']:g} Mbit/s holds" in proc.stdout
    assert summary["bw_mbit"] == auto["chosen_mbit"] == last["next_mbit"]
    assert f"--bw auto: checked {auto['first_mbit']:g} Mbit/s, every algorithm" in proc.stdout
    rows = summary["rows"]
    assert [(r["algo"], r["size"], r["repeat"]) for r in rows] == [
        (a, n, k) for n in (16 << 10, 32 << 10) for k in (1, 2) for a in ("ina", "ring")
    ]
    for r in rows:
        assert r["verified"] and r["floor_seconds"] > 0
        assert r["emulator_bound"] == (r["bound_by"] == "emulator") and r["bound_reason"]
        acct = r["accounting"]
        assert {p["name"] for p in acct["usage"]["processes"]} == {"cmp2", "h1", "h2", "h3"}
        assert 0 <= acct["usage"]["machine_busy"] <= 1
        assert set(acct["port_drops"]) == {"cmp2"}
        assert {x["mbit"] for x in acct["links"]} == {summary["bw_mbit"]}
    assert [(p["algo"], p["runs"], len(p["seconds"])) for p in summary["points"]] == [
        ("ina", 2, 2), ("ring", 2, 2), ("ina", 2, 2), ("ring", 2, 2)
    ]  # fmt: skip
    assert "min-max s" in proc.stdout and (run / "completion.png").stat().st_size > 5000
    assert_removed(run)
    assert_removed(run / "probe")
    for n in range(1, len(checks) + 1):
        assert_removed(run / f"bw-check-{n}")
