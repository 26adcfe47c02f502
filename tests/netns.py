"""A star network in Linux network namespaces, made by a test and removed by it (root).

    with StarNet(topology) as net:            # one namespace per host, one for the switch
        net.switch(["python", "-m", "inaemu.softswitch", ...])   # runs in the switch's
        net.host("h1", [...])                                      # ... and a host's namespace

Each host of the topology gets a namespace with one interface `eth0` (its address and MAC from
the topology), joined by a veth pair to `s1-eth<port>` in the switch's namespace, where the
switch (softswitch on AF_PACKET or simple_switch_grpc) and the controller's commands run.
IPv6 is off everywhere (no router solicitations or DAD noise on the switch's ports). Removing
a namespace removes its veths; `close()` removes every namespace this object made, and kills
every process it started and every process left in its namespaces (a switch started in a
session of its own by a process it started), even when the test failed.

`start_softswitch(net)` and `start_bmv2(net, tmp)` run a switch on the switch's ports and wait
until it serves P4Runtime (the end-to-end test and bench/bench_e2e.py use them).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from itertools import count
from pathlib import Path
from types import TracebackType

from inaemu.controller.bmv2 import THRIFT_BASE, notifications_address, simple_switch_grpc_argv
from inaemu.softswitch import command as softswitch
from inaemu.topology.model import Topology

_serial = count()
GRPC = "127.0.0.1:9559"  # inside the switch's own namespace, so never taken
START_TIMEOUT = 30.0


def namespaces_missing() -> str | None:
    """None if this process can make network namespaces, else why not."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "needs iproute2 (ip)"
    probe = f"inaemu-probe-{os.getpid()}"
    proc = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if proc.returncode != 0:
        return f"cannot create a network namespace here: {proc.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


class StarNet:
    """The hosts of a one-switch topology, each in its own namespace, on veths to the switch."""

    def __init__(self, topology: Topology) -> None:
        if len(topology.switches) != 1:
            raise ValueError("StarNet takes a one-switch topology")
        self.topology = topology
        (self.switch_name,) = topology.switches
        tag = f"{os.getpid()}-{next(_serial)}"
        self.switch_ns = f"inaemu-{tag}-{self.switch_name}"
        self.host_ns = {h: f"inaemu-{tag}-{h}" for h in topology.hosts}
        self.ports: dict[str, int] = {}
        for link in topology.links:
            if link.a in topology.hosts and link.b_port is not None:
                self.ports[link.a] = link.b_port
            elif link.b in topology.hosts and link.a_port is not None:
                self.ports[link.b] = link.a_port
        self._made: list[str] = []
        self._procs: list[subprocess.Popen[str]] = []

    def interface(self, port: int) -> str:
        """The switch-side interface of `port` (Mininet's naming)."""
        return f"{self.switch_name}-eth{port}"

    def __enter__(self) -> StarNet:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _add_ns(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._made.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        for key in ("all", "default"):
            sysctl = f"net.ipv6.conf.{key}.disable_ipv6=1"
            subprocess.run(
                ["ip", "netns", "exec", ns, "sysctl", "-q", "-w", sysctl], capture_output=True
            )

    def _build(self) -> None:
        self._add_ns(self.switch_ns)
        for name, host in self.topology.hosts.items():
            ns = self.host_ns[name]
            self._add_ns(ns)
            port = self.ports[name]
            sw_if = self.interface(port)
            _ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", sw_if,
                "netns", self.switch_ns)  # fmt: skip
            _ip("-n", ns, "link", "set", "eth0", "address", host.mac)
            _ip("-n", ns, "addr", "add", f"{host.ip}/{host.prefix_len}", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", self.switch_ns, "link", "set", sw_if, "up")

    def _exec(self, ns: str, argv: Sequence[str], **kwargs: object) -> subprocess.Popen[str]:
        proc: subprocess.Popen[str] = subprocess.Popen(
            ["ip", "netns", "exec", ns, *argv],
            text=True,
            start_new_session=True,
            **kwargs,  # type: ignore[call-overload]
        )
        self._procs.append(proc)
        return proc

    def switch(self, argv: Sequence[str], **kwargs: object) -> subprocess.Popen[str]:
        """Start `argv` in the switch's namespace."""
        return self._exec(self.switch_ns, argv, **kwargs)

    def host(self, name: str, argv: Sequence[str], **kwargs: object) -> subprocess.Popen[str]:
        """Start `argv` in host `name`'s namespace."""
        return self._exec(self.host_ns[name], argv, **kwargs)

    def run_in_switch(
        self, argv: Sequence[str], timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` to completion in the switch's namespace (the controller's commands)."""
        return subprocess.run(
            ["ip", "netns", "exec", self.switch_ns, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(10)
        self._procs.clear()
        for ns in reversed(self._made):
            # what those started in sessions of their own (`inaemu bmv2`'s switches) too
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in pids.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self._made.clear()


def start_softswitch(
    net: StarNet, grpc: str = GRPC, *, log: Path | None = None
) -> subprocess.Popen[str]:
    """The softswitch on AF_PACKET on every switch port of `net`, serving P4Runtime at `grpc`
    in the switch's namespace; returns once it printed READY. `log`: where its stderr goes
    (its port-drop reports, `runs.accounting.read_port_drops`); else a nameless file."""
    argv = softswitch.argv(grpc=grpc, ifaces={p: net.interface(p) for p in net.ports.values()})
    # stderr to a file: nobody reads a pipe while the switch runs, and its port-drop reports
    # must never block it
    with log.open("w+") if log is not None else tempfile.TemporaryFile("w+") as err:
        proc = net.switch(argv, stdout=subprocess.PIPE, stderr=err)
        assert proc.stdout is not None
        line = proc.stdout.readline()  # READY ... (or EOF if it failed)
        if softswitch.Ready.parse(line) is None:
            err.seek(0)
            raise RuntimeError(f"softswitch: {line}{err.read()}")
    return proc


def start_bmv2(
    net: StarNet, tmp: Path, grpc: str = GRPC, *, log_level: str | None = None
) -> subprocess.Popen[str]:
    """simple_switch_grpc (no program: `inaemu pipeline push` gives it one) on every switch
    port of `net`, its log in `tmp`; returns once it listens on `grpc`. `log_level`: bmv2's
    `-L` (default: bmv2's own, which logs every packet at trace level if it was built with
    logging)."""
    argv = simple_switch_grpc_argv(
        device_id=1,
        grpc=grpc,
        thrift_port=THRIFT_BASE,  # in the switch's own namespace
        notifications=notifications_address(tmp, "bmv2"),
        ports={port: net.interface(port) for port in net.ports.values()},
        log_file=tmp / "bmv2",
        log_level=log_level,
        log_flush=False,
    )
    with (tmp / "bmv2.stderr").open("w") as log:
        proc = net.switch(argv, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT
    sport = f"sport = :{grpc.rsplit(':', 1)[1]}"
    while net.run_in_switch(["ss", "-ltn", sport]).stdout.count("LISTEN") == 0:
        if proc.poll() is not None:
            raise RuntimeError(f"simple_switch_grpc: {(tmp / 'bmv2.stderr').read_text()}")
        if time.monotonic() > deadline:
            raise RuntimeError("simple_switch_grpc did not listen")
        time.sleep(0.2)
    return proc
