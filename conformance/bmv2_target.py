"""bmv2 (simple_switch) as a conformance target, the way p4c's own bmv2 STF runner drives it.

The case's packets are written to one pcap file per port with strictly increasing timestamps
(bmv2's pcap reader merges the files in timestamp order, so the order across ports is the
case's order); `simple_switch --use-files` waits a few seconds before reading them, and in
that time the tables and multicast groups are written with `simple_switch_CLI`. When the
output stops growing, counters are read with the CLI, the switch is stopped and the output
pcaps are compared port by port, as for the softswitch.

Needs `p4c-bm2-ss`, `simple_switch` and `simple_switch_CLI` on PATH; `bmv2_available()` says
why not otherwise.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from inaemu.conformance.pcap import read_pcap, write_pcap
from inaemu.conformance.stf import (
    AddEntry,
    CaseResult,
    CheckCounter,
    Expect,
    McGroupCreate,
    McNodeAssociate,
    McNodeCreate,
    Packet,
    SetDefault,
    StfCase,
    action_args,
    compare,
    match_values,
)
from inaemu.p4.constants import P4_DIR
from inaemu.p4.info import P4Info, load_p4info

TOOLS = ("p4c-bm2-ss", "simple_switch", "simple_switch_CLI")
START_WAIT_S = 8  # --use-files: seconds before bmv2 starts reading the input pcaps
# Egress queue depth in packets. bmv2's default, 64, silently drops a burst that a case
# replicates onto one port; a switch's buffer holds far more.
QUEUE_DEPTH = 100_000


def bmv2_available() -> str | None:
    """None if bmv2 can run the cases here, else the reason it cannot."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    return f"not on PATH: {', '.join(missing)}" if missing else None


def default_build_dir() -> Path:
    """p4/build in a source tree; a per-user cache when the package is installed read-only."""
    if os.access(P4_DIR, os.W_OK):
        return P4_DIR / "build"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "inaemu" / "p4-build"


def compile_p4(build_dir: Path | None = None) -> Path:
    """Compile p4/ina.p4 with p4c-bm2-ss (cached by source hash); return the bmv2 JSON."""
    sources = [P4_DIR / "ina.p4", *sorted((P4_DIR / "include").glob("*.p4"))]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
    build = build_dir or default_build_dir()
    build.mkdir(parents=True, exist_ok=True)
    out = build / f"ina-{digest}.json"
    if not out.exists():
        subprocess.run(
            [
                "p4c-bm2-ss",
                "--p4v",
                "16",
                "--p4runtime-files",
                str(build / "ina.p4info.txt"),
                "-o",
                str(out),
                str(P4_DIR / "ina.p4"),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    return out


# simple_switch_CLI's `counter_read` answers, in the two formats bmv2 has printed:
#   InaIngress.agg.ina_events[0]= BmCounterValue(packets=1, bytes=100)   (bmv2 <= 1.14)
#   InaIngress.agg.ina_events[0]= (100 bytes, 1 packets)                  (bmv2 1.15)
_COUNTER_READ = re.compile(
    r"([\w.]+)\[(\d+)\]=\s*(?:"
    r"BmCounterValue\(packets=(?P<p1>\d+),\s*bytes=(?P<b1>\d+)\)"
    r"|\((?P<b2>\d+) bytes,\s*(?P<p2>\d+) packets\))"
)


def parse_counter_reads(out: str) -> dict[tuple[str, int], tuple[int, int]]:
    """{(counter, index): (packets, bytes)} from simple_switch_CLI counter_read output."""
    values: dict[tuple[str, int], tuple[int, int]] = {}
    for m in _COUNTER_READ.finditer(out):
        packets = m.group("p1") or m.group("p2")
        nbytes = m.group("b1") or m.group("b2")
        values[(m.group(1), int(m.group(2)))] = (int(packets), int(nbytes))
    return values


def run_cli(thrift: int, commands: list[str], *, timeout: float) -> str:
    """What simple_switch_CLI prints for `commands`, one per line."""
    return subprocess.run(
        ["simple_switch_CLI", "--thrift-port", str(thrift)],
        input="\n".join(commands) + "\n",
        text=True,
        check=True,
        capture_output=True,
        timeout=timeout,
    ).stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_thrift(port: int, proc: subprocess.Popen[bytes], errors: Path) -> None:
    """Until simple_switch `proc` listens on its thrift `port` (10 s at most); `errors` is the
    file its stderr goes to, quoted if it exits."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"simple_switch exited: {errors.read_text().strip()}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError("simple_switch did not open its thrift port in 10 s")


class Bmv2Runner:
    def __init__(self, json_path: Path, p4info: P4Info | None = None) -> None:
        self.json_path = json_path
        self.p4info = p4info or load_p4info()

    def cli_commands(self, case: StfCase) -> list[str]:
        cmds: list[str] = []
        for cmd in case.commands:
            if isinstance(cmd, AddEntry):
                table = self.p4info.table(cmd.table)
                action = self.p4info.action(cmd.action)
                keys = [
                    f"{value}/{plen}" if f.kind == "LPM" else str(value)
                    for (value, plen), f in zip(
                        match_values(cmd, table.fields), table.fields, strict=True
                    )
                ]
                args = [str(v) for v in action_args(action.name, cmd.params, action.params)]
                cmds.append(
                    f"table_add {table.name} {action.name} {' '.join(keys)} => {' '.join(args)}"
                )
            elif isinstance(cmd, SetDefault):
                table = self.p4info.table(cmd.table)
                action = self.p4info.action(cmd.action)
                defaults = " ".join(map(str, action_args(action.name, cmd.params, action.params)))
                cmds.append(f"table_set_default {table.name} {action.name} {defaults}")
            elif isinstance(cmd, McGroupCreate):
                cmds.append(f"mc_mgrp_create {cmd.mgid}")
            elif isinstance(cmd, McNodeCreate):
                cmds.append(f"mc_node_create {cmd.rid} {' '.join(map(str, cmd.ports))}")
            elif isinstance(cmd, McNodeAssociate):
                cmds.append(f"mc_node_associate {cmd.mgid} {cmd.handle}")
        return cmds

    def set_up(self, case: StfCase, thrift: int) -> None:
        """Deep egress queues and the case's table and multicast commands, with the CLI."""
        setup = [f"set_queue_depth {QUEUE_DEPTH}", *self.cli_commands(case)]
        said = run_cli(thrift, setup, timeout=START_WAIT_S * 5)
        # the CLI exits 0 even when a command fails; it says so on stdout
        bad = [ln for ln in said.splitlines() if re.search(r"Error|Invalid", ln)]
        if bad:
            raise RuntimeError(f"simple_switch_CLI refused the setup: {bad[:5]}")

    def run(self, case: StfCase, timeout: float = 60.0) -> CaseResult:
        ports = set()
        for cmd in case.commands:
            if isinstance(cmd, Packet | Expect):
                ports.add(cmd.port)
            elif isinstance(cmd, McNodeCreate):
                ports.update(cmd.ports)
        ports.add(0)
        with tempfile.TemporaryDirectory(prefix="inaemu-bmv2-") as tmp:
            d = Path(tmp)
            packets = [c for c in case.commands if isinstance(c, Packet)]
            # strictly increasing timestamps, 1 ms apart: bmv2 merges the input files by time
            for p in ports:
                write_pcap(
                    d / f"pcap{p}_in.pcap",
                    [(1e6 + i * 1e-3, pkt.data) for i, pkt in enumerate(packets) if pkt.port == p],
                )
            thrift = free_port()
            argv = [
                "simple_switch",
                "--use-files",
                str(START_WAIT_S),
                "--thrift-port",
                str(thrift),
                "--log-file",
                str(d / "bmv2"),
                "--log-flush",
                # its own nanomsg socket: the default, ipc:///tmp/bmv2-0-notifications.ipc, is
                # shared by every simple_switch on the machine, so a second run failed to start
                "--notifications-addr",
                f"ipc://{d / 'notifications.ipc'}",
            ]
            for p in sorted(ports):
                argv += ["-i", f"{p}@{d / f'pcap{p}'}"]
            argv.append(str(self.json_path))
            errors = d / "simple_switch.stderr"
            with errors.open("w") as err_file:  # a file: a pipe nobody drains could stall it
                proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err_file)
            try:
                wait_thrift(thrift, proc, errors)
                self.set_up(case, thrift)
                self._wait_output_settled(d, ports, len(packets), timeout)
                counters = self.read_counters(
                    [c for c in case.commands if isinstance(c, CheckCounter)], thrift
                )
            finally:
                proc.terminate()
                proc.wait(10)
            emitted: dict[int, list[bytes]] = {}
            for p in ports:
                path = d / f"pcap{p}_out.pcap"
                if path.exists() and path.stat().st_size > 24:
                    emitted[p] = read_pcap(path)
        return compare(case, emitted, counters, len(packets))

    @staticmethod
    def _wait_output_settled(d: Path, ports: set[int], n_in: int, timeout: float) -> None:
        deadline = time.monotonic() + START_WAIT_S + timeout
        time.sleep(START_WAIT_S + 0.5 + 0.002 * n_in)
        last = -1
        while time.monotonic() < deadline:
            size = sum(
                os.path.getsize(d / f"pcap{p}_out.pcap")
                for p in ports
                if (d / f"pcap{p}_out.pcap").exists()
            )
            if size == last:
                return
            last = size
            time.sleep(1.0)

    def read_counters(
        self, checks: list[CheckCounter], thrift: int
    ) -> dict[tuple[str, int], tuple[int, int]]:
        """{(counter, index): (packets, bytes)} for the counters `checks` name, read with the
        CLI from the simple_switch on `thrift`."""
        if not checks:
            return {}
        names = {c.counter for c in checks}
        full = {n: self._counter_name(n) for n in names}
        reads = [f"counter_read {full[c.counter]} {c.index}" for c in checks]
        out = run_cli(thrift, reads, timeout=30)
        values = parse_counter_reads(out)
        return {
            (c.counter, c.index): values.get((full[c.counter], c.index), (-1, -1)) for c in checks
        }

    def _counter_name(self, name: str) -> str:
        return self.p4info.counter(name).name
