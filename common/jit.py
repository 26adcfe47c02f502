"""numba's njit with its on-disk cache wherever this process can write one: every compiled
kernel (`hostlib/kernels.py`, `hostlib/codecs/_kernels.py`, `softswitch/fast/kernel.py`) is
made here.

numba caches a compiled function beside its source (`__pycache__`), else in the user's cache
directory (under HOME), else in `NUMBA_CACHE_DIR` if set; with none writable (a read-only
install run by a service account whose HOME does not exist), `njit(cache=True)` raises
"cannot cache function ...: no locator available" as the module is imported. Here such a
process caches under a directory of its own in the temp dir instead (`inaemu-numba-<uid>`,
made private to this user, or a fresh one if that name is someone else's), says so once on
stderr, and hands the same directory to the processes it starts (`NUMBA_CACHE_DIR`), which
then load what it compiled. If even that cannot be written, kernels are compiled in every
process and not cached (also said once).
"""

from __future__ import annotations

import inspect
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from numba import njit
from numba.core import config

F = TypeVar("F", bound=Callable[..., Any])
NO_LOCATOR = "no locator available"  # numba's RuntimeError when it finds no cache dir

_fallback: dict[str, str | None] = {}  # "dir": the directory chosen, None: no cache at all


def cached_njit(fn: F, **options: Any) -> F:
    """`numba.njit(cache=True, **options)(fn)`, with the fallback of the module's docstring."""
    if _fallback.get("dir", "") is None:
        return cast(F, njit(cache=False, **options)(fn))
    try:
        return cast(F, njit(cache=True, **options)(fn))
    except RuntimeError as exc:
        if NO_LOCATOR not in str(exc) or "dir" in _fallback:
            raise
    _fallback["dir"] = _use_fallback(Path(fn.__code__.co_filename).parent)
    return cached_njit(fn, **options)


def _use_fallback(source_dir: Path) -> str | None:
    """Point numba's cache at a private directory in the temp dir (None if none can be had),
    and say so in one line."""
    home = os.path.expanduser("~")
    places = f"__pycache__ beside the sources ({source_dir}), under HOME ({home})"
    if os.environ.get("NUMBA_CACHE_DIR"):
        places += f", in NUMBA_CACHE_DIR ({os.environ['NUMBA_CACHE_DIR']})"
    where = _private_dir()
    if where is None:
        _say(
            f"inaemu: numba cannot cache compiled kernels in {places} or the temp dir: "
            "compiling them in every process (set NUMBA_CACHE_DIR to a writable directory)"
        )
        return None
    config.CACHE_DIR = where  # type: ignore[attr-defined]  # numba.core.config is untyped
    os.environ["NUMBA_CACHE_DIR"] = where  # and the processes this one starts
    _say(
        f"inaemu: numba cannot cache compiled kernels in {places}: caching them in {where} "
        "(set NUMBA_CACHE_DIR to choose)"
    )
    return where


def _private_dir() -> str | None:
    """`<tempdir>/inaemu-numba-<uid>`, if it is (or can be made) a directory of this user's
    that nobody else may write; else a new directory of its own; None if neither works."""
    uid = os.getuid()
    try:
        base = tempfile.gettempdir()
    except OSError:  # no usable temp dir at all
        return None
    path = Path(base) / f"inaemu-numba-{uid}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        st = path.lstat()
        if stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o022:
            _writable(path)
            return str(path)
    except OSError:
        pass
    try:  # someone else's, a link, or group- or world-writable: never load from it
        return tempfile.mkdtemp(prefix=f"inaemu-numba-{uid}-")
    except OSError:
        return None


def _writable(path: Path) -> None:
    """OSError unless a file can be made in `path` (what numba itself checks)."""
    tempfile.TemporaryFile(dir=path).close()


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


Part = str | type[tuple[Any, ...]] | tuple[type[tuple[Any, ...]], str]


def check_parameters(kernel: Callable[..., Any], *parts: Part) -> None:
    """Check that `kernel`'s parameters are `parts` in order: a name, every field of a
    NamedTuple class, or every field of one with a prefix (`(Frames, "in_")`: in_buf, ...).

    A kernel whose callers hand it records (NamedTuples, named and typed at the call) takes
    them apart as separate arguments, because numba types arrays in C and a NamedTuple in
    Python, microseconds a call; the caller passes `*record`, so the kernel's parameters must
    be the records' fields in their order: this says so when the kernel is made, not as
    arrays swapped at run time."""
    expected: list[str] = []
    for part in parts:
        if isinstance(part, str):
            expected.append(part)
        else:
            record, prefix = part if isinstance(part, tuple) else (part, "")
            expected += [prefix + name for name in record._fields]  # type: ignore[attr-defined]
    fn = getattr(kernel, "py_func", kernel)
    got = list(inspect.signature(fn).parameters)
    if got != expected:
        raise TypeError(f"{fn.__qualname__}: parameters {got} are not the records' {expected}")
