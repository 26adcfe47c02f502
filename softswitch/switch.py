"""A running softswitch: the pipeline fed by ports, in one data-plane thread.

    sw = SoftSwitch(name="s1")
    sw.add_loopback_wires(range(1, 5))  # port p: end s1.p <-> host end s1.p.host
    sw.add_link(5, "s2.3")              # port 5 <-> switch s2's port 3 (which links to s1.5)
    sw.start()                          # hosts: LoopbackWireTransport(p, sw.wire_dir)
    ...
    sw.stop()

Loopback wires live in `sw.wire_dir`: a private directory made on first use (removed by
`stop()`), or the one given as `SoftSwitch(wire_dir=...)`; switches linked to each other
share one (see `hostlib.loopback`). `rx_foreign` counts frames dropped because they did
not come from a port's peer, `tx_dropped` frames a port could not deliver.

One thread reads every port, runs each frame through the pipeline and writes what it emits,
so packets are processed one at a time in arrival order, as bmv2's single ingress thread does.
The control plane (P4Runtime server, tests) changes tables concurrently under `pipeline.lock`.
"""

from __future__ import annotations

import os
import selectors
import socket
import threading
import time
from collections.abc import Iterable

from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.ports import AfPacketPort, LoopbackWire, Port, WireDir, host_end, port_end


class SoftSwitch:
    def __init__(
        self,
        pipeline: Pipeline | None = None,
        *,
        name: str = "s1",
        wire_dir: WireDir | str | os.PathLike[str] | None = None,
    ) -> None:
        self.name = name
        self.pipeline = pipeline or Pipeline()
        self.ports: dict[int, Port] = {}
        self.frames_in = 0
        self.frames_out = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self.error: BaseException | None = None
        self._wires: WireDir | None = None
        self._wire_dir_arg = wire_dir
        self._owns_wires = False
        self._closed_rx_foreign = 0
        self._closed_tx_dropped = 0

    @property
    def wires(self) -> WireDir:
        """The directory of this switch's wire ends (made on first use if none was given)."""
        if self._wires is None:
            arg = self._wire_dir_arg
            self._wires = arg if isinstance(arg, WireDir) else WireDir(arg)
            self._owns_wires = arg is None
        return self._wires

    @property
    def wire_dir(self) -> str:
        """The path hosts and linked switches name (`LoopbackWireTransport(p, wire_dir)`)."""
        return self.wires.path

    @property
    def rx_foreign(self) -> int:
        """Datagrams dropped on loopback wires because they were not sent by the port's peer."""
        live = sum(getattr(p, "rx_foreign", 0) for p in self.ports.values())
        return self._closed_rx_foreign + live

    @property
    def tx_dropped(self) -> int:
        """Frames a loopback wire could not deliver (peer absent, or no room in time)."""
        live = sum(getattr(p, "tx_dropped", 0) for p in self.ports.values())
        return self._closed_tx_dropped + live

    def add_port(self, port_no: int, port: Port) -> None:
        if port_no in self.ports:
            raise ValueError(f"{self.name}: port {port_no} already attached")
        if self._thread is not None:
            raise RuntimeError("add ports before start()")
        self.ports[port_no] = port

    def add_loopback_wires(self, port_nos: Iterable[int]) -> None:
        """Attach each port to a wire to a host (ends `NAME.p` and `NAME.p.host`); all or none."""
        self._add_wires([(p, host_end(self.name, p)) for p in port_nos])

    def add_link(self, port_no: int, peer_end: str) -> None:
        """Attach `port_no` to a wire whose other end is `peer_end` in the same wire dir, e.g.
        another switch's port `s2.3` (that switch calls `add_link(3, "s1.<port_no>")`)."""
        self._add_wires([(port_no, peer_end)])

    def _add_wires(self, wires: list[tuple[int, str]]) -> None:
        added: list[int] = []
        try:
            for p, peer in wires:
                if p in self.ports:
                    raise ValueError(f"{self.name}: port {p} already attached")
                wire = LoopbackWire(self.wires, port_end(self.name, p), peer, f"port{p}")
                self.add_port(p, wire)
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
        self._closed_rx_foreign = self.rx_foreign
        self._closed_tx_dropped = self.tx_dropped
        for port in self.ports.values():
            port.close()
        self.ports.clear()
        self._wake_r.close()
        self._wake_w.close()
        if self._wires is not None and self._owns_wires:
            self._wires.cleanup()

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
                now = time.monotonic()
                wait = 0.5
                for port in ports.values():
                    due = port.tick(now)
                    if due is not None:
                        wait = min(wait, due)
                for key, _ in sel.select(timeout=wait):
                    port_no = key.data
                    if port_no is None:
                        continue
                    port = ports[port_no]
                    assert isinstance(port, LoopbackWire | AfPacketPort)
                    for frame in port.recv_batch():
                        self.frames_in += 1
                        for out_port, out in process(port_no, frame):
                            dest = ports.get(out_port)
                            if dest is not None:  # an unconnected port is a down link
                                assert isinstance(dest, LoopbackWire | AfPacketPort)
                                dest.send(out)
                                self.frames_out += 1
        except BaseException as exc:  # surfaced to whoever owns the switch
            self.error = exc
            raise
        finally:
            sel.close()
