"""inaemu: an emulator for in-network aggregation of distributed-training gradients.

The package maps the repository's top-level folders into one namespace:

- `inaemu.hostlib`: what a training worker links (wire format, transports, client, codecs);
- `inaemu.controller`: the P4Runtime control plane and the `inaemu` command;
- `inaemu.softswitch`: the pipeline of `p4/ina.p4` in Python, its ports and P4Runtime server;
- `inaemu.p4`: the P4 program, its committed P4Info and the model of it both sides use;
- `inaemu.conformance`: packet-level conformance cases and their runner;
- `inaemu.collectives`: host allreduce schedules (ring, halving-doubling, HDRM, MultiTree)
  and their checker.
"""

__version__ = "0.2.0"
