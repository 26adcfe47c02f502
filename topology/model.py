"""Topologies: hosts, switches and links, in a `topology.json` like p4lang/tutorials'. The
builders (star, leaf-spine, fat-tree, BiGraph, 2D torus and mesh; `from_spec` reads the
compact form `leaf-spine:2x2x4`) are `builders.py`; docs/topologies.md describes each one.

    {
      "hosts":    {"h1": {"ip": "10.0.0.1/24", "mac": "08:00:00:00:01:01", "role": "worker"}},
      "switches": {"s1": {"grpc": "127.0.0.1:9559", "device_id": 1, "role": "root"}},
      "links":    [["h1", "s1-p1"], ["s1-p2", "s2-p1"]]
    }

A link end is a host name or `<switch>-p<port>`; a third element (e.g. "bw=10") is kept as link
options (Mininet uses them). `Topology.validate()` refuses anything inconsistent with a message
that names the offending element and says what to fix.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from inaemu.p4.constants import DROP_PORT
from inaemu.topology.addresses import ip_int, mac_bytes

_END = re.compile(r"^(?P<node>[A-Za-z_][\w.]*)-p(?P<port>\d+)$")
MAX_PORT = DROP_PORT - 1  # the highest port a link may use
MAX_RANKS = 32  # workers behind one port at most: a switch's fan-in (its bitmap has 32 bits)


class TopologyError(ValueError):
    """A topology that cannot be used; the message says what to fix."""


@dataclass(frozen=True)
class Host:
    """A machine on one switch port. It runs `ranks` workers (training processes: torchrun's
    local ranks), all behind its one interface and address; local rank i sends from, and gets
    its results at, UDP port `udp_port + i` (`common.wire.worker_udp_port`; docs/protocol.md,
    "Several workers behind one port"). Without `ranks` a host is one worker; without
    `udp_port` its first rank is on the INA port, 47500."""

    name: str
    ip: str  # without prefix length
    mac: str
    prefix_len: int = 24
    role: str = "worker"
    ranks: int = 1
    udp_port: int | None = None  # the first rank's UDP port; None: the INA port


@dataclass(frozen=True)
class Switch:
    name: str
    grpc: str = ""
    device_id: int = 1
    role: str = ""
    # the address workers send INA packets to (needs an ARP entry on Mininet hosts)
    agg_ip: str = "10.0.0.254"
    agg_mac: str = "02:00:00:00:00:fe"
    # the device config pushed with the P4Info: bmv2's JSON (p4/build/ina.json) for
    # simple_switch_grpc; empty for the softswitch, which takes any
    program: str = ""


@dataclass(frozen=True)
class Link:
    a: str
    a_port: int | None  # None: a host
    b: str
    b_port: int | None
    options: str = ""


@dataclass
class Topology:
    hosts: dict[str, Host] = field(default_factory=dict)
    switches: dict[str, Switch] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)

    # ------------------------------------------------------------------ building

    def add_host(
        self,
        name: str,
        ip: str,
        mac: str,
        *,
        role: str = "worker",
        ranks: int = 1,
        udp_port: int | None = None,
    ) -> Host:
        addr, _, plen = ip.partition("/")
        host = Host(name, addr, mac, int(plen) if plen else 24, role, ranks, udp_port)
        self.hosts[name] = host
        return host

    def add_switch(self, name: str, **kwargs: Any) -> Switch:
        self.switches[name] = Switch(name, **kwargs)
        return self.switches[name]

    def link(
        self,
        a: str,
        b: str,
        a_port: int | None = None,
        b_port: int | None = None,
        options: str = "",
    ) -> Link:
        """Connect a and b; a switch end without a port gets its next free port (from 1)."""
        if a in self.switches and a_port is None:
            a_port = self._next_port(a)
        if b in self.switches and b_port is None:
            b_port = self._next_port(b) if b != a else self._next_port(b) + 1
        link = Link(a, a_port, b, b_port, options)
        self.links.append(link)
        return link

    def _next_port(self, switch: str) -> int:
        used = {p for _, p in self._switch_ends() if _ == switch}
        return next(p for p in range(1, MAX_PORT + 1) if p not in used)

    def _switch_ends(self) -> list[tuple[str, int]]:
        ends = []
        for lk in self.links:
            if lk.a_port is not None:
                ends.append((lk.a, lk.a_port))
            if lk.b_port is not None:
                ends.append((lk.b, lk.b_port))
        return ends

    # ------------------------------------------------------------------ queries

    def host_attachment(self, host: str) -> tuple[str, int]:
        """(switch, port) the host is plugged into."""
        for lk in self.links:
            if lk.a == host and lk.b in self.switches and lk.b_port is not None:
                return lk.b, lk.b_port
            if lk.b == host and lk.a in self.switches and lk.a_port is not None:
                return lk.a, lk.a_port
        raise TopologyError(f"host {host!r} is not linked to any switch")

    def switch_neighbours(self, switch: str) -> dict[int, tuple[str, int]]:
        """port -> (peer switch, peer port) for the switch-to-switch links of `switch`."""
        out: dict[int, tuple[str, int]] = {}
        for lk in self.links:
            if lk.a_port is None or lk.b_port is None:
                continue
            if lk.a == switch:
                out[lk.a_port] = (lk.b, lk.b_port)
            if lk.b == switch:
                out[lk.b_port] = (lk.a, lk.a_port)
        return out

    def adjacency(self) -> dict[str, dict[int, tuple[str, int]]]:
        """Every switch's `switch_neighbours`, computed in one pass over the links."""
        out: dict[str, dict[int, tuple[str, int]]] = {sw: {} for sw in self.switches}
        for lk in self.links:
            if lk.a_port is None or lk.b_port is None:
                continue
            out.setdefault(lk.a, {})[lk.a_port] = (lk.b, lk.b_port)
            out.setdefault(lk.b, {})[lk.b_port] = (lk.a, lk.a_port)
        return out

    def distances(self, start: str) -> dict[str, int]:
        """Switch hops from `start` to every switch it reaches (itself 0)."""
        adj = self.adjacency()
        dist = {start: 0}
        queue = deque([start])
        while queue:
            sw = queue.popleft()
            for peer, _ in adj[sw].values():
                if peer not in dist:
                    dist[peer] = dist[sw] + 1
                    queue.append(peer)
        return dist

    def bfs_parents(self, root: str) -> dict[str, tuple[str, int, int] | None]:
        """Shortest-path tree of switches from `root`: switch -> (parent, port on switch
        towards parent, parent's port towards switch); root -> None. Ties go to the lowest
        port, so every run builds the same tree."""
        parents: dict[str, tuple[str, int, int] | None] = {root: None}
        queue = deque([root])
        while queue:
            sw = queue.popleft()
            for port, (peer, peer_port) in sorted(self.switch_neighbours(sw).items()):
                if peer not in parents:
                    parents[peer] = (sw, peer_port, port)
                    queue.append(peer)
        return parents

    # ------------------------------------------------------------------ validation

    def validate(self, *, source: str = "") -> Topology:
        """Refuse anything a switch or a job could not use; the message starts with `source`
        (the file) if given, names the element and says what to fix."""
        try:
            self._validate()
        except TopologyError as exc:
            raise TopologyError(f"{source}: {exc}" if source else str(exc)) from None
        return self

    def _validate(self) -> None:
        # every field's type and range: the same check as a topology.json's
        TOPOLOGY_SCHEMA(self.to_json(), ())
        if not self.switches:
            raise TopologyError("the topology has no switches")
        for name in self.hosts.keys() & self.switches.keys():
            raise TopologyError(f"{name!r} is both a host and a switch: rename one")
        seen_ips: dict[int, str] = {}
        seen_macs: dict[bytes, str] = {}
        for h in self.hosts.values():
            ip, mac = ip_int(h.ip), mac_bytes(h.mac)
            if ip in seen_ips:
                raise TopologyError(f"hosts {seen_ips[ip]!r} and {h.name!r} share IP {h.ip}")
            if mac in seen_macs:
                raise TopologyError(
                    f"hosts {seen_macs[mac]!r} and {h.name!r} share MAC {h.mac}; "
                    "give each host its own"
                )
            seen_ips[ip], seen_macs[mac] = h.name, h.name
            if h.udp_port is not None and h.udp_port + h.ranks - 1 > 65535:
                raise TopologyError(
                    f"host {h.name!r}: its {h.ranks} ranks need UDP ports {h.udp_port}.."
                    f"{h.udp_port + h.ranks - 1}, past 65535; give a lower udp_port"
                )
        devices: dict[tuple[str, int], str] = {}
        for s in self.switches.values():
            if ip_int(s.agg_ip) in seen_ips:
                raise TopologyError(
                    f"host {seen_ips[ip_int(s.agg_ip)]!r} has IP {s.agg_ip}, the aggregation "
                    f"address of switch {s.name!r}; change one of them"
                )
            if mac_bytes(s.agg_mac) in seen_macs:
                raise TopologyError(
                    f"host {seen_macs[mac_bytes(s.agg_mac)]!r} has MAC {s.agg_mac}, the "
                    f"aggregation MAC of switch {s.name!r}; change one of them"
                )
            if s.grpc:
                if (s.grpc, s.device_id) in devices:
                    raise TopologyError(
                        f"switches {devices[(s.grpc, s.device_id)]!r} and {s.name!r} are both "
                        f"device {s.device_id} at {s.grpc}; give each its own device_id or "
                        "grpc address"
                    )
                devices[(s.grpc, s.device_id)] = s.name
        used: dict[tuple[str, int], int] = {}
        host_links: dict[str, int] = {}
        for i, lk in enumerate(self.links):
            for node, port in ((lk.a, lk.a_port), (lk.b, lk.b_port)):
                if node not in self.hosts and node not in self.switches:
                    raise TopologyError(f"link #{i} {lk.a}-{lk.b}: unknown node {node!r}")
                if node in self.switches:
                    if port is None:
                        raise TopologyError(
                            f"link #{i}: switch end {node!r} needs a port: write '{node}-pN'"
                        )
                    if not 0 <= port <= MAX_PORT:
                        raise TopologyError(
                            f"link #{i}: port {port} of {node!r} not in 0..{MAX_PORT} "
                            f"({DROP_PORT} is the drop port)"
                        )
                    if (node, port) in used:
                        raise TopologyError(
                            f"port {port} of switch {node!r} is used by links "
                            f"#{used[(node, port)]} and #{i}"
                        )
                    used[(node, port)] = i
                else:
                    if port is not None:
                        raise TopologyError(
                            f"link #{i}: host {node!r} has no ports; drop '-p{port}'"
                        )
                    host_links[node] = host_links.get(node, 0) + 1
            if lk.a in self.hosts and lk.b in self.hosts:
                raise TopologyError(f"link #{i}: hosts {lk.a!r} and {lk.b!r} must meet at a switch")
        for name in self.hosts:
            if host_links.get(name, 0) != 1:
                raise TopologyError(
                    f"host {name!r} has {host_links.get(name, 0)} links; "
                    "each host needs exactly one"
                )

    # ------------------------------------------------------------------ json

    def to_json(self) -> dict[str, Any]:
        def end(node: str, port: int | None) -> str:
            return node if port is None else f"{node}-p{port}"

        return {
            "hosts": {
                h.name: {
                    "ip": f"{h.ip}/{h.prefix_len}",
                    "mac": h.mac,
                    "role": h.role,
                    **({"ranks": h.ranks} if h.ranks != 1 else {}),
                    **({"udp_port": h.udp_port} if h.udp_port is not None else {}),
                }
                for h in self.hosts.values()
            },
            "switches": {
                s.name: {
                    k: v
                    for k, v in (
                        ("grpc", s.grpc),
                        ("device_id", s.device_id),
                        ("role", s.role),
                        ("agg_ip", s.agg_ip),
                        ("agg_mac", s.agg_mac),
                        ("program", s.program),
                    )
                    if v != ""
                }
                for s in self.switches.values()
            },
            "links": [
                [end(lk.a, lk.a_port), end(lk.b, lk.b_port), *([lk.options] if lk.options else [])]
                for lk in self.links
            ],
        }

    @classmethod
    def from_json(cls, data: Any, *, source: str = "topology") -> Topology:
        """A topology from parsed JSON: every field's type and range is checked first
        (`TOPOLOGY_SCHEMA`), then the whole (`validate`)."""
        TOPOLOGY_SCHEMA(data, (source,))
        topo = cls()
        for name, spec in data.get("hosts", {}).items():
            topo.add_host(
                name,
                spec["ip"],
                spec["mac"],
                role=spec.get("role", "worker"),
                ranks=spec.get("ranks", 1),
                udp_port=spec.get("udp_port"),
            )
        for name, spec in data.get("switches", {}).items():
            topo.add_switch(name, **{k: v for k, v in spec.items() if k != "runtime_json"})
        for raw in data.get("links", []):
            ends = []
            for e in raw[:2]:
                m = _END.match(e)
                ends.append(
                    (m["node"], int(m["port"])) if m and m["node"] in topo.switches else (e, None)
                )
            (a, ap), (b, bp) = ends
            topo.links.append(Link(a, ap, b, bp, raw[2] if len(raw) == 3 else ""))
        return topo.validate(source=source)

    @classmethod
    def load(cls, path: str | Path) -> Topology:
        return cls.from_json(read_json(Path(path), "topology file"), source=str(path))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")


# ---------------------------------------------------------------------- JSON input checks
#
# A small schema language for the JSON files the CLI reads (topology.json, the job state):
# each check is a callable `(value, where)` that raises TopologyError naming where the value
# is (`where` is a path such as ("t.json", "switch 's1'", "device_id")), what it should be
# and what it is.

Where = tuple[str, ...]
Check = Callable[[Any, Where], None]

_NAME = re.compile(r"^[A-Za-z_][\w.]*$", re.ASCII)
_IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$", re.ASCII)
_MAC = re.compile(r"^[0-9A-Fa-f]{1,2}(:[0-9A-Fa-f]{1,2}){5}$")
_GRPC_SCHEMES = ("unix:", "unix-abstract:", "dns:", "ipv4:", "ipv6:", "vsock:")


def _fail(where: Where, problem: str) -> NoReturn:
    raise TopologyError(": ".join((*where, problem)))


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _wrong(where: Where, expected: str, value: Any) -> NoReturn:
    _fail(where, f"expected {expected}, got {_shown(value)}")


class JsonObject(dict[str, Any]):
    """A JSON object as `read_json` parses it; remembers the keys that appeared twice
    (plain `json` keeps the last silently)."""

    duplicates: tuple[str, ...] = ()


def _json_object(pairs: list[tuple[str, Any]]) -> JsonObject:
    obj = JsonObject(pairs)
    if len(obj) != len(pairs):
        keys = [k for k, _ in pairs]
        obj.duplicates = tuple(dict.fromkeys(k for k in keys if keys.count(k) > 1))
    return obj


def _object(value: Any, where: Where, expected: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        _wrong(where, expected, value)
    for key in getattr(value, "duplicates", ()):
        _fail(where, f'"{key}" appears twice; keep one')
    return value


@dataclass(frozen=True)
class Text:
    """A string, optionally of a format (`valid`), described by `what`."""

    what: str = "a string"
    valid: Callable[[str], bool] | None = None

    def __call__(self, value: Any, where: Where) -> None:
        if not isinstance(value, str) or (self.valid is not None and not self.valid(value)):
            _wrong(where, self.what, value)


@dataclass(frozen=True)
class Integer:
    """An integer (not a bool, not a float) in lo..hi."""

    lo: int
    hi: int

    def __call__(self, value: Any, where: Where) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or not self.lo <= value <= self.hi:
            _wrong(where, f"an integer in {self.lo}..{self.hi}", value)


@dataclass(frozen=True)
class Record:
    """An object with known keys: each checked by its own check, `required` ones present."""

    fields: dict[str, Check]
    required: frozenset[str] = frozenset()

    def __call__(self, value: Any, where: Where) -> None:
        obj = _object(value, where, "an object with " + ", ".join(self.fields))
        for key in obj:
            if key not in self.fields:
                _fail(where, f"unknown key {key!r}; expected {', '.join(self.fields)}")
        for key in self.fields:
            if key in self.required and key not in obj:
                _fail(where, f'"{key}" is missing')
        for key, item in obj.items():
            self.fields[key](item, (*where, key))


@dataclass(frozen=True)
class Named:
    """An object of named entries (hosts, switches), each checked by `entry` and called
    "<kind> '<name>'" in messages."""

    kind: str
    entry: Check

    def __call__(self, value: Any, where: Where) -> None:
        obj = _object(value, where, f"an object of {self.kind}s by name")
        for name, item in obj.items():
            if not _NAME.match(name):
                _wrong(
                    (*where, f"name {name!r}"),
                    "letters, digits, '_' and '.', starting with a letter or '_'",
                    name,
                )
            self.entry(item, (*where[:-1], f"{self.kind} {name!r}"))


@dataclass(frozen=True)
class Items:
    """A list of lo..hi items, each checked by `item`; `label(i)` names item i, in place of
    the list's own name (`in_place`, e.g. "link #2") or after it (e.g. "first end")."""

    item: Check
    label: Callable[[int], str]
    lo: int = 0
    hi: int | None = None
    what: str = "a list"
    in_place: bool = False

    def __call__(self, value: Any, where: Where) -> None:
        if not isinstance(value, list) or not (
            self.lo <= len(value) <= (len(value) if self.hi is None else self.hi)
        ):
            _wrong(where, self.what, value)
        base = where[:-1] if self.in_place else where
        for i, item in enumerate(value):
            self.item(item, (*base, self.label(i)))


@dataclass(frozen=True)
class Fields:
    """A list of exactly one value per field, each checked by its own check and called by its
    name in messages: a slot pool `[base, size]`."""

    fields: tuple[tuple[str, Check], ...]
    what: str

    def __call__(self, value: Any, where: Where) -> None:
        if not isinstance(value, list) or len(value) != len(self.fields):
            _wrong(where, self.what, value)
        for (name, check), item in zip(self.fields, value, strict=True):
            check(item, (*where, name))


def _ipv4(text: str) -> bool:
    return bool(_IPV4.match(text)) and all(int(p) <= 255 for p in text.split("."))


def _ipv4_prefix(text: str) -> bool:
    addr, slash, plen = text.partition("/")
    return _ipv4(addr) and (not slash or (plen.isascii() and plen.isdigit() and int(plen) <= 32))


def _mac(text: str) -> bool:
    return bool(_MAC.match(text))


def grpc_address(text: str) -> bool:
    """Whether `text` can be a switch's P4Runtime address: HOST:PORT, or a gRPC scheme's."""
    if text.startswith(_GRPC_SCHEMES):
        return True
    host, _, port = text.rpartition(":")
    return bool(host) and port.isascii() and port.isdigit() and 1 <= int(port) <= 65535


_LINK_PARTS = ("first end", "second end", "options")
TOPOLOGY_SCHEMA = Record(
    {
        "hosts": Named(
            "host",
            Record(
                {
                    "ip": Text(
                        'an IPv4 address and prefix length like "10.0.0.1/24"', _ipv4_prefix
                    ),
                    "mac": Text('a MAC address like "08:00:00:00:01:01"', _mac),
                    "role": Text(),
                    "ranks": Integer(1, MAX_RANKS),
                    "udp_port": Integer(1, 65535),
                },
                frozenset({"ip", "mac"}),
            ),
        ),
        "switches": Named(
            "switch",
            Record(
                {
                    "grpc": Text('a string "host:port" like "127.0.0.1:9559"', grpc_address),
                    "device_id": Integer(0, 2**64 - 1),
                    "role": Text(),
                    "agg_ip": Text('an IPv4 address like "10.0.0.254"', _ipv4),
                    "agg_mac": Text('a MAC address like "02:00:00:00:00:fe"', _mac),
                    "program": Text("a string: the path of the compiled bmv2 JSON"),
                    "runtime_json": Text(),  # p4lang/tutorials' table entries: ignored
                }
            ),
        ),
        "links": Items(
            Items(
                Text('a string: a host name or "<switch>-p<port>"'),
                _LINK_PARTS.__getitem__,
                2,
                3,
                'a list of 2 to 3 items: [end, end] or [end, end, "options"]',
            ),
            "link #{}".format,
            in_place=True,
        ),
    }
)


MAX_JSON_BYTES = 64 << 20  # a JSON input file (topology, job state, schedule): 64 MiB
MAX_JSON_DEPTH = 32  # arrays and objects nested in each other (the files need 5)
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_JSON_NESTING = re.compile(r"[\[\]{}]")


def json_depth(text: str, limit: int = MAX_JSON_DEPTH) -> int:
    """How deeply arrays and objects nest in the JSON `text` (brackets inside strings do not
    count), counted up to `limit + 1` only: the parser is not handed what is deeper."""
    depth = deepest = 0
    for m in _JSON_NESTING.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if m[0] in "[{" else -1
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                break
    return deepest


def read_json(path: Path, what: str) -> Any:
    """A JSON file's content; `TopologyError` naming the file if it is missing, unreadable,
    larger than `MAX_JSON_BYTES`, nested deeper than `MAX_JSON_DEPTH`, not JSON or has an
    object with a key twice."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        raise TopologyError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise TopologyError(f"{path}: is a directory, not a {what}") from None
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    if len(data) > MAX_JSON_BYTES:
        raise TopologyError(
            f"{path}: larger than {MAX_JSON_BYTES:,} bytes; not a {what} inaemu reads"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TopologyError(f"{path}: not UTF-8 text; expected a JSON {what}") from None
    if json_depth(text) > MAX_JSON_DEPTH:
        raise TopologyError(
            f"{path}: lists and objects nested more than {MAX_JSON_DEPTH} deep; not a {what}"
        )
    try:
        return json.loads(text, object_pairs_hook=_json_object, parse_int=_json_int)
    except ValueError as exc:  # json.JSONDecodeError, or a number `_json_int` refuses
        raise TopologyError(f"{path}: not valid JSON ({exc})") from None


def _json_int(text: str) -> int:
    if len(text) > 40:  # int() refuses 4300 digits and more, saying to raise a Python limit
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)
