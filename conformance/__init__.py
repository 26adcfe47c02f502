"""Packet-level conformance: STF cases (`cases/`), their format and runner, and two targets
(the softswitch in-process, bmv2's simple_switch). `inaemu conformance` runs them."""
