"""Codec throughput and wire cost: `python bench/bench_codecs.py [--n N] [--reps R]`.

Throughput: one worker's encode and decode of an N-element float32 array (default 16M), in
GB/s of float32 input per core (numpy is single-threaded here), next to a plain memcpy
(np.copyto) of the same array in the same run. A homomorphic codec is driven as worker 0 of
8 whose peers contribute zeros (so the aggregate of each phase is worker 0's own
contribution and no switch work is timed): "encode" is all codec time up to and including
the last SUM phase's values (bitmap, union, exponents, quantization, sketch), "decode" is
the codec time after the last aggregate arrives (peeling, dequantization, scatter).
INCEPTIONN: compress() and decompress(). Best of R runs.

Wire cost: bytes one worker sends per input element, payload only (4 per int32 lane, all
phases) and with frames (FRAME_BYTES per K lanes). INCEPTIONN: compressed bytes / element.

Data (fixed seeds): gradient-like N(0, sigma^2) float32, sigma = 1e-2 unless stated, with a
uniformly random support of the given density.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from inaemu.hostlib import args as arg
from inaemu.hostlib.codecs import (
    FixedPointCodec,
    HomomorphicCodec,
    Int32Codec,
    Phase,
    SketchCodec,
    bytes_on_wire,
    inceptionn,
    simulate_allreduce,
)
from inaemu.hostlib.wire import Opcode

N_WORKERS = 8
SEED = 20240211
T = TypeVar("T")


def gradient(
    n: int, density: float, sigma: float = 1e-2, seed: int = SEED
) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * sigma).astype(np.float32)
    if density < 1.0:
        x[rng.random(n) >= density] = 0
    return x


def best_of(reps: int, fn: Callable[[], T]) -> tuple[float, T]:
    """The shortest time of `reps` (at least one) calls of fn, and the last call's result."""
    t = time.perf_counter()
    out = fn()
    best = time.perf_counter() - t
    for _ in range(reps - 1):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def drive_timed(
    codec: HomomorphicCodec, x: npt.NDArray[Any]
) -> tuple[float, float, list[Phase], npt.NDArray[Any]]:
    """(encode seconds, decode seconds, phases, result) for worker 0 of N_WORKERS."""
    phases: list[Phase] = []
    t = time.perf_counter()
    gen = codec.phases(x, N_WORKERS)
    try:
        phase = next(gen)
        spans = [time.perf_counter() - t]
        while True:
            phases.append(phase)
            # peers contribute zeros (all-zero blocks for MAX): the aggregate is our own phase
            agg = phase.values.copy()
            t = time.perf_counter()
            phase = gen.send(agg)
            spans.append(time.perf_counter() - t)
    except StopIteration as stop:
        spans.append(time.perf_counter() - t)
        result: npt.NDArray[Any] = stop.value
    # the last span is the one that ended the generator: decode
    return sum(spans[:-1]), spans[-1], phases, result


def throughput(n: int, reps: int) -> None:
    print(f"== throughput: {n / 2**20:.0f}M float32 ({4 * n / 1e6:.0f} MB), GB/s per core ==")
    x = gradient(n, 1.0)
    dst = np.empty_like(x)
    t_copy, _ = best_of(reps, lambda: np.copyto(dst, x))
    copy_gbs = x.nbytes / t_copy / 1e9
    print(f"{'memcpy (np.copyto)':34s} {copy_gbs:7.2f}")
    print(f"{'codec':34s} {'encode':>7s} {'decode':>7s}  {'memcpy/enc':>10s} {'memcpy/dec':>10s}")

    def row(name: str, enc_s: float, dec_s: float) -> None:
        enc, dec = x.nbytes / enc_s / 1e9, x.nbytes / dec_s / 1e9
        print(f"{name:34s} {enc:7.2f} {dec:7.2f}  {copy_gbs / enc:9.1f}x {copy_gbs / dec:9.1f}x")

    xi = (x * 2**20).astype(np.int32)
    enc_s, dec_s, _, _ = drive_timed(Int32Codec(), xi)
    print(f"{'int32 (int32 input)':34s} no work: the input is the phase ({enc_s * 1e6:.0f} us, "
          f"{dec_s * 1e6:.0f} us)")  # fmt: skip
    cases: list[tuple[str, HomomorphicCodec, npt.NDArray[Any]]] = [
        ("fixedpoint", FixedPointCodec(), x),
    ]
    for density in (0.01, 0.10, 1.0):
        xs = gradient(n, density)
        cases.append((f"sketch, density {density:.0%}", SketchCodec(), xs))
        if density < 1.0:
            cases.append(
                (f"sketch compact, density {density:.0%}", SketchCodec(payload="compact"), xs)
            )
    for name, codec, data in cases:
        enc = dec = float("inf")
        for _ in range(reps):
            e, d, _, _ = drive_timed(codec, data)
            enc, dec = min(enc, e), min(dec, d)
        row(name, enc, dec)
    for sigma in (1e-3, 1e-2, 1e-1):
        xg = gradient(n, 1.0, sigma)
        t_c, buf = best_of(reps, partial(inceptionn.compress, xg))
        t_d, _ = best_of(reps, partial(inceptionn.decompress, buf))
        row(f"inceptionn, sigma {sigma:g}", t_c, t_d)


def wire_cost(n: int) -> None:
    print(f"\n== bytes on the wire per element, one worker, n = {n / 2**20:.0f}M ==")
    print(f"{'codec':34s} {'1%':>12s} {'10%':>12s} {'100%':>12s}   (payload / framed)")
    codecs: list[tuple[str, HomomorphicCodec]] = [
        ("fixedpoint", FixedPointCodec()),
        ("sketch", SketchCodec()),
        ("sketch compact", SketchCodec(payload="compact")),
    ]
    data = {d: gradient(n, d) for d in (0.01, 0.10, 1.0)}
    for name, codec in codecs:
        cells = []
        for d, x in data.items():
            _, _, phases, _ = drive_timed(codec, x)
            cells.append(
                f"{bytes_on_wire(phases) / n:5.3f}/{bytes_on_wire(phases, framed=True) / n:5.3f}"
            )
            if name == "sketch" and d < 1.0:
                assert phases[-1].label.startswith("sketch.cells")
        print(f"{name:34s} " + " ".join(f"{c:>12s}" for c in cells))
    for sigma in (1e-3, 1e-2, 1e-1):
        sizes = [len(inceptionn.compress(gradient(n, d, sigma))) / n for d in (0.01, 0.10, 1.0)]
        print(f"{f'inceptionn, sigma {sigma:g}':34s} " + " ".join(f"{s:12.3f}" for s in sizes))
    print(f"{'float32 (uncompressed)':34s} " + " ".join(f"{4.0:12.3f}" for _ in range(3)))


def union_growth(n: int) -> None:
    print(f"\n== sketch with {N_WORKERS} workers, independent supports, n = {n / 2**20:.0f}M ==")
    print(f"{'density per worker':>18s} {'union':>7s} {'bytes/elem':>10s} {'SUM phases':>10s}")
    for d in (0.001, 0.01, 0.05):
        xs = [gradient(n, d, seed=SEED + w) for w in range(N_WORKERS)]
        _, phases = simulate_allreduce(SketchCodec(), xs)
        union = np.count_nonzero(np.any([x != 0 for x in xs], axis=0)) / n
        sums = sum(p.opcode == Opcode.SUM for p in phases)
        print(f"{d:18.1%} {union:7.2%} {bytes_on_wire(phases) / n:10.3f} {sums:10d}")


def main() -> None:
    parser = arg.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=arg.ELEMENTS, default=1 << 24, help="elements (default 16M)")
    parser.add_argument("--reps", type=arg.REPEAT, default=3, help="best of this many runs")
    args = parser.parse_args()
    print(f"numpy {np.__version__}, seed {SEED}, workers {N_WORKERS}")
    throughput(args.n, args.reps)
    wire_cost(args.n)
    union_growth(min(args.n, 1 << 20))


if __name__ == "__main__":
    main()
