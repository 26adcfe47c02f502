"""`inaemu`: the command line (the console script's entry point, also `python -m inaemu.cli`).
Each subcommand lives in its own module; this one dispatches, holds the demo's options, and
turns every expected failure into one line, `inaemu CMD: ...`, and a non-zero exit.

    inaemu demo [--workers 4] [--size 2000000] [--codec fixedpoint] [--loss 0.01] ...
    inaemu demo --topo leaf-spine:2x2x2 --algo all      # INA vs host collectives, one table
    inaemu softswitch --wires 1-4 [--grpc 127.0.0.1:9559]  (python -m inaemu.softswitch)
    inaemu conformance [--target softswitch[:fast|:reference]|bmv2|all] [--cases DIR] [-k NAME]
    inaemu mininet --topo star:4|leaf-spine:2x2x2 [--switch softswitch|bmv2] [--algo ina] ...
    inaemu topo star|leaf-spine|fat-tree|bigraph|torus|mesh ... [--program F] -o topology.json
    inaemu topo leaf-spine:2x2x4|bigraph:4x4|fat-tree:4|torus:4x4|mesh:3x3|star:4 -o t.json
        [--grpc HOST:PORT] [--grpc SWITCH=HOST:PORT] [--device-id N] [--device-id SWITCH=N]
    inaemu bmv2 -t topology.json [--print] [--iface-format '{switch}-eth{port}'] ...
    inaemu topo show -t topology.json -o topology.svg   (or .png, .pdf; needs inaemu[draw])
    inaemu pipeline push  -t topology.json [--device-config F] [--force]
    inaemu pipeline check -t topology.json
    inaemu job add    -t topology.json --job 1 --workers h1,h2,h3 [--pool 64] [--trees 0]
    inaemu job remove -t topology.json --job 1
    inaemu job list   -t topology.json
    inaemu job new-run -t topology.json --job 1        # prints a run id for the job's next run
    inaemu routes     -t topology.json
    inaemu loss       -t topology.json --switch s1 --ports 1-4 --probability 0.01
    inaemu stats      -t topology.json
    inaemu schedule --topo torus:4x4|FILE [--algo ring|ring2d|multitree|...|all] [-o s.json]
    inaemu sim --topo torus:8x8 --algo ina [--size 256K] [--rate 100G] ...
    inaemu train [--backend all] [--workers 4] [--topo ...] [--mininet] SCRIPT [SCRIPT ARGS]
    inaemu train --example FILE        # writes the example training script (train_ddp.py)
    inaemu cluster init --machine m1,ip=10.0.0.1,mac=...,port=1,iface=eth1,ranks=2 ... -o DIR
    inaemu cluster setup -c DIR/cluster.json     # on each machine (root): ARP entries, checks

With INAEMU_PARSE_ONLY=1 every command checks its arguments and the files they name, says so
in one line and stops before it does anything (`common/args.py`, `parse_only`).

`demo` (and its comparison, `--algo`): `demo.py`, `compare.py`; `softswitch`, `conformance`,
`mininet`: the softswitch's, conformance's and Mininet's own command lines; `topo`: `topo.py`;
`bmv2`: `bmv2.py`; `cluster`: `cluster.py`; `pipeline`, `job`, `routes`, `loss`, `stats`:
`controller.py` (which says what they keep between runs); `schedule`: `schedule.py`; `train`:
`train/launcher.py`.
"""

from __future__ import annotations

import argparse
import sys

import finsy as fy

from inaemu.cli import bmv2, controller, topo
from inaemu.cli.demo_options import (
    TOPO_SIZE,
    DemoError,
    DemoOptions,
    demo_topology,
    parse_algos,
)
from inaemu.common import args as arg
from inaemu.controller import api
from inaemu.controller.bmv2 import Bmv2Error
from inaemu.controller.jobs import JobError
from inaemu.controller.p4rt import ControllerError
from inaemu.hostlib.collective.wire_peers import MAX_MTU, MIN_MTU
from inaemu.runs.footprint import OVERRIDE, check_fits, demo_parts
from inaemu.softswitch.fast.dataplanes import DATAPLANES, DEFAULT_DATAPLANE
from inaemu.topology.draw import DrawError
from inaemu.topology.model import TopologyError
from inaemu.topology.routes import NODE_PORTS

# The demo runs every switch and every worker as a process on this machine, and holds every
# worker's array: more than this is refused before anything starts.
DEMO_PROCESSES = 64  # switch processes, and worker processes
DEMO_ELEMENTS = arg.MAX_ELEMENTS  # elements of all workers together (1 GiB of float32)


def _check_demo_size(
    topo_text: str | None,
    workers: int,
    size: int,
    *,
    memory_check: bool = True,
    comparison: bool = False,
) -> None:
    """Refuse a demo larger than `DEMO_PROCESSES` and `DEMO_ELEMENTS` allow, or than this
    machine's memory holds (`runs.footprint`; unless `memory_check` is off)."""
    switches = 1
    if topo_text:
        try:
            topo = demo_topology(topo_text)
        except DemoError as exc:
            raise ValueError(str(exc)) from None
        if len(topo.switches) > DEMO_PROCESSES:
            raise ValueError(
                f"--topo {topo_text} has {len(topo.switches):,} switches; the demo runs one "
                f"process per switch, at most {DEMO_PROCESSES}"
            )
        workers = workers or len(topo.hosts)
        switches = len(topo.switches)
    if workers > DEMO_PROCESSES:
        raise ValueError(
            f"{workers:,} workers; the demo runs one process per worker, at most "
            f"{DEMO_PROCESSES}: choose --workers"
        )
    if workers * size > DEMO_ELEMENTS:
        raise ValueError(
            f"{workers} workers x --size {size:,} is {workers * size:,} elements; the demo "
            f"holds at most {DEMO_ELEMENTS:,} (1 GiB of float32) in all"
        )
    if memory_check:
        what = f"a demo on {topo_text}" if topo_text else "the demo"
        hint = "choose a smaller --topo, fewer --workers or a smaller --size"
        # one switch: each worker checks its own result; else the demo checks them all
        parts = demo_parts(switches, workers, size, workers_check=not (topo_text or comparison))
        check_fits(what, parts, hint=hint)


def cmd_demo(args: argparse.Namespace) -> int:
    topo = args.topo
    workers = args.workers if args.workers is not None else (0 if topo else 4)
    size = args.size if args.size is not None else (TOPO_SIZE if topo or args.algo else 2_000_000)
    if not topo and args.trees not in (0, 1):
        raise ValueError("--trees needs --topo (one switch has one tree)")
    if not args.algo and (args.sizes or args.repeat != 1 or args.run_dir):
        raise ValueError("--sizes, --repeat and --run-dir are for the comparison (--algo)")
    if args.sizes and args.size is not None:
        raise ValueError("give --size or --sizes, not both")
    sizes = tuple(args.sizes or ())
    _check_demo_size(
        topo,
        workers,
        max(sizes, default=size),
        memory_check=args.memory_check,
        comparison=bool(args.algo),
    )
    opts = DemoOptions(
        workers=workers,
        size=size,
        codec=args.codec,
        density=args.density,
        loss=args.loss,
        window=args.window,
        wire_dir=args.wire_dir,
        grpc_port=args.grpc_port,
        seed=args.seed,
        progress=not args.no_progress,
        timeout=args.timeout,
        topo=topo,
        trees=args.trees,
        algos=parse_algos(args.algo) if args.algo else (),
        mtu=args.mtu,
        node_ports=args.node_ports,
        sizes=sizes,
        repeat=args.repeat,
        run_dir=args.run_dir,
        dataplane=args.dataplane,
    )
    # imported here: the demo's modules load the host library's compiled kernels, which no
    # other command needs (nor a user without a writable cache for them)
    if opts.algos:  # the comparison of INA and the host collectives
        from inaemu.cli.compare import main_compare

        return main_compare(opts)
    from inaemu.cli.demo import main_demo

    return main_demo(opts)


def build_parser() -> argparse.ArgumentParser:
    ap = arg.ArgumentParser(prog="inaemu", description="in-network aggregation emulator")
    sub = ap.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="an emulated allreduce on the embedded softswitch")
    d.add_argument(
        "--topo",
        help="many switches: a compact spec (leaf-spine:2x2x4, bigraph:4x4, fat-tree:4, "
        "torus:3x3, mesh:3x3, star:4) or a topology file; default one switch",
    )
    d.add_argument(
        "--workers",
        type=arg.positive("workers", DEMO_PROCESSES),
        default=None,
        help="workers (default 4, at most 32 on one switch; with --topo every host)",
    )
    d.add_argument(
        "--size",
        type=arg.ELEMENTS,
        default=None,
        help=f"float32 elements per worker (default 2,000,000; with --topo {TOPO_SIZE:,})",
    )
    d.add_argument(
        "--trees",
        type=arg.TREES,
        default=0,
        help="with --topo: aggregation trees (default 0: one per root candidate; 1: one tree)",
    )
    d.add_argument(
        "--codec",
        default="fixedpoint",
        help="fixedpoint, sketch, sketch-compact or int32 (default %(default)s)",
    )
    d.add_argument("--density", type=arg.DENSITY, default=1.0, help="fraction of non-zero elements")
    d.add_argument(
        "--loss",
        type=arg.LossRate(0.0, 1.0, "a probability", hi_open=True, note="1 would drop everything"),
        default=0.0,
        help="injected loss probability per port, below 1",
    )
    d.add_argument(
        "--window",
        type=arg.WINDOW,
        default=DemoOptions.window,
        help=f"chunks in flight (= slot pool; default {DemoOptions.window})",
    )
    d.add_argument(
        "--wire-dir",
        type=arg.wire_dir,
        default=None,
        help="directory of the loopback wires (default: a new one)",
    )
    d.add_argument("--grpc-port", type=arg.TCP_PORT, default=0, help="P4Runtime port (0: any free)")
    d.add_argument("--seed", type=arg.SEED, default=1)
    d.add_argument(
        "--timeout",
        type=arg.SECONDS,
        default=30.0,
        help="seconds without progress before a worker gives up",
    )
    d.add_argument("--no-progress", action="store_true")
    d.add_argument(
        "--algo",
        help="compare on the same network, one after the other: ina,ring,hd,hdrm,multitree,"
        "ps,ring2d,dtree (a list) or all, each host collective in its own rank order; every result "
        "verified, one table (cli/compare.py)",
    )
    d.add_argument(
        "--node-ports",
        choices=NODE_PORTS,
        default=NODE_PORTS[0],
        help="with --algo on a torus or mesh: the node model the schedules are built for "
        "(all: a node drives all its network links at once, the default; 1: one interface)",
    )
    d.add_argument(
        "--mtu",
        type=arg.Integer(MIN_MTU, MAX_MTU, "IPv4 packet bytes"),
        default=1500,
        help="with --algo: IPv4 packet bytes of the host collectives' frames (default 1500)",
    )
    d.add_argument(
        "--sizes",
        type=arg.element_list,
        default=None,
        metavar="LIST",
        help="with --algo: several sizes, e.g. 64K,256K (elements; K, M = 2^10, 2^20): every "
        "algorithm at each, and completion.png (time against size) in the run dir",
    )
    d.add_argument(
        "--repeat",
        type=arg.REPEATS,
        default=1,
        help="with --algo: runs of every algorithm at every size; the table and the plot "
        "show the median and the spread (default 1)",
    )
    d.add_argument(
        "--run-dir",
        default=None,
        help="with --algo: where summary.json, completion.png and the switches' logs go "
        "(default: a new folder under the temp dir)",
    )
    d.add_argument(
        "--dataplane",
        choices=DATAPLANES,
        default=DEFAULT_DATAPLANE,
        help="the softswitches' data plane: fast (compiled) or reference (Python); "
        "default %(default)s",
    )
    d.add_argument(
        OVERRIDE,
        dest="memory_check",
        action="store_false",
        help="start the demo even if it needs more memory than this machine has available "
        "(the estimate: docs/user-guide.md)",
    )
    d.set_defaults(func=cmd_demo)

    s = sub.add_parser(
        "softswitch", help="run a softswitch (see python -m inaemu.softswitch -h)", add_help=False
    )
    s.set_defaults(func=None)

    sub.add_parser(
        "conformance",
        help="run the packet-level conformance cases on the softswitch or bmv2 "
        "(see inaemu conformance -h)",
        add_help=False,
    ).set_defaults(func=None)

    sub.add_parser(
        "mininet",
        help="an allreduce scenario on a Mininet network (root; see inaemu mininet -h)",
        add_help=False,
    ).set_defaults(func=None)

    sub.add_parser(
        "sim",
        help="allreduce algorithms on a network simulated with ns-3: the same pipeline and "
        "protocols in simulated time (see inaemu sim -h)",
        add_help=False,
    ).set_defaults(func=None)

    sub.add_parser(
        "schedule",
        help="host-collective schedules (ring, hd, hdrm, multitree, ps, ring2d, dtree) on a "
        "topology, checked "
        "and measured (see inaemu schedule -h)",
        add_help=False,
    ).set_defaults(func=None)

    sub.add_parser(
        "train",
        help="run a DDP training script on the emulated network once per backend (INA, the "
        "ring with INCEPTIONN, gloo) and plot the curves (see inaemu train -h)",
        add_help=False,
    ).set_defaults(func=None)

    topo.add_parser(sub)
    sub.add_parser(
        "cluster",
        help="machines that torchrun starts, aggregated by one switch: init, setup "
        "(see inaemu cluster -h)",
        add_help=False,
    ).set_defaults(func=None)
    bmv2.add_parser(sub)
    controller.add_parsers(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["softswitch"]:
        from inaemu.softswitch.__main__ import main as softswitch_main

        return softswitch_main(argv[1:])
    if argv[:1] == ["conformance"]:
        from inaemu.conformance.run import main as conformance_main

        return conformance_main(argv[1:])
    if argv[:1] == ["mininet"]:
        from inaemu.mininet.run import main as mininet_main

        return mininet_main(argv[1:])
    if argv[:1] == ["sim"]:
        from inaemu.sim.run import main as sim_main

        return sim_main(argv[1:])
    if argv[:1] == ["schedule"]:
        from inaemu.cli.schedule import main as schedule_main

        return schedule_main(argv[1:])
    if argv[:1] == ["cluster"]:
        from inaemu.cli.cluster import main as cluster_main

        return cluster_main(argv[1:])
    if argv[:1] == ["train"]:
        from inaemu.cli.train.launcher import main as train_main

        return train_main(argv[1:])
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # named after the command, not after `inaemu` as argparse would
        print(
            f"inaemu {args.command}: unrecognized arguments: {' '.join(unknown)}", file=sys.stderr
        )
        return 2
    try:
        result = args.func(args)
    except arg.ParseOnly:  # INAEMU_PARSE_ONLY=1: every check passed, nothing was done
        arg.parse_only(f"inaemu {args.command}")
        return 0
    except KeyboardInterrupt:
        print(f"\ninaemu {args.command}: interrupted", file=sys.stderr)
        return 130
    except (TopologyError, JobError, ControllerError, DrawError, Bmv2Error, ValueError) as exc:
        return _failed(args.command, str(exc))
    # expected failures the commands do not name themselves: a file or socket problem, a
    # switch refusing a request outside the controller's own checks
    except (OSError, fy.P4ClientError) as exc:
        return _failed(args.command, api.explain(exc))
    return int(result or 0)


def _failed(command: str, message: str) -> int:
    print(f"inaemu {command}: {message}", file=sys.stderr)
    return 1
