"""`inaemu schedule`: host-collective schedules on a topology, checked and measured.

    inaemu schedule --topo SPEC|FILE [--topo ...]
                    [--algo ring|hd|hdrm|multitree|ps|ring2d|dtree|all] [--size BYTES]
                    [--workers h1,h2,...] [--node-ports all|1] [--bw MBIT] [--alpha US]
                    [-o schedule.json]

Prints the checker's table (`check.py`), one row per algorithm and topology; with `--algo
all`, the algorithms that do not run on a topology are listed under it with the reason.
`--node-ports` is the node model of a torus or mesh (`routes`); `--bw` and `--alpha` the
alpha-beta model behind the `model s` column. `-o` writes the schedule (one algorithm, one
topology) as JSON (`Schedule.save`). Bad input is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inaemu.collectives.algorithms import ALGORITHMS, algorithm, topology_kind
from inaemu.collectives.check import LinkModel, check, render_table, table_row
from inaemu.collectives.schedule import ScheduleError
from inaemu.common import args as arg
from inaemu.common.args import ArgumentParser, ParseOnly, checks_done, parse_only
from inaemu.topology.builders import describe_roles, load_or_build
from inaemu.topology.model import TopologyError
from inaemu.topology.routes import NODE_PORTS, FlowRoutes

DEFAULT_SIZE = 100_000_000  # bytes: a ResNet-50-sized gradient in float32
# the checker's work grows with the square of the ranks (and more): 256 take seconds
MAX_RANKS = 256
DEFAULT_BW = 10_000.0  # Mbit/s of one network link in the alpha-beta model (10 GbE)
DEFAULT_ALPHA = 10.0  # microseconds every step costs on top of its bytes


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(
        prog="inaemu schedule",
        description="host-collective allreduce schedules on a topology: checked (every rank "
        "ends with every rank's contribution once) and measured (steps, bytes per host, "
        "flows per link per step, link-bytes)",
    )
    ap.add_argument(
        "--topo",
        required=True,
        action="append",
        help="a topology file or a spec: star:8, leaf-spine:2x2x4, fat-tree:4, bigraph:4x8, "
        "torus:4x4, mesh:3x3 (repeat it for one table of several)",
    )
    ap.add_argument(
        "--algo",
        default="all",
        help=f"{', '.join(ALGORITHMS)} or all (default %(default)s)",
    )
    ap.add_argument(
        "--size",
        type=arg.MODEL_BYTES,
        default=DEFAULT_SIZE,
        help="bytes of the array each host all-reduces (default %(default)s)",
    )
    ap.add_argument(
        "--workers",
        help="comma-separated hosts in rank order (default: every host, in each algorithm's "
        "own order)",
    )
    ap.add_argument(
        "--node-ports",
        choices=NODE_PORTS,
        default=NODE_PORTS[0],
        help="torus and mesh nodes: all = a node drives all its network links at once, its "
        "host link carries their bandwidth together (MULTITREE's setting, the default); 1 = "
        "one interface, its host link, contended like a NIC",
    )
    ap.add_argument(
        "--bw",
        type=arg.MODEL_MBIT,
        default=DEFAULT_BW,
        help="Mbit/s of one network link in the alpha-beta model (default %(default)g)",
    )
    ap.add_argument(
        "--alpha",
        type=arg.MICROSECONDS,
        default=DEFAULT_ALPHA,
        help="microseconds every step costs on top of its bytes in the alpha-beta model "
        "(default %(default)g)",
    )
    ap.add_argument("-o", "--output", help="write the schedule (one algorithm) as JSON")
    return ap


def run(args: argparse.Namespace) -> None:
    names = list(ALGORITHMS) if args.algo == "all" else [algorithm(args.algo).name]
    if args.output and (len(names) > 1 or len(args.topo) > 1):
        raise ScheduleError("-o writes one schedule: choose one --algo and one --topo")
    hosts = None
    if args.workers is not None:
        hosts = [h.strip() for h in args.workers.split(",") if h.strip()]
    topologies = [(_label(text), load_or_build(text)) for text in args.topo]
    for label, topo in topologies:
        ranks = len(hosts) if hosts is not None else len(topo.hosts)
        if ranks > MAX_RANKS:
            raise ScheduleError(
                f"{label}: {ranks:,} ranks; the checker takes at most {MAX_RANKS} (choose "
                "--workers, or a smaller topology)"
            )
    checks_done()
    model = LinkModel(bw=args.bw * 1e6 / 8, alpha=args.alpha * 1e-6)
    rows, skipped = [], []
    schedule = None
    for label, topo in topologies:
        routes = FlowRoutes(topo, args.node_ports)
        for name in names:
            algo = ALGORITHMS[name]
            try:
                schedule = algo.schedule(topo, hosts, node_ports=args.node_ports)
            except ScheduleError as exc:
                if len(names) == 1:
                    raise
                skipped.append(f"  {label}: {exc}")
                continue
            measures = check(
                schedule,
                topo,
                args.size,
                topology=label,
                promised=algo.promises(topo),
                routes=routes,
                model=model,
            )
            rows.append(table_row(measures))
    for label, topo in topologies:
        n = len(topo.switches)
        print(
            f"{label}: {topology_kind(topo)}, {n} {'switch' if n == 1 else 'switches'} "
            f"({describe_roles(topo)}), {len(topo.hosts)} hosts"
        )
    print(f"array of {args.size:,} bytes per host")
    if any(topology_kind(topo) in ("torus", "mesh") for _, topo in topologies):
        print(f"torus and mesh nodes: {_NODE_MODEL[args.node_ports]} (--node-ports)")
    print(
        f"model s: alpha-beta, every step {args.alpha:g} us plus its busiest link's bytes at "
        f"{args.bw:g} Mbit/s per network link"
    )
    print(render_table(rows))
    if skipped:
        print("not run:")
        print("\n".join(skipped))
    if args.output and schedule is not None:
        try:
            schedule.save(args.output)
        except OSError as exc:
            raise ScheduleError(f"cannot write {args.output}: {exc.strerror or exc}") from None
        print(
            f"wrote {args.output}: {schedule.algo}, {schedule.n_ranks} ranks, "
            f"{schedule.n_chunks} chunks, {len(schedule.steps)} steps"
        )


_NODE_MODEL = {
    "all": "all network ports at once, the host link carries their bandwidth together",
    "1": "one interface, the host link, contended like a NIC",
}


def _label(text: str) -> str:
    """A topology's name in the table: its spec, or its file's name."""
    return text if ":" in text and not Path(text).exists() else Path(text).name


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except ParseOnly:
        parse_only("inaemu schedule")
    except (TopologyError, ScheduleError, ValueError) as exc:
        print(f"inaemu schedule: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninaemu schedule: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
