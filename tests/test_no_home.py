"""`inaemu` run by a user who can write neither the installed sources nor a home directory
(a service account, a read-only container): issue 22, item 12. Before, every command ended in
numba's "cannot cache function '_put16': no locator available" as `inaemu.cli.main` imported
the host library's kernels. Now a command that compiles nothing imports no kernel, and one
that does caches them in a private directory of the temp dir, saying so in one line.

The commands run for real as `nobody` (`setpriv`, as root) with HOME=/nonexistent, in a mount
namespace of their own where the directories that hide this Python from other users (a
pyenv under /root, say) are replaced by ones that show only it."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from inaemu.common import jit

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534


def _hidden_dirs(paths: list[Path]) -> dict[Path, set[str]]:
    """Each directory on the way to `paths` that other users cannot enter, with the entries
    of it that lead there."""
    hidden: dict[Path, set[str]] = {}
    for path in paths:
        for parent in reversed(path.parents):
            if not parent.stat().st_mode & stat.S_IXOTH:
                child = path.relative_to(parent).parts[0]
                hidden.setdefault(parent, set()).add(child)
                break
    return hidden


def _as_nobody(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `argv` as nobody (see the module's docstring)."""
    python = Path(os.path.realpath(sys.executable))
    needed = [python, Path(sys.prefix), Path(sysconfig.get_paths()["purelib"]), ROOT]
    needed += [Path(os.path.realpath(sys.base_prefix))]
    script = ["set -e"]
    for i, (hidden, children) in enumerate(sorted(_hidden_dirs(needed).items())):
        stash = cwd / f".stash{i}"
        stash.mkdir(exist_ok=True)
        script += [f"mount --bind '{hidden}' '{stash}'"]
        script += [f"mount -t tmpfs -o mode=755,size=1m inaemu-test '{hidden}'"]
        for child in sorted(children):
            kind = "mkdir" if (hidden / child).is_dir() else "touch"
            script += [f"{kind} '{hidden / child}'"]
            script += [f"mount --bind '{stash / child}' '{hidden / child}'"]
    script += ['exec setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"']
    setup = ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script)]
    return subprocess.run(
        [*setup, "sh", "env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def nobody_dir() -> Iterator[Path]:
    """A directory of nobody's in the temp dir (which pytest's own tmp_path, private to root,
    is not)."""
    if os.geteuid() != 0:
        pytest.skip("runs the commands as user nobody: needs root (setpriv, a mount namespace)")
    for tool in ("setpriv", "unshare"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool} (util-linux)")
    for path in (ROOT, ROOT / "cli", ROOT / "cli" / "main.py"):
        if path.stat().st_mode & 0o004 == 0:
            pytest.skip(f"the checkout is not readable by other users ({path})")
    work = Path(tempfile.mkdtemp(prefix="inaemu-nobody-"))
    try:
        os.chown(work, NOBODY, NOBODY)
        yield work
    finally:
        shutil.rmtree(work)


def _env(work: Path) -> dict[str, str]:
    return {
        "HOME": "/nonexistent",
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "TMPDIR": str(work),
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def test_topo_runs_without_a_home_and_loads_no_kernel(nobody_dir: Path) -> None:
    """The reproduction of the issue: `inaemu topo star:4 -o x.json` as nobody with
    HOME=/nonexistent writes the file and says nothing else; nothing compiled was loaded."""
    who = _as_nobody([sys.executable, "-c", "import os; print(os.geteuid())"], {}, nobody_dir)
    assert who.stdout.strip() == str(NOBODY), who.stderr
    proc = _as_nobody(
        [sys.executable, "-m", "inaemu.cli", "topo", "star:4", "-o", "x.json"],
        _env(nobody_dir),
        nobody_dir,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert (nobody_dir / "x.json").stat().st_uid == NOBODY
    probe = (
        "import sys; from inaemu.cli.main import main; "
        "main(['topo', 'star:4', '-o', 'y.json']); main(['job', 'list', '-t', 'y.json']); "
        "print(sorted(m for m in sys.modules if m.startswith('numba')))"
    )
    proc = _as_nobody([sys.executable, "-c", probe], _env(nobody_dir), nobody_dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_kernels_cache_in_the_temp_dir_with_one_line(nobody_dir: Path) -> None:
    """A process that compiles a kernel caches it in `<TMPDIR>/inaemu-numba-<uid>` and says so
    once; the processes it starts use the same directory without a word."""
    use_kernel = (
        "import numpy as np; from inaemu.hostlib import kernels; "
        "out = np.zeros((2, 3), np.uint8); "
        "kernels.copy_rows(np.arange(8, dtype=np.uint8), np.array([0, 3]), out); "
        "print(out.tolist())"
    )
    parent = (
        f"import subprocess, sys; exec({use_kernel!r}); "
        f"subprocess.run([sys.executable, '-c', {use_kernel!r}], check=True)"
    )
    proc = _as_nobody([sys.executable, "-c", parent], _env(nobody_dir), nobody_dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[[0, 1, 2], [3, 4, 5]]"] * 2
    cache = nobody_dir / f"inaemu-numba-{NOBODY}"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("inaemu: numba cannot cache compiled kernels in __pycache__")
    assert f"caching them in {cache} " in lines[0]
    assert cache.stat().st_uid == NOBODY and stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert any(p.suffix == ".nbi" for p in cache.rglob("*"))  # numba's index of the kernel


def test_someone_elses_cache_dir_is_never_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory of the fallback's name that others may write (or that is not a directory
    of this user's) is left alone: a fresh private one is made instead."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    shared = tmp_path / f"inaemu-numba-{os.getuid()}"
    shared.mkdir()
    shared.chmod(0o777)
    chosen = jit._private_dir()
    assert chosen is not None and Path(chosen) != shared
    assert Path(chosen).parent == tmp_path and stat.S_IMODE(Path(chosen).stat().st_mode) == 0o700
    shared.chmod(0o700)
    assert jit._private_dir() == str(shared)
