/* inaemu: per-ingress-port loss injection (Mininet links here cannot do netem loss).
 * An entry drops each arriving packet with probability threshold / 2^32 - 1:
 * draw r uniformly in [0, 0xFFFFFFFE]; drop iff r < threshold. 0 never drops,
 * 0xFFFFFFFF always drops. */
#ifndef INA_LOSS_P4
#define INA_LOSS_P4

control LossInjection(inout headers_t hdr,
                      inout metadata_t meta,
                      inout standard_metadata_t standard_metadata) {
    @id(0x01000107)
    action no_loss() { }

    @id(0x01000106)
    action set_loss(bit<32> threshold) {
        meta.loss_threshold = threshold;
    }

    @id(0x02000105)
    table ina_loss {
        key = {
            standard_metadata.ingress_port: exact;
        }
        actions = {
            set_loss;
            @defaultonly no_loss;
        }
        const default_action = no_loss();
        size = INA_PORTS;
    }

    apply {
        if (ina_loss.apply().hit) {
            random(meta.loss_draw, 32w0, 32w0xFFFFFFFE);
            if (meta.loss_draw < meta.loss_threshold) {
                meta.drop_reason = DROP_LOSS;
            }
        }
    }
}

#endif
