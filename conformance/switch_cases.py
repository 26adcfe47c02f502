"""The single-switch conformance cases (conformance/cases/*.stf), described with
`case_builder.py`'s helpers and written by `python -m inaemu.conformance.make_cases`."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from inaemu.common.wire import (
    INA_UDP_PORT,
    INT32_MAX,
    INT32_MIN,
    Endpoint,
    Flag,
    K,
    Opcode,
    seq_field,
)
from inaemu.conformance.case_builder import (
    AGG2,
    SWITCH,
    Case,
    Ina,
    host,
    lanes_of,
    result_to,
    star,
    sum_sat,
)
from inaemu.p4.constants import DropReason, Event


def case_reduce(op: Opcode, n: int) -> Case:
    rng = np.random.default_rng(1000 + 10 * int(op) + n)
    c = Case(
        f"{op.name.lower()}_{n}_worker{'s' if n > 1 else ''}",
        f"{op.name} over {n} worker(s) on one switch: every worker gets the result.",
    )
    ports = star(c, n)
    if op == Opcode.OR:
        rows = [rng.integers(0, 2**32, K, dtype=np.uint64).astype(np.int64) for _ in ports]
        rows = [np.where(r >= 2**31, r - 2**32, r) for r in rows]
        agg = np.bitwise_or.reduce(np.stack(rows).astype(np.int32).view(np.uint32), axis=0)
        total = lanes_of(agg.view(np.int32))
    elif op == Opcode.MAX:
        rows = [rng.integers(-(2**31), 2**31, K) for _ in ports]
        total = lanes_of(np.max(np.stack(rows), axis=0))
    else:
        rows = [rng.integers(-(2**24), 2**24, K) for _ in ports]
        total, _ = sum_sat(rows)
    pkts = [
        Ina(host(p), SWITCH, lanes_of(r), opcode=op, seq=7)
        for p, r in zip(ports, rows, strict=True)
    ]
    for p, pkt in zip(ports, pkts, strict=True):
        c.packet(p, pkt)
    for p in ports:
        c.expect(p, result_to(p, pkts[-1], total, contrib=n))
    c.events(Event.CONTRIBUTION, n)
    c.events(Event.FIRST, 1)
    c.events(Event.COMPLETE_ROOT, 1)
    return c


def case_duplicates() -> Case:
    c = Case(
        "duplicates",
        """
A duplicate before completion is dropped (DROP_DUPLICATE) and changes nothing; a duplicate
after completion (a retransmission) is answered with the stored result, unicast to its sender.""",
    )
    ports = star(c, 3)
    rows = [(1, 2, 3), (10, 20, 30), (100, 200, 300)]
    pkts = [Ina(host(p), SWITCH, r, seq=42, slot=2) for p, r in zip(ports, rows, strict=True)]
    total = (111, 222, 333)
    c.packet(1, pkts[0])
    c.comment("worker 1 again before completion: dropped")
    c.packet(1, replace(pkts[0], flags=int(Flag.RETX)))
    c.packet(2, pkts[1])
    c.packet(3, pkts[2])
    for p in ports:
        c.expect(p, result_to(p, pkts[2], total, contrib=3))
    c.comment("worker 2 retransmits after completion (its result was lost): unicast reply")
    retx = replace(pkts[1], flags=int(Flag.RETX), values=(0,) * 3)
    c.packet(2, retx)
    c.expect(2, result_to(2, retx, total, contrib=3))
    c.drops(DropReason.DUPLICATE, 1)
    c.events(Event.RETX_REPLY, 1)
    return c


def case_lost_result() -> Case:
    c = Case(
        "lost_result",
        """
Results to workers 2 and 4 are lost on the way (they never see them). Each retransmits its
contribution with RETX and gets the stored result back, unicast, with the original seq.""",
    )
    ports = star(c, 4)
    rows = [(p, -p, 2 * p) for p in ports]
    pkts = [
        Ina(host(p), SWITCH, r, seq=9, slot=1, set_=1) for p, r in zip(ports, rows, strict=True)
    ]
    total = (10, -10, 20)
    for p, pkt in zip(ports, pkts, strict=True):
        c.packet(p, pkt)
    for p in ports:
        c.expect(p, result_to(p, pkts[-1], total, contrib=4))
    for p in (2, 4):
        retx = replace(pkts[p - 1], flags=int(Flag.RETX))
        c.packet(p, retx)
        c.expect(p, result_to(p, retx, total, contrib=4))
    c.events(Event.RETX_REPLY, 2)
    c.events(Event.CONTRIBUTION, 4)
    return c


def case_slot_reuse() -> Case:
    c = Case(
        "slot_reuse",
        """
One slot used for three rounds: set 0, set 1, set 0 again (chunks 0, W, 2W with W=4).
Each use starts fresh: its first contribution overwrites the lanes left by the previous use.""",
    )
    ports = star(c, 2)
    for rnd in range(3):
        set_ = rnd % 2
        rows = [(rnd * 10 + 1, rnd), (rnd * 10 + 2, -rnd)]
        pkts = [
            Ina(host(p), SWITCH, r, slot=3, set_=set_, seq=3 + 4 * rnd)
            for p, r in zip(ports, rows, strict=True)
        ]
        c.comment(f"round {rnd}: set {set_}")
        for p, pkt in zip(ports, pkts, strict=True):
            c.packet(p, pkt)
        total = (rnd * 20 + 3, 0)
        for p in ports:
            c.expect(p, result_to(p, pkts[-1], total, contrib=2))
    c.events(Event.FIRST, 3)
    c.events(Event.COMPLETE_ROOT, 3)
    return c


def case_stale_copies() -> Case:
    c = Case(
        "stale_copies",
        """
Copies that outlive their round are dropped as DROP_STALE instead of corrupting the next use
of the cell (W=1, so chunk i uses slot 0, set i mod 2): a late copy of the completed use from
a worker that has moved on, a copy of an old chunk arriving mid-way through a new use, and a
copy of an old chunk whose sender's bit is set in a later use (not a retransmission of it).""",
    )
    ports = star(c, 2, pool=1)

    def chunk(p: int, i: int) -> Ina:
        return Ina(host(p), SWITCH, (i + 1, p), slot=0, set_=i % 2, seq=i)

    c.packet(1, chunk(1, 0))
    c.packet(2, chunk(2, 0))
    for p in ports:
        c.expect(p, result_to(p, chunk(2, 0), (2, 3), contrib=2))
    c.packet(1, chunk(1, 1))
    c.comment("late copy of worker 1's chunk 0: set 0 is complete with seq 0 -> stale")
    c.packet(1, chunk(1, 0))
    c.packet(2, chunk(2, 1))
    for p in ports:
        c.expect(p, result_to(p, chunk(2, 1), (4, 3), contrib=2))
    c.packet(1, chunk(1, 2))
    c.comment("late copy of worker 2's chunk 0 while chunk 2 is being summed -> stale")
    c.packet(2, chunk(2, 0))
    c.packet(2, chunk(2, 2))
    for p in ports:
        c.expect(p, result_to(p, chunk(2, 2), (6, 3), contrib=2))
    c.comment("a copy of worker 1's chunk 0 after chunk 2 completed set 0: its bit is set, but")
    c.comment("the cell holds seq 2, so it is no retransmission: stale, never answered")
    c.packet(1, replace(chunk(1, 0), flags=int(Flag.RETX)))
    c.drops(DropReason.STALE, 3)
    c.events(Event.FIRST, 3)
    c.events(Event.RETX_REPLY, 0)
    return c


def case_malformed() -> Case:
    c = Case(
        "malformed",
        """
Every malformed or foreign INA packet is dropped and counted under its own reason:
non-member port, unknown job, unknown tree, slot past the pool, lanes 0, lanes > K,
bad version, bad opcode, a RESULT from a child, and a truncated packet. Nothing is emitted
and the slot is untouched: the job still completes correctly afterwards.""",
    )
    ports = star(c, 2)
    good = Ina(host(1), SWITCH, (5, 6, 7), seq=1)
    c.comment("port 5 is not a member of job 1")
    c.packet(5, replace(good, src=host(5)))
    c.packet(1, replace(good, job=9))
    c.packet(1, replace(good, tree=3))
    c.packet(1, replace(good, slot=4))
    c.packet(1, replace(good, lanes=0))
    c.packet(1, replace(good, lanes=K + 1))
    c.packet(1, replace(good, version=2))
    c.packet(1, replace(good, opcode=3))
    c.packet(1, replace(good, flags=int(Flag.RESULT)))
    c.comment("truncated: the frame ends inside the lanes")
    c.packet(1, good.frame()[:100])
    c.comment("truncated: the frame ends inside the INA header")
    c.packet(1, good.frame()[:50])
    c.packet(1, good)
    second = Ina(host(2), SWITCH, (1, 1, 1), seq=1)
    c.packet(2, second)
    for p in ports:
        c.expect(p, result_to(p, second, (6, 7, 8), contrib=2))
    c.drops(DropReason.NOT_MEMBER, 1)
    c.drops(DropReason.UNKNOWN_JOB, 2)
    c.drops(DropReason.SLOT_RANGE, 1)
    c.drops(DropReason.BAD_LANES, 2)
    c.drops(DropReason.BAD_VERSION, 1)
    c.drops(DropReason.BAD_OPCODE, 1)
    c.drops(DropReason.UNEXPECTED_RESULT, 1)
    c.drops(DropReason.TRUNCATED, 2)
    c.events(Event.CONTRIBUTION, 2)
    return c


def case_saturation() -> Case:
    c = Case(
        "sum_saturation",
        """
SUM saturates at the int32 bounds in both directions and sets the sticky OVERFLOW flag on the
result; lanes that did not overflow are exact.""",
    )
    ports = star(c, 3)
    rows = [
        (INT32_MAX - 10, INT32_MIN + 10, 5, -5),
        (20, -20, 5, -5),
        (-1, 1, 5, -5),
    ]
    pkts = [Ina(host(p), SWITCH, r, seq=11) for p, r in zip(ports, rows, strict=True)]
    total, over = sum_sat(rows)
    assert over and total[:4] == (INT32_MAX - 1, INT32_MIN + 1, 15, -15)
    for p, pkt in zip(ports, pkts, strict=True):
        c.packet(p, pkt)
    for p in ports:
        c.expect(p, result_to(p, pkts[-1], total, contrib=3, overflow=True))
    c.comment("a retransmission after completion still reports OVERFLOW")
    retx = replace(pkts[0], flags=int(Flag.RETX))
    c.packet(1, retx)
    c.expect(1, result_to(1, retx, total, contrib=3, overflow=True))
    c.events(Event.OVERFLOW, 1)
    return c


def case_two_jobs() -> Case:
    c = Case(
        "two_jobs",
        """
Two jobs share the switch with disjoint pools (job 1: base 0, ports 1-2; job 2: base 4,
ports 3-4) and use the same slot numbers, interleaved. Each gets exactly its own sums, and
job 2's worker cannot write into job 1 (not a member). Ports 3-4's to_host entries name
another aggregation address: results leave from the entry's address, whatever the packet
was sent to.""",
    )
    star(c, 2, job=1, base=0, mgid=1)
    star(c, 2, job=2, base=4, mgid=2, first_port=3, agg=AGG2)
    a = [Ina(host(p), SWITCH, (p, 100), job=1, slot=0, seq=0) for p in (1, 2)]
    b = [Ina(host(p), SWITCH, (p * 1000, 7), job=2, slot=0, seq=0) for p in (3, 4)]
    c.packet(1, a[0])
    c.packet(3, b[0])
    c.comment("job 2's host forges job 1: dropped as not a member")
    c.packet(4, replace(b[1], job=1))
    c.packet(2, a[1])
    for p in (1, 2):
        c.expect(p, result_to(p, a[1], (3, 200), contrib=2))
    c.packet(4, b[1])
    for p in (3, 4):
        c.expect(p, result_to(p, b[1], (7000, 14), contrib=2, agg=AGG2))
    c.drops(DropReason.NOT_MEMBER, 1)
    return c


def case_tree_leaf() -> Case:
    c = Case(
        "tree_leaf",
        """
A leaf (non-root) switch of a two-level tree: workers on ports 1-2, parent on port 3.
It forwards the partial sum up (no RESULT, contrib 2), re-sends it with RETX when a worker
retransmits while the result is missing (lost upward partial), and stores and multicasts
the RESULT from its parent. A stale RESULT (other seq) and a RESULT from a child are dropped.
Afterwards a worker's retransmission is answered locally.""",
    )
    c.job(1, 0, base=0, pool=4, fanin=2, mgid=1, root=False, parent_port=3)
    for i, p in enumerate((1, 2)):
        c.child(1, 0, p, i)
        c.to_host(p, host(p))
    c.mcast(1, 0, (1, 2))
    pkts = [Ina(host(p), SWITCH, (p, 10 * p), seq=5) for p in (1, 2)]
    c.packet(1, pkts[0])
    c.packet(2, pkts[1])
    partial = replace(pkts[1], values=(3, 30), contrib=2, udp_csum=0)
    c.expect(3, partial)
    c.comment("the partial was lost upstream; worker 1 retransmits: partial re-sent with RETX")
    retx = replace(pkts[0], flags=int(Flag.RETX))
    c.packet(1, retx)
    c.expect(3, replace(retx, values=(3, 30), contrib=2, flags=int(Flag.RETX), udp_csum=0))
    c.comment("RESULT from the parent (root sums 3 with 4 from the other leaf)")
    parent_result = Ina(
        host(9), SWITCH, (7, 70), seq=5, flags=int(Flag.RESULT), contrib=4, udp_csum=0
    )
    c.comment("first a stale one (seq 1) and one from a child port")
    c.packet(3, replace(parent_result, seq=1))
    c.packet(1, parent_result)
    c.packet(3, parent_result)
    for p in (1, 2):
        c.expect(p, result_to(p, parent_result, (7, 70), contrib=4))
    c.comment("worker 2 missed it: answered by the leaf itself")
    retx2 = replace(pkts[1], flags=int(Flag.RETX))
    c.packet(2, retx2)
    c.expect(2, result_to(2, retx2, (7, 70), contrib=4))
    c.drops(DropReason.STALE, 1)
    c.drops(DropReason.UNEXPECTED_RESULT, 1)
    c.events(Event.COMPLETE_UP, 1)
    c.events(Event.RETX_UP, 1)
    c.events(Event.PARENT_RESULT, 1)
    c.events(Event.RETX_REPLY, 1)
    return c


def case_tree_root() -> Case:
    c = Case(
        "tree_root",
        """
The root of a two-level tree: two leaf switches on ports 1-2 each send a partial (contrib 2).
The root multicasts the RESULT (contrib 4) to both leaves; switch ports have no ina_egress
entry, so addresses are left as they came. A leaf's RETX partial after completion (its
result was lost) is answered with the result on that port only.""",
    )
    c.job(1, 0, base=0, pool=4, fanin=2, mgid=1, root=True)
    for i, p in enumerate((1, 2)):
        c.child(1, 0, p, i)
    c.mcast(1, 0, (1, 2))
    parts = [Ina(host(p), SWITCH, (p, -p), seq=6, contrib=2) for p in (1, 2)]
    c.packet(1, parts[0])
    c.packet(2, parts[1])
    for p in (1, 2):
        c.expect(
            p, replace(parts[1], values=(3, -3), flags=int(Flag.RESULT), contrib=4, udp_csum=0)
        )
    retx = replace(parts[0], flags=int(Flag.RETX))
    c.packet(1, retx)
    c.expect(1, replace(retx, values=(3, -3), flags=int(Flag.RESULT), contrib=4, udp_csum=0))
    c.events(Event.COMPLETE_ROOT, 1)
    c.events(Event.RETX_REPLY, 1)
    return c


def case_rerun() -> Case:
    c = Case(
        "rerun_from_zero",
        """
The job's workers run twice on the same installation and number their chunks from 0 both
times; the run id (the top 16 bits of seq) is 1, then 2. W = 2, 2 workers. Run 1 completes
chunks 0-2, so slot 0 set 0 holds chunk 0's result with both workers' bits set: exactly what a
retransmission of run 2's chunk 0 would find, were it not for the run. Run 2's first packet in
each slot takes the slot over (TAKEOVER: both sets cleared), and every result is run 2's own
sum. A lost result in run 2 is still recovered from the cell (RETX).""",
    )
    ports = star(c, 2, pool=2)

    def chunk(run: int, p: int, i: int) -> Ina:
        return Ina(
            host(p),
            SWITCH,
            (run * 100 + i * 10 + p, -p),
            slot=i % 2,
            set_=(i // 2) % 2,
            seq=seq_field(run, i),
        )

    for run in (1, 2):
        c.comment(f"run {run}: chunks 0, 1, 2")
        for i in range(3):
            for p in ports:
                c.packet(p, chunk(run, p, i))
            for p in ports:
                c.expect(
                    p, result_to(p, chunk(run, 2, i), (2 * (run * 100 + i * 10) + 3, -3), contrib=2)
                )
        if run == 2:
            c.comment("worker 1 lost run 2's result of chunk 1: its retransmission is answered")
            retx = replace(chunk(2, 1, 1), flags=int(Flag.RETX))
            c.packet(1, retx)
            c.expect(1, result_to(1, retx, (2 * 210 + 3, -3), contrib=2))
    c.events(Event.TAKEOVER, 4)
    c.events(Event.FIRST, 6)
    c.events(Event.COMPLETE_ROOT, 6)
    c.events(Event.RETX_REPLY, 1)
    c.drops(DropReason.DUPLICATE, 0)
    c.drops(DropReason.STALE, 0)
    return c


def case_pool_reuse() -> Case:
    c = Case(
        "pool_reuse",
        """
Job 1 (ports 1-2) had slots [0, 2); it was removed and the pool given to job 2 (ports 3-4,
the same child indexes). Job 1 left slot 0 set 0 with a result (READY, both bits set, seq 0)
and slot 1 set 0 half full (worker 1's chunk 1). Job 2's first packet in each slot takes the
slot over: job 2 gets exactly its own sums, never job 1's (no retransmission answer with job
1's result, no sum with job 1's partial), and its own lost result is recovered. STF cannot
delete entries, so job 1's stay, unused; both jobs carry epoch 1 here, so that the job id
alone tells the owners apart (the controller would also give job 2 a new epoch).""",
    )
    star(c, 2, job=1, base=0, pool=2, mgid=1)
    star(c, 2, job=2, base=0, pool=2, mgid=2, first_port=3)

    def chunk(job: int, p: int, i: int, values: tuple[int, ...]) -> Ina:
        return Ina(host(p), SWITCH, values, job=job, slot=i % 2, seq=i)

    c.comment("job 1: chunk 0 completes, chunk 1 only from worker 1 (then the job is removed)")
    a0 = [chunk(1, p, 0, (p, 1000)) for p in (1, 2)]
    for p, pkt in zip((1, 2), a0, strict=True):
        c.packet(p, pkt)
    for p in (1, 2):
        c.expect(p, result_to(p, a0[1], (3, 2000), contrib=2))
    c.packet(1, chunk(1, 1, 1, (77, 77)))
    c.comment("job 2, chunk 0: port 3 (child 0) finds child 0's bit set and seq 0 in a READY")
    c.comment("cell, but the slot is job 1's: taken over, not answered with job 1's sum")
    b0 = [chunk(2, p, 0, (p * 10, 5)) for p in (3, 4)]
    for p, pkt in zip((3, 4), b0, strict=True):
        c.packet(p, pkt)
    for p in (3, 4):
        c.expect(p, result_to(p, b0[1], (70, 10), contrib=2))
    c.comment("job 2, chunk 1: taken over from job 1's half-full cell, not added to it")
    b1 = [chunk(2, p, 1, (p, -p)) for p in (4, 3)]
    for p, pkt in zip((4, 3), b1, strict=True):
        c.packet(p, pkt)
    for p in (3, 4):
        c.expect(p, result_to(p, b1[1], (7, -7), contrib=2))
    c.comment("job 2's worker on port 3 lost chunk 0's result: answered with job 2's sum")
    retx = replace(b0[0], flags=int(Flag.RETX))
    c.packet(3, retx)
    c.expect(3, result_to(3, retx, (70, 10), contrib=2))
    c.events(Event.TAKEOVER, 4)
    c.events(Event.COMPLETE_ROOT, 3)
    c.events(Event.RETX_REPLY, 1)
    c.drops(DropReason.DUPLICATE, 0)
    return c


def case_abandoned_round() -> Case:
    c = Case(
        "abandoned_round",
        """
A round abandoned half-way (a worker died) leaves a cell counting 1 of 2. W = 1 (slot 0,
chunk i in set i mod 2), 2 workers. Run 1 ends after worker 1's chunk 0. The job is rerun
(run 2): its first packet takes the slot over, so worker 1's new chunk 0 is not dropped as a
duplicate and its old contribution is not summed in. Run 2 is abandoned too, after worker 1's
chunk 1 (set 1). The job is then reinstalled (a new epoch) and its workers start again with
the same run id: the new installation's first packet (chunk 0, set 0) takes the slot over and
clears both sets, so chunk 1 in set 1 is not taken for a duplicate of the abandoned one.
STF cannot delete or modify entries: the reinstallation is job 1's tree 1 entry over the same
pool with epoch 2, which presents the data plane with what a reinstallation does (a slot's
owner is job, epoch and run; the tree is not part of it).""",
    )
    ports = star(c, 2, pool=1)
    star(c, 2, pool=1, mgid=2, tree=1, epoch=2, host_entries=False)

    def chunk(run: int, p: int, i: int, values: tuple[int, ...], tree: int = 0) -> Ina:
        return Ina(host(p), SWITCH, values, tree=tree, set_=i % 2, seq=seq_field(run, i))

    c.comment("run 1: worker 1's chunk 0, then worker 2 dies")
    c.packet(1, chunk(1, 1, 0, (5, 5)))
    c.comment("run 2 from chunk 0")
    r2 = [chunk(2, p, 0, (p, 10 * p)) for p in ports]
    for p, pkt in zip(ports, r2, strict=True):
        c.packet(p, pkt)
    for p in ports:
        c.expect(p, result_to(p, r2[1], (3, 30), contrib=2))
    c.comment("run 2, chunk 1: worker 1 only, then worker 2 dies again")
    c.packet(1, chunk(2, 1, 1, (9, 9)))
    c.comment("reinstalled (epoch 2, here tree 1), run 2 again from chunk 0")
    again = [chunk(2, p, 0, (100 * p, p), tree=1) for p in (2, 1)]
    for p, pkt in zip((2, 1), again, strict=True):
        c.packet(p, pkt)
    for p in ports:
        c.expect(p, result_to(p, again[1], (300, 3), contrib=2))
    again1 = [chunk(2, p, 1, (-p, p), tree=1) for p in ports]
    for p, pkt in zip(ports, again1, strict=True):
        c.packet(p, pkt)
    for p in ports:
        c.expect(p, result_to(p, again1[1], (-3, 3), contrib=2))
    c.events(Event.TAKEOVER, 3)
    c.events(Event.FIRST, 5)
    c.events(Event.COMPLETE_ROOT, 3)
    c.drops(DropReason.DUPLICATE, 0)
    c.drops(DropReason.STALE, 0)
    return c


def case_tree_leaf_owner() -> Case:
    c = Case(
        "tree_leaf_owner",
        """
A RESULT is stored only into a slot its job owns. A leaf switch (parent on port 3) holds job 1
(ports 1-2) and job 2 (ports 4-5) over the same pool. Job 1's workers send chunk 5 up; a
RESULT for job 2 with the same slot and seq then comes from the parent: the slot is job 1's,
so it is dropped as STALE (not stored into job 1's cell, not sent to job 2's workers). Job 1's
own RESULT is stored and multicast.""",
    )
    for job, ports, mgid in ((1, (1, 2), 1), (2, (4, 5), 2)):
        c.job(job, 0, base=0, pool=4, fanin=2, mgid=mgid, root=False, parent_port=3)
        for i, p in enumerate(ports):
            c.child(job, 0, p, i)
            c.to_host(p, host(p))
        c.mcast(mgid, mgid - 1, ports)
    pkts = [Ina(host(p), SWITCH, (p, 10 * p), seq=5) for p in (1, 2)]
    for p, pkt in zip((1, 2), pkts, strict=True):
        c.packet(p, pkt)
    c.expect(3, replace(pkts[1], values=(3, 30), contrib=2, udp_csum=0))
    result = Ina(host(9), SWITCH, (7, 70), seq=5, flags=int(Flag.RESULT), contrib=4, udp_csum=0)
    c.comment("job 2's RESULT for the same slot and seq: the slot is job 1's")
    c.packet(3, replace(result, job=2))
    c.packet(3, result)
    for p in (1, 2):
        c.expect(p, result_to(p, result, (7, 70), contrib=4))
    c.drops(DropReason.STALE, 1)
    c.events(Event.PARENT_RESULT, 1)
    return c


def case_leaf_early_result() -> Case:
    c = Case(
        "leaf_early_result",
        """
A leaf stores its parent's RESULT only once its own round for that cell is complete (it sent
its partial up, so the result includes it). W = 1 (slot 0), workers on ports 1-2, parent on
port 3. Worker 1 sends chunk 5; a RESULT for chunk 5 comes from the parent before worker 2's
contribution: dropped as UNEXPECTED_RESULT, nothing multicast. So is a RESULT for set 1, a
cell this leaf has not used since worker 1 took the slot (its cleared seq, 0, is the
RESULT's). Worker 2's contribution then completes the round: the partial is exactly the two
workers' sum (not the early result plus worker 2). The parent's RESULT after that is stored
and multicast, and a retransmission is answered with it.""",
    )
    c.job(1, 0, base=0, pool=1, fanin=2, mgid=1, root=False, parent_port=3)
    for i, p in enumerate((1, 2)):
        c.child(1, 0, p, i)
        c.to_host(p, host(p))
    c.mcast(1, 0, (1, 2))
    pkts = [Ina(host(p), SWITCH, (p, 10 * p), seq=5) for p in (1, 2)]
    result = Ina(host(9), SWITCH, (7, 70), seq=5, flags=int(Flag.RESULT), contrib=4, udp_csum=0)
    c.packet(1, pkts[0])
    c.comment("the parent's RESULT before the leaf's round completed: dropped")
    c.packet(3, result)
    c.comment("a RESULT for set 1 (never used since the takeover, seq 0): dropped")
    c.packet(3, replace(result, set_=1, seq=0))
    c.packet(2, pkts[1])
    c.expect(3, replace(pkts[1], values=(3, 30), contrib=2, udp_csum=0))
    c.packet(3, result)
    for p in (1, 2):
        c.expect(p, result_to(p, result, (7, 70), contrib=4))
    retx = replace(pkts[0], flags=int(Flag.RETX))
    c.packet(1, retx)
    c.expect(1, result_to(1, retx, (7, 70), contrib=4))
    c.drops(DropReason.UNEXPECTED_RESULT, 2)
    c.drops(DropReason.STALE, 0)
    c.events(Event.COMPLETE_UP, 1)
    c.events(Event.PARENT_RESULT, 1)
    c.events(Event.RETX_REPLY, 1)
    return c


def case_jump_ahead() -> Case:
    c = Case(
        "jump_ahead",
        """
A member moves to a slot's other set only once its round in this one is complete (it holds
that round's result). W = 1 (chunk i uses slot 0, set i mod 2), 2 workers. Worker 1 sends
chunk 0, then jumps ahead to chunk 1 before chunk 0 completed: dropped as AHEAD, and its bit
in set 0 stays set, so its retransmission of chunk 0 is a duplicate, not a second
contribution. Worker 2's chunk 0 completes the round with exactly one contribution from each
worker; then chunk 1 is summed as usual.""",
    )
    ports = star(c, 2, pool=1)

    def chunk(p: int, i: int) -> Ina:
        return Ina(host(p), SWITCH, (100 * (i + 1) + p, p), set_=i % 2, seq=i)

    c.packet(1, chunk(1, 0))
    c.comment("worker 1 jumps ahead to chunk 1 (set 1) while chunk 0 waits for worker 2")
    c.packet(1, chunk(1, 1))
    c.comment("worker 1 retransmits chunk 0: still counted once (DUPLICATE)")
    c.packet(1, replace(chunk(1, 0), flags=int(Flag.RETX)))
    c.packet(2, chunk(2, 0))
    for p in ports:
        c.expect(p, result_to(p, chunk(2, 0), (203, 3), contrib=2))
    for p in ports:
        c.packet(p, chunk(p, 1))
    for p in ports:
        c.expect(p, result_to(p, chunk(2, 1), (403, 3), contrib=2))
    c.drops(DropReason.AHEAD, 1)
    c.drops(DropReason.DUPLICATE, 1)
    c.events(Event.CONTRIBUTION, 4)
    c.events(Event.COMPLETE_ROOT, 2)
    return c


UDP_5001 = bytes.fromhex("13891389000d0000") + b"hello"  # ordinary UDP to port 5001


def ipv4_frame(
    src: Endpoint, dst_mac: str, dst_ip: str, ttl: int, payload: bytes = UDP_5001, proto: int = 17
) -> bytes:
    import struct

    from inaemu.common.wire import ipv4_checksum
    from inaemu.topology.addresses import ip_int as ipi
    from inaemu.topology.addresses import mac_bytes

    total = 20 + len(payload)
    hdr = struct.pack("!BBHHHBBHII", 0x45, 0, total, 1, 0, ttl, proto, 0, ipi(src.ip), ipi(dst_ip))
    hdr = hdr[:10] + ipv4_checksum(hdr).to_bytes(2, "big") + hdr[12:]
    return mac_bytes(dst_mac) + mac_bytes(src.mac) + b"\x08\x00" + hdr + payload


def case_ipv4() -> Case:
    c = Case(
        "ipv4_forwarding",
        """
Ordinary IPv4 traffic is routed by longest prefix: the switch rewrites the MACs, decrements
the TTL and fixes the checksum. No route, TTL 1 and non-IPv4 frames are dropped and counted.""",
    )
    table = "InaIngress.fwd.ipv4_lpm"
    c.add(
        table,
        [("hdr.ipv4.dstAddr", "0x0A000002")],
        "InaIngress.fwd.ipv4_forward",
        dstAddr=0x000000000002,
        port=2,
    )
    c.add(
        table,
        [("hdr.ipv4.dstAddr", "0x0A0000**")],
        "InaIngress.fwd.ipv4_forward",
        dstAddr=0x0000000000AA,
        port=3,
    )
    src = host(1)
    sw_mac = SWITCH.mac
    c.packet(1, ipv4_frame(src, sw_mac, "10.0.0.2", 64))
    c.expect(2, ipv4_frame(Endpoint(sw_mac, src.ip), "00:00:00:00:00:02", "10.0.0.2", 63))
    c.comment("10.0.0.7 takes the /24")
    c.packet(1, ipv4_frame(src, sw_mac, "10.0.0.7", 5))
    c.expect(3, ipv4_frame(Endpoint(sw_mac, src.ip), "00:00:00:00:00:aa", "10.0.0.7", 4))
    c.comment("no route")
    c.packet(1, ipv4_frame(src, sw_mac, "192.168.1.1", 64))
    c.comment("TTL 1 expires here")
    c.packet(1, ipv4_frame(src, sw_mac, "10.0.0.2", 1))
    c.comment("an ARP frame: not IPv4")
    c.packet(
        1,
        bytes.fromhex(
            "ffffffffffff000000000001080600010800060400010000000000010a0000010000000000000a000002"
        ),
    )
    c.drops(DropReason.NO_ROUTE, 1)
    c.drops(DropReason.TTL_EXPIRED, 1)
    c.drops(DropReason.NOT_IPV4, 1)
    return c


def rank(port: int, udp: int) -> Endpoint:
    """A worker behind host port `port` (its host's addresses) sending from UDP port `udp`."""
    h = host(port)
    return Endpoint(h.mac, h.ip, udp)


def case_ranks_per_port() -> Case:
    c = Case(
        "ranks_per_port",
        """
Several workers behind one port (docs/protocol.md, section 4): a machine on port 1 runs two
ranks, on UDP ports 47500 and 47501, a machine on port 2 one; the job has three children,
(port, UDP port) each, and a multicast replica per worker whose instance is its UDP port.
Each rank's contribution counts once, a rank's copy before completion is a duplicate of its
own and not of the other's; a sender from a UDP port the job does not know is NOT_MEMBER.
The result reaches every worker at its own UDP port (two copies out of port 1), from the
INA port; a retransmission from UDP port 47501 is answered to 47501.""",
    )
    c.job(1, 0, base=0, pool=4, fanin=3, mgid=1)
    children = [(1, 47500), (1, 47501), (2, INA_UDP_PORT)]
    for i, (port, udp) in enumerate(children):
        c.child(1, 0, port, i, udp)
    for p in (1, 2):
        c.to_host(p, host(p))
    c.lines.append("mc_mgrp_create 1")
    c.lines.append("mc_node_create 47500 1 2")
    c.lines.append("mc_node_create 47501 1")
    c.lines.append("mc_node_associate 1 0")
    c.lines.append("mc_node_associate 1 1")
    pkts = [
        Ina(rank(port, udp), SWITCH, (i + 1, 10 * (i + 1)), seq=12, slot=3)
        for i, (port, udp) in enumerate(children)
    ]
    c.comment("a third process on machine 1, from UDP port 47502: not a member")
    c.packet(1, replace(pkts[0], src=rank(1, 47502)))
    c.packet(1, pkts[0])
    c.comment("rank 0 again before completion: its own duplicate")
    c.packet(1, replace(pkts[0], flags=int(Flag.RETX)))
    c.packet(1, pkts[1])
    c.packet(2, pkts[2])
    total = (6, 60)
    c.expect(1, result_to(1, pkts[2], total, contrib=3, udp=47500))
    c.expect(2, result_to(2, pkts[2], total, contrib=3, udp=INA_UDP_PORT))
    c.expect(1, result_to(1, pkts[2], total, contrib=3, udp=47501))
    c.comment("rank 1 of machine 1 lost its copy: the reply goes to its UDP port")
    retx = replace(pkts[1], flags=int(Flag.RETX), values=(0, 0))
    c.packet(1, retx)
    c.expect(1, result_to(1, retx, total, contrib=3, udp=47501))
    c.drops(DropReason.NOT_MEMBER, 1)
    c.drops(DropReason.DUPLICATE, 1)
    c.events(Event.CONTRIBUTION, 3)
    c.events(Event.COMPLETE_ROOT, 1)
    c.events(Event.RETX_REPLY, 1)
    return c


def case_ranks_per_port_leaf() -> Case:
    c = Case(
        "ranks_per_port_leaf",
        """
Two workers behind one port of a leaf (non-root) switch, on UDP ports 47501 and 47502, its
parent on port 3. The partial goes up from the INA UDP port 47500, whichever rank was last,
so that the parent knows the leaf by (port, 47500); so does its re-sent partial. The
parent's RESULT reaches each rank at its own UDP port (two copies out of port 1).""",
    )
    c.job(1, 0, base=0, pool=4, fanin=2, mgid=1, root=False, parent_port=3)
    for i, udp in enumerate((47501, 47502)):
        c.child(1, 0, 1, i, udp)
    c.to_host(1, host(1))
    c.lines.append("mc_mgrp_create 1")
    c.lines.append("mc_node_create 47501 1")
    c.lines.append("mc_node_create 47502 1")
    c.lines.append("mc_node_associate 1 0")
    c.lines.append("mc_node_associate 1 1")
    pkts = [
        Ina(rank(1, udp), SWITCH, (i + 1, -(i + 1)), seq=8) for i, udp in enumerate((47501, 47502))
    ]
    c.packet(1, pkts[0])
    c.packet(1, pkts[1])
    up = replace(pkts[1], src=rank(1, INA_UDP_PORT), values=(3, -3), contrib=2, udp_csum=0)
    c.expect(3, up)
    c.comment("the partial was lost upstream; rank 0 retransmits: re-sent from the INA port")
    c.packet(1, replace(pkts[0], flags=int(Flag.RETX)))
    c.expect(3, replace(up, flags=int(Flag.RETX), contrib=2))
    result = Ina(host(9), SWITCH, (30, -30), seq=8, flags=int(Flag.RESULT), contrib=5, udp_csum=0)
    c.packet(3, result)
    for udp in (47501, 47502):
        c.expect(1, result_to(1, result, (30, -30), contrib=5, udp=udp))
    c.events(Event.COMPLETE_UP, 1)
    c.events(Event.RETX_UP, 1)
    c.events(Event.PARENT_RESULT, 1)
    return c


BURST = 600


def case_burst() -> Case:
    c = Case(
        "burst",
        """
One result replicated 600 times onto one port (600 multicast nodes, replication ids 0..599):
all 600 copies leave, copy r to UDP port r (instance 0 keeps the port the packet was sent
to). bmv2's egress queues hold 64 packets by default; the bmv2 target raises the depth, as a
switch's buffer would hold such a burst.""",
    )
    c.job(1, 0, base=0, pool=1, fanin=1, mgid=1)
    c.child(1, 0, 1, 0)
    c.to_host(1, host(1))
    c.lines.append("mc_mgrp_create 1")
    for rid in range(BURST):
        c.lines.append(f"mc_node_create {rid} 1")
        c.lines.append(f"mc_node_associate 1 {rid}")
    pkt = Ina(host(1), SWITCH, (7, 8, 9), seq=3)
    c.packet(1, pkt)
    for rid in range(BURST):  # a copy of instance 0 keeps its UDP port, the others go to it
        c.expect(1, result_to(1, pkt, (7, 8, 9), contrib=1, udp=rid or None))
    c.counter("InaEgress.counters.port_tx", 1, BURST)
    return c


def case_loss() -> Case:
    c = Case(
        "loss_injection",
        """
Loss injection per ingress port: threshold 0 never drops, 0xFFFFFFFF always drops (counted as
DROP_LOSS before anything else looks at the packet).""",
    )
    ports = star(c, 2)
    c.add(
        "InaIngress.loss.ina_loss",
        [("standard_metadata.ingress_port", 1)],
        "InaIngress.loss.set_loss",
        threshold=0,
    )
    c.add(
        "InaIngress.loss.ina_loss",
        [("standard_metadata.ingress_port", 2)],
        "InaIngress.loss.set_loss",
        threshold=0xFFFFFFFF,
    )
    a = Ina(host(1), SWITCH, (1,), seq=0)
    b = Ina(host(2), SWITCH, (2,), seq=0)
    for _ in range(5):
        c.packet(2, b)
    c.packet(1, a)
    c.comment("even a malformed packet on port 2 is lost first")
    c.packet(2, replace(b, version=3))
    c.drops(DropReason.LOSS, 6)
    c.drops(DropReason.BAD_VERSION, 0)
    c.events(Event.CONTRIBUTION, 1)
    del ports
    return c


def case_count_wrap() -> Case:
    c = Case(
        "count_wrap",
        """
The per-cell count is bit<8>: it wraps at 256, exactly as in the P4. A node configured with
fanin 0 (P4Runtime accepts it) completes on the 256th contribution, when the count wraps to 0.
Child index 40 has no bitmap bit (1 << 40 is 0 in bit<32>), so no copy counts as a duplicate.""",
    )
    c.job(1, 0, base=0, pool=1, fanin=0, mgid=1)
    c.child(1, 0, 1, 40)
    c.to_host(1, host(1))
    c.mcast(1, 0, [1])
    pkt = Ina(host(1), SWITCH, (1, 2, 3), seq=5)
    for _ in range(256):
        c.packet(1, pkt)
    c.expect(1, result_to(1, pkt, (256, 512, 768), contrib=256))
    c.events(Event.CONTRIBUTION, 256)
    c.events(Event.FIRST, 1)
    c.events(Event.COMPLETE_ROOT, 1)
    return c


CASES = [
    *(case_reduce(op, n) for op in Opcode for n in (1, 4)),
    case_duplicates(),
    case_lost_result(),
    case_slot_reuse(),
    case_stale_copies(),
    case_jump_ahead(),
    case_malformed(),
    case_saturation(),
    case_two_jobs(),
    case_tree_leaf(),
    case_tree_leaf_owner(),
    case_leaf_early_result(),
    case_tree_root(),
    case_rerun(),
    case_pool_reuse(),
    case_abandoned_round(),
    case_ipv4(),
    case_loss(),
    case_count_wrap(),
    case_burst(),
    case_ranks_per_port(),
    case_ranks_per_port_leaf(),
]
