"""The installed package: one `inaemu` namespace, no generic top-level modules, every folder of
the source (the package list is found by setuptools, not written by hand), the data (P4
sources, committed P4Info, conformance cases, the example training script) that its commands
read, and every subcommand working from the installed copy, a small training run included.
In the checkout, the top-level `p4/` and `mininet/` folders are no regular packages, so that
from the repository root `import p4` and `import mininet` still find p4runtime's and Debian's
packages."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from inaemu.softswitch.p4runtime.server import P4RuntimeServer
from inaemu.softswitch.pipeline import Pipeline
from tests.test_p4runtime_server import _shell_python

ROOT = Path(__file__).resolve().parents[1]
# what the installed copy runs in: none of this checkout (PYTHONPATH) or its venv
OUTSIDE = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with its mininet package (make mininet-deps)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout's wheel (what `pip install .` builds and installs)."""
    wheels = tmp_path_factory.mktemp("wheel")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    built = subprocess.run(
        [*pip_wheel, "-w", str(wheels), str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    (path,) = wheels.glob("inaemu-*.whl")
    return path


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with this checkout's wheel installed (what `pip install .` installs);
    its dependencies are lent from the test's own environment (a .pth line, so no registry is
    needed and this checkout's editable install is not seen). Returns the venv's python."""
    env = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True).create(env)
    python = env / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    lent = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (Path(purelib) / "lent-dependencies.pth").write_text("\n".join(lent) + "\n")
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        cwd=env,
        env=OUTSIDE,  # else pip may find this checkout's inaemu.egg-info and install nothing
    )
    assert proc.returncode == 0, proc.stderr
    return python


def _run(
    python: Path, *args: str, cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    argv = [str(python), *args]
    return subprocess.run(
        argv, capture_output=True, text=True, cwd=cwd, timeout=timeout, env=OUTSIDE
    )


def source_modules() -> set[str]:
    """Every .py file of the package's folders (inaemu/ and the folders it links), as its
    path inside the installed package: what the wheel must hold."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(ROOT / "inaemu", followlinks=True):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        here = Path(dirpath).relative_to(ROOT)
        found |= {(here / f).as_posix() for f in filenames if f.endswith(".py")}
    return found


def test_the_wheel_holds_every_folder_of_the_source(wheel: Path) -> None:
    """The package list comes from the folders: a subpackage left out of a hand-written list
    (inaemu.cli.train was) is missing from `pip install .` and fails only there."""
    with zipfile.ZipFile(wheel) as z:
        shipped = {n for n in z.namelist() if n.startswith("inaemu/") and n.endswith(".py")}
    expected = source_modules()
    assert sorted(expected - shipped) == [], "folders of .py files missing from the wheel"
    assert {"inaemu/cli/train/launcher.py", "inaemu/examples/train_ddp.py"} <= shipped


def subcommands() -> list[list[str]]:
    """Every `inaemu` subcommand, and every action of one that takes a positional choice
    (`job add`, `pipeline push`, ...), from the command's own parser."""
    import argparse

    from inaemu.cli.main import build_parser

    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    found = []
    for name, parser in sub.choices.items():
        found.append([name])
        for action in parser._actions:
            if not action.option_strings and action.choices:
                found += [[name, str(choice)] for choice in action.choices]
    return found


HELP_EVERY = """
import contextlib, io, json, sys
from inaemu.cli.main import main
failed = {}
for command in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main([*command, "--help"])
        except SystemExit as exc:
            status = exc.code
    if status not in (0, None) or "usage:" not in out.getvalue():
        failed[" ".join(command)] = f"status {status}: {err.getvalue()[-500:]}"
print(json.dumps(failed))
"""


def test_every_subcommand_runs_from_the_installed_copy(installed: Path, tmp_path: Path) -> None:
    """`inaemu CMD --help` and `inaemu CMD ACTION --help` for every subcommand, from the
    installed copy (the console script, and in one process for the rest): each one's modules
    import from the wheel and its parser builds."""
    inaemu = installed.parent / "inaemu"
    commands = subcommands()
    assert ["train"] in commands and ["job", "add"] in commands and ["mininet"] in commands
    for command in ([], ["train"]):
        proc = _run(inaemu, *command, "--help", cwd=tmp_path)
        assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stderr
    proc = _run(installed, "-c", HELP_EVERY, json.dumps(commands), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {}


def test_a_small_training_run_from_the_installed_copy(installed: Path, tmp_path: Path) -> None:
    """An installed user writes the shipped example out (`inaemu train --example`) and trains
    with it: 2 workers, a few steps, INA with fixed point, on the embedded network."""
    pytest.importorskip("torch", reason="PyTorch not installed")
    inaemu = installed.parent / "inaemu"
    proc = _run(inaemu, "train", "--example", "train_ddp.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "train_ddp.py").read_text() == (ROOT / "examples/train_ddp.py").read_text()
    argv = ["train", "--backend", "ina-fixedpoint", "--workers", "2", "--out", "out"]
    proc = _run(inaemu, *argv, "train_ddp.py", "--steps", "3", cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "out" / "train.json").read_text())
    assert summary["backends"]["ina-fixedpoint"]["iterations"] == [0, 1, 2]
    assert summary["backends"]["ina-fixedpoint"]["error"] == ""


def test_only_the_inaemu_namespace_is_installed(installed: Path, tmp_path: Path) -> None:
    for generic in (
        "controller",
        "common",
        "hostlib",
        "softswitch",
        "conformance",
        "embedded",
        "runs",
        "p4",
        "mininet",
        "collectives",
        "topology",
        "cli",
        "examples",
    ):
        proc = _run(installed, "-c", f"import {generic}", cwd=tmp_path)
        assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr, generic
    proc = _run(
        installed,
        "-c",
        "import inaemu.cli.main, inaemu.hostlib.client, inaemu.softswitch.pipeline; "
        "print(inaemu.cli.main.__file__)",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert str(ROOT) not in proc.stdout  # the installed copy, not this checkout


def test_installed_commands_find_their_data(installed: Path, tmp_path: Path) -> None:
    proc = _run(installed, "-m", "inaemu.cli", "conformance", "-k", "sum_", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "6 passed, 0 failed" in proc.stdout  # 3 cases on both softswitch data planes
    proc = _run(
        installed,
        "-c",
        "from inaemu.p4.info import load_p4info; from inaemu.p4.constants import P4_DIR; "
        "print(len(load_p4info().tables), (P4_DIR / 'ina.p4').is_file(), "
        "(P4_DIR / 'include' / 'aggregation.p4').is_file())",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["5", "True", "True"]
    proc = _run(installed, "-m", "inaemu.softswitch", "--help", cwd=tmp_path)
    assert proc.returncode == 0 and "usage" in proc.stdout, proc.stderr


def test_installed_p4_and_mininet_subpackages(installed: Path, tmp_path: Path) -> None:
    """inaemu.p4, inaemu.runs and inaemu.mininet are no regular packages (no __init__.py, so
    that they do not hide p4runtime's `p4`, PyPI's `runs` and Debian's `mininet` from the
    repository root); installed, they import as inaemu's, with their data."""
    proc = _run(
        installed,
        "-c",
        "import inaemu.p4.info, inaemu.p4.compare, inaemu.mininet.run, inaemu.runs.compare; "
        "print(inaemu.p4.info.__file__); print(inaemu.mininet.run.__file__); "
        "print(inaemu.runs.compare.__file__)",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    for line in proc.stdout.split():
        assert str(ROOT) not in line and "/site-packages/inaemu/" in line, line
    proc = _run(installed, "-m", "inaemu.mininet", "--help", cwd=tmp_path)
    assert proc.returncode == 0 and "usage: inaemu mininet" in proc.stdout, proc.stderr


# ---------------------------------------------------------------------- from the repository root


@pytest.mark.slow
def test_p4runtime_shell_runs_from_the_repository_root() -> None:
    """The README's p4runtime-shell command, run from the repository root: p4runtime's `p4`
    package (p4.v1, p4.config.v1) is found, not this repository's p4/ folder."""
    python = _shell_python()
    with P4RuntimeServer(Pipeline(), address="127.0.0.1:0", preconfigured=True) as server:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        proc = subprocess.run(
            [str(python), "-m", "p4runtime_sh", "--grpc-addr", server.address,
             "--device-id", "1", "--election-id", "0,1"],
            input='print("ina_job entries:", len(list(table_entry["ina_job"].read())))\n',
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=120,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ina_job entries: 0" in proc.stdout, proc.stdout + proc.stderr


def test_debian_mininet_imports_from_the_repository_root() -> None:
    """A user's own Mininet script run from the repository root gets Debian's Mininet, not
    this repository's mininet/ folder."""
    elsewhere = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import mininet.net"], capture_output=True, cwd="/", timeout=60
    )
    if elsewhere.returncode != 0:
        pytest.skip("Debian's mininet is not installed (make mininet-deps, as root)")
    proc = subprocess.run(
        [SYSTEM_PYTHON, "-c", "from mininet.net import Mininet; import mininet; "
         "print(mininet.__file__)"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith("/usr/"), proc.stdout
