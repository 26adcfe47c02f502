/* inaemu: compile-time constants shared by every part of the pipeline.
 * Mirrors common/wire.py (wire format) and p4/constants.py (drop reasons, events);
 * tests/test_p4_agreement.py checks that they agree. */
#ifndef INA_DEFINES_P4
#define INA_DEFINES_P4

/* Lanes per packet: 8, 16, 32 or 64 (common.wire.K). */
#ifndef INA_K
#define INA_K 64
#endif
/* Aggregation slots in the switch, shared by all jobs' pools. */
#ifndef INA_SLOTS
#define INA_SLOTS 1024
#endif
#define INA_SLOT_CELLS (INA_SLOTS * 2)            /* (slot, set) pairs */
#define INA_LANE_CELLS (INA_SLOTS * 2 * INA_K)    /* (slot, set, lane) */

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_UDP   = 17;
const bit<16> INA_UDP_PORT   = 47500;
const bit<4>  INA_VERSION    = 1;

/* INA header flags (4 bits). */
const bit<4> FLAG_RESULT   = 0x1;
const bit<4> FLAG_RETX     = 0x2;
const bit<4> FLAG_OVERFLOW = 0x4;

/* Opcodes. */
const bit<8> OP_SUM = 0;
const bit<8> OP_OR  = 1;
const bit<8> OP_MAX = 2;

/* Per-(slot, set) state bits in reg_state. */
const bit<8> STATE_READY    = 0x1;
const bit<8> STATE_OVERFLOW = 0x2;

/* Drop reasons: index into the ina_drops counter. 0 = not dropped. A new one is a constant
 * here, the count below, and its member in p4/constants.py (docs/architecture.md, "Adding a
 * drop reason or an event"). */
const bit<8> DROP_NONE              = 0;
const bit<8> DROP_TRUNCATED         = 1;
const bit<8> DROP_BAD_VERSION       = 2;
const bit<8> DROP_BAD_OPCODE        = 3;
const bit<8> DROP_BAD_LANES         = 4;
const bit<8> DROP_UNKNOWN_JOB       = 5;
const bit<8> DROP_SLOT_RANGE        = 6;
const bit<8> DROP_NOT_MEMBER        = 7;
const bit<8> DROP_UNEXPECTED_RESULT = 8;
const bit<8> DROP_STALE             = 9;  /* a copy that outlived its use */
const bit<8> DROP_DUPLICATE         = 10;
const bit<8> DROP_LOSS              = 11;
const bit<8> DROP_NO_ROUTE          = 12;
const bit<8> DROP_TTL_EXPIRED       = 13;
const bit<8> DROP_NOT_IPV4          = 14;
const bit<8> DROP_BAD_IPV4          = 15;
const bit<8> DROP_AHEAD             = 16; /* a child moved on before its round completed */
#define INA_DROP_REASONS 17

/* Aggregation events: index into the ina_events counter (a new one: as a drop reason). */
const bit<32> EV_CONTRIBUTION   = 0;  /* a new contribution was combined into a slot */
const bit<32> EV_FIRST          = 1;  /* it was the first of a new use of (slot, set) */
const bit<32> EV_COMPLETE_ROOT  = 2;  /* root completed: result multicast */
const bit<32> EV_COMPLETE_UP    = 3;  /* non-root completed: partial sent to parent */
const bit<32> EV_RETX_REPLY     = 4;  /* retransmission answered with the stored result */
const bit<32> EV_RETX_UP        = 5;  /* retransmission: partial re-sent to parent */
const bit<32> EV_PARENT_RESULT  = 6;  /* result from parent stored and multicast */
const bit<32> EV_OVERFLOW       = 7;  /* a SUM lane saturated in this packet */
const bit<32> EV_TAKEOVER       = 8;  /* a new owner (job, epoch, run) cleared a slot */
#define INA_EVENTS 9

#define INA_PORTS 512

#endif
