"""The embedded network's parts that need no switch running: a softswitch's command line and
READY line (`softswitch/command.py`: one builder and one parser for every starter), read back
by the switch's own argument parser and from its own printer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from inaemu.softswitch import command as softswitch
from inaemu.softswitch.__main__ import build_parser

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
