"""`inaemu`: the command line.

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
    inaemu schedule --topo torus:4x4|FILE [--algo ring|hd|hdrm|multitree|ps|all] [-o s.json]
    inaemu train examples/train_ddp.py [--backend all] [--workers 4] [--topo ...] [--mininet]

Only `pipeline push` changes a switch's pipeline; every other command checks that each switch
runs ina.p4 and stops with what to run if not. Job commands keep what they installed in a
state file (default: next to the topology, `<topology>.jobs.json`), so a later command knows
the slot pools and groups in use, and the run ids issued to each job's workers (`job new-run`
never issues one twice for an installation).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import fcntl
import json
import shutil
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import finsy as fy

from inaemu.collectives.routes import NODE_PORTS
from inaemu.controller import bmv2
from inaemu.controller.compare import parse_algos
from inaemu.controller.demo import TOPO_SIZE, DemoError, DemoOptions, demo_topology, main_demo
from inaemu.controller.draw import DrawError
from inaemu.controller.jobs import (
    MAX_EPOCH,
    MAX_MGID,
    JobError,
    JobManager,
    JobRecord,
    JobSpec,
    Placement,
)
from inaemu.controller.model import loss_threshold
from inaemu.controller.p4rt import Controller, ControllerError, PipelineFiles
from inaemu.controller.topology import (
    SPEC_FORMS,
    Integer,
    Items,
    Named,
    Record,
    Text,
    Topology,
    TopologyError,
    assign_devices,
    bigraph,
    describe_roles,
    fat_tree,
    from_spec,
    leaf_spine,
    load_or_build,
    mesh,
    read_json,
    star,
    torus,
)
from inaemu.hostlib import args as arg
from inaemu.hostlib.collective.wire_peers import MAX_MTU, MIN_MTU
from inaemu.hostlib.wire import MAX_RUN
from inaemu.mininet.compare import REPEATS, parse_sizes
from inaemu.p4.constants import INA_SLOTS
from inaemu.softswitch.fast.dataplanes import DATAPLANES, DEFAULT_DATAPLANE


def _state_path(args: argparse.Namespace) -> Path:
    return Path(args.state) if args.state else Path(str(args.topology) + ".jobs.json")


_EPOCHS = Named("switch", Integer(0, MAX_EPOCH))
_POOLS = Named(
    "switch",
    Items(Integer(0, INA_SLOTS), "pool #{}".format, lo=2, hi=2, what="a [base, size] pool"),
)
_MGIDS = Items(Named("switch", Integer(1, MAX_MGID)), "tree #{}".format)
_STATE_SCHEMA = Record(
    {
        "jobs": Items(
            Record(
                {
                    "job_id": Integer(0, 2**16 - 1),
                    "workers": Items(Text(), "worker #{}".format),
                    "pool_size": Integer(1, 2**32 - 1),
                    "n_trees": Integer(1, 2**32 - 1),
                    "roots": Items(Text(), "root #{}".format),
                    "pools": _POOLS,
                    "mgids": _MGIDS,
                    "epochs": _EPOCHS,
                    "last_run": Integer(0, MAX_RUN),
                },
                frozenset(
                    {"job_id", "workers", "pool_size", "n_trees", "pools", "mgids", "epochs"}
                ),
            ),
            "job #{}".format,
            in_place=True,
        ),
        "epochs": _EPOCHS,
    },
    frozenset({"jobs", "epochs"}),
)


@dataclass
class JobState:
    """What the job commands keep between runs: the installed jobs with where each lives (slot
    pools, multicast groups, epochs: so later commands plan exactly what the switches hold),
    and the last epoch issued per switch (so a new installation always gets a new one), and the
    last run id issued to each job (`JobRecord.last_run`; absent in older files: none)."""

    jobs: list[tuple[JobSpec, Placement]]
    epochs: dict[str, int]
    last_runs: dict[int, int] = dataclasses.field(default_factory=dict)


def _load_state(path: Path) -> JobState:
    if not path.exists():
        return JobState([], {}, {})
    try:
        raw = read_json(path, "job state file")
        _STATE_SCHEMA(raw, (str(path),))
    except TopologyError as exc:
        raise ControllerError(f"{exc}; delete it if the switches were restarted") from None
    return JobState(
        [
            (
                JobSpec(
                    j["job_id"],
                    tuple(j["workers"]),
                    j["pool_size"],
                    j["n_trees"],
                    tuple(j.get("roots", ())),
                ),
                Placement(
                    {sw: (base, size) for sw, (base, size) in j["pools"].items()},
                    {(sw, t): m for t, tree in enumerate(j["mgids"]) for sw, m in tree.items()},
                    dict(j["epochs"]),
                ),
            )
            for j in raw["jobs"]
        ],
        dict(raw["epochs"]),
        {j["job_id"]: j.get("last_run", 0) for j in raw["jobs"]},
    )


def _save_state(path: Path, jobs: JobManager) -> None:
    text = json.dumps(
        {
            "jobs": [
                {
                    "job_id": r.spec.job_id,
                    "workers": list(r.spec.workers),
                    "pool_size": r.spec.pool_size,
                    "n_trees": r.spec.n_trees,
                    "roots": list(r.spec.roots),
                    "pools": {sw: list(pool) for sw, pool in sorted(r.pools.items())},
                    "mgids": [
                        {sw: m for (sw, t), m in sorted(r.mgids.items()) if t == tree}
                        for tree in range(len(r.trees))
                    ],
                    "epochs": r.epochs,
                    "last_run": r.last_run,
                }
                for _, r in sorted(jobs.jobs.items())
            ],
            "epochs": jobs.epochs,
        },
        indent=2,
    )
    try:
        path.write_text(text + "\n")
    except OSError as exc:
        raise ControllerError(
            f"{path}: cannot save the job state ({exc.strerror or exc}); the switches have "
            "the change, but later commands will not know it: use --state to choose a "
            "writable file"
        ) from None


def _controller(args: argparse.Namespace) -> tuple[Controller, list[JobSpec]]:
    """The topology, the installed jobs and a controller that knows them, not connected:
    bad input is refused before any switch is touched."""
    topo = Topology.load(args.topology)
    path = _state_path(args)
    state = _load_state(path)
    files = PipelineFiles()
    if args.device_config:
        config = Path(args.device_config)
        if not config.exists():
            raise ControllerError(
                f"--device-config {config}: no such file (build bmv2's JSON with "
                "`make -C p4`, or leave the option out for softswitches)"
            )
        if not config.is_file():
            raise ControllerError(f"--device-config {config}: is not a file")
        files = PipelineFiles(device_config=config)
    push = getattr(args, "command", "") == "pipeline" and args.action == "push"
    ctl = Controller(topo, pipeline=files, push_pipeline=push, force_push=push and bool(args.force))
    for spec, placed in state.jobs:  # replay: the same plans, nothing written
        try:
            ctl.jobs.commit_add(ctl.jobs.plan_add(spec, placed=placed))
        except JobError as exc:
            raise ControllerError(
                f"{path}: job {spec.job_id} does not fit the topology ({exc}); "
                "delete the file if the switches were restarted"
            ) from None
    try:
        ctl.jobs.restore_epochs(state.epochs)
    except JobError as exc:
        raise ControllerError(f"{path}: {exc}; delete it if the switches were restarted") from None
    for job_id, last_run in state.last_runs.items():
        ctl.jobs.jobs[job_id].last_run = last_run
    return ctl, [spec for spec, _ in state.jobs]


@contextmanager
def _state_locked(path: Path) -> Iterator[None]:
    """Hold the job state file (if there is one) against other job commands: two of them at
    once read it before either writes, and `job new-run` would issue one run id twice."""
    if not path.exists():
        yield
        return
    with path.open("rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _run(
    ctl: Controller,
    specs: list[JobSpec],
    body: Callable[[Controller, list[JobSpec]], Awaitable[None]],
) -> None:
    async def connected() -> None:
        await ctl.connect()
        try:
            await body(ctl, specs)
        finally:
            await ctl.close()

    asyncio.run(connected())


def _with_controller(
    args: argparse.Namespace, body: Callable[[Controller, list[JobSpec]], Awaitable[None]]
) -> None:
    _run(*_controller(args), body)


def cmd_job(args: argparse.Namespace) -> None:
    with _state_locked(_state_path(args)):
        _cmd_job(args)


def _cmd_job(args: argparse.Namespace) -> None:
    spec = JobSpec(args.job, args.workers, args.pool, args.trees, args.roots)

    async def body(ctl: Controller, specs: list[JobSpec]) -> None:
        path = _state_path(args)
        if args.action == "add":
            record = await ctl.add_job(spec)
            _save_state(path, ctl.jobs)
            print(describe_trees(record))
            for sw in record.switches:
                base, size = record.pools[sw]
                roles = ", ".join(
                    "root" if t[sw].is_root else f"up port {t[sw].parent_port}"
                    for t in record.trees
                    if sw in t
                )
                print(f"job {spec.job_id}: {sw} slots [{base}, {base + size}) ({roles})")
            print(
                f"job {spec.job_id}: each run of its workers takes a new run id: "
                f"inaemu job new-run -t {args.topology} --job {spec.job_id}"
                + (f" --state {args.state}" if args.state else "")
            )
        else:  # a switch that lost the job (restarted) has nothing to delete: not an error
            lacking = await ctl.remove_job(args.job, gone_ok=True)
            _save_state(path, ctl.jobs)
            lost = f" ({', '.join(lacking)} had lost some or all of it: restarted?)"
            print(f"job {args.job} removed" + (lost if lacking else ""))

    ctl, specs = _controller(args)
    if args.action == "list":  # the state file is the answer: no switch needed
        for s in specs:
            record = ctl.jobs.jobs[s.job_id]
            print(
                f"job {s.job_id}: workers {','.join(s.workers)} pool {s.pool_size} "
                f"trees {s.n_trees} (roots {','.join(record.roots)}; at most "
                f"{record.max_trees_per_link} per link)"
            )
        return
    if args.action == "new-run":  # the state file alone: no switch needed
        run = ctl.jobs.next_run(args.job)
        _save_state(_state_path(args), ctl.jobs)
        print(run)
        return
    # plans are pure: a job that cannot be added or removed is refused before connecting
    if args.action == "add":
        ctl.jobs.plan_add(spec)
    else:
        ctl.jobs.plan_remove(args.job)
    _run(ctl, specs, body)


def describe_trees(record: JobRecord) -> str:
    """What `job add` says about a job's trees: the roots, the most trees on one link, and
    what its workers pass to InaClient."""
    spec = record.spec
    most = record.max_trees_per_link
    if most:
        a, ap, b, bp = min(k for k, n in record.link_trees.items() if n == most)
        where = f" (e.g. {a}:{ap} -> {b}:{bp})"
    else:
        where = " (one switch: no links between switches)"
    return (
        f"job {spec.job_id}: {len(record.trees)} tree(s), roots "
        + ", ".join(f"{t}:{root}" for t, root in enumerate(record.roots))
        + f"; at most {most} tree(s) per link each way{where}\n"
        f"job {spec.job_id}: workers use InaClient(job_id={spec.job_id}, "
        f"window={spec.pool_size}, n_trees={len(record.trees)})"
    )


def cmd_routes(args: argparse.Namespace) -> None:
    async def body(ctl: Controller, _: list[JobSpec]) -> None:
        await ctl.install_routes()
        print(
            f"routes to {len(ctl.topology.hosts)} hosts installed on "
            f"{len(ctl.topology.switches)} switches"
        )

    _with_controller(args, body)


def cmd_loss(args: argparse.Namespace) -> None:
    async def body(ctl: Controller, _: list[JobSpec]) -> None:
        await ctl.set_loss(args.switch, args.ports, args.probability)
        print(f"{args.switch}: loss {args.probability:.2%} on ports {args.ports}")

    ctl, specs = _controller(args)
    if args.switch not in ctl.topology.switches:
        raise ControllerError(
            f"unknown switch {args.switch!r}; the topology has {', '.join(ctl.topology.switches)}"
        )
    loss_threshold(args.probability)  # ValueError: refused before connecting
    _run(ctl, specs, body)


def cmd_stats(args: argparse.Namespace) -> None:
    async def body(ctl: Controller, _: list[JobSpec]) -> None:
        print((await ctl.read_stats()).render())

    _with_controller(args, body)


def cmd_pipeline(args: argparse.Namespace) -> None:
    async def body(ctl: Controller, _: list[JobSpec]) -> None:
        verb = "installed on" if args.action == "push" else "checked on"
        for sw in ctl.topology.switches.values():
            print(f"{sw.name} ({sw.grpc}, device {sw.device_id}): ina.p4 {verb} the switch")

    _with_controller(args, body)


TOPO_KINDS = ("star", "leaf-spine", "fat-tree", "bigraph", "torus", "mesh")


def cmd_topo(args: argparse.Namespace) -> None:
    if args.kind == "show":
        cmd_topo_show(args)
        return
    if args.topology:
        raise TopologyError("-t is for `inaemu topo show`; a new topology is written with -o")
    if args.kind == "star":
        topo = star(args.hosts)
    elif args.kind == "leaf-spine":
        topo = leaf_spine(args.leaves, args.spines, args.hosts)
    elif args.kind == "fat-tree":
        topo = fat_tree(args.k)
    elif args.kind == "bigraph":
        topo = bigraph(args.hosts, args.switches)
    elif args.kind == "torus":
        topo = torus(args.rows, args.cols)
    elif args.kind == "mesh":
        topo = mesh(args.rows, args.cols)
    elif ":" in args.kind:
        topo = from_spec(args.kind)
    else:
        raise TopologyError(
            f"unknown topology kind {args.kind!r}; use show, {', '.join(TOPO_KINDS)} or a "
            "compact spec such as leaf-spine:2x2x4"
        )
    if args.program:
        if not Path(args.program).is_file():
            raise TopologyError(
                f"--program {args.program}: no such file (build bmv2's JSON with `make -C p4`)"
            )
        topo.switches = {
            name: dataclasses.replace(sw, program=args.program)
            for name, sw in topo.switches.items()
        }
    topo = _with_devices(topo, args.grpc, args.device_id)
    if args.output:
        try:
            topo.save(args.output)
        except OSError as exc:
            raise TopologyError(f"cannot write {args.output}: {exc.strerror or exc}") from None
        print(
            f"wrote {args.output}: {len(topo.hosts)} hosts, {len(topo.switches)} switches "
            f"({describe_roles(topo)}), {len(topo.links)} links"
        )
    else:
        print(json.dumps(topo.to_json(), indent=2))


def _per_switch(values: list[str], option: str, form: str) -> tuple[str | None, dict[str, str]]:
    """The values of a repeated option: at most one plain VALUE (the first switch's) and any
    number of SWITCH=VALUE."""
    plain = [v for v in values if "=" not in v]
    if len(plain) > 1:
        raise TopologyError(
            f"{option} {plain[1]}: give one {option} {form} (the first switch's; the others "
            f"follow it) and {option} SWITCH={form} for single switches"
        )
    named = dict(v.split("=", 1) for v in values if "=" in v)
    return (plain[0] if plain else None), named


def _device_id(text: str, shown: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise TopologyError(f"--device-id {shown}: write N or SWITCH=N (N a number)")
    return int(text)


def _with_devices(topo: Topology, grpc: list[str], device_id: list[str]) -> Topology:
    """`topo` with the addresses and device ids of `--grpc` and `--device-id`."""
    if not grpc and not device_id:
        return topo
    first_grpc, grpc_of = _per_switch(grpc, "--grpc", "HOST:PORT")
    first_id, ids_of = _per_switch(device_id, "--device-id", "N")
    return assign_devices(
        topo,
        grpc=first_grpc,
        device_id=None if first_id is None else _device_id(first_id, first_id),
        grpc_of=grpc_of,
        device_id_of={n: _device_id(v, f"{n}={v}") for n, v in ids_of.items()},
    )


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
    if args.print:
        print("\n".join(bmv2.shell_lines(commands, run_dir)))
        return 0
    if shutil.which(bmv2.BINARY) is None:
        return _failed(
            "bmv2",
            f"{bmv2.BINARY} is not on PATH (bmv2: `bash ../shared/p4-toolchain/install.sh` "
            "installs it under /opt/p4/bin)",
        )
    stop = threading.Event()
    handlers = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    switches = bmv2.Bmv2Switches(commands)
    try:
        switches.start()
        for c in commands:
            pid = switches.procs[c.switch].pid
            print(
                f"READY {c.switch} grpc={c.grpc} device_id={c.device_id} "
                f"thrift={c.thrift_port} pid={pid} log={c.log}",
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
                return _failed(
                    "bmv2",
                    f"{c.switch}: simple_switch_grpc exited (status {status}); the others "
                    f"were stopped; {c.log}:\n{bmv2.log_tail(c.log)}",
                )
    except bmv2.Bmv2Error as exc:
        return _failed("bmv2", str(exc))
    finally:
        switches.stop()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return 0


def cmd_topo_show(args: argparse.Namespace) -> None:
    from inaemu.controller.draw import draw

    if not args.topology:
        raise TopologyError("topo show needs -t topology.json (or a spec such as bigraph:4x4)")
    if not args.output:
        raise TopologyError("topo show needs -o FILE.svg (or .png, .pdf)")
    topo = load_or_build(args.topology)
    path = draw(topo, args.output, title=f"{Path(args.topology).name}: " + describe_roles(topo))
    roles = describe_roles(topo)
    print(f"wrote {path}: {len(topo.switches)} switches ({roles}), {len(topo.hosts)} hosts")


# The demo runs every switch and every worker as a process on this machine, and holds every
# worker's array: more than this is refused before anything starts.
DEMO_PROCESSES = 64  # switch processes, and worker processes
DEMO_ELEMENTS = arg.MAX_ELEMENTS  # elements of all workers together (1 GiB of float32)


def _check_demo_size(topo_text: str | None, workers: int, size: int) -> None:
    """Refuse a demo larger than `DEMO_PROCESSES` and `DEMO_ELEMENTS` allow."""
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
    _check_demo_size(topo, workers, max(sizes, default=size))
    return main_demo(
        DemoOptions(
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
    )


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
        type=arg.Real(0.0, 1.0, "a probability", hi_open=True, note="1 would drop everything"),
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
        "ps (a list) or all, each host collective in its own rank order; every result "
        "verified, one table (controller/compare.py)",
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
        type=parse_sizes,
        default=None,
        metavar="LIST",
        help="with --algo: several sizes, e.g. 64K,256K (elements; K, M = 2^10, 2^20): every "
        "algorithm at each, and completion.png (time against size) in the run dir",
    )
    d.add_argument(
        "--repeat",
        type=REPEATS,
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
        "schedule",
        help="host-collective schedules (ring, hd, hdrm, multitree) on a topology, checked "
        "and measured (see inaemu schedule -h)",
        add_help=False,
    ).set_defaults(func=None)

    sub.add_parser(
        "train",
        help="run a DDP training script on the emulated network once per backend (INA, the "
        "ring with INCEPTIONN, gloo) and plot the curves (see inaemu train -h)",
        add_help=False,
    ).set_defaults(func=None)

    t = sub.add_parser("topo", help="write a topology file, or draw one (show)")
    t.add_argument(
        "kind",
        metavar="KIND",
        help=f"show, {', '.join(TOPO_KINDS)}, or a compact spec: "
        + ", ".join(f"{k}:{form}" for k, (form, _) in SPEC_FORMS.items()),
    )
    t.add_argument(
        "--hosts",
        type=int,
        default=4,
        help="hosts (star), hosts per leaf (leaf-spine), hosts per switch (bigraph)",
    )
    t.add_argument("--leaves", type=int, default=2)
    t.add_argument("--spines", type=int, default=2)
    t.add_argument("--k", type=int, default=4, help="fat-tree arity")
    t.add_argument("--switches", type=int, default=4, help="switches (bigraph, even)")
    t.add_argument("--rows", type=int, default=4, help="rows (torus, mesh)")
    t.add_argument("--cols", type=int, default=4, help="columns (torus, mesh)")
    t.add_argument("-t", "--topology", help="topo show: the topology file (or a spec)")
    t.add_argument(
        "--program",
        help="bmv2 JSON every switch runs (written into the topology; "
        "`inaemu pipeline push` sends it; the softswitch accepts it too)",
    )
    t.add_argument(
        "--grpc",
        action="append",
        default=[],
        metavar="[SWITCH=]HOST:PORT",
        help="P4Runtime address: HOST:PORT for the first switch, the others get the ports "
        "after it (default 127.0.0.1:9559); SWITCH=HOST:PORT for one switch (repeatable)",
    )
    t.add_argument(
        "--device-id",
        action="append",
        default=[],
        metavar="[SWITCH=]N",
        help="P4Runtime device id: N for the first switch, the others N+1, ... (default 1); "
        "SWITCH=N for one switch (repeatable)",
    )
    t.add_argument("-o", "--output", help="topology.json to write; topo show: the picture")
    t.set_defaults(func=cmd_topo)

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

    def with_topology(p: argparse.ArgumentParser) -> None:
        p.add_argument("-t", "--topology", required=True, help="topology.json")
        p.add_argument("--state", help="job state file (default <topology>.jobs.json)")
        p.add_argument(
            "--device-config",
            help="bmv2 JSON to push with the P4Info to every "
            'switch without its own "program" (simple_switch_grpc needs it)',
        )

    pl = sub.add_parser(
        "pipeline", help="install ina.p4 on every switch (push) or check that they run it"
    )
    pl.add_argument("action", choices=("push", "check"))
    with_topology(pl)
    pl.add_argument(
        "--force", action="store_true", help="push even if a switch reports the same pipeline"
    )
    pl.set_defaults(func=cmd_pipeline)

    j = sub.add_parser(
        "job",
        help="add, remove or list jobs; new-run: a run id for the next run of a job's workers",
    )
    j.add_argument("action", choices=("add", "remove", "list", "new-run"))
    with_topology(j)
    j.add_argument("--job", type=arg.JOB_ID, default=1)
    j.add_argument("--workers", type=arg.names, default=(), help="comma-separated host names")
    j.add_argument("--pool", type=arg.WINDOW, default=64, help="slots per switch (the window)")
    j.add_argument(
        "--trees",
        type=arg.TREES,
        default=0,
        help="aggregation trees the chunks are striped over (default 0: one per root "
        "candidate, e.g. per spine; 1: a single tree)",
    )
    j.add_argument(
        "--roots",
        type=arg.names,
        default=(),
        help="comma-separated root switches (default: chosen)",
    )
    j.set_defaults(func=cmd_job)

    r = sub.add_parser("routes", help="install IPv4 routes to every host")
    with_topology(r)
    r.set_defaults(func=cmd_routes)

    lo = sub.add_parser("loss", help="inject loss on a switch's ingress ports")
    with_topology(lo)
    lo.add_argument("--switch", required=True)
    lo.add_argument(
        "--ports",
        type=arg.port_list,
        required=True,
        help=f"ingress ports, e.g. 1-4,7 ({arg.SWITCH_PORT.lo}..{arg.SWITCH_PORT.hi})",
    )
    lo.add_argument("--probability", type=arg.PROBABILITY, required=True, help="0 removes the loss")
    lo.set_defaults(func=cmd_loss)

    st = sub.add_parser("stats", help="per-job, per-port counters and drops")
    with_topology(st)
    st.set_defaults(func=cmd_stats)
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
    if argv[:1] == ["schedule"]:
        from inaemu.collectives.cli import main as schedule_main

        return schedule_main(argv[1:])
    if argv[:1] == ["train"]:
        from inaemu.controller.train import main as train_main

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
    except KeyboardInterrupt:
        print(f"\ninaemu {args.command}: interrupted", file=sys.stderr)
        return 130
    except (TopologyError, JobError, ControllerError, DrawError, ValueError) as exc:
        return _failed(args.command, str(exc))
    # expected failures the commands do not name themselves: a file or socket problem, a
    # switch refusing a request outside the controller's own checks
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        return _failed(args.command, f"{where}{exc.strerror or exc}")
    except fy.P4ClientError as exc:
        return _failed(args.command, f"a switch refused a request ({exc.code.name}: {exc.message})")
    return int(result or 0)


def _failed(command: str, message: str) -> int:
    print(f"inaemu {command}: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
