"""A worker loads its codec's compiled kernels before the measured allreduce (`codecs.loader`
through `common.jit.warm_up`: a fresh process's first call of a numba kernel loads or
compiles it, 0.2 s and more), once per process."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import numpy as np
from inaemu.common.jit import warm_up
from inaemu.hostlib.codecs import _kernels, loader, make_codec
from inaemu.hostlib.collective.executor import make_schedule_codec
kernels = {k: getattr(_kernels, k) for k in %r}
before = {k: len(f.signatures) for k, f in kernels.items()}
warm_up(loader(make_schedule_codec(%r), np.float32))
after = {k: len(f.signatures) for k, f in kernels.items()}
print(before, after)
assert all(v == 0 for v in before.values()), before
assert all(v > 0 for v in after.values()), after
"""


@pytest.mark.parametrize(
    ("codec", "kernels"),
    [
        ("fixedpoint", ["block_exponents", "quantize", "dequantize"]),
        ("sketch", ["nonzero_bitmap", "encode_sketch", "peel"]),
        ("inceptionn", ["inceptionn_tags", "inceptionn_decode"]),
    ],
)
def test_warm_up_loads_the_codec_kernels(codec: str, kernels: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE % (kernels, codec)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_warm_up_of_a_plain_codec_does_nothing() -> None:
    from inaemu.common.jit import warm_up
    from inaemu.hostlib.codecs import loader
    from inaemu.hostlib.collective.executor import make_schedule_codec

    warm_up(loader(make_schedule_codec("plain")))  # no kernels, no error


def test_each_loader_runs_once_per_process() -> None:
    """`common.jit.warm_up` is the one warm-up: a loader runs once however often a process
    asks for it (again, or while it runs: an engine made by the fast data plane's loader asks
    for that loader too), and every codec of one kind and dtype has one loader."""
    import numpy as np

    from inaemu.common import jit
    from inaemu.hostlib.codecs import FixedPointCodec, SketchCodec, loader

    runs: list[int] = []

    def load() -> None:
        runs.append(1)
        jit.warm_up(load)  # asked for while it runs: done already, no recursion

    first = jit.warm_up(load)
    assert jit.warm_up(load) == first and runs == [1]
    assert first.source in ("cache", "compiled") and first.seconds >= 0
    fixed = loader(FixedPointCodec(), np.float32)
    assert loader(FixedPointCodec(block_size=64), np.float32) is fixed
    assert loader(FixedPointCodec(), np.float64) is not fixed
    assert loader(SketchCodec(), np.float32) is not fixed
