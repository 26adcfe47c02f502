"""Run a softswitch: the pipeline, its ports and its P4Runtime server, until stopped.

    python -m inaemu.softswitch --wires 1-4            # loopback wires, gRPC 127.0.0.1:9559
    python -m inaemu.softswitch --grpc 127.0.0.1:0 --wire-dir /tmp/w --wires 1-2 --link 3=s2.1
    python -m inaemu.softswitch --name s2 --grpc 127.0.0.1:0 --wire-dir /tmp/w --link 1=s1.3
    python -m inaemu.softswitch --iface 1=s1-eth1 --iface 2=s1-eth2   # Mininet veths (root)

Loopback wires (`common.loopback`) are AF_UNIX stream connections between ends in a private
wire dir: a new one from mkdtemp, removed at exit, unless `--wire-dir` names one (made 0700 if
missing; it must be private). `--wires` gives port p the end NAME.p wired to the host end
NAME.p.host; `--link P=END` wires port P to END, e.g. another switch's port (s2.1) that links
back.

`--dataplane fast` (the default) runs the compiled data plane (softswitch/fast/), which it
loads from numba's on-disk cache, or compiles, before anything else; `--dataplane reference`
the Python pipeline (softswitch/reference.py). When everything is up it prints one line to
stdout, for scripts to wait on (`command.Ready`, which also reads it), saying which data plane
runs and how it got ready (`cache` or `compiled`, and how long that took); a host attaches with
`LoopbackWireTransport(port, wire_dir, switch_name=name)`:

    READY name=s1 grpc=127.0.0.1:9559 device_id=1 ports=1,2,3,4 dataplane=fast
          warmup=cache:0.21s wire_dir=/tmp/inaemu-wires-x1              (all on one line)

SIGINT / SIGTERM stop it cleanly. A taken address or wire end is reported in one line with
what to change. `--parent-pid PID` (what `inaemu demo` passes) stops it the same way when
process PID, its parent, ends, even killed with SIGKILL (`common.lifeline`).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from inaemu.common import args as arg
from inaemu.common.lifeline import die_with_parent
from inaemu.softswitch.command import Ready
from inaemu.softswitch.fast.dataplanes import (
    DATAPLANES,
    DEFAULT_DATAPLANE,
    make_pipeline,
    warm_up,
)
from inaemu.softswitch.p4runtime.server import P4RuntimeServer
from inaemu.softswitch.ports import AfPacketPort
from inaemu.softswitch.switch import SoftSwitch


def build_parser() -> argparse.ArgumentParser:
    ap = arg.ArgumentParser(prog="softswitch", description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="s1")
    ap.add_argument(
        "--grpc",
        type=arg.listen_address,
        default="127.0.0.1:9559",
        help="P4Runtime address (port 0 picks a free one; default %(default)s)",
    )
    ap.add_argument("--device-id", type=arg.DEVICE_ID, default=1)
    ap.add_argument(
        "--wires",
        type=arg.port_list,
        default=[],
        help="ports on loopback wires to hosts, e.g. 1-4 (ends NAME.p and NAME.p.host)",
    )
    ap.add_argument(
        "--link",
        action="append",
        default=[],
        metavar="PORT=END",
        help="wire a port to the end END in the wire dir, e.g. 5=s2.3 (switch s2's port 3)",
    )
    ap.add_argument(
        "--wire-dir",
        type=arg.wire_dir,
        default=None,
        help="directory of the wire ends (default: a new private one, removed at exit)",
    )
    ap.add_argument(
        "--iface",
        action="append",
        default=[],
        metavar="PORT=IFNAME",
        help="attach a port to a network interface with AF_PACKET (root)",
    )
    ap.add_argument("--seed", type=arg.SEED, default=0, help="loss-injection seed")
    ap.add_argument(
        "--dataplane",
        choices=DATAPLANES,
        default=DEFAULT_DATAPLANE,
        help="fast: compiled (numba); reference: the Python pipeline (default %(default)s)",
    )
    ap.add_argument(
        "--preconfigured",
        action="store_true",
        help="install the committed P4Info at start (no pipeline push needed)",
    )
    ap.add_argument(
        "--parent-pid",
        type=arg.Integer(1, 2**31 - 1, "a process id"),
        default=None,
        metavar="PID",
        help="stop when process PID, the one that started this switch, ends",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        links = [_port_spec(spec, "--link", "PORT=END (e.g. 5=s2.3)") for spec in args.link]
        ifaces = [_port_spec(spec, "--iface", "PORT=IFNAME") for spec in args.iface]
    except ValueError as exc:
        print(f"softswitch: {exc}", file=sys.stderr)
        return 2
    if arg.parse_only("softswitch"):
        return 0
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if args.parent_pid is not None:
        die_with_parent(args.parent_pid)
    dataplane = warm_up(args.dataplane)  # the fast one compiles (or loads) now, first
    pipeline = make_pipeline(args.dataplane, seed=args.seed)
    switch = SoftSwitch(pipeline, name=args.name, wire_dir=args.wire_dir)
    try:
        if args.wires:
            switch.add_loopback_wires(args.wires)
        for port, end in links:
            switch.add_link(port, end)
        for port, ifname in ifaces:
            switch.add_port(port, AfPacketPort(ifname))
    except (OSError, ValueError) as exc:
        print(f"softswitch: {_message(exc)}", file=sys.stderr)
        switch.stop()
        return 2
    server = P4RuntimeServer(
        switch.pipeline,
        address=args.grpc,
        device_id=args.device_id,
        preconfigured=args.preconfigured,
    )
    try:
        server.start()
    except OSError as exc:
        print(f"softswitch: {exc.strerror or exc} (pick another --grpc port)", file=sys.stderr)
        switch.stop()
        return 2
    switch.start()
    ready = Ready.make(
        name=args.name,
        grpc=server.address,
        device_id=args.device_id,
        ports=switch.ports,
        dataplane=dataplane,
        wire_dir=switch.wire_dir if args.wires or args.link else None,
    )
    if not stop.is_set():  # else stopped while starting: no READY, the same clean stop
        print(ready.line(), flush=True)
    reported = (0, 0)
    try:
        while not stop.wait(0.5):
            if switch.error is not None:
                print(f"softswitch: data plane failed: {switch.error!r}", file=sys.stderr)
                return 1
            reported = _report_port_drops(args.name, switch, reported)
    finally:
        server.stop(grace=1.0)
        switch.stop()
        _report_port_drops(args.name, switch, reported)
    return 0


def _report_port_drops(name: str, switch: SoftSwitch, before: tuple[int, int]) -> tuple[int, int]:
    """Frames lost at the ports, outside the pipeline and its counters, on stderr whenever the
    totals grow: sent to a port with no room (the peer's queue full, or no peer) and received
    from a sender that is not the port's peer."""
    now = (switch.tx_dropped, switch.rx_foreign)
    if now != before:
        print(
            f"softswitch {name}: port drops so far: {now[0]} frames found no room at a port "
            f"(tx_dropped), {now[1]} frames from a foreign sender (rx_foreign)",
            file=sys.stderr,
            flush=True,
        )
    return now


def _port_spec(spec: str, option: str, form: str) -> tuple[int, str]:
    port, sep, what = spec.partition("=")
    if not sep or not port.isdigit() or not what:
        raise ValueError(f"{option} wants {form}, got {spec!r}")
    try:
        return arg.SWITCH_PORT(port), what
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"{option} {spec}: {exc}") from None


def _message(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)


if __name__ == "__main__":
    raise SystemExit(main())
