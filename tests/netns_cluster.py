"""Machines as network namespaces, set up and run with the commands `inaemu cluster init`
prints, as a user copies them (root).

    with Machines(tmp, "softswitch", machines=2, ranks=2) as m:
        run = m.train("ina-fixedpoint", steps=30)      # torchrun on every machine, at once

`init` is run as a user runs it; its printed script is parsed line by line (`# on NAME:`
before a machine's torchrun line) and every command runs where the script says: the switch and
the control commands in the switch's namespace (`tests.netns.StarNet`, whose switch ports are
`s1-eth<port>`), `inaemu cluster setup` (with `--offloads-off`: veths to a switch in user
space) and torchrun in each machine's. `inaemu` and `torchrun` are this Python's
(`-m inaemu.cli`, `-m torch.distributed.run`). The test (tests/test_cluster_netns.py) and
bench/bench_cluster.py use it.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from inaemu.cli.train.launcher import BackendRun, merge_records
from inaemu.topology.model import Topology
from tests.netns import StarNet

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "train_ddp.py"
START_TIMEOUT = 60.0  # the switch's READY (bmv2 loads slowly on a busy machine)
GRPC = "127.0.0.1:9559"  # in the switch's own namespace


def _tool(argv: list[str]) -> list[str]:
    """`argv` with `inaemu` and `torchrun` as this Python's modules."""
    tools = {"inaemu": "inaemu.cli", "torchrun": "torch.distributed.run"}
    return [sys.executable, "-m", tools[argv[0]], *argv[1:]] if argv[0] in tools else argv


@dataclass
class Script:
    """`inaemu cluster init`'s printed commands, in order."""

    switch: list[str]
    control: list[list[str]]
    setup: list[str]
    torchrun: dict[str, tuple[dict[str, str], list[str]]]  # machine: (env, argv)

    @staticmethod
    def parse(text: str) -> Script:
        commands: list[tuple[str, list[str]]] = []  # (machine or "", words)
        machine = ""
        for line in text.splitlines():
            if line.startswith("# on ") and line.endswith(":"):
                machine = line[5:-1]
            elif line and not line.startswith("#"):
                commands.append((machine, shlex.split(line)))
        torchrun = {}
        for name, words in commands[5:]:  # VAR=VALUE ... torchrun ...
            n = next(i for i, w in enumerate(words) if not re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", w))
            torchrun[name] = (dict(w.split("=", 1) for w in words[:n]), words[n:])
        return Script(commands[0][1], [c for _, c in commands[1:4]], commands[4][1], torchrun)


@dataclass
class Training:
    """One training: every machine's torchrun, its exit, output and the merged records."""

    backend: str
    run: BackendRun
    exits: dict[str, int | None]  # None: still running when stopped
    output: dict[str, str]  # stdout and stderr, one text per machine
    seconds: float
    killed: str = ""
    faulted_at: float | None = None  # when `killed` was killed (seconds after the start)
    ended: dict[str, float] = field(default_factory=dict)  # when each machine's torchrun exited


class Machines:
    def __init__(
        self,
        tmp: Path,
        switch: str,
        *,
        machines: int = 2,
        ranks: int = 2,
        timeout: float = 10.0,
        program: str = "",
    ) -> None:
        self.tmp = tmp
        self.kind = switch
        self.names = [f"m{i + 1}" for i in range(machines)]
        self.ranks = ranks
        self.dir = tmp / "cluster"
        argv = ["inaemu", "cluster", "init", "-o", str(self.dir), "--switch", switch]
        argv += ["--grpc", GRPC, "--timeout", str(timeout), "--script", str(EXAMPLE)]
        argv += ["--program", program] if program else []
        for i, name in enumerate(self.names):
            spec = f"{name},ip=10.0.0.{i + 1}/24,mac=02:00:00:00:01:{i + 1:02x},port={i + 1}"
            argv += ["--machine", f"{spec},iface=s1-eth{i + 1},ranks={ranks}"]
        proc = subprocess.run(_tool(argv), capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"inaemu cluster init: {proc.stderr}")
        self.printed = proc.stdout
        self.script = Script.parse(proc.stdout)
        self.topology = Topology.load(self.dir / "topology.json")
        self.net = StarNet(self.topology)
        self._switch: subprocess.Popen[str] | None = None

    def __enter__(self) -> Machines:
        self.net.__enter__()
        try:
            self._start()
        except BaseException:
            self.net.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._switch is not None and self._switch.poll() is None:
            self._switch.terminate()  # as Ctrl-C: `inaemu bmv2` stops its switches itself
            try:
                self._switch.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.net.close()  # and whatever is left in the namespaces

    def _start(self) -> None:
        err = (self.tmp / f"{self.kind}.stderr").open("w")
        proc = self.net.switch(_tool(self.script.switch), stdout=subprocess.PIPE, stderr=err)
        assert proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT
        line = proc.stdout.readline()
        while line and not line.startswith("READY") and time.monotonic() < deadline:
            line = proc.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError(
                f"{self.kind}: {line}{(self.tmp / f'{self.kind}.stderr').read_text()}"
            )
        self._switch = proc
        for argv in self.script.control:
            done = self.net.run_in_switch(_tool(argv))
            if done.returncode != 0:
                raise RuntimeError(f"{shlex.join(argv)}: {done.stderr}")
        for name in self.names:
            done = subprocess.run(
                [
                    "ip",
                    "netns",
                    "exec",
                    self.net.host_ns[name],
                    *_tool(self.script.setup),
                    "--offloads-off",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if done.returncode != 0:
                raise RuntimeError(f"{name}: {shlex.join(self.script.setup)}: {done.stderr}")

    def train(
        self,
        backend: str,
        *,
        steps: int,
        kill: str = "",
        kill_after: int = 3,
        one_rank: bool = False,
        restarts: int = 0,
        limit: float = 300.0,
    ) -> Training:
        """Every machine's torchrun line with INAEMU_BACKEND=`backend`, the example training
        `steps` iterations; `kill`: SIGKILL every process of that machine (`one_rank`: one of
        its training processes only) once every rank has recorded `kill_after` iterations;
        `restarts`: torchrun's --max-restarts. Waits for every torchrun to exit (`limit`
        seconds at most: then stops them)."""
        records = self.tmp / "records" / backend
        records.mkdir(parents=True, exist_ok=True)
        for f in records.glob("*"):
            f.unlink()
        procs: dict[str, subprocess.Popen[str]] = {}
        logs = {name: self.tmp / f"{backend}-{name}.log" for name in self.names}
        started = time.monotonic()
        for name in self.names:
            env, argv = self.script.torchrun[name]
            argv = [*argv[:-1], "--max-restarts", str(restarts), argv[-1]]  # before the script
            env = dict(
                env, INAEMU_BACKEND=backend, INAEMU_RECORDS=str(records / "rank{rank}.jsonl")
            )
            with logs[name].open("w") as log:
                procs[name] = self.net.host(
                    name,
                    [
                        "env",
                        *(f"{k}={v}" for k, v in env.items()),
                        *_tool(argv),
                        "--steps",
                        str(steps),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
        killed_at = None
        ended: dict[str, float] = {}
        while len(ended) < len(procs) and time.monotonic() - started < limit:
            for name, proc in procs.items():
                if name not in ended and proc.poll() is not None:
                    ended[name] = time.monotonic() - started
            if kill and killed_at is None and self._recorded(records) >= kill_after:
                self.kill_machine(kill, one_rank=one_rank)
                killed_at = time.monotonic() - started
            time.sleep(0.1)
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        run = BackendRun(backend, 0)
        world = self.ranks * len(self.names)
        merge_records(run, [records / f"rank{r}.jsonl" for r in range(world)])
        output = {name: log.read_text(errors="replace") for name, log in logs.items()}
        return Training(
            backend,
            run,
            {n: p.returncode for n, p in procs.items()},
            output,
            time.monotonic() - started,
            kill,
            killed_at,
            ended,
        )

    def _recorded(self, records: Path) -> int:
        """Iterations recorded by every rank so far (the fewest of any rank's)."""
        files = list(records.glob("rank*.jsonl"))
        if len(files) < self.ranks * len(self.names):
            return 0
        return min(len(f.read_text().splitlines()) for f in files)

    def kill_machine(self, name: str, *, one_rank: bool = False) -> None:
        """SIGKILL every process in machine `name`'s namespace, as a machine that dies
        (`one_rank`: only the first of its training processes, as a rank that crashes)."""
        pids = subprocess.run(
            ["ip", "netns", "pids", self.net.host_ns[name]], capture_output=True, text=True
        ).stdout.split()
        if one_rank:
            ranks = [p for p in pids if str(EXAMPLE) in _cmdline(p)]
            pids = [p for p in ranks if "torch.distributed.run" not in _cmdline(p)][:1]
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
