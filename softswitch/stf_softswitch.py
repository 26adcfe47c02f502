"""The softswitch as a conformance target (in-process, synchronous)."""

from __future__ import annotations

from softswitch.p4info import P4Info, load_p4info
from softswitch.pipeline import Pipeline
from softswitch.state import ActionCall, TableEntry
from softswitch.stf import AddEntry, SetDefault


class SoftswitchTarget:
    def __init__(self, pipeline: Pipeline | None = None, p4info: P4Info | None = None) -> None:
        self.pipeline = pipeline or Pipeline()
        self.p4info = p4info or load_p4info()
        self._nodes: list[tuple[int, tuple[int, ...]]] = []

    def _action_call(
        self, table: str, action: str, params: tuple[tuple[str, int], ...]
    ) -> ActionCall:
        info = self.p4info.action(action)
        given = dict(params)
        names = [n for n, _ in info.params]
        if set(given) != set(names):
            raise ValueError(f"{table}: action {info.name} takes {names}, got {sorted(given)}")
        for pname, width in info.params:
            if not 0 <= given[pname] < (1 << width):
                raise ValueError(f"{info.name}: {pname}={given[pname]} does not fit {width} bits")
        return ActionCall(info.alias, tuple(given[n] for n in names))

    def add_entry(self, cmd: AddEntry) -> None:
        tinfo = self.p4info.table(cmd.table)
        by_name = {k.name: k for k in cmd.keys}
        values: list[int] = []
        for kname, width, mtype in tinfo.keys:
            key = by_name.get(kname) or next(
                (k for k in cmd.keys if kname.endswith("." + k.name)), None
            )
            if key is None:
                raise ValueError(f"{tinfo.name}: missing key {kname}")
            if mtype == "LPM":
                values += [key.value, width if key.prefix_len is None else key.prefix_len]
            else:
                values.append(key.value)
        action = self._action_call(tinfo.name, cmd.action, cmd.params)
        self.pipeline.tables[tinfo.name].insert(TableEntry(tuple(values), action))

    def set_default(self, cmd: SetDefault) -> None:
        tinfo = self.p4info.table(cmd.table)
        self.pipeline.tables[tinfo.name].set_default(
            self._action_call(tinfo.name, cmd.action, cmd.params)
        )

    def mc_group_create(self, mgid: int) -> None:
        self.pipeline.multicast.insert(mgid, [])

    def mc_node_create(self, rid: int, ports: tuple[int, ...]) -> int:
        self._nodes.append((rid, ports))
        return len(self._nodes) - 1

    def mc_node_associate(self, mgid: int, handle: int) -> None:
        rid, ports = self._nodes[handle]
        group = self.pipeline.multicast.groups[mgid]
        group.extend((p, rid) for p in ports)

    def send(self, port: int, data: bytes) -> list[tuple[int, bytes]]:
        return self.pipeline.process(port, data)

    def read_counter(self, counter: str, index: int) -> tuple[int, int]:
        names = [n for n in self.pipeline.counters if n == counter or n.endswith("." + counter)]
        if len(names) != 1:
            raise KeyError(f"no single counter named {counter!r}")
        c = self.pipeline.counters[names[0]]
        return c.packets[index], c.bytes[index]
