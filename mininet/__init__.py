"""Mininet for in-network aggregation: switch and host nodes (`nodes`), a topology as a
Mininet network programmed by the controller's commands (`scenario`), allreduce algorithms
(`algos`) and the scenario runner `inaemu mininet` (`run`). docs/mininet.md describes them.

Mininet itself is Debian's package, imported by path (`debian`): this folder is
`inaemu.mininet`, never `mininet`.
"""
