"""`inaemu mininet`: allreduce scenarios on Mininet networks (root), and the parts of the runner
that need no network.

The scenarios run the runner as a user does (`python -m inaemu.mininet ...`, a process of its
own) and check what it reports against what must be true: every worker's result equal to
numpy's sum (the runner checks, and exits 1 if not), the bytes each link carried against the
frames each worker must send, the shaping on every link, the trees the controller chose
(traffic on both spines, or on one with ina-1tree), the injected loss in the switches'
counters, the run directory's layout, and that nothing it made is left: no interface, switch,
host shell or worker process, after a verified run, a failed one and a Ctrl-C.

Skipped only where network namespaces cannot be made or Mininet cannot be installed (the
reason is printed with -ra); the bmv2 scenario also where bmv2 is not installed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inaemu.common.wire import FRAME_BYTES, K
from inaemu.conformance.pcap import read_pcap
from inaemu.hostlib.codecs import make_codec
from inaemu.hostlib.codecs.base import simulate_allreduce
from inaemu.hostlib.worker import expected_sum, worker_input
from inaemu.mininet import debian
from inaemu.mininet.algo_run import tcpdump_missed
from inaemu.mininet.algos import ALGORITHMS, Algorithm, algorithm, register
from inaemu.mininet.run import default_run_dir, parse_size
from inaemu.mininet.scenario import link_params
from inaemu.mininet.scenario import root_interfaces as root_ifs
from inaemu.topology.builders import star
from inaemu.topology.model import Link
from tests.netns import namespaces_missing

ROOT = Path(__file__).resolve().parents[1]
NS_MISSING = namespaces_missing()
SCENARIO_TIMEOUT = 120  # seconds: each takes about 5 to 15 here


# ---------------------------------------------------------------------- no network needed


def test_sizes_are_elements_with_binary_suffixes() -> None:
    assert parse_size("100000") == 100_000
    assert parse_size("100_000") == 100_000
    assert parse_size("64K") == 65_536
    assert parse_size("16m") == 16 << 20
    for bad in ("", "0", "1.5M", "-4", "4T", "M"):
        with pytest.raises(Exception, match="bad size"):
            parse_size(bad)


def test_the_default_run_dir_is_outside_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Following the docs from the repository root writes nothing into the checkout: the
    default run dir is a new one under the temp dir."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = default_run_dir("leaf-spine:2x2x2", "softswitch", "ina,ring")
    assert path.is_absolute() and not path.resolve().is_relative_to(ROOT)
    assert path.parent == tmp_path / "inaemu-mininet"
    assert re.fullmatch(r"\d{8}-\d{6}-leaf-spine-2x2x2-softswitch-ina,ring", path.name), path


def test_what_tcpdump_missed() -> None:
    log = (
        "tcpdump: listening on s1-eth1, link-type EN10MB (Ethernet)\n"
        "1969 packets captured\n2048 packets received by filter\n0 packets dropped by kernel\n"
    )
    assert tcpdump_missed(log) == 79  # seen, never written: the pcap is short
    assert tcpdump_missed(log.replace("1969", "2048")) == 0
    assert tcpdump_missed(log.replace("0 packets dropped", "5 packets dropped")) == 79
    assert tcpdump_missed("tcpdump: listening on s1-eth1\n") is None  # killed: no counts


def test_link_options_become_tclink_parameters() -> None:
    def params(options: str, bw: float | None = None) -> dict[str, Any]:
        return link_params(Link("h1", None, "s1", 1, options), bw, 0)

    assert params("") == {}
    assert params("", 20) == {"bw": 20}
    assert params("bw=5", 20) == {"bw": 5.0}  # the link's own bandwidth wins
    assert params("bw=5,delay=2ms max_queue_size=100") == {
        "bw": 5.0,
        "delay": "2ms",
        "max_queue_size": 100,
    }
    for bad, message in (
        ("bw=fast", "Mbit/s"),
        ("bw=0", "outside"),
        ("bw=2000", "outside"),
        ("color=red", "unknown"),
        ("bw", "key=value"),
        ("loss=lots", "number"),
    ):
        with pytest.raises(ValueError, match=message):
            params(bad)


def test_algorithm_registry() -> None:
    names = {"ina", "ina-1tree", "ring", "hd", "hdrm", "multitree", "ps", "ring2d", "dtree"}
    assert names | {"gloo"} <= set(ALGORITHMS)
    assert algorithm("ina").facts.trees == 0
    assert algorithm("ina-1tree").facts.trees == 1
    with pytest.raises(ValueError, match=r"unknown algorithm 'rings'.*ina, ina-1tree"):
        algorithm("rings")

    class Again(Algorithm):
        name = "ina"

    with pytest.raises(ValueError, match="taken"):
        register(Again)

    class Unknown(Algorithm):
        name = "test-ring"

    with pytest.raises(ValueError, match=r"'test-ring' has no facts in runs/algorithms.py"):
        register(Unknown)

    class Ps(Algorithm):  # a runner of its own for an algorithm runs.algorithms knows
        name = "ps"

    saved = dict(ALGORITHMS)
    del ALGORITHMS["ps"]
    try:
        register(Ps)
        assert isinstance(algorithm("ps"), Ps) and algorithm("ps").facts.name == "ps"
    finally:
        ALGORITHMS.clear()
        ALGORITHMS.update(saved)  # in its order


def test_expected_results() -> None:
    n, size = 3, 1000
    inputs = [worker_input(5, r, size, codec="int32") for r in range(n)]
    exact = expected_sum(5, n, size, codec="int32")
    assert exact.dtype == np.int32
    assert np.array_equal(exact, np.sum(inputs, axis=0, dtype=np.int64).astype(np.int32))
    floats = [worker_input(5, r, size, codec="fixedpoint") for r in range(n)]
    reference, _ = simulate_allreduce(make_codec("fixedpoint"), floats)
    got = expected_sum(5, n, size, codec="fixedpoint")
    assert np.array_equal(got, reference[0])
    assert np.allclose(got, np.sum(floats, axis=0), atol=1e-4)


def fake_mininet(folder: Path) -> Path:
    """A folder holding a stand-in `mininet` package with the modules the loader imports."""
    package = folder / "mininet"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in ("node", "link", "log", "util"):
        (package / f"{name}.py").write_text(f"WHO = {name!r}\n")
    (package / "net.py").write_text("from mininet.node import WHO as NODE\nVERSION = '9.9'\n")
    return folder


@pytest.fixture
def no_mininet_modules() -> Iterator[None]:
    """No `mininet` or `mininet.*` in sys.modules during the test; as before after it."""

    def ours() -> list[str]:
        return [k for k in sys.modules if k == "mininet" or k.startswith("mininet.")]

    saved = {k: sys.modules.pop(k) for k in ours()}
    yield
    for k in ours():
        del sys.modules[k]
    sys.modules.update(saved)


@pytest.mark.usefixtures("no_mininet_modules")
def test_mininet_is_imported_by_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The loader imports the package under its own name from the folder it found, and its
    own imports (`from mininet.node import ...`) resolve there, not on sys.path."""
    monkeypatch.setenv(debian.ENV_DIR, str(fake_mininet(tmp_path)))
    monkeypatch.syspath_prepend(str(ROOT))  # where this repository's mininet/ would shadow
    api = debian.load()
    assert api.version == "9.9" and api.net.NODE == "node" and api.util.WHO == "util"
    assert Path(api.net.__file__) == tmp_path / "mininet" / "net.py"
    assert str(tmp_path) not in sys.path


@pytest.mark.usefixtures("no_mininet_modules")
def test_a_foreign_mininet_module_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Something else under the name `mininet` (e.g. this repository's folder imported as a
    top-level package) is never taken for Mininet."""
    monkeypatch.setenv(debian.ENV_DIR, str(fake_mininet(tmp_path)))
    fake = types.ModuleType("mininet")
    fake.__file__ = str(ROOT / "mininet" / "__init__.py")
    sys.modules["mininet"] = fake
    with pytest.raises(debian.MininetUnavailable, match="already taken"):
        debian.load()


def test_cli_dispatches_to_the_runner() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "inaemu.cli", "mininet", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--topo" in proc.stdout and "ina-1tree" in proc.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "inaemu.mininet", "--topo", "star:2", "--algo", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "unknown algorithm 'nope'" in bad.stderr


# ---------------------------------------------------------------------- scenarios (root)


@pytest.fixture(scope="module")
def mininet_ready() -> None:
    """Namespaces can be made and Mininet is installed (apt-get, as the runner does)."""
    if NS_MISSING is not None:
        pytest.skip(f"Mininet scenarios: {NS_MISSING}")
    try:
        debian.ensure(install=True)
    except debian.MininetUnavailable as exc:
        pytest.skip(f"Mininet scenarios: {exc}")


def test_debian_mininet_is_imported_even_from_the_repository_root(mininet_ready: None) -> None:
    """With the repository root first on sys.path, `import mininet` in the venv (which does
    not see Debian's) finds only this repository's mininet/ folder, as a namespace portion (no
    __init__.py, so that any regular `mininet` package would win); the loader gets Debian's."""
    code = (
        "import sys; sys.path.insert(0, '.'); import importlib.util as u; "
        "print(u.find_spec('mininet').origin); "
        "from inaemu.mininet import debian; api = debian.load(); "
        "print(api.net.__file__); print(api.node.Switch.__module__)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    shadow, net, module = proc.stdout.split()
    assert shadow == "None"  # a namespace portion: no module of its own
    folder = debian.mininet_dir()
    assert folder is not None and Path(net) == folder / "mininet" / "net.py"
    assert module == "mininet.node"


@pytest.fixture
def in_root_ns() -> Iterator[None]:
    """Root namespace interfaces before and after: a scenario leaves none of its own."""
    before = root_ifs()
    yield
    left = {i for i in root_ifs() - before if "-eth" in i}
    assert not left, f"interfaces left in the root namespace: {sorted(left)}"


def mininet(
    run_dir: Path, *args: str, timeout: float = SCENARIO_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "inaemu.mininet", "--run-dir", str(run_dir), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def assert_removed(run_dir: Path) -> None:
    """Nothing of build/network.json is left: interfaces, switches, host shells, workers."""
    record = json.loads((run_dir / "build" / "network.json").read_text())
    assert record["interfaces"], record
    assert not set(record["interfaces"]) & root_ifs()
    pids = [s["pid"] for s in record["switches"].values()]
    pids += [h["shell_pid"] for h in record["hosts"].values()]
    pids += [p["pid"] for p in record["processes"]]
    deadline = time.monotonic() + 5  # a killed process may take a moment to be reaped
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if alive(p)], f"still running: {[p for p in pids if alive(p)]}"


def summary_of(run_dir: Path, proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    assert summary["verified"] is True and summary["problems"] == []
    assert "verified:" in proc.stdout and "completion:" in proc.stdout
    return summary


def links_by_name(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{u['a']}->{u['b']}": u for u in summary["links"]}


def check_host_links(summary: dict[str, Any], phases: int = 1) -> None:
    """Every host link carried at least the frames its worker must send, each way."""
    least = -(-summary["size"] // K) * FRAME_BYTES * phases
    hosts = [u for u in summary["links"] if ":" not in u["a"]]
    assert len(hosts) == len(summary["workers"])
    for u in hosts:
        assert u["a_to_b"] >= least and u["b_to_a"] >= least, u


@pytest.mark.usefixtures("mininet_ready", "in_root_ns")
def test_star_on_the_softswitch(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = mininet(run, "--topo", "star:4", "--size", "64K", "--bw", "50", "--pcap")
    summary = summary_of(run, proc)
    assert summary["workers"] == ["h1", "h2", "h3", "h4"] and summary["switch"] == "softswitch"
    check_host_links(summary)
    assert {u["shaping"] for u in summary["links"]} == {"rate 50Mbit"}
    assert summary["algo_facts"]["trees"] == "1"
    # the workers got no --switch-mac: the host set-up made their ARP entry
    assert "--switch-mac" not in (run / "logs" / "workers.txt").read_text()
    # the run directory, as p4lang/tutorials lay one out
    topo = json.loads((run / "build" / "topology.json").read_text())
    assert re.fullmatch(r"127\.0\.0\.1:\d+", topo["switches"]["s1"]["grpc"])
    controller = (run / "logs" / "controller.log").read_text()
    for command in ("pipeline push", "routes", "job add", "stats"):
        assert f"$ inaemu {command} -t {run / 'build' / 'topology.json'}" in controller
    assert "READY name=s1" in (run / "logs" / "s1.log").read_text()
    assert summary["capture_missed"] == {f"s1-eth{p}": 0 for p in range(1, 5)}
    for u in summary["links"]:  # every INA frame the kernel counted, both ways, was captured
        packets = u["a_to_b_packets"] + u["b_to_a_packets"]
        frames = read_pcap(run / "pcaps" / f"{u['ifname']}.pcap")
        # (a frame the host's kernel sends on its own, after the counters were read, may be
        # in the capture too: only the INA frames are compared)
        assert sum(len(f) == FRAME_BYTES for f in frames) == packets, u["ifname"]
    assert not list((run / "build" / "results").glob("*.npy"))  # verified: removed
    assert "switch s1: packets in" in proc.stdout and "job 1: packets in" in proc.stdout
    assert_removed(run)


@pytest.mark.usefixtures("mininet_ready", "in_root_ns")
@pytest.mark.parametrize("algo", ["ina", "ina-1tree"])
def test_leaf_spine_on_the_softswitch(tmp_path: Path, algo: str) -> None:
    """Two spines: ina stripes over a tree per spine, ina-1tree uses one spine only. The
    one-tree run is under 1 % injected loss, with the fixed-point codec (checked bit for bit
    against the reference)."""
    run = tmp_path / "run"
    args = ["--topo", "leaf-spine:2x2x2", "--algo", algo, "--size", "32K", "--bw", "50"]
    if algo == "ina-1tree":
        args += ["--loss", "0.01", "--codec", "fixedpoint", "--keep-results"]
    summary = summary_of(run, mininet(run, *args))
    check_host_links(summary)
    links = links_by_name(summary)
    frames = -(-summary["size"] // K)
    spine_bytes = {  # both ways on the links from the leaves to each spine
        spine: sum(
            u["a_to_b"] + u["b_to_a"]
            for k, u in links.items()
            if k.startswith("l") and k.split("->")[1].startswith(f"{spine}:")
        )
        for spine in ("s1", "s2")
    }
    if algo == "ina":
        assert summary["algo_facts"]["trees"] == "2"
        for spine, carried in spine_bytes.items():  # half the chunks each, up and down
            assert carried >= 2 * 2 * (frames // 2) * FRAME_BYTES, (spine, spine_bytes)
    else:
        assert summary["algo_facts"]["trees"] == "1"
        used = [s for s, b in spine_bytes.items() if b > 0]
        assert len(used) == 1, spine_bytes
        assert re.search(r"loss [1-9]", summary["stats"]), summary["stats"]
        results = sorted((run / "build" / "results").glob("*.npy"))
        assert len(results) == 4  # kept; all equal to the reference
        first = np.load(results[0])
        assert first.dtype == np.float32
        assert all(np.array_equal(first, np.load(r)) for r in results[1:])
    assert_removed(run)


@pytest.mark.usefixtures("mininet_ready", "in_root_ns")
def test_star_on_bmv2(tmp_path: Path) -> None:
    from inaemu.conformance.bmv2_target import TOOLS
    from inaemu.p4.tools import SIMPLE_SWITCH_GRPC, missing_tools

    missing = missing_tools((*TOOLS, SIMPLE_SWITCH_GRPC))
    if missing is not None:
        pytest.skip(f"bmv2: {missing}")
    run = tmp_path / "run"
    args = ["--topo", "star:3", "--switch", "bmv2", "--size", "8K", "--bw", "50", "--pcap"]
    summary = summary_of(run, mininet(run, *args))
    assert summary["switch"] == "bmv2"
    check_host_links(summary)
    # bmv2's drops outside its pipeline, read from the kernel (it counts none itself)
    (row,) = summary["rows"]
    drops = row["accounting"]["port_drops"]
    assert set(drops) == {"s1"} and set(drops["s1"]) == {"rx_ring_dropped", "veth_tx_dropped"}
    assert all(isinstance(n, int) and n >= 0 for n in drops["s1"].values())
    topo = json.loads((run / "build" / "topology.json").read_text())
    assert topo["switches"]["s1"]["program"] == str(run / "build" / "ina.json")
    for port in range(1, 4):  # bmv2's own captures
        for way in ("in", "out"):
            assert (run / "pcaps" / f"s1-eth{port}_{way}.pcap").stat().st_size > 0
    assert not list((run / "build").glob("*.ipc"))  # its notifications socket is gone
    assert_removed(run)


@pytest.mark.usefixtures("mininet_ready", "in_root_ns")
def test_a_failed_run_reports_and_removes_everything(tmp_path: Path) -> None:
    """Every packet lost: the workers give up, the runner says which and exits 1. The
    topology comes from a file, one link with a bandwidth of its own."""
    topo = star(2)
    topo.links[1] = dataclasses.replace(topo.links[1], options="bw=20")
    topo.save(tmp_path / "two.json")
    run = tmp_path / "run"
    args = ["-t", str(tmp_path / "two.json"), "--bw", "50", "--size", "1K", "--loss", "1"]
    proc = mininet(run, *args, "--timeout", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["verified"] is False and summary["topology"] == "two"
    assert [u["shaping"] for u in summary["links"]] == ["rate 50Mbit", "rate 20Mbit"]
    assert len(summary["problems"]) == 2
    assert all("exit 1" in p and "no result for" in p for p in summary["problems"])
    assert "FAILED: 2 problem(s)" in proc.stdout
    assert_removed(run)
    # the same run directory again, without the loss: nothing of the last run is in the way
    # (its job state, its summary), and this run's record is its own
    first = json.loads((run / "build" / "network.json").read_text())
    again = mininet(run, "-t", str(tmp_path / "two.json"), "--size", "1K")
    summary_of(run, again)
    assert json.loads((run / "build" / "network.json").read_text()) != first
    assert (run / "logs" / "controller.log").read_text().count("$ inaemu job add") == 1
    assert_removed(run)


@pytest.mark.usefixtures("mininet_ready", "in_root_ns")
def test_ctrl_c_removes_everything(tmp_path: Path) -> None:
    """A Ctrl-C (SIGINT) while the workers run: exit 130 and nothing left."""
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "inaemu.mininet", "--run-dir", str(run)]
    argv += ["--topo", "star:2", "--size", "4M", "--bw", "5"]  # about a minute of traffic
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert proc.stdout is not None
        seen = ""
        deadline = time.monotonic() + SCENARIO_TIMEOUT
        while "programmed" not in seen and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen += line
        assert "programmed" in seen, seen + (proc.stderr.read() if proc.stderr else "")
        record = run / "build" / "network.json"
        while len(json.loads(record.read_text())["processes"]) < 2:  # both workers started
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, seen + out + err
    assert "interrupted" in err and "network removed" in err
    assert not (run / "summary.json").exists()
    assert_removed(run)


def _record_when_running(run: Path, proc: subprocess.Popen[str], workers: int) -> dict[str, Any]:
    """build/network.json of the run `proc` makes in `run`, once its `workers` started."""
    record = run / "build" / "network.json"
    deadline = time.monotonic() + SCENARIO_TIMEOUT
    while True:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the network did not come up"
        if record.exists():
            try:
                got: dict[str, Any] = json.loads(record.read_text())
            except json.JSONDecodeError:  # being written
                got = {}
            if len(got.get("processes", ())) >= workers:
                return got
        time.sleep(0.1)


@pytest.mark.usefixtures("mininet_ready", "in_root_ns")
def test_two_networks_at_once(tmp_path: Path) -> None:
    """Issue 22, item 6: a second network on the machine while the first runs (two users, two
    test runs). Each chose a prefix of its own for its switch interfaces; both verify their
    sums and both are removed. A third asking for the first one's prefix is refused before it
    makes anything. Before, the second said "interface(s) s1-eth1, s1-eth2 already exist"."""
    first, second, third = tmp_path / "first", tmp_path / "second", tmp_path / "third"
    argv = [sys.executable, "-m", "inaemu.mininet", "--topo", "star:2", "--progress", "0"]
    slow = subprocess.Popen(  # about 30 s of traffic: up all the while the second runs
        [*argv, "--run-dir", str(first), "--size", "2M", "--bw", "5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        record = _record_when_running(first, slow, 2)
        prefix = record["prefix"]
        assert re.fullmatch(r"[a-z][a-z0-9]{2}-", prefix), prefix
        assert set(record["interfaces"]) == {f"{prefix}s1-eth1", f"{prefix}s1-eth2"}
        assert set(record["interfaces"]) <= root_ifs()
        quick = mininet(second, "--topo", "star:2", "--size", "8K", "--bw", "50", "--pcap")
        assert slow.poll() is None, "the first network ended before the second one ran"
        summary = summary_of(second, quick)
        mine = summary["network"]
        assert mine["prefix"] != prefix and not set(mine["interfaces"]) & set(record["interfaces"])
        check_host_links(summary)
        # what a user reads is the topology's names, not the prefixed interfaces
        assert {u["ifname"] for u in summary["links"]} == {"s1-eth1", "s1-eth2"}
        assert summary["capture_missed"] == {"s1-eth1": 0, "s1-eth2": 0}
        assert (second / "pcaps" / "s1-eth1.pcap").stat().st_size > 0
        assert_removed(second)
        assert set(record["interfaces"]) <= root_ifs()  # the first one's are still there
        clash = mininet(third, "--topo", "star:2", "--size", "8K", "--prefix", prefix)
        assert clash.returncode == 2, clash.stdout + clash.stderr
        assert f"interface(s) {prefix}s1-eth1, {prefix}s1-eth2 already exist" in clash.stderr
        assert "Traceback" not in clash.stderr
        out, err = slow.communicate(timeout=SCENARIO_TIMEOUT)
    finally:
        if slow.poll() is None:
            slow.kill()
            slow.wait()
    summary_of(first, subprocess.CompletedProcess(slow.args, slow.returncode, out, err))
    assert_removed(first)


@pytest.mark.usefixtures("mininet_ready", "in_root_ns")
def test_progress_and_the_default_run_dir(tmp_path: Path) -> None:
    """Run from the repository root as the docs say, without --run-dir: the run dir is a new
    one under the temp dir (here TMPDIR), named at the start; while the workers run, a
    progress line every --progress seconds says which run, how many are done, the time and
    the bytes so far."""
    argv = [sys.executable, "-m", "inaemu.mininet", "--topo", "star:2", "--size", "256K"]
    argv += ["--bw", "2", "--progress", "1"]  # about 5 s of traffic
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=SCENARIO_TIMEOUT, cwd=ROOT, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    (run_line,) = [line for line in lines[:3] if line.startswith("run dir: ")]
    run = Path(run_line.removeprefix("run dir: "))
    assert run.parent == tmp_path / "inaemu-mininet" and (run / "summary.json").is_file()
    assert lines[-1].startswith(f"run dir: {run} ")
    first = next(i for i, line in enumerate(lines) if line.startswith("programmed in"))
    last = lines.index("network removed")
    progress = [
        m
        for line in lines[first:last]
        if (
            m := re.fullmatch(
                r"  running ina x 262,144: ([0-2])/2 workers done after (\d+) s \(limit 1800 "
                r"s\); the hosts sent ([\d.,]+) (B|KiB|MiB) so far, ([\d.,]+) Mbit/s",
                line,
            )
        )
    ]
    assert len(progress) >= 2, proc.stdout
    seconds = [int(m[2]) for m in progress]
    assert seconds == sorted(seconds) and seconds[-1] > seconds[0]
    assert (
        lines[last - 1]
        == f"2/2 workers done in {lines[last - 1].split()[4]} s; removing the network"
    )
    assert_removed(run)
