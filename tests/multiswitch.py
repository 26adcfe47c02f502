"""Test helpers for topologies of many switches: a topology as an in-process fabric of
pipelines, plans installed into it, clients attached to it, plain IPv4 frames."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from inaemu.common.wire import (
    FRAME_BYTES,
    INA_BYTES,
    INA_DTYPE,
    INA_OFFSET,
    Endpoint,
    FrameTemplate,
)
from inaemu.p4.plan import LOSS_TABLE, SwitchPlan, TableWrite, loss_threshold
from inaemu.softswitch.fabric import Fabric
from inaemu.softswitch.plan import apply_to_pipeline
from inaemu.topology.addresses import ip_int, mac_bytes
from inaemu.topology.model import Topology


def fabric_of(topo: Topology, *, seed: int = 0) -> Fabric:
    """Every switch of `topo` as a pipeline, linked and with hosts attached as its links say."""
    fab = Fabric()
    for i, name in enumerate(topo.switches):
        fab.add_switch(name, seed=seed + i)
    for lk in topo.links:
        if lk.a_port is not None and lk.b_port is not None:
            fab.link(lk.a, lk.a_port, lk.b, lk.b_port)
    for host in topo.hosts:
        fab.attach_host(host, *topo.host_attachment(host))
    return fab


def install(fab: Fabric, plans: dict[str, SwitchPlan]) -> None:
    for name, plan in plans.items():
        apply_to_pipeline(fab.switches[name], plan)


def inter_switch_ports(topo: Topology) -> list[tuple[str, int]]:
    return [(sw, port) for sw, ports in topo.adjacency().items() for port in ports]


def set_loss(fab: Fabric, ends: list[tuple[str, int]], probability: float) -> None:
    """Loss injection (the ina_loss table) on the ingress of each (switch, port)."""
    for sw, port in ends:
        table = fab.switches[sw].tables[LOSS_TABLE]
        if (port,) in table.entries:
            table.delete((port,))
        if probability > 0:
            plan = SwitchPlan()
            plan.tables.append(
                TableWrite(LOSS_TABLE, (port,), "set_loss", (loss_threshold(probability),))
            )
            apply_to_pipeline(fab.switches[sw], plan)


@dataclass
class FabricNetwork:
    """A fabric that several client threads share: frames are processed one injection at a
    time under a lock, and what reaches a host waits in its queue."""

    topo: Topology
    fab: Fabric
    lock: threading.Lock = field(default_factory=threading.Lock)
    inboxes: dict[str, queue.Queue[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.inboxes = {h: queue.Queue() for h in self.topo.hosts}

    def inject(self, host: str, frame: bytes) -> None:
        with self.lock:
            delivered = self.fab.send(host, frame)
        for dest, data in delivered:
            self.inboxes[dest].put(data)

    def transport(self, host: str) -> FabricTransport:
        return FabricTransport(self, host)


class FabricTransport:
    """A client's transport into a `FabricNetwork` (the `hostlib.transport.Transport`
    protocol): frames from the host's addresses to its switch's aggregation address."""

    def __init__(self, net: FabricNetwork, host: str) -> None:
        self.net, self.host = net, host
        h = net.topo.hosts[host]
        sw = net.topo.switches[net.topo.host_attachment(host)[0]]
        self.prefix = FrameTemplate(Endpoint(h.mac, h.ip), Endpoint(sw.agg_mac, sw.agg_ip)).prefix()

    def send(self, payloads: npt.NDArray[np.void]) -> None:
        buf = payloads.tobytes()
        for off in range(0, len(buf), INA_BYTES):
            self.net.inject(self.host, self.prefix + buf[off : off + INA_BYTES])

    def recv(self, timeout: float) -> npt.NDArray[np.void]:
        inbox = self.net.inboxes[self.host]
        try:
            frames = [inbox.get(timeout=max(timeout, 0.0))]
        except queue.Empty:
            return np.empty(0, dtype=INA_DTYPE)
        while True:
            try:
                frames.append(inbox.get_nowait())
            except queue.Empty:
                break
        chunks = [f[INA_OFFSET:FRAME_BYTES] for f in frames if len(f) >= FRAME_BYTES]
        return np.frombuffer(b"".join(chunks), dtype=INA_DTYPE)

    def close(self) -> None:
        pass


def ipv4_frame(topo: Topology, src: str, dst: str, *, udp_port: int = 9000) -> bytes:
    """A plain IPv4/UDP frame from host `src` to host `dst` (not INA: ordinary forwarding),
    addressed at layer 2 to the first switch, as a host's default gateway would be."""
    s, d = topo.hosts[src], topo.hosts[dst]
    eth = bytes.fromhex("02000000fffe") + mac_bytes(s.mac) + b"\x08\x00"
    payload = b"ping"
    udp = udp_port.to_bytes(2, "big") * 2 + (8 + len(payload)).to_bytes(2, "big") + b"\0\0"
    total = 20 + len(udp) + len(payload)
    ip = bytearray(
        b"\x45\x00"
        + total.to_bytes(2, "big")
        + b"\x00\x01\x00\x00\x40\x11\x00\x00"
        + ip_int(s.ip).to_bytes(4, "big")
        + ip_int(d.ip).to_bytes(4, "big")
    )
    csum = sum(int.from_bytes(ip[i : i + 2], "big") for i in range(0, 20, 2))
    while csum >> 16:
        csum = (csum & 0xFFFF) + (csum >> 16)
    ip[10:12] = (~csum & 0xFFFF).to_bytes(2, "big")
    return eth + bytes(ip) + udp + payload
