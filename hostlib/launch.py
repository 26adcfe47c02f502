"""What a launcher (`inaemu train`) tells each training process it starts: the one place that
names the environment variables, for the launcher that writes them and for
`inaemu.hostlib.ddp.from_environment`, which reads them.

Every field of `Launch` is one variable, `INAEMU_` + the field's name in capitals
(`INAEMU_RANK`, `INAEMU_BACKEND`, `INAEMU_WIRE_DIR`, ...); `Launch.to_env()` also sets
PyTorch's own `RANK` and `WORLD_SIZE`, and `OMP_NUM_THREADS=1` unless it is set (as torchrun
does: the workers share the machine's cores with each other and with the switches).

A backend is a name (`parse_backend`): `gloo` (PyTorch's all_reduce), `ina-CODEC` (in-network
aggregation with an INA codec: `ina-fixedpoint`, `ina-sketch`, ...) or `ALGO-CODEC`, a host
collective's schedule executed by the host library with a codec (`ring-inceptionn`: the ring
with INCEPTIONN's compression on every hop; `ring-plain`, `hd-fixedpoint`, ...).

Where a worker reaches its switch: on the embedded network (softswitch processes joined by
loopback wires, no root) `wire_dir`, `switch` and `port` name its wire and `mac`/`ip` and
`agg_mac`/`agg_ip` its addresses; on Mininet `wire_dir` is empty and the worker sends from
`ip` to its switch's `agg_ip` with the kernel's UDP. A host collective's `peers` are every
rank's `mac/ip` on the wires, or `ip:port` for TCP on Mininet, in rank order.

Under torchrun (`torchrun --nnodes N --nproc-per-node M --rdzv-backend c10d ... train.py` on
each machine, docs/cluster.md) a process has torchrun's `RANK`, `WORLD_SIZE`, `LOCAL_RANK` and
`LOCAL_WORLD_SIZE` and no `INAEMU_RANK`: `Launch.from_env` takes its place from torchrun, the
process group's rendezvous from torchrun too (`env://`), its switch, job and backend from the
cluster file that `INAEMU_CLUSTER` names (`hostlib.cluster`), and its machine's address, MAC
and first UDP port from that file's topology; `INAEMU_*` variables win over the file (say
`INAEMU_BACKEND=gloo` for the baseline). Its UDP port is its machine's plus its local rank.
Without `INAEMU_RUN` the run id is None: the ranks draw one together over the process group
(`hostlib.ddp.shared_run_id`), a new one on every start, so a torchrun restart gets one.

This module imports nothing heavy: the launcher, which never imports PyTorch, uses it too.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

PREFIX: Final = "INAEMU_"
CLUSTER: Final = PREFIX + "CLUSTER"  # the cluster file, under torchrun
MACHINE: Final = PREFIX + "MACHINE"  # which of its machines this is (default: by address)
TORCHRUN: Final = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")  # torchrun sets
ENV_RENDEZVOUS: Final = "env://"  # torchrun's: MASTER_ADDR and MASTER_PORT
INA_UDP_PORT: Final = 47500  # common.wire's (a test checks): no numpy for the launcher
EVERY_BACKEND: Final = ("gloo", "ina-fixedpoint", "ina-sketch", "ring-inceptionn")  # `all`


class LaunchError(RuntimeError):
    """The environment does not describe a launched worker; the message says what to do."""


@dataclass(frozen=True)
class Backend:
    name: str  # as given: gloo, ina-fixedpoint, ring-inceptionn, ...
    kind: str  # gloo, ina, or a host collective's algorithm (ring, hd, ...)
    codec: str  # "" for gloo

    @property
    def is_collective(self) -> bool:
        return self.kind not in ("gloo", "ina")


def parse_backend(name: str) -> Backend:
    """`gloo`, `ina-CODEC` or `ALGO-CODEC` (the module doc); ValueError on any other form.
    Whether ALGO and CODEC exist is the launcher's to check (it knows the schedules)."""
    if name == "gloo":
        return Backend(name, "gloo", "")
    kind, sep, codec = name.partition("-")
    if not sep or not kind or not codec:
        raise ValueError(
            f"backend {name!r}: use gloo, ina-CODEC (ina-fixedpoint, ina-sketch) or "
            "ALGO-CODEC (ring-inceptionn, ring-plain, hd-fixedpoint, ...)"
        )
    return Backend(name, kind, codec)


@dataclass(frozen=True)
class Launch:
    """One training process's part in a launched run (see the module doc)."""

    rank: int
    world_size: int
    backend: str  # parse_backend's form
    rendezvous: str  # init_method of the gloo process group: file:///..., tcp://ip:port, env://
    records: str = ""  # the file this rank's per-iteration records go to ("": none; {rank})
    job: int = 1  # INA: the job id the launcher installed
    run: int | None = None  # the run id, new for this run; None: the ranks draw one together
    window: int = 64  # INA: the job's slot pool per switch, the client's window
    trees: int = 1  # INA: the job's aggregation trees
    timeout: float = 30.0  # seconds without progress before an allreduce gives up
    wire_dir: str = ""  # embedded network: the loopback wires' directory ("": Mininet)
    switch: str = ""  # embedded: the switch this worker's wire is plugged into
    port: int = 0  # embedded: that switch's port
    mac: str = ""  # this worker's host MAC and IPv4 address (the topology's)
    ip: str = ""
    agg_mac: str = ""  # its switch's aggregation address
    agg_ip: str = ""
    schedule: str = ""  # a host collective's schedule (JSON file)
    peers: str = ""  # a host collective's ranks: mac/ip,... (wires) or ip:port,... (TCP)
    mtu: int = 1500  # a host collective on the wires: IPv4 packet bytes of its frames
    udp_port: int = INA_UDP_PORT  # INA over the kernel's UDP: this worker's port
    local_rank: int = 0  # torchrun: this process's rank on its machine
    machine: str = ""  # torchrun: its machine, a host of the cluster's topology

    @property
    def under_torchrun(self) -> bool:
        """Started by torchrun (its rendezvous), not by `inaemu train`."""
        return self.rendezvous == ENV_RENDEZVOUS

    @property
    def parsed_backend(self) -> Backend:
        return parse_backend(self.backend)

    def to_env(self) -> dict[str, str]:
        """The variables to add to the worker's environment."""
        env = {
            PREFIX + f.name.upper(): str(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }
        env["RANK"] = str(self.rank)
        env["WORLD_SIZE"] = str(self.world_size)
        env.setdefault("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
        return env

    @staticmethod
    def from_env(environ: Mapping[str, str] | None = None) -> Launch:
        """The launch described by `environ` (default: os.environ): `inaemu train`'s
        variables, or torchrun's with a cluster file's (the module doc); LaunchError if a
        variable is missing or malformed."""
        environ = os.environ if environ is None else environ
        if PREFIX + "RANK" not in environ and all(k in environ for k in TORCHRUN):
            return _from_torchrun(environ)
        if PREFIX + "BACKEND" not in environ:
            raise LaunchError(
                "no INAEMU_* variables: start this script with the launcher, e.g. "
                "`inaemu train SCRIPT --backend ina-fixedpoint --workers 4`, which starts the "
                "switches, installs the job and sets them for every worker; or with torchrun "
                "and INAEMU_CLUSTER=FILE (`inaemu cluster init` writes it and prints the "
                "torchrun line of every machine: docs/cluster.md)"
            )
        launch = _checked(_env_fields(environ))
        if not 0 <= launch.rank < launch.world_size:
            raise LaunchError(
                f"INAEMU_RANK={launch.rank} is not within 0..{launch.world_size - 1} "
                "(INAEMU_WORLD_SIZE)"
            )
        return launch


_FIELDS: Final = {f.name: f for f in dataclasses.fields(Launch)}


def _env_fields(environ: Mapping[str, str], skip: tuple[str, ...] = ()) -> dict[str, object]:
    """Every INAEMU_ variable of `environ` that names a field of `Launch`, converted."""
    values: dict[str, object] = {}
    for name, f in _FIELDS.items():
        key = PREFIX + name.upper()
        if key not in environ or name in skip:
            continue
        text = environ[key]
        kind = str(f.type).removesuffix(" | None")
        try:
            values[name] = {"int": int, "float": float}.get(kind, str)(text)
        except ValueError:
            raise LaunchError(f"{key}={text!r}: expected {kind}") from None
    return values


def _checked(values: dict[str, object]) -> Launch:
    for name, f in _FIELDS.items():
        if name not in values and f.default is dataclasses.MISSING:
            raise LaunchError(
                f"{PREFIX}{name.upper()} is not set (the launcher sets every INAEMU_*)"
            )
    launch = Launch(**values)  # type: ignore[arg-type]
    try:
        launch.parsed_backend  # noqa: B018 - parsed for its error
    except ValueError as exc:
        raise LaunchError(f"INAEMU_BACKEND: {exc}") from None
    return launch


def _from_torchrun(environ: Mapping[str, str]) -> Launch:
    """A process torchrun started: its place from torchrun, the job's and its machine's
    settings from the cluster file and its topology, INAEMU_* variables over them."""
    from pathlib import Path

    from inaemu.common.wire import worker_udp_port  # numpy: loaded by the cluster's checks too
    from inaemu.hostlib.cluster import Cluster, ClusterError, find_machine

    place: dict[str, int] = {}
    for key in TORCHRUN:
        try:
            place[key] = int(environ[key])
        except ValueError:
            raise LaunchError(f"{key}={environ[key]!r}: torchrun sets an integer") from None
    path = environ.get(CLUSTER, "")
    if not path:
        raise LaunchError(
            f"started by torchrun without {CLUSTER}: set {CLUSTER}=FILE, the cluster file that "
            "`inaemu cluster init` writes (it prints the torchrun line of every machine: "
            "docs/cluster.md)"
        )
    try:
        cluster, topo = Cluster.load(Path(path))
        host = find_machine(cluster, topo, environ.get(MACHINE, ""), path)
    except ClusterError as exc:
        raise LaunchError(f"{CLUSTER}: {exc}") from None
    switch = topo.switches[topo.host_attachment(host.name)[0]]
    values: dict[str, object] = {
        "backend": cluster.backend,
        "job": cluster.job,
        "window": cluster.window,
        "trees": cluster.trees,
        "timeout": cluster.timeout,
        "mac": host.mac,
        "ip": host.ip,
        "agg_mac": switch.agg_mac,
        "agg_ip": switch.agg_ip,
        "udp_port": worker_udp_port(host.udp_port, place["LOCAL_RANK"]),
        "machine": host.name,
    }
    values.update(_env_fields(environ, skip=("rank", "world_size", "local_rank", "rendezvous")))
    values.update(
        rank=place["RANK"],
        world_size=place["WORLD_SIZE"],
        local_rank=place["LOCAL_RANK"],
        rendezvous=ENV_RENDEZVOUS,
    )
    launch = _checked(values)
    world = cluster.world_size(topo)
    if launch.world_size != world:
        raise LaunchError(
            f"torchrun starts {launch.world_size} processes in all (--nnodes x "
            f"--nproc-per-node) but the job's machines in {path} have {world} ranks, the "
            "workers the switch waits for; make them agree"
        )
    if place["LOCAL_WORLD_SIZE"] != host.ranks:
        raise LaunchError(
            f"torchrun starts {place['LOCAL_WORLD_SIZE']} processes on {host.name} "
            f"(--nproc-per-node) but its topology gives it {host.ranks} ranks; make them agree"
        )
    if launch.parsed_backend.is_collective:
        raise LaunchError(
            f"INAEMU_BACKEND={launch.backend}: under torchrun gloo or ina-CODEC (a host "
            "collective's schedule and peers come from `inaemu train`)"
        )
    return launch
