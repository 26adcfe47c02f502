"""Property: the fast data plane (softswitch/fast/) and the reference pipeline agree frame for
frame and counter for counter.

Hypothesis draws a session of control-plane changes and frames, and both data planes get the
same: jobs installed, removed and reinstalled with new epochs (pools handed to other jobs, in
a register file small enough that pools collide and some run past it), fan-in 0 with child
indices past the bitmap (the count wraps), multicast groups present or missing (replicas with
instance 0 or a worker's UDP port, several on one port), host rewrites,
routes and the forwarding default, loss entries at 0 %, 100 % or anything between (the same
seeded draws), counters overwritten as a controller may, registers and counters reset; and
frames from members (several behind one port, told apart by their UDP source ports),
non-members (another UDP port, another port) and parents, for current, stale or other runs
and epochs,
with any flags, opcodes, lane counts and values (saturating sums included), repeated
(duplicates, retransmissions, bursts), malformed (cut short anywhere, not IPv4, not UDP, other
ports, options, fragments, TTL 0 or 1) or ordinary IPv4. The frames are cut into batches at
random places, some handed over one at a time (`process`), and some control-plane changes are
made in place under the lock, as the P4Runtime server makes them.

After every step both emitted the same frames on the same ports in the same order; after
every step the counters, the direct counters and the registers are the same.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inaemu.common.wire import (
    ETHERTYPE_IPV4,
    INA_UDP_PORT,
    INA_VERSION,
    IP_PROTO_UDP,
    Flag,
    K,
    ipv4_checksum,
)
from inaemu.softswitch.batch import FrameBatch
from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.state import ActionCall, TableEntry

SLOTS = 8  # a small register file: pools collide, and some run past it
PORTS = range(0, 7)
MEMBERS = (1, 2, 3, 4)  # most children, and most packets, are on these ports
JOBS = (1, 2, 3)
UDPS = (INA_UDP_PORT, INA_UDP_PORT + 1, 40000)  # workers' UDP ports: a few behind one port
SWITCH_MAC, SWITCH_IP = 0x0200000000FE, 0x0A0000FE


def host_ip(port: int) -> int:
    return 0x0A000000 | port


# ---------------------------------------------------------------------- frames


@dataclass(frozen=True)
class Ina:
    port: int
    job: int
    tree: int
    slot: int
    seq: int
    flags: int = 0
    opcode: int = 0
    version: int = INA_VERSION
    lanes: int = K
    contrib: int = 1
    values: tuple[int, ...] = ()
    cut: int | None = None  # the frame ends here (a truncated frame)
    udp: int = INA_UDP_PORT  # the UDP source port: which worker behind the port


def ina_frame(p: Ina) -> bytes:
    lanes = np.zeros(K, ">i4")
    lanes[: min(K, len(p.values))] = p.values[:K]
    ina = struct.pack(
        "!BBHBBHHI",
        (p.version << 4) | (p.flags & 0xF),
        p.opcode,
        p.job,
        p.tree,
        p.lanes,
        p.slot,
        p.contrib,
        p.seq,
    )
    udp = struct.pack("!HHHH", p.udp, INA_UDP_PORT, 8 + len(ina) + 4 * K, 0x1234)
    data = ipv4(host_ip(p.port), SWITCH_IP, IP_PROTO_UDP, 64, udp + ina + lanes.tobytes())
    frame = ethernet(SWITCH_MAC, 0x020000000000 | p.port, data)
    return frame if p.cut is None else frame[: p.cut]


def ipv4(
    src: int, dst: int, proto: int, ttl: int, payload: bytes, ver_ihl: int = 0x45, frag: int = 0
) -> bytes:
    header = struct.pack(
        "!BBHHHBBHII", ver_ihl, 0, 20 + len(payload), 7, frag, ttl, proto, 0, src, dst
    )
    csum = ipv4_checksum(header)
    return header[:10] + csum.to_bytes(2, "big") + header[12:] + payload


def ethernet(dst: int, src: int, payload: bytes, ethertype: int = ETHERTYPE_IPV4) -> bytes:
    return dst.to_bytes(6, "big") + src.to_bytes(6, "big") + struct.pack("!H", ethertype) + payload


LANE_VALUES = st.one_of(
    st.integers(-1000, 1000),
    st.sampled_from([2**31 - 1, -(2**31), 2**30, -(2**30), -1, 0]),
    st.integers(-(2**31), 2**31 - 1),
)


@st.composite
def lane_values(draw: st.DrawFn) -> tuple[int, ...]:
    """A packet's lanes: a few values, repeated over all K lanes or not."""
    values = tuple(draw(st.lists(LANE_VALUES, min_size=1, max_size=4)))
    return values * (K // len(values) + 1) if draw(st.booleans()) else values


@dataclass(frozen=True)
class Node:
    """A job's node as installed: what packets that it takes look like."""

    job: int
    tree: int
    pool: int
    fanin: int
    parent: int
    children: tuple[tuple[int, int], ...]  # (port, UDP source port) of each child


def installed(pipe: Pipeline) -> list[Node]:
    return [
        Node(
            job,
            tree,
            e.action.params[1],
            e.action.params[2],
            e.action.params[5],
            tuple((k[2], k[3]) for k in pipe.ina_child.entries if k[:2] == (job, tree)),
        )
        for (job, tree), e in sorted(pipe.ina_job.entries.items())
    ]


@st.composite
def heads(draw: st.DrawFn, nodes: list[Node]) -> tuple[Ina, Node | None]:
    """A chunk's header: mostly for an installed node and a slot in its pool."""
    node: Node | None = None
    if nodes and draw(st.integers(0, 4)) > 0:
        node = draw(st.sampled_from(nodes))
    slot = draw(st.integers(0, 3))
    if node is not None and draw(st.integers(0, 4)) > 0:
        slot = slot % node.pool
    head = Ina(
        port=0,
        job=node.job if node else draw(st.sampled_from([*JOBS, 9])),
        tree=node.tree if node else draw(st.sampled_from([0, 1])),
        slot=slot | (0x8000 if draw(st.booleans()) else 0),
        seq=(draw(st.integers(0, 1)) << 16) | draw(st.integers(0, 3)),
        opcode=draw(st.sampled_from([0, 0, 0, 1, 2])),
        flags=draw(st.sampled_from([0, 0, 0, 0, int(Flag.RETX), int(Flag.OVERFLOW)])),
    )
    return head, node


@st.composite
def rounds(draw: st.DrawFn, nodes: list[Node]) -> list[Ina]:
    """Packets for one chunk from several children, in any order, some twice: mostly the
    node's children (a round of aggregation), sometimes other ports or UDP ports. Mostly well
    formed; now and then one is mangled (a header field out of range, or the frame cut
    short)."""
    head, node = draw(heads(nodes))
    anyone = [(p, u) for p in PORTS for u in UDPS]
    children = [*node.children] * 3 + anyone if node and node.children else anyone
    packets = []
    for port, udp in draw(st.lists(st.sampled_from(children), min_size=1, max_size=6)):
        pkt = replace(head, port=port, udp=udp, values=draw(lane_values()))
        if draw(st.integers(0, 9)) == 0:
            pkt = draw(mangled(pkt))
        packets.append(pkt)
    return packets


@st.composite
def burst(draw: st.DrawFn, nodes: list[Node]) -> list[Ina]:
    """300 copies of one contribution: to a node with fan-in 0 (and no bitmap bits), the count
    wraps and completes at the 256th."""
    wrapping = [n for n in nodes if n.fanin == 0 and n.children]
    head, node = draw(heads(wrapping or nodes))
    port, udp = draw(
        st.sampled_from(
            node.children if node and node.children else [(p, INA_UDP_PORT) for p in PORTS]
        )
    )
    return [replace(head, port=port, udp=udp, flags=0, values=draw(lane_values()))] * 300


@st.composite
def mangled(draw: st.DrawFn, pkt: Ina) -> Ina:
    field = draw(st.sampled_from(["version", "opcode", "lanes", "flags", "contrib", "cut"]))
    value = {
        "version": st.sampled_from([0, 2, 15]),
        "opcode": st.sampled_from([3, 200, 255]),
        "lanes": st.sampled_from([0, 1, K + 1, 255]),
        "flags": st.integers(0, 15),
        "contrib": st.sampled_from([0, 2, 0xFFFF]),
        "cut": st.integers(0, 320),
    }[field]
    change: dict[str, Any] = {field: draw(value)}
    return replace(pkt, **change)


@st.composite
def result(draw: st.DrawFn, head: Ina, nodes: list[Node]) -> Ina:
    """The RESULT a parent sends down for `head`'s chunk (from the parent port, or another;
    now and then for another chunk or run)."""
    parents = [n.parent for n in nodes if (n.job, n.tree) == (head.job, head.tree)]
    return replace(
        head,
        seq=draw(st.sampled_from([head.seq] * 3 + [head.seq ^ 1, head.seq ^ 0x10000])),
        port=draw(st.sampled_from(parents * 3 + [5, 6, 0, 1])),
        flags=draw(st.sampled_from([int(Flag.RESULT), int(Flag.RESULT | Flag.OVERFLOW)])),
        contrib=draw(st.integers(1, 8)),
        values=draw(lane_values()),
    )


@st.composite
def other_frames(draw: st.DrawFn) -> bytes:
    """Anything but a well-formed INA packet: ordinary IPv4 (for the routes), other protocols,
    IPv4 with options or fragments, TTL 0 or 1, other UDP ports, other ethertypes."""
    kind = draw(st.sampled_from(["ip", "proto", "options", "frag", "ttl", "udp", "ether"]))
    dst = draw(st.sampled_from([0x0A000001, 0x0A000102, 0x0A0000FE, 0x0B000001, 0xC0A80101]))
    ttl = draw(st.sampled_from([0, 1, 2, 64])) if kind == "ttl" else 64
    proto = draw(st.sampled_from([6, 1])) if kind == "proto" else IP_PROTO_UDP
    dport = draw(st.sampled_from([53, INA_UDP_PORT + 1])) if kind == "udp" else 9
    udp = struct.pack("!HHHH", 1000, dport, 16, 0) + bytes(draw(st.binary(max_size=8)))
    ver_ihl = draw(st.sampled_from([0x46, 0x55, 0x44])) if kind == "options" else 0x45
    frag = draw(st.sampled_from([1, 0x2001])) if kind == "frag" else 0
    data = ipv4(0x0A000001, dst, proto, ttl, udp, ver_ihl, frag)
    ethertype = draw(st.sampled_from([0x86DD, 0x0806])) if kind == "ether" else ETHERTYPE_IPV4
    frame = ethernet(0x0200000000FE, 0x020000000001, data, ethertype)
    return frame[: draw(st.none() | st.integers(0, len(frame)))]


@st.composite
def frame_lists(draw: st.DrawFn, nodes: list[Node]) -> list[tuple[int, bytes]]:
    """Rounds of INA packets (followed by their results from above, or not), bursts, other
    frames."""
    frames: list[tuple[int, bytes]] = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["round", "round", "round", "result", "other", "burst"]))
        if kind == "other":
            frames.append((draw(st.sampled_from(PORTS)), draw(other_frames())))
            continue
        packets = draw(burst(nodes)) if kind == "burst" else draw(rounds(nodes))
        if kind == "result":
            packets.append(draw(result(packets[0], nodes)))
        frames += [(pkt.port, ina_frame(pkt)) for pkt in packets]
    return frames


# ---------------------------------------------------------------------- control plane

Change = Callable[[Pipeline], None]  # a partial of one of the functions below


def install(
    pipe: Pipeline, job: int, entries: list[tuple[str, tuple[int, ...], ActionCall]]
) -> None:
    remove(pipe, job)
    for table, key, action in entries:
        if key not in pipe.tables[table].entries:
            pipe.tables[table].insert(TableEntry(key, action))


def remove(pipe: Pipeline, job: int) -> None:
    for table in (pipe.ina_job, pipe.ina_child):
        for key in [k for k in table.entries if k[0] == job]:
            table.delete(key)


def group(pipe: Pipeline, mgid: int, replicas: list[tuple[int, int]]) -> None:
    if mgid in pipe.multicast.groups:
        pipe.multicast.delete(mgid)
    if replicas:
        pipe.multicast.insert(mgid, replicas)


def loss(pipe: Pipeline, port: int, threshold: int | None) -> None:
    if (port,) in pipe.ina_loss.entries:
        pipe.ina_loss.delete((port,))
    if threshold is not None:
        pipe.ina_loss.insert(TableEntry((port,), ActionCall("set_loss", (threshold,))))


def forward(port: int) -> ActionCall:
    return ActionCall("ipv4_forward", (0x020000000000 | port, port))


def route(pipe: Pipeline, prefix: int, plen: int, port: int | None) -> None:
    """A route to `port`, or a drop entry for None; either replaces what was there."""
    key = (prefix, plen)
    if key in pipe.ipv4_lpm.entries:
        pipe.ipv4_lpm.delete(key)
    pipe.ipv4_lpm.insert(TableEntry(key, ActionCall("drop") if port is None else forward(port)))


def unroute(pipe: Pipeline, prefix: int, plen: int) -> None:
    if (prefix, plen) in pipe.ipv4_lpm.entries:
        pipe.ipv4_lpm.delete((prefix, plen))


def egress(pipe: Pipeline, port: int, to_host: bool) -> None:
    if (port,) in pipe.ina_egress.entries:
        pipe.ina_egress.delete((port,))
    if to_host:
        mac = 0x020000000000 | port
        call = ActionCall("to_host", (mac, host_ip(port), SWITCH_MAC, SWITCH_IP))
        pipe.ina_egress.insert(TableEntry((port,), call))


# In place, under the lock, as the P4Runtime server changes some state:


def overwrite_counter(pipe: Pipeline, which: int, index: int, value: int) -> None:
    """A controller writes a counter (P4Runtime MODIFY of a CounterEntry)."""
    counter = list(pipe.counters.values())[which]
    with pipe.lock:
        counter.packets[index % counter.size] = value
        counter.bytes[index % counter.size] = value * 100


def default_route(pipe: Pipeline, port: int | None) -> None:
    """The forwarding default assigned (as the server restores one)."""
    with pipe.lock:
        pipe.ipv4_lpm.default = ActionCall("drop") if port is None else forward(port)


def new_epoch(pipe: Pipeline, job: int, epoch: int) -> None:
    """An agg_node entry's action assigned (as the server's MODIFY)."""
    with pipe.lock:
        for tree in (0, 1):
            entry = pipe.ina_job.entries.get((job, tree))
            if entry is not None:
                entry.action = ActionCall("agg_node", (*entry.action.params[:6], epoch))


def reset(pipe: Pipeline) -> None:
    pipe.reset_state()


@st.composite
def job_entries(draw: st.DrawFn, job: int) -> list[tuple[str, tuple[int, ...], ActionCall]]:
    """An installation of `job`: its agg_node (any epoch, maybe not the root, maybe fan-in 0),
    its children (indices maybe past the bitmap), on one tree or two."""
    entries: list[tuple[str, tuple[int, ...], ActionCall]] = []
    wraps = draw(st.integers(0, 3)) == 0  # fan-in 0, no bitmap bits: the count wraps at 256
    for tree in draw(st.sampled_from([[0], [0, 1]])):
        ports = draw(  # (port, UDP port): several children behind one port now and then
            st.lists(
                st.tuples(st.sampled_from([*MEMBERS, 0, 5]), st.sampled_from(UDPS)),
                min_size=1,
                max_size=4,
                unique=True,
            )
        )
        params = (
            draw(st.integers(0, SLOTS - 1)),  # base
            draw(st.integers(1, 4)),  # pool_size (base + pool may run past the slots)
            0 if wraps else draw(st.sampled_from([len(ports)] * 4 + [0, 1, 2])),  # fanin
            draw(st.sampled_from([job, job, 7, 0])),  # child_mgid (7: no such group)
            draw(st.sampled_from([1, 1, 0])),  # is_root
            draw(st.sampled_from([0, 5, 6])),  # parent_port
            draw(st.integers(1, 3)),  # epoch
        )
        entries.append(("InaIngress.agg.ina_job", (job, tree), ActionCall("agg_node", params)))
        for i, (port, udp) in enumerate(ports):
            index = 40 if wraps else draw(st.sampled_from([i, i, i, 40]))
            key = (job, tree, port, udp)
            entries.append(("InaIngress.agg.ina_child", key, ActionCall("set_child", (index,))))
    return entries


THRESHOLDS = st.sampled_from([0x40000000, 0x80000000, 0xFFFFFFFF]) | st.integers(0, 2**32 - 1)
PREFIXES = st.sampled_from([(0, 0), (0x0A000000, 8), (0x0A000100, 24), (0x0A000001, 32)])
port = st.sampled_from(PORTS)
job = st.sampled_from(JOBS)


def replica_lists(min_size: int = 0) -> st.SearchStrategy[list[tuple[int, int]]]:
    """A group's replicas: (port, instance), the instance 0 or a worker's UDP port (a copy to
    it), now and then several on one port."""
    instance = st.sampled_from([0, 0, *UDPS, 7])
    return st.lists(st.tuples(port, instance), min_size=min_size, max_size=6, unique=True)


@st.composite
def set_up(draw: st.DrawFn) -> Change:
    """A job installed, a multicast group, a host port, a loss entry: how a session starts."""
    j = draw(job)
    kind = draw(st.sampled_from(["install", "group", "egress", "loss"]))
    if kind == "install":
        return partial(install, job=j, entries=draw(job_entries(j)))
    if kind == "group":
        return partial(group, mgid=j, replicas=draw(replica_lists()))
    if kind == "egress":
        return partial(egress, port=draw(port), to_host=True)
    return partial(loss, port=draw(port), threshold=draw(THRESHOLDS))


@st.composite
def sessions(draw: st.DrawFn) -> list[Change]:
    """Job 1 and its group, and more set-up."""
    first = [
        partial(install, job=1, entries=draw(job_entries(1))),
        partial(group, mgid=1, replicas=draw(replica_lists(1))),
    ]
    return first + draw(st.lists(set_up(), max_size=5))


CHANGES = ["install", "install", "remove", "group", "loss", "route", "unroute", "egress"]
CHANGES += ["overwrite_counter", "default_route", "new_epoch", "reset"]


@st.composite
def changes(draw: st.DrawFn) -> Change:
    """Any control-plane change."""
    kind = draw(st.sampled_from(CHANGES))
    if kind == "install":
        j = draw(job)
        return partial(install, job=j, entries=draw(job_entries(j)))
    if kind == "remove":
        return partial(remove, job=draw(job))
    if kind == "group":
        mgid = draw(st.sampled_from([*JOBS, 7]))
        return partial(group, mgid=mgid, replicas=draw(replica_lists()))
    if kind == "loss":
        return partial(loss, port=draw(port), threshold=draw(st.none() | THRESHOLDS))
    if kind in ("route", "unroute"):
        prefix, plen = draw(PREFIXES)
        if kind == "unroute":
            return partial(unroute, prefix=prefix, plen=plen)
        return partial(route, prefix=prefix, plen=plen, port=draw(st.none() | port))
    if kind == "egress":
        return partial(egress, port=draw(port), to_host=draw(st.booleans()))
    if kind == "overwrite_counter":
        which, index, value = draw(
            st.tuples(st.integers(0, 3), st.integers(0, 20), st.integers(0, 99))
        )
        return partial(overwrite_counter, which=which, index=index, value=value)
    if kind == "default_route":
        return partial(default_route, port=draw(st.none() | port))
    if kind == "new_epoch":
        return partial(new_epoch, job=draw(job), epoch=draw(st.integers(1, 3)))
    return partial(reset)


@dataclass(frozen=True)
class Frames:
    frames: list[tuple[int, bytes]]
    cuts: list[int]  # the fast data plane takes them in batches that end here
    one_by_one: bool  # ... or each alone, through process()

    def __repr__(self) -> str:
        return f"Frames({len(self.frames)} frames, cuts={self.cuts}, one_by_one={self.one_by_one})"


def frame_steps(nodes: list[Node]) -> st.SearchStrategy[Frames]:
    return st.builds(
        Frames, frame_lists(nodes), st.lists(st.integers(1, 40), max_size=4), st.booleans()
    )


# ---------------------------------------------------------------------- the comparison


def state(pipe: Pipeline) -> dict[str, object]:
    """Everything a data plane counts and keeps, as plain ints."""
    r = pipe.registers
    return {
        "counters": {n: (list(c.packets), list(c.bytes)) for n, c in pipe.counters.items()},
        "direct": {k: (e.packets, e.bytes) for k, e in pipe.ina_child.entries.items()},
        "registers": [
            [int(v) for v in field]
            for field in (r.bitmap, r.count, r.contrib, r.state, r.seq, r.owner)
        ],
        "lanes": np.asarray(r.lanes).tolist(),
    }


def fast_run(pipe: Pipeline, step: Frames) -> list[tuple[int, bytes]]:
    if step.one_by_one and len(step.frames) < 50:
        return [out for port, frame in step.frames for out in pipe.process(port, frame)]
    out: list[tuple[int, bytes]] = []
    start = 0
    for cut in sorted({c for c in step.cuts if c < len(step.frames)} | {len(step.frames)}):
        out += list(pipe.process_batch(FrameBatch.of(step.frames[start:cut])))
        start = cut
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 3), setup=sessions(), data=st.data())
def test_fast_and_reference_agree(seed: int, setup: list[Change], data: st.DataObject) -> None:
    ref = Pipeline(seed=seed, slots=SLOTS)
    fast = Pipeline(seed=seed, slots=SLOTS, compiled=True)
    steps: list[Change | Frames] = list(setup)
    for n in range(len(setup) + data.draw(st.integers(1, 12), label="steps")):
        if n >= len(setup):
            steps.append(data.draw(st.one_of(changes(), *[frame_steps(installed(ref))] * 2)))
        step = steps[n]
        if isinstance(step, Frames):
            expected = [out for port, frame in step.frames for out in ref.process(port, frame)]
            assert fast_run(fast, step) == expected, f"step {n}: the frames emitted differ"
        else:
            step(ref)
            step(fast)
        assert state(fast) == state(ref), f"step {n}: the state differs after {step!r:.300}"


def test_watched_tables_count_changes_and_keep_their_checks() -> None:
    """The fast data plane recompiles its tables when the change log moves: every table
    change counts once, a refused one counts nothing (LPM's prefix checks still apply)."""
    from inaemu.softswitch.state import ChangeLog, ExactTable, LpmTable, StateError

    log = ChangeLog()
    drop = ActionCall("drop", ())
    exact = ExactTable("t", 4, drop, log=log)
    lpm = LpmTable("r", 4, drop, log=log)
    exact.insert(TableEntry((1,), drop))
    lpm.insert(TableEntry((0x0A000000, 8), drop))
    lpm.modify((0x0A000000, 8), ActionCall("fwd", (2,)))
    lpm.set_default(ActionCall("fwd", (1,)))
    assert log.version == 4
    try:
        lpm.insert(TableEntry((0x0A000001, 8), drop))  # bits past the prefix
    except StateError:
        pass
    else:
        raise AssertionError("an LPM key with bits past its prefix was accepted")
    lpm.delete((0x0A000000, 8))
    assert log.version == 5
    assert lpm.lookup((0x0A0000FF,)) is None
