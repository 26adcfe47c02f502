"""A topology as an ns-3 network: a node per host and per switch, a point-to-point link per
topology link, with its rate, delay, queue and loss (`LinkSpec`), and counters on every end.

Frames are what the emulator carries: whole Ethernet frames, as the payload of ns-3's
point-to-point frames (protocol 0x0800, on nodes without an IP stack, so that nothing but the
node's handler sees them). Point-to-point adds 2 bytes of header; `LinkSpec.overhead_bytes` is
what a real link adds to every Ethernet frame (preamble, FCS, inter-frame gap: 24 bytes), the
2 included, modelled as ns-3's inter-frame gap. The Mininet runner shapes frames as the kernel
counts them, with no overhead: its validation runs use `overhead_bytes=0` (2 bytes, 0.6 % of a
312-byte frame, stay).

A torus or mesh node (`--node-ports all`) drives all its network links at once: its host link
has that many times a network link's rate, as Mininet's shaping gives it
(`topology.routes.host_link_capacity`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from inaemu.runs.compare import LinkUse, link_ends
from inaemu.sim.engine import PS_PER_S, Simulation
from inaemu.topology.model import Topology
from inaemu.topology.routes import ALL_PORTS, host_link_capacity

PPP_HEADER = 2  # bytes ns-3's point-to-point frames add to what they carry
ETHERNET_OVERHEAD = 24  # preamble and start delimiter 8, FCS 4, inter-frame gap 12

Direction = tuple[str, str]  # (from node, to node) of a link direction


class SpecError(ValueError):
    """A rate, delay, queue or loss that does not parse or cannot be simulated."""


_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kKmMgGtT]?)(bit/s|bps|b/s)?\s*$")
_TIME = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(ps|ns|us|µs|ms|s)\s*$")
_QUEUE = re.compile(r"^\s*([0-9]+)\s*(p|packets|B|KB|MB|KiB|MiB)\s*$")
_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_SECONDS = {"ps": 1e-12, "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
_BYTES = {"B": 1, "KB": 1000, "MB": 1000**2, "KiB": 1024, "MiB": 1024**2}


def parse_rate(text: str) -> float:
    """'100G', '100Gbit/s', '2.5M', '1e9': bits per second."""
    m = _RATE.match(text)
    if not m:
        raise SpecError(f"link rate {text!r}: give bits per second, e.g. 100G, 25Gbit/s, 10M")
    bps = float(m[1]) * _SCALE[m[2].lower()]
    if not 1e3 <= bps <= 1e13:
        raise SpecError(f"link rate {text!r}: between 1 kbit/s and 10 Tbit/s")
    return bps


def parse_delay(text: str) -> int:
    """'1us', '150ns', '0': picoseconds."""
    if text.strip() == "0":
        return 0
    m = _TIME.match(text)
    if not m:
        raise SpecError(f"link delay {text!r}: give a time with its unit, e.g. 1us, 150ns, 2ms")
    ps = round(float(m[1]) * _SECONDS[m[2]] * PS_PER_S)
    if ps > 10 * PS_PER_S:
        raise SpecError(f"link delay {text!r}: at most 10 s")
    return ps


def parse_queue(text: str) -> str:
    """'1000p', '1MB', '512KiB': ns-3's QueueSize text ('1000p', '1000000B')."""
    m = _QUEUE.match(text)
    if not m:
        raise SpecError(f"queue {text!r}: give packets or bytes, e.g. 1000p, 1MB, 512KiB")
    n, unit = int(m[1]), m[2]
    if unit in ("p", "packets"):
        if not 1 <= n <= 10**7:
            raise SpecError(f"queue {text!r}: 1 to 10,000,000 packets")
        return f"{n}p"
    size = n * _BYTES[unit]
    if not 1600 <= size <= 10**10:
        raise SpecError(f"queue {text!r}: 1,600 bytes (one frame) to 10 GB")
    return f"{size}B"


@dataclass(frozen=True)
class LinkSpec:
    """Every link's rate, one-way delay and transmit queue (per device); loss per frame on
    every link (`loss`) or on named links (`link_loss`: (a, b) -> rate, both directions)."""

    rate_bps: float = 100e9
    delay_ps: int = 1_000_000  # 1 us
    queue: str = "1000000B"  # 1 MB per transmit queue
    overhead_bytes: int = ETHERNET_OVERHEAD
    loss: float = 0.0
    link_loss: Mapping[tuple[str, str], float] = field(default_factory=dict)
    node_ports: str = ALL_PORTS
    seed: int = 0

    def loss_on(self, a: str, b: str) -> float:
        return self.link_loss.get((a, b), self.link_loss.get((b, a), self.loss))

    def describe(self) -> str:
        return (
            f"links {self.rate_bps / 1e9:g} Gbit/s, {self.delay_ps / 1e6:g} us, queue "
            f"{self.queue}, {self.overhead_bytes} B per frame beyond the Ethernet frame"
            + (f", loss {self.loss:g}" if self.loss else "")
        )


@dataclass
class End:
    """One end of a link: the node, its port (None: a host's NIC), the ns-3 device."""

    node: str
    port: int | None
    device: Any
    counters: Any  # glue.DeviceCounters of this device (what it transmitted)


class SimNetwork:
    """The nodes and links of `topo` in simulation `sim` (no IP stack: frames only)."""

    # bytes an Ethernet frame has beyond what ns-3's device transmits for it: here ns-3
    # carries the whole frame and adds its point-to-point header
    FRAME_EXTRA = -PPP_HEADER

    def __init__(self, sim: Simulation, topo: Topology, spec: LinkSpec) -> None:
        self.sim, self.topo, self.spec = sim, topo, spec
        ns, glue = sim.ns, sim.glue
        names = [*topo.hosts, *topo.switches]
        container = ns.NodeContainer()
        container.Create(len(names))
        self.nodes: dict[str, Any] = {n: container.Get(i) for i, n in enumerate(names)}
        self.ends: dict[tuple[str, int | None], End] = {}
        self.peer: dict[tuple[str, int | None], tuple[str, int | None]] = {}
        self.link_rates: list[float] = []  # bits/s of topo.links[i]
        for link in topo.links:
            rate = spec.rate_bps
            for host, port in ((link.a, link.a_port), (link.b, link.b_port)):
                if port is None:
                    rate = spec.rate_bps * host_link_capacity(topo, host, spec.node_ports)
            devices = self._link_helper(rate).Install(self.nodes[link.a], self.nodes[link.b])
            a_end, b_end = (link.a, link.a_port), (link.b, link.b_port)
            for i, (key, peer) in enumerate(((a_end, b_end), (b_end, a_end))):
                device = devices.Get(i)
                counters = glue.DeviceCounters()
                counters.Attach(device)
                sim.hold(counters)
                self.ends[key] = End(key[0], key[1], device, counters)
                self.peer[key] = peer
            self.link_rates.append(rate)
            loss = spec.loss_on(link.a, link.b)
            if loss:
                for i in (0, 1):
                    self._lossy(devices.Get(i), loss, spec.seed * 7919 + len(self.ends) + i)

    def _link_helper(self, rate: float) -> Any:
        """The point-to-point helper that builds a link of `rate` bits/s."""
        ns, spec = self.sim.ns, self.spec
        helper = ns.PointToPointHelper()
        helper.SetDeviceAttribute("DataRate", ns.StringValue(f"{round(rate)}bps"))
        gap_ps = max(spec.overhead_bytes + self.FRAME_EXTRA, 0) * 8 * PS_PER_S / rate
        helper.SetDeviceAttribute("InterframeGap", ns.TimeValue(ns.PicoSeconds(round(gap_ps))))
        helper.SetChannelAttribute("Delay", ns.TimeValue(ns.PicoSeconds(spec.delay_ps)))
        helper.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", ns.StringValue(spec.queue))
        return helper

    def _lossy(self, device: Any, rate: float, stream: int) -> None:
        """Frames arriving at `device` are lost with probability `rate`."""
        ns = self.sim.ns
        model = ns.CreateObject[ns.RateErrorModel]()
        model.SetAttribute("ErrorRate", ns.DoubleValue(rate))
        model.SetAttribute("ErrorUnit", ns.StringValue("ERROR_UNIT_PACKET"))
        model.AssignStreams(stream)
        device.SetAttribute("ReceiveErrorModel", ns.PointerValue(model))
        self.sim.hold(model)

    def host_device(self, host: str) -> Any:
        return self.ends[(host, None)].device

    def switch_devices(self, switch: str) -> dict[int, Any]:
        return {
            port: end.device
            for (node, port), end in self.ends.items()
            if node == switch and port is not None
        }

    def link_uses(self) -> list[LinkUse]:
        """Every link's frames and bytes each way, in `topo.links`' order, as Ethernet frames
        (`FRAME_EXTRA` added to what ns-3 transmitted)."""
        uses = []
        for link, rate in zip(self.topo.links, self.link_rates, strict=True):
            a = self.ends[(link.a, link.a_port)].counters
            b = self.ends[(link.b, link.b_port)].counters
            end_a, end_b = link_ends(link)
            uses.append(
                LinkUse(
                    end_a,
                    end_b,
                    "",
                    a_to_b=int(a.tx_bytes) + self.FRAME_EXTRA * int(a.tx_packets),
                    b_to_a=int(b.tx_bytes) + self.FRAME_EXTRA * int(b.tx_packets),
                    a_to_b_packets=int(a.tx_packets),
                    b_to_a_packets=int(b.tx_packets),
                    shaping=f"rate {rate / 1e6:g}Mbit",
                )
            )
        return uses

    def bandwidths_mbit(self) -> list[float]:
        """Each link's rate in Mbit/s, in `topo.links`' order (`runs.compare.make_row`)."""
        return [rate / 1e6 for rate in self.link_rates]

    def direction_packets(self) -> dict[Direction, int]:
        """Frames each link direction carried, by (from node, to node); parallel links between
        the same two nodes add up."""
        out: dict[Direction, int] = {}
        for key, end in self.ends.items():
            d = (key[0], self.peer[key][0])
            out[d] = out.get(d, 0) + int(end.counters.tx_packets)
        return out

    def queue_drops(self) -> dict[str, int]:
        """Frames each transmit queue dropped (full), by its device (`s1:3`, `h1`); only the
        non-zero ones."""
        return {
            _end_name(key): int(end.counters.queue_drops)
            for key, end in self.ends.items()
            if int(end.counters.queue_drops)
        }

    def lost(self) -> dict[str, int]:
        """Frames the links' loss dropped, by the device that lost them on arrival; only the
        non-zero ones."""
        return {
            _end_name(key): int(end.counters.rx_drops)
            for key, end in self.ends.items()
            if int(end.counters.rx_drops)
        }


def _end_name(key: tuple[str, int | None]) -> str:
    return key[0] if key[1] is None else f"{key[0]}:{key[1]}"
