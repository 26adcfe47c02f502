"""The reference engine: the p4/ina.p4 pipeline in Python, packet for packet, over a
`PipelineState` (softswitch/state.py).

Each method mirrors one P4 control (same names, same order of decisions) so that a reviewer
can read the two side by side: parser (InaParser), LossInjection, Aggregation, Ipv4Forwarding,
IngressCounters, the v1model traffic manager (unicast / multicast / drop), EgressRewrite,
EgressCounters, InaComputeChecksum and the deparser.

The per-packet path touches the K lanes only through numpy (one vector operation per step),
never a Python loop per lane. It is what the compiled engine (softswitch/fast/) must match,
frame for frame and counter for counter (tests/test_dataplane_agreement.py).
"""

from __future__ import annotations

import _thread

import numpy as np

from inaemu.common.wire import (
    ETH_BYTES,
    ETHERTYPE_IPV4,
    INA_AT,
    INA_DTYPE,
    INA_HEADER_BYTES,
    INA_HEADER_STRUCT,
    INA_OFFSET,
    INA_UDP_PORT,
    INA_VERSION,
    INT32_MAX,
    INT32_MIN,
    IP_PROTO_UDP,
    IPV4_BYTES,
    LANES_BYTES,
    UDP_BYTES,
    Flag,
    K,
    Opcode,
    ipv4_checksum,
)
from inaemu.p4.constants import (
    DROP_PORT,
    STATE_OVERFLOW,
    STATE_READY,
    DropReason,
    Event,
)
from inaemu.softswitch.batch import FrameBatch
from inaemu.softswitch.state import PipelineState

IP_OFF = ETH_BYTES
UDP_OFF = ETH_BYTES + IPV4_BYTES
LANES_OFF = INA_OFFSET + INA_AT.values
VER_FLAGS_AT = INA_OFFSET + INA_AT.ver_flags
CONTRIB_AT, CONTRIB_BYTES = INA_OFFSET + INA_AT.contrib, INA_DTYPE["contrib"].itemsize
FRAME_END = LANES_OFF + LANES_BYTES
_BE_LANES = np.dtype(">i4")
# Plain ints on the per-packet path: enum.Flag operators run in Python and cost microseconds.
_RESULT, _RETX, _OVERFLOW = int(Flag.RESULT), int(Flag.RETX), int(Flag.OVERFLOW)
_SUM, _OR, _MAX = int(Opcode.SUM), int(Opcode.OR), int(Opcode.MAX)
_INA_PORT_BYTES = INA_UDP_PORT.to_bytes(2, "big")


class ReferenceEngine:
    """Runs frames through `state` in Python, one at a time (`Pipeline(compiled=False)`).
    Holds the state's tables, counters and registers under the names the P4 gives them (they
    are never replaced, only changed in place)."""

    def __init__(self, state: PipelineState) -> None:
        assert not state.registers.arrays, "the reference runs on the registers as lists"
        self.state = state
        self.lock = state.lock
        self.ina_loss = state.ina_loss
        self.ina_job = state.ina_job
        self.ina_child = state.ina_child
        self.ipv4_lpm = state.ipv4_lpm
        self.ina_egress = state.ina_egress
        self.multicast = state.multicast
        self.ina_events = state.ina_events
        self.port_rx = state.port_rx
        self.ina_drops = state.ina_drops
        self.port_tx = state.port_tx
        self.registers = state.registers

    # ------------------------------------------------------------------ ingress

    def process(self, ingress_port: int, frame: bytes) -> list[tuple[int, bytes]]:
        _thread.RLock.acquire(self.lock)  # as the data plane: no change counted
        try:
            return self._process(ingress_port, frame)
        finally:
            _thread.RLock.release(self.lock)

    def process_batch(self, batch: FrameBatch) -> FrameBatch:
        """Every frame of `batch` in order, as `process` would; the emitted frames, in order."""
        out = FrameBatch(max(4, 2 * batch.n), max(2048, 2 * batch.used_bytes))  # grows if needed
        _thread.RLock.acquire(self.lock)
        try:
            for port, frame in batch:
                for out_port, emitted in self._process(port, frame):
                    out.append(out_port, emitted)
        finally:
            _thread.RLock.release(self.lock)
        return out

    def _process(self, ingress_port: int, frame: bytes) -> list[tuple[int, bytes]]:
        length = len(frame)
        pkt = bytearray(frame)
        ina_valid, ipv4_valid, parser_error = self._parse(pkt)

        drop_reason = self._loss(ingress_port)
        egress_spec = 0  # v1model: egress_spec starts at 0
        mcast_grp = 0
        consumed = False
        if drop_reason == DropReason.NONE:
            if parser_error:
                drop_reason = DropReason.TRUNCATED
            elif ina_valid:
                drop_reason, egress_spec, mcast_grp, consumed = self._aggregate(
                    pkt, ingress_port, length
                )
            elif ipv4_valid:
                drop_reason, egress_spec = self._forward(pkt)
            else:
                drop_reason = DropReason.NOT_IPV4
        if drop_reason != DropReason.NONE or consumed:
            egress_spec, mcast_grp = DROP_PORT, 0  # mark_to_drop
        # IngressCounters
        self.port_rx.count(ingress_port, length)
        if drop_reason != DropReason.NONE:
            self.ina_drops.count(drop_reason, length)

        # Traffic manager (simple_switch): multicast wins, then the drop port, then unicast.
        if mcast_grp != 0:
            replicas = self.multicast.groups.get(mcast_grp, [])
            return [
                self._egress(bytearray(pkt), port, rid, ina_valid, ipv4_valid, length)
                for port, rid in replicas
            ]
        if egress_spec == DROP_PORT:
            return []
        return [self._egress(pkt, egress_spec, 0, ina_valid, ipv4_valid, length)]

    @staticmethod
    def _parse(pkt: bytearray) -> tuple[bool, bool, bool]:
        """InaParser: returns (ina valid, ipv4 valid, parser error PacketTooShort)."""
        n = len(pkt)
        if n < ETH_BYTES:
            return False, False, True
        if (pkt[12] << 8 | pkt[13]) != ETHERTYPE_IPV4:
            return False, False, False
        if n < UDP_OFF:
            return False, False, True
        ihl = pkt[IP_OFF] & 0x0F
        frag_offset = (pkt[IP_OFF + 6] & 0x1F) << 8 | pkt[IP_OFF + 7]
        if not (ihl == 5 and frag_offset == 0 and pkt[IP_OFF + 9] == IP_PROTO_UDP):
            return False, True, False
        if n < INA_OFFSET:
            return False, True, True
        if (pkt[UDP_OFF + 2] << 8 | pkt[UDP_OFF + 3]) != INA_UDP_PORT:
            return False, True, False
        if n < FRAME_END:  # ina or lanes cut short
            return False, True, True
        return True, True, False

    def _loss(self, ingress_port: int) -> DropReason:
        """LossInjection: drop with probability threshold / (2^32 - 1)."""
        entry = self.ina_loss.lookup((ingress_port,))
        if entry is None:
            return DropReason.NONE
        (threshold,) = entry.action.params
        draw = int(self.state.loss_rng(ingress_port).integers(0, 0xFFFFFFFF))  # [0, 0xFFFFFFFE]
        return DropReason.LOSS if draw < threshold else DropReason.NONE

    def _forward(self, pkt: bytearray) -> tuple[DropReason, int]:
        """Ipv4Forwarding."""
        if pkt[IP_OFF] >> 4 != 4 or pkt[IP_OFF] & 0x0F != 5:
            return DropReason.BAD_IPV4, 0
        ttl = pkt[IP_OFF + 8]
        if ttl <= 1:
            return DropReason.TTL_EXPIRED, 0
        dst = int.from_bytes(pkt[IP_OFF + 16 : IP_OFF + 20], "big")
        entry = self.ipv4_lpm.lookup((dst,))
        action = entry.action if entry is not None else self.ipv4_lpm.default
        if action.name == "ipv4_forward":
            dmac, port = action.params
            pkt[6:12] = pkt[0:6]
            pkt[0:6] = dmac.to_bytes(6, "big")
            pkt[IP_OFF + 8] = ttl - 1
            return DropReason.NONE, port
        return DropReason.NO_ROUTE, 0

    # ------------------------------------------------------------------ aggregation

    def _aggregate(
        self, pkt: bytearray, ingress_port: int, length: int
    ) -> tuple[DropReason, int, int, bool]:
        """Aggregation: returns (drop reason, egress_spec, mcast_grp, consumed)."""
        ver_flags, opcode, job_id, tree_id, lanes, slot, contrib, seq = (
            INA_HEADER_STRUCT.unpack_from(pkt, INA_OFFSET)
        )
        version, flags = ver_flags >> 4, ver_flags & 0x0F
        # Validate the header, then the job.
        if version != INA_VERSION:
            return DropReason.BAD_VERSION, 0, 0, False
        if opcode > _MAX:
            return DropReason.BAD_OPCODE, 0, 0, False
        if lanes == 0 or lanes > K:
            return DropReason.BAD_LANES, 0, 0, False
        job = self.ina_job.lookup((job_id, tree_id))
        if job is None:
            return DropReason.UNKNOWN_JOB, 0, 0, False
        base, pool_size, fanin, child_mgid, is_root, parent_port, epoch = job.action.params
        set_ = slot >> 15
        slot_index = slot & 0x7FFF
        if slot_index >= pool_size:
            return DropReason.SLOT_RANGE, 0, 0, False

        r = self.registers
        slot_addr = base + slot_index
        cell = (slot_addr << 1) | set_
        if cell >= len(r.bitmap):
            # A pool configured past the register file (the controller refuses such pools;
            # bmv2 leaves the outcome unspecified): never touch state, drop as SLOT_RANGE.
            return DropReason.SLOT_RANGE, 0, 0, False
        owner_key = (job_id << 32) | (epoch << 16) | (seq >> 16)  # job_id ++ epoch ++ run
        owner = r.owner[slot_addr]
        state = r.state[cell]
        stored_contrib = r.contrib[cell]
        events = self.ina_events

        if flags & _RESULT:
            # A result coming down from the parent.
            if is_root == 1 or ingress_port != parent_port:
                return DropReason.UNEXPECTED_RESULT, 0, 0, False
            if owner != owner_key or seq != r.seq[cell]:
                return DropReason.STALE, 0, 0, False
            if r.count[cell] != fanin:
                # This node's round is not complete: the parent's result cannot include it.
                return DropReason.UNEXPECTED_RESULT, 0, 0, False
            r.lanes[cell] = np.frombuffer(pkt, _BE_LANES, K, LANES_OFF)
            state = STATE_READY | (STATE_OVERFLOW if flags & _OVERFLOW else 0)
            r.state[cell] = state
            r.contrib[cell] = contrib
            events.count(Event.PARENT_RESULT, length)
            return DropReason.NONE, 0, child_mgid, False

        udp_src = pkt[UDP_OFF] << 8 | pkt[UDP_OFF + 1]
        child = self.ina_child.lookup((job_id, tree_id, ingress_port, udp_src))
        if child is None:
            return DropReason.NOT_MEMBER, 0, 0, False
        child.packets += 1
        child.bytes += length
        (child_index,) = child.action.params
        other = cell ^ 1
        if owner != owner_key:
            # 1. A new owner (job, installation or run) takes the slot over: lazy reset.
            r.owner[slot_addr] = owner_key
            r.bitmap[cell] = r.bitmap[other] = 0
            r.count[cell] = r.count[other] = 0
            r.state[cell] = r.state[other] = 0
            r.seq[cell] = r.seq[other] = 0
            state = 0
            stored_contrib = 0
            events.count(Event.TAKEOVER, length)
        child_bit = (1 << child_index) & 0xFFFFFFFF
        bitmap = r.bitmap[cell]
        count = r.count[cell]
        stored_seq = r.seq[cell]
        other_bitmap = r.bitmap[other]
        other_count = r.count[other]

        if bitmap & child_bit and seq != stored_seq:
            return DropReason.STALE, 0, 0, False  # 2. not a retransmission: older than this use
        if bitmap & child_bit:
            # 3. A retransmission from a child already counted in this use.
            if state & STATE_READY:
                self._load_lanes(pkt, cell)
                out_flags = _RESULT | (_OVERFLOW if state & STATE_OVERFLOW else 0)
                self._set_flags_contrib(pkt, out_flags, stored_contrib)
                pkt[UDP_OFF + 2 : UDP_OFF + 4] = pkt[UDP_OFF : UDP_OFF + 2]  # back to its port
                events.count(Event.RETX_REPLY, length)
                return DropReason.NONE, ingress_port, 0, False
            if count == fanin:
                self._load_lanes(pkt, cell)
                out_flags = _RETX | (_OVERFLOW if state & STATE_OVERFLOW else 0)
                self._set_flags_contrib(pkt, out_flags, stored_contrib)
                events.count(Event.RETX_UP, length)
                return DropReason.NONE, parent_port, 0, False
            return DropReason.DUPLICATE, 0, 0, False
        if count != 0 and count != fanin and seq != stored_seq:
            return DropReason.STALE, 0, 0, False  # 4. an older chunk's copy
        if count == fanin and seq == stored_seq:
            return DropReason.STALE, 0, 0, False  # 5. a late copy of the completed use
        if other_bitmap & child_bit and other_count != fanin:
            # 6. The child jumps ahead: its round in the other set is not complete.
            return DropReason.AHEAD, 0, 0, False

        # 7. A new contribution.
        r.bitmap[cell] = bitmap | child_bit
        r.bitmap[other] = other_bitmap & ~child_bit & 0xFFFFFFFF
        events.count(Event.CONTRIBUTION, length)
        overflow = False
        row = r.lanes[cell]
        values = np.frombuffer(pkt, _BE_LANES, K, LANES_OFF)
        if count == 0 or count == fanin:
            row[:] = values
            count = 1
            new_contrib = contrib
            state = 0
            r.seq[cell] = seq
            events.count(Event.FIRST, length)
        else:
            if opcode == _SUM:
                wide = row.astype(np.int64)
                wide += values
                if wide.max() > INT32_MAX or wide.min() < INT32_MIN:
                    overflow = True
                    np.clip(wide, INT32_MIN, INT32_MAX, out=wide)
                row[:] = wide
            elif opcode == _OR:
                np.bitwise_or(row, values.astype(np.int32), out=row)
            else:
                np.maximum(row, values.astype(np.int32), out=row)
            pkt[LANES_OFF:FRAME_END] = row.astype(_BE_LANES).tobytes()
            count = (count + 1) & 0xFF  # bit<8> in the P4: wraps before it meets fanin
            new_contrib = (stored_contrib + contrib) & 0xFFFF
        if overflow:
            state |= STATE_OVERFLOW
            events.count(Event.OVERFLOW, length)
        if flags & _OVERFLOW:
            state |= STATE_OVERFLOW

        # Completion.
        egress_spec, mcast_grp, consumed = 0, 0, False
        if count == fanin:
            out_flags = _OVERFLOW if state & STATE_OVERFLOW else 0
            if is_root == 1:
                state |= STATE_READY
                self._set_flags_contrib(pkt, out_flags | _RESULT, new_contrib)
                mcast_grp = child_mgid
                events.count(Event.COMPLETE_ROOT, length)
            else:
                self._set_flags_contrib(pkt, out_flags, new_contrib)
                egress_spec = parent_port
                events.count(Event.COMPLETE_UP, length)
        else:
            consumed = True
        r.count[cell] = count
        r.contrib[cell] = new_contrib
        r.state[cell] = state
        return DropReason.NONE, egress_spec, mcast_grp, consumed

    def _load_lanes(self, pkt: bytearray, cell: int) -> None:
        pkt[LANES_OFF:FRAME_END] = self.registers.lanes[cell].astype(_BE_LANES).tobytes()

    @staticmethod
    def _set_flags_contrib(pkt: bytearray, flags: int, contrib: int) -> None:
        pkt[VER_FLAGS_AT] = (pkt[VER_FLAGS_AT] & 0xF0) | (flags & 0x0F)
        pkt[CONTRIB_AT : CONTRIB_AT + CONTRIB_BYTES] = (contrib & 0xFFFF).to_bytes(
            CONTRIB_BYTES, "big"
        )

    # ------------------------------------------------------------------ egress

    def _egress(
        self,
        pkt: bytearray,
        egress_port: int,
        egress_rid: int,
        ina_valid: bool,
        ipv4_valid: bool,
        length: int,
    ) -> tuple[int, bytes]:
        # EgressRewrite
        if ina_valid:
            entry = self.ina_egress.lookup((egress_port,))
            if entry is not None:
                dmac, dip, smac, sip = entry.action.params
                pkt[0:6] = dmac.to_bytes(6, "big")
                pkt[IP_OFF + 16 : IP_OFF + 20] = dip.to_bytes(4, "big")
                pkt[6:12] = smac.to_bytes(6, "big")
                pkt[IP_OFF + 12 : IP_OFF + 16] = sip.to_bytes(4, "big")
                if egress_rid != 0:  # a copy to one of the workers behind the port
                    pkt[UDP_OFF + 2 : UDP_OFF + 4] = egress_rid.to_bytes(2, "big")
            pkt[UDP_OFF : UDP_OFF + 2] = _INA_PORT_BYTES
            pkt[UDP_OFF + 6 : UDP_OFF + 8] = b"\0\0"
        # EgressCounters (bmv2 counts the packet's ingress length)
        self.port_tx.count(egress_port, length)
        # InaComputeChecksum
        if ipv4_valid:
            pkt[IP_OFF + 10 : IP_OFF + 12] = b"\0\0"
            csum = ipv4_checksum(bytes(pkt[IP_OFF : IP_OFF + IPV4_BYTES]))
            pkt[IP_OFF + 10 : IP_OFF + 12] = csum.to_bytes(2, "big")
        return egress_port, bytes(pkt)


assert UDP_BYTES == 8 and FRAME_END == INA_OFFSET + INA_HEADER_BYTES + LANES_BYTES
