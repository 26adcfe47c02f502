"""The network inaemu starts without Mininet, no root needed: one softswitch process per
switch of a topology on loopback wires, programmed over P4Runtime by the controller
(`network.EmbeddedNetwork`). `inaemu demo` (one switch or `--topo`), its comparison
(`--algo`) and `inaemu train` run on it."""
