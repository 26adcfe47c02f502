"""Multi-switch conformance cases (`.mstf`): several switches joined by links, their format,
a runner for in-process targets and the comparison. The format is described in stf.py's
docstring; the bmv2 runner is in bmv2_network.py."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inaemu.conformance.stf import (
    SETUP_COMMANDS,
    CaseResult,
    CheckCounter,
    Expect,
    StfCase,
    StfError,
    Target,
    match_port,
    parse_check_counter,
    parse_expect,
    parse_int,
    parse_packet,
    parse_setup,
    read_case,
    run_setup,
    stf_lines,
)

NETWORK_SUFFIX = ".mstf"
MAX_RELAYS = 10_000  # frames relayed between switches for one packet: more is a loop


@dataclass(frozen=True, order=True)
class At:
    """A port of a named switch."""

    switch: str
    port: int

    def __str__(self) -> str:
        return f"{self.switch}:{self.port}"


@dataclass(frozen=True)
class Send:
    """A host sends `data` into host port `at`."""

    at: At
    data: bytes


@dataclass(frozen=True)
class Lose:
    """The next frame out of linked port `at` is lost on the cable."""

    at: At


@dataclass(frozen=True)
class Check:
    """A counter check on one switch."""

    switch: str
    check: CheckCounter


Step = Send | Lose | Check


@dataclass
class NetworkCase:
    name: str
    setups: dict[str, StfCase] = field(default_factory=dict)  # switch -> its setup commands
    links: dict[At, At] = field(default_factory=dict)  # both directions
    steps: list[Step] = field(default_factory=list)
    expects: dict[At, list[Expect]] = field(default_factory=dict)

    @property
    def checks(self) -> list[Check]:
        return [s for s in self.steps if isinstance(s, Check)]

    @property
    def sends(self) -> list[Send]:
        return [s for s in self.steps if isinstance(s, Send)]


def _at(text: str, case: NetworkCase, where: tuple[str, int]) -> At:
    name, sep, port = text.rpartition(":")
    if not sep or not name:
        raise StfError(*where, f"a port must be <switch>:<port>, got {text!r}")
    if name not in case.setups:
        raise StfError(*where, f"unknown switch {name!r} (declare it with `switch {name}`)")
    return At(name, parse_int(port, where))


def _host_port(text: str, case: NetworkCase, where: tuple[str, int]) -> At:
    at = _at(text, case, where)
    if at in case.links:
        raise StfError(*where, f"{at} is linked to {case.links[at]}: hosts use the other ports")
    return at


def parse_network(text: str, name: str = "<mstf>") -> NetworkCase:
    case = NetworkCase(name)
    section: str | None = None
    host_ports: set[At] = set()
    for where, cmd, args in stf_lines(text, name):
        if cmd == "switch":
            if len(args) != 1:
                raise StfError(*where, "switch needs one name")
            if case.steps:
                raise StfError(*where, "switch sections come before the first packet")
            section = args[0]
            case.setups.setdefault(section, StfCase(f"{name}:{section}"))
        elif cmd in SETUP_COMMANDS:
            if section is None:
                raise StfError(*where, f"{cmd} outside a switch section (start one: switch <name>)")
            if case.steps:
                raise StfError(*where, f"{cmd} after the first packet: set switches up before")
            case.setups[section].commands.append(parse_setup(cmd, args, where))
        elif cmd == "link":
            if len(args) != 2:
                raise StfError(*where, "link <switch>:<port> <switch>:<port>")
            a, b = (_at(x, case, where) for x in args)
            for end in (a, b):
                if end in case.links or end in host_ports:
                    raise StfError(*where, f"{end} is already in use")
            if a == b:
                raise StfError(*where, f"a link needs two ports, got {a} twice")
            case.links[a], case.links[b] = b, a
        elif cmd in ("packet", "expect"):
            if not args:
                raise StfError(*where, f"{cmd} needs <switch>:<port> and hex bytes")
            at = _host_port(args[0], case, where)
            host_ports.add(at)
            if cmd == "packet":
                case.steps.append(Send(at, parse_packet(at.port, args[1:], where).data))
            else:
                case.expects.setdefault(at, []).append(parse_expect(at.port, args[1:], where))
        elif cmd == "lose":
            if len(args) != 1:
                raise StfError(*where, "lose <switch>:<port> (a linked port)")
            at = _at(args[0], case, where)
            if at not in case.links:
                raise StfError(*where, f"lose {at}: not a linked port (link it first)")
            case.steps.append(Lose(at))
        elif cmd == "check_counter":
            if not args or args[0] not in case.setups:
                raise StfError(*where, "check_counter <switch> <counter>(<index>) ...")
            case.steps.append(Check(args[0], parse_check_counter(args[1:], where)))
        else:
            raise StfError(*where, f"unknown multi-switch STF command {cmd!r}")
    if not case.setups:
        raise StfError(name, 1, "no switch section: a multi-switch case starts with switch <name>")
    return case


def load_network(path: Path) -> NetworkCase:
    return parse_network(read_case(path), str(path))


class Cables:
    """The links of a case while it runs: where a frame out of a port goes, and the losses
    the case asked for and has not yet used."""

    def __init__(self, case: NetworkCase) -> None:
        self.links = case.links
        self.pending: dict[At, int] = {}  # port -> frames still to lose there

    def lose(self, at: At) -> None:
        self.pending[at] = self.pending.get(at, 0) + 1

    def carry(self, out: At) -> At | None:
        """Where a frame sent out of linked port `out` arrives: the peer's port, or None when
        the case lost it."""
        if self.pending.get(out, 0):
            self.pending[out] -= 1
            return None
        return self.links[out]

    def unused(self) -> list[str]:
        return [
            f"lose {at}: no frame left that port to lose ({n} unused)"
            for at, n in sorted(self.pending.items())
            if n
        ]


def run_network(case: NetworkCase, targets: Mapping[str, Target]) -> CaseResult:
    """Run a case over synchronous targets (one per switch): each Send is carried hop by hop,
    breadth first, until no frame is left in flight; counters are read after the last one."""
    for sw, setup in case.setups.items():
        run_setup(setup, targets[sw])
    cables = Cables(case)
    emitted: dict[At, list[bytes]] = {}
    counters: dict[tuple[str, str, int], tuple[int, int]] = {}
    failures: list[str] = []
    for step in case.steps:
        if isinstance(step, Lose):
            cables.lose(step.at)
        elif isinstance(step, Send):
            flight = deque([(step.at, step.data)])
            relays = 0
            while flight:
                at, data = flight.popleft()
                for port, frame in targets[at.switch].send(at.port, data):
                    out = At(at.switch, port)
                    if out not in case.links:
                        emitted.setdefault(out, []).append(frame)
                        continue
                    peer = cables.carry(out)
                    if peer is not None:
                        relays += 1
                        flight.append((peer, frame))
                if relays > MAX_RELAYS:
                    failures.append(
                        f"packet into {step.at}: frames still circulate after "
                        f"{MAX_RELAYS} relays (a forwarding loop)"
                    )
                    break
    for check in case.checks:
        c = check.check
        counters[(check.switch, c.counter, c.index)] = targets[check.switch].read_counter(
            c.counter, c.index
        )
    return compare_network(case, emitted, counters, failures + cables.unused())


def compare_network(
    case: NetworkCase,
    emitted: Mapping[At, Sequence[bytes]],
    counters: Mapping[tuple[str, str, int], tuple[int, int]],
    failures: Sequence[str] = (),
) -> CaseResult:
    """Frames out of host ports against the expectations, port by port and in order, and
    counter values (switch, counter, index) -> (packets, bytes) against the checks."""
    out = list(failures)
    for step in case.checks:
        c = step.check
        packets, nbytes = counters.get((step.switch, c.counter, c.index), (-1, -1))
        got = packets if c.unit == "packets" else nbytes
        if got != c.value:
            out.append(
                f"{step.switch}: counter {c.counter}({c.index}) {c.unit}: "
                f"expected {c.value}, got {got}"
            )
    for at in sorted(set(case.expects) | set(emitted)):
        out += match_port(str(at), case.expects.get(at, []), emitted.get(at, []))
    return CaseResult(out, len(case.sends), sum(len(v) for v in emitted.values()))
