"""Run a softswitch: the pipeline, its ports and its P4Runtime server, until stopped.

    python -m softswitch --wires 1-4                       # loopback wires, gRPC 127.0.0.1:9559
    python -m softswitch --grpc 127.0.0.1:0 --wires 1-8 --wire-base 41000
    python -m softswitch --iface 1=s1-eth1 --iface 2=s1-eth2   # Mininet veths (root)

When everything is up it prints one line to stdout, for scripts to wait on:

    READY name=s1 grpc=127.0.0.1:9559 device_id=1 ports=1,2,3,4 wire_base=40000

SIGINT / SIGTERM stop it cleanly. Port conflicts are reported with what to change.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from inaemu.softswitch.p4runtime.server import P4RuntimeServer
from inaemu.softswitch.ports import DEFAULT_WIRE_BASE, AfPacketPort, PortInUseError
from inaemu.softswitch.switch import SoftSwitch


def parse_ports(text: str) -> list[int]:
    """'1-4,7' -> [1, 2, 3, 4, 7]"""
    ports: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            ports += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad port list {text!r}: use e.g. 1-4,7") from None
    return ports


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="softswitch", description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="s1")
    ap.add_argument(
        "--grpc",
        default="127.0.0.1:9559",
        help="P4Runtime address (port 0 picks a free one; default %(default)s)",
    )
    ap.add_argument("--device-id", type=int, default=1)
    ap.add_argument(
        "--wires",
        type=parse_ports,
        default=[],
        help="ports on loopback wires, e.g. 1-4 (UDP wire-base + 2p, peer + 1)",
    )
    ap.add_argument("--wire-base", type=int, default=DEFAULT_WIRE_BASE)
    ap.add_argument(
        "--iface",
        action="append",
        default=[],
        metavar="PORT=IFNAME",
        help="attach a port to a network interface with AF_PACKET (root)",
    )
    ap.add_argument("--seed", type=int, default=0, help="loss-injection seed")
    ap.add_argument(
        "--preconfigured",
        action="store_true",
        help="install the committed P4Info at start (no pipeline push needed)",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    switch = SoftSwitch(name=args.name)
    switch.pipeline.seed = args.seed
    try:
        switch.add_loopback_wires(args.wires, base=args.wire_base)
        for spec in args.iface:
            port, sep, ifname = spec.partition("=")
            if not sep or not port.isdigit():
                raise SystemExit(f"softswitch: --iface wants PORT=IFNAME, got {spec!r}")
            switch.add_port(int(port), AfPacketPort(ifname))
    except PortInUseError as exc:
        print(f"softswitch: {exc.strerror}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"softswitch: {exc.strerror or exc}", file=sys.stderr)
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
        for port in switch.ports.values():
            port.close()
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    switch.start()
    ports = ",".join(str(p) for p in sorted(switch.ports))
    print(
        f"READY name={args.name} grpc={server.address} device_id={args.device_id} "
        f"ports={ports} wire_base={args.wire_base}",
        flush=True,
    )
    try:
        while not stop.wait(0.5):
            if switch.error is not None:
                print(f"softswitch: data plane failed: {switch.error!r}", file=sys.stderr)
                return 1
    finally:
        server.stop(grace=1.0)
        switch.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
