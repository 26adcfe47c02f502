"""The simplest job: every worker on one switch, which is the root of a one-level tree.

For tests and benchmarks that program an in-process pipeline without a topology; the entries
come from the same functions `controller.jobs` uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from inaemu.common.wire import INA_UDP_PORT, MAX_FANIN
from inaemu.controller.jobs import TreeNode, add_tree_node, host_rewrite
from inaemu.p4.constants import INA_SLOTS
from inaemu.p4.plan import SwitchPlan
from inaemu.topology.model import Switch

_DEFAULT_SWITCH = Switch("s1")  # the topology's default aggregation address


@dataclass(frozen=True)
class Worker:
    port: int  # switch port the worker is attached to
    mac: str
    ip: str
    udp_port: int = INA_UDP_PORT  # what it sends from: workers behind one port differ by it


def star_job_plan(
    job_id: int,
    workers: list[Worker],
    *,
    base: int,
    pool_size: int,
    mgid: int,
    n_trees: int = 1,
    epoch: int = 1,
    agg_mac: str = _DEFAULT_SWITCH.agg_mac,
    agg_ip: str = _DEFAULT_SWITCH.agg_ip,
) -> SwitchPlan:
    """Entries for `job_id` on one switch with `workers`, slots [base, base + pool_size).

    With several trees, each tree gets its own ina_job entry over the same pool (chunk i uses
    tree (i mod W) mod T, so trees never share a slot) and its own multicast group mgid + t.
    `epoch` is this installation's (a reinstallation over the same pool needs another one);
    results leave from the switch's aggregation address `agg_mac`, `agg_ip`.
    """
    if not 1 <= len(workers) <= MAX_FANIN:
        raise ValueError(f"a job needs 1..{MAX_FANIN} workers per switch, got {len(workers)}")
    if len({(w.port, w.udp_port) for w in workers}) != len(workers):
        raise ValueError("two workers of the job share a switch port and a UDP port")
    hosts = {w.port: (w.mac, w.ip) for w in workers}
    if len({(w.port, w.mac, w.ip) for w in workers}) != len(hosts):
        raise ValueError("workers behind one switch port must share its MAC and IP address")
    if base < 0 or pool_size < 1 or base + pool_size > INA_SLOTS:
        raise ValueError(
            f"slot pool [{base}, {base + pool_size}) does not fit the switch's {INA_SLOTS} slots"
        )
    plan = SwitchPlan()
    node = TreeNode(
        "s1",
        is_root=True,
        child_ports=[w.port for w in workers],
        host_ports={port: ip for port, (_mac, ip) in hosts.items()},
        child_udp_ports=[w.udp_port for w in workers],
    )
    for tree in range(n_trees):
        add_tree_node(plan, job_id, tree, node, (base, pool_size), mgid + tree, epoch)
    plan.tables += [
        host_rewrite(port, mac, ip, agg_mac, agg_ip) for port, (mac, ip) in hosts.items()
    ]
    return plan
