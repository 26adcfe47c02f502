"""The softswitch as a conformance target (in-process, synchronous): a `Pipeline`, the reference
or the fast one (softswitch/fast/), set up through the table and group methods that every
data plane watches for changes."""

from __future__ import annotations

from inaemu.conformance.stf import AddEntry, SetDefault, action_args, match_values
from inaemu.p4.info import P4Info, load_p4info
from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.state import ActionCall, TableEntry


class SoftswitchTarget:
    def __init__(self, pipeline: Pipeline | None = None, p4info: P4Info | None = None) -> None:
        self.pipeline = pipeline or Pipeline()
        self.p4info = p4info or load_p4info()
        self._nodes: list[tuple[int, tuple[int, ...]]] = []

    def _action_call(self, action: str, params: tuple[tuple[str, int], ...]) -> ActionCall:
        info = self.p4info.action(action)
        return ActionCall(info.alias, action_args(info.name, params, info.params))

    def add_entry(self, cmd: AddEntry) -> None:
        tinfo = self.p4info.table(cmd.table)
        values: list[int] = []
        for (value, plen), f in zip(match_values(cmd, tinfo.fields), tinfo.fields, strict=True):
            values += [value, plen] if f.kind == "LPM" else [value]
        action = self._action_call(cmd.action, cmd.params)
        self.pipeline.tables[tinfo.name].insert(TableEntry(tuple(values), action))

    def set_default(self, cmd: SetDefault) -> None:
        tinfo = self.p4info.table(cmd.table)
        self.pipeline.tables[tinfo.name].set_default(self._action_call(cmd.action, cmd.params))

    def mc_group_create(self, mgid: int) -> None:
        self.pipeline.multicast.insert(mgid, [])

    def mc_node_create(self, rid: int, ports: tuple[int, ...]) -> int:
        self._nodes.append((rid, ports))
        return len(self._nodes) - 1

    def mc_node_associate(self, mgid: int, handle: int) -> None:
        rid, ports = self._nodes[handle]
        multicast = self.pipeline.multicast
        multicast.modify(mgid, [*multicast.groups[mgid], *((p, rid) for p in ports)])

    def send(self, port: int, data: bytes) -> list[tuple[int, bytes]]:
        return self.pipeline.process(port, data)

    def read_counter(self, counter: str, index: int) -> tuple[int, int]:
        names = [n for n in self.pipeline.counters if n == counter or n.endswith("." + counter)]
        if len(names) != 1:
            raise KeyError(f"no single counter named {counter!r}")
        c = self.pipeline.counters[names[0]]
        return c.packets[index], c.bytes[index]
