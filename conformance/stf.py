"""Conformance cases in p4c's STF format, and a runner that checks any target against them.

The subset understood here is the one p4c's bmv2 STF runner (backends/bmv2/bmv2stf.py) accepts,
so the same files check bmv2:

    # comment
    add <table> <key>:<value> ... <action>(<param>:<value>,...)
    setdefault <table> <action>(<param>:<value>,...)
    mc_mgrp_create <mgid>
    mc_node_create <rid> <port> [<port> ...]          (node handles count from 0)
    mc_node_associate <mgid> <node handle>
    packet <port> <hex bytes, spaces allowed>
    expect <port> <hex bytes, '*' nibbles are wildcards> [$]
    check_counter <counter>(<index>) packets|bytes == <n>

Every case file ends with the line `# end` (`END_LINE`, a comment to p4c's runner): cases are
checked by prefix (`expect` without '$', a port's expectations in order), so a file cut short
at a line boundary would pass as a shorter case; one without it is refused, as is a file that
is not UTF-8 text.

Values are decimal or 0x-hex; an LPM key is full-width hex with '*' nibbles past the prefix
(0x0A0000** is 10.0.0.0/24), as bmv2stf.py wants. `expect` without '$' matches a prefix of the
packet. Packets emitted on a port are matched against that port's expectations in order, and
a packet on a port with no expectation left fails the case. p4c's bmv2 runner ignores
`check_counter`; our targets check it.

Multi-switch cases (`.mstf` files, so that p4c's runner never sees them) describe several
switches joined by links, in the same words:

    switch <name>                                  (starts that switch's section)
    add ... | setdefault ... | mc_...              (table and multicast commands, as above,
                                                    for the switch of the section)
    link <switch>:<port> <switch>:<port>           (a cable between two switch ports)
    packet <switch>:<port> <hex bytes>             (a host sends into a host port)
    expect <switch>:<port> <hex bytes> [$]         (a host receives from a host port)
    lose <switch>:<port>                           (the next frame the switch sends out of
                                                    this linked port is lost on the cable)
    check_counter <switch> <counter>(<index>) packets|bytes == <n>

Every switch is set up before the first packet (table and multicast commands come before it).
A port is either linked (switch to switch) or a host port; `packet` and `expect` name host
ports, `lose` a linked one. Counters are read after the last packet, on both targets, wherever
the check_counter lines are. The runner is the cables: each `packet` runs until the network
is quiet (every frame a switch sends out of a linked port is delivered into the peer's port,
the frames out of host ports are collected), then the next command runs. So a case's packets
are hosts' sends one at a time, as in a single-switch case; `lose` is a frame lost on a cable
between switches (the sender counts it in port_tx, the peer never sees it), and a `lose` that
no frame used fails the case. Frames out of host ports are matched against that port's
expectations in order, as above.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from inaemu.p4.info import FieldInfo, ParamInfo


class StfError(ValueError):
    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")


@dataclass(frozen=True)
class Key:
    name: str
    value: int
    prefix_len: int | None = None  # LPM only


@dataclass(frozen=True)
class AddEntry:
    table: str
    keys: tuple[Key, ...]
    action: str
    params: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class SetDefault:
    table: str
    action: str
    params: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class McGroupCreate:
    mgid: int


@dataclass(frozen=True)
class McNodeCreate:
    rid: int
    ports: tuple[int, ...]


@dataclass(frozen=True)
class McNodeAssociate:
    mgid: int
    handle: int


@dataclass(frozen=True)
class Packet:
    port: int
    data: bytes


@dataclass(frozen=True)
class Expect:
    port: int
    pattern: str  # hex nibbles, '*' wildcards
    exact_length: bool

    def matches(self, data: bytes) -> bool:
        got = data.hex()
        if self.exact_length and len(got) != len(self.pattern):
            return False
        if len(got) < len(self.pattern):
            return False
        return all(p == "*" or p == g for p, g in zip(self.pattern, got, strict=False))


@dataclass(frozen=True)
class CheckCounter:
    counter: str
    index: int
    unit: str  # "packets" or "bytes"
    value: int


Command = (
    AddEntry
    | SetDefault
    | McGroupCreate
    | McNodeCreate
    | McNodeAssociate
    | Packet
    | Expect
    | CheckCounter
)


@dataclass
class StfCase:
    name: str
    commands: list[Command] = field(default_factory=list)


def parse_int(text: str, where: tuple[str, int]) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise StfError(*where, f"not a number: {text!r}") from None


def _key(text: str, where: tuple[str, int]) -> Key:
    name, sep, value = text.partition(":")
    if not sep or not name or not value:
        raise StfError(*where, f"key must be name:value, got {text!r}")
    if "*" in value:
        if not value.lower().startswith("0x"):
            raise StfError(*where, f"a wildcard key must be hex: {text!r}")
        digits = value[2:]
        stripped = digits.rstrip("*")
        if "*" in stripped:
            raise StfError(
                *where, f"only trailing '*' nibbles (an LPM prefix) are supported: {text!r}"
            )
        plen = 4 * len(stripped)
        full = int((stripped or "0") + "0" * (len(digits) - len(stripped)), 16)
        return Key(name, full, plen)
    return Key(name, parse_int(value, where))


_ACTION = re.compile(r"^([\w.]+)\((.*)\)$")


def _action(text: str, where: tuple[str, int]) -> tuple[str, tuple[tuple[str, int], ...]]:
    m = _ACTION.match(text)
    if m is None:
        raise StfError(*where, f"action must be name(param:value,...), got {text!r}")
    params = []
    for part in filter(None, (p.strip() for p in m.group(2).split(","))):
        pname, sep, pval = part.partition(":")
        if not sep:
            raise StfError(*where, f"action parameter must be name:value, got {part!r}")
        params.append((pname.strip(), parse_int(pval.strip(), where)))
    return m.group(1), tuple(params)


def parse_packet(port: int, words: list[str], where: tuple[str, int]) -> Packet:
    try:
        return Packet(port, bytes.fromhex("".join(words)))
    except ValueError:
        raise StfError(*where, "packet data must be hex") from None


def parse_expect(port: int, words: list[str], where: tuple[str, int]) -> Expect:
    exact = bool(words) and words[-1] == "$"
    body = "".join(words[:-1] if exact else words).lower()
    if exact and body.endswith("$"):
        body = body[:-1]
    if not re.fullmatch(r"[0-9a-f*]*", body):
        raise StfError(*where, "expect data must be hex nibbles or '*'")
    return Expect(port, body, exact)


def parse_check_counter(words: list[str], where: tuple[str, int]) -> CheckCounter:
    m = re.fullmatch(r"([\w.]+)\((\w+)\)\s+(packets|bytes)\s*==\s*(\w+)", " ".join(words))
    if m is None:
        raise StfError(*where, "check_counter <counter>(<index>) packets|bytes == <n>")
    return CheckCounter(
        m.group(1), parse_int(m.group(2), where), m.group(3), parse_int(m.group(4), where)
    )


NETWORK_COMMANDS = ("switch", "link", "lose")  # multi-switch cases only (network.py)
SETUP_COMMANDS = ("add", "setdefault", "mc_mgrp_create", "mc_node_create", "mc_node_associate")


def parse_setup(cmd: str, args: list[str], where: tuple[str, int]) -> Command:
    """A table or multicast command (one of SETUP_COMMANDS)."""
    if cmd == "add":
        # the action is the last word that contains '(' ... ')' (no spaces inside)
        joined = " ".join(args)
        head, paren, tail = joined.partition("(")
        if not paren:
            raise StfError(*where, "add needs an action call")
        head_words = head.split()
        if len(head_words) < 2:
            raise StfError(*where, "add needs a table, keys and an action")
        action_text = head_words[-1] + "(" + tail.replace(" ", "")
        action, params = _action(action_text, where)
        keys = tuple(_key(k, where) for k in head_words[1:-1])
        return AddEntry(head_words[0], keys, action, params)
    if cmd == "setdefault":
        if len(args) < 2:
            raise StfError(*where, "setdefault needs a table and an action")
        action, params = _action("".join(args[1:]), where)
        return SetDefault(args[0], action, params)
    if cmd == "mc_mgrp_create":
        if len(args) != 1:
            raise StfError(*where, "mc_mgrp_create needs a group id")
        return McGroupCreate(parse_int(args[0], where))
    if cmd == "mc_node_create":
        if len(args) < 2:
            raise StfError(*where, "mc_node_create needs a rid and ports")
        return McNodeCreate(parse_int(args[0], where), tuple(parse_int(a, where) for a in args[1:]))
    if len(args) != 2:
        raise StfError(*where, "mc_node_associate needs a group id and a node handle")
    return McNodeAssociate(parse_int(args[0], where), parse_int(args[1], where))


def stf_lines(text: str, name: str) -> list[tuple[tuple[str, int], str, list[str]]]:
    """(where, command, arguments) of every line that is not blank or a comment."""
    out = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if words:
            out.append(((name, lineno), words[0], words[1:]))
    return out


def _needs_args(cmd: str, args: list[str], where: tuple[str, int]) -> None:
    if not args:
        raise StfError(*where, f"{cmd} needs arguments")


def parse_stf(text: str, name: str = "<stf>") -> StfCase:
    case = StfCase(name)
    for where, cmd, args in stf_lines(text, name):
        if cmd in SETUP_COMMANDS:
            case.commands.append(parse_setup(cmd, args, where))
        elif cmd == "packet":
            _needs_args(cmd, args, where)
            case.commands.append(parse_packet(parse_int(args[0], where), args[1:], where))
        elif cmd == "expect":
            _needs_args(cmd, args, where)
            case.commands.append(parse_expect(parse_int(args[0], where), args[1:], where))
        elif cmd == "check_counter":
            case.commands.append(parse_check_counter(args, where))
        elif cmd in NETWORK_COMMANDS:
            raise StfError(
                *where, f"{cmd!r} is a multi-switch command: the case belongs in a .mstf file"
            )
        else:
            raise StfError(*where, f"unknown STF command {cmd!r}")
    return case


def match_values(cmd: AddEntry, fields: Sequence[FieldInfo]) -> list[tuple[int, int]]:
    """The entry's key values in the table's key order: (value, prefix length), the prefix
    being the full width for anything but an LPM key written with '*' nibbles. A key may be
    named by a suffix."""
    by_name = {k.name: k for k in cmd.keys}
    out = []
    for f in fields:
        key = by_name.get(f.name) or next(
            (k for k in cmd.keys if f.name.endswith("." + k.name)), None
        )
        if key is None:
            raise ValueError(f"{cmd.table}: missing key {f.name}")
        plen = key.prefix_len if f.kind == "LPM" and key.prefix_len is not None else f.bitwidth
        out.append((key.value, plen))
    return out


def action_args(
    action: str, given: tuple[tuple[str, int], ...], params: Sequence[ParamInfo]
) -> tuple[int, ...]:
    """The action's arguments in P4 order; every parameter must be named once and fit its
    width."""
    values = dict(given)
    names = [p.name for p in params]
    if set(values) != set(names):
        raise ValueError(f"action {action} takes {names}, got {sorted(values)}")
    for p in params:
        if not 0 <= values[p.name] < (1 << p.bitwidth):
            raise ValueError(f"{action}: {p.name}={values[p.name]} does not fit {p.bitwidth} bits")
    return tuple(values[n] for n in names)


END_LINE = "# end"  # the last line of every case file (see the module's docstring)


def read_case(path: Path) -> str:
    """The text of a case file; `StfError` if it is not UTF-8 or does not end with `END_LINE`
    (cut short)."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise StfError(
            str(path), line, "not a text file (a byte that is not UTF-8): cases are STF text"
        ) from None
    lines = text.splitlines()
    last = next((n for n in range(len(lines), 0, -1) if lines[n - 1].strip()), 0)
    if last == 0 or lines[last - 1].strip() != END_LINE:
        raise StfError(
            str(path),
            last,
            f"the case does not end with the line {END_LINE!r}: it may be cut short (a shorter "
            "case passes where the whole one fails); add the line if the file is whole",
        )
    return text


def load_stf(path: Path) -> StfCase:
    return parse_stf(read_case(path), str(path))


class Target(Protocol):
    """What a conformance target does; softswitch and bmv2 implement it."""

    def add_entry(self, cmd: AddEntry) -> None: ...
    def set_default(self, cmd: SetDefault) -> None: ...
    def mc_group_create(self, mgid: int) -> None: ...
    def mc_node_create(self, rid: int, ports: tuple[int, ...]) -> int: ...
    def mc_node_associate(self, mgid: int, handle: int) -> None: ...
    def send(self, port: int, data: bytes) -> list[tuple[int, bytes]]: ...
    def read_counter(self, counter: str, index: int) -> tuple[int, int]: ...


@dataclass
class CaseResult:
    failures: list[str]
    packets_in: int
    packets_out: int

    @property
    def ok(self) -> bool:
        return not self.failures


def run_setup(case: StfCase, target: Target) -> None:
    """The case's table and multicast commands, in order; packets and checks are left out."""
    for cmd in case.commands:
        if isinstance(cmd, AddEntry):
            target.add_entry(cmd)
        elif isinstance(cmd, SetDefault):
            target.set_default(cmd)
        elif isinstance(cmd, McGroupCreate):
            target.mc_group_create(cmd.mgid)
        elif isinstance(cmd, McNodeCreate):
            target.mc_node_create(cmd.rid, cmd.ports)
        elif isinstance(cmd, McNodeAssociate):
            target.mc_node_associate(cmd.mgid, cmd.handle)


def run_case(case: StfCase, target: Target) -> CaseResult:
    """Run every command against a synchronous target, then compare (see `compare`)."""
    emitted: dict[int, list[bytes]] = {}
    counters: dict[tuple[str, int], tuple[int, int]] = {}
    packets_in = 0
    for cmd in case.commands:
        if isinstance(cmd, AddEntry | SetDefault | McGroupCreate | McNodeCreate | McNodeAssociate):
            run_setup(StfCase(case.name, [cmd]), target)
        elif isinstance(cmd, Packet):
            packets_in += 1
            for port, data in target.send(cmd.port, cmd.data):
                emitted.setdefault(port, []).append(data)
        elif isinstance(cmd, CheckCounter):
            counters[(cmd.counter, cmd.index)] = target.read_counter(cmd.counter, cmd.index)
    return compare(case, emitted, counters, packets_in)


MISSING_LISTED = 5  # missing packets listed one by one per port; the rest are counted


def compare(
    case: StfCase,
    emitted: dict[int, list[bytes]],
    counters: dict[tuple[str, int], tuple[int, int]],
    packets_in: int,
) -> CaseResult:
    """Check emitted packets against the case's expectations, port by port and in order, and
    counter values (read when the target reached each check_counter) against its checks."""
    failures: list[str] = []
    expected: dict[int, list[Expect]] = {}
    for cmd in case.commands:
        if isinstance(cmd, Expect):
            expected.setdefault(cmd.port, []).append(cmd)
        elif isinstance(cmd, CheckCounter):
            packets, nbytes = counters.get((cmd.counter, cmd.index), (-1, -1))
            got = packets if cmd.unit == "packets" else nbytes
            if got != cmd.value:
                failures.append(
                    f"counter {cmd.counter}({cmd.index}) {cmd.unit}: "
                    f"expected {cmd.value}, got {got}"
                )
    for port in sorted(set(expected) | set(emitted)):
        failures += match_port(f"port {port}", expected.get(port, []), emitted.get(port, []))
    return CaseResult(failures, packets_in, sum(len(v) for v in emitted.values()))


def match_port(label: str, exp: Sequence[Expect], out: Sequence[bytes]) -> list[str]:
    """What is wrong with the packets `out` of one port against its expectations `exp`, in
    order: a packet that differs, one more than expected, expected ones that never came."""
    failures: list[str] = []
    for i, data in enumerate(out):
        if i >= len(exp):
            failures.append(f"{label}: unexpected packet #{i}: {data.hex()}")
        elif not exp[i].matches(data):
            failures.append(
                f"{label}: packet #{i} differs\n"
                f"  expected {exp[i].pattern}\n  got      {data.hex()}"
            )
    missing = range(len(out), len(exp))
    for i in missing[:MISSING_LISTED]:
        failures.append(f"{label}: expected packet #{i} never came: {exp[i].pattern}")
    if len(missing) > MISSING_LISTED:
        failures.append(f"{label}: ... and {len(missing) - MISSING_LISTED} more never came")
    return failures
