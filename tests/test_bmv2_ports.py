"""The bmv2 conformance runner never sets up a switch through another process's thrift port
(a port picked free can be taken before simple_switch binds it). No bmv2 needed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from inaemu.conformance.bmv2_target import ThriftPortTaken, listener_pid_owns, wait_thrift


def test_a_listening_socket_is_its_process_s() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert listener_pid_owns(port, os.getpid())
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert not listener_pid_owns(port, child.pid)
        finally:
            child.kill()
            child.wait()
    assert not listener_pid_owns(port, os.getpid())  # closed: nobody listens


def test_an_answer_from_another_process_is_not_the_switch(tmp_path: Path) -> None:
    errors = tmp_path / "stderr"
    errors.write_text("")
    with socket.socket() as s:  # somebody else took the port picked for the switch
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        switch = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            with pytest.raises(ThriftPortTaken, match=str(port)):
                wait_thrift(port, switch, errors)
        finally:
            switch.kill()
            switch.wait()


def test_a_switch_that_could_not_bind_says_the_port_was_taken(tmp_path: Path) -> None:
    errors = tmp_path / "stderr"
    errors.write_text("Thrift error: Could not bind: Address already in use\n")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with pytest.raises(ThriftPortTaken, match="in use"):
        wait_thrift(1, gone, errors)
