/* inaemu: ordinary IPv4 forwarding (longest prefix match), p4lang/tutorials style. */
#ifndef INA_FORWARDING_P4
#define INA_FORWARDING_P4

control Ipv4Forwarding(inout headers_t hdr,
                       inout metadata_t meta,
                       inout standard_metadata_t standard_metadata) {
    @id(0x01000104)
    action ipv4_forward(bit<48> dstAddr, bit<9> port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = dstAddr;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    @id(0x01000105)
    action drop() {
        meta.drop_reason = DROP_NO_ROUTE;
    }

    @id(0x02000104)
    table ipv4_lpm {
        key = {
            hdr.ipv4.dstAddr: lpm;
        }
        actions = {
            ipv4_forward;
            drop;
        }
        default_action = drop();
        size = 1024;
    }

    apply {
        if (hdr.ipv4.version != 4 || hdr.ipv4.ihl != 5) {
            meta.drop_reason = DROP_BAD_IPV4;
        } else if (hdr.ipv4.ttl <= 1) {
            meta.drop_reason = DROP_TTL_EXPIRED;
        } else {
            ipv4_lpm.apply();
        }
    }
}

#endif
