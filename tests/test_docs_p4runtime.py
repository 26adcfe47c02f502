"""The P4Runtime examples of docs/p4runtime.md and README.md run as written.

The code blocks and command lines are taken from the documents themselves: the server command,
the "Starting it" block, the finsy script (with `.venv`'s python), and the p4runtime-shell
command (in its own venv, as tests/test_p4runtime_server.py makes it) with the "In the shell"
lines on its input. The only change is the port: 127.0.0.1:9559 becomes a free one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from finsy.proto.p4.v1 import p4runtime_pb2 as p4r
from finsy.proto.p4.v1 import p4runtime_pb2_grpc

from inaemu.p4.constants import INA_DROP_REASONS
from tests.test_p4runtime_server import INFO, _shell_python

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "p4runtime.md"
README = REPO / "README.md"
PORT = "127.0.0.1:9559"  # what the documents say
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\x1b\][^\x07]*\x07")


def blocks(path: Path, language: str) -> list[str]:
    """The fenced code blocks of `path` in `language`."""
    return re.findall(rf"^```{language}\n(.*?)^```$", path.read_text(), re.M | re.S)


def block_with(path: Path, language: str, text: str) -> str:
    [block] = [b for b in blocks(path, language) if text in b]
    return block


def command_line(path: Path, *parts: str) -> list[str]:
    """The one command line in a `sh` block of `path` that contains every one of `parts`."""
    lines = [
        line.split("#")[0].strip()
        for b in blocks(path, "sh")
        for line in b.splitlines()
        if all(p in line for p in parts) and not line.lstrip().startswith("#")
    ]
    [line] = lines
    return line.split()


def with_port(text: str, address: str) -> str:
    assert PORT in text, text
    return text.replace(PORT, address)


def argv_with_port(python: str, argv: list[str], address: str) -> list[str]:
    """`argv` run by `python` (instead of the documented one), on `address`."""
    return [python, *with_port(" ".join(argv[1:]), address).split()]


def project_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


@pytest.fixture
def documented_server() -> Iterator[str]:
    """The server as docs/p4runtime.md starts it for p4runtime-shell (on a free port)."""
    argv = command_line(DOC, "-m inaemu.softswitch.p4runtime.server", "--preconfigured")
    assert argv[0] == ".venv/bin/python", argv
    argv = argv_with_port(sys.executable, argv, "127.0.0.1:0")
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.match(r"P4Runtime server on (\S+),", line)
        assert found, line
        yield found.group(1)
    finally:
        proc.terminate()
        proc.wait(10)


def read_job(address: str) -> list[int]:
    """The action parameters of ina_job's entry (job 1, tree 0) on the switch."""
    import grpc

    with grpc.insecure_channel(address) as channel:
        stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        table = p4r.TableEntry(table_id=INFO.table("ina_job").id)
        request = p4r.ReadRequest(device_id=1, entities=[p4r.Entity(table_entry=table)])
        [entity] = [e for r in stub.Read(request, timeout=10) for e in r.entities]
    return [int.from_bytes(p.value, "big") for p in entity.table_entry.action.action.params]


def test_starting_it_and_the_finsy_script(documented_server: str) -> None:
    starting = block_with(DOC, "python", "P4RuntimeServer(pipeline")
    result = subprocess.run(
        [sys.executable, "-c", starting], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"127\.0\.0\.1:\d+\n", result.stdout), result.stdout
    script = with_port(block_with(DOC, "python", "fy.Switch("), documented_server)
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=project_env(),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "0 0\n"  # port_rx[1]: no packets yet
    assert read_job(documented_server) == [0, 4, 2, 1, 1, 0, 1]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["docs/p4runtime.md", "README.md"])
def test_the_p4runtime_shell_session(where: str, documented_server: str) -> None:
    python = _shell_python()
    if where == "README.md":
        found = re.search(r"`(python [^`]*-m p4runtime_sh[^`]*)`", README.read_text())
        assert found, "README.md: no p4runtime-shell command"
        argv = found.group(1).split()
    else:
        argv = command_line(DOC, "-m p4runtime_sh")
        assert argv[0] == ".venv-p4rt-shell/bin/python", argv
    argv = argv_with_port(str(python), argv, documented_server)
    session = block_with(DOC, "python", 'table_entry["ina_job"]')
    result = subprocess.run(
        argv,
        input=session,
        cwd=REPO,  # where the documents' relative paths start
        capture_output=True,
        text=True,
        timeout=120,
        env=project_env(),
    )
    out = ANSI.sub("", result.stdout + result.stderr)
    assert result.returncode == 0, out
    assert "Welcome to the IPython shell for P4Runtime" in out, out
    assert "Traceback" not in out and "Error" not in out, out
    assert 'param_id: 7 ("epoch")' in out, out  # the entry read back, epoch included
    port_rx = INFO.counter("port_rx")
    assert f'counter_id: {port_rx.id} ("{port_rx.name}")' in out, out
    assert read_job(documented_server) == [0, 4, 2, 1, 1, 0, 1]


def shell_check_lines() -> list[list[str]]:
    """The page's command lines that run tests/p4runtime_shell_check.py."""
    return [
        line.split("#")[0].split()
        for b in blocks(DOC, "sh")
        for line in b.splitlines()
        if "p4runtime_shell_check.py" in line and not line.lstrip().startswith("#")
    ]


def test_the_shell_check_is_shown_with_its_required_options() -> None:
    lines = shell_check_lines()
    assert len(lines) == 2 and all("--drop-reasons" in argv for argv in lines), lines
    for argv in lines:
        assert argv[argv.index("--drop-reasons") + 1] == str(INA_DROP_REASONS), argv


@pytest.mark.slow
@pytest.mark.parametrize("n", [0, 1], ids=["switch-config", "with-config"])
def test_the_non_interactive_shell_check(n: int, documented_server: str) -> None:
    """The page's `tests/p4runtime_shell_check.py` lines, as written (only the port changed),
    against the server the page starts."""
    python = _shell_python()
    argv = shell_check_lines()[n]
    assert argv[0] == ".venv-p4rt-shell/bin/python", argv
    argv = argv_with_port(str(python), argv, documented_server)
    result = subprocess.run(
        argv, cwd=REPO, capture_output=True, text=True, timeout=120, env=project_env()
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "p4runtime-shell check: OK" in result.stdout
