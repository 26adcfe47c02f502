"""Topology builders: star, leaf-spine, fat tree, BiGraph, 2D torus and mesh, each with its
hosts' addresses, its switches' roles and P4Runtime addresses; `from_spec` reads the compact
form (`leaf-spine:2x2x4`, `bigraph:4x4`, `torus:4x4`), `load_or_build` a file or a spec;
`assign_devices` sets P4Runtime addresses and device ids. docs/topologies.md describes each
topology."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from inaemu.topology.model import MAX_PORT, Topology, TopologyError, grpc_address

# ---------------------------------------------------------------------- builders
#
# What the builders can address, checked before anything is built: host i (from 0) gets
# 10.0.<i div 250>.<i mod 250 + 1>/16 (`_host_addr`), switch d (from 1) the P4Runtime port
# grpc_base + d - 1.

MAX_HOSTS = 256 * 250  # 64,000
DEFAULT_GRPC_BASE = 9559


def _host_addr(i: int) -> tuple[str, str]:
    return f"10.0.{i // 250}.{i % 250 + 1}/16", f"08:00:00:00:{i // 256:02x}:{i % 256:02x}"


def _check_size(name: str, hosts: int, switches: int, grpc_base: int = DEFAULT_GRPC_BASE) -> None:
    """Refuse a topology larger than the builders can address, before building it."""
    most = 65535 - grpc_base + 1
    if hosts > MAX_HOSTS or switches > most:
        raise TopologyError(
            f"{name} would have {hosts:,} hosts and {switches:,} switches; the builders make "
            f"at most {MAX_HOSTS:,} hosts (10.0.0.0/16) and {most:,} switches (P4Runtime ports "
            f"{grpc_base}..65535)"
        )


def star(n_hosts: int, *, grpc: str = "127.0.0.1:9559") -> Topology:
    """One switch s1 (role `root`), hosts h1..hN on ports 1..N."""
    if not 1 <= n_hosts <= MAX_PORT:
        raise TopologyError(f"a star needs 1..{MAX_PORT} hosts, got {n_hosts}")
    topo = Topology()
    topo.add_switch("s1", grpc=grpc, role="root")
    for i in range(n_hosts):
        ip, mac = _host_addr(i)
        topo.add_host(f"h{i + 1}", ip, mac)
        topo.link(f"h{i + 1}", "s1", b_port=i + 1)
    return topo.validate()


def leaf_spine(
    n_leaves: int, n_spines: int, hosts_per_leaf: int, *, grpc_base: int = 9559
) -> Topology:
    """Leaves l1.. (role `leaf`), spines s1.. (`spine`); hosts on leaf ports 1..H, the uplink
    to spine j (from 1) on port H + j; leaf i (from 1) on spine port i. Every leaf is linked
    to every spine."""
    if n_leaves < 1 or n_spines < 1 or hosts_per_leaf < 1:
        raise TopologyError(
            "a leaf-spine needs at least 1 leaf, 1 spine and 1 host per leaf, got "
            f"{n_leaves}x{n_spines}x{hosts_per_leaf}"
        )
    if hosts_per_leaf + n_spines > MAX_PORT or n_leaves > MAX_PORT:
        raise TopologyError(
            f"leaf-spine {n_leaves}x{n_spines}x{hosts_per_leaf} needs more than {MAX_PORT} "
            "ports on a switch"
        )
    name = f"leaf-spine {n_leaves}x{n_spines}x{hosts_per_leaf}"
    _check_size(name, n_leaves * hosts_per_leaf, n_leaves + n_spines, grpc_base)
    topo = Topology()
    dev = 1
    for j in range(n_spines):
        topo.add_switch(
            f"s{j + 1}", grpc=f"127.0.0.1:{grpc_base + dev - 1}", device_id=dev, role="spine"
        )
        dev += 1
    k = 0
    for i in range(n_leaves):
        leaf = f"l{i + 1}"
        topo.add_switch(leaf, grpc=f"127.0.0.1:{grpc_base + dev - 1}", device_id=dev, role="leaf")
        dev += 1
        for port in range(1, hosts_per_leaf + 1):
            ip, mac = _host_addr(k)
            topo.add_host(f"h{k + 1}", ip, mac)
            topo.link(f"h{k + 1}", leaf, b_port=port)
            k += 1
        for j in range(n_spines):
            topo.link(leaf, f"s{j + 1}", a_port=hosts_per_leaf + j + 1, b_port=i + 1)
    return topo.validate()


def fat_tree(k: int, *, grpc_base: int = 9559) -> Topology:
    """The k-ary fat tree (k even): (k/2)^2 cores c1.. (role `core`), k pods of k/2
    aggregation switches a<pod>_<i> (`aggregation`) and k/2 edge switches e<pod>_<i> (`edge`),
    k/2 hosts per edge switch (k^3/4 hosts). Aggregation switch i of every pod links to cores
    (i-1)k/2 + 1 .. ik/2."""
    if k < 2 or k % 2:
        raise TopologyError(f"a fat tree needs an even k >= 2, got {k}")
    _check_size(f"fat-tree {k}", k**3 // 4, 5 * k * k // 4, grpc_base)
    half = k // 2
    topo = Topology()
    dev = 1

    def sw(name: str, role: str) -> None:
        nonlocal dev
        topo.add_switch(name, grpc=f"127.0.0.1:{grpc_base + dev - 1}", device_id=dev, role=role)
        dev += 1

    for c in range(half * half):
        sw(f"c{c + 1}", "core")
    h = 0
    for p in range(k):
        for a in range(half):
            sw(f"a{p + 1}_{a + 1}", "aggregation")
        for e in range(half):
            edge = f"e{p + 1}_{e + 1}"
            sw(edge, "edge")
            for port in range(1, half + 1):
                ip, mac = _host_addr(h)
                topo.add_host(f"h{h + 1}", ip, mac)
                topo.link(f"h{h + 1}", edge, b_port=port)
                h += 1
            for a in range(half):  # edge uplinks on ports half+1..k, agg downlinks 1..half
                topo.link(edge, f"a{p + 1}_{a + 1}", a_port=half + a + 1, b_port=e + 1)
        for a in range(half):
            for j in range(half):  # agg a connects to cores a*half + j on its ports half+1..k
                core = a * half + j
                topo.link(f"a{p + 1}_{a + 1}", f"c{core + 1}", a_port=half + j + 1, b_port=p + 1)
    return topo.validate()


def _grpc(dev: int, grpc_base: int) -> str:
    return f"127.0.0.1:{grpc_base + dev - 1}"


def bigraph(hosts_per_switch: int, n_switches: int, *, grpc_base: int = 9559) -> Topology:
    """EFLOPS' BiGraph(M, N): switches s1..sN in two parts of N/2, `upper` (s1..s(N/2)) and
    `lower`; every switch of one part is linked to every switch of the other and none inside
    a part. M hosts per switch: host h (from 0) is on switch h div M, ports 1..M; switch j of
    the other part (from 0) is on port M + 1 + j. Hosts on one switch are 1 switch apart, on
    switches of different parts 2, on two switches of one part 3 (through the other part)."""
    if n_switches < 2 or n_switches % 2:
        raise TopologyError(f"a BiGraph needs an even number of switches >= 2, got {n_switches}")
    if hosts_per_switch < 1:
        raise TopologyError(f"a BiGraph needs at least 1 host per switch, got {hosts_per_switch}")
    half = n_switches // 2
    if hosts_per_switch + half > MAX_PORT:
        raise TopologyError(
            f"BiGraph({hosts_per_switch}, {n_switches}) needs {hosts_per_switch + half} ports "
            f"per switch; a switch has {MAX_PORT}"
        )
    name = f"BiGraph({hosts_per_switch}, {n_switches})"
    _check_size(name, hosts_per_switch * n_switches, n_switches, grpc_base)
    topo = Topology()
    for i in range(n_switches):
        role = "upper" if i < half else "lower"
        topo.add_switch(f"s{i + 1}", grpc=_grpc(i + 1, grpc_base), device_id=i + 1, role=role)
    for h in range(hosts_per_switch * n_switches):
        ip, mac = _host_addr(h)
        topo.add_host(f"h{h + 1}", ip, mac)
        topo.link(f"h{h + 1}", f"s{h // hosts_per_switch + 1}", b_port=h % hosts_per_switch + 1)
    for i in range(half):
        for j in range(half):
            topo.link(
                f"s{i + 1}",
                f"s{half + j + 1}",
                a_port=hosts_per_switch + 1 + j,
                b_port=hosts_per_switch + 1 + i,
            )
    return topo.validate()


# ports of a grid switch (torus, mesh): its host, then one per direction
GRID_HOST, GRID_EAST, GRID_WEST, GRID_SOUTH, GRID_NORTH = 1, 2, 3, 4, 5


def grid_switch(row: int, col: int) -> str:
    """The name of the switch in row `row`, column `col` (from 0) of a torus or mesh."""
    return f"s{row + 1}_{col + 1}"


_GRID_NAME = re.compile(r"^s(\d+)_(\d+)$")


def grid_cell(switch: str) -> tuple[int, int] | None:
    """(row, column), from 0, of a switch named as `grid_switch` names them; None for any
    other name."""
    m = _GRID_NAME.match(switch)
    return None if m is None else (int(m[1]) - 1, int(m[2]) - 1)


def _grid(rows: int, cols: int, wrap: bool, grpc_base: int) -> Topology:
    kind = "torus" if wrap else "mesh"
    if rows < 1 or cols < 1:
        raise TopologyError(f"a {kind} needs at least 1 row and 1 column, got {rows}x{cols}")
    if wrap and 2 in (rows, cols):
        raise TopologyError(
            f"a torus of {rows}x{cols} would link two switches twice in a dimension of 2; "
            "use 1 or at least 3 (or a mesh)"
        )
    _check_size(f"{kind} {rows}x{cols}", rows * cols, rows * cols, grpc_base)
    topo = Topology()
    for r in range(rows):
        for c in range(cols):
            dev = r * cols + c + 1
            topo.add_switch(grid_switch(r, c), grpc=_grpc(dev, grpc_base), device_id=dev, role=kind)
            ip, mac = _host_addr(dev - 1)
            topo.add_host(f"h{dev}", ip, mac)
            topo.link(f"h{dev}", grid_switch(r, c), b_port=GRID_HOST)
    for r in range(rows):
        for c in range(cols):
            east = (r, c + 1) if c + 1 < cols else ((r, 0) if wrap and cols > 1 else None)
            south = (r + 1, c) if r + 1 < rows else ((0, c) if wrap and rows > 1 else None)
            if east is not None:
                topo.link(grid_switch(r, c), grid_switch(*east), GRID_EAST, GRID_WEST)
            if south is not None:
                topo.link(grid_switch(r, c), grid_switch(*south), GRID_SOUTH, GRID_NORTH)
    return topo.validate()


def torus(rows: int, cols: int, *, grpc_base: int = 9559) -> Topology:
    """A 2D torus of rows x cols switches (each dimension 1 or >= 3), one host per switch:
    switch s<r>_<c> (from 1) has host h<(r-1)*cols+c> on port 1 and links east (port 2) to
    west (port 3) and south (port 4) to north (port 5), wrapping around at the edges."""
    return _grid(rows, cols, True, grpc_base)


def mesh(rows: int, cols: int, *, grpc_base: int = 9559) -> Topology:
    """A 2D mesh: the torus without the wrap-around links."""
    return _grid(rows, cols, False, grpc_base)


def assign_devices(
    topo: Topology,
    *,
    grpc: str | None = None,
    device_id: int | None = None,
    grpc_of: Mapping[str, str] | None = None,
    device_id_of: Mapping[str, int] | None = None,
) -> Topology:
    """`topo` with the P4Runtime address and device id of its switches set, validated.

    `grpc` ("host:port") is the first switch's address, the others (in the topology's order)
    get the ports after it on the same host; `device_id` is the first switch's id, the others
    the ids after it. `grpc_of` and `device_id_of` set single switches (by name) and win.
    Whatever is not given stays as it was (the builders: 127.0.0.1:9559 and on, ids 1 and on).
    """
    names = list(topo.switches)
    for what, given in (("--grpc", grpc_of or {}), ("--device-id", device_id_of or {})):
        unknown = [n for n in given if n not in topo.switches]
        if unknown:
            raise TopologyError(
                f"{what} {unknown[0]}=...: the topology has no switch {unknown[0]!r} "
                f"(its switches: {', '.join(names)})"
            )
    first_host, first_port = "", 0
    if grpc is not None:
        first_host, _, port_text = grpc.rpartition(":")
        if not (first_host and port_text.isascii() and port_text.isdigit()):
            raise TopologyError(f"--grpc {grpc}: write HOST:PORT, e.g. 127.0.0.1:9559")
        first_port = int(port_text)
        last = first_port + len(names) - 1
        if first_port < 1 or last > 65535:
            need = f" ({len(names)} switches need {first_port}..{last})" if len(names) > 1 else ""
            raise TopologyError(f"--grpc {grpc}: ports are 1..65535{need}")
    for name, address in (grpc_of or {}).items():
        if not grpc_address(address):
            raise TopologyError(f"--grpc {name}={address}: write HOST:PORT, e.g. 127.0.0.1:9559")
    ids = {"": device_id + len(names) - 1} if device_id is not None else {}  # the last one
    for name, number in {**ids, **(device_id_of or {})}.items():
        if not 0 <= number < 2**64:
            shown = f"{name}={number}" if name else f"{device_id} ({len(names)} switches)"
            raise TopologyError(f"--device-id {shown}: a device id is 0..2^64-1")
    out = Topology(dict(topo.hosts), {}, list(topo.links))
    for i, name in enumerate(names):
        sw = topo.switches[name]
        address = f"{first_host}:{first_port + i}" if grpc is not None else sw.grpc
        number = device_id + i if device_id is not None else sw.device_id
        out.switches[name] = replace(
            sw,
            grpc=(grpc_of or {}).get(name, address),
            device_id=(device_id_of or {}).get(name, number),
        )
    return out.validate()


# the compact form of every builder: kind -> (what the numbers are, builder)
SPEC_FORMS: dict[str, tuple[str, Callable[..., Topology]]] = {
    "star": ("HOSTS", star),
    "leaf-spine": ("LEAVESxSPINESxHOSTS_PER_LEAF", leaf_spine),
    "fat-tree": ("K", fat_tree),
    "bigraph": ("HOSTS_PER_SWITCHxSWITCHES", bigraph),
    "torus": ("ROWSxCOLS", torus),
    "mesh": ("ROWSxCOLS", mesh),
}


def from_spec(spec: str) -> Topology:
    """A built-in topology from its compact form: `star:4`, `leaf-spine:2x2x4` (leaves x
    spines x hosts per leaf), `fat-tree:4`, `bigraph:4x4` (hosts per switch x switches),
    `torus:4x4`, `mesh:3x3` (rows x columns)."""
    forms = ", ".join(f"{k}:{v[0]}" for k, v in SPEC_FORMS.items())
    kind, _, numbers = spec.partition(":")
    if kind not in SPEC_FORMS:
        raise TopologyError(f"unknown topology {spec!r}; use one of {forms}")
    form, builder = SPEC_FORMS[kind]
    parts = numbers.split("x")
    if len(parts) != form.count("x") + 1 or not all(p.isascii() and p.isdigit() for p in parts):
        raise TopologyError(f"topology {spec!r}: write {kind}:{form}, e.g. {_EXAMPLES[kind]}")
    if any(len(p) > 9 for p in parts):  # far beyond any cap, and int() stops at 4300 digits
        raise TopologyError(
            f"topology {spec[:60]!r}: numbers of at most 9 digits; the builders make at most "
            f"{MAX_HOSTS:,} hosts"
        )
    topo: Topology = builder(*(int(p) for p in parts))
    return topo


def load_or_build(text: str) -> Topology:
    """A topology file, or a compact spec such as `bigraph:4x4` when no such file exists."""
    path = Path(text)
    if path.exists() or ":" not in text:
        return Topology.load(path)
    if text.partition(":")[0] not in SPEC_FORMS:
        forms = ", ".join(f"{k}:{v[0]}" for k, v in SPEC_FORMS.items())
        raise TopologyError(f"{text}: no such topology file, nor a topology such as {forms}")
    return from_spec(text)


def describe_roles(topo: Topology) -> str:
    """How many switches have each role, e.g. `2 spine, 2 leaf`."""
    counts: dict[str, int] = {}
    for sw in topo.switches.values():
        counts[sw.role or "no role"] = counts.get(sw.role or "no role", 0) + 1
    return ", ".join(f"{n} {role}" for role, n in counts.items())


_EXAMPLES = {
    "star": "star:4",
    "leaf-spine": "leaf-spine:2x2x4",
    "fat-tree": "fat-tree:4",
    "bigraph": "bigraph:4x4",
    "torus": "torus:4x4",
    "mesh": "mesh:3x3",
}
