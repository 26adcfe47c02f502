"""Bottleneck accounting: what bounded a run's completion time, the modelled links or the
emulator (the processes that emulate switches and hosts, and the machine they share).

Everything here is measured from outside the processes, so it does not depend on how the data
path works:

- **CPU per process** (`CpuMeter`): the CPU time (user + system, every thread) of each switch
  process (softswitch or simple_switch) and each worker process, read from
  `/proc/<pid>/stat` every `SAMPLE_EVERY` seconds (and per thread from
  `/proc/<pid>/task/*/stat` and `schedstat`: its time on a core and its time runnable but
  waiting for one) while the run goes on, and once more when a worker has exited, before it
  is reaped (a zombie keeps its CPU times). Over the run's completion window the CPU seconds
  become a share of one core (`busy`: 1.0 = one core all the time), the threads' waiting a
  share too (`waiting`), and the most a thread ran or waited to run its `demand`: a process
  that the machine starved shows a low `busy` but a full `demand`;
- **the machine**: the share of all its cores busy over that window (`/proc/stat`: every
  process, this run's or anybody's, and the kernel's softirq work that forwards and shapes
  the links), and the cores this run's processes used together;
- **drops outside the pipeline**: the softswitch prints its port drops (frames that found no
  room at a port, frames from a foreign sender) on stderr as they grow (`port_drops` reads
  them from its log); bmv2 counts none, so they are read from the kernel (`Bmv2Drops`: what
  its ports' receive rings had no room for, what its interfaces could not hand on; not its
  own queues between its threads, which nothing counts). A softswitch's frame finds no room
  at a port when the queue in front of the port's link is full: on a shaped Mininet link the
  link drains slower than the switch sends, frames wait in its tc qdisc, charged to the
  port's socket, until that socket's send buffer or the qdisc (`root_qdisc_drops`, from
  `tc -s qdisc`) is full. That is a congested link's egress buffer overflowing, the modelled
  network, so a switch whose links are all shaped has its `tx_dropped` counted as the links'
  (`link_queue_drops`); on an unshaped link or a loopback wire the queue is the receiving
  process's, and a full one is the
  emulator's (`emulator_drops`: what is left);
- **link utilisation** (`link_loads`): each link direction's bytes over the completion time,
  against its shaped rate.

**The rule** (`classify`): the *link floor* of a run is the time the busiest link direction's
bytes need at its shaped rate (the direction whose bytes need the most time at its own rate:
a torus node's host link may be shaped wider), and the *link load* the floor over the
completion time. A run is

- `links`-bound when its link load is at least 1 / `LINK_SLACK` (the completion time within
  `LINK_SLACK` = 1.5x the floor): the links were busy most of the time;
- `emulator`-bound when its links were unshaped (nothing but the emulator can bound it), or
  when the load is lower and something of the emulator was saturated: a tracked process at
  `CPU_BUSY` (90 %) of a core or more, or with a thread that ran or waited to run that much of
  the time (`demand`), the machine's cores `MACHINE_BUSY` (90 %) busy or more, or frames
  dropped at a switch's ports outside the pipeline (`emulator_drops`);
- `unclear` when the load is lower and nothing was saturated (waiting: steps, latency, loss
  recovery); not marked emulator-bound, but the reason says so.

The reason always carries the numbers (which process, how busy, the load), whatever the
verdict.

**`--bw auto`** (`capacity`, `choose_bw`): an unshaped run of each algorithm shows the rate
its busiest link reached when only the emulator limited it (in units of `--bw`: a link shaped
to k times `--bw` counts its bytes / k); links set to `BW_MARGIN` (half) of the slowest such
rate leave the emulator room, so that the links bound the shaped runs. The shaped network is
not the unshaped one (its qdiscs cost the kernel), so the rate is then checked (`check_size`,
`next_bw_all`): one shaped run of every algorithm, each about `CHECK_SECONDS` of link time at
the rate (the slowest is not the only one the emulator may fail: another may load a switch or
the cores differently at the same rate); if the links did not bound each of them, the rate
steps down (`STEP_DOWN` of the lower of the rate and what the busiest link carried, in the
run that asks the lowest) and is checked again, at most `BW_CHECKS` times.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import select
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CPU_BUSY = 0.9  # a process at this share of one core or more is saturated
MACHINE_BUSY = 0.9  # the machine's cores together
LINK_SLACK = 1.5  # completion more than this times the link floor: the links did not bound it
BW_MARGIN = 0.5  # --bw auto: this share of the emulator's measured capacity
BW_CHECKS = 3  # --bw auto: shaped check runs at most
CHECK_SECONDS = 1.0  # --bw auto: a check run's link floor at the rate it checks
STEP_DOWN = 0.7  # --bw auto: a rate the links did not bound -> this share of what it carried
SAMPLE_EVERY = 0.05  # seconds between CPU samples
RULE = (
    "links: the busiest link's bytes at its rate (the link floor) take at least "
    f"1/{LINK_SLACK:g} of the completion time; emulator: links unshaped, or less than that "
    f"while a switch or worker process used {CPU_BUSY:.0%} of a core or more (or a thread of "
    f"it ran or waited to run {CPU_BUSY:.0%} of the time or more), the machine's cores were "
    f"{MACHINE_BUSY:.0%} busy or more, or a switch dropped frames at its ports outside the "
    "pipeline (not in front of a shaped link); unclear: less than that and nothing saturated"
)
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cores() -> int:
    """The cores this process may run on (what the emulator's processes share)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# ---------------------------------------------------------------------- /proc


def _stat_fields(path: str) -> list[str]:
    """The fields of a /proc stat file after the command name, from the state on (the name
    may hold spaces and parentheses)."""
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()


Thread = tuple[float, float, float]  # CPU seconds (ticks), on a CPU (ns), runnable waiting (ns)


def _schedstat(path: str) -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for one) of a task (nanoseconds in
    `/proc/.../schedstat`; (0, 0) where the kernel keeps no scheduler statistics)."""
    try:
        with open(path) as f:
            run, wait = f.read().split()[:2]
        return int(run) / 1e9, int(wait) / 1e9
    except (OSError, ValueError):
        return 0.0, 0.0


def read_process(pid: int) -> tuple[int, float, dict[int, Thread]] | None:
    """(start time in ticks since boot, CPU seconds of the process, per live thread its CPU
    seconds and its seconds on a CPU and waiting for one) of `pid`, or None if it is gone. A
    zombie still reports its CPU."""
    try:
        f = _stat_fields(f"/proc/{pid}/stat")
        start, total = int(f[19]), (int(f[11]) + int(f[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None
    threads: dict[int, Thread] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tids = []
    for tid in tids:
        try:
            t = _stat_fields(f"/proc/{pid}/task/{tid}/stat")
            cpu = (int(t[11]) + int(t[12])) / CLK_TCK
        except (OSError, IndexError, ValueError):
            continue
        threads[int(tid)] = (cpu, *_schedstat(f"/proc/{pid}/task/{tid}/schedstat"))
    return start, total, threads


def read_machine() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores (`/proc/stat`:
    busy is everything but idle and iowait; steal counts as busy)."""
    with open("/proc/stat") as f:
        first = f.readline().split()
    values = [int(v) for v in first[1:9]]  # user nice system idle iowait irq softirq steal
    total = sum(values)
    busy = total - values[3] - values[4]
    return busy / CLK_TCK, total / CLK_TCK


# ---------------------------------------------------------------------- the meter


@dataclass
class ProcessUse:
    """One process over a window."""

    name: str  # "s1", "h2", "worker 3"
    kind: str  # softswitch | bmv2 | worker | capture
    pid: int
    cpu_seconds: float
    busy: float  # CPU seconds / window seconds: 1.0 = one core all the time
    busiest_thread: float  # the same for its busiest thread
    waiting: float = 0.0  # its threads' time runnable but without a core / window seconds
    demand: float = 0.0  # the most any thread was on a core or waiting for one / window

    @property
    def saturated(self) -> bool:
        """It used a core, or one of its threads wanted one (ran or waited to run), at least
        CPU_BUSY of the time."""
        return self.busy >= CPU_BUSY or self.demand >= CPU_BUSY

    def text(self) -> str:
        more = f" and waited {self.waiting:.0%} more for one" if self.waiting >= 0.05 else ""
        return f"{self.name} ({self.kind}) {self.busy:.0%} of a core{more}"


@dataclass
class Usage:
    """The CPU of a run's processes and of the machine over its completion window."""

    window: float  # seconds
    cores: int
    machine_busy: float | None  # share of all cores busy, anybody's work; None: not measured
    processes: list[ProcessUse] = field(default_factory=list)

    @property
    def ours(self) -> float:
        """Cores this run's processes used together."""
        return sum(p.busy for p in self.processes)

    def busiest(self) -> ProcessUse | None:
        return max(self.processes, key=lambda p: p.busy, default=None)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "processes_cores": self.ours}


def _interpolate(series: Sequence[tuple[float, float]], t: float) -> float:
    """The value of a sampled, non-decreasing series at time `t` (linear between samples,
    the first or last sample outside them)."""
    if t <= series[0][0]:
        return series[0][1]
    for (t0, v0), (t1, v1) in itertools.pairwise(series):
        if t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return series[-1][1]


def _machine_share(
    machine: Sequence[tuple[float, float, float]], t0: float, t1: float
) -> float | None:
    """The share of the machine's cores busy over [t0, t1]; a window shorter than the
    kernel's tick (10 ms: `/proc/stat` did not move) is widened to the nearest samples
    around it that did. None: fewer than two samples, or none that moved."""
    if len(machine) < 2:
        return None
    busy = _delta([(t, b) for t, b, _ in machine], t0, t1)
    total = _delta([(t, s) for t, _, s in machine], t0, t1)
    if total <= 0:
        i = max([k for k, m in enumerate(machine) if m[0] <= t0], default=0)
        j = min([k for k, m in enumerate(machine) if m[0] >= t1], default=len(machine) - 1)
        while machine[j][2] - machine[i][2] <= 0 and (i > 0 or j < len(machine) - 1):
            i, j = max(i - 1, 0), min(j + 1, len(machine) - 1)
        busy, total = machine[j][1] - machine[i][1], machine[j][2] - machine[i][2]
    return min(max(busy / total, 0.0), 1.0) if total > 0 else None


def _delta(series: Sequence[tuple[float, float]], t0: float, t1: float) -> float:
    return _interpolate(series, t1) - _interpolate(series, t0)


@dataclass
class _Tracked:
    name: str
    kind: str
    start: int  # the process's start time: a reused pid is not this process
    total: list[tuple[float, float]] = field(default_factory=list)
    threads: dict[int, list[tuple[float, Thread]]] = field(default_factory=dict)
    done: bool = False  # reaped: its pid may be another process's now


class CpuMeter:
    """CPU time of tracked processes and of the machine, sampled on a thread every `every`
    seconds while inside `with`, and whenever `sample()` is called; `usage(t0, t1)` over a
    window of wall-clock time (`time.time()`, the clock the workers' reports use)."""

    def __init__(self, every: float = SAMPLE_EVERY) -> None:
        self.every = every
        self._procs: dict[int, _Tracked] = {}
        self._machine: list[tuple[float, float, float]] = []  # (t, busy, total)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def track(self, pid: int, name: str, kind: str) -> None:
        """Measure `pid` from now on (sampled at once)."""
        got = read_process(pid)
        if got is None:
            return
        with self._lock:
            self._procs[pid] = _Tracked(name, kind, got[0])
        self.sample(pid)

    def finished(self, pid: int) -> None:
        """`pid` exited: one last sample (call it before the process is reaped), then never
        read again (the pid may be reused)."""
        self.sample(pid)
        with self._lock:
            if pid in self._procs:
                self._procs[pid].done = True

    def sample(self, only: int | None = None) -> None:
        """Read every tracked process (or just `only`) and the machine now."""
        now = time.time()
        with self._lock:
            pids = [p for p, x in self._procs.items() if not x.done and only in (None, p)]
        for pid in pids:
            got = read_process(pid)
            with self._lock:
                tracked = self._procs[pid]
                if got is None or got[0] != tracked.start:
                    continue
                tracked.total.append((now, got[1]))
                for tid, sample in got[2].items():
                    tracked.threads.setdefault(tid, []).append((now, sample))
        busy, total = read_machine()
        with self._lock:
            self._machine.append((now, busy, total))

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def __enter__(self) -> CpuMeter:
        self._stop.clear()
        self.sample()
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.sample()

    def usage(self, t0: float, t1: float) -> Usage:
        """CPU over the wall-clock window [t0, t1]."""
        window = max(t1 - t0, 1e-9)
        with self._lock:
            procs = list(self._procs.items())
            machine = list(self._machine)
        out = []
        for pid, x in procs:
            if not x.total:
                continue
            cpu = _interpolate(x.total, t1) - _interpolate(x.total, t0)
            ticks, waits, demands = [], [], []
            for series in x.threads.values():
                d = [_delta([(t, v[i]) for t, v in series], t0, t1) for i in range(3)]
                ticks.append(d[0])
                waits.append(d[2])
                demands.append(d[1] + d[2])
            # the kernel counts in ticks (10 ms): a thread's count may round above its process's
            thread = min(max(ticks, default=0.0), cpu)
            demand = max(max(demands, default=0.0), thread) / window
            use = ProcessUse(x.name, x.kind, pid, cpu, cpu / window, thread / window)
            use.waiting, use.demand = sum(waits) / window, demand
            out.append(use)
        return Usage(window, cores(), _machine_share(machine, t0, t1), out)


def exited(proc: subprocess.Popen[Any]) -> bool:
    """True once `proc` has exited, without reaping it (its /proc entry stays readable)."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped elsewhere
        return True


def wait_exited(proc: subprocess.Popen[Any], timeout: float) -> bool:
    """Wait at most `timeout` seconds for `proc` to exit, without reaping it; True if it has."""
    deadline = time.monotonic() + timeout
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        fd = -1
    try:
        while not exited(proc):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if fd >= 0:
                select.select([fd], [], [], left)
            else:
                time.sleep(min(left, 0.02))
        return True
    finally:
        if fd >= 0:
            os.close(fd)


# ---------------------------------------------------------------------- port drops

# the softswitch's stderr line (softswitch/__main__.py): "... port drops so far: 3 frames found
# no room at a port (tx_dropped), 0 frames from a foreign sender (rx_foreign)"; every
# "<count> ... (<name>)" of the line is read, so a counter added there is read too
_DROPS_LINE = re.compile(r"port drops so far: (.*)$", re.MULTILINE)
_DROP = re.compile(r"(\d+)[^,(]*\((\w+)\)")


def port_drops(log: str) -> dict[str, int]:
    """The softswitch's port drops so far as its log last printed them (none printed: {})."""
    lines = _DROPS_LINE.findall(log)
    return {name: int(n) for n, name in _DROP.findall(lines[-1])} if lines else {}


def read_port_drops(path: Path) -> dict[str, int]:
    try:
        return port_drops(path.read_text(errors="replace"))
    except OSError:
        return {}


# `tc -s qdisc show`: "qdisc htb 5: dev s1-eth1 root refcnt 3 ...\n Sent 5560464 bytes 17822 pkt
# (dropped 3, overlimits ...)"; a root qdisc counts what its classes' queues dropped too
_ROOT_QDISC = re.compile(
    r"^qdisc \S+ \S+ dev (\S+) root\b[^\n]*\n\s*Sent \d+ bytes \d+ pkt \(dropped (\d+)",
    re.MULTILINE,
)


def root_qdisc_drops(tc_output: str) -> dict[str, int]:
    """Frames each interface's root qdisc (its queue) dropped, from `tc -s qdisc show`."""
    return {dev: int(n) for dev, n in _ROOT_QDISC.findall(tc_output)}


def link_queue_drops(
    port: Mapping[str, Mapping[str, int]] | None,
    qdisc: Mapping[str, int],
    shaped: Iterable[str],
) -> dict[str, int]:
    """Per switch, the frames a queue in front of a shaped link dropped during a run: all its
    `tx_dropped` (`port`) if every link of the switch is shaped (`shaped`), else what its
    interfaces' qdiscs dropped (`qdisc`)."""
    shaped = set(shaped)
    out = dict(qdisc)
    for sw, counts in (port or {}).items():
        if sw in shaped:
            out[sw] = max(counts.get("tx_dropped", 0), qdisc.get(sw, 0))
    return out


def emulator_drops(
    port: Mapping[str, Mapping[str, int]], queues: Mapping[str, int]
) -> dict[str, dict[str, int]]:
    """Per switch, its port drops (`port_drops`, during a run) less what its interfaces'
    queues dropped (`queues`, per switch, during the run: the shaped links' own buffers, the
    modelled network's drops): what the emulator dropped."""
    out: dict[str, dict[str, int]] = {}
    for sw, counts in port.items():
        mine = dict(counts)
        if "tx_dropped" in mine:
            mine["tx_dropped"] = max(0, mine["tx_dropped"] - queues.get(sw, 0))
        out[sw] = mine
    return out


def drops_delta(
    before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, int]]:
    """Per switch, what each drop counter grew by between two reads."""
    return {
        sw: {k: v - before.get(sw, {}).get(k, 0) for k, v in counts.items()}
        for sw, counts in after.items()
    }


# the softswitch checks its drop counters every 0.5 s (softswitch/__main__.py): a run's drops
# are in its log this long after the run
DROPS_REPORTED_WITHIN = 0.6


# ---------------------------------------------------------------------- bmv2's port drops

# bmv2 (simple_switch_grpc) counts no drops outside its pipeline and prints none; they are read
# from the kernel instead (`Bmv2Drops`):
# - `rx_ring_dropped`: frames that arrived at a port while bmv2's receive ring was full (its
#   ports are libpcap handles: AF_PACKET sockets with a memory-mapped ring; the kernel counts
#   what found no room in `PACKET_STATISTICS`, which bmv2 never reads, and which reset on
#   every read, so `Bmv2Drops` keeps the totals);
# - `veth_tx_dropped`: frames bmv2 sent that its interface could not hand on (a veth's
#   tx_dropped: the receiving end's backlog was full);
# both the emulator's (a process, or the kernel's work for the cores it shares, too slow).
# Not measured: frames bmv2 drops between its own threads (its queues in front of the
# egress pipeline: nothing of bmv2 counts them), and a send that fails because a shaped
# link's queue is full (that queue counts it: `root_qdisc_drops`, the links').
SOL_PACKET = 263
PACKET_STATISTICS = 6
_PIDFD_GETFD = 438  # the syscall's number, the same on every architecture (Linux 5.6)


def packet_sockets(pid: int) -> dict[int, int]:
    """The AF_PACKET sockets of process `pid`: fd -> the interface index it is bound to
    (0: any), from /proc/PID/fd and /proc/PID/net/packet. {} if the process is gone."""
    try:
        inodes: dict[int, int] = {}
        for line in Path(f"/proc/{pid}/net/packet").read_text().splitlines()[1:]:
            f = line.split()
            inodes[int(f[8])] = int(f[4])  # Inode -> Iface
        out = {}
        for entry in Path(f"/proc/{pid}/fd").iterdir():
            m = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(entry))
            if m and int(m[1]) in inodes:
                out[int(entry.name)] = inodes[int(m[1])]
        return out
    except (OSError, ValueError, IndexError):
        return {}


def ring_drops_since_last_read(pid: int, fd: int) -> int | None:
    """The frames the kernel dropped at socket `fd` of process `pid` since the last read
    (PACKET_STATISTICS' tp_drops; reading resets them), through a duplicate of the socket
    (pidfd_getfd: root, Linux 5.6). None if it cannot be read."""
    import ctypes
    import socket
    import struct

    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        dup = libc.syscall(_PIDFD_GETFD, pidfd, fd, 0)
        if dup < 0:
            return None
        with socket.socket(fileno=dup) as sock:
            raw = sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 12)
        return int(struct.unpack_from("II", raw)[1])
    except OSError:
        return None
    finally:
        os.close(pidfd)


def interface_counter(ifname: str, name: str, netns: str | None = None) -> int:
    """One of the kernel's counters of an interface (/sys/class/net/IF/statistics/NAME; in
    network namespace `netns`, through `ip netns exec`); 0 if there is none."""
    path = f"/sys/class/net/{ifname}/statistics/{name}"
    try:
        if netns is None:
            return int(Path(path).read_text())
        out = subprocess.run(
            ["ip", "netns", "exec", netns, "cat", path], capture_output=True, text=True
        )
        return int(out.stdout) if out.returncode == 0 else 0
    except (OSError, ValueError):
        return 0


class Bmv2Drops:
    """bmv2's drops outside its pipeline so far, per switch (the comment above): totals kept
    across reads, since reading the rings' counters resets them."""

    def __init__(self) -> None:
        self._rings: dict[tuple[int, int], int] = {}

    def read(self, pid: int, interfaces: Iterable[str], netns: str | None = None) -> dict[str, int]:
        """`rx_ring_dropped` of process `pid`'s packet sockets, the total since this object
        first read them, and `veth_tx_dropped` of its `interfaces` (in `netns`), the
        kernel's count."""
        for fd in packet_sockets(pid):
            n = ring_drops_since_last_read(pid, fd)
            if n is not None:
                self._rings[(pid, fd)] = self._rings.get((pid, fd), 0) + n
        ring = sum(n for (p, _), n in self._rings.items() if p == pid)
        tx = sum(interface_counter(i, "tx_dropped", netns) for i in interfaces)
        return {"rx_ring_dropped": ring, "veth_tx_dropped": tx}


# ---------------------------------------------------------------------- links


@dataclass
class LinkLoad:
    """One link direction over a run."""

    link: str  # "h1 -> s1:1"
    bytes: int
    mbit: float | None  # its shaped rate; None: unshaped
    seconds_needed: float | None  # bytes at that rate
    load: float | None  # seconds_needed / the completion time


def link_loads(
    directions: Iterable[tuple[str, int, float | None]], seconds: float
) -> list[LinkLoad]:
    """(link, bytes, Mbit/s or None) of each direction -> its load over `seconds`."""
    out = []
    for name, nbytes, mbit in directions:
        need = nbytes * 8 / (mbit * 1e6) if mbit else None
        load = (
            need / seconds if need is not None and math.isfinite(seconds) and seconds > 0 else None
        )
        out.append(LinkLoad(name, nbytes, mbit, need, load))
    return out


def link_floor(loads: Sequence[LinkLoad]) -> LinkLoad | None:
    """The busiest direction: the one whose bytes need the most time at its rate; None if any
    link is unshaped (then no rate bounds the run)."""
    if not loads or any(x.mbit is None for x in loads):
        return None
    return max(loads, key=lambda x: x.seconds_needed or 0.0)


# ---------------------------------------------------------------------- the rule


@dataclass(frozen=True)
class Bound:
    """What bounded a run (`classify`)."""

    by: str  # links | emulator | unclear | unknown
    reason: str

    @property
    def emulator(self) -> bool:
        return self.by == "emulator"


def _drops_text(drops: Mapping[str, Mapping[str, int]] | None) -> str:
    if not drops:
        return ""
    parts = [
        f"{sw} {', '.join(f'{k} {v:,}' for k, v in counts.items() if v)}"
        for sw, counts in drops.items()
        if any(counts.values())
    ]
    return "; ".join(parts)


def classify(
    seconds: float,
    floor: LinkLoad | None,
    usage: Usage | None,
    drops: Mapping[str, Mapping[str, int]] | None = None,
    *,
    shaped: bool = True,
    queued: int = 0,
) -> Bound:
    """The rule of the module's docstring. `floor`: the busiest link direction (`link_floor`;
    None with `shaped` False: the links had no rate); `usage`: the CPU over the completion
    window (None: not measured); `drops`: per switch, the emulator's port drops during the
    run (`emulator_drops`); `queued`: frames the shaped links' queues dropped (congestion,
    the modelled network's: named in the reason, never blamed on the emulator)."""
    if not math.isfinite(seconds) or seconds <= 0:
        return Bound("unknown", "no completion time")
    busiest = usage.busiest() if usage is not None else None
    saturated = sorted(
        (p for p in (usage.processes if usage else []) if p.saturated), key=lambda p: -p.busy
    )
    causes = [p.text() for p in saturated]
    machine = ""
    if usage is not None and usage.machine_busy is not None:
        machine = (
            f"the machine's {usage.cores} cores {usage.machine_busy:.0%} busy (this run's "
            f"processes {usage.ours:.2f} cores)"
        )
        if usage.machine_busy >= MACHINE_BUSY:
            causes.append(machine)
    dropped = _drops_text(drops)
    if dropped:
        causes.append(f"dropped at switch ports outside the pipeline: {dropped}")
    if not shaped or floor is None or floor.seconds_needed is None:
        what = "; ".join(causes) or "; ".join(
            x for x in (busiest.text() if busiest else "", machine) if x
        )
        return Bound(
            "emulator",
            "links unshaped: only the emulator bounds the time" + (f"; {what}" if what else ""),
        )
    load = floor.seconds_needed / seconds
    link = (
        f"busiest link {floor.link} {load:.0%} of its rate (completion "
        f"{seconds / floor.seconds_needed:.2f}x its floor {floor.seconds_needed:.3g} s)"
    )
    congested = f"; the links' queues dropped {queued:,} frames (congestion)" if queued else ""
    if load >= 1 / LINK_SLACK:
        also = f"; also {', '.join(causes)}" if causes else ""
        return Bound("links", link + congested + also)
    if causes:
        return Bound("emulator", "; ".join(causes) + f"; {link}{congested}")
    what = busiest.text() if busiest else "CPU not measured"
    return Bound(
        "unclear",
        f"{link}{congested}; nothing of the emulator saturated (busiest process {what}"
        + (f", {machine}" if machine else "")
        + ", no drops outside the pipeline): waiting (steps, latency, loss recovery)",
    )


# ---------------------------------------------------------------------- --bw auto


@dataclass(frozen=True)
class Capacity:
    """The rate at which one algorithm's unshaped run kept its busiest link busy: the `--bw`
    at which the links would have carried that run exactly in its time."""

    algo: str
    size: int
    seconds: float
    link: str  # the busiest direction, in units of --bw
    mbit: float  # in units of --bw (a link shaped to k x --bw: its bytes / k)


def capacity(
    algo: str,
    size: int,
    seconds: float,
    directions: Iterable[tuple[str, int, float | None]],
) -> Capacity | None:
    """From an unshaped run: (link, bytes, scale) of each direction, where scale is the link's
    rate in units of `--bw` (None: a rate of its own, not set by `--bw`: left out). None if
    the run has no time or carried nothing."""
    if not math.isfinite(seconds) or seconds <= 0:
        return None
    best: tuple[str, float] | None = None
    for name, nbytes, scale in directions:
        if not scale:
            continue
        per = nbytes / scale
        if best is None or per > best[1]:
            best = (name, per)
    if best is None or best[1] <= 0:
        return None
    return Capacity(algo, size, seconds, best[0], best[1] * 8 / seconds / 1e6)


def two_digits_down(x: float) -> float:
    """`x` rounded down to two significant digits (a rate to set and print)."""
    if x <= 0 or not math.isfinite(x):
        return 0.0
    unit = 10.0 ** (math.floor(math.log10(x)) - 1)
    return float(f"{math.floor(x / unit + 1e-9) * unit:.2g}")


@dataclass(frozen=True)
class BwChoice:
    bw: float  # Mbit/s for --bw
    slowest: Capacity
    margin: float
    reason: str


def choose_bw(
    capacities: Sequence[Capacity], *, margin: float = BW_MARGIN, most: float = 1000.0
) -> BwChoice:
    """`margin` of the slowest algorithm's capacity, rounded down to two significant digits,
    at most `most` (the largest --bw every link can be shaped to). ValueError if there is no
    capacity to go by."""
    if not capacities:
        raise ValueError("no unshaped run finished: nothing to choose a rate from; give --bw")
    slowest = min(capacities, key=lambda c: c.mbit)
    bw = min(two_digits_down(margin * slowest.mbit), two_digits_down(most))
    if bw <= 0:
        raise ValueError(f"{slowest.algo}'s unshaped run carried nothing; give --bw")
    each = ", ".join(f"{c.algo} {c.mbit:.3g}" for c in capacities)
    reason = (
        f"unshaped, the busiest link of each algorithm ran at (Mbit/s) {each}; the slowest, "
        f"{slowest.algo} ({slowest.link}), is what the emulator carries here: links set to "
        f"{bw:g} Mbit/s, {margin:.0%} of it"
    )
    if bw < two_digits_down(margin * slowest.mbit):
        reason += f" capped at {most:g}"
    return BwChoice(bw, slowest, margin, reason)


def check_size(
    cap: Capacity, bw: float, *, seconds: float = CHECK_SECONDS, most: int = 1 << 26
) -> int:
    """Elements per worker for a shaped run of `cap`'s algorithm whose busiest link needs
    about `seconds` at `bw` (the unshaped run's size scaled by its link time at `bw`), at
    least that run's size, at most `most`."""
    floor = cap.mbit * cap.seconds / bw  # the unshaped run's busiest bytes at bw, seconds
    return max(cap.size, min(most, math.ceil(cap.size * seconds / floor)))


def next_bw(bw: float, bound_by: str, carried: float | None, *, step: float = STEP_DOWN) -> float:
    """After a shaped check run at `bw` (`bound_by`: `classify`'s verdict; `carried`: the rate
    its busiest link reached, in units of --bw, None if unknown): `bw` itself if the links
    bound it, else `step` of the lower of `bw` and `carried`, two digits down. ValueError if
    that leaves nothing."""
    if bound_by == "links":
        return bw
    lower = min(bw, carried) if carried is not None and carried > 0 else bw
    out = two_digits_down(step * lower)
    if out <= 0:
        raise ValueError(f"no rate below {bw:g} Mbit/s left to try; give --bw")
    return out


def next_bw_all(
    bw: float, verdicts: Sequence[tuple[str, float | None]], *, step: float = STEP_DOWN
) -> float:
    """After a check at `bw` that ran every algorithm (`verdicts`: each run's `classify`
    verdict and the rate its busiest link reached): `bw` if the links bound every run, else
    the lowest `next_bw` of the runs they did not bound. ValueError if no run was checked or
    no rate is left."""
    if not verdicts:
        raise ValueError("no check run to go by; give --bw")
    return min(next_bw(bw, by, carried, step=step) for by, carried in verdicts)
