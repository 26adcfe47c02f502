"""The P4 program (`ina.p4`, `include/`), its committed P4Info, and what Python knows of them.

`inaemu.p4.info` is the one model of the P4Info (by name and by id, with P4Runtime status
errors); `inaemu.p4.constants` mirrors `include/defines.p4`.
"""
