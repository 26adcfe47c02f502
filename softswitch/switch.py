"""A running softswitch: the pipeline fed by ports, in one data-plane thread.

    sw = SoftSwitch(name="s1")
    sw.add_loopback_wires(range(1, 5))  # port p: end s1.p <-> host end s1.p.host
    sw.add_link(5, "s2.3")              # port 5 <-> switch s2's port 3 (which links to s1.5)
    sw.start()                          # hosts: LoopbackWireTransport(p, sw.wire_dir)
    ...
    sw.stop()

Loopback wires live in `sw.wire_dir`: a private directory made on first use (removed by
`stop()`), or the one given as `SoftSwitch(wire_dir=...)`; switches linked to each other
share one (see `common.loopback`). `rx_foreign` counts frames dropped because they did
not come from a port's peer, `tx_dropped` frames a port could not deliver.

One thread runs the data plane. It waits until ports have something to do, reads every
ready port into one `FrameBatch` (each port as many frames as one system call takes; the
ingress port is the batch's port), has the data plane process the whole batch in arrival
order (`process_batch`, exactly as that many calls of `process` would; a lone frame goes
through `process`, which spares a batch's set-up), and sends what it emits grouped by egress
port, each port's frames in order in as few calls as the port can.
The data plane is `pipeline` (by default `Pipeline(compiled=True)`, as `--dataplane fast`;
pass `Pipeline()` for the Python reference) unless `SoftSwitch(dataplane=...)` names another
with the same tables (a stand-in for benchmarks); the control plane (P4Runtime server, tests)
changes tables concurrently under `pipeline.lock`.

`counts` says how many frames the ports moved and in how many system calls, `wakeups` how
often the thread woke up to do it.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from collections.abc import Iterable

import numpy as np

from inaemu.common.batch_io import IoCounts
from inaemu.common.loopback import READ_BYTES
from inaemu.softswitch.batch import BATCH_FRAMES, DataPlane, FrameBatch
from inaemu.softswitch.fast.dataplanes import make_pipeline
from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.ports import LoopbackWire, Port, WireDir, host_end, port_end

IDLE_WAIT = 0.5  # seconds the thread sleeps at most when no port has anything to do


class SoftSwitch:
    def __init__(
        self,
        pipeline: Pipeline | None = None,
        *,
        name: str = "s1",
        wire_dir: WireDir | str | os.PathLike[str] | None = None,
        dataplane: DataPlane | None = None,
    ) -> None:
        self.name = name
        self.pipeline = pipeline or make_pipeline()  # the default data plane (fast)
        self.dataplane: DataPlane = dataplane if dataplane is not None else self.pipeline
        self.ports: dict[int, Port] = {}
        self.frames_in = 0
        self.frames_out = 0
        self.wakeups = 0
        self._closed_counts = IoCounts()
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

    @property
    def counts(self) -> IoCounts:
        """Frames the ports moved and the system calls that moved them."""
        total = IoCounts()
        total.add(self._closed_counts)
        for port in self.ports.values():
            total.add(port.counts)
        return total

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
        self._closed_counts = self.counts
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
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        ports = self.ports
        by_fd = {port.fileno(): port_no for port_no, port in ports.items()}
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        batch = FrameBatch(4 * BATCH_FRAMES, 4 * READ_BYTES)
        process, process_batch = self.dataplane.process, self.dataplane.process_batch
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                wait = IDLE_WAIT
                for port in ports.values():
                    due = port.tick(now)
                    if due is not None:
                        wait = min(wait, due)
                events = poller.poll(wait * 1000)
                if not events:
                    continue
                self.wakeups += 1
                batch.clear()
                for fd, _ in events:
                    port_no = by_fd.get(fd)
                    if port_no is not None:
                        ports[port_no].recv_into(batch, port_no)
                if batch.n == 1:  # `process` spares a batch's set-up (the same result)
                    self.frames_in += 1
                    port_no = int(batch.port[0])
                    self._send(FrameBatch.of(process(port_no, batch.frame(0))))
                elif batch.n:
                    self.frames_in += batch.n
                    self._send(process_batch(batch))
        except BaseException as exc:  # surfaced to whoever owns the switch
            self.error = exc
            raise

    def _send(self, out: FrameBatch) -> None:
        """The emitted frames to their egress ports, each port's in order in one go; frames
        to a port that is not attached are a down link's."""
        n = out.n
        if not n:
            return
        egress = out.port[:n]
        first = int(egress[0])
        if bool((egress == first).all()):
            groups = [(first, np.arange(n, dtype=np.int64))]
        else:
            order = np.argsort(egress, kind="stable")
            cuts = np.flatnonzero(np.diff(egress[order])) + 1
            groups = [(int(egress[idx[0]]), idx) for idx in np.split(order, cuts)]
        ports = self.ports
        for port_no, index in groups:
            dest = ports.get(port_no)
            if dest is not None:
                dest.send_batch(out, index)
                self.frames_out += len(index)
