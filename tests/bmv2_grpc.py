"""simple_switch_grpc for tests: started with nothing but loopback sockets of its own (thrift,
notifications, gRPC on free ports) and stopped, whatever happens."""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from inaemu.controller.bmv2 import free_ports, notifications_address, simple_switch_grpc_argv
from inaemu.p4.tools import SIMPLE_SWITCH_GRPC, missing_tools

START_TIMEOUT = 20.0


def grpc_missing() -> str | None:
    """None if simple_switch_grpc can run here, else why not."""
    return missing_tools([SIMPLE_SWITCH_GRPC])


@dataclass(frozen=True)
class Bmv2Grpc:
    grpc: str
    thrift_port: int
    log: Path


@contextmanager
def simple_switch_grpc(interfaces: Sequence[str] = (), *, device_id: int = 1) -> Iterator[Bmv2Grpc]:
    """A simple_switch_grpc with no program (`--no-p4`), `interfaces` as `PORT@IFNAME`."""
    with tempfile.TemporaryDirectory(prefix="inaemu-bmv2grpc-") as tmp:
        d = Path(tmp)
        grpc_port, thrift = free_ports(2)
        ports = {int(port): ifname for port, _, ifname in (s.partition("@") for s in interfaces)}
        argv = simple_switch_grpc_argv(
            device_id=device_id,
            grpc=f"127.0.0.1:{grpc_port}",
            thrift_port=thrift,
            notifications=notifications_address(d, "s1"),
            ports=ports,
            log_file=d / "bmv2",
        )
        log = d / "stderr"
        with log.open("w") as err:
            proc = subprocess.Popen(argv, stdout=err, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"simple_switch_grpc exited: {log.read_text()[-2000:]}")
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", grpc_port)) == 0:
                        break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"simple_switch_grpc: no gRPC port in {START_TIMEOUT} s")
                time.sleep(0.1)
            yield Bmv2Grpc(f"127.0.0.1:{grpc_port}", thrift, log)
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
