"""bmv2's simple_switch_grpc for inaemu: its command line, in this one place, and `inaemu
bmv2`, which starts one per switch of a topology (or prints their command lines).

    argv = simple_switch_grpc_argv(
        device_id=1, grpc="127.0.0.1:9559", thrift_port=9090,
        notifications=notifications_address(run_dir, "s1"), ports={1: "s1-eth1"},
    )

A switch starts with no program (`--no-p4`): `inaemu pipeline push` installs ina.p4, with
bmv2's JSON (the topology's "program", or `--device-config`) as the device config. Each
switch has its own thrift port and its own notifications socket (bmv2's default,
ipc:///tmp/bmv2-<device id>-notifications.ipc, would be one socket for the switches of two
topologies with the same device ids), and its P4Runtime address and device id from the
topology. Mininet's `Bmv2Node` and the tests' `simple_switch_grpc` build their command lines
here too.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from inaemu.p4.tools import SIMPLE_SWITCH_GRPC, find_tool
from inaemu.topology.model import Topology, TopologyError

__all__ = [
    "BINARY",
    "IFACE_FORMAT",
    "THRIFT_BASE",
    "Bmv2Error",
    "Bmv2Switches",
    "SwitchCommand",
    "free_ports",
    "log_tail",
    "notifications_address",
    "shell_lines",
    "simple_switch_grpc_argv",
    "switch_ports",
    "topology_commands",
]

BINARY = SIMPLE_SWITCH_GRPC
IFACE_FORMAT = "{switch}-eth{port}"  # Mininet's names for a switch's interfaces
THRIFT_BASE = 9090  # bmv2's default thrift port; the i-th switch (from 0) gets THRIFT_BASE + i
START_TIMEOUT = 30.0
STOP_TIMEOUT = 5.0


class Bmv2Error(RuntimeError):
    """simple_switch_grpc cannot be started as asked; the message says why and what to do."""


def notifications_address(run_dir: Path, name: str) -> str:
    """The nanomsg address of switch `name`'s notifications socket, in `run_dir`."""
    path = run_dir / f"{name}-notifications.ipc"
    if len(str(path)) > 100:  # an AF_UNIX path holds at most 107 bytes
        path = Path("/tmp") / f"inaemu-{os.getpid()}-{name}-notifications.ipc"
    return f"ipc://{path}"


def simple_switch_grpc_argv(
    *,
    device_id: int,
    grpc: str,
    thrift_port: int,
    notifications: str,
    ports: Mapping[int, str],
    log_file: Path | None = None,
    log_level: str | None = None,
    log_flush: bool = True,
    pcap_dir: Path | None = None,
    binary: str | None = None,
) -> list[str]:
    """simple_switch_grpc with no program, port p on interface `ports[p]`, P4Runtime on `grpc`
    (host:port) as device `device_id`. `log_file`: bmv2's log, at `log_level` (trace, debug,
    info, warn, error, off; None: bmv2's own, with which a bmv2 built with logging logs every
    packet), flushed per message with `log_flush`; `pcap_dir`: a capture of every port.
    `binary`: the program, by default simple_switch_grpc where `inaemu.p4.tools` finds it
    (its bare name if it is found nowhere)."""
    binary = binary or find_tool(BINARY) or BINARY
    argv = [binary, "--no-p4", "--device-id", str(device_id), "--thrift-port", str(thrift_port)]
    if log_file is not None:
        argv += ["--log-file", str(log_file)]
        argv += ["--log-level", log_level] if log_level else []
        argv += ["--log-flush"] if log_flush else []
    argv += ["--notifications-addr", notifications]
    if pcap_dir is not None:
        argv += ["--pcap", str(pcap_dir)]
    for port, ifname in sorted(ports.items()):
        argv += ["-i", f"{port}@{ifname}"]
    return [*argv, "--", "--grpc-server-addr", grpc]


# ---------------------------------------------------------------------- a topology's switches


@dataclass(frozen=True)
class SwitchCommand:
    """One switch of a topology as a simple_switch_grpc process."""

    switch: str
    grpc: str
    device_id: int
    thrift_port: int
    notifications: str
    log: Path  # its standard output and error when `inaemu bmv2` runs it
    argv: list[str]


def switch_ports(topo: Topology, switch: str) -> list[int]:
    """The ports of `switch` that the topology's links use."""
    ports = {lk.a_port for lk in topo.links if lk.a == switch and lk.a_port is not None}
    ports |= {lk.b_port for lk in topo.links if lk.b == switch and lk.b_port is not None}
    return sorted(ports)


def topology_commands(
    topo: Topology,
    run_dir: Path,
    *,
    iface_format: str = IFACE_FORMAT,
    ifaces: Mapping[tuple[str, int], str] | None = None,
    thrift_ports: Mapping[str, int] | None = None,
    log_level: str = "warn",
) -> list[SwitchCommand]:
    """A simple_switch_grpc command line per switch of `topo`, in the topology's order.

    Port p of switch s is interface `ifaces[(s, p)]`, else `iface_format` with {switch} and
    {port} filled in. Logs and notifications sockets go to `run_dir`. Thrift ports are
    `thrift_ports[s]`, else THRIFT_BASE + the switch's position.
    """
    commands = []
    seen: dict[str, str] = {}
    for i, (name, sw) in enumerate(topo.switches.items()):
        if not sw.grpc:
            raise TopologyError(
                f'switch {name!r} has no "grpc" address; set it with '
                "`inaemu topo ... --grpc HOST:PORT`"
            )
        if sw.grpc in seen:
            raise TopologyError(
                f"switches {seen[sw.grpc]!r} and {name!r} have the same P4Runtime address "
                f"{sw.grpc}; a simple_switch_grpc serves one device: give each switch its own "
                "(`inaemu topo ... --grpc HOST:PORT`)"
            )
        seen[sw.grpc] = name
        ports = {
            port: (ifaces or {}).get((name, port)) or iface_format.format(switch=name, port=port)
            for port in switch_ports(topo, name)
        }
        thrift = (thrift_ports or {}).get(name, THRIFT_BASE + i)
        notifications = notifications_address(run_dir, name)
        argv = simple_switch_grpc_argv(
            device_id=sw.device_id,
            grpc=sw.grpc,
            thrift_port=thrift,
            notifications=notifications,
            ports=ports,
            log_file=run_dir / f"{name}-bmv2",
            log_level=log_level,
        )
        log = run_dir / f"{name}.log"
        commands.append(
            SwitchCommand(name, sw.grpc, sw.device_id, thrift, notifications, log, argv)
        )
    return commands


def shell_lines(commands: list[SwitchCommand], run_dir: Path) -> list[str]:
    """The command lines as a shell script (what `inaemu bmv2 --print` prints)."""
    lines = [f"mkdir -p {shlex.quote(str(run_dir))}"]
    for c in commands:
        lines.append(
            f"# {c.switch}: device {c.device_id}, P4Runtime {c.grpc}, thrift {c.thrift_port}"
        )
        lines.append(shlex.join(c.argv))
    return lines


def free_ports(n: int) -> list[int]:
    """`n` distinct TCP ports of 127.0.0.1 that are free now (the kernel's pick)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def _tcp_address(address: str) -> tuple[str, int] | None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or "/" in address:
        return None
    return host.strip("[]"), int(port)


def _in_use(address: tuple[str, int]) -> bool:
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind(address)
        except OSError:
            return True
    return False


def _listening(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=0.5):
            return True
    except OSError:
        return False


def log_tail(path: Path, lines: int = 10) -> str:
    """The last `lines` lines of a log file (empty if it cannot be read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


class Bmv2Switches:
    """The processes of `commands`, started together, each in a session of its own, and
    stopped together (with their process groups) by `stop()`, whatever happened."""

    def __init__(self, commands: list[SwitchCommand]) -> None:
        self.commands = commands
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []

    def check_free(self) -> None:
        """Bmv2Error if a gRPC or thrift port is taken: a switch would not serve on it, and a
        controller would reach whatever holds it."""
        for c in self.commands:
            address = _tcp_address(c.grpc)
            if address is None:
                raise Bmv2Error(f"{c.switch}: P4Runtime address {c.grpc} is not HOST:PORT")
            taken = [f"{c.grpc} (P4Runtime)"] if _in_use(address) else []
            if _in_use(("127.0.0.1", c.thrift_port)):
                taken.append(f"thrift port {c.thrift_port}")
            if taken:
                raise Bmv2Error(
                    f"{c.switch}: {' and '.join(taken)} in use (another switch?); give the "
                    "topology other addresses (`inaemu topo ... --grpc HOST:PORT`) or "
                    "other thrift ports (--thrift-port)"
                )

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start every switch and wait until each serves P4Runtime; Bmv2Error (after stopping
        them all) if one exits or is not up within `timeout` seconds."""
        self.check_free()
        try:
            for c in self.commands:
                c.log.parent.mkdir(parents=True, exist_ok=True)
                out = c.log.open("wb")
                self._logs.append(out)
                self.procs[c.switch] = subprocess.Popen(
                    c.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            deadline = time.monotonic() + timeout
            for c in self.commands:
                address = _tcp_address(c.grpc)
                assert address is not None  # check_free
                while not _listening(address):
                    if self.procs[c.switch].poll() is not None:
                        raise Bmv2Error(
                            f"{c.switch}: simple_switch_grpc exited; {c.log}:\n{log_tail(c.log)}"
                        )
                    if time.monotonic() > deadline:
                        raise Bmv2Error(
                            f"{c.switch}: simple_switch_grpc did not serve P4Runtime on "
                            f"{c.grpc} within {timeout:g} s; {c.log}:\n{log_tail(c.log)}"
                        )
                    time.sleep(0.1)
        except BaseException:
            self.stop()
            raise

    def exited(self) -> tuple[SwitchCommand, int] | None:
        """A switch whose process has ended, and its exit status; None if all run."""
        for c in self.commands:
            proc = self.procs.get(c.switch)
            if proc is not None and proc.poll() is not None:
                return c, proc.returncode
        return None

    def stop(self) -> None:
        for proc in self.procs.values():
            _kill_group(proc)
        for out in self._logs:
            out.close()
        self._logs.clear()
        for c in self.commands:
            path = Path(c.notifications.removeprefix("ipc://"))
            if path.is_socket():
                path.unlink()

    def __enter__(self) -> Bmv2Switches:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop `proc` and its process group: SIGTERM, then SIGKILL."""
    if proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(STOP_TIMEOUT)
            return
        except subprocess.TimeoutExpired:
            continue
