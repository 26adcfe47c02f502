"""bmv2 as a multi-switch conformance target: one `simple_switch` per switch of a `.mstf`
case, the runner as the cables between them.

Each switch runs with `--packet-in` (a nanomsg socket, nanomsg.py) instead of interfaces, so
the runner sees every frame a switch sends out the moment it leaves: a frame out of a linked
port is fed into the peer switch's port (unless the case loses it), a frame out of a host
port is collected. Each of the case's packets runs until no switch has sent anything for
`quiet_s` seconds (bmv2 takes well under a millisecond a frame; the quiet time is what
tells that a frame produced nothing, since a dropped or consumed packet leaves no trace on
the socket). Tables and multicast groups are set with `simple_switch_CLI` before the first
packet, counters read with it after the last, as for a single switch (bmv2_target.py).
Every wait is bounded: start-up, each packet (`STEP_TIMEOUT_S`), the CLI, the stop.
"""

from __future__ import annotations

import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from inaemu.conformance.bmv2_target import (
    Bmv2Runner,
    Switch,
    start_switch,
    stop_switches,
)
from inaemu.conformance.nanomsg import PacketSocket, wait_readable
from inaemu.conformance.network import (
    MAX_RELAYS,
    At,
    Cables,
    Lose,
    NetworkCase,
    Send,
    compare_network,
)
from inaemu.conformance.stf import CaseResult
from inaemu.p4.info import P4Info

QUIET_S = 0.25  # a packet's effects are over when no switch sent anything for this long
STEP_TIMEOUT_S = 10.0  # a packet whose frames keep coming for longer fails the case
STOP_WAIT_S = 10.0


class Bmv2NetworkRunner:
    def __init__(
        self, json_path: Path, p4info: P4Info | None = None, quiet_s: float = QUIET_S
    ) -> None:
        self.single = Bmv2Runner(json_path, p4info)
        self.json_path = json_path
        self.quiet_s = quiet_s

    def run(self, case: NetworkCase) -> CaseResult:
        with tempfile.TemporaryDirectory(prefix="inaemu-bmv2net-") as tmp:
            d = Path(tmp)
            switches: dict[str, Switch] = {}
            try:
                for name in case.setups:
                    switches[name] = start_switch(self.json_path, d, name)
                with ThreadPoolExecutor(len(switches)) as pool:  # the CLI calls at once
                    list(pool.map(lambda sw: self._set_up(case, sw), switches.values()))
                return self._run_steps(case, switches)
            finally:
                stop_switches(switches.values(), STOP_WAIT_S)

    def _set_up(self, case: NetworkCase, sw: Switch) -> None:
        self.single.set_up(case.setups[sw.name], sw.thrift)
        sw.socket = PacketSocket(sw.packet_in)

    def _read_counters(
        self, case: NetworkCase, sw: Switch
    ) -> dict[tuple[str, str, int], tuple[int, int]]:
        checks = [s.check for s in case.checks if s.switch == sw.name]
        return {
            (sw.name, counter, index): value
            for (counter, index), value in self.single.read_counters(checks, sw.thrift).items()
        }

    def _run_steps(self, case: NetworkCase, switches: dict[str, Switch]) -> CaseResult:
        cables = Cables(case)
        sockets = {name: sw.socket for name, sw in switches.items() if sw.socket is not None}
        owner = {s.fd: name for name, s in sockets.items()}
        emitted: dict[At, list[bytes]] = {}
        failures: list[str] = []
        for step in case.steps:
            if isinstance(step, Lose):
                cables.lose(step.at)
            elif isinstance(step, Send):
                sockets[step.at.switch].send(step.at.port, step.data)
                started = time.monotonic()
                quiet_until = started + self.quiet_s
                relays = 0
                while (now := time.monotonic()) < quiet_until:
                    if now - started > STEP_TIMEOUT_S or relays > MAX_RELAYS:
                        failures.append(
                            f"packet into {step.at}: switches still sending after "
                            f"{now - started:.1f} s and {relays} relays (a forwarding loop?)"
                        )
                        break
                    for sock in wait_readable(list(sockets.values()), quiet_until - now):
                        while (got := sock.receive()) is not None:
                            out = At(owner[sock.fd], got[0])
                            quiet_until = time.monotonic() + self.quiet_s
                            if out not in case.links:
                                emitted.setdefault(out, []).append(got[1])
                            elif (peer := cables.carry(out)) is not None:
                                sockets[peer.switch].send(peer.port, got[1])
                                relays += 1
                for sw in switches.values():
                    sw.check_running()
        counters: dict[tuple[str, str, int], tuple[int, int]] = {}
        with ThreadPoolExecutor(len(switches)) as pool:  # the CLI calls at once
            for values in pool.map(lambda sw: self._read_counters(case, sw), switches.values()):
                counters.update(values)
        return compare_network(case, emitted, counters, failures + cables.unused())
