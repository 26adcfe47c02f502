"""The kernel-UDP worker process (`python -m inaemu.hostlib.worker`), in-process against an
echo switch on loopback addresses: a one-worker job, so every result is the worker's own
chunk. No root needed. Its report line, `--start-at`, `--fixed-window`, `--check`, its help,
and the host checks: no run without a run id, no run on an interface without the topology's
MAC (here lo's, 00:00:00:00:00:00)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy.typing as npt
import pytest

from inaemu.common.wire import INA_BYTES, INA_HEADER_BYTES, INA_UDP_PORT, INA_VERSION, Flag
from inaemu.hostlib import worker

WORKER_IP, SWITCH_IP = "127.0.0.21", "127.0.0.22"


LO_MAC = "00:00:00:00:00:00"


@pytest.fixture
def echo_switch() -> Iterator[list[int]]:
    """Answers every INA payload with itself as a RESULT (a switch with fan-in 1); yields the
    list of the flags it received."""
    with serve_echo() as flags:
        yield flags


@pytest.fixture
def wrong_switch() -> Iterator[list[int]]:
    """As `echo_switch`, but lane 0 of every result is off by one (but the run check's, the
    client's first chunk, which it would refuse)."""
    with serve_echo(corrupt=True) as flags:
        yield flags


@contextmanager
def serve_echo(corrupt: bool = False) -> Iterator[list[int]]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((SWITCH_IP, INA_UDP_PORT))
    sock.settimeout(0.1)
    flags: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                data, peer = sock.recvfrom(INA_BYTES + 64)
            except TimeoutError:
                continue
            flags.append(data[0] & 0xF)
            if corrupt and int.from_bytes(data[12:14], "big") != 0:  # seq's chunk counter
                lane0 = int.from_bytes(data[INA_HEADER_BYTES : INA_HEADER_BYTES + 4], "big")
                off = ((lane0 + 1) & 0xFFFFFFFF).to_bytes(4, "big")
                data = data[:INA_HEADER_BYTES] + off + data[INA_HEADER_BYTES + 4 :]
            sock.sendto(bytes([(INA_VERSION << 4) | int(Flag.RESULT)]) + data[1:], peer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield flags
    finally:
        stop.set()
        thread.join(5)
        sock.close()


def worker_argv(*extra: str, run: str | None = "1", mac: str | None = LO_MAC) -> list[str]:
    argv = ["--job", "1", "--workers", "1", "--rank", "0", "--local-ip", WORKER_IP]
    argv += ["--switch-ip", SWITCH_IP, "--size", "5000", "--seed", "3", "--codec", "int32"]
    argv += ["--window", "16", "--timeout", "10"]
    argv += ["--run", run] if run is not None else []
    argv += ["--mac", mac] if mac is not None else []
    return argv + list(extra)


def run_worker(capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict[str, object]]:
    assert worker.main(worker_argv(*extra)) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], status: int = 2) -> str:
    """Run a worker that must fail with `status`; return its one-line message."""
    assert worker.main(argv) == status
    err = capsys.readouterr().err
    assert err.startswith("worker 0: ") and err.count("\n") == 1, err
    return err


def test_report_line_and_start_time(
    echo_switch: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    start_at = time.time() + 0.5
    (line,) = run_worker(capsys, "--start-at", f"{start_at:.6f}")
    expected = worker.digest(worker_input_sum())
    assert line["digest"] == expected  # one worker: the sum is its own input
    start, end = float(str(line["start"])), float(str(line["end"]))
    assert start >= start_at - 0.001 and end >= start
    assert float(str(line["seconds"])) == pytest.approx(end - start, abs=0.01)
    chunks = 1 + -(-5000 // 64)  # the run check's chunk, then the data's
    assert line["packets_sent"] == chunks == len(echo_switch)  # nothing lost on loopback
    assert line["retransmissions"] == line["spurious_retransmissions"] == 0
    assert 1 <= float(str(line["cwnd_min"])) <= float(str(line["cwnd_final"])) <= 16
    assert line["srtt"] is not None and float(str(line["rto"])) > 0


def test_fixed_window_keeps_the_whole_window(
    echo_switch: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    (line,) = run_worker(capsys, "--fixed-window", "--repeat", "1")
    assert line["cwnd_min"] == line["cwnd_max"] == line["cwnd_final"] == 16
    assert line["digest"] == worker.digest(worker_input_sum())


def worker_input_sum() -> npt.NDArray[Any]:
    return worker.worker_input(3, 0, 5000, codec="int32")


def test_a_worker_without_a_run_id_is_refused(
    echo_switch: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    """No default run id: a rerun of a job's workers with the same arguments as the last run
    (but no --run) stops before sending, and says where a fresh one comes from."""
    err = refused(capsys, worker_argv(run=None))
    assert "--run is required" in err and "inaemu job new-run -t topology.json --job 1" in err
    assert echo_switch == []


def test_the_interface_must_have_the_topologys_mac(
    echo_switch: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    """The switch addresses results to the host's MAC in topology.json: an interface with
    another MAC would never see them, so the worker refuses to start, naming both MACs and
    the fix."""
    err = refused(capsys, worker_argv(mac="00:00:00:00:00:01"))
    assert "host set-up failed: lo has MAC 00:00:00:00:00:00" in err
    assert "ip link set dev lo address 00:00:00:00:00:01" in err and "topology.json" in err
    assert echo_switch == []
    assert "--mac is required" in refused(capsys, worker_argv(mac=None))
    assert "bad MAC address" in refused(capsys, worker_argv(mac="00:00"))


def test_a_timeout_names_the_mac_as_a_cause(capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing answers: the timeout error says where results must arrive, and from where."""
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind((SWITCH_IP, INA_UDP_PORT))  # takes the packets, answers none
    try:
        err = refused(capsys, worker_argv("--timeout", "0.5"), status=1)
    finally:
        silent.close()
    assert "job 1: no result for" in err
    assert "MAC that the job's topology gives this host; lo has 00:00:00:00:00:00" in err


def test_check_compares_with_the_exact_sum(
    echo_switch: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    (line,) = run_worker(capsys, "--check")
    assert line["check"] == "exact"


def test_check_fails_on_a_wrong_sum(
    wrong_switch: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    """A switch whose results are off: the digest alone would not say so; --check does."""
    assert worker.main(worker_argv("--check")) == 3
    out = capsys.readouterr()
    assert json.loads(out.out)["check"] == "wrong"
    chunks = -(-5000 // 64)
    assert out.err == (
        f"worker 0: wrong result: {chunks} of 5000 elements differ from the expected sum "
        f"(first at [0]: {int(worker_input_sum()[0]) + 1}, expected {worker_input_sum()[0]})\n"
    )


def test_help_documents_every_option() -> None:
    """--help says what every option is, and the whole description: nothing cut off."""
    parser = worker.build_parser()
    assert [a.option_strings for a in parser._actions if not a.help] == []
    text = parser.format_help()
    assert parser.description and parser.description.rstrip().endswith(".")
    for needed in ("inaemu job new-run", "--check", "--mac", "Exit status"):
        assert needed in text
