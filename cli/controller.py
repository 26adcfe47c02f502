"""The controller's subcommands: `inaemu pipeline`, `job`, `routes`, `loss` and `stats`, their
options and what they print around the controller's operations (`inaemu.controller.api`).

Only `pipeline push` changes a switch's pipeline; every other command checks that each switch
runs ina.p4 and stops with what to run if not. Job commands keep what they installed in a
state file (default: next to the topology, `<topology>.jobs.json`), so a later command knows
the slot pools and groups in use, and the run ids issued to each job's workers (`job new-run`
never issues one twice for an installation).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from inaemu.common import args as arg
from inaemu.controller import api
from inaemu.controller.jobs import JobSpec


def files(args: argparse.Namespace) -> api.NetworkFiles:
    """The files a command's -t, --state and --device-config name."""
    return api.NetworkFiles(
        Path(args.topology),
        Path(args.state) if args.state else None,
        Path(args.device_config) if args.device_config else None,
    )


def cmd_pipeline(args: argparse.Namespace) -> None:
    if args.action == "push":
        topo, verb = api.push_pipeline(files(args), force=args.force), "installed on"
    else:
        topo, verb = api.check_pipeline(files(args)), "checked on"
    for sw in topo.switches.values():
        print(f"{sw.name} ({sw.grpc}, device {sw.device_id}): ina.p4 {verb} the switch")


def cmd_job(args: argparse.Namespace) -> None:
    net = files(args)
    if args.action == "list":  # the state file is the answer: no switch needed
        for record in api.list_jobs(net):
            s = record.spec
            print(
                f"job {s.job_id}: workers {','.join(s.workers)} pool {s.pool_size} "
                f"trees {s.n_trees} (roots {','.join(record.roots)}; at most "
                f"{record.max_trees_per_link} per link)"
            )
    elif args.action == "new-run":  # the state file alone: no switch needed
        print(api.new_run(net, args.job))
    elif args.action == "add":
        spec = JobSpec(args.job, args.workers, args.pool, args.trees, args.roots)
        record = api.add_job(net, spec)
        print(api.describe_trees(record))
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
        lacking = api.remove_job(net, args.job)
        lost = f" ({', '.join(lacking)} had lost some or all of it: restarted?)"
        print(f"job {args.job} removed" + (lost if lacking else ""))


def cmd_routes(args: argparse.Namespace) -> None:
    topo = api.install_routes(files(args))
    print(f"routes to {len(topo.hosts)} hosts installed on {len(topo.switches)} switches")


def cmd_loss(args: argparse.Namespace) -> None:
    api.set_loss(files(args), args.switch, args.ports, args.probability)
    print(f"{args.switch}: loss {args.probability:.2%} on ports {args.ports}")


def cmd_stats(args: argparse.Namespace) -> None:
    print(api.read_stats(files(args)).render())


def _with_topology(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--topology", required=True, help="topology.json")
    p.add_argument("--state", help="job state file (default <topology>.jobs.json)")
    p.add_argument(
        "--device-config",
        help="bmv2 JSON to push with the P4Info to every "
        'switch without its own "program" (simple_switch_grpc needs it)',
    )


def add_parsers(sub: Any) -> None:
    """`pipeline`, `job`, `routes`, `loss` and `stats` on `inaemu`'s subparsers."""
    pl = sub.add_parser(
        "pipeline", help="install ina.p4 on every switch (push) or check that they run it"
    )
    pl.add_argument("action", choices=("push", "check"))
    _with_topology(pl)
    pl.add_argument(
        "--force", action="store_true", help="push even if a switch reports the same pipeline"
    )
    pl.set_defaults(func=cmd_pipeline)

    j = sub.add_parser(
        "job",
        help="add, remove or list jobs; new-run: a run id for the next run of a job's workers",
    )
    j.add_argument("action", choices=("add", "remove", "list", "new-run"))
    _with_topology(j)
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
    _with_topology(r)
    r.set_defaults(func=cmd_routes)

    lo = sub.add_parser("loss", help="inject loss on a switch's ingress ports")
    _with_topology(lo)
    lo.add_argument("--switch", required=True)
    lo.add_argument(
        "--ports",
        type=arg.port_list,
        required=True,
        help=f"ingress ports, e.g. 1-4,7 ({arg.SWITCH_PORT.lo}..{arg.SWITCH_PORT.hi})",
    )
    lo.add_argument("--probability", type=arg.LOSS, required=True, help="0 removes the loss")
    lo.set_defaults(func=cmd_loss)

    st = sub.add_parser("stats", help="per-job, per-port counters and drops")
    _with_topology(st)
    st.set_defaults(func=cmd_stats)
