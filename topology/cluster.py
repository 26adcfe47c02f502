"""A cluster's topology: real machines cabled to one switch, from a list of machines.

A machine is written `NAME,ip=A.B.C.D[/LEN],mac=MAC,port=N,iface=IFNAME[,ranks=M][,udp_port=P]`:
its name, the address and MAC of its interface that is cabled to the switch, the switch's port
that cable is plugged into and the switch box's interface for that port, and the training
processes it runs (torchrun's --nproc-per-node, default 1), whose UDP ports start at `udp_port`
(default the INA port, 47500). `inaemu cluster init` takes them from `--machine` options or a
file of one machine per line (`#` starts a comment).

`cluster_topology` makes the star the switch and its machines form (one switch, role root):
every machine in one IPv4 subnet, with the switch's aggregation address in it too (the switch
routes between the machines but answers no ARP: `inaemu cluster setup` adds the entries), and
at most a switch's fan-in of workers in all.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from inaemu.topology.addresses import mac_bytes
from inaemu.topology.model import MAX_PORT, MAX_RANKS, Topology, TopologyError

MACHINE_FORM = "NAME,ip=A.B.C.D[/LEN],mac=MAC,port=N,iface=IFNAME[,ranks=M][,udp_port=P]"
AGG_MAC = "02:00:00:00:00:fe"  # the switch's aggregation MAC unless said


@dataclass(frozen=True)
class Machine:
    name: str
    ip: str  # with its prefix length: 10.0.0.1/24
    mac: str
    port: int  # the switch's port it is cabled to
    iface: str  # the switch box's interface of that port
    ranks: int = 1
    udp_port: int | None = None

    @property
    def address(self) -> str:
        return self.ip.partition("/")[0]


def parse_machine(text: str) -> Machine:
    """One machine (`MACHINE_FORM`); TopologyError saying what is wrong and the form."""
    name, *fields = [p.strip() for p in text.replace(" ", ",").split(",") if p.strip()]
    values: dict[str, str] = {}
    for f in fields:
        key, eq, value = f.partition("=")
        if not eq or key not in ("ip", "mac", "port", "iface", "ranks", "udp_port"):
            raise TopologyError(f"machine {text!r}: {f!r} is not KEY=VALUE; write {MACHINE_FORM}")
        values[key] = value
    missing = [k for k in ("ip", "mac", "port", "iface") if k not in values]
    if missing:
        raise TopologyError(f"machine {name!r}: no {missing[0]}=; write {MACHINE_FORM}")
    ip = values["ip"] if "/" in values["ip"] else values["ip"] + "/24"
    try:
        ipaddress.IPv4Interface(ip)
    except ValueError:
        raise TopologyError(f"machine {name!r}: ip={values['ip']} is not an IPv4 address") from None
    try:
        mac_bytes(values["mac"])
    except ValueError:
        raise TopologyError(f"machine {name!r}: mac={values['mac']} is not a MAC address") from None
    return Machine(
        name,
        ip,
        values["mac"].lower(),
        _number(name, "port", values["port"], 1, MAX_PORT),
        values["iface"],
        _number(name, "ranks", values.get("ranks", "1"), 1, MAX_RANKS),
        _number(name, "udp_port", values["udp_port"], 1, 65535) if "udp_port" in values else None,
    )


def read_machines(path: Path) -> list[Machine]:
    """The machines of a file, one per line; TopologyError naming the file and line."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read the machines ({exc.strerror or exc})") from None
    machines = []
    for number, line in enumerate(lines, 1):
        text = line.partition("#")[0].strip()
        if text:
            try:
                machines.append(parse_machine(text))
            except TopologyError as exc:
                raise TopologyError(f"{path}:{number}: {exc}") from None
    return machines


def cluster_topology(
    machines: list[Machine],
    *,
    switch: str = "s1",
    grpc: str = "127.0.0.1:9559",
    device_id: int = 1,
    agg_ip: str = "",
    agg_mac: str = AGG_MAC,
    program: str = "",
) -> Topology:
    """The star of `switch` and `machines` (the module doc), validated. `agg_ip` empty: the
    subnet's last address that no machine has."""
    if not machines:
        raise TopologyError("a cluster needs a machine at least (--machine or --machines)")
    for seen, key in ((set(), "name"), (set(), "port"), (set(), "iface")):
        for m in machines:
            value = getattr(m, key)
            if value in seen:
                raise TopologyError(f"two machines have {key} {value}: give each its own")
            seen.add(value)
    nets = {ipaddress.IPv4Interface(m.ip).network for m in machines}
    if len(nets) != 1:
        raise TopologyError(
            f"the machines are in {len(nets)} subnets ({', '.join(sorted(map(str, nets)))}): "
            "put them in one (the switch routes between them but answers no ARP)"
        )
    (net,) = nets
    taken = {ipaddress.IPv4Address(m.address) for m in machines}
    if not agg_ip:
        last = [net.broadcast_address - k for k in range(1, min(16, net.num_addresses - 1))]
        free = [a for a in last if a not in taken]
        if not free:
            raise TopologyError(f"no free address at the end of {net} for the switch: --agg-ip")
        agg_ip = str(free[0])
    elif ipaddress.IPv4Address(agg_ip) not in net:
        raise TopologyError(f"--agg-ip {agg_ip} is not in the machines' subnet {net}")
    workers = sum(m.ranks for m in machines)
    if workers > MAX_RANKS:
        raise TopologyError(
            f"the machines run {workers} workers; one switch aggregates at most {MAX_RANKS} "
            "(its fan-in): fewer ranks"
        )
    topo = Topology()
    topo.add_switch(
        switch,
        grpc=grpc,
        device_id=device_id,
        role="root",
        agg_ip=agg_ip,
        agg_mac=agg_mac,
        program=program,
    )
    for m in machines:
        topo.add_host(m.name, m.ip, m.mac, ranks=m.ranks, udp_port=m.udp_port)
        topo.link(m.name, switch, b_port=m.port)
    return topo.validate()


def _number(machine: str, key: str, text: str, lo: int, hi: int) -> int:
    if not (text.isascii() and text.isdigit()) or not lo <= int(text) <= hi:
        raise TopologyError(f"machine {machine!r}: {key}={text}: expected {lo}..{hi}")
    return int(text)
