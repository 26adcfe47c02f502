"""Processes that end with the process that started them (Linux).

A launcher (`inaemu demo`, its comparison) that is killed with SIGKILL runs no handler, so it
cannot stop its softswitches and workers; they notice instead. `die_with_parent(pid)` asks
the kernel to send this process SIGTERM when its parent ends (`prctl(PR_SET_PDEATHSIG)`,
kept across `exec`), then checks that the parent is still `pid`: a parent that died before
the request was made has handed this process to another parent already, and SIGTERM comes at
once.

SIGTERM then does what it does anyway: the softswitch stops cleanly (its handler), a worker
process ends. Elsewhere than Linux the call does nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent: int, sig: signal.Signals = signal.SIGTERM) -> None:
    """Have `sig` sent to this process once `parent`, its parent, is gone (at once if it is
    gone already). Call it early in the process's main thread: the kernel sends the signal
    when the thread that started this process ends, so the parent must start it from a
    thread that lives as long as itself (its main thread)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    if os.getppid() != parent:
        os.kill(os.getpid(), sig)
