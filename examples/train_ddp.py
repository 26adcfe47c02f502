"""Train a small model with PyTorch DDP whose gradients are all-reduced by the emulated network.

    inaemu train --backend all --workers 4 examples/train_ddp.py          # no root
    inaemu train --backend ina-fixedpoint --topo leaf-spine:2x2x2 examples/train_ddp.py
    inaemu train --mininet --backend all --workers 4 examples/train_ddp.py   # as root
    inaemu train --workers 2 examples/train_ddp.py --steps 300 --lr 0.2     # its own options
    INAEMU_CLUSTER=cluster/cluster.json ... torchrun --nnodes 2 --nproc-per-node 2 ... \
        train_ddp.py          # on each machine: the lines `inaemu cluster init` prints

The launcher's options come before the script, the script's after it (as with torchrun).
An installed inaemu ships this script: `inaemu train --example FILE` writes it out.

The launcher starts the switches, installs the job, takes a fresh run id and starts this
script once per worker with everything in its environment (on machines cabled to a switch,
torchrun starts it, and `inaemu cluster init` prints those lines); `from_environment()` turns that
into the gloo process group DDP needs and the backend's allreduce (in-network aggregation,
the ring with INCEPTIONN, or gloo), and `register` hooks it into DDP. Nothing else here knows
which backend runs.

The task is generated, so nothing is downloaded and every run sees the same data: a
bag-of-tokens classification. Each of 4 classes owns a quarter of a 2,000-token vocabulary;
a sample of class y draws each of its 8 tokens from y's quarter with probability 1/2, else
from the whole vocabulary. The model (an EmbeddingBag, as in recommendation and text models,
then a small MLP) has 32,676 parameters; a batch touches few rows of the embedding, so the
gradients are sparse, which the sketch codec compresses. Each rank draws its own batches
(seed, rank); rank 0 measures the accuracy on 2,000 held-out samples after every iteration.

Per iteration each rank records its training loss, the iteration's seconds (forward,
backward with the allreduce, optimizer step; not the evaluation) and the allreduce's part of
them; the launcher gathers every backend's records into one JSON and one plot.
`bench/train_numerics.py` replays this training in one process (the task, model, batches and
optimizer defined here) to explain where the backends' losses part.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from inaemu.hostlib.ddp import from_environment
from inaemu.hostlib.launch import LaunchError

VOCAB, TOKENS, CLASSES, DIM, HIDDEN = 2000, 8, 4, 16, 32
ON_TOPIC = 0.5  # the probability that a token comes from its class's quarter
STEPS, BATCH, LR, MOMENTUM, SEED = 100, 32, 0.5, 0.9, 0  # the options' defaults


class Task:
    """The generated classification task (the module doc); the same for every seed of data."""

    def __init__(self, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.topics = torch.randperm(VOCAB, generator=g).reshape(CLASSES, VOCAB // CLASSES)

    def batch(self, n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, CLASSES, (n,), generator=g)
        anywhere = torch.randint(0, VOCAB, (n, TOKENS), generator=g)
        column = torch.randint(0, VOCAB // CLASSES, (n, TOKENS), generator=g)
        on_topic = torch.rand(n, TOKENS, generator=g) < ON_TOPIC
        return torch.where(on_topic, self.topics[y[:, None], column], anywhere), y


def model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)  # the same initial weights on every rank and for every backend
    bag = torch.nn.EmbeddingBag(VOCAB, DIM, mode="sum")
    torch.nn.init.normal_(bag.weight, std=0.1)
    return torch.nn.Sequential(
        bag, torch.nn.Linear(DIM, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES)
    )


def batches(seed: int, rank: int) -> torch.Generator:
    """The generator of `rank`'s training batches (each rank draws its own)."""
    return torch.Generator().manual_seed(seed * 1000 + 100 + rank)


def optimizer(params: Iterable[torch.nn.Parameter], lr: float) -> torch.optim.SGD:
    return torch.optim.SGD(params, lr=lr, momentum=MOMENTUM)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=STEPS, help=f"iterations (default {STEPS})")
    ap.add_argument("--batch", type=int, default=BATCH, help="samples per rank and iteration")
    ap.add_argument("--lr", type=float, default=LR, help=f"SGD learning rate (momentum {MOMENTUM})")
    ap.add_argument("--seed", type=int, default=SEED, help="task, weights and batches")
    args = ap.parse_args()

    torch.set_num_threads(1)
    try:  # process group, client, codec and run id from the launcher (or torchrun's cluster)
        worker = from_environment()
    except LaunchError as exc:  # started by hand, or a cluster file that does not fit
        sys.exit(f"train_ddp.py: {exc}")
    task = Task(args.seed)
    held_out = task.batch(2000, torch.Generator().manual_seed(args.seed + 1))
    drawn = batches(args.seed, worker.rank)
    ddp = DDP(model(args.seed))
    worker.register(ddp)  # gradients all-reduced by the backend the launcher chose
    opt = optimizer(ddp.parameters(), args.lr)
    with worker:  # closed at the end; the switch or a machine failing ends it in one line
        for it in range(args.steps):
            x, y = task.batch(args.batch, drawn)
            started, reduced = time.perf_counter(), worker.allreduce_seconds
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(ddp(x), y)
            loss.backward()  # type: ignore[no-untyped-call]  # DDP's hook all-reduces here
            opt.step()
            seconds = time.perf_counter() - started
            accuracy = None
            if worker.rank == 0:
                with torch.no_grad():
                    accuracy = (ddp.module(held_out[0]).argmax(1) == held_out[1]).float().mean()
            worker.record(
                it,
                loss=loss.item(),
                accuracy=None if accuracy is None else accuracy.item(),
                step_seconds=seconds,
                allreduce_seconds=worker.allreduce_seconds - reduced,
            )


if __name__ == "__main__":
    main()
