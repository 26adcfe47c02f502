"""The P4 tools (p4c-bm2-ss, simple_switch, simple_switch_CLI, simple_switch_grpc) are found
from a plain shell, as from `make`: in $INAEMU_P4_PREFIX/bin, then /opt/p4/bin, then PATH
(`inaemu.p4.tools`); a tool found nowhere is refused with the places looked at and how to
install it, by every command that runs one."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from inaemu.cli import main as cli
from inaemu.mininet.run import bmv2_program
from inaemu.mininet.scenario import RunDir, ScenarioError
from inaemu.p4 import tools
from inaemu.p4.tools import (
    P4C,
    PREFIX_ENV,
    SIMPLE_SWITCH,
    SIMPLE_SWITCH_CLI,
    SIMPLE_SWITCH_GRPC,
    P4ToolMissing,
    find_tool,
    require_tool,
)

EVERY_TOOL = (P4C, SIMPLE_SWITCH, SIMPLE_SWITCH_CLI, SIMPLE_SWITCH_GRPC)


def plain_path() -> str:
    """PATH without /opt/p4/bin, as a plain shell has it."""
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if Path(d).resolve() != Path("/opt/p4/bin"))


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho fake\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No P4 tool anywhere: $INAEMU_P4_PREFIX an empty dir, no /opt/p4, PATH without them."""
    monkeypatch.setenv(PREFIX_ENV, str(tmp_path / "empty"))
    monkeypatch.setattr(tools, "DEFAULT_PREFIX", tmp_path / "no-opt-p4")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    return tmp_path


def places(tmp_path: Path) -> str:
    return f"{tmp_path}/empty/bin (${PREFIX_ENV}/bin), {tmp_path}/no-opt-p4/bin and PATH"


@pytest.mark.skipif(
    not all((tools.DEFAULT_PREFIX / "bin" / t).is_file() for t in EVERY_TOOL),
    reason="the toolchain is not in /opt/p4 (bash ../shared/p4-toolchain/install.sh)",
)
def test_tools_in_opt_p4_are_found_without_it_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PREFIX_ENV, raising=False)
    monkeypatch.setenv("PATH", plain_path())
    for name in EVERY_TOOL:
        assert find_tool(name) == f"/opt/p4/bin/{name}"
    # and by the commands, from a plain shell: the bmv2 cases run
    env = {**os.environ, "PATH": plain_path()}
    proc = subprocess.run(
        [sys.executable, "-m", "inaemu.cli", "conformance", "--target", "bmv2", "-k", "sum_1_"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 0 failed" in proc.stdout, proc.stdout


def test_the_prefix_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = executable(tmp_path / "bin" / SIMPLE_SWITCH_GRPC)
    monkeypatch.setenv(PREFIX_ENV, str(tmp_path))
    assert find_tool(SIMPLE_SWITCH_GRPC) == str(own)
    assert require_tool(SIMPLE_SWITCH_GRPC) == str(own)


def test_path_comes_last(nowhere: Path) -> None:
    on_path = executable(nowhere / "bin" / P4C)
    assert find_tool(P4C) == str(on_path)
    assert find_tool(SIMPLE_SWITCH) is None


def test_a_missing_tool_names_where_it_was_looked_for(nowhere: Path) -> None:
    with pytest.raises(P4ToolMissing) as err:
        require_tool(SIMPLE_SWITCH_GRPC)
    message = str(err.value)
    assert message.startswith(f"{SIMPLE_SWITCH_GRPC} not found in {places(nowhere)}; "), message
    assert "bash ../shared/p4-toolchain/install.sh" in message
    assert "build p4c and bmv2" in message


def test_every_command_says_where_it_looked(
    nowhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topology = nowhere / "t.json"
    assert cli.main(["topo", "star:2", "-o", str(topology)]) == 0
    capsys.readouterr()
    assert cli.main(["bmv2", "-t", str(topology)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"inaemu bmv2: {SIMPLE_SWITCH_GRPC} not found in {places(nowhere)}")
    assert cli.main(["conformance", "--target", "all", "-k", "sum_1_worker"]) == 2
    err = capsys.readouterr().err
    assert f"bmv2 target: {P4C}, {SIMPLE_SWITCH}, {SIMPLE_SWITCH_CLI} not found in" in err, err
    assert places(nowhere) in err
    with pytest.raises(ScenarioError) as refused:
        bmv2_program(RunDir.make(nowhere / "run"))
    assert f"--switch bmv2: {P4C}, {SIMPLE_SWITCH_GRPC} not found in {places(nowhere)}" in str(
        refused.value
    )
