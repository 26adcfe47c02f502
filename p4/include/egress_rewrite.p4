/* inaemu: rewrite of INA packets leaving towards a host (result copies, unicast replies):
 * the destination MAC and IPv4 address become the host's, the source MAC and IPv4 address
 * the switch's aggregation address (the one workers send to), so a host's kernel takes the
 * packet as coming from the switch, not from itself or a peer. The UDP checksum of every INA
 * packet the switch emits is 0; the IPv4 checksum is recomputed in InaComputeChecksum. */
#ifndef INA_EGRESS_REWRITE_P4
#define INA_EGRESS_REWRITE_P4

control EgressRewrite(inout headers_t hdr,
                      inout metadata_t meta,
                      inout standard_metadata_t standard_metadata) {
    @id(0x01000109)
    action not_host() { }

    @id(0x01000103)
    action to_host(bit<48> dmac, bit<32> dip, bit<48> smac, bit<32> sip) {
        hdr.ethernet.dstAddr = dmac;
        hdr.ipv4.dstAddr = dip;
        hdr.ethernet.srcAddr = smac;
        hdr.ipv4.srcAddr = sip;
    }

    @id(0x02000103)
    table ina_egress {
        key = {
            standard_metadata.egress_port: exact;
        }
        actions = {
            to_host;
            @defaultonly not_host;
        }
        const default_action = not_host();
        size = INA_PORTS;
    }

    apply {
        if (hdr.ina.isValid()) {
            ina_egress.apply();
            hdr.udp.checksum = 0;
        }
    }
}

#endif
