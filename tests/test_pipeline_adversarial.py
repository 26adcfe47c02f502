"""Property: no frame sequence, however reordered, duplicated or invented by a member, makes a
switch emit a wrong aggregate.

One switch (a root, or a non-root with its parent on the port after its children's) receives
any sequence of frames: contributions from any member for any slot, set and seq (retransmitted
or not, in any order, jumping ahead to the other set, from an earlier run), RESULTs from the
parent for any slot, set and seq, and RESULTs forged by members. Whatever it receives:

- every partial a non-root sends up, and every RESULT a root emits (multicast or retransmission
  reply), combines exactly one contribution from each of its `fanin` children, all with the
  seq the frame names (contrib = fanin);
- every RESULT a non-root sends down is one its parent sent for that slot, set and seq, and
  only after this node sent up its own partial for them (the parent's result includes it);
- every packet is accounted for exactly once (docs/protocol.md section 9).

Contributions are tagged so that the check is exact: child c's contribution with seq q is 1 in
lane c and tag(q) in lane TAG + c, 0 elsewhere. An aggregate for seq q must then hold 1 and
tag(q) in those lanes for every child and 0 in every other lane: a child counted twice shows 2,
a missing one 0, a contribution of another seq a different tag. Liveness under such input is
not claimed (a misbehaving member may stall its own job); correctness is.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inaemu.common.wire import (
    INA_OFFSET,
    RUN_SHIFT,
    SEQ_CHUNK_MASK,
    Endpoint,
    Flag,
    FrameTemplate,
    InaHeader,
    K,
    Opcode,
    pack_frames,
    pack_payloads,
    parse_frames,
    seq_field,
    slot_field,
)
from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.state import ActionCall, TableEntry
from tests.helpers import accounted

SWITCH = Endpoint("00:00:00:00:00:fe", "10.0.0.254")
JOB, MGID = 1, 1
TAG = 8  # lanes TAG + c carry child c's seq tag; lanes 0..fanin-1 count contributions
PARENT_MARK = K - 1  # a parent's result carries its marker here
MAX_FANIN = 4


def tag(seq: int) -> int:
    return (seq >> RUN_SHIFT) * 16 + (seq & SEQ_CHUNK_MASK) + 1


def exact(seq: int, fanin: int) -> npt.NDArray[np.int32]:
    """The only correct aggregate of seq: one contribution from each child, all of seq."""
    lanes = np.zeros(K, dtype=np.int32)
    lanes[:fanin] = 1
    lanes[TAG : TAG + fanin] = tag(seq)
    return lanes


@dataclass(frozen=True)
class Node:
    fanin: int
    root: bool
    pool: int

    @property
    def parent_port(self) -> int:
        return self.fanin + 1  # children on ports 1..fanin (child index = port - 1)


def frame(
    port: int, slot: int, flags: int, seq: int, lanes: npt.NDArray[np.int32], contrib: int
) -> bytes:
    rec = pack_frames(
        FrameTemplate(Endpoint(f"00:00:00:00:01:{port:02x}", f"10.0.1.{port}"), SWITCH),
        pack_payloads(
            opcode=Opcode.SUM,
            job_id=JOB,
            tree_id=0,
            slot=slot,
            seq=seq,
            values=lanes[None, :],
            flags=flags,
            contrib=contrib,
        ),
    )
    return rec.tobytes()


def contribution(child: int, slot: int, seq: int, retx: bool) -> bytes:
    lanes = np.zeros(K, dtype=np.int32)
    lanes[child] = 1
    lanes[TAG + child] = tag(seq)
    return frame(child + 1, slot, int(Flag.RETX) if retx else 0, seq, lanes, 1)


def pipeline(node: Node) -> Pipeline:
    pipe = Pipeline()
    params = (
        0,
        node.pool,
        node.fanin,
        MGID,
        int(node.root),
        0 if node.root else node.parent_port,
        1,
    )
    pipe.ina_job.insert(TableEntry((JOB, 0), ActionCall("agg_node", params)))
    for c in range(node.fanin):
        pipe.ina_child.insert(TableEntry((JOB, 0, c + 1), ActionCall("set_child", (c,))))
    pipe.multicast.insert(MGID, [(c + 1, 0) for c in range(node.fanin)])
    return pipe


@st.composite
def nodes(draw: st.DrawFn) -> Node:
    return Node(
        fanin=draw(st.integers(1, MAX_FANIN), label="fanin"),
        root=draw(st.booleans(), label="root"),
        pool=draw(st.integers(1, 2), label="pool"),
    )


SEQS = st.builds(seq_field, st.sampled_from([0, 0, 0, 1]), st.integers(0, 3))


@dataclass(frozen=True)
class Sent:
    """One frame into the switch, readable in a failing example."""

    kind: str  # "contribution", "forged result" (from a member), "parent result"
    port: int
    slot: int  # the slot field: set in bit 15
    seq: int
    retx: bool = False
    marker: int = 0  # a RESULT's lanes: the marker in lane PARENT_MARK

    def frame(self) -> bytes:
        if self.kind == "contribution":
            return contribution(self.port - 1, self.slot, self.seq, self.retx)
        lanes = np.zeros(K, dtype=np.int32)
        lanes[PARENT_MARK] = self.marker
        return frame(self.port, self.slot, int(Flag.RESULT), self.seq, lanes, 100)


@st.composite
def inputs(draw: st.DrawFn, node: Node) -> list[Sent]:
    """Members' contributions and forged RESULTs, and the parent's RESULTs, in any order."""
    kinds = ["contribution"] * 6 + ["forged result"] + ([] if node.root else ["parent result"] * 2)
    out = []
    for _ in range(draw(st.integers(0, 60), label="frames")):
        kind = draw(st.sampled_from(kinds))
        slot = slot_field(draw(st.integers(0, node.pool - 1)), draw(st.integers(0, 1)))
        seq = draw(SEQS)
        member = draw(st.integers(1, node.fanin), label="member port")
        port = node.parent_port if kind == "parent result" else member
        if kind == "contribution":
            out.append(Sent(kind, port, slot, seq, retx=draw(st.booleans())))
        else:
            out.append(Sent(kind, port, slot, seq, marker=draw(st.integers(1, 3))))
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_frame_sequence_gives_a_wrong_aggregate(data: st.DataObject) -> None:
    node = data.draw(nodes())
    frames = data.draw(inputs(node))
    pipe = pipeline(node)
    parent_results: dict[tuple[int, int], set[bytes]] = defaultdict(set)  # (slot, seq)
    sent_up: set[tuple[int, int]] = set()

    for sent in frames:
        data_in = sent.frame()
        if sent.kind == "parent result":
            values = parse_frames(data_in)[0]["values"]
            parent_results[(sent.slot, sent.seq)].add(values.tobytes() + bytes([100]))
        for out_port, out in pipe.process(sent.port, data_in):
            rec = parse_frames(out)[0]
            h = InaHeader.unpack(out[INA_OFFSET:])
            values = rec["values"]
            what = f"{h} out of port {out_port}"
            if not node.root and out_port == node.parent_port:
                assert not h.flags & Flag.RESULT, what
                assert np.array_equal(values, exact(h.seq, node.fanin)), f"partial: {what}"
                assert h.contrib == node.fanin, what
                sent_up.add((h.slot, h.seq))
                continue
            assert 1 <= out_port <= node.fanin, what
            assert h.flags & Flag.RESULT, what
            if node.root:
                assert np.array_equal(values, exact(h.seq, node.fanin)), f"result: {what}"
                assert h.contrib == node.fanin, what
            else:
                key = (h.slot, h.seq)
                assert key in sent_up, f"a result before this node's partial went up: {what}"
                got = values.tobytes() + bytes([h.contrib])
                assert got in parent_results[key], f"not the parent's result: {what}"

    packets_in, packets_accounted = accounted(pipe)
    assert packets_in == packets_accounted == len(frames)
