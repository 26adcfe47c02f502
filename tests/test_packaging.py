"""The installed package: one `inaemu` namespace, no generic top-level modules, and the data
(P4 sources, committed P4Info, conformance cases) that its commands read."""

from __future__ import annotations

import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with this checkout's wheel installed (what `pip install .` installs);
    its dependencies are lent from the test's own environment (a .pth line, so no registry is
    needed and this checkout's editable install is not seen). Returns the venv's python."""
    wheels = tmp_path_factory.mktemp("wheel")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    built = subprocess.run(
        [*pip_wheel, "-w", str(wheels), str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("inaemu-*.whl")
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
    )
    assert proc.returncode == 0, proc.stderr
    return python


def _run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = [str(python), *args]
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=120)


def test_only_the_inaemu_namespace_is_installed(installed: Path, tmp_path: Path) -> None:
    for generic in (
        "controller",
        "hostlib",
        "softswitch",
        "conformance",
        "p4",
        "mininet",
        "collectives",
    ):
        proc = _run(installed, "-c", f"import {generic}", cwd=tmp_path)
        assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr, generic
    proc = _run(
        installed,
        "-c",
        "import inaemu.controller.cli, inaemu.hostlib.client, inaemu.softswitch.pipeline; "
        "print(inaemu.controller.cli.__file__)",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert str(ROOT) not in proc.stdout  # the installed copy, not this checkout


def test_installed_commands_find_their_data(installed: Path, tmp_path: Path) -> None:
    proc = _run(installed, "-m", "inaemu.controller.cli", "conformance", "-k", "sum_", cwd=tmp_path)
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
