"""Switch-internal constants mirrored from p4/include/defines.p4 (tests check they agree)."""

from __future__ import annotations

import enum
from pathlib import Path

INA_SLOTS = 1024  # aggregation slots shared by all jobs' pools (INA_SLOTS in defines.p4)
INA_PORTS = 512
DROP_PORT = 511  # v1model/bmv2 drop port (egress_spec after mark_to_drop)

STATE_READY = 0x1
STATE_OVERFLOW = 0x2

P4_DIR = Path(__file__).resolve().parent  # the P4 sources, also inside an installed package
P4INFO_PATH = P4_DIR / "ina.p4info.txt"


class DropReason(enum.IntEnum):
    """Index into the ina_drops counter."""

    NONE = 0
    TRUNCATED = 1
    BAD_VERSION = 2
    BAD_OPCODE = 3
    BAD_LANES = 4
    UNKNOWN_JOB = 5
    SLOT_RANGE = 6
    NOT_MEMBER = 7
    UNEXPECTED_RESULT = 8
    STALE = 9  # a result or contribution for a use of the cell that is not current
    DUPLICATE = 10
    LOSS = 11
    NO_ROUTE = 12
    TTL_EXPIRED = 13
    NOT_IPV4 = 14
    BAD_IPV4 = 15
    AHEAD = 16  # a child moved to a slot's other set before its round there completed


INA_DROP_REASONS = len(DropReason)  # the ina_drops counter's size


class Event(enum.IntEnum):
    """Index into the ina_events counter."""

    CONTRIBUTION = 0
    FIRST = 1
    COMPLETE_ROOT = 2
    COMPLETE_UP = 3
    RETX_REPLY = 4
    RETX_UP = 5
    PARENT_RESULT = 6
    OVERFLOW = 7
    TAKEOVER = 8  # a new owner (job, epoch, run) cleared a slot (lazy reset)


INA_EVENTS = len(Event)  # the ina_events counter's size
