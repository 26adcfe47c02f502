"""The P4 source, the committed P4Info, the Python wire format and the softswitch constants
agree: one fact, defined once in Python, mirrored once in P4, checked here."""

from __future__ import annotations

import re
from pathlib import Path

from inaemu.common import wire
from inaemu.controller.jobs import MAX_EPOCH
from inaemu.p4 import constants
from inaemu.p4.info import load_p4info, p4info_diff
from inaemu.softswitch.fast.kernel import CHILD_PORT_BITS, pack_child_key
from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.state import CellFields, LpmTable
from inaemu.topology.model import MAX_RANKS
from tests import p4source

ROOT = Path(__file__).resolve().parents[1]
SRC = p4source.read_sources()
DEFS = p4source.defines(SRC)
CONSTS = p4source.consts(SRC)


def test_ina_header_matches_wire_format() -> None:
    assert p4source.header_fields(SRC, "ina_t") == list(wire.INA_HEADER_FIELDS)


def test_lanes_match_k() -> None:
    assert DEFS["INA_K"] == wire.K
    lanes_src = p4source.header_fields(SRC, "ina_lanes_t")
    # the header is written with a macro: one `bit<32> v##i;` expanded INA_K times
    assert lanes_src == [] and "bit<32> v##i;" in SRC
    assert wire.LANE_BITS == 32


def test_wire_constants() -> None:
    assert CONSTS["INA_UDP_PORT"] == (16, wire.INA_UDP_PORT)
    assert CONSTS["INA_VERSION"] == (4, wire.INA_VERSION)
    assert CONSTS["ETHERTYPE_IPV4"][1] == wire.ETHERTYPE_IPV4
    assert CONSTS["IP_PROTO_UDP"][1] == wire.IP_PROTO_UDP
    for flag in wire.Flag:
        assert CONSTS[f"FLAG_{flag.name}"] == (4, int(flag))
    for op in wire.Opcode:
        assert CONSTS[f"OP_{op.name}"] == (8, int(op))


def test_switch_constants() -> None:
    assert DEFS["INA_SLOTS"] == constants.INA_SLOTS
    assert DEFS["INA_PORTS"] == constants.INA_PORTS
    assert DEFS["INA_DROP_REASONS"] == constants.INA_DROP_REASONS == len(constants.DropReason)
    assert DEFS["INA_EVENTS"] == constants.INA_EVENTS == len(constants.Event)
    assert CONSTS["STATE_READY"][1] == constants.STATE_READY
    assert CONSTS["STATE_OVERFLOW"][1] == constants.STATE_OVERFLOW
    drops = {k[5:]: v for k, (_, v) in CONSTS.items() if k.startswith("DROP_")}
    assert drops == {r.name: int(r) for r in constants.DropReason}
    events = {k[3:]: v for k, (_, v) in CONSTS.items() if k.startswith("EV_")}
    assert events == {e.name: int(e) for e in constants.Event}


def test_protocol_doc_lists_every_drop_reason_and_event() -> None:
    """docs/protocol.md's table of drop reasons (section 9) and its list of events are
    p4/constants.py's: a reason or event added there is documented too."""
    doc = (ROOT / "docs" / "protocol.md").read_text()
    table = doc[doc.index("## 9. Drop reasons") :].split("\n\n")[1]
    cells = re.findall(r"\| (\d+) \| (\w+) ", table)
    assert sorted((int(n), name) for n, name in cells) == [
        (int(r), r.name) for r in constants.DropReason if r != constants.DropReason.NONE
    ]
    events = doc[doc.index("Events are counted in `ina_events`:") :].split("\n\n")[0]
    assert re.findall(r"\b([A-Z][A-Z_]+)\b", events) == [e.name for e in constants.Event]


def test_committed_p4info_matches_source() -> None:
    """What p4c would emit (read from the source and its @ids) equals the committed P4Info."""
    diffs = p4info_diff(p4source.p4info_from_source(SRC), load_p4info().message)
    assert diffs == []


def test_every_object_is_id_pinned() -> None:
    info = p4source.p4info_from_source(SRC)
    n_objects = sum(
        len(x)
        for x in (info.tables, info.actions, info.counters, info.direct_counters, info.registers)
    )
    declared = (
        len(re.findall(r"\btable\s+\w+\s*\{", SRC))
        + len(re.findall(r"\baction\s+\w+\s*\(", SRC))
        + len(re.findall(r"\b(?:direct_)?counter\(", SRC))
        + len(re.findall(r"\bregister<", SRC))
    )
    assert SRC.count("@id(") == n_objects == declared == 26


def test_softswitch_serves_the_same_objects() -> None:
    """The softswitch's tables and counters are exactly the P4Info's, with the same sizes,
    defaults and match kinds (its state is built from the P4Info); the counters' sizes are the
    constants the compiled engine lays its counter array out by; its registers are the
    Aggregation control's, cell fields (`CellFields`) and all."""
    p4info = load_p4info()
    pipe = Pipeline()
    assert {t.name: t.size for t in p4info.tables.values()} == {
        n: t.size for n, t in pipe.tables.items()
    }
    assert {c.preamble.name: c.size for c in p4info.message.counters} == {
        n: c.size for n, c in pipe.counters.items()
    }
    const_default = {
        t.preamble.name: p4info.actions[t.const_default_action_id].alias
        for t in p4info.message.tables
        if t.const_default_action_id
    }
    assert const_default == {n: t.default.name for n, t in pipe.tables.items() if t.const_default}
    assert {n: t.default.name for n, t in pipe.tables.items()} == {
        "InaIngress.loss.ina_loss": "no_loss",
        "InaIngress.agg.ina_job": "miss",
        "InaIngress.agg.ina_child": "miss",
        "InaIngress.fwd.ipv4_lpm": "drop",
        "InaEgress.rewrite.ina_egress": "not_host",
    }
    assert [n for n, t in pipe.tables.items() if isinstance(t, LpmTable)] == [
        "InaIngress.fwd.ipv4_lpm"
    ]
    sizes = {c.alias: c.size for c in p4info.counters.values()}
    assert sizes == {
        "ina_events": constants.INA_EVENTS,
        "port_rx": constants.INA_PORTS,
        "ina_drops": constants.INA_DROP_REASONS,
        "port_tx": constants.INA_PORTS,
    }
    regs = {r.preamble.name.rsplit(".", 1)[1]: r for r in p4info.message.registers}
    cells = 2 * constants.INA_SLOTS
    assert {f"reg_{name}" for name in CellFields._fields} | {"reg_lanes", "reg_owner"} == set(regs)
    for name in CellFields._fields:
        assert regs[f"reg_{name}"].size == cells == len(getattr(pipe.registers, name))
        assert regs[f"reg_{name}"].type_spec.bitstring.bit.bitwidth <= 32  # an int64 column
    assert regs["reg_lanes"].size == pipe.registers.lanes.size == cells * wire.K
    assert regs["reg_lanes"].type_spec.bitstring.bit.bitwidth == wire.LANE_BITS
    assert regs["reg_bitmap"].type_spec.bitstring.bit.bitwidth == wire.MAX_FANIN
    assert MAX_RANKS == wire.MAX_FANIN  # a topology's host: at most one bitmap of ranks


def test_ina_child_knows_a_child_by_port_and_udp_port() -> None:
    """ina_child's key is (job, tree, ingress port, UDP source port), the widths the compiled
    data plane packs it in (`pack_child_key`); the UDP port is the header's srcPort."""
    table = load_p4info().table("ina_child")
    assert [(f.name, f.bitwidth) for f in table.fields] == [
        ("hdr.ina.job_id", 16),
        ("hdr.ina.tree_id", 8),
        ("standard_metadata.ingress_port", CHILD_PORT_BITS),
        ("udp_port", 16),
    ]
    assert re.search(r"hdr\.udp\.srcPort\s*:\s*exact\s*@name\(\"udp_port\"\)", SRC)
    assert pack_child_key(0xFFFF, 0xFF, 0x1FF, 0xFFFF) == (1 << 49) - 1


def test_slot_owner_layout() -> None:
    """A slot's owner is job_id ++ epoch ++ run, with run the top bits of seq that the client
    fills (wire.RUN_SHIFT), epoch the controller's (MAX_EPOCH), in a register per slot that the
    softswitch mirrors."""
    assert "meta.owner_key = hdr.ina.job_id ++ meta.epoch ++ hdr.ina.seq[31:16];" in SRC
    assert wire.RUN_SHIFT == 16 and wire.MAX_RUN == 2 ** (32 - wire.RUN_SHIFT) - 1
    p4info = load_p4info()
    epoch = {p.name: p.bitwidth for p in p4info.action("agg_node").params}["epoch"]
    assert 2**epoch - 1 == MAX_EPOCH
    owner = next(r for r in p4info.message.registers if r.preamble.name.endswith("reg_owner"))
    assert owner.type_spec.bitstring.bit.bitwidth == 16 + epoch + (32 - wire.RUN_SHIFT)
    assert owner.size == constants.INA_SLOTS == len(Pipeline().registers.owner)


def test_host_rewrite_sets_both_addresses() -> None:
    """to_host(dmac, dip, smac, sip): results leave to the host, from the switch."""
    params = [(p.name, p.bitwidth) for p in load_p4info().action("to_host").params]
    assert params == [("dmac", 48), ("dip", 32), ("smac", 48), ("sip", 32)]
