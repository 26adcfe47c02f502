"""A topology as an IPv4 network in ns-3, for TCP: the nodes and links of `SimNetwork` (the
same rates, delays, queues, loss, node model and counters), with ns-3's Internet stack (IPv4
only) on every node and every switch an IPv4 router that forwards along the project's routes.

- Addresses: a host's NIC has the topology's address (/32); every switch port an address of
  its own from 100.64.0.0/10 (/32; links are point to point, so no route needs a gateway).
- Routes: those the controller installs on the switches (`controller.jobs.route_plans`, which
  follows `topology.routes.Router`), one /32 route per host on every switch, in a hash table
  (`glue.HostRoutes` in tcp.cpp: ns-3's static routing scans a list of all its routes for
  every packet, and its global routing took 40-60 s and 1.6 GB for 1,024 hosts). With `ecmp`,
  a switch has every next hop on a shortest path to the host's switch
  (`topology.routes.next_hops`) and picks one per flow by a hash of its addresses, protocol
  and ports, salted by the seed: the hashed paths of EFLOPS' argument, on which two flows may
  collide.
- Switch queues: a link's transmit queue drops when it is full, at the device, where
  `glue.DeviceCounters` counts it. ns-3's flow control is off on every link: with it, and no
  queue discipline (a switch has none), ns-3's traffic-control layer drops a packet whenever
  the device queue cannot take one more MTU, and no device trace shows it (`tcp.py`, the
  buffer-size anomaly).
- Host queues (`fair_hosts`, the default): a host's NIC is Linux's, a short device ring (4
  frames, as byte queue limits keep it) with flow control back to a fair queue per flow
  (fq_codel, Linux's default queue discipline), so that the ACKs of the flows a host receives
  do not wait behind the data it sends. Its drop law is off and its limit far above what the
  sockets can have in flight: a Linux host's TCP small queues keep its queue short, which ns-3
  does not model, so a host does not drop its own packets. Without `fair_hosts`, a host's NIC
  is one FIFO that holds what its sockets may have in flight (`hold_in_flight`).
- Bytes: ns-3 carries IP packets, so an Ethernet frame has 14 bytes of header beyond what it
  transmits, less its 2 of point-to-point header (`FRAME_EXTRA`); rates, inter-frame gaps and
  byte counts are those of Ethernet frames, as in `SimNetwork`.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import numpy as np

from inaemu.controller.jobs import route_plans
from inaemu.p4.plan import ROUTE_TABLE
from inaemu.sim.engine import Simulation
from inaemu.sim.network import PPP_HEADER, LinkSpec, SimNetwork, SpecError
from inaemu.topology.model import Topology
from inaemu.topology.routes import next_hops

ETHERNET_HEADER = 14
SWITCH_ADDRESSES = ipaddress.ip_network("100.64.0.0/10")
HOST_RING_FRAMES = 4  # a host NIC's device queue under `fair_hosts`
HOST_QUEUE_LIMIT = 1 << 20  # packets a host's fair queue holds: never reached


class IpNetwork(SimNetwork):
    """`SimNetwork` with IPv4 and TCP on every node (the module's docstring)."""

    FRAME_EXTRA = ETHERNET_HEADER - PPP_HEADER

    def __init__(
        self,
        sim: Simulation,
        topo: Topology,
        spec: LinkSpec,
        *,
        mtu: int,
        ecmp: bool = False,
        fair_hosts: bool = True,
    ) -> None:
        for h in topo.hosts.values():
            if ipaddress.ip_address(h.ip) in SWITCH_ADDRESSES:
                raise SpecError(
                    f"host {h.name}'s address {h.ip} is in {SWITCH_ADDRESSES}, which the "
                    "simulator gives the switches' ports: renumber the host"
                )
        self.mtu, self.ecmp, self.fair_hosts = mtu, ecmp, fair_hosts
        super().__init__(sim, topo, spec)
        ns, glue = sim.ns, sim.glue
        stack = ns.InternetStackHelper()
        stack.SetIpv6StackInstall(False)
        self.node_drops = glue.NodeDrops()
        sim.hold(self.node_drops)
        for node in self.nodes.values():
            stack.Install(node)
            self.node_drops.Attach(node)
        self.qdiscs: dict[str, tuple[Any, Any]] = {}  # host -> its fair queue, its drops
        if fair_hosts:
            ring = HOST_RING_FRAMES * (mtu + PPP_HEADER)
            for host in topo.hosts:
                qdisc = glue.host_fair_queue(self.host_device(host), ring, HOST_QUEUE_LIMIT)
                drops = glue.QdiscDrops()
                drops.Attach(qdisc)
                self.qdiscs[host] = (qdisc, drops)
        sim.hold(self.qdiscs)
        self.iface: dict[tuple[str, int | None], int] = {}  # (node, port) -> IPv4 interface
        pool = SWITCH_ADDRESSES.network_address
        for (name, port), end in sorted(self.ends.items(), key=lambda kv: _order(kv[0])):
            if port is None:
                addr = int(ipaddress.ip_address(topo.hosts[name].ip))
            else:
                pool += 1
                addr = int(pool)
            self.iface[(name, port)] = int(
                glue.add_interface(self.nodes[name], end.device, addr, 32)
            )
        self.routes: dict[str, Any] = {}  # node -> glue.HostRoutes
        for host in topo.hosts:
            routes = glue.install_routes(self.nodes[host])
            routes.SetDefault(self.iface[(host, None)])
            self.routes[host] = routes
        self._route_switches()
        sim.hold(self.routes)

    def _link_helper(self, rate: float) -> Any:
        ns = self.sim.ns
        helper = super()._link_helper(rate)
        helper.SetDeviceAttribute("Mtu", ns.UintegerValue(self.mtu))
        helper.DisableFlowControl()
        return helper

    def _route_switches(self) -> None:
        """Every switch's /32 routes: the controller's, or every shortest next hop (ECMP)."""
        topo, glue = self.topo, self.sim.glue
        plans = route_plans(topo)
        homes = {h: topo.host_attachment(h)[0] for h in topo.hosts}
        by_ip = {int(ipaddress.ip_address(h.ip)): h.name for h in topo.hosts.values()}
        hops = {sw: next_hops(topo, sw) for sw in topo.switches} if self.ecmp else {}
        for sw in topo.switches:
            dsts: list[int] = []
            ifaces: list[int] = []
            for write in plans[sw].tables:
                if write.table != ROUTE_TABLE:
                    continue
                dst, port = write.key[0], write.params[1]
                home = homes[by_ip[dst]]
                ports = [port] if home == sw or not self.ecmp else hops[home][sw]
                dsts += [dst] * len(ports)
                ifaces += [self.iface[(sw, p)] for p in ports]
            routes = glue.install_routes(self.nodes[sw])
            routes.SetSalt(self.spec.seed * 0x9E3779B97F4A7C15 % 2**64)
            if dsts:
                routes.AddMany(np.array(dsts, np.uint32), np.array(ifaces, np.int32), len(dsts))
            self.routes[sw] = routes

    def host_ip(self, host: str) -> int:
        """`host`'s IPv4 address as an integer."""
        return int(ipaddress.ip_address(self.topo.hosts[host].ip))

    def hold_in_flight(self, host: str, nbytes: int) -> None:
        """Without `fair_hosts`: let `host`'s NIC queue hold `nbytes` (what its sockets may
        have in flight), if that is more than the links' queue."""
        if self.fair_hosts:
            return
        queue = self.spec.queue  # "1000p" or "1000000B" (`parse_queue`)
        if queue.endswith("p"):
            wanted = f"{max(int(queue[:-1]), -(-nbytes // self.mtu))}p"
        else:
            wanted = f"{max(int(queue[:-1]), nbytes)}B"
        if wanted != queue:
            self.host_device(host).GetQueue().SetMaxSize(self.sim.ns.QueueSize(wanted))

    def next_hops(self, switch: str, host: str) -> int:
        """How many next hops `switch` has towards `host` (more than 1: ECMP)."""
        return int(self.routes[switch].NextHops(self.host_ip(host)))

    def queue_drops(self) -> dict[str, int]:
        """`SimNetwork.queue_drops`, a host's with what its fair queue dropped (nothing,
        unless its limit is reached)."""
        out = super().queue_drops()
        for host, (_, drops) in self.qdiscs.items():
            if int(drops.n):
                out[host] = out.get(host, 0) + int(drops.n)
        return out

    def dropped_in_nodes(self) -> dict[str, int]:
        """Packets dropped inside nodes rather than at a link (`glue.NodeDrops`): by IPv4 (no
        route, TTL) and by the traffic-control layer; both 0 in a sound network."""
        d = self.node_drops
        return {"ip": int(d.ip), "traffic_control": int(d.traffic_control)}


def _order(key: tuple[str, int | None]) -> tuple[str, int]:
    return key[0], -1 if key[1] is None else key[1]
