"""What an emulated network takes in memory, and a refusal when this machine cannot hold it:
`inaemu demo` (and its comparison) and `inaemu mininet` run every switch and every worker as a
process of this machine, so a topology within the commands' caps (64 switches, 64 workers)
can still be more than the machine has: `demo --topo torus:8x8` starts 130 processes and
passed 12 GB in half a minute.

The figures are each process's private memory (what it alone holds: `Private_Clean` +
`Private_Dirty` of /proc/PID/smaps_rollup, at its peak), measured once on x86-64 Linux with
Python 3.11, numpy 2.4, numba 0.68 and torch 2.13, sampled every 0.2 s through `inaemu demo
--topo leaf-spine:2x2x2` at 10,000, 200,000 and 1,048,576 elements per worker, `--topo
torus:4x4`, and the one-switch demo at 262,144, 1,048,576 and 4,194,304: every softswitch
67-68 MiB whatever the size; a worker 62-66 MiB plus 28 bytes per element of its array (its
input, its result, the codec's buffers), or 62-68 bytes where it checks its own result
against the reference (the one-switch demo); the demo's own process 79-82 MiB, plus 24 bytes
per element of all workers where it checks every result itself (over a topology, the
comparison; 25-26 bytes measured again in November 2026, in a fresh clone's CI run: 138.9
MiB at 2 x 1,048,576 elements); the libraries they share (numpy, numba's LLVM, grpc: RSS less
private) about 97 MiB, counted once. bmv2 (`simple_switch_grpc` with ina.p4 loaded): 133
MiB. A process that imports torch (the gloo baseline on Mininet) 203 MiB before its arrays.
Each figure below is rounded up; `tests/test_footprint.py` samples a real demo of each kind
again and holds its processes to these.

The estimate is compared with what the kernel says a new program can have without swapping
(`MemAvailable` of /proc/meminfo); a network that does not fit is refused before anything
starts, with the estimate, its parts and what the machine has. `--no-memory-check` skips
the check for a user who knows better (a machine that swaps, say).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MIB = 1 << 20
SOFTSWITCH_MIB = 70  # python -m inaemu.softswitch, its compiled data plane loaded
BMV2_MIB = 140  # simple_switch_grpc with ina.p4
WORKER_MIB = 70  # a worker process (demo, comparison, Mininet): client, codecs, kernels loaded
WORKER_BYTES_PER_ELEMENT = 32  # and per element of its array
CHECKING_WORKER_BYTES_PER_ELEMENT = 72  # ... if it checks its own result (one-switch demo)
TORCH_WORKER_MIB = 210  # a worker that imports torch (the gloo baseline)
PARENT_MIB = 90  # the command's own process (the demo's; the Mininet runner's)
PARENT_BYTES_PER_ELEMENT = 28  # per element of all workers: every result checked here
SHARED_MIB = 100  # the libraries every one of those processes maps, counted once
NODE_SHELL_MIB = 5  # Mininet's shell of each node (bash under mnexec)
MEMINFO = Path("/proc/meminfo")
OVERRIDE = "--no-memory-check"


class FootprintError(ValueError):
    """The network would not fit in this machine's memory; the message says by how much."""


@dataclass(frozen=True)
class Part:
    what: str  # "softswitch processes", or one thing: "the demo itself"
    count: int
    mib: float  # each

    @property
    def total(self) -> float:
        return self.count * self.mib

    def __str__(self) -> str:
        if self.what.startswith("the "):
            return f"{self.what} {self.mib:,.0f} MiB"
        return f"{self.count:,} {self.what} x {self.mib:,.0f} MiB"


def worker_mib(elements: int, *, torch: bool = False, checks: bool = False) -> float:
    """One worker process with an array of `elements` (`checks`: its own result too)."""
    base = TORCH_WORKER_MIB if torch else WORKER_MIB
    per = CHECKING_WORKER_BYTES_PER_ELEMENT if checks else WORKER_BYTES_PER_ELEMENT
    return base + elements * per / MIB


def parent_mib(elements_in_all: int) -> float:
    """The command's own process, which checks `elements_in_all` results' elements."""
    return PARENT_MIB + elements_in_all * PARENT_BYTES_PER_ELEMENT / MIB


def demo_parts(
    switches: int, workers: int, elements: int, *, workers_check: bool = False
) -> list[Part]:
    """`inaemu demo` (or its comparison): a softswitch process per switch, a worker process
    per worker with `elements` each, the demo's own process, the shared libraries.
    `workers_check`: each worker checks its own result (the one-switch demo), else the demo's
    process checks them all."""
    return [
        Part("softswitch processes", switches, SOFTSWITCH_MIB),
        Part("workers", workers, worker_mib(elements, checks=workers_check)),
        Part("the demo itself", 1, parent_mib(0 if workers_check else workers * elements)),
        Part("the shared libraries", 1, SHARED_MIB),
    ]


def mininet_parts(
    switch: str, switches: int, hosts: int, workers: int, elements: int, *, torch: bool
) -> list[Part]:
    """`inaemu mininet`: a switch process per switch (softswitch or bmv2), a shell per node,
    a worker process per worker (one that imports torch if gloo runs), the runner."""
    if switch == "bmv2":
        switch_part = Part("bmv2 processes", switches, BMV2_MIB)
    else:
        switch_part = Part("softswitch processes", switches, SOFTSWITCH_MIB)
    return [
        switch_part,
        Part("node shells", switches + hosts, NODE_SHELL_MIB),
        Part("workers", workers, worker_mib(elements, torch=torch)),
        Part("the runner itself", 1, parent_mib(workers * elements)),
        Part("the shared libraries", 1, SHARED_MIB),
    ]


def mem_available_mib(meminfo: Path | None = None) -> int | None:
    """MemAvailable of /proc/meminfo in MiB (None where the kernel does not say)."""
    try:
        text = (meminfo or MEMINFO).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "MemAvailable":
            fields = value.split()
            if fields and fields[0].isdigit():
                return int(fields[0]) // 1024
    return None


def check_fits(what: str, parts: Sequence[Part], *, hint: str) -> None:
    """`FootprintError` if `parts` need more than this machine has available: the estimate,
    its parts, MemAvailable, and `hint` (what to make smaller) and the override."""
    need = sum(p.total for p in parts)
    have = mem_available_mib()
    if have is None or need <= have:
        return
    shown = ", ".join(str(p) for p in parts if p.count)
    raise FootprintError(
        f"{what} needs about {need:,.0f} MiB of memory ({shown}); this machine has "
        f"{have:,} MiB available (MemAvailable): {hint}, or {OVERRIDE} if you know better"
    )
