"""Packet-level simulation on ns-3 of the same switch pipeline and host protocols that the
emulator runs: `inaemu sim` (docs/sim.md).

ns-3 provides the links, queues and events (`engine.py` loads it and the C++ that keeps Python
off the per-packet path, `glue.cpp`; `network.py` builds a topology's links); the switches run
the project's pipeline (`switches.py`), the hosts the project's INA client (`ina.py`).
"""
