"""numba's njit as every compiled kernel of inaemu is made (`kernel`, `kernel_with`: the one
wrapper of `hostlib/kernels.py`, `hostlib/codecs/_kernels.py` and `softswitch/fast/kernel.py`),
with its on-disk cache wherever this process can write one.

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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from numba import njit
from numba.core import config

F = TypeVar("F", bound=Callable[..., Any])
NO_LOCATOR = "no locator available"  # numba's RuntimeError when it finds no cache dir

_fallback: dict[str, str | None] = {}  # "dir": the directory chosen, None: no cache at all
_made: list[Any] = []  # every dispatcher made here (their cache statistics: `warm_up`)


KERNEL_OPTIONS: dict[str, Any] = {"nogil": True, "error_model": "numpy"}


def kernel(fn: F) -> F:
    """`fn` compiled as every kernel here is: numba's njit, cached on disk (`cached_njit`),
    without the GIL (other threads of the process run meanwhile: a switch's ports and gRPC
    server, a worker's own), with numpy's error model (a division by zero gives inf or nan
    instead of an exception check on every division), and no fastmath (results must round as
    the references' do). Typed: a kernel keeps its Python signature for mypy."""
    return cached_njit(fn, **KERNEL_OPTIONS)


def kernel_with(**options: Any) -> Callable[[F], F]:
    """`kernel` with numba options of the caller's besides, e.g. the fast data plane's
    `_nrt=False` and `inline="always"` (softswitch/fast/kernel.py says why)."""

    def compile_(fn: F) -> F:
        return cached_njit(fn, **KERNEL_OPTIONS, **options)

    return compile_


def cached_njit(fn: F, **options: Any) -> F:
    """`numba.njit(cache=True, **options)(fn)`, with the fallback of the module's docstring."""
    if _fallback.get("dir", "") is None:
        return cast(F, _keep(njit(cache=False, **options)(fn)))
    try:
        return cast(F, _keep(njit(cache=True, **options)(fn)))
    except RuntimeError as exc:
        if NO_LOCATOR not in str(exc) or "dir" in _fallback:
            raise
    _fallback["dir"] = _use_fallback(Path(fn.__code__.co_filename).parent)
    return cached_njit(fn, **options)


def _keep(dispatcher: Any) -> Any:
    _made.append(dispatcher)
    return dispatcher


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


# ---------------------------------------------------------------------- warming up


@dataclass(frozen=True)
class WarmUp:
    """How a process's kernels got ready: loaded from numba's cache, or compiled."""

    source: str  # "cache" or "compiled" ("pending" while it happens)
    seconds: float

    def __str__(self) -> str:
        return f"{self.source}:{self.seconds:.2f}s"


Loader = Callable[[], object]  # calls some kernels once on small inputs
_warmed: dict[Loader, WarmUp] = {}
_warming = threading.RLock()


def warm_up(*loaders: Loader) -> WarmUp:
    """The one way a process loads (or compiles) the kernels it needs before its first packet
    or allreduce: each of `loaders` (a kernel module's `load`, a codec's `hostlib.codecs.
    loader`, the fast data plane's `load`) runs once per process, however often it is asked
    for (a later call, or one made while it runs, finds it done); how they went, together:
    "compiled" if any kernel had to be compiled rather than loaded from numba's cache, and
    the seconds their first runs took. numba loads a kernel on its first call (a fraction of
    a second per process, 10-30 s to compile): called before the clock starts or a port
    opens, no measured allreduce and no packet waits for it."""
    with _warming:
        for load in loaders:
            if load in _warmed:
                continue
            _warmed[load] = WarmUp("pending", 0.0)  # what `load` makes may warm up again
            started = time.monotonic()
            misses = _cache_misses()
            load()
            compiled = _cache_misses() > misses or _fallback.get("dir", "") is None
            _warmed[load] = WarmUp("compiled" if compiled else "cache", time.monotonic() - started)
        done = [_warmed[load] for load in loaders]
    compiled = any(w.source == "compiled" for w in done)
    return WarmUp("compiled" if compiled else "cache", sum(w.seconds for w in done))


def _cache_misses() -> int:
    """Kernels compiled so far because numba's cache did not have them."""
    return sum(sum(d.stats.cache_misses.values()) for d in _made)
