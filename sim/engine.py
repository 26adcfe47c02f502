"""ns-3 for the simulator: loading it, its run-time C++ (`glue.cpp`), one simulation's life.

ns-3 comes from PyPI (`pip install 'inaemu[sim]'`: the `ns3` wheels, with cppyy bindings; no
compiler). What loading it takes care of, each found the hard way (docs/sim.md, "ns-3 from
Python"):

- `from ns import ns` searches the current directory recursively for libraries: from a large
  tree it takes minutes. It is imported from ns-3's own directory.
- Its first import takes 5-15 s (cling parses ns-3's headers) and prints two harmless lines on
  stderr; `glue.cpp` is compiled once per process after it (~0.5 s).
- Time resolution: picoseconds, so that a 312-byte frame at 100 Gbit/s takes 24.96 ns, not 25.
- ns-3's defaults (`Config.SetDefault`) outlive a simulation: every run sets its own.
- An ns-3 assertion aborts the whole process: callers validate their input first, and
  `inaemu sim` runs simulations in a child process (`sim/run.py`).

`Simulation` is one run: it keeps every object that C++ holds a pointer to (cppyy does not:
a Python callable that C++ still calls must stay referenced), records the first exception a
handler raised (a Python exception cannot cross ns-3's event loop cleanly: handlers catch
everything, record it and stop the simulator), and destroys the simulator at the end.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
# glue.cpp first: the others may use what it defines
GLUE = [HERE / "glue.cpp", *sorted(p for p in HERE.glob("*.cpp") if p.name != "glue.cpp")]
PS_PER_S = 10**12


class SimError(RuntimeError):
    """A simulation that cannot run or did not finish; the message says what and where."""


class Ns3:
    """ns-3 and the glue, loaded (`load`): `ns` is ns-3's namespace, `glue` ours."""

    def __init__(self, ns: Any, glue: Any, seconds: float) -> None:
        self.ns = ns
        self.glue = glue
        self.load_seconds = seconds


_LOADED: Ns3 | None = None


def ns3_available() -> str | None:
    """None if ns-3's Python package is installed, else what to do."""
    if importlib.util.find_spec("ns") is None:
        return (
            "ns-3 is not installed: pip install 'inaemu[sim]' (the ns3 package from PyPI, "
            "about 500 MB; `make test` installs it)"
        )
    return None


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null meanwhile (cling's lines at ns-3's import)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def load() -> Ns3:
    """ns-3 and the glue, once per process (`SimError` if ns-3 is not installed)."""
    global _LOADED
    if _LOADED is not None:
        return _LOADED
    missing = ns3_available()
    if missing:
        raise SimError(missing)
    spec = importlib.util.find_spec("ns")
    assert spec is not None and spec.origin is not None
    started = time.perf_counter()
    here = os.getcwd()
    os.chdir(Path(spec.origin).parents[1])  # site-packages: it holds ns3/, no deep tree
    try:
        with _quiet_stderr():
            import cppyy
            from ns import ns

            ns.Time.SetResolution(ns.Time.PS)
            for source in GLUE:
                cppyy.cppdef(source.read_text())
    finally:
        os.chdir(here)
    _LOADED = Ns3(ns, cppyy.gbl.inaemu_sim, time.perf_counter() - started)
    return _LOADED


class Simulation:
    """One simulation: `run()` until the events run out or `stop_at`; then `close()`."""

    def __init__(self, ns3: Ns3) -> None:
        self.ns3 = ns3
        self.keep: list[Any] = []  # what C++ points at: handlers, arrays, helper objects
        self.error: BaseException | None = None
        self.wall_seconds = 0.0
        self.events = 0
        self.time_ps = 0  # the simulated time when the running handler was called

    @property
    def ns(self) -> Any:
        return self.ns3.ns

    @property
    def glue(self) -> Any:
        return self.ns3.glue

    def hold(self, *objects: Any) -> None:
        self.keep.extend(objects)

    def handler(self, fn: Callable[..., None]) -> Callable[..., None]:
        """`fn` as a handler C++ may call: an exception is recorded and stops the simulator
        instead of unwinding through ns-3's event loop. Kept referenced."""

        now_ps = self.glue.now_ps

        def guarded(*args: Any) -> None:
            if self.error is not None:
                return
            self.time_ps = int(now_ps())  # Python runs only in handlers: `now` reads this
            try:
                fn(*args)
            except BaseException as exc:  # every kind: none may cross into C++
                self.error = exc
                self.ns.Simulator.Stop()

        self.keep.append(guarded)
        return guarded

    def now_ps(self) -> int:
        """The simulated time, in picoseconds: the running handler's (Python runs only in
        handlers, and the clock does not move while one runs)."""
        return self.time_ps

    def now(self) -> float:
        """Simulated seconds (`now_ps`)."""
        return self.time_ps / PS_PER_S

    def ps_at_or_after(self, seconds: float) -> int:
        """The first picosecond, later than now, at which `now()` reads at least `seconds`: a
        timer armed for a deadline in seconds must find it passed when it fires (a deadline
        that rounds to now would fire again and again at the same instant)."""
        at = max(math.ceil(seconds * PS_PER_S), self.now_ps() + 1)
        while at / PS_PER_S < seconds:
            at += 1
        return at

    def run(self, stop_at_ps: int | None = None) -> None:
        """Run the events (until `stop_at_ps`, if given); a handler's exception is re-raised."""
        sim = self.ns.Simulator
        if stop_at_ps is not None:
            sim.Stop(self.ns.PicoSeconds(max(stop_at_ps - int(self.glue.now_ps()), 0)))
        started = time.perf_counter()
        sim.Run()
        self.wall_seconds += time.perf_counter() - started
        self.events = int(sim.GetEventCount())
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self.ns.Simulator.Destroy()
        self.keep.clear()
