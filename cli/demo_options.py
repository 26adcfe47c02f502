"""What `inaemu demo` is asked for, kept apart from what runs it: its options, its default
sizes and its topology, so that the `inaemu` command parses and checks a demo's options
without importing the host library's compiled kernels (`cli/main.py` imports `demo.py`, which
does, only to run one)."""

from __future__ import annotations

from dataclasses import dataclass

from inaemu.collectives.algorithms import ALGORITHMS
from inaemu.topology.builders import load_or_build
from inaemu.topology.model import Topology, TopologyError

EVERY_ALGO = ("ina", *ALGORITHMS)  # what `--algo all` runs, in this order
TOPO_SIZE = 200_000  # default elements per worker with --topo: seconds on a laptop


class DemoError(RuntimeError):
    pass


@dataclass
class DemoOptions:
    workers: int = 4  # with a topology: 0 = every host of it
    size: int = 2_000_000
    codec: str = "fixedpoint"
    density: float = 1.0
    loss: float = 0.0
    window: int = 256  # the job's slot pool, a quarter of the switch's (SwitchML's client: 256)
    wire_dir: str | None = None  # None: the softswitch makes a private one (READY wire_dir=)
    grpc_port: int = 0
    seed: int = 1
    progress: bool = True
    timeout: float = 30.0  # a worker gives up after this long without progress
    run: int | None = None  # the workers' run id; None: the parent draws a fresh one
    topo: str | None = None  # a compact spec (leaf-spine:2x2x4) or topology file; None: star
    trees: int = 0  # aggregation trees with a topology (0: one per root candidate)
    algos: tuple[str, ...] = ()  # the comparison (compare.py): ina and schedules
    mtu: int = 1500  # the comparison: IPv4 packet bytes of the host collectives' frames
    node_ports: str = "all"  # the comparison: torus and mesh node model (topology.routes)
    sizes: tuple[int, ...] = ()  # the comparison: several sizes (elements); () = (size,)
    repeat: int = 1  # the comparison: runs of each algorithm at each size
    run_dir: str | None = None  # the comparison: summary.json, completion.png, logs/
    dataplane: str = "fast"  # the softswitches' --dataplane: fast (compiled) or reference


def demo_topology(text: str) -> Topology:
    """The topology file or spec `text`; `DemoError` saying what is wrong with it."""
    try:
        return load_or_build(text)
    except TopologyError as exc:
        raise DemoError(str(exc)) from None


def parse_algos(text: str) -> tuple[str, ...]:
    """'ina,ring' -> ('ina', 'ring'); 'all' -> every algorithm; ValueError on an unknown one."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return EVERY_ALGO
    unknown = [n for n in names if n not in EVERY_ALGO]
    if unknown or not names:
        raise ValueError(
            f"--algo {text!r}: use a comma-separated list of {', '.join(EVERY_ALGO)}, or all"
        )
    return tuple(dict.fromkeys(names))
