"""Building conformance cases from readable descriptions: the switch's addresses and hosts,
INA packets as a case describes them (`Ina`), saturating sums, a single-switch case and the
STF text it writes (`Case`), a star of workers and the result each gets. The single-switch
cases (`switch_cases.py`) and the multi-switch ones (`network_cases.py`) are written with
them, by `python -m inaemu.conformance.make_cases`.

Every expected packet is computed here from first principles (the sums by numpy, the
rewrites and checksums by hand), never by running a switch, so a case checks the switch
instead of restating it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.common.wire import (
    INA_UDP_PORT,
    INA_VERSION,
    INT32_MAX,
    INT32_MIN,
    Endpoint,
    Flag,
    FrameTemplate,
    K,
    Opcode,
    pack_frames,
    pack_payloads,
    slot_field,
)
from inaemu.conformance.stf import END_LINE
from inaemu.p4.constants import DropReason, Event

HERE = Path(__file__).resolve().parent / "cases"
# The switch's aggregation address: workers send to it, results come back from it.
SWITCH = Endpoint("00:00:00:00:00:fe", "10.0.0.254")
AGG2 = Endpoint("02:00:00:00:01:fe", "10.0.1.254")  # another one, for per-port entries
JOB_TABLE = "InaIngress.agg.ina_job"
CHILD_TABLE = "InaIngress.agg.ina_child"
EGRESS_TABLE = "InaEgress.rewrite.ina_egress"
DROPS = "InaIngress.counters.ina_drops"
EVENTS = "InaIngress.agg.ina_events"

# Lane values as a case writes them: a tuple of ints, or a numpy row of integers.
Lanes = Sequence[int] | npt.NDArray[np.integer[Any]]


def host(i: int) -> Endpoint:
    return Endpoint(f"00:00:00:00:00:{i:02x}", f"10.0.0.{i}")


def mac_int(ep: Endpoint) -> int:
    return int(ep.mac.replace(":", ""), 16)


def ip_int(ep: Endpoint) -> int:
    a, b, c, d = (int(x) for x in ep.ip.split("."))
    return a << 24 | b << 16 | c << 8 | d


@dataclass(frozen=True)
class Ina:
    """One INA packet as the case describes it."""

    src: Endpoint
    dst: Endpoint
    values: tuple[int, ...]
    opcode: int = Opcode.SUM
    job: int = 1
    tree: int = 0
    slot: int = 0
    set_: int = 0
    seq: int = 0
    flags: int = 0
    contrib: int = 1
    lanes: int = K
    version: int = INA_VERSION
    udp_csum: int = 0x1234  # workers may send any UDP checksum; the switch emits 0

    def frame(self) -> bytes:
        vals = np.zeros((1, K), dtype=np.int64)
        vals[0, : len(self.values)] = self.values
        rec = pack_frames(
            FrameTemplate(self.src, self.dst),
            pack_payloads(
                opcode=self.opcode,
                job_id=self.job,
                tree_id=self.tree,
                slot=slot_field(self.slot, self.set_),
                seq=self.seq,
                values=vals.astype(np.uint32).view(np.int32),
                lanes=self.lanes,
                flags=self.flags,
                contrib=self.contrib,
            ),
        )
        rec["ver_flags"] = (self.version << 4) | (self.flags & 0xF)
        rec["udp_csum"] = self.udp_csum
        return rec.tobytes()


def lanes_of(values: Lanes) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def sum_sat(rows: Sequence[Lanes]) -> tuple[tuple[int, ...], bool]:
    """Saturating int32 sum in arrival order, lane by lane (what the switch must do)."""
    acc = np.zeros(K, dtype=np.int64)
    over = False
    for i, row in enumerate(rows):
        r = np.zeros(K, dtype=np.int64)
        r[: len(row)] = row
        if i == 0:
            acc = r
            continue
        acc = acc + r
        over |= bool(((acc > INT32_MAX) | (acc < INT32_MIN)).any())
        acc = np.clip(acc, INT32_MIN, INT32_MAX)
    return lanes_of(acc), over


@dataclass
class Case:
    name: str
    doc: str
    lines: list[str] = field(default_factory=list)

    def comment(self, text: str) -> None:
        self.lines.append(f"# {text}")

    def add(
        self, table: str, keys: Sequence[tuple[str, int | str]], action: str, **params: int
    ) -> None:
        key_text = " ".join(f"{k}:{v}" for k, v in keys)
        args = ",".join(f"{k}:{v}" for k, v in params.items())
        self.lines.append(f"add {table} {key_text} {action}({args})")

    def job(
        self,
        job: int,
        tree: int,
        *,
        base: int,
        pool: int,
        fanin: int,
        mgid: int,
        root: bool = True,
        parent_port: int = 0,
        epoch: int = 1,
    ) -> None:
        self.add(
            JOB_TABLE,
            [("hdr.ina.job_id", job), ("hdr.ina.tree_id", tree)],
            "InaIngress.agg.agg_node",
            base=base,
            pool_size=pool,
            fanin=fanin,
            child_mgid=mgid,
            is_root=int(root),
            parent_port=parent_port,
            epoch=epoch,
        )

    def child(self, job: int, tree: int, port: int, index: int, udp: int = INA_UDP_PORT) -> None:
        """Child `index` of (job, tree): what arrives on `port` from UDP port `udp` (a worker's
        own; a switch below sends from the INA port)."""
        self.add(
            CHILD_TABLE,
            [
                ("hdr.ina.job_id", job),
                ("hdr.ina.tree_id", tree),
                ("standard_metadata.ingress_port", port),
                ("udp_port", udp),
            ],
            "InaIngress.agg.set_child",
            index=index,
        )

    def to_host(self, port: int, ep: Endpoint, agg: Endpoint = SWITCH) -> None:
        self.add(
            EGRESS_TABLE,
            [("standard_metadata.egress_port", port)],
            "InaEgress.rewrite.to_host",
            dmac=mac_int(ep),
            dip=ip_int(ep),
            smac=mac_int(agg),
            sip=ip_int(agg),
        )

    def mcast(self, mgid: int, handle: int, ports: Sequence[int], rid: int = 0) -> None:
        self.lines.append(f"mc_mgrp_create {mgid}")
        self.lines.append(f"mc_node_create {rid} " + " ".join(str(p) for p in ports))
        self.lines.append(f"mc_node_associate {mgid} {handle}")

    def packet(self, port: int, pkt: Ina | bytes) -> None:
        data = pkt.frame() if isinstance(pkt, Ina) else pkt
        self.lines.append(f"packet {port} {data.hex()}")

    def expect(self, port: int, pkt: Ina | bytes) -> None:
        data = pkt.frame() if isinstance(pkt, Ina) else pkt
        self.lines.append(f"expect {port} {data.hex()} $")

    def counter(self, name: str, index: int, packets: int) -> None:
        self.lines.append(f"check_counter {name}({index}) packets == {packets}")

    def drops(self, reason: DropReason, packets: int) -> None:
        self.comment(f"drop reason {reason.name}")
        self.counter(DROPS, int(reason), packets)

    def events(self, event: Event, packets: int) -> None:
        self.comment(f"event {event.name}")
        self.counter(EVENTS, int(event), packets)

    def text(self) -> str:
        head = [f"# {line}" if line else "#" for line in self.doc.strip().splitlines()]
        head.append("# Generated by python -m inaemu.conformance.make_cases; edit that, not this.")
        return "\n".join([*head, "", *self.lines, END_LINE, ""])


def star(
    case: Case,
    n: int,
    *,
    job: int = 1,
    base: int = 0,
    pool: int = 4,
    mgid: int = 1,
    first_port: int = 1,
    epoch: int = 1,
    agg: Endpoint = SWITCH,
    tree: int = 0,
    host_entries: bool = True,
) -> list[int]:
    """A one-switch job: hosts on ports first_port.., child index = port order."""
    ports = list(range(first_port, first_port + n))
    case.job(job, tree, base=base, pool=pool, fanin=n, mgid=mgid, epoch=epoch)
    for i, p in enumerate(ports):
        case.child(job, tree, p, i)
        if host_entries:
            case.to_host(p, host(p), agg)
    # as the controller installs a job: each worker's copy has its UDP port for instance
    case.mcast(mgid, mgid - 1, ports, rid=INA_UDP_PORT)
    return ports


def result_to(
    port: int,
    last: Ina,
    values: Sequence[int],
    *,
    contrib: int,
    overflow: bool = False,
    agg: Endpoint = SWITCH,
    udp: int | None = INA_UDP_PORT,
) -> Ina:
    """The result copy the switch sends out host port `port` after `last` completed the slot:
    to the host's MAC and IP, from the aggregation address `agg` (the port's to_host entry)
    and the INA UDP port, to UDP port `udp`: the copy's replica instance (the worker's port),
    or a retransmission's source port (None: the port `last` was sent to, for a replica of
    instance 0)."""
    flags = int(Flag.RESULT) | (int(Flag.OVERFLOW) if overflow else 0)
    return replace(
        last,
        src=Endpoint(agg.mac, agg.ip, INA_UDP_PORT),
        dst=Endpoint(host(port).mac, host(port).ip, last.dst.udp_port if udp is None else udp),
        values=lanes_of(values),
        flags=flags,
        contrib=contrib,
        udp_csum=0,
    )
