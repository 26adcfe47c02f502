"""A running softswitch: the pipeline fed by ports, in one data-plane thread.

    sw = SoftSwitch()
    sw.add_loopback_wires(range(1, 5))      # ports 1..4 on UDP base + 2p (peer base + 2p + 1)
    sw.start()
    ...
    sw.stop()

One thread reads every port, runs each frame through the pipeline and writes what it emits,
so packets are processed one at a time in arrival order, as bmv2's single ingress thread does.
The control plane (P4Runtime server, tests) changes tables concurrently under `pipeline.lock`.
"""

from __future__ import annotations

import selectors
import socket
import threading
from collections.abc import Iterable

from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.ports import DEFAULT_WIRE_BASE, LOOPBACK, LoopbackWire, Port, wire_udp_ports


class SoftSwitch:
    def __init__(self, pipeline: Pipeline | None = None, *, name: str = "s1") -> None:
        self.name = name
        self.pipeline = pipeline or Pipeline()
        self.ports: dict[int, Port] = {}
        self.frames_in = 0
        self.frames_out = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self.error: BaseException | None = None

    def add_port(self, port_no: int, port: Port) -> None:
        if port_no in self.ports:
            raise ValueError(f"{self.name}: port {port_no} already attached")
        if self._thread is not None:
            raise RuntimeError("add ports before start()")
        self.ports[port_no] = port

    def add_loopback_wires(self, port_nos: Iterable[int], base: int = DEFAULT_WIRE_BASE) -> None:
        """Attach loopback wires by the convention of `wire_udp_ports`; all or none."""
        added: list[int] = []
        try:
            for p in port_nos:
                mine, peer = wire_udp_ports(base, p)
                self.add_port(p, LoopbackWire((LOOPBACK, mine), (LOOPBACK, peer), f"port{p}"))
                added.append(p)
        except BaseException:
            for p in added:
                self.ports.pop(p).close()
            raise

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        self._thread = threading.Thread(
            target=self._run, name=f"softswitch-{self.name}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake_w.send(b"x")
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError(f"{self.name}: data-plane thread did not stop in {timeout}s")
            self._thread = None
        for port in self.ports.values():
            port.close()
        self.ports.clear()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> SoftSwitch:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        for port_no, port in self.ports.items():
            sel.register(port.fileno(), selectors.EVENT_READ, port_no)
        process = self.pipeline.process
        ports = self.ports
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.5):
                    port_no = key.data
                    if port_no is None:
                        continue
                    for frame in ports[port_no].recv_batch():
                        self.frames_in += 1
                        for out_port, out in process(port_no, frame):
                            dest = ports.get(out_port)
                            if dest is not None:  # an unconnected port is a down link
                                dest.send(out)
                                self.frames_out += 1
        except BaseException as exc:  # surfaced to whoever owns the switch
            self.error = exc
            raise
        finally:
            sel.close()
