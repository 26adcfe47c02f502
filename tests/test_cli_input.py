"""The `inaemu` CLI on bad input and refusing switches: one line `inaemu <command>: ...` on
stderr and a non-zero exit status, never a traceback. The commands run in this process
(`cli.main`), so an exception that escapes fails the test as itself."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from inaemu.cli import demo
from inaemu.cli import main as cli
from inaemu.cli import schedule as schedule_cli
from inaemu.collectives import ring
from inaemu.common.loopback import WireDir, WireError
from inaemu.controller import p4rt
from inaemu.controller.stats import StatsReport, SwitchCounters
from inaemu.hostlib import worker as ina_worker
from inaemu.hostlib.collective import worker as rank_worker
from inaemu.mininet import debian, gloo_worker
from inaemu.mininet import run as mininet_run
from inaemu.p4.plan import MIN_LOSS, loss_threshold
from inaemu.softswitch.p4runtime.server import P4RuntimeServer, _Servicer
from inaemu.softswitch.p4runtime.server import main as server_main
from inaemu.softswitch.pipeline import Pipeline
from inaemu.topology import builders
from inaemu.topology import model as topology
from inaemu.topology.builders import star
from inaemu.topology.model import Topology
from tests import netns

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
        (_state(GOOD_JOB, GOOD_JOB | {"job_id": 2, "mgids": [{"s1": 2}]}), "pools of jobs 1 and"),
        (_state(GOOD_JOB, GOOD_JOB | {"job_id": 2, "pools": {"s1": [4, 4]}}), "group 1 on"),
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
    assert "t.json.jobs.json" in err and message in err
    assert "delete it" in err or "restore the file" in err  # what to do


def test_topology_output_that_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    target = blocker / "t.json"  # its folder cannot be made: a file is in the way
    err = refused(capsys, "topo", "star", "-o", str(target))
    assert str(target) in err and "File exists" in err
    # a folder that is missing is made (documented commands write under build/)
    made = tmp_path / "build" / "t.json"
    assert inaemu(capsys, "topo", "star", "-o", str(made))[0] == 0
    assert made.is_file()


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


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    state = json.loads(path.read_text())
    change(state)
    path.write_text(json.dumps(state))


def test_a_job_listed_twice_is_removed_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: P4RuntimeServer
) -> None:
    """Issue 22, item 14: a job state edited by hand that lists job 1 twice. Before, `job add`
    said to remove job 1 first and `job remove` said the same (each refused on load). Now both
    name the file and the way out, and `job remove --job 1` removes every entry of it."""
    path, state = tmp_path / "t.json", tmp_path / "t.json.jobs.json"
    path.write_text(json.dumps(star_json(server.address)))
    job = ("job", "add", "-t", str(path), "--workers", "h1,h2", "--pool", "8")
    assert inaemu(capsys, *job, "--job", "1")[0] == 0
    _edit(state, lambda s: s["jobs"].append(dict(s["jobs"][0])))
    err = refused(capsys, *job, "--job", "2")
    assert f"{state}: job 1 is listed 2 times" in err
    assert "`inaemu job remove --job 1` removes every entry of it" in err
    rc, out, err = inaemu(capsys, "job", "remove", "-t", str(path), "--job", "1")
    assert (rc, out, err) == (0, "job 1 removed\n", ""), err
    assert json.loads(state.read_text())["jobs"] == []
    assert not server.pipeline.ina_job.entries and not server.pipeline.multicast.groups
    assert inaemu(capsys, *job, "--job", "2")[0] == 0


def test_a_new_job_never_gets_slots_a_switch_holds_for_another(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: P4RuntimeServer
) -> None:
    """Issue 22, item 14: job 1's pool moved by hand in the job state (a file that is itself
    consistent): `job add` of job 2 would get job 1's live slots; the switch's entries say so,
    and it is refused before anything is written."""
    path, state = tmp_path / "t.json", tmp_path / "t.json.jobs.json"
    path.write_text(json.dumps(star_json(server.address)))
    job = ("job", "add", "-t", str(path), "--workers", "h1,h2", "--pool", "8")
    assert inaemu(capsys, *job, "--job", "1")[0] == 0
    _edit(state, lambda s: s["jobs"][0]["pools"].update(s1=[100, 8]))
    err = refused(capsys, *job, "--job", "2")
    assert "switch 's1' holds job 1 in slots [0, 8), which job 2 would get" in err
    assert "the job state places it at [100, 108)" in err
    assert set(server.pipeline.ina_job.entries) == {(1, 0)}  # nothing of job 2 written
    state.unlink()  # no state at all: the switch still says whose the slots are
    err = refused(capsys, *job, "--job", "2")
    assert "holds job 1 in slots [0, 8)" in err and "does not list it there" in err


def _two_jobs(state: Path) -> dict[str, Any]:
    one = {"workers": ["h1", "h2"], "pool_size": 8, "n_trees": 1, "roots": ["s1"]}
    return {
        "jobs": [
            {
                **one,
                "job_id": 1,
                "pools": {"s1": [0, 8]},
                "mgids": [{"s1": 1}],
                "epochs": {"s1": 1},
            },
            {
                **one,
                "job_id": 2,
                "pools": {"s1": [8, 8]},
                "mgids": [{"s1": 2}],
                "epochs": {"s1": 2},
            },
        ],
        "epochs": {"s1": 2},
    }


BAD_STATES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("overlap", _set("jobs.1.pools.s1", [4, 8]), "the slot pools of jobs 1 and 2 overlap on"),
    ("twice", _set("jobs.1.job_id", 1), "job 1 is listed 2 times"),
    ("group", _set("jobs.1.mgids.0.s1", 1), "jobs 1 and 2 both use multicast group 1 on"),
    ("epoch", _set("epochs.s1", 1), "job 2 holds epoch 2 on switch 's1', the one the next"),
    ("epoch 0", _set("epochs.s1", 0), "job 1 holds epoch 1 on switch 's1', the one the next"),
    ("size", _set("jobs.1.pools.s1", [8, 4]), "job 2's pool [8, 12) on switch 's1' is not its"),
    ("end", _set("jobs.1.pools.s1", [1020, 8]), "[1020, 1028) on switch 's1' is not its"),
    ("base", _set("jobs.1.pools.s1", [1024, 8]), "base: expected an integer in 0..1023"),
    ("empty", _set("jobs.1.pools.s1", [8, 0]), "size: expected an integer in 1..1024"),
    ("three", _set("jobs.1.pools.s1", [8, 8, 8]), "expected a [base, size] pool"),
    ("pool_size", _set("jobs.1.pool_size", 2**31), "pool_size: expected an integer in 1..32767"),
    ("n_trees", _set("jobs.1.n_trees", 256), "n_trees: expected an integer in 1..255"),
    ("no workers", _set("jobs.1.workers", []), "workers: expected a list"),
    ("job epoch", _set("jobs.1.epochs.s1", 0), "job #1: switch 's1': expected an integer in 1.."),
    ("no trees", _set("jobs.1.mgids", []), "mgids: expected a list"),
]


@pytest.mark.parametrize(
    ("name", "change", "message"), BAD_STATES, ids=[n for n, _, _ in BAD_STATES]
)
def test_a_job_state_edited_by_hand_is_refused_on_load(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    change: Callable[[dict[str, Any]], None],
    message: str,
) -> None:
    """Issue 22, items 10 and 14: the job state's fields are range-checked like a topology's,
    and the jobs checked against each other, before any switch is asked: one line naming the
    file (every command that reads it: here `job list`, which asks no switch)."""
    path, state = tmp_path / "t.json", tmp_path / "t.json.jobs.json"
    path.write_text(json.dumps(star_json()))
    good = _two_jobs(state)
    state.write_text(json.dumps(good))
    assert inaemu(capsys, "job", "list", "-t", str(path))[0] == 0
    change(good)
    state.write_text(json.dumps(good))
    err = refused(capsys, "job", "list", "-t", str(path))
    assert err.startswith(f"inaemu job: {state}") and message in err, err


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


# ---------------------------------------------------------------------- argument values
#
# Every option a user types is checked by a shared type (`inaemu.common.args`) before
# anything is created, bound or started: a usage error is one line `<prog>: ...` on stderr
# and exit status 2. The programs run in this process; what would start, bind or compute on
# a value that slipped through is replaced by a tripwire, so a case that is not refused
# fails at once instead of running a demo or a switch.


class Started(Exception):
    """A command got past its argument checks (a tripwire went off)."""


def _trip(*_: Any, **__: Any) -> Any:
    raise Started("the command went on with a value it should have refused")


def usage_refused(
    capsys: pytest.CaptureFixture[str], main: Callable[[list[str]], Any], prog: str, *args: str
) -> str:
    """Run `main(args)`, which must refuse its arguments: exit status 2 and one line
    `<prog>: ...` on stderr, no traceback. Returns the line."""
    try:
        rc = main(list(args))
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith(f"{prog}: ") and err.count("\n") == 1, err
    return err


TOO_LONG = "w" * 120  # a wire dir name that leaves no room for socket paths


def test_wire_dir_too_long_is_not_made(tmp_path: Path) -> None:
    """The library refuses it before mkdir too (the softswitch's wire dir, a host's)."""
    wires = tmp_path / TOO_LONG
    with pytest.raises(WireError, match="too long for socket paths"):
        WireDir(wires)
    assert not wires.exists()


@pytest.fixture
def no_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "main_demo", _trip)  # cli.main imports it to run a demo


DEMO_ARGS: list[tuple[list[str], str]] = [
    (["--grpc-port", "70000"], "--grpc-port: expected a TCP port in 0..65535 (0: any free)"),
    (["--grpc-port", "-1"], "--grpc-port: expected a TCP port in 0..65535"),
    (["--grpc-port", "x"], "--grpc-port: expected a TCP port"),
    (["--timeout", "0"], "--timeout: expected seconds in (0, 86400], got '0'"),
    (["--timeout", "-5"], "--timeout: expected seconds in (0, 86400]"),
    (["--timeout", "nan"], "--timeout: expected seconds"),
    (["--timeout", "inf"], "--timeout: expected seconds"),
    (["--timeout", "1e9"], "--timeout: expected seconds"),
    (["--workers", "0"], "--workers: expected a number of workers in 1..64"),
    (["--workers", "-3"], "--workers: expected a number of workers"),
    (["--size", "0"], "--size: expected a number of elements in 1..268435456"),
    (["--size", "-1"], "--size: expected a number of elements"),
    (["--size", "9" * 5000], "--size: expected a number of elements"),
    (["--window", "0"], "--window: expected a number of slots in 1..1024"),
    (["--window", "1025"], "--window: expected a number of slots in 1..1024"),
    (["--loss", "1"], "--loss: expected a probability in [0, 1) (1 would drop everything)"),
    (["--loss", "nan"], "--loss: expected a probability"),
    (["--loss", "1e-12"], "--loss: loss probability 1e-12 rounds to 0 (the switch's threshold"),
    (["--density", "0"], "--density: expected a fraction of non-zero elements in (0, 1]"),
    (["--density", "1.5"], "--density: expected a fraction"),
    (["--seed", "-1"], "--seed: expected a seed in 0..18446744073709551615"),
    (["--trees", "-1"], "--trees: expected a number of trees in 0..255"),
    (["--trees", "256"], "--trees: expected a number of trees"),
    (["--mtu", "100"], "--mtu: expected IPv4 packet bytes in 128..9000"),
]


@pytest.mark.parametrize(
    ("args", "message"), DEMO_ARGS, ids=[f"{a[0][2:]}={a[1][:12]}" for a, _ in DEMO_ARGS]
)
def test_demo_refuses_bad_values(
    capsys: pytest.CaptureFixture[str], no_demo: None, args: list[str], message: str
) -> None:
    err = usage_refused(capsys, cli.main, "inaemu demo", "demo", *args)
    assert f"argument {message}" in err


def test_demo_wire_dir_too_long_is_refused_before_it_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_demo: None
) -> None:
    wires = tmp_path / TOO_LONG
    err = usage_refused(capsys, cli.main, "inaemu demo", "demo", "--wire-dir", str(wires))
    assert "too long for socket paths (at most 91 bytes)" in err
    assert not wires.exists()


def test_a_wire_dir_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    """Issue 22, item 13: `--wire-dir` with a byte that is not UTF-8 in its name: the demo
    died decoding the switch's READY line ("'utf-8' codec can't decode byte 0xff in position
    109"); the softswitch ran with it. Both refuse it as they parse, and make nothing."""
    wires = os.fsencode(tmp_path) + b"/w\xff"
    for argv in (
        [sys.executable, "-m", "inaemu.cli", "demo", "--workers", "2"],
        [sys.executable, "-m", "inaemu.softswitch", "--wires", "1-2"],
    ):
        proc = subprocess.run(
            [*argv, b"--wire-dir", wires], capture_output=True, timeout=60, cwd=tmp_path
        )
        err = proc.stderr.decode(errors="replace")
        assert proc.returncode == 2 and err.count("\n") == 1, err
        assert f"wire dir {tmp_path}/w\\xff is not UTF-8 text" in err
    assert not os.path.exists(wires)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topo", "mesh:10x10"], "has 100 switches; the demo runs one process per switch, at"),
        (["--topo", "bigraph:40x2"], "80 workers; the demo runs one process per worker, at most"),
        (["--size", "100000000"], "4 workers x --size 100,000,000 is 400,000,000 elements"),
        (["--workers", "32", "--size", "10000000"], "holds at most 268,435,456 (1 GiB"),
    ],
    ids=["switches", "workers", "elements", "elements-32"],
)
def test_demo_larger_than_this_machine_is_refused(
    capsys: pytest.CaptureFixture[str], no_demo: None, args: list[str], message: str
) -> None:
    assert message in refused(capsys, "demo", *args)


LOSS_PORTS: list[tuple[str, str]] = [
    ("5-1", "the range 5-1 is empty: write 1-5"),
    ("511", "port 511 is not a switch port in 0..510 (511 is the drop port)"),
    ("600", "port 600 is not a switch port in 0..510"),
    ("1-99999999999999999999", "port 99999999999999999999 is not a switch port"),
    ("1,1", "port 1 is named twice in '1,1'"),
    ("1-4,3", "port 3 is named twice"),
    ("", "expected switch ports such as 1-4,7"),
    ("1,,2", "expected switch ports such as 1-4,7"),
    ("one", "expected switch ports such as 1-4,7"),
    ("-1", "expected switch ports such as 1-4,7"),
]


@pytest.mark.parametrize(("ports", "message"), LOSS_PORTS, ids=[p for p, _ in LOSS_PORTS])
def test_loss_refuses_bad_ports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ports: str, message: str
) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(star_json()))
    args = ("loss", "-t", str(path), "--switch", "s1", "--ports", ports, "--probability", "0.1")
    assert f"argument --ports: {message}" in usage_refused(capsys, cli.main, "inaemu loss", *args)


@pytest.mark.parametrize("probability", ["1.5", "-0.1", "nan", "inf", "ten"])
def test_loss_refuses_a_probability_outside_0_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], probability: str
) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(star_json()))
    args = ("loss", "-t", str(path), "--switch", "s1", "--ports", "1", "--probability", probability)
    err = usage_refused(capsys, cli.main, "inaemu loss", *args)
    assert f"argument --probability: expected a probability in [0, 1], got '{probability}'" in err


@pytest.mark.parametrize("probability", ["1e-12", "1e-10"])
def test_loss_refuses_a_probability_that_rounds_to_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], probability: str
) -> None:
    """Issue 22 (item 10): a rate above 0 whose threshold, round(p x 0xFFFFFFFF), is 0 would
    inject no loss at all; it was accepted without a word."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(star_json()))
    args = ("loss", "-t", str(path), "--switch", "s1", "--ports", "1", "--probability", probability)
    err = usage_refused(capsys, cli.main, "inaemu loss", *args)
    assert f"loss probability {probability} rounds to 0 (the switch's threshold has 32 bits)" in err
    assert "the smallest loss it injects is 2.33e-10; give 0 for none" in err


def test_the_smallest_loss_is_one_threshold_step() -> None:
    assert loss_threshold(MIN_LOSS) == 1 and loss_threshold(0.6 * MIN_LOSS) == 1
    assert loss_threshold(0.0) == 0 and loss_threshold(1.0) == 0xFFFFFFFF
    with pytest.raises(ValueError, match="rounds to 0"):
        loss_threshold(0.4 * MIN_LOSS)


JOB_ARGS: list[tuple[list[str], str]] = [
    (["--job", "-1"], "--job: expected a job id in 0..65535"),
    (["--job", "65536"], "--job: expected a job id in 0..65535"),
    (["--pool", "0"], "--pool: expected a number of slots in 1..1024"),
    (["--pool", "40000"], "--pool: expected a number of slots in 1..1024"),
    (["--trees", "-1"], "--trees: expected a number of trees in 0..255"),
    (["--trees", "300"], "--trees: expected a number of trees"),
    (["--workers", "h1,,h2"], "--workers: expected names separated by commas, none empty"),
    (["--workers", "h1,"], "--workers: expected names"),
    (["--workers", "h1", "--roots", "s1,"], "--roots: expected names"),
]


@pytest.mark.parametrize(
    ("args", "message"), JOB_ARGS, ids=[f"{a[0][2:]}={a[1]}" for a, _ in JOB_ARGS]
)
def test_job_refuses_bad_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(star_json()))
    if "--workers" not in args:
        args = [*args, "--workers", "h1,h2"]
    err = usage_refused(capsys, cli.main, "inaemu job", "job", "add", "-t", str(path), *args)
    assert f"argument {message}" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "the following arguments are required: command"),
        (["nope"], "argument command: invalid choice: 'nope'"),
        (["stats"], "the following arguments are required: -t/--topology"),
        (["stats", "-t", "t.json", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["conformance", "--target", "nope"], "argument --target: invalid choice: 'nope'"),
    ],
    ids=["no-command", "unknown-command", "missing-option", "unknown-option", "conformance"],
)
def test_argparse_own_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    prog = "inaemu" if args[:1] in ([], ["nope"]) else f"inaemu {args[0]}"
    assert message in usage_refused(capsys, cli.main, prog, *args)


@pytest.fixture
def never_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    """A P4Runtime server that would start trips instead."""
    monkeypatch.setattr(P4RuntimeServer, "start", _trip)


SOFTSWITCH_ARGS: list[tuple[list[str], str]] = [
    (["--wires", "3-1"], "--wires: the range 3-1 is empty: write 1-3"),
    (["--wires", "511"], "--wires: port 511 is not a switch port in 0..510 (511 is the drop"),
    (["--wires", "1-99999999999999999999"], "--wires: port 99999999999999999999 is not"),
    (["--wires", "1,2,1"], "--wires: port 1 is named twice"),
    (["--device-id", "-1"], "--device-id: expected a P4Runtime device id in 0..1844674407370955"),
    (["--device-id", str(2**64)], "--device-id: expected a P4Runtime device id"),
    (["--grpc", "127.0.0.1:70000"], '--grpc: expected an address "host:port" with a port in 0'),
    (["--grpc", "127.0.0.1:-1"], "--grpc: expected an address"),
    (["--seed", "-1"], "--seed: expected a seed in 0..18446744073709551615"),
    (["--link", "511=s2.1"], "--link 511=s2.1: expected a switch port in 0..510 (511 is the"),
    (["--parent-pid", "0"], "--parent-pid: expected a process id in 1..2147483647"),
]


@pytest.mark.parametrize(
    ("args", "message"), SOFTSWITCH_ARGS, ids=[" ".join(a)[:24] for a, _ in SOFTSWITCH_ARGS]
)
def test_softswitch_refuses_bad_values(
    capsys: pytest.CaptureFixture[str], never_serves: None, args: list[str], message: str
) -> None:
    assert message in usage_refused(capsys, cli.main, "softswitch", "softswitch", *args)


def test_softswitch_wire_dir_too_long_is_refused_before_it_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], never_serves: None
) -> None:
    wires = tmp_path / TOO_LONG
    args = ("softswitch", "--wire-dir", str(wires), "--wires", "1")
    assert "too long for socket paths" in usage_refused(capsys, cli.main, "softswitch", *args)
    assert not wires.exists()


P4RT_SERVER = "python -m inaemu.softswitch.p4runtime.server"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device-id", "-1"], "--device-id: expected a P4Runtime device id"),
        (["--device-id", str(2**64)], "--device-id: expected a P4Runtime device id"),
        (["--address", "127.0.0.1:70000"], "--address: expected an address"),
    ],
    ids=["device-negative", "device-huge", "port"],
)
def test_p4runtime_server_refuses_bad_values(
    capsys: pytest.CaptureFixture[str], never_serves: None, args: list[str], message: str
) -> None:
    assert message in usage_refused(capsys, server_main, P4RT_SERVER, *args)


def test_p4runtime_server_on_a_taken_port_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        err = usage_refused(capsys, server_main, P4RT_SERVER, "--address", address)
    assert f"cannot listen on {address}: address already in use" in err


WORKER = "python -m inaemu.hostlib.worker"
WORKER_BASE = ["--job", "1", "--workers", "2", "--rank", "0"]
WORKER_BASE += ["--run", "7", "--mac", "02:00:00:00:00:01"]
WORKER_BASE += ["--local-ip", "127.0.0.1", "--switch-ip", "127.0.0.1"]

WORKER_ARGS: list[tuple[list[str], str]] = [
    (["--job", "-1"], "--job: expected a job id in 0..65535"),
    (["--job", "65536"], "--job: expected a job id"),
    (["--workers", "0"], "--workers: expected a number of workers in 1..65535"),
    (["--rank", "-1"], "--rank: expected a rank in 0..65534"),
    (["--size", "-1"], "--size: expected a number of elements in 0..268435456"),
    (["--size", str(2**28 + 1)], "--size: expected a number of elements"),
    (["--seed", "-1"], "--seed: expected a seed"),
    (["--density", "0"], "--density: expected a fraction of non-zero elements in (0, 1]"),
    (["--density", "2"], "--density: expected a fraction"),
    (["--window", "0"], "--window: expected a number of slots in 1..1024"),
    (["--trees", "0"], "--trees: expected a number of trees in 1..255"),
    (["--run", "65536"], "--run: expected a run id in 0..65535"),
    (["--repeat", "0"], "--repeat: expected a number of allreduces in 1..1000000"),
    (["--timeout", "0"], "--timeout: expected seconds in (0, 86400]"),
    (["--timeout", "inf"], "--timeout: expected seconds"),
    (["--start-at", "inf"], "--start-at: expected a wall-clock time in Unix seconds"),
    (["--start-at", "1e18"], "--start-at: expected a wall-clock time"),
]


@pytest.mark.parametrize(
    ("args", "message"), WORKER_ARGS, ids=[" ".join(a) for a, _ in WORKER_ARGS]
)
def test_worker_refuses_bad_values(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.setattr(ina_worker, "UdpTransport", _trip)
    argv = WORKER_BASE + args  # argparse takes the last of an option given twice
    assert message in usage_refused(capsys, ina_worker.main, WORKER, *argv)


def test_worker_window_that_the_trees_do_not_divide(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ina_worker, "UdpTransport", _trip)
    argv = [*WORKER_BASE, "--window", "64", "--trees", "3"]
    err = usage_refused(capsys, ina_worker.main, "worker 0", *argv)
    assert "--window 64 must be a multiple of --trees (3)" in err


RANK = "python -m inaemu.hostlib.collective.worker"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rank", "-1"], "--rank: expected a rank in 0..65534"),
        (["--run", "65536"], "--run: expected a run id in 0..65535"),
        (["--seed", "-1"], "--seed: expected a seed"),
        (["--density", "0"], "--density: expected a fraction"),
        (["--size", str(2**28 + 1)], "--size: expected a number of elements in 0..268435456"),
        (["--timeout", "inf"], "--timeout: expected seconds"),
        (["--repeat", str(10**7)], "--repeat: expected a number of allreduces"),
        (["--start-at", "nan"], "--start-at: expected a wall-clock time"),
        (["--listen-fd", "-1"], "--listen-fd: expected an open file descriptor"),
    ],
    ids=["rank", "run", "seed", "density", "size", "timeout", "repeat", "start-at", "fd"],
)
def test_collective_worker_refuses_bad_values(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.setattr(rank_worker, "TcpPeers", _trip)
    ring.schedule(star(2)).save(tmp_path / "ring.json")
    base = ["--schedule", str(tmp_path / "ring.json"), "--rank", "0"]
    argv = [*base, "--peers", "127.0.0.1:1,127.0.0.1:2", *args]
    assert message in usage_refused(capsys, rank_worker.main, RANK, *argv)


MININET_ARGS: list[tuple[list[str], str]] = [
    (["--size", "1G"], "--size: size '1G': at most 256M elements per worker"),
    (["--size", "9" * 40], "--size: bad size"),
    (["--sizes", "1K,1G"], "--sizes: size '1G': at most 256M elements"),
    (["--timeout", "0"], "--timeout: expected seconds in (0, 86400]"),
    (["--limit", "-1"], "--limit: expected seconds"),
    (["--seed", "-1"], "--seed: expected a seed"),
    (["--window", "0"], "--window: expected a number of slots in 1..1024"),
    (["--size", "128M"], "4 workers x 134,217,728 elements is more than 268,435,456"),
    (["--loss", "1e-12"], "--loss: loss probability 1e-12 rounds to 0"),
    (["--prefix", "too-long-1"], "--prefix: letters, digits, '_', '.' or '-', at most 8"),
]


@pytest.mark.parametrize(
    ("args", "message"), MININET_ARGS, ids=[" ".join(a)[:20] for a, _ in MININET_ARGS]
)
def test_mininet_refuses_bad_values(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    """Refused before Mininet is looked for (no root needed)."""
    monkeypatch.setattr(debian, "ensure", _trip)
    argv = ["--topo", "star:4", "--no-install", *args]
    assert message in usage_refused(capsys, mininet_run.main, "inaemu mininet", *argv)


def test_schedule_refuses_more_ranks_than_it_checks(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schedule_cli, "FlowRoutes", _trip)
    err = usage_refused(capsys, cli.main, "inaemu schedule", "schedule", "--topo", "torus:32x32")
    assert "torus:32x32: 1,024 ranks; the checker takes at most 256" in err


# ---------------------------------------------------------------------- sizes and depths


@pytest.fixture
def no_building(monkeypatch: pytest.MonkeyPatch) -> None:
    """A builder that starts adding switches or hosts trips: sizes must be refused before."""
    monkeypatch.setattr(Topology, "add_switch", _trip)
    monkeypatch.setattr(Topology, "add_host", _trip)


TOO_LARGE: list[tuple[list[str], str]] = [
    (["mesh:100000x100000"], "mesh 100000x100000 would have 10,000,000,000 hosts"),
    (["fat-tree:1000000"], "fat-tree 1000000 would have 250,000,000,000,000,000 hosts"),
    (["fat-tree:64"], "fat-tree 64 would have 65,536 hosts and 5,120 switches"),
    (["torus:237x237"], "torus 237x237 would have 56,169 hosts and 56,169 switches"),
    (["leaf-spine:500x10x500"], "leaf-spine 500x10x500 would have 250,000 hosts"),
    (["bigraph:300x400"], "BiGraph(300, 400) would have 120,000 hosts"),
    (["leaf-spine", "--leaves", "300", "--hosts", "300"], "would have 90,000 hosts"),
    (["mesh:" + "9" * 5000 + "x1"], "numbers of at most 9 digits; the builders make at most"),
]


@pytest.mark.parametrize(
    ("args", "message"), TOO_LARGE, ids=[" ".join(a)[:24] for a, _ in TOO_LARGE]
)
def test_topologies_too_large_to_build_are_refused_at_once(
    capsys: pytest.CaptureFixture[str], no_building: None, args: list[str], message: str
) -> None:
    err = refused(capsys, "topo", *args, "-o", "/nonexistent/t.json")
    assert message in err and "at most 64,000 hosts" in err


def test_the_host_cap_is_what_the_builders_can_address() -> None:
    ip, mac = builders._host_addr(builders.MAX_HOSTS - 1)
    assert topology._ipv4_prefix(ip) and topology._mac(mac)
    assert not topology._ipv4_prefix(builders._host_addr(builders.MAX_HOSTS)[0])


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_nested(100_000), "lists and objects nested more than 32 deep; not a topology file"),
        ('{"links": ' + _nested(40) + "}", "nested more than 32 deep"),
        ('{"hosts": ' + '{"a": ' * 50_000 + "1" + "}" * 50_001, "nested more than 32 deep"),
        (
            '{"switches": {"s1": {"device_id": ' + "9" * 5000 + '}}, "links": []}',
            "not valid JSON (an integer of 5000 digits)",
        ),
    ],
    ids=["lists-100000", "lists-40", "objects-50000", "integer-5000-digits"],
)
def test_deep_or_huge_topology_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "t.json"
    path.write_text(text)
    err = refused(capsys, "stats", "-t", str(path))
    assert f"{path}: " in err and message in err


def test_nesting_is_counted_outside_strings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Brackets in a string are text: 150 of them load; lists 33 deep do not."""
    data = star_json()
    data["hosts"]["h1"]["role"] = "[" * 100 + '\\"{' * 50
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    assert Topology.load(path).hosts["h1"].role == data["hosts"]["h1"]["role"]
    data["links"] = json.loads(_nested(32))  # 33 deep with the top-level object
    path.write_text(json.dumps(data))
    assert "nested more than 32 deep" in refused(capsys, "stats", "-t", str(path))
    data["links"] = json.loads(_nested(31))  # 32 deep: parsed, then refused by the schema
    path.write_text(json.dumps(data))
    assert "nested" not in refused(capsys, "stats", "-t", str(path))


def test_deep_job_state_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(star_json()))
    (tmp_path / "t.json.jobs.json").write_text('{"jobs": ' + _nested(100_000) + "}")
    err = refused(capsys, "job", "list", "-t", str(path))
    assert "t.json.jobs.json: lists and objects nested more than 32 deep" in err


def test_json_files_larger_than_the_cap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(topology, "MAX_JSON_BYTES", 1 << 10)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(star_json()) + " " * 2000)
    err = refused(capsys, "stats", "-t", str(path))
    assert f"{path}: larger than 1,024 bytes; not a topology file" in err


def test_deep_schedule_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.json"
    path.write_text(_nested(100_000))
    argv = ["--schedule", str(path), "--rank", "0", "--peers", "127.0.0.1:1"]
    err = usage_refused(capsys, rank_worker.main, "rank 0", *argv)
    assert f"cannot read a schedule: {path}: lists and objects nested more than 32" in err


# ---------------------------------------------------------------------- benchmarks

BENCH = Path(__file__).resolve().parent.parent / "bench"

BENCH_ARGS: list[tuple[str, list[str], str, str]] = [
    ("bench_allreduce", ["--workers", "0"], "run_demo", "--workers: expected a number of workers"),
    ("bench_allreduce", ["--size", "0"], "run_demo", "--size: expected a number of elements"),
    ("bench_codecs", ["--n", "-1"], "throughput", "--n: expected a number of elements"),
    ("bench_codecs", ["--reps", "0"], "throughput", "--reps: expected a number of allreduces"),
    ("bench_collective_exec", ["--ranks", "4,x"], "error_table", "--ranks: expected a number"),
    ("bench_schedules", ["--reps", "0"], "from_spec", "--reps: expected a number"),
    ("bench_softswitch", ["--chunks", "0"], "bench_in_process", "--chunks: expected a number"),
    ("bench_softswitch", ["--workers", "33"], "bench_in_process", "--workers: expected a number"),
    ("bench_e2e", ["--window", "0"], "", "--window: expected a number of slots in 1..1024"),
    ("bench_mininet", ["--repeat", "0"], "", "--repeat: expected a number of allreduces"),
    ("bench_collectives", ["--bw", "0"], "", "--bw: expected Mbit/s in (0, 1000]"),
]


@pytest.mark.parametrize(
    ("script", "args", "heavy", "message"),
    BENCH_ARGS,
    ids=[f"{s[6:]} {' '.join(a)}" for s, a, _, _ in BENCH_ARGS],
)
def test_benchmarks_refuse_bad_values(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    script: str,
    args: list[str],
    heavy: str,
    message: str,
) -> None:
    spec = importlib.util.spec_from_file_location(script, BENCH / f"{script}.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, script, bench)  # dataclasses look their module up
    spec.loader.exec_module(bench)
    if heavy:  # what runs first after the arguments
        monkeypatch.setattr(bench, heavy, _trip)
    monkeypatch.setattr(netns, "namespaces_missing", _trip)  # bench_e2e, bench_mininet
    monkeypatch.setattr(debian, "ensure", _trip)  # bench_collectives
    monkeypatch.setattr(sys, "argv", [f"{script}.py", *args])
    assert message in usage_refused(capsys, lambda _: bench.main(), f"{script}.py")


GLOO = "python -m inaemu.mininet.gloo_worker"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seed", "-1"], "--seed: expected a seed"),
        (["--timeout", "inf"], "--timeout: expected seconds in (0, 86400]"),
        (["--start-at", "inf"], "--start-at: expected a wall-clock time"),
        (["--size", str(2**28 + 1)], "--size: expected a number of elements in 1..268435456"),
    ],
    ids=["seed", "timeout", "start-at", "size"],
)
def test_gloo_worker_refuses_bad_values(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.setattr(gloo_worker, "interface_of", _trip)
    base = ["--rank", "0", "--workers", "2", "--master", "127.0.0.1", "--size", "4"]
    argv = [*base, "--local-ip", "127.0.0.1", *args]
    assert message in usage_refused(capsys, gloo_worker.main, GLOO, *argv)
