"""`inaemu topo`: write a topology file from a builder or a compact spec (star, leaf-spine,
fat tree, BiGraph, torus, mesh), with the switches' P4Runtime addresses and device ids and
bmv2's program; `inaemu topo show`: draw one (`inaemu.topology.draw`, the [draw] extra)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from inaemu.common import args as arg
from inaemu.topology.builders import (
    SPEC_FORMS,
    assign_devices,
    bigraph,
    describe_roles,
    fat_tree,
    from_spec,
    leaf_spine,
    load_or_build,
    mesh,
    star,
    torus,
)
from inaemu.topology.model import Topology, TopologyError

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
    arg.checks_done()
    if args.output:
        try:
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
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


def cmd_topo_show(args: argparse.Namespace) -> None:
    from inaemu.topology.draw import draw  # matplotlib, networkx: when asked only

    if not args.topology:
        raise TopologyError("topo show needs -t topology.json (or a spec such as bigraph:4x4)")
    if not args.output:
        raise TopologyError("topo show needs -o FILE.svg (or .png, .pdf)")
    topo = load_or_build(args.topology)
    arg.checks_done()
    try:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TopologyError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    path = draw(topo, args.output, title=f"{Path(args.topology).name}: " + describe_roles(topo))
    roles = describe_roles(topo)
    print(f"wrote {path}: {len(topo.switches)} switches ({roles}), {len(topo.hosts)} hosts")


def add_parser(sub: Any) -> None:
    """`topo` on `inaemu`'s subparsers."""
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
