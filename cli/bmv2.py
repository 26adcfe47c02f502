"""`inaemu bmv2 -t topology.json`: one simple_switch_grpc per switch of a topology, run until
Ctrl-C or printed as a shell script (`--print`); the command lines are
`inaemu.controller.bmv2`'s. A failure (`Bmv2Error`: not installed, a switch that would not
start or exited) stops the others and is said in one line.

A port whose interface does not exist here is said before the switches start, in one line
naming every such interface, and on its switch's READY line (`missing=`); one that is down
or whose MTU cannot carry an INA frame is said in a line of its own
(`softswitch.ports.check_interface`, the check with which the softswitch refuses them). bmv2
starts anyway and serves P4Runtime (the control plane can be programmed and read), but such a port
sends and receives nothing. Refusing would rule out that use; starting silently made READY a
lie about the data plane."""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from inaemu.common import args as arg
from inaemu.controller import bmv2
from inaemu.p4.tools import missing_tools
from inaemu.softswitch.ports import InterfaceError, check_interface
from inaemu.topology.model import Topology, TopologyError


def cmd_bmv2(args: argparse.Namespace) -> int:
    """One simple_switch_grpc per switch of the topology: printed, or run until Ctrl-C."""
    topo = Topology.load(args.topology)
    run_dir = Path(args.run_dir or f"{args.topology}.bmv2").resolve()
    ifaces: dict[tuple[str, int], str] = {}
    for spec in args.iface:
        where, eq, ifname = spec.partition("=")
        switch, colon, port = where.rpartition(":")
        if not (eq and colon and ifname and port.isdigit() and switch in topo.switches):
            raise TopologyError(
                f"--iface {spec}: write SWITCH:PORT=IFNAME with a switch of the topology "
                f"({', '.join(topo.switches)}), e.g. s1:1=veth1"
            )
        ifaces[(switch, int(port))] = ifname
    try:
        args.iface_format.format(switch="s1", port=1)
    except (KeyError, IndexError, ValueError) as exc:
        raise TopologyError(
            f"--iface-format {args.iface_format}: use {{switch}} and {{port}}, e.g. "
            f"{bmv2.IFACE_FORMAT} ({exc!r})"
        ) from None
    names = list(topo.switches)
    if args.thrift_port == 0:
        thrift = dict(zip(names, bmv2.free_ports(len(names)), strict=True))
    elif 1 <= args.thrift_port <= 65536 - len(names):
        thrift = {name: args.thrift_port + i for i, name in enumerate(names)}
    else:
        raise TopologyError(
            f"--thrift-port {args.thrift_port}: {len(names)} switches need ports from it "
            "within 1..65535 (0: free ports)"
        )
    commands = bmv2.topology_commands(
        topo,
        run_dir,
        iface_format=args.iface_format,
        ifaces=ifaces,
        thrift_ports=thrift,
        log_level=args.log_level,
    )
    arg.checks_done()
    if args.print:
        print("\n".join(bmv2.shell_lines(commands, run_dir)))
        return 0
    missing = missing_tools([bmv2.BINARY])
    if missing:
        raise bmv2.Bmv2Error(missing)
    absent = missing_interfaces(commands)
    if absent:
        print(
            "inaemu bmv2: warning: no such interface here: "
            + "; ".join(f"{sw}: {', '.join(names)}" for sw, names in absent.items())
            + ": those ports send and receive nothing (P4Runtime is served all the same); "
            "create the interfaces first (veth pairs, Mininet's) or name others with "
            "--iface / --iface-format",
            file=sys.stderr,
            flush=True,
        )
    for problem in unusable_interfaces(commands):  # they exist, but a frame cannot pass
        print(f"inaemu bmv2: warning: {problem}", file=sys.stderr, flush=True)
    stop = threading.Event()
    handlers = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    switches = bmv2.Bmv2Switches(commands)
    try:
        switches.start()
        for c in commands:
            pid = switches.procs[c.switch].pid
            note = f" missing={','.join(absent[c.switch])}" if c.switch in absent else ""
            print(
                f"READY {c.switch} grpc={c.grpc} device_id={c.device_id} "
                f"thrift={c.thrift_port} pid={pid} log={c.log}{note}",
                flush=True,
            )
        print(
            f"inaemu bmv2: {len(commands)} switches running without a program; install "
            f"ina.p4 with `inaemu pipeline push -t {args.topology}`; Ctrl-C stops them",
            flush=True,
        )
        while not stop.wait(0.5):
            gone = switches.exited()
            if gone is not None:
                c, status = gone
                raise bmv2.Bmv2Error(
                    f"{c.switch}: simple_switch_grpc exited (status {status}); the others "
                    f"were stopped; {c.log}:\n{bmv2.log_tail(c.log)}",
                )
    finally:
        switches.stop()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return 0


def _interfaces(commands: list[bmv2.SwitchCommand]) -> Iterator[tuple[str, str]]:
    """(switch, interface) of every `-i PORT@IFACE` option of the switches' command lines."""
    for c in commands:
        for option, value in zip(c.argv, c.argv[1:], strict=False):
            if option == "-i":
                yield c.switch, value.partition("@")[2]


def missing_interfaces(commands: list[bmv2.SwitchCommand]) -> dict[str, list[str]]:
    """switch -> the interfaces of its `-i PORT@IFACE` options that do not exist here."""
    absent: dict[str, list[str]] = {}
    for switch, ifname in _interfaces(commands):
        if not _exists(ifname):
            absent.setdefault(switch, []).append(ifname)
    return absent


def unusable_interfaces(commands: list[bmv2.SwitchCommand]) -> list[str]:
    """Why each existing interface of the switches' `-i PORT@IFACE` options cannot carry an
    INA frame (down, or an MTU below one: `softswitch.ports.check_interface`), one line each;
    the missing ones are `missing_interfaces`'."""
    problems = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for switch, ifname in _interfaces(commands):
            if not _exists(ifname):
                continue
            try:
                check_interface(sock, ifname)
            except InterfaceError as exc:
                problems.append(f"{switch}: {exc}")
    return problems


def _exists(ifname: str) -> bool:
    try:
        socket.if_nametoindex(ifname)
    except OSError:
        return False
    return True


def add_parser(sub: Any) -> None:
    """`bmv2` on `inaemu`'s subparsers."""
    b = sub.add_parser(
        "bmv2",
        help="run one simple_switch_grpc per switch of a topology (or --print the commands)",
    )
    b.add_argument("-t", "--topology", required=True, help="topology.json")
    b.add_argument(
        "--print", action="store_true", help="print the command lines (a shell script), run none"
    )
    b.add_argument(
        "--iface-format",
        default=bmv2.IFACE_FORMAT,
        help="the interface of a switch's port (default %(default)s, Mininet's names)",
    )
    b.add_argument(
        "--iface",
        action="append",
        default=[],
        metavar="SWITCH:PORT=IFNAME",
        help="the interface of one port (repeatable), e.g. s1:1=veth1",
    )
    b.add_argument(
        "--thrift-port",
        type=int,
        default=bmv2.THRIFT_BASE,
        help="thrift port of the first switch, the others the ports after it (default "
        "%(default)s); 0: free ports",
    )
    b.add_argument("--run-dir", help="logs and notifications sockets (default <topology>.bmv2)")
    b.add_argument(
        "--log-level",
        default="warn",
        choices=("trace", "debug", "info", "warn", "error", "off"),
        help="bmv2's log level (default %(default)s: info logs every packet)",
    )
    b.set_defaults(func=cmd_bmv2)
