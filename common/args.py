"""Command-line argument types every inaemu program shares, and a parser that refuses in one
line.

Each type states one range once, next to the fact it comes from: a TCP port is 0..65535, a
switch port 0..510 (511 is the drop port), a device id a uint64, a job id and a run id 16
bits, a window 1..32767 slots, seconds finite and positive, a probability in [0, 1], an
array at most `MAX_ELEMENTS` elements. A refusal names the option, what to give and what was
given:

    inaemu demo: argument --grpc-port: expected a TCP port in 0..65535 (0: any free), got '70000'

`ArgumentParser` prints that one line on stderr (not argparse's usage block) and exits with
status 2. The numbers are parsed before anything is created, bound or started.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import NoReturn

from inaemu.common.loopback import WireError, check_wire_dir_path
from inaemu.common.wire import MAX_RUN
from inaemu.p4.constants import DROP_PORT, INA_SLOTS
from inaemu.p4.plan import loss_threshold

MAX_SECONDS = 86_400.0  # timeouts and delays: at most a day (a longer wait is a typo)
MAX_ELEMENTS = 1 << 28  # array elements per worker: 1 GiB of float32
MAX_TREES = 255  # aggregation trees of a job (0: one per root candidate)
MAX_WORKERS = 0xFFFF  # workers of a job: a result's `contrib` (workers summed) is 16 bits
MAX_REPEAT = 1_000_000  # allreduces of one worker process
MAX_REPEATS = 100  # a comparison's --repeat: runs of each algorithm at each size
MAX_MODEL_BYTES = 1 << 50  # an array in a model (nothing allocated): at most a PiB
MAX_MODEL_MBIT = 1e9  # a link's rate in a model: at most a Pbit/s
SIZE_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}  # elements: 64K, 16M
_MAX_DIGITS = 40  # longer numbers are refused before int() (which stops at 4300 digits)


PARSE_ONLY_ENV = "INAEMU_PARSE_ONLY"


class ParseOnly(Exception):
    """Raised by `checks_done` with `INAEMU_PARSE_ONLY=1`: every check before it passed and
    nothing was done; the command catches it and ends as `parse_only` does."""


def parse_only_requested() -> bool:
    """Whether `INAEMU_PARSE_ONLY=1` asks for checks only (see `parse_only`)."""
    return os.environ.get(PARSE_ONLY_ENV) == "1"


def checks_done() -> None:
    """Where a command's checks end deep inside it and its work begins: `ParseOnly` with
    `INAEMU_PARSE_ONLY=1`, else nothing."""
    if parse_only_requested():
        raise ParseOnly


def parse_only(prog: str) -> bool:
    """Whether to stop here, having checked the command line and the files it names, because
    `INAEMU_PARSE_ONLY=1` is set (then it says so in one line on stdout). Every inaemu command
    calls this once its checks are done and before it creates, binds or starts anything, so
    that a documented command line can be checked without running it
    (tests/test_docs_commands.py)."""
    if not parse_only_requested():
        return False
    print(f"{prog}: arguments checked, nothing run ({PARSE_ONLY_ENV}=1)", flush=True)
    return True


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with one-line refusals: `<prog>: <message>` on stderr, exit 2.
    Subparsers (`add_subparsers().add_parser`) are of this class too."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)


def refuse(expected: str, text: str) -> NoReturn:
    raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")


def _int(text: str) -> int | None:
    t = text.strip()
    if len(t) > _MAX_DIGITS:
        return None
    try:
        return int(t)
    except ValueError:
        return None


@dataclass(frozen=True)
class Integer:
    """An integer in lo..hi, `what` it is ("a TCP port"), `note` after the range."""

    lo: int
    hi: int
    what: str = "an integer"
    note: str = ""

    @property
    def expected(self) -> str:
        note = f" ({self.note})" if self.note else ""
        return f"{self.what} in {self.lo}..{self.hi}{note}"

    def __call__(self, text: str) -> int:
        value = _int(text)
        if value is None or not self.lo <= value <= self.hi:
            refuse(self.expected, text)
        return value


@dataclass(frozen=True)
class Real:
    """A finite number between lo and hi, each end included unless open (`(0, 1]`)."""

    lo: float
    hi: float
    what: str = "a number"
    lo_open: bool = False
    hi_open: bool = False
    note: str = ""

    @property
    def expected(self) -> str:
        left, right = "(" if self.lo_open else "[", ")" if self.hi_open else "]"
        note = f" ({self.note})" if self.note else ""
        return f"{self.what} in {left}{self.lo:g}, {self.hi:g}{right}{note}"

    def __call__(self, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            refuse(self.expected, text)
        if not math.isfinite(value):
            refuse(self.expected, text)
        above = value > self.lo if self.lo_open else value >= self.lo
        below = value < self.hi if self.hi_open else value <= self.hi
        if not (above and below):
            refuse(self.expected, text)
        return value


TCP_PORT = Integer(0, 65535, "a TCP port", "0: any free")
UDP_PORT = Integer(1, 65535, "a UDP port")
SWITCH_PORT = Integer(0, DROP_PORT - 1, "a switch port", f"{DROP_PORT} is the drop port")
DEVICE_ID = Integer(0, 2**64 - 1, "a P4Runtime device id")
JOB_ID = Integer(0, 0xFFFF, "a job id")
RUN_ID = Integer(0, MAX_RUN, "a run id")
WINDOW = Integer(1, INA_SLOTS, "a number of slots")  # a pool fits in one switch's slots
TREES = Integer(0, MAX_TREES, "a number of trees", "0: one per root candidate")
SEED = Integer(0, 2**64 - 1, "a seed")
ELEMENTS = Integer(1, MAX_ELEMENTS, "a number of elements")
ARRAY = Integer(0, MAX_ELEMENTS, "a number of elements")  # a worker's array: may be empty
REPEAT = Integer(1, MAX_REPEAT, "a number of allreduces")
WORKERS = Integer(1, MAX_WORKERS, "a number of workers")
RANK = Integer(0, MAX_WORKERS - 1, "a rank")
SECONDS = Real(0.0, MAX_SECONDS, "seconds", lo_open=True)
INTERVAL = Real(0.0, MAX_SECONDS, "seconds", note="0: none")  # between progress lines
MODEL_BYTES = Integer(0, MAX_MODEL_BYTES, "a number of bytes")
MODEL_MBIT = Real(0.0, MAX_MODEL_MBIT, "Mbit/s", lo_open=True)
MICROSECONDS = Real(0.0, MAX_SECONDS * 1e6, "microseconds")
PROBABILITY = Real(0.0, 1.0, "a probability")


@dataclass(frozen=True)
class LossRate(Real):
    """A loss probability the switches' loss table can say (`p4.plan.loss_threshold`: a
    rate above 0 that would round to a threshold of 0 is refused, not dropped silently)."""

    def __call__(self, text: str) -> float:
        value = super().__call__(text)
        try:
            loss_threshold(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value


LOSS = LossRate(0.0, 1.0, "a probability")
DENSITY = Real(0.0, 1.0, "a fraction of non-zero elements", lo_open=True)
REPEATS = Integer(1, MAX_REPEATS, "a number of runs")


def elements(text: str) -> int:
    """Elements: 100000, 100_000, 64K (65,536), 16M (16 x 2^20), at most `MAX_ELEMENTS`
    (256M)."""
    m = re.fullmatch(r"\s*(\d[\d_]{0,30})\s*([KMG]?)\s*", text, re.IGNORECASE)
    if m is None or int(m[1]) == 0:
        raise argparse.ArgumentTypeError(f"bad size {text!r}: elements, e.g. 100000, 64K, 16M")
    size = int(m[1]) * SIZE_SUFFIX[m[2].upper()]
    if size > MAX_ELEMENTS:
        raise argparse.ArgumentTypeError(
            f"size {text!r}: at most {MAX_ELEMENTS >> 20}M elements per worker"
        )
    return size


def element_list(text: str) -> list[int]:
    """A comma list of sizes (`elements`), each once, in the order given."""
    sizes = [elements(part) for part in text.split(",")]
    if len(set(sizes)) != len(sizes):
        raise argparse.ArgumentTypeError(f"--sizes {text}: a size is named twice")
    return sizes


def positive(what: str, hi: int) -> Integer:
    """A count 1..hi of `what` ("workers")."""
    return Integer(1, hi, f"a number of {what}")


def port_list(text: str) -> list[int]:
    """Switch ports as a list: '1-4,7' -> [1, 2, 3, 4, 7]; each port once, every range
    ascending, every port a `SWITCH_PORT` (checked before a range is expanded)."""
    ports: list[int] = []
    for part in text.split(","):
        lo_text, dash, hi_text = part.strip().partition("-")
        lo, hi = _int(lo_text), _int(hi_text) if dash else _int(lo_text)
        if lo is None or hi is None:
            refuse("switch ports such as 1-4,7", text)
        for p in (lo, hi):
            if not SWITCH_PORT.lo <= p <= SWITCH_PORT.hi:
                raise argparse.ArgumentTypeError(f"port {p} is not {SWITCH_PORT.expected}")
        if hi < lo:
            raise argparse.ArgumentTypeError(f"the range {part.strip()} is empty: write {hi}-{lo}")
        for p in range(lo, hi + 1):  # at most 511 ports before one is named twice
            if p in ports:
                raise argparse.ArgumentTypeError(f"port {p} is named twice in {text!r}")
            ports.append(p)
    return ports


def listen_address(text: str) -> str:
    """A gRPC address to listen on: "host:port" with a `TCP_PORT` (0: any free), or a
    "unix:PATH" socket."""
    if text.startswith("unix:") and len(text) > len("unix:"):
        return text
    host, colon, port = text.rpartition(":")
    value = _int(port) if colon and host else None
    if value is None or not 0 <= value <= 65535 or not port.strip().isdigit():
        refuse('an address "host:port" with a port in 0..65535 (0: any free), or unix:PATH', text)
    return text


def wire_dir(text: str) -> str:
    """A directory for loopback wires whose path leaves room for the wire ends' socket paths
    (checked without creating anything)."""
    try:
        check_wire_dir_path(text)
    except WireError as exc:
        raise argparse.ArgumentTypeError(exc.strerror or str(exc)) from None
    return text


def names(text: str) -> tuple[str, ...]:
    """A comma-separated list of names, none empty: 'h1,h2' -> ('h1', 'h2')."""
    items = tuple(n.strip() for n in text.split(","))
    if not all(items):
        refuse("names separated by commas, none empty, e.g. h1,h2", text)
    return items


def wall_clock(text: str) -> float:
    """A time on the wall clock (Unix seconds), at most `MAX_SECONDS` from now."""
    expected = "a wall-clock time in Unix seconds, at most a day from now"
    try:
        value = float(text)
    except ValueError:
        refuse(expected, text)
    if not (math.isfinite(value) and 0 <= value <= time.time() + MAX_SECONDS):
        refuse(expected, text)
    return value


def file_descriptor(text: str) -> int:
    """An open file descriptor of this process."""
    fd = Integer(0, 2**31 - 1, "an open file descriptor")(text)
    try:
        os.fstat(fd)
    except OSError:
        refuse("an open file descriptor of this process", text)
    return fd
