"""Allreduce schedules as data: what every host collective (ring, halving-doubling, BiGraph
HDRM, MultiTree) is, independent of how it is executed or checked.

A `Schedule` all-reduces an array held by `n_ranks` ranks. The array is cut into `n_chunks`
nearly equal chunks (`chunk_bounds`); a schedule is a list of steps, and a step a list of
`Transfer`s that run at the same time. A transfer sends chunks [lo, hi) of rank `src`'s buffer
as it was at the start of the step to rank `dst`, which then either

- `Op.REDUCE`: adds them into its own chunks [lo, hi), or
- `Op.COPY`: replaces its chunks [lo, hi) with them.

Ranks are numbered 0..n_ranks-1; `hosts` names the topology host of each rank (rank order),
so that a checker can route transfers and an executor can find its peers. A step's transfers
are independent of each other's results: every rank sends what it held when the step began.

Schedules are plain data, and round-trip through JSON (`to_json`, `from_json`), so that a
launcher can compute one schedule and hand the same file to every worker.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inaemu.topology.model import TopologyError, read_json

SCHEDULE_FORMAT = 1  # the "format" of to_json's document; from_json refuses any other
# The most chunks a schedule may cut its array into: a rank per chunk for the most workers a
# job has (a ring over 65,535 ranks), and a bound for whatever holds a value per chunk (the
# executor's chunk bounds, the checker's state). A file asking for 10^15 hung the worker.
MAX_CHUNKS = 1 << 16


class ScheduleError(ValueError):
    """A schedule that is malformed, or does not all-reduce: the message says what and where."""


class Op(enum.Enum):
    REDUCE = "reduce"  # dst[lo:hi] += src[lo:hi]
    COPY = "copy"  # dst[lo:hi] = src[lo:hi]


@dataclass(frozen=True)
class Transfer:
    src: int
    dst: int
    lo: int  # first chunk
    hi: int  # one past the last chunk
    op: Op

    @property
    def n_chunks(self) -> int:
        return self.hi - self.lo


Step = tuple[Transfer, ...]


@dataclass(frozen=True)
class Schedule:
    algo: str  # e.g. "ring", "hd", "hdrm", "multitree"
    hosts: tuple[str, ...]  # the topology host of each rank
    n_chunks: int
    steps: tuple[Step, ...]

    @property
    def n_ranks(self) -> int:
        return len(self.hosts)

    def transfers(self) -> Iterator[tuple[int, Transfer]]:
        """(step index, transfer) for every transfer, in step order."""
        for i, step in enumerate(self.steps):
            for t in step:
                yield i, t

    def validate(self) -> Schedule:
        """Raise `ScheduleError` unless every transfer names two different ranks and a
        non-empty chunk range within the array; returns self."""
        if self.n_ranks < 1:
            raise ScheduleError(f"{self.algo}: no ranks")
        if len(set(self.hosts)) != self.n_ranks:
            raise ScheduleError(f"{self.algo}: a host holds two ranks: {list(self.hosts)}")
        if not 1 <= self.n_chunks <= MAX_CHUNKS:
            raise ScheduleError(
                f"{self.algo}: n_chunks is {self.n_chunks}, not within 1..{MAX_CHUNKS:,}"
            )
        for i, t in self.transfers():
            where = f"{self.algo}, step {i}: {t.src}->{t.dst} chunks [{t.lo}, {t.hi})"
            if not (0 <= t.src < self.n_ranks and 0 <= t.dst < self.n_ranks):
                raise ScheduleError(f"{where}: rank out of 0..{self.n_ranks - 1}")
            if t.src == t.dst:
                raise ScheduleError(f"{where}: a rank sends to itself")
            if not 0 <= t.lo < t.hi <= self.n_chunks:
                raise ScheduleError(f"{where}: not a non-empty range of 0..{self.n_chunks}")
        return self

    def to_json(self) -> dict[str, Any]:
        return {
            "format": SCHEDULE_FORMAT,
            "algo": self.algo,
            "hosts": list(self.hosts),
            "n_chunks": self.n_chunks,
            "steps": [
                [[t.src, t.dst, t.lo, t.hi, t.op.value] for t in step] for step in self.steps
            ],
        }

    @classmethod
    def from_json(cls, data: Any, *, source: str = "schedule") -> Schedule:
        """The schedule of a `to_json` document; `ScheduleError` naming `source` otherwise."""
        try:
            if data.get("format") != SCHEDULE_FORMAT:
                raise ScheduleError(
                    f"{source}: format {data.get('format')!r}, expected {SCHEDULE_FORMAT}"
                )
            steps = tuple(
                tuple(
                    Transfer(int(s), int(d), int(lo), int(hi), Op(op)) for s, d, lo, hi, op in step
                )
                for step in data["steps"]
            )
            hosts = tuple(str(h) for h in data["hosts"])
            sched = cls(str(data["algo"]), hosts, int(data["n_chunks"]), steps)
        except ScheduleError:
            raise
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ScheduleError(f"{source}: not a schedule ({exc!r})") from None
        try:
            return sched.validate()
        except ScheduleError as exc:
            raise ScheduleError(f"{source}: {exc}") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json()) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Schedule:
        """A schedule file, read with the same bounds as every JSON input (`read_json`)."""
        try:
            data = read_json(Path(path), "schedule")
        except TopologyError as exc:
            raise ScheduleError(f"cannot read a schedule: {exc}") from None
        return cls.from_json(data, source=str(path))


def chunk_bounds(size: int, n_chunks: int) -> list[tuple[int, int]]:
    """[start, end) element offsets of each of `n_chunks` chunks of an array of `size`
    elements: the first size mod n_chunks chunks are one element longer (some may be empty
    when size < n_chunks)."""
    if n_chunks < 1 or size < 0:
        raise ValueError(f"chunk_bounds({size}, {n_chunks}): need size >= 0, n_chunks >= 1")
    base, extra = divmod(size, n_chunks)
    bounds, start = [], 0
    for c in range(n_chunks):
        end = start + base + (1 if c < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def element_range(size: int, n_chunks: int, lo: int, hi: int) -> tuple[int, int]:
    """[start, end) element offsets of chunks [lo, hi) of an array of `size` elements."""
    bounds = chunk_bounds(size, n_chunks)
    return bounds[lo][0], bounds[hi - 1][1]


def ranks_of(hosts: Sequence[str]) -> dict[str, int]:
    return {h: r for r, h in enumerate(hosts)}
