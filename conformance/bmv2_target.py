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


def bmv2_available() -> str | None:
    """None if bmv2 can run the cases here, else the reason it cannot."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    return f"not on PATH: {', '.join(missing)}" if missing else None


def compile_p4(build_dir: Path | None = None) -> Path:
    """Compile p4/ina.p4 with p4c-bm2-ss (cached by source hash); return the bmv2 JSON."""
    sources = [P4_DIR / "ina.p4", *sorted((P4_DIR / "include").glob("*.p4"))]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
    build = build_dir or P4_DIR / "build"
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Bmv2Runner:
    def __init__(self, json_path: Path, p4info: P4Info | None = None) -> None:
        self.json_path = json_path
        self.p4info = p4info or load_p4info()

    def _cli_commands(self, case: StfCase) -> list[str]:
        cmds: list[str] = []
        for cmd in case.commands:
            if isinstance(cmd, AddEntry):
                table = self.p4info.table(cmd.table)
                action = self.p4info.action(cmd.action)
                keys = [
                    f"{value}/{plen}" if kind == "LPM" else str(value)
                    for (value, plen), (_, _, kind) in zip(
                        match_values(cmd, table.keys), table.keys, strict=True
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

    def run(self, case: StfCase, timeout: float = 60.0) -> CaseResult:
        from scapy.packet import Raw
        from scapy.utils import PcapWriter, rdpcap

        ports = set()
        for cmd in case.commands:
            if isinstance(cmd, Packet | Expect):
                ports.add(cmd.port)
            elif isinstance(cmd, McNodeCreate):
                ports.update(cmd.ports)
        ports.add(0)
        with tempfile.TemporaryDirectory(prefix="inaemu-bmv2-") as tmp:
            d = Path(tmp)
            writers = {p: PcapWriter(str(d / f"pcap{p}_in.pcap"), sync=True) for p in ports}
            t0 = 1_000_000.0
            packets = [c for c in case.commands if isinstance(c, Packet)]
            for i, pkt in enumerate(packets):
                raw = Raw(pkt.data)
                raw.time = t0 + i * 0.001
                writers[pkt.port].write(raw)
            for w in writers.values():
                w.close()
            thrift = _free_port()
            argv = [
                "simple_switch",
                "--use-files",
                str(START_WAIT_S),
                "--thrift-port",
                str(thrift),
                "--log-file",
                str(d / "bmv2"),
                "--log-flush",
            ]
            for p in sorted(ports):
                argv += ["-i", f"{p}@{d / f'pcap{p}'}"]
            argv.append(str(self.json_path))
            errors = d / "simple_switch.stderr"
            with errors.open("w") as err_file:  # a file: a pipe nobody drains could stall it
                proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err_file)
            try:
                self._wait_thrift(thrift, proc, errors)
                cli_in = "\n".join(self._cli_commands(case)) + "\n"
                cli = subprocess.run(
                    ["simple_switch_CLI", "--thrift-port", str(thrift)],
                    input=cli_in,
                    text=True,
                    check=True,
                    capture_output=True,
                    timeout=START_WAIT_S * 5,
                )
                # the CLI exits 0 even when a command fails; it says so on stdout
                bad = [ln for ln in cli.stdout.splitlines() if re.search(r"Error|Invalid", ln)]
                if bad:
                    raise RuntimeError(f"simple_switch_CLI refused the setup: {bad[:5]}")
                self._wait_output_settled(d, ports, len(packets), timeout)
                counters = self._read_counters(case, thrift)
            finally:
                proc.terminate()
                proc.wait(10)
            emitted: dict[int, list[bytes]] = {}
            for p in ports:
                path = d / f"pcap{p}_out.pcap"
                if path.exists() and path.stat().st_size > 24:
                    emitted[p] = [bytes(x) for x in rdpcap(str(path))]
        return compare(case, emitted, counters, len(packets))

    @staticmethod
    def _wait_thrift(port: int, proc: subprocess.Popen[bytes], errors: Path) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"simple_switch exited: {errors.read_text().strip()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.05)
        raise TimeoutError("simple_switch did not open its thrift port in 10 s")

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

    def _read_counters(self, case: StfCase, thrift: int) -> dict[tuple[str, int], tuple[int, int]]:
        checks = [c for c in case.commands if isinstance(c, CheckCounter)]
        if not checks:
            return {}
        names = {c.counter for c in checks}
        full = {n: self._counter_name(n) for n in names}
        cli_in = "\n".join(f"counter_read {full[c.counter]} {c.index}" for c in checks) + "\n"
        out = subprocess.run(
            ["simple_switch_CLI", "--thrift-port", str(thrift)],
            input=cli_in,
            text=True,
            check=True,
            capture_output=True,
            timeout=30,
        ).stdout
        values: dict[tuple[str, int], tuple[int, int]] = {}
        for name, index, packets, nbytes in re.findall(
            r"([\w.]+)\[(\d+)\]=\s*BmCounterValue\(packets=(\d+), bytes=(\d+)\)", out
        ):
            values[(name, int(index))] = (int(packets), int(nbytes))
        return {
            (c.counter, c.index): values.get((full[c.counter], c.index), (-1, -1)) for c in checks
        }

    def _counter_name(self, name: str) -> str:
        names: list[str] = [str(c.preamble.name) for c in self.p4info.message.counters]
        found = [n for n in names if n == name or n.endswith("." + name)]
        if len(found) != 1:
            raise KeyError(f"no single counter named {name!r}")
        return found[0]
