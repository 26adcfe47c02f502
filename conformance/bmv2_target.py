"""bmv2 (simple_switch) as a conformance target.

The switch runs with `--packet-in` (a nanomsg socket, nanomsg.py) instead of interfaces or
pcap files, so nothing it does depends on a fixed wait. Each step waits for the switch to be
ready for the next, with a bound and a clear error: its thrift port answers
(`START_TIMEOUT_S`); the tables and multicast groups are written with `simple_switch_CLI`;
then the case's packets go in, in the case's order, and the runner waits until the switch
has counted every one of them in `port_rx` (read with the CLI) and every port has sent as
many frames as the case expects (`timeout`), then for `QUIET_S` without a frame, to catch
any frame too many. Counters are read with the CLI, the switch is stopped and the frames are
compared port by port, as for the softswitch.

Needs `p4c-bm2-ss`, `simple_switch` and `simple_switch_CLI`, found where every P4 tool is
(`inaemu.p4.tools`: $INAEMU_P4_PREFIX/bin, /opt/p4/bin, PATH); `bmv2_available()` says where
it looked otherwise.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from inaemu.conformance.nanomsg import PacketSocket, wait_readable
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
from inaemu.p4.info import P4Info, load_p4info
from inaemu.p4.tools import P4C, SIMPLE_SWITCH, SIMPLE_SWITCH_CLI, missing_tools, require_tool

TOOLS = (P4C, SIMPLE_SWITCH, SIMPLE_SWITCH_CLI)
START_TIMEOUT_S = 30.0  # simple_switch opens its thrift port within this, even on a busy machine
CLI_TIMEOUT_S = 60.0  # one simple_switch_CLI run (the setup of 600 multicast nodes included)
QUIET_S = 0.25  # after the expected frames: this long without one, and no frame is missing
PORT_RX = "InaIngress.counters.port_rx"
# Egress queue depth in packets. bmv2's default, 64, silently drops a burst that a case
# replicates onto one port; a switch's buffer holds far more.
QUEUE_DEPTH = 100_000


def bmv2_available() -> str | None:
    """None if bmv2 can run the cases here, else the reason it cannot (the tools missing,
    where they were looked for, how to install them)."""
    return missing_tools(TOOLS)


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
        [require_tool(SIMPLE_SWITCH_CLI), "--thrift-port", str(thrift)],
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


def listener_pid_owns(port: int, pid: int) -> bool:
    """Whether process `pid` holds the socket listening on 127.0.0.1/0.0.0.0 TCP `port`
    (Linux: the socket's inode in /proc/net/tcp among the process's descriptors)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if (
                len(fields) > 9
                and fields[3] == "0A"
                and int(fields[1].rsplit(":", 1)[1], 16) == port
            ):
                inodes.add(fields[9])
    if not inodes:
        return False
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


class ThriftPortTaken(RuntimeError):
    """Another process answered on the thrift port picked for a new simple_switch."""


def wait_thrift(port: int, proc: subprocess.Popen[bytes], errors: Path) -> None:
    """Until simple_switch `proc` listens on its thrift `port` (`START_TIMEOUT_S` at most);
    `errors` is the file its stderr goes to, quoted if it exits. A port picked free can be
    taken by another process before simple_switch binds it (others start switches too): an
    answer from a socket that is not `proc`'s, or `proc` exiting because the address is in
    use, raises `ThriftPortTaken`, never a switch set up through somebody else's port."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            said = errors.read_text().strip()
            with socket.socket() as s:
                answered = s.connect_ex(("127.0.0.1", port)) == 0
            if "in use" in said.lower() or answered:
                raise ThriftPortTaken(f"thrift port {port}: {said}")
            raise RuntimeError(f"simple_switch exited: {said}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                if listener_pid_owns(port, proc.pid):
                    return
                if proc.poll() is None and time.monotonic() + 1 < deadline:
                    time.sleep(0.2)  # ours may still be binding: a second look decides
                    if listener_pid_owns(port, proc.pid):
                        return
                raise ThriftPortTaken(f"thrift port {port} answers for another process")
        time.sleep(0.05)
    raise TimeoutError(f"simple_switch did not open its thrift port in {START_TIMEOUT_S:.0f} s")


@dataclass
class Switch:
    """One simple_switch on a packet-in socket, its thrift port and its stderr file."""

    name: str
    proc: subprocess.Popen[bytes]
    thrift: int
    errors: Path
    packet_in: str  # the nanomsg address of its packet-in socket
    socket: PacketSocket | None = None

    def check_running(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"simple_switch for {self.name} exited: {self.errors.read_text().strip()}"
            )


START_ATTEMPTS = 3  # new thrift ports tried when another process takes the one picked


def start_switch(json_path: Path, d: Path, name: str, *, log_level: str = "warn") -> Switch:
    """simple_switch for `json_path` on a packet-in socket in `d`, with its own thrift port,
    log and notifications socket (the default one is shared by every simple_switch on the
    machine, so a second one failed to start), ready: its thrift port answers (another port
    is tried if somebody else took the one picked)."""
    for attempt in range(START_ATTEMPTS):
        sw = _launch_switch(json_path, d, name, log_level)
        try:
            wait_thrift(sw.thrift, sw.proc, sw.errors)
            return sw
        except ThriftPortTaken:
            stop_switches([sw])
            if attempt + 1 == START_ATTEMPTS:
                raise
        except BaseException:
            stop_switches([sw])
            raise
    raise AssertionError("unreachable")


def _launch_switch(json_path: Path, d: Path, name: str, log_level: str) -> Switch:
    thrift = free_port()
    packet_in = f"ipc://{d / name}.ipc"
    argv = [
        require_tool(SIMPLE_SWITCH),
        "--packet-in",
        packet_in,
        "--thrift-port",
        str(thrift),
        "--log-file",
        str(d / name),
        "--log-level",
        log_level,
        "--notifications-addr",
        f"ipc://{d / name}-notifications.ipc",
        str(json_path),
    ]
    errors = d / f"{name}.stderr"
    with errors.open("w") as err_file:  # a file: a pipe nobody drains could stall it
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err_file)
    return Switch(name, proc, thrift, errors, packet_in)


def stop_switches(switches: Collection[Switch], wait_s: float = 10.0) -> None:
    for sw in switches:
        if sw.socket is not None:
            sw.socket.close()
        sw.proc.terminate()
    for sw in switches:
        try:
            sw.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            sw.proc.kill()
            sw.proc.wait(wait_s)


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
        said = run_cli(thrift, setup, timeout=CLI_TIMEOUT_S)
        # the CLI exits 0 even when a command fails; it says so on stdout
        bad = [ln for ln in said.splitlines() if re.search(r"Error|Invalid", ln)]
        if bad:
            raise RuntimeError(f"simple_switch_CLI refused the setup: {bad[:5]}")

    def run(self, case: StfCase, timeout: float = 60.0) -> CaseResult:
        packets = [c for c in case.commands if isinstance(c, Packet)]
        expected: Counter[int] = Counter(c.port for c in case.commands if isinstance(c, Expect))
        emitted: dict[int, list[bytes]] = {}
        with tempfile.TemporaryDirectory(prefix="inaemu-bmv2-") as tmp:
            sw = start_switch(self.json_path, Path(tmp), "switch")
            try:
                self.set_up(case, sw.thrift)
                sock = sw.socket = PacketSocket(sw.packet_in)
                deadline = time.monotonic() + timeout
                for pkt in packets:
                    sock.send(pkt.port, pkt.data)
                    _receive(sock, emitted)  # a burst out must not fill the socket meanwhile
                self._wait_received(sw, {p.port for p in packets}, len(packets), emitted, deadline)
                _wait_sent(sw, expected, emitted, deadline)
                counters = self.read_counters(
                    [c for c in case.commands if isinstance(c, CheckCounter)], sw.thrift
                )
            finally:
                stop_switches([sw])
        return compare(case, emitted, counters, len(packets))

    def _wait_received(
        self,
        sw: Switch,
        ports: set[int],
        n: int,
        emitted: dict[int, list[bytes]],
        deadline: float,
    ) -> None:
        """Until the switch has counted `n` packets in `port_rx` over `ports` (so its ingress
        has taken every packet of the case), receiving what it sends meanwhile."""
        reads = [f"counter_read {self._counter_name(PORT_RX)} {p}" for p in sorted(ports)]
        while True:
            said = run_cli(sw.thrift, reads, timeout=CLI_TIMEOUT_S)
            counted = sum(packets for packets, _ in parse_counter_reads(said).values())
            if counted >= n:
                return
            sw.check_running()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"simple_switch took only {counted} of the case's {n} packets in time"
                )
            _receive(sw.socket, emitted, wait_s=0.1)

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


def _receive(sock: PacketSocket | None, emitted: dict[int, list[bytes]], wait_s: float = 0) -> int:
    """Every frame waiting on `sock` (after up to `wait_s` for the first) into `emitted`, by
    port; how many."""
    got = 0
    if sock is not None and wait_readable([sock], wait_s):
        while (frame := sock.receive()) is not None:
            emitted.setdefault(frame[0], []).append(frame[1])
            got += 1
    return got


def _wait_sent(
    sw: Switch, expected: Counter[int], emitted: dict[int, list[bytes]], deadline: float
) -> None:
    """Until every port has sent the frames `expected` of it (or `deadline`: compare then says
    which never came), then until `QUIET_S` passes without a frame."""
    while time.monotonic() < deadline and any(
        len(emitted.get(p, [])) < n for p, n in expected.items()
    ):
        _receive(sw.socket, emitted, wait_s=min(0.1, max(0.0, deadline - time.monotonic())))
        sw.check_running()
    while _receive(sw.socket, emitted, wait_s=QUIET_S) and time.monotonic() < deadline:
        pass
