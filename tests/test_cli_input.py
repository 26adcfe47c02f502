"""The `inaemu` CLI on bad input and refusing switches: one line `inaemu <command>: ...` on
stderr and a non-zero exit status, never a traceback. The commands run in this process
(`cli.main`), so an exception that escapes fails the test as itself."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from inaemu.controller import cli, demo, p4rt
from inaemu.controller.stats import StatsReport, SwitchCounters
from inaemu.controller.topology import Topology, star
from inaemu.softswitch.p4runtime.server import P4RuntimeServer, _Servicer
from inaemu.softswitch.pipeline import Pipeline

UNREACHABLE = "127.0.0.1:1"  # nothing listens on port 1: connection refused at once


def inaemu(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run a command that must fail; return its one-line message."""
    rc, _, err = inaemu(capsys, *args)
    assert rc == 1, err
    assert err.startswith(f"inaemu {args[0]}: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def star_json(grpc_address: str = UNREACHABLE) -> dict[str, Any]:
    topo = star(2)
    topo.switches["s1"] = replace(topo.switches["s1"], grpc=grpc_address)
    return topo.to_json()


@pytest.fixture
def server() -> Iterator[P4RuntimeServer]:
    with P4RuntimeServer(Pipeline(), address="127.0.0.1:0", preconfigured=True) as srv:
        yield srv


# ---------------------------------------------------------------------- topology fields


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change to the star topology: `path` is dot-separated keys or list indexes."""

    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return change


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for key in parents:
            node = node[key]
        del node[last]

    return change


MAC1 = "08:00:00:00:00:00"  # h1's MAC in star(2)

BAD_FIELDS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("hosts-list", _set("hosts", [{"ip": "10.0.0.1/24"}]), "hosts: expected an object"),
    ("hosts-null", _set("hosts", None), "hosts: expected an object"),
    ("host-list", _set("hosts.h1", [1]), "host 'h1': expected an object"),
    ("host-string", _set("hosts.h1", "10.0.0.1"), "host 'h1': expected an object"),
    ("host-unknown-key", _set("hosts.h1.colour", "red"), "host 'h1': unknown key 'colour'"),
    ("host-no-ip", _drop("hosts.h1.ip"), "host 'h1': \"ip\" is missing"),
    ("host-ip-int", _set("hosts.h1.ip", 5), "host 'h1': ip: expected an IPv4"),
    ("host-ip-bad", _set("hosts.h1.ip", "10.0.0.300/16"), "host 'h1': ip: expected an IPv4"),
    ("host-prefix", _set("hosts.h1.ip", "10.0.0.1/33"), "host 'h1': ip: expected an IPv4"),
    ("host-prefix-text", _set("hosts.h1.ip", "10.0.0.1/x"), "host 'h1': ip: expected an IPv4"),
    ("host-mac-list", _set("hosts.h1.mac", [8, 0]), "host 'h1': mac: expected a MAC"),
    ("host-mac-bad", _set("hosts.h1.mac", "08:00"), "host 'h1': mac: expected a MAC"),
    ("host-role-int", _set("hosts.h1.role", 1), "host 'h1': role: expected a string"),
    ("host-name", lambda d: d["hosts"].update({"h 3": {}}), "hosts: name 'h 3': expected"),
    ("switches-list", _set("switches", []), "switches: expected an object"),
    ("switch-null", _set("switches.s1", None), "switch 's1': expected an object"),
    (
        "device-id-text",
        _set("switches.s1.device_id", "one"),
        "switch 's1': device_id: expected an integer in 0..18446744073709551615, got \"one\"",
    ),
    ("device-id-bool", _set("switches.s1.device_id", True), "device_id: expected an integer"),
    ("device-id-float", _set("switches.s1.device_id", 1.5), "device_id: expected an integer"),
    ("device-id-negative", _set("switches.s1.device_id", -1), "device_id: expected an integer"),
    ("device-id-huge", _set("switches.s1.device_id", 2**64), "device_id: expected an integer"),
    ("grpc-int", _set("switches.s1.grpc", 9559), "switch 's1': grpc: expected a string"),
    ("grpc-no-port", _set("switches.s1.grpc", "127.0.0.1"), 'grpc: expected a string "host'),
    ("grpc-port-range", _set("switches.s1.grpc", "127.0.0.1:65536"), "grpc: expected"),
    ("grpc-empty", _set("switches.s1.grpc", ""), "grpc: expected"),
    ("role-int", _set("switches.s1.role", 3), "switch 's1': role: expected a string"),
    ("agg-ip", _set("switches.s1.agg_ip", "10.0.0.256"), "switch 's1': agg_ip: expected an IPv4"),
    ("agg-ip-prefix", _set("switches.s1.agg_ip", "10.0.0.254/24"), "agg_ip: expected an IPv4"),
    ("agg-mac", _set("switches.s1.agg_mac", 2), "switch 's1': agg_mac: expected a MAC"),
    ("program-int", _set("switches.s1.program", 1), "switch 's1': program: expected a string"),
    ("runtime-json", _set("switches.s1.runtime_json", {}), "runtime_json: expected a string"),
    ("switch-name", lambda d: d["switches"].update({"s-2": {}}), "switches: name 's-2'"),
    ("links-int", _set("links", 5), "links: expected a list"),
    ("links-object", _set("links", {"h1": "s1-p1"}), "links: expected a list"),
    ("link-string", _set("links.0", "h1 s1-p1"), "link #0: expected a list"),
    ("link-short", _set("links.0", ["h1"]), "link #0: expected a list of 2 to 3 items"),
    ("link-long", _set("links.0", ["h1", "s1-p1", "a", "b"]), "link #0: expected a list of 2"),
    ("link-end-int", _set("links.0", [1, "s1-p1"]), "link #0: first end: expected a string"),
    ("link-end-null", _set("links.1.1", None), "link #1: second end: expected a string"),
    ("link-options", _set("links.0", ["h1", "s1-p1", 10]), "link #0: options: expected a string"),
    ("top-level-list", lambda d: d.clear(), "the topology has no switches"),
]


@pytest.mark.parametrize(
    ("change", "message"), [c[1:] for c in BAD_FIELDS], ids=[c[0] for c in BAD_FIELDS]
)
def test_wrongly_typed_fields_are_one_line_errors(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: Callable[[dict[str, Any]], None],
    message: str,
) -> None:
    data = star_json()
    change(data)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    err = refused(capsys, "stats", "-t", str(path))
    assert message in err
    assert str(path) in err  # the file to fix


def test_the_top_level_must_be_an_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "t.json").write_text("[1, 2]")
    assert "expected an object" in refused(capsys, "job", "list", "-t", str(tmp_path / "t.json"))


# ---------------------------------------------------------------------- duplicates


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"hosts": {"h1": {"ip": "10.0.0.1/24", "mac": "08:00:00:00:00:01"},'
            ' "h1": {"ip": "10.0.0.2/24", "mac": "08:00:00:00:00:02"}},'
            ' "switches": {"s1": {}}, "links": [["h1", "s1-p1"]]}',
            'hosts: "h1" appears twice',
        ),
        (
            '{"hosts": {"h1": {"ip": "10.0.0.1/24", "mac": "08:00:00:00:00:01",'
            ' "ip": "10.0.0.9/24"}}, "switches": {"s1": {}}, "links": [["h1", "s1-p1"]]}',
            "host 'h1': \"ip\" appears twice",
        ),
        (
            '{"switches": {"s1": {"device_id": 1, "device_id": 2}}, "links": []}',
            "switch 's1': \"device_id\" appears twice",
        ),
        (
            '{"switches": {"s1": {}}, "links": [], "links": []}',
            ': "links" appears twice',
        ),
    ],
    ids=["host", "host-field", "switch-field", "top-level"],
)
def test_duplicate_json_keys_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "t.json"
    path.write_text(text)
    assert message in refused(capsys, "stats", "-t", str(path))


def _two_switches(data: dict[str, Any], **s2: Any) -> None:
    data["switches"]["s2"] = {"grpc": "127.0.0.1:9560", "device_id": 2, **s2}
    data["links"].append(["s1-p3", "s2-p1"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_set("hosts.h2.mac", MAC1), f"hosts 'h1' and 'h2' share MAC {MAC1}"),
        (_set("hosts.h2.mac", MAC1.upper()), "hosts 'h1' and 'h2' share MAC"),
        (_set("hosts.h2.ip", "10.0.0.1/24"), "hosts 'h1' and 'h2' share IP 10.0.0.1"),
        (_set("hosts.h2.ip", "10.0.0.254/16"), "host 'h2' has IP 10.0.0.254, the aggregation"),
        (_set("hosts.h2.mac", "02:00:00:00:00:fe"), "host 'h2' has MAC 02:00:00:00:00:fe, the"),
        (
            lambda d: _two_switches(d, grpc=UNREACHABLE, device_id=1),
            f"switches 's1' and 's2' are both device 1 at {UNREACHABLE}",
        ),
        (_set("links.1", ["h2", "s1-p1"]), "port 1 of switch 's1' is used by links #0 and #1"),
        (lambda d: d["hosts"].update({"s1": d["hosts"]["h1"]}), "'s1' is both a host and a"),
    ],
    ids=["mac", "mac-case", "ip", "host-ip-agg", "host-mac-agg", "device", "port", "name"],
)
def test_duplicates_are_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: Callable[[dict[str, Any]], None],
    message: str,
) -> None:
    data = star_json()
    change(data)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    assert message in refused(capsys, "stats", "-t", str(path))


def test_two_switches_may_share_a_device_id_at_different_addresses() -> None:
    data = star_json()
    _two_switches(data, device_id=1)
    assert Topology.from_json(data).switches["s2"].device_id == 1


# ---------------------------------------------------------------------- files


def test_device_config_that_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(star_json()))
    missing = tmp_path / "build" / "ina.json"
    err = refused(capsys, "stats", "-t", str(path), "--device-config", str(missing))
    assert f"--device-config {missing}: no such file" in err
    err = refused(capsys, "routes", "-t", str(path), "--device-config", str(tmp_path))
    assert "is not a file" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "is a directory"),
        (b"\xb5\x00\xff", "not UTF-8 text"),
        (b"{nope", "not valid JSON"),
    ],
    ids=["directory", "binary", "json"],
)
def test_unreadable_topology_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, message: str
) -> None:
    path = tmp_path / "t.json"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    err = refused(capsys, "stats", "-t", str(path))
    assert str(path) in err and message in err


GOOD_JOB = {
    "job_id": 1,
    "workers": ["h1"],
    "pool_size": 4,
    "n_trees": 1,
    "pools": {"s1": [0, 4]},
    "mgids": [{"s1": 1}],
    "epochs": {"s1": 1},
}


def _state(*jobs: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {"jobs": list(jobs), "epochs": {"s1": 1}} | changes


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (_state(GOOD_JOB | {"job_id": "x"}), "job_id"),
        (_state(GOOD_JOB | {"workers": "h1"}), "workers"),
        (_state({k: v for k, v in GOOD_JOB.items() if k != "pool_size"}), '"pool_size" is missing'),
        (_state(GOOD_JOB | {"pools": {"s1": [0]}}), "expected a [base, size] pool"),
        (_state(GOOD_JOB, GOOD_JOB | {"job_id": 2, "mgids": [{"s1": 2}]}), "does not fit"),
        (_state(GOOD_JOB, GOOD_JOB | {"job_id": 2, "pools": {"s1": [4, 4]}}), "is taken"),
        (_state(GOOD_JOB, epochs=None), "epochs"),
        ({"jobs": {}, "epochs": {}}, "jobs: expected a list"),
        ([], "expected an object"),
    ],
    ids=[
        "job-id",
        "workers",
        "pool-missing",
        "pool-shape",
        "pools-overlap",
        "mgid-taken",
        "epochs",
        "jobs-object",
        "list",
    ],
)
def test_bad_job_state_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], state: Any, message: str
) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(star_json()))
    (tmp_path / "t.json.jobs.json").write_text(json.dumps(state))
    err = refused(capsys, "job", "list", "-t", str(path))
    assert "t.json.jobs.json" in err and message in err and "delete" in err


def test_topology_output_that_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "no" / "such" / "dir" / "t.json"
    err = refused(capsys, "topo", "star", "-o", str(target))
    assert str(target) in err and "No such file or directory" in err


# ---------------------------------------------------------------------- switches


def test_connection_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(star_json(UNREACHABLE)))
    err = refused(capsys, "stats", "-t", str(path))
    assert f"cannot program switch 's1' at {UNREACHABLE}" in err and "is the switch running" in err


def test_switch_that_never_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(p4rt, "CONNECT_TIMEOUT", 0.5)
    with socket.socket() as silent:  # accepts TCP connections, never speaks HTTP/2
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        path = tmp_path / "t.json"
        path.write_text(json.dumps(star_json(address)))
        err = refused(capsys, "stats", "-t", str(path))
    assert f"cannot program switch 's1' at {address}" in err and "no answer in" in err


@contextmanager
def refusing(
    monkeypatch: pytest.MonkeyPatch, rpc: str, code: grpc.StatusCode, message: str
) -> Iterator[P4RuntimeServer]:
    """A softswitch P4Runtime server that answers every `rpc` ("Read", "Write") with an
    error status (patched before the server binds its handlers)."""

    def refuse(self: _Servicer, request: Any, context: Any) -> Any:
        context.abort(code, message)

    monkeypatch.setattr(_Servicer, rpc, refuse)
    with P4RuntimeServer(Pipeline(), address="127.0.0.1:0", preconfigured=True) as srv:
        yield srv


@pytest.mark.parametrize(
    "code",
    [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN],
)
def test_counter_read_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    code: grpc.StatusCode,
) -> None:
    path = tmp_path / "t.json"
    with refusing(monkeypatch, "Read", code, "counters are resting") as server:
        path.write_text(json.dumps(star_json(server.address)))
        err = refused(capsys, "stats", "-t", str(path))
    assert "switch 's1' refused to read counters" in err
    assert f"{code.name}: counters are resting" in err


def test_loss_write_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json"
    args = ("loss", "-t", str(path), "--switch", "s1", "--ports", "1-2", "--probability", "0.1")
    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    with refusing(monkeypatch, "Write", code, "ina_loss is full") as server:
        path.write_text(json.dumps(star_json(server.address)))
        err = refused(capsys, *args)
    assert "switch 's1' refused the loss entries for ports 1, 2" in err
    assert "RESOURCE_EXHAUSTED: ina_loss is full" in err


def test_loss_on_an_unknown_switch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: P4RuntimeServer
) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(star_json(server.address)))
    args = ("loss", "-t", str(path), "--switch", "s9", "--ports", "1", "--probability", "0.1")
    assert "unknown switch 's9'; the topology has s1" in refused(capsys, *args)


def test_loss_write_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: P4RuntimeServer
) -> None:
    """The happy path of the command the refusals above break."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(star_json(server.address)))
    args = ("loss", "-t", str(path), "--switch", "s1", "--ports", "1-2", "--probability", "0.1")
    rc, out, err = inaemu(capsys, *args)
    assert (rc, err) == (0, "") and "loss 10.00% on ports [1, 2]" in out


def test_ctrl_c_in_a_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*_: Any, **__: Any) -> Topology:
        raise KeyboardInterrupt

    monkeypatch.setattr(Topology, "load", interrupted)
    rc, _, err = inaemu(capsys, "stats", "-t", str(tmp_path / "t.json"))
    assert rc == 130 and err == "\ninaemu stats: interrupted\n"


# ---------------------------------------------------------------------- job state vs switch


def test_job_state_after_a_switch_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The state file names a job the restarted switch no longer holds: `job add` of it says
    to remove it first and names the command, in one line; `job remove` succeeds on what is
    gone and forgets it (keeping the epochs issued); `job add` then installs it again."""
    path = tmp_path / "t.json"
    state = tmp_path / "t.json.jobs.json"
    add = ("job", "add", "-t", str(path), "--job", "1", "--workers", "h1,h2", "--pool", "8")
    remove = ("job", "remove", "-t", str(path), "--job", "1")
    with P4RuntimeServer(Pipeline(), address="127.0.0.1:0", preconfigured=True) as first:
        address = first.address
        path.write_text(json.dumps(star_json(address)))
        assert inaemu(capsys, *add)[0] == 0
    restarted = Pipeline()
    with P4RuntimeServer(restarted, address=address, preconfigured=True):
        err = refused(capsys, *add)
        assert "job 1 is already installed" in err and "`inaemu job remove --job 1`" in err
        rc, out, err = inaemu(capsys, *remove)
        assert (rc, err) == (0, ""), err
        assert out == "job 1 removed (s1 had lost some or all of it: restarted?)\n"
        assert json.loads(state.read_text()) == {"jobs": [], "epochs": {"s1": 1}}
        rc, out, err = inaemu(capsys, *add)
        assert (rc, err) == (0, ""), err
        assert restarted.ina_job.entries[(1, 0)].action.params[-1] == 2  # a new epoch
        # an entry lost (or deleted behind the controller's back): the rest is removed
        restarted.multicast.delete(1)
        rc, out, err = inaemu(capsys, *remove)
        assert (rc, err, out) == (
            0,
            "",
            "job 1 removed (s1 had lost some or all of it: restarted?)\n",
        )
        assert not restarted.ina_job.entries and not restarted.ina_child.entries
        assert not restarted.multicast.groups and not restarted.ina_egress.entries
        assert inaemu(capsys, *add)[0] == 0
        assert inaemu(capsys, *remove) == (0, "job 1 removed\n", "")  # all of it was there


def test_a_refused_job_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: P4RuntimeServer
) -> None:
    """A switch that refuses a job's entries (one it holds already, installed behind the
    controller's back): one line with the first reason, not a dump of every entry."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(star_json(server.address)))
    server.pipeline.multicast.insert(1, [(1, 0)])
    err = refused(capsys, "job", "add", "-t", str(path), "--job", "1", "--workers", "h1,h2")
    assert "switch 's1' refused 1 of" in err and "multicast group 1: ALREADY_EXISTS" in err
    assert "rolled back" in err


# ---------------------------------------------------------------------- demo exit status


def _demo_report(*, exact: bool, within_bound: bool, same: bool = True) -> demo.DemoReport:
    opts = demo.DemoOptions(workers=2, size=10)
    results = [
        demo.WorkerResult(
            rank,
            seconds=0.1,
            digest="a" if same or rank == 0 else "b",
            exact_vs_reference=exact,
            max_error=1e-9,
            bound=1e-6,
            within_bound=within_bound,
            bytes_sent=100,
            packets_sent=2,
            retransmissions=0,
            duplicate_results=0,
        )
        for rank in range(2)
    ]
    stats = StatsReport(star(2), {}, {"s1": SwitchCounters("s1")})
    return demo.DemoReport(opts, 0.2, results, stats, chunks=2)


@pytest.mark.parametrize(
    ("exact", "within_bound", "same", "status", "verdict"),
    [
        (True, True, True, 0, "bit-exact vs the reference switch"),
        (False, True, True, 1, "NOT bit-exact"),
        (True, False, True, 1, "NOT MET"),
        (True, True, False, 1, "WORKERS DISAGREE"),
    ],
    ids=["ok", "not-exact", "out-of-bound", "disagree"],
)
def test_demo_exit_status_needs_exact_and_bounded(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    exact: bool,
    within_bound: bool,
    same: bool,
    status: int,
    verdict: str,
) -> None:
    report = _demo_report(exact=exact, within_bound=within_bound, same=same)
    monkeypatch.setattr(demo, "run_demo", lambda opts: report)
    rc, out, err = inaemu(capsys, "demo", "--workers", "2", "--size", "10", "--no-progress")
    assert rc == status and verdict in out
    assert report.ok is (status == 0)
    if status:
        assert "inaemu demo: the result" in err
