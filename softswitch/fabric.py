"""Several pipelines wired together in-process: multi-switch topologies without sockets.

    fab = Fabric()
    leaf, root = fab.add_switch("leaf"), fab.add_switch("root")
    fab.link("leaf", 3, "root", 1)
    fab.attach_host("h1", "leaf", 1)
    delivered = fab.send("h1", frame)      # runs until no frame is in flight

Frames crossing a link may be dropped by a `drop` predicate (for loss and failure tests).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from inaemu.softswitch.pipeline import Pipeline

DropFn = Callable[[str, int, bytes], bool]  # (switch, egress port, frame) -> drop?


@dataclass
class Fabric:
    switches: dict[str, Pipeline] = field(default_factory=dict)
    links: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)
    hosts: dict[str, tuple[str, int]] = field(default_factory=dict)
    drop: DropFn | None = None

    def add_switch(self, name: str, *, seed: int = 0) -> Pipeline:
        if name in self.switches:
            raise ValueError(f"switch {name!r} exists")
        self.switches[name] = Pipeline(seed=seed)
        return self.switches[name]

    def link(self, a: str, port_a: int, b: str, port_b: int) -> None:
        for end in ((a, port_a), (b, port_b)):
            if end[0] not in self.switches:
                raise ValueError(f"no switch {end[0]!r}")
            if end in self.links or end in self.hosts.values():
                raise ValueError(f"port {end} is already connected")
        self.links[(a, port_a)] = (b, port_b)
        self.links[(b, port_b)] = (a, port_a)

    def attach_host(self, host: str, switch: str, port: int) -> None:
        if (switch, port) in self.links or (switch, port) in self.hosts.values():
            raise ValueError(f"port {(switch, port)} is already connected")
        self.hosts[host] = (switch, port)

    def send(self, host: str, frame: bytes) -> list[tuple[str, bytes]]:
        """Inject a frame from `host`; return [(host, frame)] delivered to hosts, in order."""
        by_port = {v: k for k, v in self.hosts.items()}
        queue: deque[tuple[str, int, bytes]] = deque([(*self.hosts[host], frame)])
        delivered: list[tuple[str, bytes]] = []
        while queue:
            switch, port, data = queue.popleft()
            for out_port, out in self.switches[switch].process(port, data):
                if self.drop is not None and self.drop(switch, out_port, out):
                    continue
                peer = self.links.get((switch, out_port))
                if peer is not None:
                    queue.append((*peer, out))
                elif (switch, out_port) in by_port:
                    delivered.append((by_port[(switch, out_port)], out))
        return delivered
