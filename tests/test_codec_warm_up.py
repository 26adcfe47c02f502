"""codecs.warm_up: a worker loads its codec's compiled kernels before the measured allreduce
(a fresh process's first call of a numba kernel loads or compiles it: 0.2 s and more)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import numpy as np
from inaemu.hostlib.codecs import _kernels, make_codec, warm_up
from inaemu.hostlib.collective.executor import make_schedule_codec
kernels = {k: getattr(_kernels, k) for k in %r}
before = {k: len(f.signatures) for k, f in kernels.items()}
warm_up(make_schedule_codec(%r), np.float32)
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
    from inaemu.hostlib.codecs import warm_up
    from inaemu.hostlib.collective.executor import make_schedule_codec

    warm_up(make_schedule_codec("plain"))  # no kernels, no error
