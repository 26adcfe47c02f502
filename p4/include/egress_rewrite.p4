/* inaemu: rewrite of INA packets leaving towards a host (result copies, unicast replies):
 * the destination MAC and IPv4 address become the host's, the source MAC and IPv4 address
 * the switch's aggregation address (the one workers send to), so a host's kernel takes the
 * packet as coming from the switch, not from itself or a peer.
 *
 * Several workers behind one port (the ranks of one machine) share its addresses and differ
 * by UDP port: a result copy to a host port goes to the UDP port its multicast replica names
 * (the replica's instance, egress_rid, is the worker's UDP port; 0 keeps the packet's), a
 * retransmission reply to the port it came from (the aggregation control sets that). Every
 * INA packet the switch emits leaves from UDP port INA_UDP_PORT, so a switch above knows a
 * child switch's partials by it. The UDP checksum of every INA packet the switch emits is 0;
 * the IPv4 checksum is recomputed in InaComputeChecksum. */
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
            if (ina_egress.apply().hit && standard_metadata.egress_rid != 0) {
                hdr.udp.dstPort = standard_metadata.egress_rid;
            }
            hdr.udp.srcPort = INA_UDP_PORT;
            hdr.udp.checksum = 0;
        }
    }
}

#endif
