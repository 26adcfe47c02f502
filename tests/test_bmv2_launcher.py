"""`inaemu topo --grpc/--device-id` and `inaemu bmv2`: a topology's P4Runtime addresses and
device ids without editing JSON, and one simple_switch_grpc per switch, started from the
topology (real bmv2 where it is installed) and programmed by the controller's commands."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from inaemu.cli import main as cli
from inaemu.cli.bmv2 import missing_interfaces
from inaemu.conformance.bmv2_target import bmv2_available
from inaemu.controller.bmv2 import free_ports, simple_switch_grpc_argv, topology_commands
from inaemu.p4.build import compile_p4
from inaemu.topology.model import Topology
from tests.bmv2_grpc import grpc_missing

BMV2_MISSING = grpc_missing() or bmv2_available()


def inaemu(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inaemu.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def devices(path: Path) -> dict[str, tuple[str, int]]:
    topo = Topology.load(path)
    return {name: (sw.grpc, sw.device_id) for name, sw in topo.switches.items()}


def test_topo_sets_the_grpc_addresses_and_device_ids(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    assert (
        cli.main(["topo", "star", "--hosts", "2", "--grpc", "10.1.2.3:50051", "-o", str(out)]) == 0
    )
    assert devices(out) == {"s1": ("10.1.2.3:50051", 1)}
    args = ["topo", "leaf-spine:2x1x1", "--grpc", "127.0.0.1:50100", "--device-id", "7"]
    args += ["--grpc", "l2=127.0.0.1:50200", "--device-id", "s1=1", "-o", str(out)]
    assert cli.main(args) == 0
    assert devices(out) == {
        "s1": ("127.0.0.1:50100", 1),
        "l1": ("127.0.0.1:50101", 8),
        "l2": ("127.0.0.1:50200", 9),
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--grpc", "a:1", "--grpc", "b:2"], "--grpc b:2: give one --grpc HOST:PORT"),
        (["--grpc", "localhost"], "--grpc localhost: write HOST:PORT"),
        (["--grpc", "127.0.0.1:65535"], "ports are 1..65535 (3 switches need 65535..65537)"),
        (
            ["--grpc", "s9=127.0.0.1:1"],
            "the topology has no switch 's9' (its switches: s1, l1, l2)",
        ),
        (["--grpc", "l1=nowhere"], "--grpc l1=nowhere: write HOST:PORT"),
        (["--device-id", "one"], "--device-id one: write N or SWITCH=N"),
        (
            ["--grpc", "127.0.0.1:9559", "--grpc", "l1=127.0.0.1:9559", "--device-id", "l1=1"],
            "'s1' and 'l1' are both device 1 at 127.0.0.1:9559",
        ),
    ],
)
def test_topo_refuses_bad_addresses_and_ids(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.json"
    assert cli.main(["topo", "leaf-spine:2x1x1", *args, "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("inaemu topo: ") and message in err, err
    assert not out.exists()


def test_bmv2_print_gives_one_command_line_per_switch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topology = tmp_path / "t.json"
    args = ["topo", "leaf-spine:2x1x1", "--grpc", "127.0.0.1:50100", "-o", str(topology)]
    assert cli.main(args) == 0
    capsys.readouterr()
    assert cli.main(["bmv2", "-t", str(topology), "--print", "--iface", "l2:1=veth7"]) == 0
    lines = capsys.readouterr().out.splitlines()
    run_dir = tmp_path / "t.json.bmv2"
    assert lines[0] == f"mkdir -p {run_dir}"
    commands = [line.split() for line in lines if not line.startswith(("#", "mkdir"))]
    expected = {  # switch: device id, thrift port, P4Runtime address, ports
        "s1": (1, 9090, "127.0.0.1:50100", {1: "s1-eth1", 2: "s1-eth2"}),
        "l1": (2, 9091, "127.0.0.1:50101", {1: "l1-eth1", 2: "l1-eth2"}),
        "l2": (3, 9092, "127.0.0.1:50102", {1: "veth7", 2: "l2-eth2"}),
    }
    assert commands == [
        simple_switch_grpc_argv(
            device_id=device,
            grpc=grpc,
            thrift_port=thrift,
            notifications=f"ipc://{run_dir}/{name}-notifications.ipc",
            ports=ports,
            log_file=run_dir / f"{name}-bmv2",
            log_level="warn",
        )
        for name, (device, thrift, grpc, ports) in expected.items()
    ]
    assert Path(commands[0][0]).name == "simple_switch_grpc" and commands[0][1] == "--no-p4"
    assert commands[0][-2:] == ["--grpc-server-addr", "127.0.0.1:50100"]


@pytest.mark.bmv2
@pytest.mark.skipif(BMV2_MISSING is not None, reason=f"bmv2: {BMV2_MISSING}")
def test_bmv2_runs_a_topology_that_the_controller_programs(tmp_path: Path) -> None:
    program = compile_p4()
    topology = tmp_path / "t.json"
    ports = free_ports(2)
    out = inaemu(
        *("topo", "leaf-spine:1x1x2", "--program", str(program), "-o", str(topology)),
        *("--grpc", f"s1=127.0.0.1:{ports[0]}", "--grpc", f"l1=127.0.0.1:{ports[1]}"),
        *("--device-id", "5"),
    )
    assert out.returncode == 0, out.stderr
    argv = [sys.executable, "-m", "inaemu.cli", "bmv2", "-t", str(topology)]
    launcher = subprocess.Popen(
        [*argv, "--thrift-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pids = []
    try:
        assert launcher.stdout is not None
        missing = {"s1": "s1-eth1", "l1": "l1-eth1,l1-eth2,l1-eth3"}  # no such interfaces
        for name, port, device in (("s1", ports[0], 5), ("l1", ports[1], 6)):
            line = launcher.stdout.readline()
            assert line.startswith(f"READY {name} grpc=127.0.0.1:{port} device_id={device} "), (
                line + (launcher.stderr.read() if launcher.stderr else "")
            )
            assert line.rstrip().endswith(f" missing={missing[name]}"), line
            found = re.search(r"pid=(\d+)", line)
            assert found
            pids.append(int(found.group(1)))
        assert "install ina.p4 with `inaemu pipeline push" in launcher.stdout.readline()
        for command in (
            ["pipeline", "push"],
            ["job", "add", "--job", "1", "--workers", "h1,h2"],
            ["stats"],
        ):
            out = inaemu(*command, "-t", str(topology))
            assert out.returncode == 0, out.stderr
        # a second launcher finds the addresses taken and says so, starting nothing
        again = inaemu("bmv2", "-t", str(topology), "--thrift-port", "0")
        assert again.returncode == 1
        assert f"s1: 127.0.0.1:{ports[0]} (P4Runtime) in use" in again.stderr, again.stderr
    finally:
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(30) == 0
    assert launcher.stderr is not None
    warning = launcher.stderr.read()
    assert warning.startswith(
        "inaemu bmv2: warning: no such interface here: s1: s1-eth1; l1: l1-eth1, l1-eth2, "
        "l1-eth3: those ports send and receive nothing"
    ), warning
    for pid in pids:  # every simple_switch_grpc stopped with it
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not list((tmp_path / "t.json.bmv2").glob("*.ipc"))


def test_bmv2_names_the_interfaces_that_do_not_exist(tmp_path: Path) -> None:
    topo = Topology.load(_written(tmp_path, "leaf-spine:1x1x1"))
    run_dir = tmp_path / "run"
    absent = missing_interfaces(topology_commands(topo, run_dir))
    assert absent == {"s1": ["s1-eth1"], "l1": ["l1-eth1", "l1-eth2"]}
    here = topology_commands(topo, run_dir, iface_format="lo", ifaces={("l1", 2): "nosuch7"})
    assert missing_interfaces(here) == {"l1": ["nosuch7"]}


UNUSABLE = """
import sys
from pathlib import Path
from inaemu.cli.bmv2 import missing_interfaces, unusable_interfaces
from inaemu.controller.bmv2 import topology_commands
from inaemu.topology.model import Topology
topo = Topology.load(Path(sys.argv[1]))
ifaces = {("l1", 1): "down0", ("l1", 2): "small0", ("s1", 1): "lo"}
commands = topology_commands(topo, Path(sys.argv[2]), iface_format="lo", ifaces=ifaces)
print(missing_interfaces(commands))
print("\\n".join(unusable_interfaces(commands)))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a network namespace")
def test_bmv2_names_the_interfaces_that_cannot_carry_a_frame(tmp_path: Path) -> None:
    """A port's interface that is down, or whose MTU is below an INA frame's, is said on a
    line each (the softswitch's check); asked inside a namespace of the test's own."""
    topology = _written(tmp_path, "leaf-spine:1x1x1")
    ns = f"inaemu-bmv2-if-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot create a network namespace here: {made.stderr.strip()}")
    try:
        for cmd in (
            "link add down0 type veth peer name down1",
            "link add small0 type veth peer name small1",
            "link set lo up", "link set small0 up", "link set small1 up",
            "link set small0 mtu 200",
        ):  # fmt: skip
            subprocess.run(["ip", "-n", ns, *cmd.split()], check=True, capture_output=True)
        proc = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", UNUSABLE, str(topology),
             str(tmp_path / "run")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        missing, *problems = proc.stdout.strip().splitlines()
        assert missing == "{}"
        assert problems == [
            "l1: interface 'down0' is down: `ip link set down0 up` first",
            "l1: interface 'small0' has MTU 200, less than the 298 bytes an INA frame needs: "
            "`ip link set small0 mtu 1500`",
        ]
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _written(tmp_path: Path, spec: str) -> Path:
    topology = tmp_path / "t.json"
    assert cli.main(["topo", spec, "-o", str(topology)]) == 0
    return topology


def test_bmv2_refuses_two_switches_at_one_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topology = tmp_path / "t.json"
    args = ["topo", "leaf-spine:1x1x1", "--grpc", "l1=127.0.0.1:9559", "-o", str(topology)]
    assert cli.main(args) == 0  # a valid topology: one server may serve several devices
    capsys.readouterr()
    assert cli.main(["bmv2", "-t", str(topology), "--print"]) == 1
    err = capsys.readouterr().err
    assert "switches 's1' and 'l1' have the same P4Runtime address 127.0.0.1:9559" in err, err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--iface", "s1-1=veth"], "--iface s1-1=veth: write SWITCH:PORT=IFNAME"),
        (["--iface", "s9:1=veth"], "with a switch of the topology (s1, l1)"),
        (["--iface-format", "{sw}-{port}"], "--iface-format {sw}-{port}: use {switch} and {port}"),
        (["--thrift-port", "65535"], "--thrift-port 65535: 2 switches need ports from it"),
    ],
)
def test_bmv2_refuses_bad_options(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topology = tmp_path / "t.json"
    assert cli.main(["topo", "leaf-spine:1x1x1", "-o", str(topology)]) == 0
    capsys.readouterr()
    assert cli.main(["bmv2", "-t", str(topology), "--print", *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("inaemu bmv2: ") and message in err, err
