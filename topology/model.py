"""Topologies: hosts, switches and links, in a `topology.json` like p4lang/tutorials', plus
Python builders (star, leaf-spine, fat-tree, BiGraph, 2D torus and mesh; `from_spec` reads
the compact form `leaf-spine:2x2x4`). docs/topologies.md describes each one.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

from inaemu.p4.constants import DROP_PORT
from inaemu.topology.addresses import ip_int, mac_bytes

_END = re.compile(r"^(?P<node>[A-Za-z_][\w.]*)-p(?P<port>\d+)$")
MAX_PORT = DROP_PORT - 1  # the highest port a link may use


class TopologyError(ValueError):
    """A topology that cannot be used; the message says what to fix."""


@dataclass(frozen=True)
class Host:
    name: str
    ip: str  # without prefix length
    mac: str
    prefix_len: int = 24
    role: str = "worker"


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

    def add_host(self, name: str, ip: str, mac: str, *, role: str = "worker") -> Host:
        addr, _, plen = ip.partition("/")
        host = Host(name, addr, mac, int(plen) if plen else 24, role)
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
                h.name: {"ip": f"{h.ip}/{h.prefix_len}", "mac": h.mac, "role": h.role}
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
            topo.add_host(name, spec["ip"], spec["mac"], role=spec.get("role", "worker"))
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


def _ipv4(text: str) -> bool:
    return bool(_IPV4.match(text)) and all(int(p) <= 255 for p in text.split("."))


def _ipv4_prefix(text: str) -> bool:
    addr, slash, plen = text.partition("/")
    return _ipv4(addr) and (not slash or (plen.isascii() and plen.isdigit() and int(plen) <= 32))


def _mac(text: str) -> bool:
    return bool(_MAC.match(text))


def _grpc_address(text: str) -> bool:
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
                },
                frozenset({"ip", "mac"}),
            ),
        ),
        "switches": Named(
            "switch",
            Record(
                {
                    "grpc": Text('a string "host:port" like "127.0.0.1:9559"', _grpc_address),
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


# ---------------------------------------------------------------------- builders
#
# What the builders can address, checked before anything is built: host i (from 0) gets
# 10.0.<i div 250>.<i mod 250 + 1>/16 (`_host_addr`), switch d (from 1) the P4Runtime port
# grpc_base + d - 1.

MAX_HOSTS = 256 * 250  # 64,000
DEFAULT_GRPC_BASE = 9559


def _host_addr(i: int) -> tuple[str, str]:
    return f"10.0.{i // 250}.{i % 250 + 1}/16", f"08:00:00:00:{i // 256:02x}:{i % 256:02x}"


def _check_size(name: str, hosts: int, switches: int, grpc_base: int = DEFAULT_GRPC_BASE) -> None:
    """Refuse a topology larger than the builders can address, before building it."""
    most = 65535 - grpc_base + 1
    if hosts > MAX_HOSTS or switches > most:
        raise TopologyError(
            f"{name} would have {hosts:,} hosts and {switches:,} switches; the builders make "
            f"at most {MAX_HOSTS:,} hosts (10.0.0.0/16) and {most:,} switches (P4Runtime ports "
            f"{grpc_base}..65535)"
        )


def star(n_hosts: int, *, grpc: str = "127.0.0.1:9559") -> Topology:
    """One switch s1 (role `root`), hosts h1..hN on ports 1..N."""
    if not 1 <= n_hosts <= MAX_PORT:
        raise TopologyError(f"a star needs 1..{MAX_PORT} hosts, got {n_hosts}")
    topo = Topology()
    topo.add_switch("s1", grpc=grpc, role="root")
    for i in range(n_hosts):
        ip, mac = _host_addr(i)
        topo.add_host(f"h{i + 1}", ip, mac)
        topo.link(f"h{i + 1}", "s1", b_port=i + 1)
    return topo.validate()


def leaf_spine(
    n_leaves: int, n_spines: int, hosts_per_leaf: int, *, grpc_base: int = 9559
) -> Topology:
    """Leaves l1.. (role `leaf`), spines s1.. (`spine`); hosts on leaf ports 1..H, the uplink
    to spine j (from 1) on port H + j; leaf i (from 1) on spine port i. Every leaf is linked
    to every spine."""
    if n_leaves < 1 or n_spines < 1 or hosts_per_leaf < 1:
        raise TopologyError(
            "a leaf-spine needs at least 1 leaf, 1 spine and 1 host per leaf, got "
            f"{n_leaves}x{n_spines}x{hosts_per_leaf}"
        )
    if hosts_per_leaf + n_spines > MAX_PORT or n_leaves > MAX_PORT:
        raise TopologyError(
            f"leaf-spine {n_leaves}x{n_spines}x{hosts_per_leaf} needs more than {MAX_PORT} "
            "ports on a switch"
        )
    name = f"leaf-spine {n_leaves}x{n_spines}x{hosts_per_leaf}"
    _check_size(name, n_leaves * hosts_per_leaf, n_leaves + n_spines, grpc_base)
    topo = Topology()
    dev = 1
    for j in range(n_spines):
        topo.add_switch(
            f"s{j + 1}", grpc=f"127.0.0.1:{grpc_base + dev - 1}", device_id=dev, role="spine"
        )
        dev += 1
    k = 0
    for i in range(n_leaves):
        leaf = f"l{i + 1}"
        topo.add_switch(leaf, grpc=f"127.0.0.1:{grpc_base + dev - 1}", device_id=dev, role="leaf")
        dev += 1
        for port in range(1, hosts_per_leaf + 1):
            ip, mac = _host_addr(k)
            topo.add_host(f"h{k + 1}", ip, mac)
            topo.link(f"h{k + 1}", leaf, b_port=port)
            k += 1
        for j in range(n_spines):
            topo.link(leaf, f"s{j + 1}", a_port=hosts_per_leaf + j + 1, b_port=i + 1)
    return topo.validate()


def fat_tree(k: int, *, grpc_base: int = 9559) -> Topology:
    """The k-ary fat tree (k even): (k/2)^2 cores c1.. (role `core`), k pods of k/2
    aggregation switches a<pod>_<i> (`aggregation`) and k/2 edge switches e<pod>_<i> (`edge`),
    k/2 hosts per edge switch (k^3/4 hosts). Aggregation switch i of every pod links to cores
    (i-1)k/2 + 1 .. ik/2."""
    if k < 2 or k % 2:
        raise TopologyError(f"a fat tree needs an even k >= 2, got {k}")
    _check_size(f"fat-tree {k}", k**3 // 4, 5 * k * k // 4, grpc_base)
    half = k // 2
    topo = Topology()
    dev = 1

    def sw(name: str, role: str) -> None:
        nonlocal dev
        topo.add_switch(name, grpc=f"127.0.0.1:{grpc_base + dev - 1}", device_id=dev, role=role)
        dev += 1

    for c in range(half * half):
        sw(f"c{c + 1}", "core")
    h = 0
    for p in range(k):
        for a in range(half):
            sw(f"a{p + 1}_{a + 1}", "aggregation")
        for e in range(half):
            edge = f"e{p + 1}_{e + 1}"
            sw(edge, "edge")
            for port in range(1, half + 1):
                ip, mac = _host_addr(h)
                topo.add_host(f"h{h + 1}", ip, mac)
                topo.link(f"h{h + 1}", edge, b_port=port)
                h += 1
            for a in range(half):  # edge uplinks on ports half+1..k, agg downlinks 1..half
                topo.link(edge, f"a{p + 1}_{a + 1}", a_port=half + a + 1, b_port=e + 1)
        for a in range(half):
            for j in range(half):  # agg a connects to cores a*half + j on its ports half+1..k
                core = a * half + j
                topo.link(f"a{p + 1}_{a + 1}", f"c{core + 1}", a_port=half + j + 1, b_port=p + 1)
    return topo.validate()


def _grpc(dev: int, grpc_base: int) -> str:
    return f"127.0.0.1:{grpc_base + dev - 1}"


def bigraph(hosts_per_switch: int, n_switches: int, *, grpc_base: int = 9559) -> Topology:
    """EFLOPS' BiGraph(M, N): switches s1..sN in two parts of N/2, `upper` (s1..s(N/2)) and
    `lower`; every switch of one part is linked to every switch of the other and none inside
    a part. M hosts per switch: host h (from 0) is on switch h div M, ports 1..M; switch j of
    the other part (from 0) is on port M + 1 + j. Hosts on one switch are 1 switch apart, on
    switches of different parts 2, on two switches of one part 3 (through the other part)."""
    if n_switches < 2 or n_switches % 2:
        raise TopologyError(f"a BiGraph needs an even number of switches >= 2, got {n_switches}")
    if hosts_per_switch < 1:
        raise TopologyError(f"a BiGraph needs at least 1 host per switch, got {hosts_per_switch}")
    half = n_switches // 2
    if hosts_per_switch + half > MAX_PORT:
        raise TopologyError(
            f"BiGraph({hosts_per_switch}, {n_switches}) needs {hosts_per_switch + half} ports "
            f"per switch; a switch has {MAX_PORT}"
        )
    name = f"BiGraph({hosts_per_switch}, {n_switches})"
    _check_size(name, hosts_per_switch * n_switches, n_switches, grpc_base)
    topo = Topology()
    for i in range(n_switches):
        role = "upper" if i < half else "lower"
        topo.add_switch(f"s{i + 1}", grpc=_grpc(i + 1, grpc_base), device_id=i + 1, role=role)
    for h in range(hosts_per_switch * n_switches):
        ip, mac = _host_addr(h)
        topo.add_host(f"h{h + 1}", ip, mac)
        topo.link(f"h{h + 1}", f"s{h // hosts_per_switch + 1}", b_port=h % hosts_per_switch + 1)
    for i in range(half):
        for j in range(half):
            topo.link(
                f"s{i + 1}",
                f"s{half + j + 1}",
                a_port=hosts_per_switch + 1 + j,
                b_port=hosts_per_switch + 1 + i,
            )
    return topo.validate()


# ports of a grid switch (torus, mesh): its host, then one per direction
GRID_HOST, GRID_EAST, GRID_WEST, GRID_SOUTH, GRID_NORTH = 1, 2, 3, 4, 5


def grid_switch(row: int, col: int) -> str:
    """The name of the switch in row `row`, column `col` (from 0) of a torus or mesh."""
    return f"s{row + 1}_{col + 1}"


def _grid(rows: int, cols: int, wrap: bool, grpc_base: int) -> Topology:
    kind = "torus" if wrap else "mesh"
    if rows < 1 or cols < 1:
        raise TopologyError(f"a {kind} needs at least 1 row and 1 column, got {rows}x{cols}")
    if wrap and 2 in (rows, cols):
        raise TopologyError(
            f"a torus of {rows}x{cols} would link two switches twice in a dimension of 2; "
            "use 1 or at least 3 (or a mesh)"
        )
    _check_size(f"{kind} {rows}x{cols}", rows * cols, rows * cols, grpc_base)
    topo = Topology()
    for r in range(rows):
        for c in range(cols):
            dev = r * cols + c + 1
            topo.add_switch(grid_switch(r, c), grpc=_grpc(dev, grpc_base), device_id=dev, role=kind)
            ip, mac = _host_addr(dev - 1)
            topo.add_host(f"h{dev}", ip, mac)
            topo.link(f"h{dev}", grid_switch(r, c), b_port=GRID_HOST)
    for r in range(rows):
        for c in range(cols):
            east = (r, c + 1) if c + 1 < cols else ((r, 0) if wrap and cols > 1 else None)
            south = (r + 1, c) if r + 1 < rows else ((0, c) if wrap and rows > 1 else None)
            if east is not None:
                topo.link(grid_switch(r, c), grid_switch(*east), GRID_EAST, GRID_WEST)
            if south is not None:
                topo.link(grid_switch(r, c), grid_switch(*south), GRID_SOUTH, GRID_NORTH)
    return topo.validate()


def torus(rows: int, cols: int, *, grpc_base: int = 9559) -> Topology:
    """A 2D torus of rows x cols switches (each dimension 1 or >= 3), one host per switch:
    switch s<r>_<c> (from 1) has host h<(r-1)*cols+c> on port 1 and links east (port 2) to
    west (port 3) and south (port 4) to north (port 5), wrapping around at the edges."""
    return _grid(rows, cols, True, grpc_base)


def mesh(rows: int, cols: int, *, grpc_base: int = 9559) -> Topology:
    """A 2D mesh: the torus without the wrap-around links."""
    return _grid(rows, cols, False, grpc_base)


def assign_devices(
    topo: Topology,
    *,
    grpc: str | None = None,
    device_id: int | None = None,
    grpc_of: Mapping[str, str] | None = None,
    device_id_of: Mapping[str, int] | None = None,
) -> Topology:
    """`topo` with the P4Runtime address and device id of its switches set, validated.

    `grpc` ("host:port") is the first switch's address, the others (in the topology's order)
    get the ports after it on the same host; `device_id` is the first switch's id, the others
    the ids after it. `grpc_of` and `device_id_of` set single switches (by name) and win.
    Whatever is not given stays as it was (the builders: 127.0.0.1:9559 and on, ids 1 and on).
    """
    names = list(topo.switches)
    for what, given in (("--grpc", grpc_of or {}), ("--device-id", device_id_of or {})):
        unknown = [n for n in given if n not in topo.switches]
        if unknown:
            raise TopologyError(
                f"{what} {unknown[0]}=...: the topology has no switch {unknown[0]!r} "
                f"(its switches: {', '.join(names)})"
            )
    first_host, first_port = "", 0
    if grpc is not None:
        first_host, _, port_text = grpc.rpartition(":")
        if not (first_host and port_text.isascii() and port_text.isdigit()):
            raise TopologyError(f"--grpc {grpc}: write HOST:PORT, e.g. 127.0.0.1:9559")
        first_port = int(port_text)
        last = first_port + len(names) - 1
        if first_port < 1 or last > 65535:
            need = f" ({len(names)} switches need {first_port}..{last})" if len(names) > 1 else ""
            raise TopologyError(f"--grpc {grpc}: ports are 1..65535{need}")
    for name, address in (grpc_of or {}).items():
        if not _grpc_address(address):
            raise TopologyError(f"--grpc {name}={address}: write HOST:PORT, e.g. 127.0.0.1:9559")
    ids = {"": device_id + len(names) - 1} if device_id is not None else {}  # the last one
    for name, number in {**ids, **(device_id_of or {})}.items():
        if not 0 <= number < 2**64:
            shown = f"{name}={number}" if name else f"{device_id} ({len(names)} switches)"
            raise TopologyError(f"--device-id {shown}: a device id is 0..2^64-1")
    out = Topology(dict(topo.hosts), {}, list(topo.links))
    for i, name in enumerate(names):
        sw = topo.switches[name]
        address = f"{first_host}:{first_port + i}" if grpc is not None else sw.grpc
        number = device_id + i if device_id is not None else sw.device_id
        out.switches[name] = replace(
            sw,
            grpc=(grpc_of or {}).get(name, address),
            device_id=(device_id_of or {}).get(name, number),
        )
    return out.validate()


# the compact form of every builder: kind -> (what the numbers are, builder)
SPEC_FORMS: dict[str, tuple[str, Callable[..., Topology]]] = {
    "star": ("HOSTS", star),
    "leaf-spine": ("LEAVESxSPINESxHOSTS_PER_LEAF", leaf_spine),
    "fat-tree": ("K", fat_tree),
    "bigraph": ("HOSTS_PER_SWITCHxSWITCHES", bigraph),
    "torus": ("ROWSxCOLS", torus),
    "mesh": ("ROWSxCOLS", mesh),
}


def from_spec(spec: str) -> Topology:
    """A built-in topology from its compact form: `star:4`, `leaf-spine:2x2x4` (leaves x
    spines x hosts per leaf), `fat-tree:4`, `bigraph:4x4` (hosts per switch x switches),
    `torus:4x4`, `mesh:3x3` (rows x columns)."""
    forms = ", ".join(f"{k}:{v[0]}" for k, v in SPEC_FORMS.items())
    kind, _, numbers = spec.partition(":")
    if kind not in SPEC_FORMS:
        raise TopologyError(f"unknown topology {spec!r}; use one of {forms}")
    form, builder = SPEC_FORMS[kind]
    parts = numbers.split("x")
    if len(parts) != form.count("x") + 1 or not all(p.isascii() and p.isdigit() for p in parts):
        raise TopologyError(f"topology {spec!r}: write {kind}:{form}, e.g. {_EXAMPLES[kind]}")
    if any(len(p) > 9 for p in parts):  # far beyond any cap, and int() stops at 4300 digits
        raise TopologyError(
            f"topology {spec[:60]!r}: numbers of at most 9 digits; the builders make at most "
            f"{MAX_HOSTS:,} hosts"
        )
    topo: Topology = builder(*(int(p) for p in parts))
    return topo


def load_or_build(text: str) -> Topology:
    """A topology file, or a compact spec such as `bigraph:4x4` when no such file exists."""
    path = Path(text)
    if path.exists() or ":" not in text:
        return Topology.load(path)
    if text.partition(":")[0] not in SPEC_FORMS:
        forms = ", ".join(f"{k}:{v[0]}" for k, v in SPEC_FORMS.items())
        raise TopologyError(f"{text}: no such topology file, nor a topology such as {forms}")
    return from_spec(text)


def describe_roles(topo: Topology) -> str:
    """How many switches have each role, e.g. `2 spine, 2 leaf`."""
    counts: dict[str, int] = {}
    for sw in topo.switches.values():
        counts[sw.role or "no role"] = counts.get(sw.role or "no role", 0) + 1
    return ", ".join(f"{n} {role}" for role, n in counts.items())


_EXAMPLES = {
    "star": "star:4",
    "leaf-spine": "leaf-spine:2x2x4",
    "fat-tree": "fat-tree:4",
    "bigraph": "bigraph:4x4",
    "torus": "torus:4x4",
    "mesh": "mesh:3x3",
}
