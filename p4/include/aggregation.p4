/* inaemu: in-network aggregation over a pool of slots (DESIGN §4), SwitchML-style.
 *
 * Every (slot, set) cell holds: a bitmap of the children seen, a count, the sum of their
 * contrib fields, a state byte (READY, OVERFLOW), the seq of the chunk it aggregates and
 * INA_K value lanes. Cells are addressed globally: cell = (base + slot_index) * 2 + set,
 * where base and pool_size come from the job's ina_job entry. Every slot also records its
 * owner: (job_id, epoch, run), where epoch comes from the job's ina_job entry (a new value on
 * every installation of the job on this switch) and run is the top 16 bits of seq (a new
 * value on every run of the job's workers).
 *
 * A child is what ina_child names by (job, tree, ingress port, UDP source port): a worker (one
 * of several behind one port, each sending from its own UDP port), or a switch below, whose
 * partials leave from INA_UDP_PORT (egress_rewrite.p4).
 *
 * A contribution from child c into (slot, set s), decided in this order:
 *   1. the slot has another owner: the cell's state belongs to an earlier job, installation
 *     or run. The packet takes the slot over: both sets are cleared (bitmaps, counts, states,
 *     seqs; the lanes are overwritten by the first contribution) and the owner recorded,
 *     then it goes on as into a fresh slot. No state survives into a new use of a cell, and
 *     no control-plane register write is needed (P4Runtime cannot write bmv2's registers).
 *   2. c's bit set in bitmap[s], seq not the cell's: a copy older than the cell's use
 *     (DROP_STALE), never answered.
 *   3. c's bit set in bitmap[s], seq the cell's: a retransmission. If the result is known
 *     (READY), send it back to c only; if count == fanin (this node completed but waits for
 *     its parent), re-send its partial upward with RETX; otherwise drop (DROP_DUPLICATE).
 *   4. 0 < count < fanin and seq not the cell's: a copy of another chunk (DROP_STALE).
 *   5. count == fanin and seq the cell's: a late copy of the completed use from a child
 *     that has moved on (DROP_STALE).
 *   6. c's bit set in bitmap[1-s] and count[1-s] != fanin: c jumps ahead of its round in
 *     the other set, which is not complete, so c cannot hold its result (DROP_AHEAD; nothing
 *     changes). Letting it through would clear c's bit in bitmap[1-s] (step 7) and count
 *     c's next copy there a second time. bitmap[1-s] and count[1-s] are read after step 1.
 *   7. a new contribution: set c's bit in bitmap[s], clear it in bitmap[1-s]. The first
 *     contribution of a new use (count 0 or count == fanin) overwrites the lanes, resets
 *     contrib and the state and records the seq; later ones combine by opcode (SUM
 *     saturating with sticky OVERFLOW, OR, MAX signed). When count reaches fanin the root
 *     marks READY and multicasts the result (RESULT flag) to child_mgid; a non-root forwards
 *     its partial to parent_port. Hosts number chunks within a run without restarting, so a
 *     new use of a cell always carries a new seq.
 * A RESULT (non-root only, from parent_port only, else DROP_UNEXPECTED_RESULT) is stored
 * (READY, lanes, contrib, OVERFLOW from the flag) and multicast to the children only if the
 * slot's owner and the cell's seq are the packet's (else DROP_STALE) and this node's own
 * round in the cell is complete, count == fanin (else DROP_UNEXPECTED_RESULT): before that
 * this node has sent no partial up, so the result cannot include it, and a late child's
 * contribution would be added to the stored result and sent up and in retransmission replies.
 * Together these keep every aggregate exact whatever frames arrive: a partial sent up or a
 * result emitted by a root combines exactly one contribution from each of its fanin children
 * (child indexes 0..fanin-1, as the controller installs them), all with its seq
 * (tests/test_pipeline_adversarial.py).
 */
#ifndef INA_AGGREGATION_P4
#define INA_AGGREGATION_P4

/* First contribution of a use: the packet's lanes become the cell's lanes. */
#define INA_LANE_STORE(i) \
    reg_lanes.write(meta.lane_base + i, hdr.lanes.v##i);

/* Saturating signed 32-bit add; the packet leaves carrying the running aggregate. */
#define INA_LANE_SUM(i) \
    reg_lanes.read(meta.acc, meta.lane_base + i); \
    meta.sum = meta.acc + hdr.lanes.v##i; \
    if (meta.acc[31:31] == hdr.lanes.v##i[31:31] && meta.sum[31:31] != meta.acc[31:31]) { \
        if (meta.acc[31:31] == 1) { \
            meta.sum = 32w0x80000000; \
        } else { \
            meta.sum = 32w0x7FFFFFFF; \
        } \
        meta.overflow = 1; \
    } \
    reg_lanes.write(meta.lane_base + i, meta.sum); \
    hdr.lanes.v##i = meta.sum;

#define INA_LANE_OR(i) \
    reg_lanes.read(meta.acc, meta.lane_base + i); \
    meta.acc = meta.acc | hdr.lanes.v##i; \
    reg_lanes.write(meta.lane_base + i, meta.acc); \
    hdr.lanes.v##i = meta.acc;

#define INA_LANE_MAX(i) \
    reg_lanes.read(meta.acc, meta.lane_base + i); \
    if ((int<32>)hdr.lanes.v##i > (int<32>)meta.acc) { \
        meta.acc = hdr.lanes.v##i; \
    } \
    reg_lanes.write(meta.lane_base + i, meta.acc); \
    hdr.lanes.v##i = meta.acc;

/* The cell's lanes into the packet (a stored result or a partial). */
#define INA_LANE_LOAD(i) \
    reg_lanes.read(hdr.lanes.v##i, meta.lane_base + i);

control Aggregation(inout headers_t hdr,
                    inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {
    @id(0x16000101) register<bit<32>>(INA_SLOT_CELLS) reg_bitmap;
    @id(0x16000102) register<bit<8>>(INA_SLOT_CELLS)  reg_count;
    @id(0x16000103) register<bit<16>>(INA_SLOT_CELLS) reg_contrib;
    @id(0x16000104) register<bit<8>>(INA_SLOT_CELLS)  reg_state;
    @id(0x16000105) register<bit<32>>(INA_SLOT_CELLS) reg_seq;
    @id(0x16000106) register<bit<32>>(INA_LANE_CELLS) reg_lanes;
    /* per slot: job_id ++ epoch ++ run of the slot's current owner */
    @id(0x16000107) register<bit<48>>(INA_SLOTS)      reg_owner;

    @id(0x12000102)
    counter(INA_EVENTS, CounterType.packets_and_bytes) ina_events;

    @id(0x13000101)
    direct_counter(CounterType.packets_and_bytes) ina_child_stats;

    /* Default of ina_job and ina_child: the apply block reads the miss. */
    @id(0x01000108)
    action miss() { }

    @id(0x01000101)
    action agg_node(bit<16> base, bit<16> pool_size, bit<8> fanin, bit<16> child_mgid,
                    bit<1> is_root, bit<9> parent_port, bit<16> epoch) {
        meta.base = base;
        meta.pool_size = pool_size;
        meta.fanin = fanin;
        meta.child_mgid = child_mgid;
        meta.is_root = is_root;
        meta.parent_port = parent_port;
        meta.epoch = epoch;
    }

    @id(0x02000101)
    table ina_job {
        key = {
            hdr.ina.job_id: exact;
            hdr.ina.tree_id: exact;
        }
        actions = {
            agg_node;
            @defaultonly miss;
        }
        const default_action = miss();
        size = 256;
    }

    @id(0x01000102)
    action set_child(bit<8> index) {
        meta.child_index = index;
    }

    @id(0x02000102)
    table ina_child {
        key = {
            hdr.ina.job_id: exact;
            hdr.ina.tree_id: exact;
            standard_metadata.ingress_port: exact;
            hdr.udp.srcPort: exact @name("udp_port");
        }
        actions = {
            set_child;
            @defaultonly miss;
        }
        const default_action = miss();
        counters = ina_child_stats;
        size = 4096;
    }

    apply {
        /* Validate the header, then the job. */
        if (hdr.ina.version != INA_VERSION) {
            meta.drop_reason = DROP_BAD_VERSION;
        } else if (hdr.ina.opcode > OP_MAX) {
            meta.drop_reason = DROP_BAD_OPCODE;
        } else if (hdr.ina.lanes == 0 || hdr.ina.lanes > INA_K) {
            meta.drop_reason = DROP_BAD_LANES;
        } else if (!ina_job.apply().hit) {
            meta.drop_reason = DROP_UNKNOWN_JOB;
        } else {
            meta.slot_set = hdr.ina.slot[15:15];
            meta.slot_index = hdr.ina.slot[14:0];
            if ((bit<16>)meta.slot_index >= meta.pool_size) {
                meta.drop_reason = DROP_SLOT_RANGE;
            }
        }

        if (meta.drop_reason == DROP_NONE) {
            meta.slot_addr = (bit<32>)meta.base + (bit<32>)meta.slot_index;
            meta.cell = (meta.slot_addr << 1) | (bit<32>)meta.slot_set;
            meta.other_cell = meta.cell ^ 1;
            meta.lane_base = meta.cell * INA_K;
            meta.owner_key = hdr.ina.job_id ++ meta.epoch ++ hdr.ina.seq[31:16];
            reg_owner.read(meta.owner, meta.slot_addr);
            reg_state.read(meta.cell_state, meta.cell);
            reg_contrib.read(meta.contrib, meta.cell);

            if ((hdr.ina.flags & FLAG_RESULT) != 0) {
                /* A result coming down from the parent. */
                reg_seq.read(meta.stored_seq, meta.cell);
                reg_count.read(meta.count, meta.cell);
                if (meta.is_root == 1 || standard_metadata.ingress_port != meta.parent_port) {
                    meta.drop_reason = DROP_UNEXPECTED_RESULT;
                } else if (meta.owner != meta.owner_key || hdr.ina.seq != meta.stored_seq) {
                    meta.drop_reason = DROP_STALE;
                } else if (meta.count != meta.fanin) {
                    /* This node's round is not complete: it sent no partial up, so the
                     * parent's result cannot include it. Storing it would let a late
                     * child's contribution be added to the result. */
                    meta.drop_reason = DROP_UNEXPECTED_RESULT;
                } else {
                    INA_FOR_EACH_LANE(INA_LANE_STORE)
                    meta.cell_state = STATE_READY;
                    if ((hdr.ina.flags & FLAG_OVERFLOW) != 0) {
                        meta.cell_state = meta.cell_state | STATE_OVERFLOW;
                    }
                    reg_state.write(meta.cell, meta.cell_state);
                    reg_contrib.write(meta.cell, hdr.ina.contrib);
                    standard_metadata.mcast_grp = meta.child_mgid;
                    ina_events.count(EV_PARENT_RESULT);
                }
            } else if (!ina_child.apply().hit) {
                meta.drop_reason = DROP_NOT_MEMBER;
            } else {
                if (meta.owner != meta.owner_key) {
                    /* 1. A new owner (job, installation or run) takes the slot over: lazy reset. */
                    reg_owner.write(meta.slot_addr, meta.owner_key);
                    reg_bitmap.write(meta.cell, 0);
                    reg_bitmap.write(meta.other_cell, 0);
                    reg_count.write(meta.cell, 0);
                    reg_count.write(meta.other_cell, 0);
                    reg_state.write(meta.cell, 0);
                    reg_state.write(meta.other_cell, 0);
                    reg_seq.write(meta.cell, 0);
                    reg_seq.write(meta.other_cell, 0);
                    meta.cell_state = 0;
                    meta.contrib = 0;
                    ina_events.count(EV_TAKEOVER);
                }
                meta.child_bit = 32w1 << meta.child_index;
                reg_bitmap.read(meta.bitmap, meta.cell);
                reg_count.read(meta.count, meta.cell);
                reg_seq.read(meta.stored_seq, meta.cell);
                reg_bitmap.read(meta.other_bitmap, meta.other_cell);
                reg_count.read(meta.other_count, meta.other_cell);

                if ((meta.bitmap & meta.child_bit) != 0 && hdr.ina.seq != meta.stored_seq) {
                    /* 2. Not a retransmission of this use: a copy older than it. */
                    meta.drop_reason = DROP_STALE;
                } else if ((meta.bitmap & meta.child_bit) != 0) {
                    /* 3. A retransmission from a child already counted in this use. */
                    if ((meta.cell_state & STATE_READY) != 0) {
                        INA_FOR_EACH_LANE(INA_LANE_LOAD)
                        hdr.ina.flags = FLAG_RESULT;
                        if ((meta.cell_state & STATE_OVERFLOW) != 0) {
                            hdr.ina.flags = hdr.ina.flags | FLAG_OVERFLOW;
                        }
                        hdr.ina.contrib = meta.contrib;
                        /* back to the UDP port it came from (egress sets the source) */
                        hdr.udp.dstPort = hdr.udp.srcPort;
                        standard_metadata.egress_spec = standard_metadata.ingress_port;
                        ina_events.count(EV_RETX_REPLY);
                    } else if (meta.count == meta.fanin) {
                        INA_FOR_EACH_LANE(INA_LANE_LOAD)
                        hdr.ina.flags = FLAG_RETX;
                        if ((meta.cell_state & STATE_OVERFLOW) != 0) {
                            hdr.ina.flags = hdr.ina.flags | FLAG_OVERFLOW;
                        }
                        hdr.ina.contrib = meta.contrib;
                        standard_metadata.egress_spec = meta.parent_port;
                        ina_events.count(EV_RETX_UP);
                    } else {
                        meta.drop_reason = DROP_DUPLICATE;
                    }
                } else if (meta.count != 0 && meta.count != meta.fanin &&
                           hdr.ina.seq != meta.stored_seq) {
                    /* 4. A copy of an older chunk that outlived its use of this cell. */
                    meta.drop_reason = DROP_STALE;
                } else if (meta.count == meta.fanin && hdr.ina.seq == meta.stored_seq) {
                    /* 5. A late copy of the completed use, from a child that has moved on. */
                    meta.drop_reason = DROP_STALE;
                } else if ((meta.other_bitmap & meta.child_bit) != 0 &&
                           meta.other_count != meta.fanin) {
                    /* 6. The child jumps ahead: its round in the other set is not complete,
                     * so it cannot hold that round's result. Clearing its bit there would
                     * count its retransmission twice. */
                    meta.drop_reason = DROP_AHEAD;
                } else {
                    /* 7. A new contribution. */
                    reg_bitmap.write(meta.cell, meta.bitmap | meta.child_bit);
                    reg_bitmap.write(meta.other_cell, meta.other_bitmap & ~meta.child_bit);
                    ina_events.count(EV_CONTRIBUTION);

                    if (meta.count == 0 || meta.count == meta.fanin) {
                        INA_FOR_EACH_LANE(INA_LANE_STORE)
                        meta.count = 1;
                        meta.contrib = hdr.ina.contrib;
                        meta.cell_state = 0;
                        reg_seq.write(meta.cell, hdr.ina.seq);
                        ina_events.count(EV_FIRST);
                    } else {
                        if (hdr.ina.opcode == OP_SUM) {
                            INA_FOR_EACH_LANE(INA_LANE_SUM)
                        } else if (hdr.ina.opcode == OP_OR) {
                            INA_FOR_EACH_LANE(INA_LANE_OR)
                        } else {
                            INA_FOR_EACH_LANE(INA_LANE_MAX)
                        }
                        meta.count = meta.count + 1;
                        meta.contrib = meta.contrib + hdr.ina.contrib;
                    }
                    if (meta.overflow == 1) {
                        meta.cell_state = meta.cell_state | STATE_OVERFLOW;
                        ina_events.count(EV_OVERFLOW);
                    }
                    if ((hdr.ina.flags & FLAG_OVERFLOW) != 0) {
                        meta.cell_state = meta.cell_state | STATE_OVERFLOW;
                    }

                    /* Completion. */
                    if (meta.count == meta.fanin) {
                        hdr.ina.contrib = meta.contrib;
                        hdr.ina.flags = 0;
                        if ((meta.cell_state & STATE_OVERFLOW) != 0) {
                            hdr.ina.flags = FLAG_OVERFLOW;
                        }
                        if (meta.is_root == 1) {
                            meta.cell_state = meta.cell_state | STATE_READY;
                            hdr.ina.flags = hdr.ina.flags | FLAG_RESULT;
                            standard_metadata.mcast_grp = meta.child_mgid;
                            ina_events.count(EV_COMPLETE_ROOT);
                        } else {
                            standard_metadata.egress_spec = meta.parent_port;
                            ina_events.count(EV_COMPLETE_UP);
                        }
                    } else {
                        meta.consumed = 1;
                    }
                    reg_count.write(meta.cell, meta.count);
                    reg_contrib.write(meta.cell, meta.contrib);
                    reg_state.write(meta.cell, meta.cell_state);
                }
            }
        }
    }
}

#endif
