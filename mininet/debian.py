"""Debian's Mininet, reached from the project's virtualenv.

Mininet comes from Debian (`apt-get install mininet`): its Python package lives in the system
Python's `/usr/lib/python3/dist-packages`, which the virtualenv does not see. `load()` imports
that package by its path, under its own name `mininet`, without putting dist-packages on
`sys.path` (so nothing else of the system Python leaks in). `load()` refuses to go on if
something else already holds the name `mininet`. This repository's own `mininet/` folder has
no `__init__.py`, so that with the repository root on `sys.path` (pytest's rootdir, `python
-m` or a user's script from the root) a plain `import mininet` of the system Python still
finds Debian's package.

Mininet 2.3 is plain Python; it needs `distutils` (in the standard library up to Python 3.11,
which is what Debian 12 and this project use) and the programs `mnexec`, `ip`, `tc` and
`ifconfig` of its Debian dependencies.

`INAEMU_MININET_DIR` names another folder that holds Mininet's `mininet/` package (e.g. a
source build's `/usr/local/lib/python3.11/dist-packages`).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_DIR = "INAEMU_MININET_DIR"
SEARCHED = (
    Path("/usr/lib/python3/dist-packages"),
    Path(f"/usr/local/lib/python3.{sys.version_info.minor}/dist-packages"),
    Path("/usr/local/lib/python3/dist-packages"),
)
# what Mininet runs for us: mnexec (its own), ip and tc (iproute2), ifconfig (net-tools)
PROGRAMS = ("mnexec", "ip", "tc", "ifconfig")
APT_PACKAGES = ("mininet",)


class MininetUnavailable(RuntimeError):
    """Mininet cannot be used here; the message says why and what to do."""


@dataclass(frozen=True)
class MininetApi:
    """The Mininet modules this package uses (untyped: Mininet has no type hints)."""

    net: Any
    node: Any
    link: Any
    log: Any
    util: Any
    version: str


def mininet_dir() -> Path | None:
    """The folder that holds Debian's `mininet/` package, or None."""
    override = os.environ.get(ENV_DIR)
    candidates = (Path(override),) if override else SEARCHED
    for folder in candidates:
        if (folder / "mininet" / "net.py").is_file():
            return folder
    return None


def missing() -> str | None:
    """None if Mininet can be loaded and run here, else why not (and what to do)."""
    if mininet_dir() is None:
        where = os.environ.get(ENV_DIR) or ", ".join(str(p) for p in SEARCHED)
        return f"Mininet is not installed (no mininet package in {where}): " + install_hint()
    tools = [p for p in PROGRAMS if shutil.which(p) is None]
    if tools:
        return f"Mininet's programs are missing: {', '.join(tools)}; " + install_hint()
    if os.geteuid() != 0:
        return "Mininet needs root (it makes network namespaces and interfaces)"
    return None


def install_hint() -> str:
    return "run `make mininet-deps` or `apt-get install -y --no-install-recommends mininet` as root"


def apt_install(packages: tuple[str, ...], log: Any = None) -> None:
    """`apt-get install -y --no-install-recommends PACKAGES` (root), with one `apt-get update`
    and a retry when the package lists are missing or stale. Raises MininetUnavailable."""
    if os.geteuid() != 0:
        raise MininetUnavailable(f"{' '.join(packages)} missing, and only root can install it")
    if shutil.which("apt-get") is None:
        raise MininetUnavailable(f"{' '.join(packages)} missing and no apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    print(f"installing {' '.join(packages)} with apt-get ...", file=log or sys.stderr, flush=True)
    proc = subprocess.run(install, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True, env=env)
        proc = subprocess.run(install, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise MininetUnavailable(f"apt-get install {' '.join(packages)} failed:\n{tail}")


def ensure(*, install: bool = True, log: Any = None) -> None:
    """Make Mininet usable: install Debian's package when it is missing and we are root (and
    `install`), else raise MininetUnavailable with what to do."""
    reason = missing()
    if reason is not None and install and os.geteuid() == 0:
        apt_install(APT_PACKAGES, log)
        reason = missing()
    if reason is not None:
        raise MininetUnavailable(reason)


def load() -> MininetApi:
    """Debian's Mininet modules, imported by path (see the module's docstring)."""
    folder = mininet_dir()
    if folder is None:
        raise MininetUnavailable(missing() or "Mininet is not installed")
    package = (folder / "mininet").resolve()
    held = sys.modules.get("mininet")
    if held is not None:
        where = Path(getattr(held, "__file__", "") or "").resolve().parent
        if where != package:
            raise MininetUnavailable(
                f"the name `mininet` is already taken by {where} (not Mininet at {package}): "
                "import inaemu.mininet, never this repository's mininet/ folder as `mininet`"
            )
    else:
        spec = importlib.util.spec_from_file_location(
            "mininet", package / "__init__.py", submodule_search_locations=[str(package)]
        )
        if spec is None or spec.loader is None:
            raise MininetUnavailable(f"cannot import Mininet from {package}")
        module = importlib.util.module_from_spec(spec)
        sys.modules["mininet"] = module
        try:
            spec.loader.exec_module(module)
        except Exception:
            del sys.modules["mininet"]
            raise
    logger_class = logging.getLoggerClass()
    try:
        mods = {n: importlib.import_module(f"mininet.{n}") for n in ("net", "node", "link", "log")}
        util = importlib.import_module("mininet.util")
    except ImportError as exc:
        raise MininetUnavailable(
            f"Mininet at {package} does not import under Python "
            f"{sys.version_info.major}.{sys.version_info.minor}: {exc}"
        ) from None
    finally:
        # mininet.log makes its MininetLogger the class of every logger created after it
        # (each with a console handler of its own, printing without newlines): only its own
        # logger keeps it, so that e.g. finsy's messages go where the runner sends them
        logging.setLoggerClass(logger_class)
    return MininetApi(
        mods["net"], mods["node"], mods["link"], mods["log"], util, str(mods["net"].VERSION)
    )
