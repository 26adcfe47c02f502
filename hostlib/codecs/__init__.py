"""Gradient codecs for in-network aggregation (see docs/codecs.md).

Homomorphic codecs (`CODECS`, used by the INA client): the switch combines their int32
encodings with a plain SUM / OR / MAX.

    "int32"       Int32Codec       one exact SUM of int32 values
    "fixedpoint"  FixedPointCodec  MAX block exponents, SUM block fixed point
    "sketch"      SketchCodec      OR bitmaps, MAX exponents, SUM count sketch (exact peeling)
    "sketch-compact" SketchCodec(payload="compact"): OR bitmaps, then SUM only the union's
                  values; cheaper than the sketch once the union is known (docs/codecs.md)

INCEPTIONN (`inceptionn.compress` / `decompress` / `ring_allreduce`) is lossy and not
homomorphic: hosts aggregate it, decompressing, adding and recompressing at every hop of a
schedule (`inaemu.hostlib.collective.executor.InceptionnCodec`); it is exported separately.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import numpy.typing as npt

from inaemu.common.wire import K
from inaemu.hostlib.codecs import inceptionn
from inaemu.hostlib.codecs.base import (
    HomomorphicCodec,
    Phase,
    PhaseGenerator,
    SumOverflow,
    aggregate_reference,
    bytes_on_wire,
    frames_on_wire,
    run_phases,
    simulate_allreduce,
    words_on_wire,
)
from inaemu.hostlib.codecs.fixedpoint import (
    FixedPointCodec,
    error_bound,
    quantize,
    worst_case_error,
)
from inaemu.hostlib.codecs.inceptionn import compress as inceptionn_compress
from inaemu.hostlib.codecs.inceptionn import decompress as inceptionn_decompress
from inaemu.hostlib.codecs.passthrough import Int32Codec
from inaemu.hostlib.codecs.sketch import PeelingFailed, SketchCodec, SketchCorrupt

CODECS: dict[str, Callable[..., HomomorphicCodec]] = {
    "int32": Int32Codec,
    "fixedpoint": FixedPointCodec,
    "sketch": SketchCodec,
    "sketch-compact": partial(SketchCodec, payload="compact"),
}


def loader(codec: object, dtype: npt.DTypeLike = np.float32) -> Callable[[], None]:
    """What loads `codec`'s compiled kernels for inputs of `dtype`, for `common.jit.warm_up`
    (numba: loaded from the cache or compiled on a process's first call, 0.2 s and more), so
    that they are ready before a measured allreduce starts: one loader for every codec of one
    kind and dtype, so that the warm-up runs once per process."""
    key = (type(codec), getattr(codec, "name", ""), np.dtype(dtype).str)
    return _LOADERS.setdefault(key, partial(_run_once, codec, np.dtype(dtype)))


_LOADERS: dict[tuple[type, str, str], Callable[[], None]] = {}


def _run_once(codec: object, dtype: np.dtype[np.generic]) -> None:
    """Run `codec` once on a small array of `dtype` with no network. A homomorphic codec runs
    against the reference switch; INCEPTIONN (a codec object named "inceptionn") compresses
    and decompresses; anything else (plain sums) has nothing to warm."""
    rng = np.random.default_rng(0)
    sample = np.zeros(64 * K, dtype)  # sparse, as gradients a sketch is for: its sketch path
    sample[rng.choice(sample.size, sample.size // 50, replace=False)] = rng.standard_normal(
        sample.size // 50
    )
    name = getattr(codec, "name", "")
    if name == "inceptionn":
        inceptionn_decompress(inceptionn_compress(sample.astype(np.float32)))
    elif hasattr(codec, "phases"):
        simulate_allreduce(codec, [sample, sample])  # type: ignore[arg-type]


def make_codec(name: str, **options: object) -> HomomorphicCodec:
    """CODECS[name](**options), with a clear error for unknown names."""
    try:
        factory = CODECS[name]
    except KeyError:
        raise ValueError(f"unknown codec {name!r}; known: {', '.join(sorted(CODECS))}") from None
    return factory(**options)


__all__ = [
    "CODECS",
    "FixedPointCodec",
    "HomomorphicCodec",
    "Int32Codec",
    "PeelingFailed",
    "Phase",
    "PhaseGenerator",
    "SketchCodec",
    "SketchCorrupt",
    "SumOverflow",
    "aggregate_reference",
    "bytes_on_wire",
    "error_bound",
    "frames_on_wire",
    "inceptionn",
    "inceptionn_compress",
    "inceptionn_decompress",
    "loader",
    "make_codec",
    "quantize",
    "run_phases",
    "simulate_allreduce",
    "words_on_wire",
    "worst_case_error",
]
