"""A small reader of p4/*.p4 for agreement tests (no p4c here): constants, headers, and the
P4Runtime objects (tables, actions, counters, registers) with their @ids, as p4c would name
them after inlining (`<control type>.<instance>.<object>`).

It understands the subset of P4 this project writes, in the layout it writes it; a construct it
does not know makes it fail loudly rather than guess.
"""

from __future__ import annotations

import re
from pathlib import Path

from finsy.proto.p4.config.v1 import p4info_pb2

P4_DIR = Path(__file__).resolve().parents[1] / "p4"


def read_sources() -> str:
    files = [P4_DIR / "ina.p4", *sorted((P4_DIR / "include").glob("*.p4"))]
    text = "\n".join(f.read_text() for f in files)
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def defines(src: str) -> dict[str, int]:
    """Numeric #defines (first definition wins, like #ifndef guards)."""
    out: dict[str, int] = {}
    for name, expr in re.findall(r"^\s*#define\s+(\w+)\s+([^\n]+)$", src, flags=re.M):
        if name in out:
            continue
        expr = expr.strip()
        for known, value in out.items():
            expr = re.sub(rf"\b{known}\b", str(value), expr)
        if re.fullmatch(r"[0-9xXa-fA-F()*+\- ]+", expr):
            out[name] = int(eval(expr, {"__builtins__": {}}))  # digits and operators only
    return out


def consts(src: str) -> dict[str, tuple[int, int]]:
    """const bit<W> NAME = value;  ->  {NAME: (W, value)}"""
    return {
        name: (int(width), int(value, 0))
        for width, name, value in re.findall(
            r"const\s+bit<(\d+)>\s+(\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)\s*;", src
        )
    }


def header_fields(src: str, header: str) -> list[tuple[str, int]]:
    m = re.search(rf"header\s+{header}\s*\{{(.*?)\}}", src, flags=re.S)
    if m is None:
        raise AssertionError(f"header {header} not found")
    return [(n, int(w)) for w, n in re.findall(r"bit<(\d+)>\s+(\w+)\s*;", m.group(1))]


def _block(src: str, start: int) -> str:
    """The text between the '{' at or after `start` and its matching '}'."""
    i = src.index("{", start)
    depth = 0
    for j in range(i, len(src)):
        if src[j] == "{":
            depth += 1
        elif src[j] == "}":
            depth -= 1
            if depth == 0:
                return src[i + 1 : j]
    raise AssertionError("unbalanced braces")


def controls(src: str) -> dict[str, str]:
    return {
        m.group(1): _block(src, m.end())
        for m in re.finditer(r"\bcontrol\s+(\w+)\s*\([^)]*\)\s*(?=\{)", src, flags=re.S)
    }


def _size(expr: str, defs: dict[str, int]) -> int:
    expr = expr.strip()
    if expr in defs:
        return defs[expr]
    return int(expr, 0)


def p4info_from_source(src: str | None = None) -> p4info_pb2.P4Info:
    """The P4Info objects p4c would emit, read from the source (ids from @id)."""
    src = src if src is not None else read_sources()
    defs = defines(src)
    ctl = controls(src)
    top = ("InaIngress", "InaEgress")
    info = p4info_pb2.P4Info()
    info.pkg_info.arch = "v1model"
    action_ids: dict[tuple[str, str], int] = {}  # (prefix, short name) -> id
    table_ids: dict[str, int] = {}
    pending_direct: list[tuple[str, str, int]] = []  # (prefix, counter name, id)

    def walk(control: str, prefix: str) -> None:
        body = ctl[control]
        # sub-control instances: `Name() inst;`
        for sub, inst in re.findall(r"\b(\w+)\(\)\s+(\w+)\s*;", body):
            if sub in ctl:
                walk(sub, f"{prefix}{inst}.")
        for m in re.finditer(r"@id\((0x[0-9a-fA-F]+|\d+)\)\s*", body):
            oid = int(m.group(1), 0)
            rest = body[m.end() :]
            if a := re.match(r"action\s+(\w+)\s*\(([^)]*)\)", rest):
                act = info.actions.add()
                act.preamble.id, act.preamble.name = oid, prefix + a.group(1)
                params = [p.strip() for p in a.group(2).split(",") if p.strip()]
                for i, p in enumerate(params, 1):
                    pm = re.fullmatch(r"bit<(\d+)>\s+(\w+)", p)
                    assert pm, f"unsupported action parameter {p!r}"
                    par = act.params.add()
                    par.id, par.name, par.bitwidth = i, pm.group(2), int(pm.group(1))
                action_ids[(prefix, a.group(1))] = oid
            elif t := re.match(r"table\s+(\w+)", rest):
                table_ids[prefix + t.group(1)] = oid
                tb = _block(rest, 0)
                tab = info.tables.add()
                tab.preamble.id, tab.preamble.name = oid, prefix + t.group(1)
                keys = _block(tb, tb.index("key"))
                key_re = r'([\w.]+)\s*:\s*(\w+)(?:\s*@name\("([\w.]+)"\))?\s*;'
                for i, (expr, kind, alias) in enumerate(re.findall(key_re, keys), 1):
                    mf = tab.match_fields.add()
                    mf.id, mf.name = i, alias or expr  # a key's @name is its P4Info name
                    mf.bitwidth = _field_width(src, expr)
                    mf.match_type = p4info_pb2.MatchField.MatchType.Value(kind.upper())
                acts = _block(tb, tb.index("actions"))
                refs = []
                for ann, name in re.findall(r"(@defaultonly\s+)?(\w+)\s*;", acts):
                    refs.append((name, bool(ann)))
                const = re.search(r"const\s+default_action\s*=\s*(\w+)", tb)
                size = re.search(r"size\s*=\s*(\w+)\s*;", tb)
                direct = re.search(r"counters\s*=\s*(\w+)\s*;", tb)
                tab.size = _size(size.group(1), defs) if size else 1024
                _pending_refs.append((tab, prefix, refs, const.group(1) if const else None))
                if direct:
                    pending_direct.append((prefix, direct.group(1), oid))
            elif c := re.match(r"counter\((\w+),\s*CounterType\.(\w+)\)\s*(\w+)", rest):
                cnt = info.counters.add()
                cnt.preamble.id, cnt.preamble.name = oid, prefix + c.group(3)
                cnt.spec.unit = _unit(c.group(2))
                cnt.size = _size(c.group(1), defs)
            elif d := re.match(r"direct_counter\(CounterType\.(\w+)\)\s*(\w+)", rest):
                dc = info.direct_counters.add()
                dc.preamble.id, dc.preamble.name = oid, prefix + d.group(2)
                dc.spec.unit = _unit(d.group(1))
            elif r := re.match(r"register<bit<(\d+)>>\((\w+)\)\s*(\w+)", rest):
                reg = info.registers.add()
                reg.preamble.id, reg.preamble.name = oid, prefix + r.group(3)
                reg.type_spec.bitstring.bit.bitwidth = int(r.group(1))
                reg.size = _size(r.group(2), defs)
            else:
                raise AssertionError(f"@id on something this reader does not know: {rest[:60]!r}")

    _pending_refs: list[tuple[p4info_pb2.Table, str, list[tuple[str, bool]], str | None]] = []
    for name in top:
        walk(name, f"{name}.")
    for tab, prefix, refs, const in _pending_refs:
        for name, default_only in refs:
            ref = tab.action_refs.add()
            ref.id = action_ids[(prefix, name)]
            if default_only:
                ref.scope = p4info_pb2.ActionRef.DEFAULT_ONLY
        if const:
            tab.const_default_action_id = action_ids[(prefix, const)]
    for prefix, cname, tid in pending_direct:
        for dc in info.direct_counters:
            if dc.preamble.name == prefix + cname:
                dc.direct_table_id = tid
                next(t for t in info.tables if t.preamble.id == tid).direct_resource_ids.append(
                    dc.preamble.id
                )
    return info


def _unit(counter_type: str) -> int:
    return {
        "packets": p4info_pb2.CounterSpec.PACKETS,
        "bytes": p4info_pb2.CounterSpec.BYTES,
        "packets_and_bytes": p4info_pb2.CounterSpec.BOTH,
    }[counter_type]


_STANDARD_METADATA = {"ingress_port": 9, "egress_port": 9, "egress_spec": 9}


def _field_width(src: str, expr: str) -> int:
    parts = expr.split(".")
    if parts[0] == "standard_metadata":
        return _STANDARD_METADATA[parts[1]]
    if parts[0] == "hdr" and len(parts) == 3:
        struct = re.search(r"struct\s+headers_t\s*\{(.*?)\}", src, flags=re.S)
        assert struct
        htype = dict((n, t) for t, n in re.findall(r"(\w+)\s+(\w+)\s*;", struct.group(1)))[parts[1]]
        return dict(header_fields(src, htype))[parts[2]]
    raise AssertionError(f"key expression {expr!r} not understood")
