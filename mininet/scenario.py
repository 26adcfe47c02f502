"""A topology as a Mininet network of INA switches and hosts, programmed only through the
controller's operations (`inaemu.controller.api`), and removed again.

    with Scenario(topology, RunDir.make(path), NetOptions(switch="softswitch", bw=20)) as sc:
        sc.program()                           # as inaemu pipeline push, inaemu routes
        record = sc.add_job(JobSpec(1, ("h1", "h2")))          # as inaemu job add
        proc = sc.popen("h1", [sys.executable, "-m", "inaemu.hostlib.worker", ...])

What it creates, and `close()` removes (also after a failure or Ctrl-C): one Mininet network
(hosts in their own network namespaces, each with its `<host>-eth0`; switch nodes in the root
namespace with veths named `<prefix><switch>-eth<port>`; tc shaping on the links given a
bandwidth), one switch process per switch (and tcpdumps with `pcap`), and the processes
started with `popen`; `build/network.json` lists them (pids, interfaces, the prefix) as they
are made. `close()` stops those processes, then has Mininet stop its own network (links,
switches, hosts), then deletes any of this network's switch interfaces still left in the root
namespace. It never runs `mn -c`: other networks on the machine are left alone.

The prefix keeps networks apart: two runs (two users, two tests) on one machine each have
their own root-namespace interfaces. Unless `NetOptions.prefix` names one, it is chosen here:
three letters and digits and a dash (`k3q-s1-eth1`) that no interface or named network
namespace on the machine starts with. Linux takes interface names of at most 15 characters:
the names are checked before anything is made, and so is a clash with an existing interface
(Mininet would fail half-way, or delete it). Hosts keep their topology names inside their
own namespaces, and so do the names a user reads: the run's tables and summary, the pcaps and
the capture logs say `s1-eth1` (`interface_name`), whatever the prefix.

Mininet's `fixLimits` (raising global sysctls such as net.core.wmem_max, never restored) is
skipped: a network of this size does not need it.

The switches listen for P4Runtime on distinct 127.0.0.1 ports of the root namespace; the run's
`build/topology.json` names them, and the controller's operations (pipeline push, routes, job
add and remove, new run ids, loss, stats) run in this process against that file and its job
state, each logged in `logs/controller.log` as the `inaemu` command that does the same.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import secrets
import shlex
import shutil
import signal
import string
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

from inaemu.common import args as arg
from inaemu.controller import api
from inaemu.controller.jobs import JobRecord, JobSpec
from inaemu.runs.compare import LinkUse, link_ends
from inaemu.topology.model import Link, Topology, TopologyError

IFNAMSIZ = 15  # the longest interface name Linux takes
PREFIX_TOKEN = 3  # characters of a chosen prefix: 36^3 = 46,656 of them (then a dash)
PREFIX_CHARS = string.ascii_lowercase + string.digits
_PREFIX_RE = re.compile(r"[A-Za-z0-9_.-]{0,8}")  # what --prefix may be
NETEM_OPTIONS = ("delay", "jitter", "loss", "max_queue_size")
MAX_BW = 1000.0  # Mbit/s: Mininet's TCIntf refuses more
BW = arg.Real(0.0, MAX_BW, "Mbit/s", lo_open=True, note="what Mininet shapes")  # --bw
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # ignored while cleaning up
T = TypeVar("T")
PRIMARY_WAIT = 5.0  # seconds a controller operation waits for the last one's stream to end


class ScenarioError(RuntimeError):
    """The network cannot be built, started or programmed; the message says why."""


class CleanupError(ScenarioError):
    """Something this scenario made could not be removed; the message says what."""


@dataclass(frozen=True)
class RunDir:
    """A run's directory, as p4lang/tutorials lay one out: `build/` (topology.json, the job
    state, the bmv2 JSON, results), `logs/` (switches, controller, workers), `pcaps/`."""

    root: Path

    @property
    def build(self) -> Path:
        return self.root / "build"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pcaps(self) -> Path:
        return self.root / "pcaps"

    # what a run writes and a later run in the same directory must not find: a summary or a
    # network record of the last run, logs that are appended to, the controller's job state
    STALE = (
        "summary.json",
        "build/network.json",
        "build/topology.json",
        "build/topology.json.jobs.json",
        "logs/controller.log",
        "logs/workers.txt",
    )

    @staticmethod
    def make(root: Path, *, pcap: bool = False) -> RunDir:
        """The directory and its folders; a previous run's files that would mislead this one
        (`STALE`, results) are removed, nothing else."""
        run = RunDir(Path(root).absolute())
        for d in (run.build, run.logs, *([run.pcaps] if pcap else [])):
            d.mkdir(parents=True, exist_ok=True)
        for name in RunDir.STALE:
            (run.root / name).unlink(missing_ok=True)
        for result in (run.build / "results").glob("*.npy"):
            result.unlink()
        return run


@dataclass(frozen=True)
class NetOptions:
    switch: str = "softswitch"  # softswitch | bmv2
    bw: float | None = None  # Mbit/s on every link without a bw of its own; None: unshaped
    node_ports: str = "all"  # torus and mesh nodes: all ports' bandwidth on the host link, or 1
    pcap: bool = False
    bmv2_log_level: str = "warn"
    dataplane: str = "fast"  # the softswitch's: fast (compiled) or reference (Python)
    start_timeout: float = 30.0
    verbose: bool = False  # Mininet's own progress messages
    prefix: str | None = None  # of the switch interfaces' names; None: chosen (`choose_prefix`)


def link_params(
    link: Link, default_bw: float | None, index: int, *, scale: int = 1
) -> dict[str, Any]:
    """Mininet TCLink parameters of a topology link: its own options ("bw=10,delay=1ms") over
    the default bandwidth, times `scale` (a direct-network node's host link under node model
    `all`: `link_shaping`)."""
    params: dict[str, Any] = {}
    if default_bw is not None:
        params["bw"] = default_bw * scale
        if params["bw"] > MAX_BW:
            raise TopologyError(
                f"link #{index} ({link.a}-{link.b}) carries its node's {scale} network ports "
                f"(--node-ports all): {scale} x {default_bw:g} = {params['bw']:g} Mbit/s, more "
                f"than Mininet's {MAX_BW:.0f}; lower --bw or use --node-ports 1"
            )
    for item in filter(None, (p.strip() for p in re.split(r"[,\s]+", link.options))):
        key, sep, value = item.partition("=")
        where = f"link #{index} ({link.a}-{link.b}) option {item!r}"
        if not sep:
            raise TopologyError(f"{where}: write key=value, e.g. bw=10")
        if key == "bw":
            try:
                params["bw"] = float(value)
            except ValueError:
                raise TopologyError(f"{where}: bw is Mbit/s, a number") from None
        elif key in ("delay", "jitter"):
            params[key] = value
        elif key in ("loss", "max_queue_size"):
            try:
                params[key] = float(value) if key == "loss" else int(value)
            except ValueError:
                raise TopologyError(f"{where}: {key} must be a number") from None
        else:
            raise TopologyError(
                f"{where}: unknown; links take bw, delay, jitter, loss, "
                "max_queue_size (Mininet TCLink's)"
            )
    bw = params.get("bw")
    if bw is not None and not 0 < bw <= MAX_BW:
        raise TopologyError(f"link #{index}: bw {bw} Mbit/s is outside Mininet's 0..{MAX_BW:.0f}")
    return params


def link_shaping(topo: Topology, default_bw: float | None, node_ports: str) -> list[dict[str, Any]]:
    """`link_params` of every link of `topo`, in order, under the node model `node_ports`
    (`topology.routes`): with `all`, the host link of a torus or mesh node is shaped to
    the default bandwidth times the node's network ports (`host_link_capacity`, the factor
    the checker's alpha-beta model uses), so that the node can drive all its links at once;
    with `1`, like every other link."""
    from inaemu.topology.routes import host_link_capacity

    out = []
    for i, lk in enumerate(topo.links):
        host = lk.a if lk.a_port is None else lk.b if lk.b_port is None else None
        scale = 1 if host is None else host_link_capacity(topo, host, node_ports)
        out.append(link_params(lk, default_bw, i, scale=scale))
    return out


def netem_missing() -> str | None:
    """None if the kernel has netem (what Mininet's delay, jitter, loss and queue limits use),
    else why not. Probed in a throwaway network namespace."""
    probe = f"inaemu-netem-probe-{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode:
        return "cannot make a network namespace to probe for netem"
    try:
        tc = ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]
        proc = subprocess.run(["ip", "netns", "exec", probe, *tc], capture_output=True, text=True)
        return None if proc.returncode == 0 else f"tc netem: {proc.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)


def counted_end(link: Link) -> tuple[str, int]:
    """The end of `link` whose interface lives in the root namespace and is counted: the
    switch end of a host link, the first end of a link between switches."""
    if link.a_port is None:
        assert link.b_port is not None
        return link.b, link.b_port
    return link.a, link.a_port


def switch_ports(topo: Topology, switch: str) -> list[int]:
    """The ports of `switch` that links use."""
    ports = [lk.a_port for lk in topo.links if lk.a == switch and lk.a_port is not None]
    ports += [lk.b_port for lk in topo.links if lk.b == switch and lk.b_port is not None]
    return sorted(ports)


def interface_name(node: str, port: int, prefix: str = "") -> str:
    """Mininet's name for a node's interface (`prefix` in front: a switch's interface in the
    root namespace; without it, the name a user reads)."""
    return f"{prefix}{node}-eth{port}"


def root_interfaces() -> set[str]:
    return set(os.listdir("/sys/class/net"))


def named_namespaces() -> set[str]:
    """The network namespaces `ip netns` knows by name."""
    try:
        return set(os.listdir("/run/netns"))
    except OSError:
        return set()


def prefix_taken(prefix: str) -> str | None:
    """An interface of the root namespace or a named network namespace whose name starts with
    `prefix`, or None."""
    return next(
        (n for n in sorted(root_interfaces() | named_namespaces()) if n.startswith(prefix)), None
    )


def check_prefix(prefix: str) -> None:
    """ScenarioError unless `prefix` can start interface names (letters, digits, '_', '.',
    '-'; at most 8 characters)."""
    if not _PREFIX_RE.fullmatch(prefix):
        raise ScenarioError(
            f"--prefix {prefix!r}: letters, digits, '_', '.' or '-', at most 8 characters "
            "(it starts the network's interface names)"
        )


def choose_prefix(attempts: int = 200) -> str:
    """A prefix no interface or named namespace of this machine starts with: `PREFIX_TOKEN`
    random letters and digits, a letter first, and a dash."""
    for _ in range(attempts):
        token = secrets.choice(string.ascii_lowercase)
        token += "".join(secrets.choice(PREFIX_CHARS) for _ in range(PREFIX_TOKEN - 1))
        if prefix_taken(token) is None:
            return token + "-"
    raise ScenarioError(
        f"no free interface prefix in {attempts} tries (the machine has "
        f"{len(root_interfaces())} interfaces): give one with --prefix"
    )


def _alive(pid: int) -> bool:
    """True if `pid` runs (a zombie, waiting for its parent to reap it, counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _counter(ifname: str, name: str) -> int:
    try:
        return int(Path(f"/sys/class/net/{ifname}/statistics/{name}").read_text())
    except (OSError, ValueError):
        return 0


class _QuietTc(logging.Filter):
    """Drops tc's warning that htb's quantum is big at the rates Mininet sets (harmless:
    Mininet reports every line tc prints as an error)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "quantum of class" not in record.getMessage()


class Scenario:
    """See the module's docstring."""

    def __init__(
        self, topology: Topology, run: RunDir, options: NetOptions, *, program: Path | None = None
    ) -> None:
        """`program`: the bmv2 JSON (needed with switch bmv2; written into topology.json)."""
        self.topology = topology.validate()
        self.run = run
        self.options = options
        self.p4_program = program
        self.net: Any = None
        self.procs: list[subprocess.Popen[bytes]] = []
        self._files: list[IO[bytes]] = []
        self._our_ifnames: list[str] = []
        self.prefix = ""  # of this network's switch interfaces: chosen by `_check`
        self.topology_file = run.build / "topology.json"
        self.timings: dict[str, float] = {}
        self.record: dict[str, Any] = {}
        self._finsy_log: logging.Handler | None = None
        self._closed = False

    # ------------------------------------------------------------------ life cycle

    def __enter__(self) -> Scenario:
        try:
            self.start()
        except BaseException as exc:
            self._close_after(exc)
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            self.close()
        else:
            self._close_after(exc)

    def _close_after(self, exc: BaseException) -> None:
        """close() while `exc` is on its way out: what cleanup could not remove becomes a note
        on `exc` instead of replacing it."""
        try:
            self.close()
        except CleanupError as failed:
            exc.add_note(str(failed))

    def _check(self) -> list[tuple[str, str, int | None, int | None, dict[str, Any]]]:
        """Everything refused before anything is made: names, options, interface clashes."""
        topo, opts = self.topology, self.options
        if opts.switch not in ("softswitch", "bmv2"):
            raise ScenarioError(f"unknown switch {opts.switch!r}: use softswitch or bmv2")
        if opts.switch == "bmv2" and self.p4_program is None:
            raise ScenarioError("bmv2 needs the compiled program (program=...)")
        links = []
        needs_netem = False
        shaping = link_shaping(topo, opts.bw, opts.node_ports)
        for lk, params in zip(topo.links, shaping, strict=True):
            needs_netem |= any(k in params for k in NETEM_OPTIONS)
            links.append((lk.a, lk.b, lk.a_port, lk.b_port, params))
        if needs_netem:
            why = netem_missing()
            if why is not None:
                raise ScenarioError(
                    "a link asks for delay, jitter, loss or a queue limit, which need the "
                    f"kernel's netem, missing here ({why}); inject loss at the switches "
                    "instead (--loss, `inaemu loss`)"
                )
        if opts.prefix is not None:
            check_prefix(opts.prefix)
        self.prefix = choose_prefix() if opts.prefix is None else opts.prefix
        switch_ifs = [
            self.ifname(sw, port) for sw in topo.switches for port in switch_ports(topo, sw)
        ]
        names = switch_ifs + [interface_name(h, 0) for h in topo.hosts]
        too_long = [n for n in names if len(n) > IFNAMSIZ]
        if too_long:
            raise ScenarioError(
                f"interface names longer than {IFNAMSIZ} characters: {', '.join(too_long[:5])} "
                f"(prefix {self.prefix!r}); use shorter host and switch names, or a shorter "
                "--prefix (--prefix '' for none: one such network on the machine at a time)"
            )
        clash = sorted(set(switch_ifs) & root_interfaces())
        if clash:
            raise ScenarioError(
                f"interface(s) {', '.join(clash[:5])} already exist in the root namespace "
                f"(a network with --prefix {self.prefix!r} running, or left over from one: remove "
                f"a left-over with `ip link del {clash[0]}`, or choose another --prefix)"
            )
        self._our_ifnames = switch_ifs
        return links

    def start(self) -> None:
        links = self._check()
        from inaemu.mininet import nodes  # imports Debian's Mininet

        mn = nodes.mn
        mn.log.setLogLevel("info" if self.options.verbose else "warning")
        if not any(isinstance(f, _QuietTc) for f in mn.log.lg.filters):
            mn.log.lg.addFilter(_QuietTc())

        class Net(mn.net.Mininet):  # type: ignore[misc,name-defined]
            inited = True  # skip Mininet.init's fixLimits (global sysctls); we are root

        started = time.monotonic()
        switch_cls = nodes.SWITCH_CLASSES[self.options.switch]
        self.net = net = Net(
            topo=None,
            build=False,
            controller=None,
            switch=switch_cls,
            host=nodes.InaHost,
            link=mn.link.Link,
            autoSetMacs=False,
            autoStaticArp=False,
            waitConnected=False,
        )
        topo = self.topology
        for name, h in topo.hosts.items():
            sw_name, _ = topo.host_attachment(name)
            sw = topo.switches[sw_name]
            net.addHost(
                name, ip=f"{h.ip}/{h.prefix_len}", mac=h.mac, agg_ip=sw.agg_ip, agg_mac=sw.agg_mac
            )
        extra: dict[str, Any] = (
            {"log_level": self.options.bmv2_log_level}
            if self.options.switch == "bmv2"
            else {"dataplane": self.options.dataplane}
        )
        for i, (name, s) in enumerate(topo.switches.items()):
            net.addSwitch(
                name,
                cls=switch_cls,
                dpid=f"{i + 1:x}",
                device_id=s.device_id,
                log_dir=self.run.logs,
                run_dir=self.run.build,
                pcap_dir=self.run.pcaps if self.options.pcap else None,
                start_timeout=self.options.start_timeout,
                prefix=self.prefix,
                **extra,
            )
        for a, b, a_port, b_port, params in links:
            cls = nodes.ShapedLink if params else mn.link.Link
            names = {  # a switch's end in the root namespace: prefixed; a host's: its own
                f"intfName{i}": self.ifname(node, port)
                for i, (node, port) in ((1, (a, a_port)), (2, (b, b_port)))
                if port is not None
            }
            net.addLink(a, b, port1=a_port, port2=b_port, cls=cls, **names, **params)
        net.build()
        net.staticArp()  # host to host, for ordinary traffic (the switches answer no ARP)
        try:
            net.start()  # every switch started, then waited for (batchStartup)
        except nodes.SwitchStartError as exc:
            raise ScenarioError(str(exc)) from None
        self.timings["network"] = time.monotonic() - started
        self._write_topology()
        self.record = {
            "switches": {
                n: {"kind": self.options.switch, "grpc": net[n].grpc, "pid": net[n].proc.pid}
                for n in topo.switches
            },
            "hosts": {h: {"shell_pid": net[h].pid} for h in topo.hosts},
            "interfaces": sorted(self._our_ifnames),
            "prefix": self.prefix,
            "processes": [],
        }
        self._save_record()

    def _save_record(self) -> None:
        """build/network.json: what this scenario made (switch and host processes, root-
        namespace interfaces, processes started on hosts), for whoever checks the cleanup."""
        (self.run.build / "network.json").write_text(json.dumps(self.record, indent=2) + "\n")

    def _write_topology(self) -> None:
        topo = dataclasses.replace(self.topology)
        topo.switches = {
            name: dataclasses.replace(
                s,
                grpc=self.net[name].grpc,
                program=str(self.p4_program) if self.options.switch == "bmv2" else s.program,
            )
            for name, s in self.topology.switches.items()
        }
        topo.validate()
        topo.save(self.topology_file)
        self.live_topology = topo

    def close(self) -> None:
        """Remove everything this scenario made (see the module's docstring). Ctrl-C, SIGTERM
        and SIGHUP are ignored meanwhile, so that a second one does not leave half a network.
        ScenarioError if something is left (the message says what); what went wrong on the
        way but was removed all the same goes to logs/cleanup.log."""
        if self._closed:
            return
        self._closed = True
        saved = {s: signal.signal(s, signal.SIG_IGN) for s in STOP_SIGNALS}
        notes: list[str] = []
        try:
            from inaemu.mininet.nodes import CREATED, kill_group

            for proc in self.procs:
                kill_group(proc)
            for f in self._files:
                f.close()
            self._files.clear()
            net = self.net
            if net is not None:
                for sw in net.switches:  # before Mininet's stop, which may fail half-way
                    try:
                        sw.stop_processes()
                    except Exception as exc:
                        notes.append(f"stopping {sw.name}: {exc!r}")
                try:
                    net.stop()
                except Exception as exc:
                    notes.append(f"Mininet's stop: {exc!r}")
            # every node shell started, also one interrupted before Mininet listed its node
            for node in CREATED:
                if getattr(node, "shell", None) is not None:
                    try:
                        node.terminate()
                    except Exception as exc:
                        notes.append(f"terminating {node.name}: {exc!r}")
            CREATED.clear()
            for ifname in sorted(set(self._our_ifnames) & root_interfaces()):
                subprocess.run(["ip", "link", "del", ifname], capture_output=True)
            left = self._left_over()
        finally:
            for s, handler in saved.items():
                signal.signal(s, handler)
        if self._finsy_log is not None:
            logging.getLogger("finsy").removeHandler(self._finsy_log)
            self._finsy_log.close()
            self._finsy_log = None
        if notes:
            with (self.run.logs / "cleanup.log").open("a") as log:
                log.write("".join(f"{n}\n" for n in notes))
        if left:
            raise CleanupError(f"cleanup left {'; '.join(left)} (see build/network.json)")

    def _left_over(self) -> list[str]:
        """What of this scenario still exists: interfaces, processes (waited for briefly)."""
        pids = [p.pid for p in self.procs]
        pids += [s.get("pid", 0) for s in self.record.get("switches", {}).values()]
        pids += [h.get("shell_pid", 0) for h in self.record.get("hosts", {}).values()]
        deadline = time.monotonic() + 5.0
        while (alive := [p for p in pids if p and _alive(p)]) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [f"interface {i}" for i in sorted(set(self._our_ifnames) & root_interfaces())]
        return left + [f"process {p}" for p in alive]

    # ------------------------------------------------------------------ controller

    def control(
        self, argv: Sequence[str], call: Callable[[], T], said: Callable[[T], str] = str
    ) -> T:
        """Run a controller operation (`call`, one of `inaemu.controller.api`'s) in this
        process and return what it returns; logs/controller.log gets the `inaemu` command
        that does the same (`argv`), how long it took and what it said (`said`); a failure
        is a ScenarioError naming that command.

        A switch may still count the previous operation's connection as primary for a moment
        after that operation closed it (the stream's end reaches the switch asynchronously);
        an operation refused for that alone, before it wrote anything, is tried again for up
        to PRIMARY_WAIT seconds."""
        if self._finsy_log is None:  # finsy's own messages: into the logs, not the terminal
            self._finsy_log = logging.FileHandler(self.run.logs / "finsy.log")
            self._finsy_log.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            logging.getLogger("finsy").addHandler(self._finsy_log)
        command = f"inaemu {shlex.join(argv)}"
        deadline = time.monotonic() + PRIMARY_WAIT
        while True:
            started = time.monotonic()
            try:
                result = call()
            except api.FAILURES as exc:
                failed = api.explain(exc)
                self._log_control(command, time.monotonic() - started, f"failed: {failed}")
                if "another controller is primary" in failed and time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
                raise ScenarioError(f"{command} failed: {failed}") from None
            self._log_control(command, time.monotonic() - started, said(result))
            return result

    def _log_control(self, command: str, took: float, said: str) -> None:
        with (self.run.logs / "controller.log").open("a") as log:
            log.write(
                f"$ {command}    # {took:.2f} s\n" + (said.rstrip("\n") + "\n" if said else "")
            )

    def ifname(self, switch: str, port: int) -> str:
        """The root-namespace interface of `switch`'s `port` in this network (prefixed)."""
        return interface_name(switch, port, self.prefix)

    @property
    def files(self) -> api.NetworkFiles:
        """The files the controller's operations work from: the run's topology and its job
        state next to it."""
        return api.NetworkFiles(self.topology_file)

    def topo_args(self) -> list[str]:
        return ["-t", str(self.topology_file)]

    def program(self) -> None:
        """ina.p4 on every switch and IPv4 routes to every host."""
        started = time.monotonic()
        self.control(
            ["pipeline", "push", *self.topo_args()],
            lambda: api.push_pipeline(self.files),
            lambda _: "",
        )
        self.control(
            ["routes", *self.topo_args()], lambda: api.install_routes(self.files), lambda _: ""
        )
        self.timings["program"] = time.monotonic() - started

    def set_loss(self, probability: float) -> None:
        """Injected loss on every port of every switch (each switch's loss table)."""
        for sw in self.topology.switches:
            ports = switch_ports(self.topology, sw)
            if ports:
                argv = [*self.topo_args(), "--switch", sw, "--ports", ",".join(map(str, ports))]
                self.control(
                    ["loss", *argv, "--probability", str(probability)],
                    partial(api.set_loss, self.files, sw, ports, probability),
                    lambda _: "",
                )

    def add_job(self, spec: JobSpec) -> JobRecord:
        """Install a job (`inaemu job add`): its trees, slot pools and groups."""
        argv = ["job", "add", *self.topo_args(), "--job", str(spec.job_id)]
        argv += ["--workers", ",".join(spec.workers), "--pool", str(spec.pool_size)]
        argv += ["--trees", str(spec.n_trees)]
        argv += ["--roots", ",".join(spec.roots)] if spec.roots else []
        return self.control(argv, lambda: api.add_job(self.files, spec), api.describe_trees)

    def remove_job(self, job_id: int) -> None:
        """Remove a job (`inaemu job remove`), its slots free for the next."""
        self.control(
            ["job", "remove", *self.topo_args(), "--job", str(job_id)],
            lambda: api.remove_job(self.files, job_id),
            lambda lacking: f"lost on {', '.join(lacking)}" if lacking else "",
        )

    def new_run(self, job_id: int) -> int:
        """The job's next run id from its job state (`inaemu job new-run`)."""
        return self.control(
            ["job", "new-run", *self.topo_args(), "--job", str(job_id)],
            lambda: api.new_run(self.files, job_id),
        )

    def stats(self) -> str:
        """Every switch's counters, rendered (`inaemu stats`)."""
        return self.control(
            ["stats", *self.topo_args()], lambda: api.read_stats(self.files).render()
        )

    # ------------------------------------------------------------------ hosts

    def host_ip(self, host: str) -> str:
        return self.topology.hosts[host].ip

    def agg_address(self, host: str) -> tuple[str, str]:
        """(agg_ip, agg_mac) of the switch `host` is plugged into."""
        sw = self.topology.switches[self.topology.host_attachment(host)[0]]
        return sw.agg_ip, sw.agg_mac

    def popen(
        self, host: str, argv: Sequence[str], *, stdout: Path, stderr: Path
    ) -> subprocess.Popen[bytes]:
        """Start `argv` on Mininet host `host` (its network namespace), in a session of its
        own, output to files; stopped by `close()` if still running."""
        node = self.net[host]
        out, err = stdout.open("wb"), stderr.open("wb")
        self._files += [out, err]
        proc: subprocess.Popen[bytes] = node.popen(
            list(argv),
            mncmd=["mnexec", "-a", str(node.pid)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        self.procs.append(proc)
        self.record["processes"].append({"host": host, "pid": proc.pid, "argv": list(argv)})
        self._save_record()
        return proc

    # ------------------------------------------------------------------ measurements

    def links(self) -> Iterator[tuple[Link, str, str, tuple[str, int], bool]]:
        """(link, end a, end b, counted (switch, port), whether the counted end is b)."""
        topo = self.topology
        for lk in topo.links:
            sw, port = counted_end(lk)
            a, b = link_ends(lk)
            yield lk, a, b, (sw, port), (sw, port) == (lk.b, lk.b_port)

    def link_counters(self) -> list[LinkUse]:
        """Bytes and packets each way on every link so far (kernel counters of the counted
        interface: what it received came from the other end, what it sent went there)."""
        uses = []
        for _, a, b, (sw, port), counted_is_b in self.links():
            ifname, shown = self.ifname(sw, port), interface_name(sw, port)
            rx, tx = _counter(ifname, "rx_bytes"), _counter(ifname, "tx_bytes")
            rxp, txp = _counter(ifname, "rx_packets"), _counter(ifname, "tx_packets")
            if counted_is_b:  # b received what a sent
                use = LinkUse(a, b, shown, rx, tx, rxp, txp)
            else:
                use = LinkUse(a, b, shown, tx, rx, txp, rxp)
            use.shaping = shaping(ifname)
            uses.append(use)
        return uses

    def shaped_switches(self) -> set[str]:
        """The switches all of whose links are shaped (a bandwidth, `link_shaping`)."""
        shaping = link_shaping(self.topology, self.options.bw, self.options.node_ports)
        out = set(self.topology.switches)
        for lk, params in zip(self.topology.links, shaping, strict=True):
            if not params.get("bw"):
                out -= {lk.a, lk.b}
        return out

    def queue_drops(self) -> dict[str, int]:
        """Per switch, the frames its interfaces' queues (tc's root qdiscs: a shaped link's
        buffer) dropped so far (`accounting.root_qdisc_drops`)."""
        from inaemu.runs.accounting import root_qdisc_drops

        if shutil.which("tc") is None:
            return {}
        out = subprocess.run(["tc", "-s", "qdisc", "show"], capture_output=True, text=True)
        drops = root_qdisc_drops(out.stdout)
        return {
            sw: sum(drops.get(self.ifname(sw, p), 0) for p in switch_ports(self.topology, sw))
            for sw in self.topology.switches
        }


def shaping(ifname: str) -> str:
    """The rate tc enforces on `ifname` ("rate 20Mbit"), or "" if none."""
    if shutil.which("tc") is None:
        return ""
    out = subprocess.run(
        ["tc", "class", "show", "dev", ifname], capture_output=True, text=True
    ).stdout
    m = re.search(r"\brate (\S+)", out)
    return f"rate {m[1]}" if m else ""
