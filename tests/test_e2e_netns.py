"""End to end as on real hosts: four workers in network namespaces, each a kernel-UDP worker
process (`python -m inaemu.hostlib.worker`), through a switch on veths (the softswitch on
AF_PACKET, and simple_switch_grpc where bmv2 is installed), programmed only through the
controller's commands (`inaemu pipeline push`, `job add`, `job remove`, `loss`).

One scenario per switch: the same job's workers run twice, each time with a run id from
`inaemu job new-run`, and a third time with the same arguments but no run id, which every
worker refuses; the job is removed and its pool given to a new job, whose workers run; a run
under 1 % injected loss; a run in which one worker is killed, so that the others fail with the
clear timeout error. Every result is checked element by element against numpy's sum of the
workers' inputs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

from inaemu.conformance.bmv2_target import bmv2_available
from inaemu.hostlib.worker import worker_input
from inaemu.p4.build import compile_p4
from inaemu.topology.builders import star
from inaemu.topology.model import Topology
from tests.bmv2_grpc import grpc_missing
from tests.netns import GRPC, StarNet, namespaces_missing, start_bmv2, start_softswitch

N = 4

NS_MISSING = namespaces_missing()
pytestmark = pytest.mark.skipif(NS_MISSING is not None, reason=f"end to end: {NS_MISSING}")


@dataclass
class Network:
    net: StarNet
    topo_file: Path
    tmp: Path
    size: int

    def inaemu(self, *args: str) -> str:
        proc = self.net.run_in_switch([sys.executable, "-m", "inaemu.cli", *args])
        assert proc.returncode == 0, f"inaemu {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    def new_run(self, job: int) -> int:
        """A run id for the next run of `job`'s workers, from the job state, as a user gets it."""
        return int(self.inaemu("job", "new-run", "-t", str(self.topo_file), "--job", str(job)))

    def workers(
        self,
        job: int,
        seed: int,
        run: int | None,
        *,
        timeout: float = 30.0,
        kill: int | None = None,
    ) -> list[subprocess.CompletedProcess[str]]:
        """All N workers of `job` at once (`run` None: no --run); `kill`: SIGKILL that rank as
        it starts."""
        agg = self.net.topology.switches[self.net.switch_name]
        procs = []
        for rank, (name, host) in enumerate(sorted(self.net.topology.hosts.items())):
            argv = [sys.executable, "-m", "inaemu.hostlib.worker", "--job", str(job)]
            argv += ["--workers", str(N), "--rank", str(rank), "--local-ip", host.ip]
            argv += ["--mac", host.mac, "--switch-ip", agg.agg_ip, "--switch-mac", agg.agg_mac]
            argv += ["--size", str(self.size), "--seed", str(seed), "--codec", "int32"]
            argv += ["--timeout", str(timeout), *(["--run", str(run)] if run is not None else [])]
            argv += ["--out", str(self.tmp / f"{name}.npy")]
            procs.append(self.net.host(name, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        if kill is not None:  # before it sends anything: its chunks never reach the switch
            procs[kill].kill()
        done = []
        for proc in procs:
            out, err = proc.communicate(timeout=timeout + 60)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
        return done

    def check_exact(self, job: int, seed: int) -> None:
        """A run of `job`'s workers with a new run id: every worker gets the exact sum."""
        for f in self.tmp.glob("*.npy"):
            f.unlink()
        run = self.new_run(job)
        results = self.workers(job, seed, run)
        for r in results:
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout.splitlines()[-1])["digest"]
        expected = np.sum(
            [worker_input(seed, rank, self.size, codec="int32") for rank in range(N)],
            axis=0,
            dtype=np.int32,
        )
        for name in self.net.topology.hosts:
            got = np.load(self.tmp / f"{name}.npy")
            wrong = int(np.count_nonzero(got != expected))
            assert wrong == 0, f"{name}: {wrong} of {self.size} elements wrong (run {run})"


@pytest.fixture(params=["softswitch", "bmv2"])
def network(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Network]:
    kind = request.param
    if kind == "bmv2":
        missing = grpc_missing() or bmv2_available()
        if missing is not None:
            pytest.skip(f"bmv2: {missing}")
    topo: Topology = star(N, grpc=GRPC)
    if kind == "bmv2":
        program = str(compile_p4())
        topo.switches["s1"] = replace(topo.switches["s1"], program=program)
    topo_file = tmp_path / "topology.json"
    topo.save(topo_file)
    with StarNet(topo) as net:
        if kind == "softswitch":
            start_softswitch(net)
        else:
            start_bmv2(net, tmp_path)
        # bmv2 runs p4/ina.p4 at a few thousand packets/s here: a smaller array
        yield Network(net, topo_file, tmp_path, 100_000 if kind == "softswitch" else 20_000)


def test_runs_reinstall_loss_and_a_dead_worker(network: Network) -> None:
    t = str(network.topo_file)
    network.inaemu("pipeline", "push", "-t", t)
    workers = ",".join(sorted(network.net.topology.hosts))
    network.inaemu("job", "add", "-t", t, "--job", "1", "--workers", workers, "--pool", "64")
    network.check_exact(job=1, seed=1)
    network.check_exact(job=1, seed=2)  # the same job's workers again, with a new run id
    for r in network.workers(job=1, seed=2, run=None):  # and again, with no run id
        assert r.returncode == 2 and not r.stdout, r.stdout + r.stderr
        assert "--run is required" in r.stderr and "inaemu job new-run" in r.stderr

    network.inaemu("job", "remove", "-t", t, "--job", "1")
    out = network.inaemu("job", "add", "-t", t, "--job", "2", "--workers", workers, "--pool", "64")
    assert "slots [0, 64)" in out  # job 1's pool, given to job 2
    network.check_exact(job=2, seed=3)

    ports = ",".join(str(p) for p in sorted(network.net.ports.values()))
    network.inaemu("loss", "-t", t, "--switch", "s1", "--ports", ports, "--probability", "0.01")
    network.check_exact(job=2, seed=4)
    stats = network.inaemu("stats", "-t", t)
    assert re.search(r"loss [1-9]", stats), stats  # the switch did drop packets
    network.inaemu("loss", "-t", t, "--switch", "s1", "--ports", ports, "--probability", "0")

    results = network.workers(job=2, seed=5, run=network.new_run(2), timeout=5.0, kill=0)
    assert results[0].returncode != 0
    for r in results[1:]:
        assert r.returncode == 1, r.stdout + r.stderr
        assert "job 2: no result for" in r.stderr and "every worker of the job alive" in r.stderr
        assert "MAC that the job's topology gives this host" in r.stderr


def test_bench_e2e_says_what_bounded_each_run() -> None:
    """bench/bench_e2e.py judges each allreduce as `inaemu mininet` judges a run
    (`runs.accounting.classify`): the veths are unshaped, so the emulator, and the reason
    names what of it (the busiest process, the machine, drops outside the pipeline)."""
    root = Path(__file__).resolve().parents[1]
    argv = [sys.executable, str(root / "bench" / "bench_e2e.py"), "--switch", "softswitch"]
    argv += ["--size", "20000", "--repeat", "1", "--no-cap4"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("# softswitch run 1:"))
    assert "emulator-bound: links unshaped: only the emulator bounds the time" in line
    assert re.search(r"(s1 \(softswitch\)|h\d \(worker\)|the machine's \d+ cores)", line), line
