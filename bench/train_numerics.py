"""Why the backends' training losses differ: examples/train_ddp.py replayed in one process.

    python bench/train_numerics.py [--seeds 0-9] [--workers 4] [--steps 100]
    python bench/train_numerics.py --check build/train/RUN     # against a launcher's run

The replay computes every rank's gradients in turn with the example's task, model, batches
and optimizer, sums them as a backend sums them and applies the averaged sum, as DDP does:

- `gloo`: float32, in the order of gloo's ring allreduce (torch 2.13's gloo, measured: the
  buffer cut into `workers` segments of ceil(n / workers) elements, segment k summed as
  x[k-1] + x[k-2] + ... + x[k], ranks mod `workers`; with 2 workers any order is the same);
- `ranks`: float32 in rank order, as another float32 allreduce might;
- `exact`: in float64, rounded once to float32;
- `fixedpoint`, `sketch`: the INA codec against the reference switch (`simulate_allreduce`:
  the integers the switch sums, decoded as the client decodes them).

With the bucket laid out as DDP lays it out (the parameters in registration order in the
first iteration, then in the order their gradients become ready, here the reverse), the
replay gives the launcher's losses bit for bit, for every backend above (`--check`;
`tests/test_train.py` checks it), so its numbers are the training's.

What it prints, per seed and backend, against gloo: the largest |loss - gloo's loss| over
the iterations and where; where the two runs part (|gap| above the first-order bound, below)
and the first iteration at which a ReLU unit of the example's MLP is on for a sample in one
run and off in the other (a unit at its kink: the one thing a difference of an ulp in the
weights can turn into a finite difference in the gradient). And per backend the summed
gradient's largest error against the exact sum, with its bound (fixed point's `error_bound`,
float32's gamma_{n-1} * sum |x| of n terms).

The first-order bound on |loss_b - loss_gloo| at iteration t (`Step.gap_bound`): every
iteration's summed gradients differ by at most e = (b's error bound) + (a float32 sum's bound),
per element; through SGD with momentum (and the float32 rounding of the update, 2u per
operation) that bounds the weights' difference d_t; then |gap_t| <= sum_i mean_r
|dL_r/dw_i| * d_t,i + both runs' float32 rounding of the loss itself (measured: the loss in
float64 at the same weights). It leaves out curvature (the gradient's own change with the
weights), which holds while no ReLU sits at its kink: where one does, the runs part.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np
import numpy.typing as npt
import torch

from inaemu.hostlib.codecs import make_codec
from inaemu.hostlib.codecs.base import simulate_allreduce
from inaemu.hostlib.codecs.fixedpoint import block_exponents, error_bound

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "train_ddp.py"
U = 2.0**-24  # float32's unit roundoff
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
SUMS = ("gloo", "ranks", "exact", "fixedpoint", "sketch")
BACKENDS = {"gloo": "gloo", "fixedpoint": "ina-fixedpoint", "sketch": "ina-sketch"}


def load_example(path: Path = EXAMPLE) -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_ddp", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gamma(k: int) -> float:
    """Higham's gamma_k: float32 summation of k + 1 terms errs by <= gamma_k * sum |x|."""
    return k * U / (1 - k * U)


# ---------------------------------------------------------------------- the sums


def gloo_ring_sum(xs: Sequence[F32]) -> F32:
    """gloo's ring allreduce's float32 sum (module doc; measured for 2 and 4 workers)."""
    w = len(xs)
    if w not in (2, 4):
        raise ValueError(f"gloo's summation order is replicated for 2 and 4 workers, not {w}")
    n = xs[0].size
    seg = -(-n // w)
    out = np.empty(n, np.float32)
    for k in range(w):
        lo, hi = k * seg, min(n, (k + 1) * seg)
        acc = xs[(k + w - 1) % w][lo:hi].copy()
        for j in range(w - 2, -1, -1):
            acc += xs[(k + j) % w][lo:hi]
        out[lo:hi] = acc
    return out


def rank_order_sum(xs: Sequence[F32]) -> F32:
    acc = xs[0].copy()
    for x in xs[1:]:
        acc += x
    return acc


def exact_sum(xs: Sequence[F32]) -> F32:
    total: F32 = np.sum(np.stack(xs).astype(np.float64), axis=0).astype(np.float32)
    return total


def codec_sum(name: str) -> Callable[[Sequence[F32]], F32]:
    codec = make_codec(name)

    def reduce(xs: Sequence[F32]) -> F32:
        outs, _ = simulate_allreduce(codec, list(xs))
        if any(not np.array_equal(o, outs[0]) for o in outs[1:]):
            raise AssertionError(f"{name}: the workers decoded different sums")
        return np.asarray(outs[0], dtype=np.float32)

    return reduce


def summation(name: str) -> Callable[[Sequence[F32]], F32]:
    if name == "gloo":
        return gloo_ring_sum
    if name == "ranks":
        return rank_order_sum
    if name == "exact":
        return exact_sum
    if name in ("fixedpoint", "sketch"):
        return codec_sum(name)
    raise ValueError(f"unknown summation {name!r}; use {', '.join(SUMS)}")


def sum_error_bound(name: str, xs: Sequence[F32], total: F32) -> tuple[F64, F64] | None:
    """Per element, a bound on |total - the exact sum| for summation `name`, and the part of
    it that is not the final rounding to float32 (None: no bound here; the sketch's depends
    on its table's load)."""
    half_ulp = np.spacing(np.abs(total)).astype(np.float64) / 2
    if name in ("gloo", "ranks"):
        own = gamma(len(xs) - 1) * np.sum(np.abs(np.stack(xs)).astype(np.float64), axis=0)
        return own, own
    if name == "exact":
        return half_ulp, np.zeros_like(half_ulp)
    if name == "fixedpoint":
        exps = np.max([block_exponents(x) for x in xs], axis=0)
        own = error_bound(exps, len(xs), total.size)
        return own + half_ulp, own
    return None


# ---------------------------------------------------------------------- the replay


@dataclass
class Step:
    """One iteration of a replayed training."""

    loss: float  # the mean of the ranks' float32 losses, as the launcher averages them
    loss_rounding: float  # mean over the ranks of |float32 loss - the loss in float64|
    sum_error: float  # max |summed gradient - the exact sum|
    sum_ratio: float  # max of that error / its bound, per element (nan: no bound)
    sum_bound: float  # max of the bound's part before the final rounding to float32
    gap_bound: float  # first-order bound on |loss - versus's loss| without the roundings
    # (inf: no bound, the summation has none here)
    active: list[npt.NDArray[np.bool_]] = field(repr=False)  # per rank: ReLU on, per sample


def replay(
    example: ModuleType,
    name: str,
    *,
    workers: int = 4,
    steps: int | None = None,
    seed: int | None = None,
    versus: str = "gloo",
    reduce: Callable[[Sequence[F32]], F32] | None = None,
) -> list[Step]:
    """The example's training with summation `name` (module doc). `versus`: the float32
    summation whose difference from `name`'s the first-order bound covers. `reduce`: sum with
    this instead, held to `name`'s bound (a test's broken codec)."""
    steps = example.STEPS if steps is None else steps
    seed = example.SEED if seed is None else seed
    lr, momentum, batch = example.LR, example.MOMENTUM, example.BATCH
    torch.set_num_threads(1)
    reduce = reduce or summation(name)
    task = example.Task(seed)
    drawn = [example.batches(seed, r) for r in range(workers)]
    model = example.model(seed)
    params = list(model.parameters())
    sizes = [p.numel() for p in params]
    starts = np.cumsum([0, *sizes])
    opt = example.optimizer(params, lr)
    d_buf = np.zeros(int(starts[-1]))  # bounds on the momentum buffer's and the weights'
    d_w = np.zeros(int(starts[-1]))  # difference from versus's run (parameter order)
    out: list[Step] = []
    for it in range(steps):
        # DDP's bucket: registration order in the first iteration, then the order in which the
        # gradients became ready (the reverse, for this sequential model)
        bucket = list(range(len(params))) if it == 0 else list(range(len(params)))[::-1]
        where = np.concatenate([np.arange(starts[k], starts[k + 1]) for k in bucket])
        wide = copy.deepcopy(model).double()
        grads, losses, roundings, active = [], [], [], []
        sensitivity = np.zeros(int(starts[-1]))
        for r in range(workers):
            x, y = task.batch(batch, drawn[r])
            with torch.no_grad():
                active.append((model[1](model[0](x)) > 0).numpy())
            model.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()  # type: ignore[no-untyped-call]
            grads.append(torch.cat([params[k].grad.reshape(-1) for k in bucket]).numpy().copy())
            wide.zero_grad()
            exact = torch.nn.functional.cross_entropy(wide(x), y)
            exact.backward()  # type: ignore[no-untyped-call]
            sensitivity += torch.cat([p.grad.reshape(-1) for p in wide.parameters()]).abs().numpy()
            losses.append(loss.item())
            roundings.append(abs(loss.item() - exact.item()))
        sensitivity /= workers
        gap_bound = float(sensitivity @ d_w) if np.isfinite(d_w).all() else math.inf
        total = reduce(grads)
        own = sum_error_bound(name, grads, total)
        other = sum_error_bound(versus, grads, total)
        error = np.abs(total.astype(np.float64) - np.sum(np.stack(grads).astype(np.float64), 0))
        ratio = math.nan
        if own is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = float(np.where(error == 0, 0.0, error / own[0]).max())
        out.append(
            Step(
                loss=statistics.fmean(losses),
                loss_rounding=statistics.fmean(roundings),
                sum_error=float(error.max()),
                sum_ratio=ratio,
                sum_bound=math.nan if own is None else float(own[1].max()),
                gap_bound=gap_bound,
                active=active,
            )
        )
        averaged = torch.from_numpy(total / np.float32(workers))
        for k, lo in zip(bucket, np.cumsum([0, *(sizes[k] for k in bucket)]), strict=False):
            params[k].grad = averaged[lo : lo + sizes[k]].reshape(params[k].shape).clone()
        before = opt.state[params[0]].get("momentum_buffer") is not None
        buf_before = _flat(opt, params) if before else np.zeros_like(d_buf)
        opt.step()
        # the bound's recurrence (module doc), per element in parameter order
        e = np.zeros_like(d_buf)
        if own is not None and other is not None:
            e[where] = own[0] + other[0]
        else:
            e[:] = math.inf
        buf = _flat(opt, params)
        weights = torch.cat([p.detach().reshape(-1) for p in params]).double().numpy()
        rounding = 2 * U * (momentum * np.abs(buf_before) + np.abs(buf))
        d_buf = momentum * d_buf + e / workers + 2 * U * np.abs(e / workers) + rounding
        d_w = d_w + lr * d_buf + 2 * U * (lr * np.abs(buf) + np.abs(weights))
    return out


def _flat(opt: torch.optim.Optimizer, params: Sequence[torch.nn.Parameter]) -> F64:
    return np.asarray(
        torch.cat([opt.state[p]["momentum_buffer"].reshape(-1) for p in params]).double().numpy()
    )


def first_flip(a: Sequence[Step], b: Sequence[Step]) -> int | None:
    """The first iteration at which some ReLU unit is on for a sample in one run and off in
    the other."""
    for t, (x, y) in enumerate(zip(a, b, strict=False)):
        if any(bool((p != q).any()) for p, q in zip(x.active, y.active, strict=True)):
            return t
    return None


def gaps(a: Sequence[Step], b: Sequence[Step]) -> list[float]:
    return [abs(x.loss - y.loss) for x, y in zip(a, b, strict=True)]


def gap_limits(a: Sequence[Step], b: Sequence[Step]) -> list[float]:
    """b's first-order bound against a, plus both runs' rounding of the loss."""
    return [y.gap_bound + x.loss_rounding + y.loss_rounding for x, y in zip(a, b, strict=True)]


def parted(a: Sequence[Step], b: Sequence[Step]) -> int | None:
    """The first iteration whose gap exceeds the first-order bound (None: never)."""
    return next(
        (t for t, (g, lim) in enumerate(zip(gaps(a, b), gap_limits(a, b), strict=True)) if g > lim),
        None,
    )


# ---------------------------------------------------------------------- the command


def seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def check(run_dir: Path, example: ModuleType) -> int:
    """The launcher's losses against the replay's, backend by backend."""
    summary = json.loads((run_dir / "train.json").read_text())
    workers = len(summary["workers"])
    args = summary.get("script_args", [])
    if args:
        print(f"{run_dir}: the script ran with {args}; the replay knows the defaults only")
        return 2
    bad = 0
    for name, backend in BACKENDS.items():
        run = summary["backends"].get(backend)
        if run is None or run.get("error"):
            continue
        got = run["loss"]
        want = [s.loss for s in replay(example, name, workers=workers, steps=len(got))]
        same = got == want
        bad += not same
        worst = max(abs(x - y) for x, y in zip(got, want, strict=True))
        print(
            f"  {backend:15} {len(got)} iterations: " + ("bit for bit" if same else f"{worst:.2e}")
        )
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-9", help="seeds of the example (0-9)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=None, help="iterations (the example's 100)")
    ap.add_argument("--check", type=Path, help="a launcher run's directory (train.json)")
    args = ap.parse_args()
    example = load_example()
    if args.check:
        return check(args.check, example)
    print(
        f"examples/train_ddp.py replayed: {args.workers} workers, "
        f"{args.steps or example.STEPS} iterations. error: max |summed gradient - exact sum| "
        "as a fraction of its bound (bound: its part before the rounding to float32); gap: "
        "max |loss - gloo's| (iteration); flip: a ReLU on in one run, off in the other; "
        "parted: the gap above the first-order bound"
    )
    head = ("seed", "sum", "error", "bound", "gap", "flip", "parted")
    print("  ".join(f"{h:>10}" for h in head))
    for seed in seeds(args.seeds):
        runs = {
            name: replay(example, name, workers=args.workers, steps=args.steps, seed=seed)
            for name in SUMS
        }
        for name in SUMS:
            run = runs[name]
            cells = [str(seed), name, f"{max(s.sum_ratio for s in run):.2f}"]
            cells.append(f"{max(s.sum_bound for s in run):.1e}")
            if name == "gloo":
                cells += ["-", "-", "-"]
            else:
                g = gaps(runs["gloo"], run)
                worst = max(range(len(g)), key=g.__getitem__)
                cells.append(f"{g[worst]:.2e} ({worst})")
                for at in (first_flip(runs["gloo"], run), parted(runs["gloo"], run)):
                    cells.append("-" if at is None else str(at))
            print("  ".join(f"{c:>10}" for c in cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
