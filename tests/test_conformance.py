"""Packet-level conformance: every conformance/cases/*.stf and *.mstf case against every target,
the multi-switch format and runner, and the `inaemu conformance` command that runs them for
users."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inaemu.cli import main as cli
from inaemu.common.wire import Flag
from inaemu.conformance.bmv2_network import Bmv2NetworkRunner
from inaemu.conformance.bmv2_target import Bmv2Runner, bmv2_available, parse_counter_reads
from inaemu.conformance.nanomsg import NanomsgError
from inaemu.conformance.network import parse_network, run_network
from inaemu.conformance.network_cases import (
    UP_PORT,
    WORKERS,
    NetCase,
    partial,
    result_copy,
    two_level_tree,
)
from inaemu.conformance.run import CASES_DIR, Row, find_cases, load_case, main, run, run_softswitch
from inaemu.conformance.softswitch_target import SoftswitchTarget
from inaemu.conformance.stf import StfError, load_stf, parse_stf
from inaemu.p4 import tools
from inaemu.p4.build import compile_p4
from inaemu.p4.tools import PREFIX_ENV, find_tool
from inaemu.sim.engine import ns3_available
from inaemu.softswitch.fast.dataplanes import DATAPLANES

CASES = find_cases([CASES_DIR], [])
NETWORK_CASES = [p for p in CASES if p.suffix == ".mstf"]


def test_cases_present() -> None:
    names = {p.stem for p in CASES}
    for required in ("sum_4_workers", "duplicates", "malformed", "tree_leaf", "loss_injection"):
        assert required in names
    for required in ("tree2_sum", "tree2_lost_partial", "tree2_lost_result", "tree2_rerun"):
        assert required in names and (CASES_DIR / f"{required}.mstf").is_file()


def test_stf_files_current() -> None:
    """The committed .stf files are what make_cases.py writes (nobody hand-edited them)."""
    proc = subprocess.run(
        [sys.executable, "-m", "inaemu.conformance.make_cases", "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("dataplane", DATAPLANES)
@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_softswitch(path: Path, dataplane: str) -> None:
    """Every case on both of the softswitch's data planes: the compiled one and the Python
    reference."""
    result = run_softswitch(load_case(path), dataplane)
    assert result.ok, "\n".join(result.failures)
    assert result.packets_in > 0


SIM_MISSING = ns3_available()


@pytest.mark.skipif(SIM_MISSING is not None, reason=str(SIM_MISSING))
@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_sim(path: Path) -> None:
    """Every case through the simulator's switches and ns-3's links (`sim_target.py`)."""
    from inaemu.conformance.sim_target import run_sim

    result = run_sim(load_case(path))
    assert result.ok, "\n".join(result.failures)
    assert result.packets_in > 0


@pytest.mark.skipif(SIM_MISSING is not None, reason=str(SIM_MISSING))
def test_a_broken_network_case_fails_on_the_simulator() -> None:
    """The simulated target is not a yes-man: the broken case fails there as on the
    softswitch, with the same failures, and so does the lost partial's case without its
    loss."""
    from inaemu.conformance.sim_target import run_sim

    result = run_sim(parse_network(_broken_tree_sum(), "broken.mstf"))
    assert [f.split("\n")[0] for f in result.failures] == BROKEN_TREE_SUM_FAILURES
    text = (CASES_DIR / "tree2_lost_partial.mstf").read_text().replace("lose leaf1:3\n", "")
    failures = run_sim(parse_network(text, "no_loss.mstf")).failures
    assert "root: counter InaIngress.counters.ina_drops(10) packets: expected 1, got 0" in failures


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


def _shim_simple_switch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """`simple_switch` becomes a shell script that runs `script`, then the real one with the
    arguments as `script` left them: the shim is in $INAEMU_P4_PREFIX/bin, where the runner
    looks first (`inaemu.p4.tools`); the other tools are found where they were."""
    real = find_tool("simple_switch")
    shim = tmp_path / "bin" / "simple_switch"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\n{script}\nexec {real} "$@"\n')
    shim.chmod(0o755)
    monkeypatch.setenv(PREFIX_ENV, str(tmp_path))


# What a busy machine does to simple_switch: it starts 3 s late, and if told to wait N seconds
# before reading its input files (--use-files N), it reads them 3 s later than that.
SLOW_START = """
sleep 3
n=$#; prev=
for a in "$@"; do
    if [ "$prev" = --use-files ]; then set -- "$@" $((a + 3)); else set -- "$@" "$a"; fi
    prev=$a
done
shift $n
"""


@pytest.mark.bmv2
@needs_bmv2
def test_bmv2_waits_for_a_slow_switch(
    bmv2_json: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A simple_switch slower than usual at everything still runs the case: the runner waits
    for it to be ready and done, never a fixed time."""
    _shim_simple_switch(tmp_path, monkeypatch, SLOW_START)
    result = Bmv2Runner(bmv2_json).run(load_stf(CASES_DIR / "tree_leaf.stf"))
    assert result.ok, "\n".join(result.failures)
    assert result.packets_out == 5


@pytest.mark.bmv2
@needs_bmv2
def test_bmv2_says_when_the_switch_never_starts(
    bmv2_json: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _shim_simple_switch(tmp_path, monkeypatch, "echo 'no such thing' >&2; exit 3")
    with pytest.raises(RuntimeError, match="simple_switch exited: no such thing"):
        Bmv2Runner(bmv2_json).run(load_stf(CASES_DIR / "tree_leaf.stf"))


def test_bmv2_cli_commands_for_the_cases() -> None:
    """What the bmv2 target sends to simple_switch_CLI (checked here without bmv2)."""
    runner = Bmv2Runner(Path("unused.json"))
    cmds = runner.cli_commands(load_stf(CASES_DIR / "ipv4_forwarding.stf"))
    assert cmds == [
        "table_add InaIngress.fwd.ipv4_lpm InaIngress.fwd.ipv4_forward 167772162/32 => 2 2",
        "table_add InaIngress.fwd.ipv4_lpm InaIngress.fwd.ipv4_forward 167772160/24 => 170 3",
    ]
    cmds = runner.cli_commands(load_stf(CASES_DIR / "tree_leaf.stf"))
    assert (
        cmds[0] == "table_add InaIngress.agg.ina_job InaIngress.agg.agg_node 1 0 => 0 4 2 1 0 3 1"
    )
    assert "table_add InaIngress.agg.ina_child InaIngress.agg.set_child 1 0 2 47500 => 1" in cmds
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
    assert "sum_4_workers          softswitch:fast      pass" in out
    assert "sum_4_workers          softswitch:reference pass" in out
    assert "count_wrap" in out and "8 passed, 0 failed" in out
    assert main(["-k", "sum_1", "--target", "softswitch:reference"]) == 0
    out = capsys.readouterr().out
    assert "softswitch:reference" in out and "softswitch:fast" not in out


def test_command_reports_a_failing_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (CASES_DIR / "sum_1_worker.stf").read_text()
    expect = next(ln for ln in text.splitlines() if ln.startswith("expect "))
    broken = text.replace(expect, expect.replace("expect 1 ", "expect 2 "))
    (tmp_path / "broken.stf").write_text(broken)
    assert main(["--cases", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "broken                 softswitch:fast      FAIL" in out
    assert "broken                 softswitch:reference FAIL" in out
    assert "port 1: unexpected packet #0" in out and "0 passed, 2 failed" in out


def test_command_refuses_what_it_cannot_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["--cases", str(tmp_path / "nowhere")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    (tmp_path / "bad.stf").write_text("packet one two\n")
    assert main(["--cases", str(tmp_path)]) == 2
    assert "bad.stf:1:" in capsys.readouterr().err
    # no p4c, no bmv2: neither in $INAEMU_P4_PREFIX/bin, nor in /opt/p4/bin, nor on PATH
    monkeypatch.setenv(PREFIX_ENV, str(tmp_path / "prefix"))
    monkeypatch.setattr(tools, "DEFAULT_PREFIX", tmp_path / "opt-p4")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["--target", "bmv2"]) == 2
    err = capsys.readouterr().err
    assert "p4c-bm2-ss, simple_switch, simple_switch_CLI not found in " in err, err
    assert f"{tmp_path}/prefix/bin (${PREFIX_ENV}/bin), {tmp_path}/opt-p4/bin and PATH" in err


@pytest.mark.parametrize("case", ["sum_4_workers.stf", "tree2_sum.mstf"])
def test_a_case_cut_short_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """Issue 22, item 14: a case file cut at a line boundary (its last expectations and
    counter checks gone) passed as a shorter case; without its `# end` line it is refused."""
    lines = (CASES_DIR / case).read_text().splitlines(keepends=True)
    assert lines[-1] == "# end\n"
    first_expect = next(i for i, ln in enumerate(lines) if ln.startswith("expect "))
    for cut in (len(lines) - 1, len(lines) - 3, first_expect + 1):
        (tmp_path / case).write_text("".join(lines[:cut]))
        assert main(["--cases", str(tmp_path), "--target", "softswitch:reference"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert f"{case}:" in err and "does not end with the line '# end'" in err, err
    (tmp_path / case).write_text("".join(lines))  # whole again: it passes
    assert main(["--cases", str(tmp_path), "--target", "softswitch:reference"]) == 0
    assert "1 passed, 0 failed" in capsys.readouterr().out


def test_a_binary_case_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 22, item 13: `inaemu conformance --cases` on a binary file ended in a
    UnicodeDecodeError traceback."""
    (tmp_path / "picture.stf").write_bytes(b"# a case\n\x89PNG\r\n\x1a\n\x00\xff")
    assert cli.main(["conformance", "--cases", str(tmp_path / "picture.stf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "picture.stf:2: not a text file (a byte that is not UTF-8)" in err


# ---------------------------------------------------------------------- multi-switch cases

TREE_SUM = (CASES_DIR / "tree2_sum.mstf").read_text()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("add t k:1 a()\n", "outside a switch section"),
        ("# nothing\n", "no switch section"),
        ("switch a\nlink a:1 b:1\n", "unknown switch 'b'"),
        ("switch a\nswitch b\nlink a:1 b:1\nlink a:1 b:2\n", "a:1 is already in use"),
        ("switch a\nlink a:1 a:1\n", "a link needs two ports"),
        ("switch a\nswitch b\nlink a:1 b:1\npacket a:1 00\n", "a:1 is linked to b:1"),
        ("switch a\npacket a:1 00\nlose a:1\n", "not a linked port"),
        ("switch a\npacket a:1 00\nmc_mgrp_create 1\n", "after the first packet"),
        ("switch a\npacket a:1 00\nswitch b\n", "come before the first packet"),
        ("switch a\npacket 1 00\n", "must be <switch>:<port>"),
        ("switch a\npacket a:x 00\n", "not a number: 'x'"),
        ("switch a\ncheck_counter b c(1) packets == 1\n", "check_counter <switch>"),
        ("switch a\nexpect a:1 zz\n", "hex nibbles"),
    ],
)
def test_network_format_refuses_what_it_cannot_run(text: str, message: str) -> None:
    with pytest.raises(StfError, match=message) as info:
        parse_network(text, "case.mstf")
    assert str(info.value).startswith("case.mstf:")


def test_single_switch_files_refuse_network_commands() -> None:
    with pytest.raises(StfError, match=r"case.stf:2: 'link' is a multi-switch command.*\.mstf"):
        parse_stf("# a\nlink a:1 b:1\n", "case.stf")


def _broken_tree_sum() -> str:
    """tree2_sum with one expected byte changed and a loss that no frame uses."""
    lines = TREE_SUM.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("expect leaf2:2 "))
    lines[i] = lines[i][:-6] + ("0" if lines[i][-6] != "0" else "1") + lines[i][-5:]
    return "\n".join([*lines, "lose root:2", ""])


BROKEN_TREE_SUM_FAILURES = [
    "lose root:2: no frame left that port to lose (1 unused)",
    "leaf2:2: packet #0 differs",
]


def test_a_broken_network_case_fails_on_the_softswitch() -> None:
    result = run_softswitch(parse_network(_broken_tree_sum(), "broken.mstf"))
    assert [f.split("\n")[0] for f in result.failures] == BROKEN_TREE_SUM_FAILURES


def test_without_its_loss_the_lost_partial_case_fails() -> None:
    """The loss is what the case is about: without it the root completes at once, so the
    retransmissions are all answered by the leaves (one copy too many for h1 and h3), no
    partial is re-sent and the root sees no duplicate."""
    text = (CASES_DIR / "tree2_lost_partial.mstf").read_text().replace("lose leaf1:3\n", "")
    failures = run_softswitch(parse_network(text, "no_loss.mstf")).failures
    assert "root: counter InaIngress.counters.ina_drops(10) packets: expected 1, got 0" in failures
    assert [f[:29] for f in failures[-2:]] == [
        "leaf1:1: unexpected packet #1",
        "leaf2:1: unexpected packet #1",
    ]


LEAF_WORKERS = {"leaf1": (0, 1), "leaf2": (2, 3)}  # indexes into WORKERS


@settings(max_examples=25, deadline=None)
@given(order=st.permutations(range(4)), lost=st.sampled_from([None, "leaf1", "leaf2"]))
def test_any_send_order_through_the_tree_gives_every_worker_the_sum(
    order: list[int], lost: str | None
) -> None:
    """Whatever order the four workers send in, and with or without one leaf's partial lost
    on its cable (recovered by a retransmission from that leaf's first worker), every worker
    gets exactly one copy of the sum, carrying the headers of the frame that completed the
    root."""
    c = NetCase("order", "property")
    two_level_tree(c, pool=2)
    pkts = {w: w.chunk((i + 1, -(10**i)), slot=1, seq=3) for i, w in enumerate(WORKERS)}
    if lost is not None:
        c.lose(lost, UP_PORT)
    sent: list[int] = []
    last = None
    for i in order:
        c.send(WORKERS[i], pkts[WORKERS[i]])
        sent.append(i)
        done = [leaf for leaf in ("leaf1", "leaf2") if all(j in sent for j in LEAF_WORKERS[leaf])]
        if last is None and len(done) == 2 and lost is None:
            last = pkts[WORKERS[i]]
    if lost is not None:
        retx = replace(pkts[WORKERS[LEAF_WORKERS[lost][0]]], flags=int(Flag.RETX))
        c.send(WORKERS[LEAF_WORKERS[lost][0]], retx)
        last = partial(retx, (0,), flags=int(Flag.RETX))
    assert last is not None
    total = (10, -1111)
    for w in WORKERS:
        c.expect(w, result_copy(w, last, total))
    result = run_network(
        parse_network(c.text(), "order.mstf"), {sw: SoftswitchTarget() for sw in c.setups}
    )
    assert result.ok, "\n".join(result.failures)


def test_command_runs_the_network_cases(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-k", "tree2_"]) == 0
    out = capsys.readouterr().out
    assert "tree2_lost_partial     softswitch:fast      pass       8      6" in out
    assert "tree2_lost_partial     softswitch:reference pass       8      6" in out
    assert "8 passed, 0 failed" in out


@pytest.mark.bmv2
@needs_bmv2
def test_a_broken_network_case_fails_on_bmv2(bmv2_json: Path) -> None:
    result = Bmv2NetworkRunner(bmv2_json).run(parse_network(_broken_tree_sum(), "broken.mstf"))
    assert [f.split("\n")[0] for f in result.failures] == BROKEN_TREE_SUM_FAILURES


def test_packet_socket_says_when_libnanomsg_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ctypes

    from inaemu.conformance import nanomsg

    def no_library(name: str, use_errno: bool = False) -> ctypes.CDLL:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(nanomsg, "_lib", None)
    monkeypatch.setattr(ctypes, "CDLL", no_library)
    with pytest.raises(NanomsgError, match=r"cannot load libnanomsg .*Debian: libnanomsg5"):
        nanomsg.library()
