"""Mininet nodes for in-network aggregation: switches that run ina.p4 and serve P4Runtime, and
hosts set up for INA workers. In the spirit of p4-utils' `P4Switch` / `P4RuntimeSwitch` and
`P4Host`, written for this project.

A switch node lives in the root namespace (Mininet's default for switches, as in p4-utils):
its interfaces `<prefix><switch>-eth<port>` are root-namespace veths (the prefix is its
network's: `scenario.py`; its captures and their logs are named without it), and its
P4Runtime server listens on its own 127.0.0.1 port, where the controller reaches it. It
starts with no program; `inaemu pipeline push` installs ina.p4.

- `SoftSwitchNode`: `python -m inaemu.softswitch` on AF_PACKET sockets on the node's
  interfaces (the P4Runtime port is picked by the softswitch itself and read from its READY
  line); with `pcap_dir`, one tcpdump per interface.
- `Bmv2Node`: bmv2's `simple_switch_grpc --no-p4` with its own gRPC and thrift ports, its
  notifications socket and log under the run's directories, and `--pcap` when asked.
- `ShapedLink`: Mininet's TCLink with both of htb's buckets a few milliseconds of the rate
  (`shaping.htb_burst`), so that a link carries its rate on a busy machine.
- `InaHost`: IPv6 off from the start (no router solicitations, DAD or MLD on the switch's
  ports), transmit offloads off (`offload`: TCP checksums and segments made by the kernel, so
  that host-to-host TCP crosses a user-space switch), then what docs/protocol.md section 8
  says a worker host needs: a permanent ARP entry and a route for its switch's aggregation
  address.

Each switch process is started in a session of its own (a Ctrl-C at the terminal reaches only
the runner, which stops it) and killed, with its whole process group, by `stop()`.

Importing this module imports Debian's Mininet (`debian.load()`); the runner makes sure it is
installed first.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any, ClassVar

from inaemu.controller.bmv2 import notifications_address, simple_switch_grpc_argv
from inaemu.mininet.debian import load
from inaemu.mininet.shaping import htb_commands
from inaemu.softswitch import command as softswitch
from inaemu.softswitch.fast.dataplanes import DEFAULT_DATAPLANE, warm_up

mn = load()
# Mininet's classes (untyped): bases of the nodes below
_Switch: Any = mn.node.Switch
_Host: Any = mn.node.Host
_TCIntf: Any = mn.link.TCIntf
_TCLink: Any = mn.link.TCLink

START_TIMEOUT = 30.0
STOP_TIMEOUT = 5.0
CAPTURE_BUFFER_KIB = 32 << 10
CAPTURE_DRAIN = 0.5  # seconds a capture gets to catch up before it is stopped


# every node whose shell was started, so that a cleanup finds also one whose construction
# was interrupted before Mininet listed it (Scenario.close terminates them and clears this)
CREATED: list[Any] = []


class SwitchStartError(RuntimeError):
    """A switch process did not come up; the message names it and quotes its log (the
    scenario raises it as a ScenarioError)."""


_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the kernel's pick), never one this process
    handed out before."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def kill_group(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM) -> None:
    """Stop `proc` and every process of its group (it leads one: start_new_session), politely
    first (`sig`), then with SIGKILL."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
        proc.wait(STOP_TIMEOUT)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(STOP_TIMEOUT)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


class InaSwitch(_Switch):  # type: ignore[misc]
    """A P4Runtime switch process on this node's interfaces, in the root namespace.

    params: `device_id` (P4Runtime device id), `log_dir` (where its log goes), `pcap_dir`
    (capture every interface there; None: no capture), `run_dir` (for sockets), `prefix`
    (of its interfaces' names: its network's)."""

    kind: ClassVar[str] = ""

    def __init__(
        self,
        name: str,
        *,
        device_id: int = 1,
        log_dir: Path,
        run_dir: Path,
        pcap_dir: Path | None = None,
        start_timeout: float = START_TIMEOUT,
        prefix: str = "",
        **params: Any,
    ) -> None:
        super().__init__(name, **params)
        self.prefix = prefix
        self.device_id = device_id
        self.log_dir = Path(log_dir)
        self.run_dir = Path(run_dir)
        self.pcap_dir = Path(pcap_dir) if pcap_dir is not None else None
        self.start_timeout = start_timeout
        self.grpc = ""  # 127.0.0.1:port once started
        self.proc: subprocess.Popen[bytes] | None = None
        self.helpers: list[subprocess.Popen[bytes]] = []  # tcpdumps
        self._logs: list[IO[bytes]] = []

    def startShell(self, mnopts: Any = None) -> None:
        CREATED.append(self)
        super().startShell(mnopts)

    # ------------------------------------------------------------------ interfaces

    def addIntf(self, intf: Any, port: int | None = None, **kwargs: Any) -> None:
        """Mininet's addIntf, then IPv6 off on the new interface (root namespace: only the
        switch's own interfaces are touched)."""
        super().addIntf(intf, port=port, **kwargs)
        if intf.name != "lo":
            self.cmd(f"echo 1 > /proc/sys/net/ipv6/conf/{intf.name}/disable_ipv6 2>/dev/null")

    def data_ports(self) -> dict[int, str]:
        """port -> interface name, without Mininet's control interface (lo, port 0)."""
        return {p: i.name for p, i in sorted(self.intfs.items()) if i.name != "lo"}

    def shown(self, ifname: str) -> str:
        """The name a user reads for one of this switch's interfaces: without the prefix."""
        return ifname.removeprefix(self.prefix)

    # ------------------------------------------------------------------ processes

    def _spawn(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        out = log.open("wb")
        self._logs.append(out)
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def command(self) -> list[str]:
        """The switch's command line (set `self.grpc` if it is chosen here)."""
        raise NotImplementedError

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    def log_tail(self, lines: int = 5) -> str:
        return " | ".join(_tail(self.log_path, lines).splitlines())

    def start(self, controllers: Any) -> None:
        """Launch the switch (Mininet calls this for every switch, then `batchStartup`, which
        waits for all of them at once)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.pcap_dir is not None:
            self.pcap_dir.mkdir(parents=True, exist_ok=True)
        self.proc = self._spawn(self.command(), self.log_path)

    def ready(self) -> bool:
        """True once the switch serves P4Runtime; SwitchStartError if it exited."""
        raise NotImplementedError

    def wait_ready(self, deadline: float) -> None:
        while not self.ready():
            if self.proc is None or self.proc.poll() is not None:
                raise SwitchStartError(
                    f"{self.kind} {self.name} exited while starting; its log "
                    f"{self.log_path}:\n{_tail(self.log_path)}"
                )
            if time.monotonic() > deadline:
                raise SwitchStartError(
                    f"{self.kind} {self.name} did not serve P4Runtime within "
                    f"{self.start_timeout:.0f} s; its log {self.log_path}:\n{_tail(self.log_path)}"
                )
            time.sleep(0.1)

    @classmethod
    def batchStartup(cls, switches: tuple[InaSwitch, ...]) -> tuple[InaSwitch, ...]:
        """Wait until every switch serves P4Runtime (they start in parallel)."""
        deadline = time.monotonic() + max((s.start_timeout for s in switches), default=0)
        for sw in switches:
            sw.wait_ready(deadline)
        return switches

    def connected(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.ready()

    def stop_processes(self) -> None:
        """Stop the switch and its captures (captures get SIGINT: tcpdump then flushes; first
        a moment to read what the kernel still holds for it)."""
        if any(h.poll() is None for h in self.helpers):
            time.sleep(CAPTURE_DRAIN)
        for helper in self.helpers:
            kill_group(helper, signal.SIGINT)
        self.helpers.clear()
        if self.proc is not None:
            kill_group(self.proc, signal.SIGTERM)
        for f in self._logs:
            f.close()
        self._logs.clear()

    def stop(self, deleteIntfs: bool = True) -> None:
        self.stop_processes()
        super().stop(deleteIntfs)

    def terminate(self) -> None:
        self.stop_processes()
        super().terminate()


class SoftSwitchNode(InaSwitch):
    """inaemu's softswitch (`python -m inaemu.softswitch`) on AF_PACKET on this node's ports;
    P4Runtime on a port of 127.0.0.1 the softswitch picks (read from its READY line).

    params: `dataplane` (the softswitch's --dataplane: fast, the compiled one, or reference,
    the Python pipeline; default fast)."""

    kind = "softswitch"

    def __init__(self, name: str, *, dataplane: str = DEFAULT_DATAPLANE, **params: Any) -> None:
        super().__init__(name, **params)
        self.dataplane = dataplane

    def command(self) -> list[str]:
        return softswitch.argv(
            name=self.name,
            grpc="127.0.0.1:0",
            device_id=self.device_id,
            seed=self.device_id,  # loss injection: each switch its own draws
            dataplane=self.dataplane,
            ifaces=self.data_ports(),
        )

    def start(self, controllers: Any) -> None:
        # Compiled here once if numba's cache lacks it (a fresh checkout): the switches then
        # load it, rather than all compiling at once and missing START_TIMEOUT.
        warm_up(self.dataplane)
        super().start(controllers)
        if self.pcap_dir is not None:
            for ifname in self.data_ports().values():
                self.helpers.append(self._tcpdump(ifname))

    def _tcpdump(self, ifname: str) -> subprocess.Popen[bytes]:
        assert self.pcap_dir is not None
        # -Z root: write the file as root (tcpdump otherwise drops to its own user, which
        # may not write the run directory); -B: a 32 MiB kernel buffer, so that a busy CPU
        # does not make the kernel drop frames before tcpdump reads them; immediate mode:
        # each frame is handed to tcpdump at once, not in blocks that it would only get
        # after a timeout (a stop would lose the last block). It prints its counts when it
        # stops (SIGINT), after writing out what it has.
        argv = ["tcpdump", "-i", ifname, "-n", "-Z", "root", "-B", str(CAPTURE_BUFFER_KIB)]
        argv += ["--immediate-mode"]
        argv += ["-w", str(self.pcap_dir / f"{self.shown(ifname)}.pcap")]
        return self._spawn(argv, self._tcpdump_log(ifname))

    def _tcpdump_log(self, ifname: str) -> Path:
        return self.log_dir / f"tcpdump-{self.shown(ifname)}.log"

    def ready(self) -> bool:
        if not self.grpc:
            ready = softswitch.Ready.find(self.log_path.read_text(errors="replace"))
            if ready is None:
                return False
            self.grpc = ready.grpc
        # tcpdump says "listening on IF" (on stderr, in its log) once it captures
        return all(
            "listening on" in self._tcpdump_log(ifname).read_text(errors="replace")
            for ifname in (self.data_ports().values() if self.pcap_dir is not None else ())
        )


class Bmv2Node(InaSwitch):
    """bmv2's simple_switch_grpc with no program (`--no-p4`: `inaemu pipeline push` installs
    ina.p4), its own gRPC and thrift ports on 127.0.0.1, its notifications socket in the run
    directory, its log in `log_dir`; `--pcap` into `pcap_dir` when capturing.

    params: `log_level` (bmv2's --log-level: trace, debug, info, warn, error, off; default
    warn: a bmv2 built with logging otherwise logs every packet, which slows it down)."""

    kind = "bmv2"

    def __init__(self, name: str, *, log_level: str = "warn", **params: Any) -> None:
        super().__init__(name, **params)
        self.log_level = log_level
        self.thrift_port = 0

    def notifications_addr(self) -> str:
        return notifications_address(self.run_dir, self.name)

    def command(self) -> list[str]:
        self.grpc = f"127.0.0.1:{free_port()}"
        self.thrift_port = free_port()
        return simple_switch_grpc_argv(
            device_id=self.device_id,
            grpc=self.grpc,
            thrift_port=self.thrift_port,
            notifications=self.notifications_addr(),
            ports=self.data_ports(),
            log_file=self.log_dir / f"{self.name}-bmv2",
            log_level=self.log_level,
            pcap_dir=self.pcap_dir,
        )

    def ready(self) -> bool:
        return listening(self.grpc)

    def stop_processes(self) -> None:
        super().stop_processes()
        addr = self.notifications_addr().removeprefix("ipc://")
        if Path(addr).is_socket():
            Path(addr).unlink()
        if self.pcap_dir is not None:  # bmv2 names its captures after the interfaces
            for ifname in self.data_ports().values():
                for way in ("in", "out"):
                    got = self.pcap_dir / f"{ifname}_{way}.pcap"
                    if ifname != self.shown(ifname) and got.exists():
                        got.rename(self.pcap_dir / f"{self.shown(ifname)}_{way}.pcap")


SWITCH_CLASSES: dict[str, type[InaSwitch]] = {"softswitch": SoftSwitchNode, "bmv2": Bmv2Node}


class InaHost(_Host):  # type: ignore[misc]
    """A Mininet host set up for INA workers (docs/protocol.md, section 8).

    params: `agg_ip`, `agg_mac`: the aggregation address of the host's switch."""

    def startShell(self, mnopts: Any = None) -> None:
        """Mininet's shell in a new namespace, then IPv6 off before any interface exists (the
        veths made later inherit `default`), and TCP connections that keep their congestion
        window while idle: a collective's step waits for the previous one, and Linux would
        otherwise restart every connection idle for an RTO from its initial window (RFC 2861),
        penalising schedules that change peers every step (halving-doubling, MultiTree) against
        the ring, whose connections stay busy. Clusters running collectives set the same."""
        CREATED.append(self)
        super().startShell(mnopts)
        self.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
        self.cmd("sysctl -qw net.ipv4.tcp_slow_start_after_idle=0")

    def config(
        self, agg_ip: str | None = None, agg_mac: str | None = None, **params: Any
    ) -> dict[str, Any]:
        r: dict[str, Any] = super().config(**params)
        intf = self.defaultIntf()
        if intf is not None:  # ordinary TCP between hosts must cross the switches too
            errors = self.cmd(f"{sys.executable} -m inaemu.mininet.offload {intf.name} 2>&1")
            if errors.strip():
                raise RuntimeError(f"{self.name}: turning offloads off failed: {errors}")
        if agg_ip and agg_mac and intf is not None:
            errors = self.cmd(
                f"ip neigh replace {agg_ip} lladdr {agg_mac} dev {intf.name} nud permanent"
                f" && ip route replace {agg_ip}/32 dev {intf.name}"
            )
            if errors.strip():
                raise RuntimeError(f"{self.name}: host set-up for {agg_ip} failed: {errors}")
        return r


class ShapedIntf(_TCIntf):  # type: ignore[misc]
    """Mininet's TCIntf, but a bandwidth alone is shaped by `shaping.htb_commands` (burst
    and cburst `htb_burst`, not Mininet's burst 15k with tc's one-frame cburst)."""

    def bwCmds(self, bw: float | None = None, **options: Any) -> tuple[list[str], str]:
        if bw is None or any(options.values()) or not 0 < bw <= self.bwParamMax:
            got: tuple[list[str], str] = super().bwCmds(bw=bw, **options)
            return got
        return htb_commands(bw), " parent 5:1 "


class ShapedLink(_TCLink):  # type: ignore[misc]
    """A TCLink of two `ShapedIntf`s."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("cls1", ShapedIntf)
        kwargs.setdefault("cls2", ShapedIntf)
        super().__init__(*args, **kwargs)
