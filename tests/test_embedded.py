"""The embedded network's parts that need no switch running: a softswitch's command line and
READY line (`softswitch/command.py`: one builder and one parser for every starter), read back
by the switch's own argument parser and from its own printer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from inaemu.controller.stats import StatsReport, SwitchCounters
from inaemu.embedded.network import EmbeddedNetwork
from inaemu.runs.compare import LinkUse
from inaemu.softswitch import command as softswitch
from inaemu.softswitch.__main__ import build_parser
from inaemu.topology.builders import from_spec

ROOT = Path(__file__).resolve().parents[1]

names = st.text(st.sampled_from("abcxyz0123456789-_"), min_size=1, max_size=8)
paths = st.text(st.sampled_from("abc/ _-.x1"), min_size=1, max_size=30).map(lambda s: "/" + s)


@given(
    name=names,
    port=st.integers(0, 65535),
    device_id=st.integers(0, 2**64 - 1),
    ports=st.sets(st.integers(0, 510), max_size=6),
    dataplane=st.sampled_from(["dataplane=reference", "dataplane=fast warmup=cache:0.21s"]),
    wire_dir=st.none() | paths,
)
def test_the_ready_line_reads_back_as_it_was_printed(
    name: str, port: int, device_id: int, ports: set[int], dataplane: str, wire_dir: str | None
) -> None:
    grpc = f"127.0.0.1:{port}"
    ready = softswitch.Ready.make(
        name=name, grpc=grpc, device_id=device_id, ports=ports, dataplane=dataplane,
        wire_dir=wire_dir,
    )  # fmt: skip
    line = ready.line()
    assert line.startswith("READY name=") and "\n" not in line
    again = softswitch.Ready.parse(line + "\n")
    assert again == ready
    assert (again.name, again.grpc, again.wire_dir) == (name, grpc, wire_dir)
    assert softswitch.Ready.find(f"softswitch: loading\n{line}\nmore\n") == ready


def test_what_is_not_a_ready_line() -> None:
    for line in ("", "\n", "READYX name=s1", "softswitch: port 1 taken", "ready name=s1"):
        assert softswitch.Ready.parse(line) is None, line
    assert softswitch.Ready.find("no\nREADY line\nhere") is None


def test_the_command_line_is_one_the_switch_parses() -> None:
    argv = softswitch.argv(
        name="l2", grpc="127.0.0.1:0", device_id=7, wire_dir="/tmp/w x", seed=9,
        dataplane="reference", wires=[3, 1], links={5: "s1.2", 4: "s2.2"},
        ifaces={6: "l2-eth6"}, parent_pid=4242,
    )  # fmt: skip
    assert argv[:3] == [sys.executable, "-m", "inaemu.softswitch"]
    args = build_parser().parse_args(argv[3:])
    assert (args.name, args.grpc, args.device_id, args.seed) == ("l2", "127.0.0.1:0", 7, 9)
    assert (args.dataplane, args.wire_dir, args.parent_pid) == ("reference", "/tmp/w x", 4242)
    assert args.wires == [1, 3] and args.link == ["4=s2.2", "5=s1.2"]
    assert args.iface == ["6=l2-eth6"]
    defaults = build_parser().parse_args(softswitch.argv()[3:])
    assert defaults == build_parser().parse_args([])


def test_a_real_switch_says_ready_as_the_parser_reads_it(tmp_path: Path) -> None:
    wires = tmp_path / "wire dir"
    argv = softswitch.argv(grpc="127.0.0.1:0", wires=[1, 2], wire_dir=str(wires))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        ready = softswitch.Ready.parse(proc.stdout.readline())
        assert ready is not None and ready.name == "s1" and ready.wire_dir == str(wires)
        assert ready.fields["ports"] == "1,2" and ready.grpc.startswith("127.0.0.1:")
        assert int(ready.grpc.rpartition(":")[2]) > 0
    finally:
        proc.terminate()
        proc.wait(10)


def test_link_bytes_come_from_the_switches_port_counters() -> None:
    """A host link counts what its switch's port received (from the host) and sent (to it);
    a link between switches what each end's port sent; packets in are every port's rx."""
    topo = from_spec("leaf-spine:2x1x1")  # l1, l2 (hosts h1, h2 on port 1), spine s1
    net = EmbeddedNetwork(topo, ("h1", "h2"))
    up = {sw: port for port, (sw, _) in topo.adjacency()["s1"].items()}  # s1's port to l1, l2
    counters = {
        "l1": {("port_rx", 1): (10, 1000), ("port_tx", 1): (20, 2000), ("port_tx", 2): (30, 3000)},
        "l2": {("port_rx", 1): (1, 100), ("port_tx", 1): (2, 200), ("port_rx", 2): (5, 500)},
        "s1": {("port_tx", up["l1"]): (40, 4000), ("port_rx", up["l1"]): (30, 3000)},
    }
    stats = StatsReport(topo, {}, {sw: SwitchCounters(sw, c) for sw, c in counters.items()})
    uses, packets = net.link_counters(stats)
    by_ends = {(u.a, u.b): u for u in uses}
    h1 = by_ends[("h1", "l1:1")]
    assert (h1.a_to_b, h1.b_to_a, h1.a_to_b_packets, h1.b_to_a_packets) == (1000, 2000, 10, 20)
    assert (by_ends[("h2", "l2:1")].a_to_b, by_ends[("h2", "l2:1")].b_to_a) == (100, 200)
    (l1_s1,) = [u for u in uses if {u.a.split(":")[0], u.b.split(":")[0]} == {"l1", "s1"}]
    l1_sent, s1_sent = (
        (l1_s1.a_to_b, l1_s1.b_to_a) if l1_s1.a.startswith("l1") else (l1_s1.b_to_a, l1_s1.a_to_b)
    )
    assert (l1_sent, s1_sent) == (3000, 4000)
    assert packets == 10 + 1 + 5 + 30
    assert len(uses) == len(topo.links)


def test_one_table_for_every_network() -> None:
    """The demo's columns and Mininet's come from one renderer: a skipped algorithm says why
    in the last column, a checked one what each check found."""
    from inaemu.cli.compare import TABLE
    from inaemu.runs.compare import COLUMNS, TABLE_HEADER, Row, Verdict, make_row, render_table

    assert set(TABLE) <= set(COLUMNS) and set(TABLE_HEADER) <= set(COLUMNS)
    uses = [LinkUse("h1", "s1:1", "s1:1", 4000, 3000), LinkUse("h2", "s1:2", "s1:2", 2000, 3000)]
    row = make_row(
        "ring", 1000, "fixedpoint", "exact", seconds=0.5, uses=uses, bandwidths=[None, None],
        hosts=("h1", "h2"), verdict=Verdict(max_abs_error=1e-9), steps=2, packets=12,
        retransmissions=1,
    )  # fmt: skip
    row.within_bound = True
    skipped = Row.skip("hdrm", 1000, "fixedpoint", "hdrm does not run on a star topology")
    lines = render_table([row, skipped], TABLE)
    assert lines[0].split()[:3] == ["algorithm", "size", "steps"]
    assert lines[1].split()[:4] == ["ring", "1,000", "2", "0.500"]
    assert lines[1].endswith("bit-exact, within bound") and "h1 -> s1:1" in lines[1]
    assert lines[2].startswith("hdrm") and lines[2].endswith(
        "skipped: hdrm does not run on a star topology"
    )
    assert row.host_sent == {"h1": 4000, "h2": 2000} and row.busiest_bytes == 4000
    assert row.exact is True and row.clock == "wall" and not skipped.verified
    mininet = render_table([row], TABLE_HEADER)
    assert mininet[1].split()[:4] == ["ring", "1,000", "exact", "0.500"]
