"""Scapy layers for INA, built from common.wire (never a second copy of the format).

from inaemu.common.scapy_ina import INA
pkt = Ether() / IP() / UDP(dport=INA_UDP_PORT) / INA(job_id=1, values=[1, 2, 3])
INA in Ether(bytes(pkt))   # True: bound to the INA UDP port both ways
"""

from __future__ import annotations

from typing import Any

from scapy.fields import BitField, FieldListField, SignedIntField
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from inaemu.common.wire import INA_HEADER_FIELDS, INA_UDP_PORT, INA_VERSION, K

_DEFAULTS = {"version": INA_VERSION, "lanes": K, "contrib": 1}


class INA(Packet):
    """INA header followed by exactly K signed 32-bit lanes (shorter lists are zero-padded)."""

    name = "INA"
    fields_desc = [
        *(BitField(name, _DEFAULTS.get(name, 0), bits) for name, bits in INA_HEADER_FIELDS),
        FieldListField("values", [], SignedIntField("value", 0), count_from=lambda _pkt: K),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        header_len = sum(bits for _, bits in INA_HEADER_FIELDS) // 8
        lanes = pkt[header_len:]
        if len(lanes) > 4 * K:
            raise ValueError(f"INA carries at most {K} lanes, got {len(lanes) // 4}")
        return pkt[:header_len] + lanes + b"\0" * (4 * K - len(lanes)) + pay

    def mysummary(self) -> Any:
        return self.sprintf(
            "INA v%version% flags=%flags% op=%opcode% job=%job_id% tree=%tree_id% "
            "slot=%slot% seq=%seq% contrib=%contrib%"
        )


bind_layers(UDP, INA, dport=INA_UDP_PORT)
bind_layers(UDP, INA, sport=INA_UDP_PORT)
