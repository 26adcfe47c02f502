/* inaemu: in-network aggregation of gradients for bmv2 (v1model).
 *
 * Build: make -C p4   (p4c-bm2-ss -> build/ina.json, build/ina.p4info.txt)
 * The committed ina.p4info.txt is what p4c-bm2-ss emits for this source; every P4Runtime
 * object carries an explicit @id. softswitch/ implements the same pipeline in Python.
 *
 * Ingress: loss injection -> (truncated? drop) -> INA aggregation | IPv4 forwarding -> counters.
 * Egress:  host rewrite of INA packets (ina_egress), UDP checksum 0 -> counters.
 */
#include <core.p4>
#include <v1model.p4>

#include "include/defines.p4"
#include "include/lanes.p4"
#include "include/headers.p4"

#include "include/parser.p4"
#include "include/loss.p4"
#include "include/aggregation.p4"
#include "include/forwarding.p4"
#include "include/egress_rewrite.p4"
#include "include/counters.p4"

control InaIngress(inout headers_t hdr,
                   inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {
    LossInjection() loss;
    Aggregation() agg;
    Ipv4Forwarding() fwd;
    IngressCounters() counters;

    apply {
        loss.apply(hdr, meta, standard_metadata);
        if (meta.drop_reason == DROP_NONE) {
            if (standard_metadata.parser_error != error.NoError) {
                meta.drop_reason = DROP_TRUNCATED;
            } else if (hdr.ina.isValid()) {
                agg.apply(hdr, meta, standard_metadata);
            } else if (hdr.ipv4.isValid()) {
                fwd.apply(hdr, meta, standard_metadata);
            } else {
                meta.drop_reason = DROP_NOT_IPV4;
            }
        }
        if (meta.drop_reason != DROP_NONE || meta.consumed == 1) {
            mark_to_drop(standard_metadata);
        }
        counters.apply(hdr, meta, standard_metadata);
    }
}

control InaEgress(inout headers_t hdr,
                  inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    EgressRewrite() rewrite;
    EgressCounters() counters;

    apply {
        rewrite.apply(hdr, meta, standard_metadata);
        counters.apply(hdr, meta, standard_metadata);
    }
}

V1Switch(InaParser(),
         InaVerifyChecksum(),
         InaIngress(),
         InaEgress(),
         InaComputeChecksum(),
         InaDeparser()) main;
