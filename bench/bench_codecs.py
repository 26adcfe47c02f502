"""Codec throughput and wire cost: `python bench/bench_codecs.py [--n N] [--reps R]`.

Throughput: one worker's encode and decode of an N-element float32 array (default 16M), in
GB/s of float32 input per core, for both implementations side by side: the numpy reference
(`compiled=False`, what the codecs ran before) and the compiled kernels (`compiled=True`, the
default, single-threaded), each next to a plain memcpy (np.copyto into an array already
touched) of the same array measured in the same rounds, as a fraction of it. Time is the
thread's CPU time (page faults included), so that other processes on a shared machine do not
count; every round measures memcpy and then each case once, each number is the best of R
rounds. A homomorphic codec is driven as worker 0 of 8 whose peers contribute zeros (so the
aggregate of each phase is worker 0's own contribution and no switch work is timed):
"encode" is all codec time up to and including the last SUM phase's values (bitmap, union,
exponents, quantization, sketch), "decode" is the codec time after the last aggregate
arrives (peeling, dequantization, scatter). INCEPTIONN: compress() and decompress().

What bounds it: memcpy reads the array and writes it once. Fixed-point encode reads it twice
(block exponents, then the values, after the exponents' MAX phase) and writes the int32
phase once, so it cannot reach memcpy; decode reads the sum and writes a fresh result array
(first-touch page faults included). The sketch at 1% reads the array once (bitmap and
non-zeros in one pass); its decode is peeling (random access) plus a fresh result array.

Wire cost: bytes one worker sends per input element, payload only (4 per int32 lane, all
phases) and with frames (FRAME_BYTES per K lanes). INCEPTIONN: compressed bytes / element.

Data (fixed seeds): gradient-like N(0, sigma^2) float32, sigma = 1e-2 unless stated, with a
uniformly random support of the given density.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from inaemu.common import args as arg
from inaemu.common.wire import Opcode
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

N_WORKERS = 8
SEED = 20240211
clock = time.thread_time  # CPU time of this thread: other processes' load does not count
IMPLS = {"numpy": False, "numba": True}  # before and after: label -> compiled


def gradient(
    n: int, density: float, sigma: float = 1e-2, seed: int = SEED
) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * sigma).astype(np.float32)
    if density < 1.0:
        x[rng.random(n) >= density] = 0
    return x


def drive_timed(
    codec: HomomorphicCodec, x: npt.NDArray[Any]
) -> tuple[float, float, list[Phase], npt.NDArray[Any]]:
    """(encode seconds, decode seconds, phases, result) for worker 0 of N_WORKERS."""
    phases: list[Phase] = []
    t = clock()
    gen = codec.phases(x, N_WORKERS)
    try:
        phase = next(gen)
        spans = [clock() - t]
        while True:
            phases.append(phase)
            # peers contribute zeros (all-zero blocks for MAX): the aggregate is our own phase
            agg = phase.values.copy()
            t = clock()
            phase = gen.send(agg)
            spans.append(clock() - t)
    except StopIteration as stop:
        spans.append(clock() - t)
        result: npt.NDArray[Any] = stop.value
    # the last span is the one that ended the generator: decode
    return sum(spans[:-1]), spans[-1], phases, result


# One case: compiled -> a function timing one encode and decode, (encode s, decode s)
Case = Callable[[bool], Callable[[], tuple[float, float]]]


def codec_case(make: Callable[[bool], HomomorphicCodec], x: npt.NDArray[Any]) -> Case:
    def bind(compiled: bool) -> Callable[[], tuple[float, float]]:
        codec = make(compiled)  # one object for all rounds: its phase buffers are reused
        return lambda: drive_timed(codec, x)[:2]

    return bind


def inceptionn_case(x: npt.NDArray[np.float32]) -> Case:
    def bind(compiled: bool) -> Callable[[], tuple[float, float]]:
        def run() -> tuple[float, float]:
            t = clock()
            buf = inceptionn.compress(x, compiled=compiled)
            t_c = clock() - t
            t = clock()
            inceptionn.decompress(buf, compiled=compiled)
            return t_c, clock() - t

        return run

    return bind


def throughput(n: int, reps: int) -> None:
    print(
        f"== throughput: {n / 2**20:.0f}M float32 ({4 * n / 1e6:.0f} MB), one core, "
        f"GB/s of CPU time (x memcpy), best of {reps} interleaved rounds =="
    )
    x = gradient(n, 1.0)
    xi = (x * 2**20).astype(np.int32)
    enc_s, dec_s, _, _ = drive_timed(Int32Codec(), xi)
    cases: list[tuple[str, Case]] = [
        ("fixedpoint", codec_case(lambda compiled: FixedPointCodec(compiled=compiled), x))
    ]
    for density in (0.01, 0.10, 1.0):
        xs = gradient(n, density)
        cases.append(
            (f"sketch, density {density:.0%}", codec_case(lambda c: SketchCodec(compiled=c), xs))
        )
        if density < 1.0:
            compact = codec_case(lambda c: SketchCodec(payload="compact", compiled=c), xs)
            cases.append((f"sketch compact, density {density:.0%}", compact))
    for sigma in (1e-3, 1e-2, 1e-1):
        cases.append((f"inceptionn, sigma {sigma:g}", inceptionn_case(gradient(n, 1.0, sigma))))
    runs = {(name, impl): case(IMPLS[impl]) for name, case in cases for impl in IMPLS}
    t = time.perf_counter()
    for (_, impl), run in runs.items():
        if IMPLS[impl]:
            run()  # compiles the kernels, or loads them from numba's cache
    first = time.perf_counter() - t
    dst = np.empty_like(x)
    copy = float("inf")
    best = {key: (float("inf"), float("inf")) for key in runs}
    for _ in range(reps):
        t = clock()
        np.copyto(dst, x)
        copy = min(copy, clock() - t)
        for key, run in runs.items():
            enc, dec = run()
            best[key] = (min(best[key][0], enc), min(best[key][1], dec))
    gbs = x.nbytes / 1e9
    print(f"{'memcpy (np.copyto)':36s} {gbs / copy:6.2f}")
    print(f"{'int32 (int32 input)':36s} no work: the input is the phase ({enc_s * 1e6:.0f} us, "
          f"{dec_s * 1e6:.0f} us)")  # fmt: skip
    head = "".join(f"{f'{what} {impl}':>15s}" for what in ("encode", "decode") for impl in IMPLS)
    print(f"{'codec':36s}{head}")
    for name, _ in cases:
        cells = ""
        for k in (0, 1):
            for impl in IMPLS:
                sec = best[(name, impl)][k]
                cells += f"{gbs / sec:8.2f} ({copy / sec:4.2f})"
        print(f"{name:36s}{cells}")
    print(
        f"(numba {numba.__version__}: first calls, compiling or loading the kernels: {first:.1f} s)"
    )


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
    print(f"numpy {np.__version__}, numba {numba.__version__}, seed {SEED}, workers {N_WORKERS}")
    throughput(args.n, args.reps)
    wire_cost(args.n)
    union_growth(min(args.n, 1 << 20))


if __name__ == "__main__":
    main()
