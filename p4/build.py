"""`ina.p4` built for bmv2: p4c-bm2-ss's JSON (and its P4Info beside it), cached by a hash of
the sources, so that a second build of the same sources is a file look-up. The conformance
cases, the Mininet runner, the tests and the benchmarks build it here; p4c-bm2-ss is found as
every P4 tool is (`tools.py`: $INAEMU_P4_PREFIX/bin, /opt/p4/bin, PATH)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from inaemu.p4.constants import P4_DIR
from inaemu.p4.tools import P4C, require_tool


def default_build_dir() -> Path:
    """p4/build in a source tree; a per-user cache when the package is installed read-only."""
    if os.access(P4_DIR, os.W_OK):
        return P4_DIR / "build"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "inaemu" / "p4-build"


def compile_p4(build_dir: Path | None = None) -> Path:
    """Compile p4/ina.p4 with p4c-bm2-ss (cached by source hash); return the bmv2 JSON.
    P4ToolMissing if p4c-bm2-ss is not installed (and the build is not cached);
    CalledProcessError if it fails."""
    sources = [P4_DIR / "ina.p4", *sorted((P4_DIR / "include").glob("*.p4"))]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
    build = build_dir or default_build_dir()
    build.mkdir(parents=True, exist_ok=True)
    out = build / f"ina-{digest}.json"
    if not out.exists():
        subprocess.run(
            [
                require_tool(P4C),
                "--p4v",
                "16",
                "--p4runtime-files",
                str(build / "ina.p4info.txt"),
                "-o",
                str(out),
                str(P4_DIR / "ina.p4"),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    return out
