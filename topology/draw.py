"""A picture of a topology with its roles: `inaemu topo show -t topology.json -o topo.svg`.

Switches are squares coloured by role, hosts small circles; links between switches are drawn
thicker than host links. Built-in topologies are laid out the way they are usually drawn:
layers from the top (spine, core, upper or root; then aggregation; then leaf, edge, lower)
with each switch's hosts next to it, and tori and meshes as their grid, each host below and
to the right of its switch. A torus's wrap-around links are dashed curves that bulge out of
their row (upwards) or column (to the left) by `WRAP_BULGE` of a grid step: between the grid's
lines and away from the hosts and their labels, whatever the torus's size. Any other topology
is laid out by networkx's spring layout (seeded, so the same file gives the same picture).

Drawing needs matplotlib and networkx (`pip install 'inaemu[draw]'`), and scipy for a spring
layout of 500 nodes or more (in the extra too); nothing else of inaemu does, and `DrawError`
says what to install when they are missing. No root, no graphviz: matplotlib writes SVG, PNG
and PDF itself.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from inaemu.topology.model import Topology

FORMATS = (".svg", ".png", ".pdf")
# layer of each known role, from the top
ROLE_LAYER = {
    "root": 0,
    "spine": 0,
    "core": 0,
    "upper": 0,
    "aggregation": 1,
    "leaf": 2,
    "edge": 2,
    "lower": 2,
}
ROLE_COLOUR = {
    "root": "#d62728",
    "spine": "#d62728",
    "core": "#d62728",
    "upper": "#d62728",
    "aggregation": "#ff7f0e",
    "leaf": "#1f77b4",
    "edge": "#1f77b4",
    "lower": "#1f77b4",
    "torus": "#2ca02c",
    "mesh": "#2ca02c",
}
OTHER_COLOUR = "#9467bd"
HOST_COLOUR = "#7f7f7f"
_GRID_NAME = re.compile(r"^s(\d+)_(\d+)$")
GRID_HOST = 0.3  # a torus or mesh host's offset from its switch, right and down (grid steps)
WRAP_BULGE = 0.3  # how far a wrap-around link's curve leaves its row or column (grid steps)


class DrawError(RuntimeError):
    """The picture cannot be made; the message says what to install or change."""


Position = tuple[float, float]


def grid_positions(topo: Topology) -> dict[str, Position] | None:
    """Positions of a torus or mesh (switches s<row>_<col>, one host each); None otherwise."""
    cells = {}
    for name, sw in topo.switches.items():
        m = _GRID_NAME.match(name)
        if sw.role not in ("torus", "mesh") or m is None:
            return None
        cells[name] = (float(m[2]), -float(m[1]))
    pos: dict[str, Position] = dict(cells)
    for host in topo.hosts:
        home, _ = topo.host_attachment(host)
        x, y = cells[home]
        pos[host] = (x + GRID_HOST, y - GRID_HOST)
    return pos


def layered_positions(topo: Topology) -> dict[str, Position] | None:
    """Positions by role layer (`ROLE_LAYER`), hosts in a row next to their switch: below it,
    or above it for a switch of the top layer when there are layers below (a BiGraph's upper
    part); None if a switch has a role without a layer."""
    layers: dict[int, list[str]] = {}
    for name, sw in topo.switches.items():
        if sw.role not in ROLE_LAYER:
            return None
        layers.setdefault(ROLE_LAYER[sw.role], []).append(name)
    ranks = sorted(layers)
    hosts: dict[str, list[str]] = {sw: [] for sw in topo.switches}
    for host in topo.hosts:
        hosts[topo.host_attachment(host)[0]].append(host)
    # each switch gets a slot as wide as its hosts; a layer is as wide as its switches' slots
    slot = {sw: max(1, len(hs)) for sw, hs in hosts.items()}
    width = max(sum(slot[sw] for sw in layers[r]) for r in ranks)
    pos: dict[str, Position] = {}
    for depth, r in enumerate(ranks):
        names = layers[r]
        used = sum(slot[sw] for sw in names)
        gap = (width - used) / len(names)
        x = gap / 2
        y = -2.0 * depth
        above = depth == 0 and len(ranks) > 1
        for name in names:
            centre = x + slot[name] / 2
            pos[name] = (centre, y)
            for i, host in enumerate(hosts[name]):
                hx = centre - len(hosts[name]) / 2 + i + 0.5
                pos[host] = (hx, y + (1.0 if above else -1.0))
            x += slot[name] + gap
    return pos


def positions(topo: Topology) -> dict[str, Position]:
    """Where each switch and host goes: grid, layers, or a seeded spring layout."""
    pos = grid_positions(topo) or layered_positions(topo)
    if pos is not None:
        return pos
    nx = _networkx()
    graph = nx.Graph()
    graph.add_nodes_from([*topo.switches, *topo.hosts])
    graph.add_edges_from((lk.a, lk.b) for lk in topo.links)
    try:
        layout = nx.spring_layout(graph, seed=1)
    except ImportError as exc:  # networkx lays out 500 nodes and more with scipy's sparse arrays
        raise DrawError(
            f"{len(graph)} nodes of no built-in shape are laid out by networkx's spring layout, "
            f"which needs {exc.name or 'scipy'} from 500 nodes: install it (`pip install scipy`, "
            "or `pip install 'inaemu[draw]'`)"
        ) from None
    return {n: (float(x), float(y)) for n, (x, y) in layout.items()}


def _grid_wrap(a: Position, b: Position) -> bool:
    """A link drawn across more than one grid step in a row or column (a torus wrap)."""
    dx, dy = abs(a[0] - b[0]), abs(a[1] - b[1])
    return (dx > 1.5 and dy < 0.01) or (dy > 1.5 and dx < 0.01)


def wrap_curve(a: Position, b: Position) -> list[Position]:
    """The cubic Bezier control points of a wrap-around link between `a` and `b` (a row's
    ends or a column's): it leaves each end at a right angle to the row (column) and runs
    3/4 * 4/3 * WRAP_BULGE = WRAP_BULGE from it at its middle, above a row, left of a column,
    so that it stays clear of the switches between and of the hosts below and to the right."""
    h = WRAP_BULGE * 4 / 3  # a cubic with both inner points h out peaks at 3/4 h
    if abs(a[1] - b[1]) < 0.01:  # a row: bulge up
        return [a, (a[0], a[1] + h), (b[0], b[1] + h), b]
    return [a, (a[0] - h, a[1]), (b[0] - h, b[1]), b]  # a column: bulge left


def _networkx() -> Any:
    try:
        import networkx
    except ImportError:
        raise DrawError(_MISSING.format("networkx")) from None
    return networkx


_MISSING = (
    "drawing a topology needs {} (matplotlib and networkx): install them with "
    "`pip install 'inaemu[draw]'` (or `.venv/bin/pip install matplotlib networkx`)"
)


def draw(topo: Topology, output: str | Path, *, title: str = "") -> Path:
    """Write a picture of `topo` to `output` (.svg, .png or .pdf); returns the path."""
    path = Path(output)
    if path.suffix.lower() not in FORMATS:
        raise DrawError(f"{path}: write a {', '.join(FORMATS)} file (the suffix picks the format)")
    fig = figure(topo, title=title)
    try:
        fig.savefig(path, bbox_inches="tight")
    except OSError as exc:
        raise DrawError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def figure(topo: Topology, *, title: str = "") -> Any:
    """The picture of `topo` as a matplotlib Figure (module doc)."""
    nx = _networkx()
    try:
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import PathPatch
        from matplotlib.path import Path as CurvePath
    except ImportError:
        raise DrawError(_MISSING.format("matplotlib")) from None
    pos = positions(topo)
    xs = [x for x, _ in pos.values()]
    ys = [y for _, y in pos.values()]
    span_x, span_y = max(xs) - min(xs), max(ys) - min(ys)
    fig = Figure(figsize=(min(4 + span_x * 0.6, 30), min(3 + span_y * 0.9, 30)))
    ax = fig.add_subplot()
    graph = nx.Graph()
    graph.add_nodes_from([*topo.switches, *topo.hosts])
    switch_links = [(lk.a, lk.b) for lk in topo.links if lk.a_port is not None and lk.b_port]
    host_links = [(lk.a, lk.b) for lk in topo.links if lk.a_port is None or lk.b_port is None]
    graph.add_edges_from(switch_links + host_links)
    nx.draw_networkx_edges(graph, pos, edgelist=host_links, ax=ax, edge_color="#bbbbbb")
    # a torus's wrap-around links would lie on the grid's own lines: curves (`wrap_curve`)
    grid = grid_positions(topo) is not None
    long = [(a, b) for a, b in switch_links if grid and _grid_wrap(pos[a], pos[b])]
    nx.draw_networkx_edges(
        graph, pos, edgelist=[e for e in switch_links if e not in long], ax=ax, width=1.8
    )
    codes = [CurvePath.MOVETO, CurvePath.CURVE4, CurvePath.CURVE4, CurvePath.CURVE4]
    for a, b in long:
        curve = CurvePath(wrap_curve(pos[a], pos[b]), codes)
        ax.add_patch(
            PathPatch(curve, fill=False, linewidth=1.2, linestyle="--", zorder=0.5, gid="wrap")
        )
    roles = sorted({sw.role for sw in topo.switches.values()})
    for role in roles:
        names = [n for n, sw in topo.switches.items() if sw.role == role]
        nx.draw_networkx_nodes(
            graph,
            pos,
            nodelist=names,
            ax=ax,
            node_shape="s",
            node_size=520,
            node_color=ROLE_COLOUR.get(role, OTHER_COLOUR),
        )
    nx.draw_networkx_nodes(
        graph, pos, nodelist=list(topo.hosts), ax=ax, node_size=120, node_color=HOST_COLOUR
    )
    nx.draw_networkx_labels(
        graph, pos, labels={n: n for n in topo.switches}, ax=ax, font_size=7, font_color="white"
    )
    if len(topo.hosts) <= 64:
        below = {h: (pos[h][0], pos[h][1] - 0.12) for h in topo.hosts}
        nx.draw_networkx_labels(
            graph,
            below,
            labels={h: h for h in topo.hosts},
            ax=ax,
            font_size=6,
            verticalalignment="top",
        )
    legend = [
        Line2D(
            [],
            [],
            marker="s",
            linestyle="",
            markersize=9,
            color=ROLE_COLOUR.get(role, OTHER_COLOUR),
            label=role or "(no role)",
        )
        for role in roles
    ]
    legend.append(
        Line2D([], [], marker="o", linestyle="", markersize=5, color=HOST_COLOUR, label="host")
    )
    if long:
        legend.append(Line2D([], [], linestyle="--", color="black", label="wrap-around link"))
    ax.legend(handles=legend, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.set_title(
        title
        or f"{len(topo.switches)} switches, {len(topo.hosts)} hosts, "
        f"{len(switch_links)} links between switches",
        fontsize=9,
    )
    ax.margins(0.08)
    ax.set_axis_off()
    return fig
