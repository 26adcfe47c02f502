"""inaemu: an emulator for in-network aggregation of distributed-training gradients.

The package maps the repository's top-level folders into one namespace, floor by floor
(docs/architecture.md, "Floors": each imports only the floors below it):

- `inaemu.p4`: the P4 program, its committed P4Info, the model of it both sides use, its
  bmv2 build;
- `inaemu.topology`: the network: hosts, switches, links (`topology.json`), builders and
  compact specs, addresses, host-to-host routes, drawing;
- `inaemu.collectives`: host allreduce schedules (ring, halving-doubling, HDRM, MultiTree,
  worker-aggregator) and their checker;
- `inaemu.hostlib`: what a training worker links (wire format, transports, client, codecs,
  the collectives' executor);
- `inaemu.controller`: the P4Runtime control plane as a library (jobs, slot pools, trees,
  statistics, `api`: one function per operation);
- `inaemu.softswitch`: the pipeline of `p4/ina.p4` in Python, its ports and P4Runtime server;
- `inaemu.conformance`: packet-level conformance cases and their runner;
- `inaemu.mininet`: Mininet nodes, scenarios and the `inaemu mininet` runner;
- `inaemu.cli`: the `inaemu` command, the demo, the comparison and the training launcher.
"""

__version__ = "0.2.0"
