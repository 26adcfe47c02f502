"""Training across machines without a network: the machines' form and the topology
`inaemu cluster init` makes of them, the cluster file, what a process that torchrun starts
reads from its environment (`Launch.from_env`), the printed commands, a rank's one-line end
when the network fails, and torchrun itself on this host's loopback (gloo; no root).
The same commands on namespaces cabled to a switch: tests/test_cluster_netns.py."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from inaemu.cli.main import main
from inaemu.common import wire
from inaemu.hostlib import launch as launch_module
from inaemu.hostlib.cluster import Cluster, ClusterError
from inaemu.hostlib.launch import Launch, LaunchError
from inaemu.topology.cluster import Machine, cluster_topology, parse_machine
from inaemu.topology.model import TopologyError
from tests.netns_cluster import EXAMPLE, Script

M1 = "m1,ip=10.0.0.1/24,mac=02:00:00:00:01:01,port=1,iface=eth1,ranks=2"
M2 = "m2,ip=10.0.0.2,mac=02:00:00:00:01:02,port=2,iface=eth2,ranks=2,udp_port=50000"


def test_a_machine_is_read_and_refused_with_its_form() -> None:
    m = parse_machine(M1)
    assert m == Machine("m1", "10.0.0.1/24", "02:00:00:00:01:01", 1, "eth1", 2, None)
    assert parse_machine(M2).ip == "10.0.0.2/24" and parse_machine(M2).udp_port == 50000
    assert parse_machine("m3 ip=10.0.0.3 mac=02:00:00:00:01:03 port=3 iface=eth3").ranks == 1
    for text, message in [
        ("m1,ip=10.0.0.1,mac=02:00:00:00:01:01,port=1", "no iface="),
        ("m1,ip=10.0.0.300,mac=02:00:00:00:01:01,port=1,iface=e", "not an IPv4 address"),
        ("m1,ip=10.0.0.1,mac=02:00:00:00:01,port=1,iface=e", "not a MAC address"),
        ("m1,ip=10.0.0.1,mac=02:00:00:00:01:01,port=0,iface=e", r"port=0: expected 1\.\."),
        ("m1,ip=10.0.0.1,mac=02:00:00:00:01:01,port=1,iface=e,ranks=33", r"ranks=33"),
        ("m1,ip=10.0.0.1,mac=02:00:00:00:01:01,port=1,iface=e,gpus=8", "'gpus=8' is not"),
    ]:
        with pytest.raises(TopologyError, match=message):
            parse_machine(text)


def test_the_cluster_topology_is_one_switch_and_its_machines() -> None:
    topo = cluster_topology([parse_machine(M1), parse_machine(M2)])
    s1 = topo.switches["s1"]
    assert s1.agg_ip == "10.0.0.254" and s1.role == "root"
    assert topo.host_attachment("m2") == ("s1", 2)
    assert topo.hosts["m1"].ranks == 2 and topo.hosts["m2"].udp_port == 50000
    last = parse_machine("m9,ip=10.0.0.254,mac=02:00:00:00:01:09,port=9,iface=eth9")
    assert cluster_topology([parse_machine(M1), last]).switches["s1"].agg_ip == "10.0.0.253"
    other = parse_machine("m3,ip=10.0.1.3,mac=02:00:00:00:01:03,port=3,iface=eth3")
    same_port = parse_machine("m3,ip=10.0.0.3,mac=02:00:00:00:01:03,port=1,iface=eth3")
    big = [
        parse_machine(f"m{i},ip=10.0.0.{i},mac=02:00:00:00:01:{i:02x},port={i},iface=e{i},ranks=9")
        for i in range(1, 5)
    ]
    for machines, message in [
        ([parse_machine(M1), other], "2 subnets"),
        ([parse_machine(M1), same_port], "two machines have port 1"),
        (big, "36 workers; one switch aggregates at most 32"),
        ([], "a machine at least"),
    ]:
        with pytest.raises(TopologyError, match=message):
            cluster_topology(machines)
    with pytest.raises(TopologyError, match="not in the machines' subnet"):
        cluster_topology([parse_machine(M1)], agg_ip="10.0.1.254")


def init(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> Script:
    argv = ["cluster", "init", "-o", str(tmp_path / "c"), "--machine", M1, "--machine", M2]
    assert main([*argv, *extra]) == 0, capsys.readouterr().err
    return Script.parse(capsys.readouterr().out)


def test_init_writes_both_files_and_prints_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = init(tmp_path, capsys, "--pool", "32", "--job", "7", "--timeout", "9")
    cluster, topo = Cluster.load(tmp_path / "c" / "cluster.json")
    assert cluster == Cluster("topology.json", ("m1", "m2"), job=7, window=32, timeout=9.0)
    assert cluster.world_size(topo) == 4
    assert script.switch[:2] == ["inaemu", "softswitch"]
    assert script.switch[-4:] == ["--iface", "1=eth1", "--iface", "2=eth2"]
    topology = str(tmp_path / "c" / "topology.json")
    assert script.control == [
        ["inaemu", "pipeline", "push", "-t", topology],
        ["inaemu", "routes", "-t", topology],
        [
            "inaemu",
            "job",
            "add",
            "-t",
            topology,
            "--job",
            "7",
            "--workers",
            "m1,m2",
            "--pool",
            "32",
        ],
    ]
    assert script.setup == [
        "inaemu",
        "cluster",
        "setup",
        "-c",
        str(tmp_path / "c" / "cluster.json"),
    ]
    env, m1 = script.torchrun["m1"]
    _, m2 = script.torchrun["m2"]
    cluster_file = str(tmp_path / "c" / "cluster.json")
    assert env == {"INAEMU_CLUSTER": cluster_file, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    assert m1[:5] == ["torchrun", "--nnodes", "2", "--nproc-per-node", "2"]
    assert "--rdzv-endpoint" in m1 and m1[m1.index("--rdzv-endpoint") + 1] == "10.0.0.1:29500"
    # the first machine holds torchrun's store: it is told so, the others are not
    assert "is_host=1" in m1 and "is_host=1" not in m2
    assert m2[m2.index("--local-addr") + 1] == "10.0.0.2" and m2[-1] == "train_ddp.py"


def test_init_for_bmv2_needs_its_program(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["cluster", "init", "-o", str(tmp_path / "c"), "--machine", M1, "--switch", "bmv2"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("inaemu cluster: --switch bmv2 needs --program") and err.count("\n") == 1
    program = tmp_path / "ina.json"
    program.write_text("{}")
    script = init(tmp_path, capsys, "--switch", "bmv2", "--program", str(program))
    assert script.switch[:2] == ["inaemu", "bmv2"] and "s1:2=eth2" in script.switch
    assert not (tmp_path / "nothing").exists()
    assert main(["cluster", "setup"]) == 1
    assert "setup needs -c DIR/cluster.json" in capsys.readouterr().err


def test_a_cluster_file_is_checked_against_its_topology(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    init(tmp_path, capsys)
    path = tmp_path / "c" / "cluster.json"
    good = json.loads(path.read_text())
    changes: list[tuple[dict[str, object], str]] = [
        ({"gpus": 8}, "unknown key 'gpus'"),
        ({"window": 0}, r"window: expected a number of slots in 1\.\.1024"),
        ({"window": "64"}, "window: '64' is not a number"),
        ({"workers": ["m1", "m3"]}, "worker 'm3' is not a host of its topology"),
        ({"workers": ["m1", "m1"]}, "a machine is named twice"),
        ({"backend": "ring-plain"}, "under torchrun one of"),
        ({"topology": "nowhere.json"}, "its topology: .*no such topology"),
    ]
    for change, message in changes:
        path.write_text(json.dumps({**good, **change}))
        with pytest.raises(ClusterError, match=message):
            Cluster.load(path)


def torchrun_env(cluster: Path, **more: str) -> dict[str, str]:
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    return {**env, "INAEMU_CLUSTER": str(cluster), **more}


def test_a_process_torchrun_started_reads_its_place_and_its_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    init(tmp_path, capsys)
    path = tmp_path / "c" / "cluster.json"
    launch = Launch.from_env(torchrun_env(path, INAEMU_MACHINE="m2"))
    assert (launch.rank, launch.world_size, launch.local_rank) == (3, 4, 1)
    assert launch.under_torchrun and launch.rendezvous == "env://"
    assert (launch.machine, launch.ip, launch.mac) == ("m2", "10.0.0.2", "02:00:00:00:01:02")
    assert (launch.agg_ip, launch.agg_mac) == ("10.0.0.254", "02:00:00:00:00:fe")
    assert launch.udp_port == 50001  # m2's first port plus the local rank
    assert launch.run is None  # the ranks draw one together (shared_run_id)
    m1 = Launch.from_env(torchrun_env(path, INAEMU_MACHINE="m1"))
    assert m1.udp_port == wire.worker_udp_port(None, 1) == wire.INA_UDP_PORT + 1
    gloo = Launch.from_env(torchrun_env(path, INAEMU_MACHINE="m1", INAEMU_BACKEND="gloo"))
    assert gloo.backend == "gloo" and gloo.window == 64  # a variable wins over the file
    for env, message in [
        (torchrun_env(path, INAEMU_MACHINE="m1", WORLD_SIZE="6"), "6 processes in all"),
        (torchrun_env(path, INAEMU_MACHINE="m1", LOCAL_WORLD_SIZE="3"), "3 processes on m1"),
        (torchrun_env(path, INAEMU_MACHINE="m9"), "INAEMU_MACHINE=m9: not a worker"),
        (torchrun_env(path), "which machine is this"),  # none of 10.0.0.x is this host's
        ({**torchrun_env(path), "INAEMU_CLUSTER": ""}, "started by torchrun without"),
        (torchrun_env(path, INAEMU_MACHINE="m1", INAEMU_BACKEND="ring-plain"), "under torchrun"),
        (torchrun_env(path, INAEMU_MACHINE="m1", RANK="x"), "RANK='x': torchrun sets"),
    ]:
        with pytest.raises(LaunchError, match=message):
            Launch.from_env(env)


def test_the_launchers_ina_port_is_the_wires() -> None:
    """The launcher imports no numpy: its copy of the INA port, checked here."""
    assert launch_module.INA_UDP_PORT == wire.INA_UDP_PORT


def test_a_network_failure_ends_a_rank_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch", reason="PyTorch not installed")
    from inaemu.hostlib.client import InaTimeoutError
    from inaemu.hostlib.ddp import InaHookState, LaunchedWorker

    class Client:
        n_workers = 4

        def start_run(self, run: int) -> None:
            pass

    launch = Launch(rank=2, world_size=4, backend="ina-fixedpoint", rendezvous="env://")
    closed = []
    worker = LaunchedWorker(
        dataclasses.replace(launch, machine="m2"),
        InaHookState(Client(), None, run=1),  # type: ignore[arg-type]
        lambda: closed.append(True),
    )
    with pytest.raises(SystemExit) as stop, worker:
        raise InaTimeoutError(1, [5, 6], 5.0, "no progress for 5.0s")
    assert stop.value.code == 1 and closed == [True]
    err = capsys.readouterr().err
    assert err.startswith("rank 2 on m2 (ina-fixedpoint): job 1: no result for 2 chunk(s)")
    assert err.count("\n") == 1
    other = LaunchedWorker(launch, InaHookState(Client(), None, run=1), lambda: None)  # type: ignore[arg-type]
    with pytest.raises(KeyError), other:  # a bug of the script's is the script's: a traceback
        raise KeyError("x")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_torchrun_on_this_host_trains_as_the_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], numerics: ModuleType
) -> None:
    """One "machine", this host's loopback, two local ranks, gloo: rank, world size and the
    rendezvous come from torchrun, the rest from the cluster file; the losses are the
    replay's, bit for bit."""
    machine = "local,ip=127.0.0.1/8,mac=00:00:00:00:00:00,port=1,iface=lo,ranks=2"
    argv = ["cluster", "init", "-o", str(tmp_path / "c"), "--machine", machine]
    argv += ["--backend", "gloo", "--rendezvous", f"127.0.0.1:{_free_port()}"]
    argv += ["--script", str(EXAMPLE)]
    assert main(argv) == 0
    env, line = Script.parse(capsys.readouterr().out).torchrun["local"]
    records = tmp_path / "rank{rank}.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", *line[1:], "--steps", "3"],
        env={**os.environ, **env, "INAEMU_RECORDS": str(records)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # torchrun and its ranks: one process group to stop
    )
    try:
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:  # timed out or interrupted: none of them is left behind
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out
    from inaemu.cli.train.launcher import BackendRun, merge_records

    run = BackendRun("gloo", 0)
    merge_records(run, [tmp_path / f"rank{r}.jsonl" for r in range(2)])
    example = numerics.load_example()
    assert run.loss == [s.loss for s in numerics.replay(example, "gloo", workers=2, steps=3)]


def test_the_guide_shows_what_init_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/cluster.md's init command and the script it shows under it agree with `init`."""
    guide = (Path(__file__).resolve().parents[1] / "docs" / "cluster.md").read_text()
    command = guide.split("```sh\n", 1)[1].split("```", 1)[0]
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[:3] == ["inaemu", "cluster", "init"]
    monkeypatch.chdir(tmp_path)  # -o cluster: written here
    assert main(argv[1:]) == 0
    printed = capsys.readouterr().out.split("\n", 1)[1]  # after the "# wrote ..." line
    shown = guide.split("in order. For the machines above it prints:\n\n```\n", 1)[1]
    assert printed == shown.split("```", 1)[0]
