"""The kernel-UDP worker process (`python -m inaemu.hostlib.worker`), in-process against an
echo switch on loopback addresses: a one-worker job, so every result is the worker's own
chunk. No root needed. Its report line, `--start-at` and `--fixed-window`."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy.typing as npt
import pytest

from inaemu.hostlib import worker
from inaemu.hostlib.wire import INA_BYTES, INA_UDP_PORT, INA_VERSION, Flag

WORKER_IP, SWITCH_IP = "127.0.0.21", "127.0.0.22"


@pytest.fixture
def echo_switch() -> Iterator[list[int]]:
    """Answers every INA payload with itself as a RESULT (a switch with fan-in 1); yields the
    list of the flags it received."""
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
            sock.sendto(bytes([(INA_VERSION << 4) | int(Flag.RESULT)]) + data[1:], peer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield flags
    finally:
        stop.set()
        thread.join(5)
        sock.close()


def run_worker(capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict[str, object]]:
    argv = ["--job", "1", "--workers", "1", "--rank", "0", "--local-ip", WORKER_IP]
    argv += ["--switch-ip", SWITCH_IP, "--size", "5000", "--seed", "3", "--codec", "int32"]
    argv += ["--window", "16", "--timeout", "10", *extra]
    assert worker.main(argv) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


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
    chunks = -(-5000 // 64)
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
