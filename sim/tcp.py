"""ns-3's TCP as the simulator's host collectives use it: the settings (`TcpSettings`, every
ns-3 default they touch set explicitly at each run: ns-3's defaults outlive a simulation) and
the connections between ranks (`Connections`, over `glue.TcpMesh` of `tcp.cpp`).

The settings are those of a datacentre host that a reader of these papers expects, not
ns-3's (whose minimum retransmission timeout of 1 s turns any loss into a second of
silence, and whose 536-byte segments are 3 times too many events):

- MTU 1500 (the emulator's Mininet links; 9000 for jumbo frames, 308 for MULTITREE's 256-byte
  payloads), segments of the MTU less the IPv4 and TCP headers and the timestamp option
  (1448 bytes; 8948; 256);
- send and receive buffers of 1 MiB, or twice the largest bandwidth-delay product of the
  network if that is more (`buffer_for`);
- minimum retransmission timeout 1 ms (`min_rto_for`: Linux's 200 ms on networks with a
  link slower than 1 Gbit/s, where a segment takes milliseconds to send and a queue seconds
  to drain: 1 ms there times out before the first data ACK returns, and every spurious
  timeout resends a window), clock granularity 1 us; an ACK for every second segment, or
  after 20 us (Linux's 40 ms would stall a window at 100 Gbit/s);
- CUBIC (Linux's, and ns-3 3.44's default), SACK, timestamps, window scaling, an initial
  window of 10 segments, no Nagle (hostlib's TcpPeers sets TCP_NODELAY);
- connection set-up retries every 10 ms (set-up is before the allreduce's clock starts).

The prototypes' buffer-size anomaly (retransmissions "with no drop anywhere" once the buffers
reached 2 MB) was ns-3's traffic-control layer dropping where no device trace sees it, on
devices with flow control and no queue discipline: `ipnet.IpNetwork` builds its links without
flow control, and `NodeDrops` counts such drops (docs/sim.md, "Host collectives over TCP").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inaemu.sim.engine import PS_PER_S, Simulation

IPV4_HEADER = 20
TCP_HEADER = 20
TIMESTAMP_OPTION = 12  # with its padding: every segment carries it
MTU_RANGE = (308, 9000)  # 256-byte segments (MULTITREE's payload) to jumbo frames
CONGESTION = {"cubic": "ns3::TcpCubic", "newreno": "ns3::TcpNewReno"}
MIN_BUFFER = 1 << 20
PORT = 7000  # every rank listens on it


def mtu_problem(mtu: int) -> str | None:
    """Why `mtu` is not one the simulated TCP runs with (None: it is)."""
    lo, hi = MTU_RANGE
    if lo <= mtu <= hi:
        return None
    return f"MTU {mtu}: use {lo} (segments of 256 B) to {hi} (jumbo frames)"


@dataclass(frozen=True)
class TcpSettings:
    """What ns-3's TCP runs with (the module's docstring says why each)."""

    mtu: int = 1500
    buffer_bytes: int = 0  # send and receive buffers; 0: `buffer_for` the network
    min_rto_ps: int = PS_PER_S // 1000  # 1 ms
    clock_granularity_ps: int = 1_000_000  # 1 us
    delack_count: int = 2
    delack_timeout_ps: int = 20_000_000  # 20 us
    initial_cwnd: int = 10  # segments
    congestion: str = "cubic"
    connect_timeout_ps: int = 10 * PS_PER_S // 1000  # 10 ms between SYNs
    data_retries: int = 6  # timeouts of one segment before a connection gives up

    def __post_init__(self) -> None:
        problem = mtu_problem(self.mtu)
        if problem:
            raise ValueError(problem)
        if self.congestion not in CONGESTION:
            raise ValueError(f"congestion control {self.congestion!r}: use {', '.join(CONGESTION)}")
        if self.buffer_bytes and not 64 * 1024 <= self.buffer_bytes <= 1 << 30:
            raise ValueError(f"TCP buffers of {self.buffer_bytes} bytes: 64 KiB to 1 GiB")

    @property
    def segment_bytes(self) -> int:
        """Payload per segment: the MTU less the IPv4 and TCP headers and timestamps."""
        return self.mtu - IPV4_HEADER - TCP_HEADER - TIMESTAMP_OPTION

    def describe(self, buffer_bytes: int) -> str:
        return (
            f"TCP {self.congestion}, MTU {self.mtu} (segments of {self.segment_bytes} B), "
            f"buffers {buffer_bytes / 2**20:g} MiB, min RTO {self.min_rto_ps / 1e9:g} ms, "
            f"ACK every {self.delack_count} segments or {self.delack_timeout_ps / 1e6:g} us"
        )


SLOW_LINK_BPS = 1e9  # below this, Linux's minimum retransmission timeout (`min_rto_for`)
LINUX_MIN_RTO_PS = PS_PER_S // 5  # 200 ms


def min_rto_for(slowest_bps: float) -> int:
    """The minimum retransmission timeout for a network whose slowest link runs at
    `slowest_bps` (picoseconds): 1 ms from 1 Gbit/s up (a datacentre's), Linux's 200 ms
    below (the module's docstring)."""
    return TcpSettings.min_rto_ps if slowest_bps >= SLOW_LINK_BPS else LINUX_MIN_RTO_PS


def buffer_for(settings: TcpSettings, bdp_bytes: float) -> int:
    """The send and receive buffers: as set, else 1 MiB or twice `bdp_bytes` if more."""
    if settings.buffer_bytes:
        return settings.buffer_bytes
    return max(MIN_BUFFER, int(2 * bdp_bytes))


def apply(sim: Simulation, settings: TcpSettings, buffer_bytes: int) -> None:
    """Set every ns-3 default the simulated TCP depends on, for this run."""
    ns = sim.ns
    uint = ns.UintegerValue

    def time_ps(ps: int) -> Any:
        return ns.TimeValue(ns.PicoSeconds(ps))

    defaults: list[tuple[str, Any]] = [
        ("ns3::TcpL4Protocol::SocketType", ns.StringValue(CONGESTION[settings.congestion])),
        ("ns3::TcpL4Protocol::RecoveryType", ns.StringValue("ns3::TcpPrrRecovery")),
        ("ns3::TcpSocket::SegmentSize", uint(settings.segment_bytes)),
        ("ns3::TcpSocket::SndBufSize", uint(buffer_bytes)),
        ("ns3::TcpSocket::RcvBufSize", uint(buffer_bytes)),
        ("ns3::TcpSocket::InitialCwnd", uint(settings.initial_cwnd)),
        ("ns3::TcpSocket::InitialSlowStartThreshold", uint(0xFFFFFFFF)),
        ("ns3::TcpSocket::DelAckCount", uint(settings.delack_count)),
        ("ns3::TcpSocket::DelAckTimeout", time_ps(settings.delack_timeout_ps)),
        ("ns3::TcpSocket::TcpNoDelay", ns.BooleanValue(True)),
        ("ns3::TcpSocket::ConnTimeout", time_ps(settings.connect_timeout_ps)),
        ("ns3::TcpSocket::ConnCount", uint(6)),
        ("ns3::TcpSocket::DataRetries", uint(settings.data_retries)),
        ("ns3::TcpSocket::PersistTimeout", time_ps(settings.min_rto_ps)),
        ("ns3::TcpSocketBase::MinRto", time_ps(settings.min_rto_ps)),
        ("ns3::TcpSocketBase::ClockGranularity", time_ps(settings.clock_granularity_ps)),
        ("ns3::TcpSocketBase::Sack", ns.BooleanValue(True)),
        ("ns3::TcpSocketBase::Timestamp", ns.BooleanValue(True)),
        ("ns3::TcpSocketBase::WindowScaling", ns.BooleanValue(True)),
        ("ns3::TcpSocketBase::LimitedTransmit", ns.BooleanValue(True)),
        ("ns3::TcpSocketBase::ReTxThreshold", uint(3)),
        ("ns3::TcpSocketBase::UseEcn", ns.StringValue("Off")),
    ]
    for name, value in defaults:
        ns.Config.SetDefault(name, value)


class Connections:
    """The TCP connections of one collective (`glue.TcpMesh`): connection c joins rank
    `a` (its end 2c, which connects, as the higher rank does in TcpPeers) and rank `b`
    (end 2c + 1, which accepts); messages go both ways on it."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.mesh = sim.glue.TcpMesh()
        self.mesh.port = PORT
        sim.hold(self.mesh)
        self.owner: list[int] = []  # end -> its rank
        self.index: dict[tuple[int, int], int] = {}  # (rank, peer) -> rank's end

    def add(self, a: int, b: int, node_a: Any, node_b: Any, ip_b: int) -> None:
        """A connection from rank `a` (on `node_a`) to rank `b` (on `node_b`, at `ip_b`)."""
        c = int(self.mesh.Add(node_a, node_b, ip_b))
        self.owner += [a, b]
        self.index[(a, b)], self.index[(b, a)] = 2 * c, 2 * c + 1

    def end(self, rank: int, peer: int) -> int:
        """The end of rank's connection to peer, on rank's side."""
        return self.index[(rank, peer)]

    def counters(self) -> dict[str, int]:
        m = self.mesh
        return {
            "connections": len(self.owner) // 2,
            "segments": int(m.segments),
            "segment_bytes": int(m.segment_bytes),
            "acks": int(m.acks),
            "retransmissions": int(m.retransmissions),
            "timeouts": int(m.timeouts),
            "fast_recoveries": int(m.recoveries),
        }
