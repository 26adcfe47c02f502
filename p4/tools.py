"""Where the P4 tools are: p4c's bmv2 back end (`p4c-bm2-ss`) and bmv2's switches
(`simple_switch`, `simple_switch_CLI`, `simple_switch_grpc`). Every command that runs one
finds it here, so that they are found from a plain shell as from `make`:

1. `$INAEMU_P4_PREFIX/bin`, when that variable is set (a toolchain installed elsewhere);
2. `/opt/p4/bin` (`DEFAULT_PREFIX`: where `bash ../shared/p4-toolchain/install.sh` puts them);
3. the directories of PATH.

A tool found nowhere is refused with `P4ToolMissing`, whose message names the places looked
at and how to install the tools.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

PREFIX_ENV = "INAEMU_P4_PREFIX"
DEFAULT_PREFIX = Path("/opt/p4")

P4C = "p4c-bm2-ss"
SIMPLE_SWITCH = "simple_switch"
SIMPLE_SWITCH_CLI = "simple_switch_CLI"
SIMPLE_SWITCH_GRPC = "simple_switch_grpc"

INSTALL = (
    "install p4c and bmv2: `bash ../shared/p4-toolchain/install.sh` (as root) puts them in "
    f"{DEFAULT_PREFIX}/bin; elsewhere build p4c and bmv2 (github.com/p4lang/p4c, "
    f"github.com/p4lang/behavioral-model) and set {PREFIX_ENV} to their install prefix"
)


class P4ToolMissing(RuntimeError):
    """A P4 tool is not installed where inaemu looks; the message says where it looked and
    how to install it."""


def tool_dirs() -> list[tuple[str, Path]]:
    """The directories searched, in order, each with how the message names it."""
    dirs = []
    prefix = os.environ.get(PREFIX_ENV)
    if prefix:
        dirs.append((f"${PREFIX_ENV}/bin", Path(prefix) / "bin"))
    dirs.append(("", DEFAULT_PREFIX / "bin"))
    return dirs


def find_tool(name: str) -> str | None:
    """The path of tool `name` (see the module doc for the order), or None."""
    for _, d in tool_dirs():
        path = d / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return shutil.which(name)


def places() -> str:
    """Where `find_tool` looks, for a message."""
    named = [f"{d} ({label})" if label else str(d) for label, d in tool_dirs()]
    return ", ".join(named) + " and PATH"


def missing_tools(names: Iterable[str]) -> str | None:
    """None if every tool of `names` is found, else a message naming the missing ones, where
    they were looked for and how to install them."""
    missing = [n for n in names if find_tool(n) is None]
    if not missing:
        return None
    return f"{', '.join(missing)} not found in {places()}; {INSTALL}"


def require_tool(name: str) -> str:
    """The path of tool `name`; P4ToolMissing if it is found nowhere."""
    path = find_tool(name)
    if path is None:
        raise P4ToolMissing(missing_tools([name]) or name)
    return path
