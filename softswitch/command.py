"""A softswitch process from the outside: its command line (`argv`) and the line it prints
when it is up (`Ready`), for whoever starts one (the embedded network, Mininet's
`SoftSwitchNode`, the tests). `python -m inaemu.softswitch` (`__main__.py`) prints its READY
line with `Ready.line`, so that the line and its parser live together:

    READY name=s1 grpc=127.0.0.1:9559 device_id=1 ports=1,2,3,4 dataplane=fast
          warmup=cache:0.21s wire_dir=/tmp/inaemu-wires-x1              (all on one line)

Fields are `key=value` separated by spaces; `wire_dir`, when there is one, comes last and is
the rest of the line (a directory's name may hold a space). Nothing here starts a process or
imports the data planes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

MODULE = "inaemu.softswitch"  # python -m MODULE
READY = "READY"
_WIRE_DIR = " wire_dir="


@dataclass(frozen=True)
class Ready:
    """The fields of a softswitch's READY line."""

    fields: Mapping[str, str]

    @classmethod
    def make(
        cls,
        *,
        name: str,
        grpc: str,
        device_id: int,
        ports: Iterable[int],
        dataplane: str,
        wire_dir: str | None = None,
    ) -> Ready:
        """`dataplane`: the data plane's own fields, as its warm-up says them
        (`dataplane=fast warmup=cache:0.21s`)."""
        fields = {
            "name": name,
            "grpc": grpc,
            "device_id": str(device_id),
            "ports": ",".join(str(p) for p in sorted(ports)),
            **_fields(dataplane),
        }
        if wire_dir is not None:
            fields["wire_dir"] = wire_dir
        return cls(fields)

    def line(self) -> str:
        return " ".join([READY, *(f"{k}={v}" for k, v in self.fields.items())])

    @classmethod
    def parse(cls, line: str) -> Ready | None:
        """The fields of `line` if it is a READY line (with a name and an address), else
        None (a switch that failed prints none: its stdout ends)."""
        line = line.rstrip("\r\n")
        if not line.startswith(READY + " "):
            return None
        head, sep, wire_dir = line.partition(_WIRE_DIR)
        fields = _fields(head.removeprefix(READY))
        if sep:
            fields["wire_dir"] = wire_dir
        return cls(fields) if "name" in fields and "grpc" in fields else None

    @classmethod
    def find(cls, text: str) -> Ready | None:
        """The first READY line in `text` (a log that holds the switch's stdout), or None."""
        for line in text.splitlines():
            if (ready := cls.parse(line)) is not None:
                return ready
        return None

    @property
    def name(self) -> str:
        return self.fields["name"]

    @property
    def grpc(self) -> str:
        """Its P4Runtime address (the port it took, when asked for port 0)."""
        return self.fields["grpc"]

    @property
    def wire_dir(self) -> str | None:
        """Its wire dir (with loopback wires or links), else None."""
        return self.fields.get("wire_dir")


def _fields(text: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in text.split() if "=" in kv)


def argv(
    *,
    name: str | None = None,
    grpc: str | None = None,
    device_id: int | None = None,
    wires: Iterable[int] = (),
    links: Mapping[int, str] | None = None,
    ifaces: Mapping[int, str] | None = None,
    wire_dir: str | None = None,
    seed: int | None = None,
    dataplane: str | None = None,
    parent_pid: int | None = None,
) -> list[str]:
    """The command line of a softswitch process (this Python): an option for every argument
    given, the switch's own default for every one left out. `wires`: ports on loopback wires
    to hosts; `links`: port -> the wire end it is linked to (`s2.3`); `ifaces`: port ->
    network interface (AF_PACKET)."""
    out = [sys.executable, "-m", MODULE]
    if name is not None:
        out += ["--name", name]
    if grpc is not None:
        out += ["--grpc", grpc]
    if device_id is not None:
        out += ["--device-id", str(device_id)]
    if wire_dir is not None:
        out += ["--wire-dir", wire_dir]
    if seed is not None:
        out += ["--seed", str(seed)]
    if dataplane is not None:
        out += ["--dataplane", dataplane]
    if ports := sorted(wires):
        out += ["--wires", ",".join(map(str, ports))]
    for port, end in sorted((links or {}).items()):
        out += ["--link", f"{port}={end}"]
    for port, ifname in sorted((ifaces or {}).items()):
        out += ["--iface", f"{port}={ifname}"]
    if parent_pid is not None:
        out += ["--parent-pid", str(parent_pid)]
    return out
