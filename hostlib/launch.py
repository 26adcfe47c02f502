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

This module imports nothing heavy: the launcher, which never imports PyTorch, uses it too.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

PREFIX: Final = "INAEMU_"
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
    rendezvous: str  # init_method of the gloo process group: file:///... or tcp://ip:port
    records: str = ""  # the file this rank's per-iteration records go to ("": none)
    job: int = 1  # INA: the job id the launcher installed
    run: int = 0  # the run id, new for this run (INA and the host collectives)
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

    @property
    def parsed_backend(self) -> Backend:
        return parse_backend(self.backend)

    def to_env(self) -> dict[str, str]:
        """The variables to add to the worker's environment."""
        env = {
            PREFIX + f.name.upper(): str(getattr(self, f.name)) for f in dataclasses.fields(self)
        }
        env["RANK"] = str(self.rank)
        env["WORLD_SIZE"] = str(self.world_size)
        env.setdefault("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
        return env

    @staticmethod
    def from_env(environ: Mapping[str, str] | None = None) -> Launch:
        """The launch described by `environ` (default: os.environ); LaunchError if a variable
        is missing or malformed."""
        environ = os.environ if environ is None else environ
        if PREFIX + "BACKEND" not in environ:
            raise LaunchError(
                "no INAEMU_* variables: start this script with the launcher, e.g. "
                "`inaemu train SCRIPT --backend ina-fixedpoint --workers 4`, which starts the "
                "switches, installs the job and sets them for every worker"
            )
        values: dict[str, object] = {}
        for f in dataclasses.fields(Launch):
            key = PREFIX + f.name.upper()
            if key not in environ:
                if f.default is dataclasses.MISSING:
                    raise LaunchError(f"{key} is not set (the launcher sets every INAEMU_*)")
                continue
            text = environ[key]
            kind = {"int": int, "float": float}.get(str(f.type), str)
            try:
                values[f.name] = kind(text)
            except ValueError:
                raise LaunchError(f"{key}={text!r}: expected {f.type}") from None
        launch = Launch(**values)  # type: ignore[arg-type]
        if not 0 <= launch.rank < launch.world_size:
            raise LaunchError(
                f"INAEMU_RANK={launch.rank} is not within 0..{launch.world_size - 1} "
                "(INAEMU_WORLD_SIZE)"
            )
        try:
            launch.parsed_backend  # noqa: B018 - parsed for its error
        except ValueError as exc:
            raise LaunchError(f"INAEMU_BACKEND: {exc}") from None
        return launch
