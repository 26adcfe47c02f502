"""The PyTorch DDP hook: 2 workers train through the softswitch and match plain gloo DDP."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch not installed (pip install torch==2.13.0)")

from tests.helpers import install_star, running_switch, workers  # noqa: E402

WORLD = 2
STEPS = 4


def _model() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.EmbeddingBag(200, 16, mode="sum"),  # sparse-ish gradients: few rows touched
        torch.nn.Linear(16, 8),
        torch.nn.ReLU(),
        torch.nn.Linear(8, 1),
    )


def _integer_model() -> Any:
    """Integer weights and inputs and a sum loss: every gradient is a small integer, which
    fixed point represents exactly (a 'fixed-point input'), and SGD with lr 1/2 keeps the
    parameters dyadic: plain float all-reduce is exact too, so the two must agree bit for bit."""
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 4)
    with torch.no_grad():
        model.weight.copy_(torch.randint(-3, 4, model.weight.shape).float())
        model.bias.copy_(torch.randint(-3, 4, model.bias.shape).float())
    return model


def _train(rank: int, wire_dir: str, rendezvous: str, codec: str, q: Any) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from inaemu.hostlib.client import InaClient
    from inaemu.hostlib.codecs import make_codec
    from inaemu.hostlib.ddp import InaHookState, ina_allreduce_hook
    from inaemu.hostlib.transport import LoopbackWireTransport

    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=WORLD)
    try:
        client = InaClient(
            LoopbackWireTransport(rank + 1, wire_dir),
            job_id=1,
            window=16,
            n_workers=WORLD,
            give_up_after=60,
        )
        exact = codec.endswith("-exact")
        codec = codec.removesuffix("-exact")
        make = _integer_model if exact else _model
        ina = DDP(make())
        state = InaHookState(client, make_codec(codec))
        ina.register_comm_hook(state, ina_allreduce_hook)
        gloo = DDP(make())
        for ddp in (ina, gloo):
            opt = torch.optim.SGD(ddp.parameters(), lr=0.5 if exact else 0.1)
            data = torch.Generator().manual_seed(100 + rank)
            for _ in range(STEPS):
                opt.zero_grad()
                if exact:
                    x = torch.randint(-2, 3, (8, 64), generator=data).float()
                    x[:, rank::2] = 0  # sparse, and different on each rank
                    loss = ddp(x).sum()
                else:
                    idx = torch.randint(0, 200, (32, 4), generator=data)
                    target = torch.randn(32, 1, generator=data)
                    loss = torch.nn.functional.mse_loss(ddp(idx), target)
                loss.backward()
                opt.step()
        q.put(
            (
                rank,
                [p.detach().numpy().copy() for p in ina.parameters()],
                [p.detach().numpy().copy() for p in gloo.parameters()],
                state.buckets,
            )
        )
        q.close()
        q.join_thread()  # the result is out before any teardown can go wrong
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # gloo's threads sometimes abort the interpreter's own teardown ("terminate called
    # without an active exception"); everything is flushed, so leave without it
    os._exit(0)


def _collect(q: Any, procs: list[Any], timeout: float) -> list[Any]:
    """Results from every process; fails as soon as one dies instead of waiting out `timeout`."""
    import queue
    import time

    outs: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(outs) < len(procs):
        try:
            outs.append(q.get(timeout=0.5))
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                for p in procs:
                    p.kill()
                raise AssertionError(f"worker failed (exit codes {dead}) or timed out") from None
    for p in procs:
        p.join(30)
    return outs


@pytest.mark.parametrize("codec", ["fixedpoint", "sketch", "sketch-exact"])
def test_ddp_hook_matches_gloo(codec: str, tmp_path: Path) -> None:
    ws = workers(WORLD)
    ctx = mp.get_context("spawn")
    with running_switch([w.port for w in ws]) as (sw, wire_dir):
        install_star(sw, 1, ws, pool=16)
        q = ctx.Queue()
        rdv = str(tmp_path / "gloo-rendezvous")  # a file: no port to race for
        procs = [
            ctx.Process(target=_train, args=(r, wire_dir, rdv, codec, q)) for r in range(WORLD)
        ]
        for p in procs:
            p.start()
        outs = _collect(q, procs, timeout=180)
    assert all(p.exitcode == 0 for p in procs)
    by_rank = {r: (ina, gloo, buckets) for r, ina, gloo, buckets in outs}
    ina0, gloo0, buckets = by_rank[0]
    assert buckets >= STEPS
    for a, b in zip(by_rank[1][0], ina0, strict=True):
        assert np.array_equal(a, b), "both ranks hold identical parameters"
    if codec.endswith("-exact"):
        # the lossless path on fixed-point inputs: bit for bit what gloo computes
        for a, b in zip(ina0, gloo0, strict=True):
            assert np.array_equal(a, b)
        return
    # fixed point quantizes each gradient with a relative error about 2^-29 of its block's
    # largest value; after a few SGD steps the parameters agree with gloo's to that order
    for a, b in zip(ina0, gloo0, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


class _Bucket:
    """What the hook reads of a `dist.GradBucket`: its flat buffer."""

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor

    def buffer(self) -> Any:
        return self.tensor


class _GivenSums:
    """An `AllreduceClient` whose sum is given: the hook's own work, with no network."""

    def __init__(self, total: np.ndarray[Any, Any], world: int) -> None:
        self.total = total
        self.n_workers = world

    def start_run(self, run: int) -> None:
        pass

    def allreduce(self, x: np.ndarray[Any, Any], codec: Any = None) -> np.ndarray[Any, Any]:
        assert x.shape == self.total.shape
        return self.total


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("world", [1, 2, 3, 7])
def test_hook_writes_the_average_into_the_bucket_without_a_copy(dtype: str, world: int) -> None:
    """The averaged sum lands in the bucket's own memory, bit for bit what dividing into a new
    array and copying it back gave, with no bucket-sized array made on the way (numpy's
    allocations are traced)."""
    import tracemalloc

    from inaemu.hostlib.ddp import InaHookState, ina_allreduce_hook

    rng = np.random.default_rng(world)
    n = 1 << 20
    grad = torch.from_numpy(rng.standard_normal(n).astype(dtype))
    total = (rng.standard_normal(n) * world * 1e3).astype(dtype)
    expected = (np.asarray(total, dtype=dtype) / world).tobytes()  # what the hook gave before
    state = InaHookState(_GivenSums(total, world), run=1)
    memory = grad.data_ptr()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        out = ina_allreduce_hook(state, _Bucket(grad)).value()
        made = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert out is grad and grad.data_ptr() == memory
    assert grad.numpy().tobytes() == expected
    assert made < n // 8, f"{made} bytes allocated for a bucket of {grad.nbytes}"
    assert state.buckets == 1 and state.elements == n
