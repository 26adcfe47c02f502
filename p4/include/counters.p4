/* inaemu: statistics. bmv2's P4Runtime server cannot read registers, so everything a user
 * measures comes from these counters (and the direct counter on ina_child, per job and port). */
#ifndef INA_COUNTERS_P4
#define INA_COUNTERS_P4

control IngressCounters(inout headers_t hdr,
                        inout metadata_t meta,
                        inout standard_metadata_t standard_metadata) {
    @id(0x12000103)
    counter(INA_PORTS, CounterType.packets_and_bytes) port_rx;
    @id(0x12000101)
    counter(INA_DROP_REASONS, CounterType.packets_and_bytes) ina_drops;

    apply {
        port_rx.count((bit<32>)standard_metadata.ingress_port);
        if (meta.drop_reason != DROP_NONE) {
            ina_drops.count((bit<32>)meta.drop_reason);
        }
    }
}

control EgressCounters(inout headers_t hdr,
                       inout metadata_t meta,
                       inout standard_metadata_t standard_metadata) {
    @id(0x12000104)
    counter(INA_PORTS, CounterType.packets_and_bytes) port_tx;

    apply {
        port_tx.count((bit<32>)standard_metadata.egress_port);
    }
}

#endif
