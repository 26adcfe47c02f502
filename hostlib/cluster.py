"""A cluster file: what a training process that torchrun starts on a machine cabled to a switch
needs beyond torchrun's own environment (rank, world size, local rank, rendezvous).

    {"topology": "topology.json", "workers": ["m1", "m2"],
     "backend": "ina-fixedpoint", "job": 1, "window": 64, "trees": 1, "timeout": 30.0}

`inaemu cluster init` writes it beside the topology it names (a path relative to the cluster
file), and the same directory is copied to the switch box and to every machine. The machines
themselves are the topology's hosts, with their address, MAC, local ranks (`ranks`) and first
UDP port (`udp_port`) there and nowhere else; `workers` are the job's machines, in the order
`inaemu job add --workers` was given them; the rest are the job as `inaemu job add` installed
it (`window`: its pool, `trees`: its trees) and the backend and give-up time of its workers.

A process finds its machine by `INAEMU_MACHINE` if set, else as the one of `workers` whose
address is an address of this host (of its network namespace) (`find_machine`).
"""

from __future__ import annotations

import argparse
import json
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from inaemu.common import args as arg
from inaemu.topology.model import Host, Topology, TopologyError, read_json

TOPOLOGY_NAME: Final = "topology.json"  # the names `inaemu cluster init` writes
CLUSTER_NAME: Final = "cluster.json"
INA_BACKENDS: Final = ("ina-fixedpoint", "ina-sketch", "gloo")  # what runs under torchrun


class ClusterError(ValueError):
    """A cluster file that cannot be used; the message names the file and what to fix."""


@dataclass(frozen=True)
class Cluster:
    topology: str  # the topology file, relative to the cluster file (or absolute)
    workers: tuple[str, ...]  # the job's machines: hosts of the topology
    backend: str = "ina-fixedpoint"
    job: int = 1
    window: int = 64
    trees: int = 1
    timeout: float = 30.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["workers"] = list(self.workers)
        return data

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")

    @staticmethod
    def load(path: Path) -> tuple[Cluster, Topology]:
        """The cluster file at `path` and its topology, checked against each other."""
        data = _read(path)
        cluster = Cluster.from_json(data, str(path))
        topo_path = path.parent / cluster.topology
        try:
            topo = Topology.load(topo_path)
        except TopologyError as exc:
            raise ClusterError(f"{path}: its topology: {exc}") from None
        cluster.check(topo, str(path))
        return cluster, topo

    @staticmethod
    def from_json(data: Any, where: str) -> Cluster:
        if not isinstance(data, dict):
            raise ClusterError(f"{where}: a cluster file is a JSON object (`inaemu cluster init`)")
        known = {"topology", "workers", "backend", "job", "window", "trees", "timeout"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ClusterError(
                f"{where}: unknown key {unknown[0]!r}; a cluster file has "
                + ", ".join(sorted(known))
            )
        for key in ("topology", "workers"):
            if key not in data:
                raise ClusterError(f"{where}: {key!r} is missing (`inaemu cluster init` writes it)")
        topology, workers = data["topology"], data["workers"]
        if not isinstance(topology, str) or not topology:
            raise ClusterError(f"{where}: topology: the topology file's path, a string")
        if (
            not isinstance(workers, list)
            or not workers
            or not all(isinstance(w, str) for w in workers)
        ):
            raise ClusterError(f"{where}: workers: a list of the job's machines (host names)")
        values: dict[str, Any] = {}
        checks: dict[str, arg.Integer | arg.Real] = {
            "job": arg.JOB_ID,
            "window": arg.WINDOW,
            "trees": arg.Integer(1, arg.MAX_TREES, "a number of trees"),
            "timeout": arg.SECONDS,
        }
        for key, check in checks.items():
            if key in data:
                value = data[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ClusterError(f"{where}: {key}: {value!r} is not a number")
                try:
                    values[key] = check(str(value))
                except argparse.ArgumentTypeError as exc:
                    raise ClusterError(f"{where}: {key}: {exc}") from None
        backend = data.get("backend", Cluster.backend)
        if backend not in INA_BACKENDS:
            raise ClusterError(
                f"{where}: backend {backend!r}: under torchrun one of {', '.join(INA_BACKENDS)}"
            )
        return Cluster(topology, tuple(workers), backend=backend, **values)

    def check(self, topo: Topology, where: str) -> None:
        """Every worker a host of `topo`, once, all on switches of the topology."""
        for name in self.workers:
            if name not in topo.hosts:
                raise ClusterError(
                    f"{where}: worker {name!r} is not a host of its topology "
                    f"({', '.join(topo.hosts)})"
                )
        if len(set(self.workers)) != len(self.workers):
            raise ClusterError(f"{where}: workers: a machine is named twice")

    def world_size(self, topo: Topology) -> int:
        """The job's workers: every machine's local ranks."""
        return sum(topo.hosts[w].ranks for w in self.workers)


def find_machine(cluster: Cluster, topo: Topology, name: str, where: str) -> Host:
    """This process's machine: the worker `name`, or (`name` empty) the one worker whose
    address is this host's. ClusterError saying what to set if none or several are."""
    if name:
        if name not in cluster.workers:
            raise ClusterError(
                f"INAEMU_MACHINE={name}: not a worker of {where} ({', '.join(cluster.workers)})"
            )
        return topo.hosts[name]
    local = [w for w in cluster.workers if is_local_address(topo.hosts[w].ip)]
    if len(local) != 1:
        listed = ", ".join(f"{w} {topo.hosts[w].ip}" for w in cluster.workers)
        found = "none" if not local else " and ".join(local)
        raise ClusterError(
            f"{where}: which machine is this? the address of {found} of its workers ({listed}) "
            "is this host's; give the interface that address or set INAEMU_MACHINE=NAME"
        )
    return topo.hosts[local[0]]


def is_local_address(ip: str) -> bool:
    """Whether `ip` is an address of this host (of this network namespace)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((ip, 0))
        except OSError:
            return False
    return True


def _read(path: Path) -> Any:
    try:
        return read_json(path, "cluster file")
    except TopologyError as exc:
        raise ClusterError(str(exc)) from None
