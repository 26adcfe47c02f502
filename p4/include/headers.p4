/* inaemu: header and metadata declarations. The INA header mirrors common/wire.py
 * (INA_HEADER_FIELDS): same names, widths and order. */
#ifndef INA_HEADERS_P4
#define INA_HEADERS_P4

header ethernet_t {
    bit<48> dstAddr;
    bit<48> srcAddr;
    bit<16> etherType;
}

header ipv4_t {
    bit<4>  version;
    bit<4>  ihl;
    bit<8>  diffserv;
    bit<16> totalLen;
    bit<16> identification;
    bit<3>  flags;
    bit<13> fragOffset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdrChecksum;
    bit<32> srcAddr;
    bit<32> dstAddr;
}

header udp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<16> length;
    bit<16> checksum;
}

header ina_t {
    bit<4>  version;
    bit<4>  flags;
    bit<8>  opcode;
    bit<16> job_id;
    bit<8>  tree_id;
    bit<8>  lanes;
    bit<16> slot;     /* bit 15: set (shadow copy); bits 14..0: index in the job's pool */
    bit<16> contrib;
    bit<32> seq;
}

#define INA_LANE_FIELD(i) bit<32> v##i;
header ina_lanes_t {
    INA_FOR_EACH_LANE(INA_LANE_FIELD)
}

struct headers_t {
    ethernet_t  ethernet;
    ipv4_t      ipv4;
    udp_t       udp;
    ina_t       ina;
    ina_lanes_t lanes;
}

struct metadata_t {
    bit<8>  drop_reason;     /* DROP_*; DROP_NONE keeps the packet */
    bit<1>  consumed;        /* absorbed into a slot: dropped, but not a drop reason */
    /* loss injection */
    bit<32> loss_threshold;
    bit<32> loss_draw;
    /* ina_job */
    bit<16> base;
    bit<16> pool_size;
    bit<8>  fanin;
    bit<16> child_mgid;
    bit<1>  is_root;
    bit<9>  parent_port;
    bit<16> epoch;           /* this installation of the job on this switch */
    /* ina_child */
    bit<8>  child_index;
    bit<32> child_bit;
    /* slot addressing */
    bit<1>  slot_set;
    bit<15> slot_index;
    bit<32> slot_addr;       /* base + slot_index */
    bit<32> cell;            /* (base + slot_index) * 2 + set */
    bit<32> other_cell;      /* the same slot's other set */
    bit<32> lane_base;       /* cell * INA_K */
    /* slot state read from registers */
    bit<32> bitmap;
    bit<32> other_bitmap;
    bit<8>  count;
    bit<8>  other_count;
    bit<16> contrib;
    bit<8>  cell_state;
    bit<32> stored_seq;
    bit<48> owner;           /* the slot's owner: job_id ++ epoch ++ run */
    bit<48> owner_key;       /* this packet's: hdr.ina.job_id ++ meta.epoch ++ seq[31:16] */
    /* lane scratch */
    bit<32> acc;
    bit<32> sum;
    bit<1>  overflow;        /* a SUM lane saturated in this packet */
}

#endif
