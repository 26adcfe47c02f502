"""The control-plane state (Python tables and multicast groups) as the arrays the kernel reads.

`compile_tables` turns a pipeline's tables into one set of hash tables (kernel.py's `find`)
over a shared parameter array: every entry is a row of `params` (its action's parameters, as
the reference reads them), and each table maps its key, packed into one int64, to its row:

| table | key | row |
| --- | --- | --- |
| ina_loss | ingress port | (threshold) |
| ina_job | job_id << 8 \\| tree_id | agg_node's 7 (base, pool_size, fanin, ..., epoch) |
| ina_child | `pack_child_key`(job_id, tree_id, port, UDP port) | (index); counted in `row_ctr` |
| ina_egress | egress port | to_host(dmac, dip, smac, sip) |
| ipv4_lpm | prefix_len << 32 \\| prefix | (1, dmac, port) for ipv4_forward, (0) for drop |
| multicast | group id | (first replica in `mc_ports` and `mc_rids`, replicas) |

A key no packet can carry (a field wider than the header's, a prefix with bits past its
length) is left out: the reference's look-up could never return it either. Tables are small
and change rarely; the pipeline compiles them again after every change (pipeline.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inaemu.softswitch.fast.kernel import (
    CHILD_PORT_BITS,
    LPM_FORWARD,
    M_LPM_DEFAULT,
    M_MAX_REPLICAS,
    N_MISC,
    N_TABLES,
    PARAMS_WIDTH,
    T_CHILD,
    T_EGRESS,
    T_JOB,
    T_LOSS,
    T_LPM,
    T_MCAST,
    TableArrays,
    fill_hash,
    pack_child_key,
)
from inaemu.softswitch.state import ActionCall, PipelineState, TableEntry


@dataclass
class CompiledTables:
    arrays: TableArrays  # what the kernel reads
    child_rows: list[tuple[int, TableEntry]]  # ina_child's rows and entries (direct counter)
    loss_ports: list[int]  # ports with an ina_loss entry (their packets draw)
    max_replicas: int  # copies of a frame at most (the largest group's; 0: no group)


class _Builder:
    def __init__(self) -> None:
        self.params: list[tuple[int, ...]] = []
        self.keys: list[list[int]] = [[] for _ in range(N_TABLES)]
        self.rows: list[list[int]] = [[] for _ in range(N_TABLES)]

    def row(self, values: tuple[int, ...]) -> int:
        if len(values) > PARAMS_WIDTH:
            raise ValueError(f"an action with {len(values)} parameters (at most {PARAMS_WIDTH})")
        self.params.append(values)
        return len(self.params) - 1

    def add(self, table: int, key: int, values: tuple[int, ...]) -> int:
        row = self.row(values)
        self.keys[table].append(key)
        self.rows[table].append(row)
        return row


def _fits(values: tuple[int, ...], widths: tuple[int, ...]) -> bool:
    return len(values) == len(widths) and all(
        0 <= v < (1 << w) for v, w in zip(values, widths, strict=True)
    )


def _params(call: ActionCall, n: int, table: str) -> tuple[int, ...]:
    if len(call.params) != n:
        raise ValueError(f"{table}: action {call.name}{call.params} needs {n} parameters")
    return call.params


def _lpm_row(call: ActionCall) -> tuple[int, ...]:
    if call.name == "ipv4_forward":
        dmac, port = _params(call, 2, "ipv4_lpm")
        return (LPM_FORWARD, dmac, port)
    return (0,)


def compile_tables(pipe: PipelineState) -> CompiledTables:
    """The arrays for `pipe`'s current tables and multicast groups (call under its lock)."""
    b = _Builder()
    for key, e in pipe.ina_loss.entries.items():
        if _fits(key, (32,)):
            b.add(T_LOSS, key[0], _params(e.action, 1, pipe.ina_loss.name))
    for key, e in pipe.ina_job.entries.items():
        if _fits(key, (16, 8)):
            b.add(T_JOB, key[0] << 8 | key[1], _params(e.action, 7, pipe.ina_job.name))
    child_rows: list[tuple[int, TableEntry]] = []
    for key, e in pipe.ina_child.entries.items():
        if _fits(key, (16, 8, CHILD_PORT_BITS, 16)):
            packed = pack_child_key(*key)
            child_rows.append((b.add(T_CHILD, packed, _params(e.action, 1, "ina_child")), e))
    for key, e in pipe.ina_egress.entries.items():
        if _fits(key, (32,)):
            b.add(T_EGRESS, key[0], _params(e.action, 4, pipe.ina_egress.name))
    plens: set[int] = set()
    for key, e in pipe.ipv4_lpm.entries.items():
        if len(key) != 2:
            continue
        prefix, plen = key
        mask = ((1 << plen) - 1) << (32 - plen) if 0 < plen <= 32 else 0
        if 0 <= plen <= 32 and 0 <= prefix <= 0xFFFFFFFF and prefix & ~mask == 0:
            b.add(T_LPM, plen << 32 | prefix, _lpm_row(e.action))
            plens.add(plen)
    lpm_default = b.row(_lpm_row(pipe.ipv4_lpm.default))
    mc_ports: list[int] = []
    mc_rids: list[int] = []
    for mgid, replicas in pipe.multicast.groups.items():
        if 0 <= mgid <= 0xFFFF:
            b.add(T_MCAST, mgid, (len(mc_ports), len(replicas)))
            mc_ports += [port for port, _rid in replicas]
            mc_rids += [rid for _port, rid in replicas]
    max_replicas = max((len(r) for r in pipe.multicast.groups.values()), default=0)

    params = np.zeros((max(1, len(b.params)), PARAMS_WIDTH), np.int64)
    for i, values in enumerate(b.params):
        params[i, : len(values)] = values
    sizes = [_slots(len(k)) for k in b.keys]
    slices = np.zeros((N_TABLES, 2), np.int64)
    slices[:, 0] = np.cumsum([0, *sizes[:-1]])
    slices[:, 1] = np.array(sizes) - 1
    hkeys = np.full(sum(sizes), -1, np.int64)
    hvals = np.full(sum(sizes), -1, np.int64)
    for t in range(N_TABLES):
        fill_hash(
            hkeys,
            hvals,
            int(slices[t, 0]),
            int(slices[t, 1]),
            np.array(b.keys[t], np.int64),
            np.array(b.rows[t], np.int64),
        )
    misc = np.zeros(N_MISC, np.int64)
    misc[M_LPM_DEFAULT] = lpm_default
    misc[M_MAX_REPLICAS] = max_replicas
    arrays = TableArrays(
        hkeys=hkeys,
        hvals=hvals,
        slices=slices,
        params=params,
        mc_ports=np.array(mc_ports or [0], np.int64),
        mc_rids=np.array(mc_rids or [0], np.int64),
        plens=np.array(sorted(plens, reverse=True), np.int64),
        misc=misc,
    )
    return CompiledTables(
        arrays=arrays,
        child_rows=child_rows,
        loss_ports=[key[0] for key in pipe.ina_loss.entries if _fits(key, (32,))],
        max_replicas=max_replicas,
    )


def _slots(entries: int) -> int:
    """A power of two at least twice the entries (a free slot always ends a probe)."""
    size = 8
    while size < 2 * entries:
        size *= 2
    return size
