"""P4Runtime values: bytestrings, 128-bit election ids, and state errors as P4Runtime failures.

The bottom layer of the softswitch's P4Runtime server (softswitch/p4runtime/server.py); it knows
nothing of the P4Info or the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from finsy.proto.p4.v1 import p4runtime_pb2

from inaemu.p4.info import P4RuntimeFailure, bounded, invalid
from inaemu.softswitch.state import StateError

__all__ = [
    "ERROR_SPACE",
    "Malformed",
    "decode_bytes",
    "encode_bytes",
    "from_state_error",
    "lenient",
    "to_u128",
    "u128",
]

ERROR_SPACE = "inaemu-softswitch-v1model"  # the `space` of the p4runtime Errors we send


@dataclass(frozen=True)
class Malformed:
    """A request that did not parse (stands in for it, so the server can say INVALID_ARGUMENT)."""

    kind: str  # the message type, e.g. "StreamMessageRequest"
    error: str

    def failure(self) -> P4RuntimeFailure:
        return invalid(f"malformed {self.kind}: {bounded(self.error, 200, quote=False)}")


def lenient(message_type: Any) -> Callable[[bytes], Any]:
    """A gRPC request deserializer that returns `Malformed` instead of raising.

    gRPC's own handling of a request that fails to deserialize ends the RPC with INTERNAL and,
    on a StreamChannel, can send a second status when the handler ends, which leaves the call
    unfinished and `grpc.Server.stop()` waiting for it forever. With this deserializer the
    handler sees the problem and ends the RPC once, with INVALID_ARGUMENT.
    """
    name = message_type.DESCRIPTOR.name

    def parse(data: bytes) -> Any:
        try:
            return message_type.FromString(data)
        except Exception as err:  # DecodeError, and whatever else protobuf raises on garbage
            return Malformed(name, str(err) or type(err).__name__)

    return parse


def from_state_error(err: StateError) -> P4RuntimeFailure:
    """The failure for a change the pipeline state refused (its error names the status code)."""
    return P4RuntimeFailure(grpc.StatusCode[err.code], str(err))


# ---------------------------------------------------------------------- bytestrings


def decode_bytes(value: bytes, bitwidth: int, what: str) -> int:
    """A P4Runtime bytestring (canonical or with leading zeros) that must fit `bitwidth` bits."""
    if not value:
        raise invalid(f"{what}: empty bytestring; send at least one byte")
    number = int.from_bytes(value, "big")
    if number >> bitwidth:
        shown = f"{number:#x}" if len(value) <= 16 else bounded(value)
        raise invalid(
            f"{what}: value {shown} does not fit in {bitwidth} bits "
            f"(maximum {(1 << bitwidth) - 1:#x})"
        )
    return number


def encode_bytes(value: int) -> bytes:
    """The canonical bytestring of a non-negative integer (the shortest, at least one byte)."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def u128(value: p4runtime_pb2.Uint128) -> int:
    """The integer of a P4Runtime Uint128 (election ids)."""
    return (value.high << 64) | value.low


def to_u128(value: int) -> p4runtime_pb2.Uint128:
    """The P4Runtime Uint128 of a non-negative integer below 2**128."""
    return p4runtime_pb2.Uint128(high=value >> 64, low=value & 0xFFFFFFFFFFFFFFFF)
