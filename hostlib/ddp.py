"""PyTorch DDP communication hook: all-reduce gradient buckets through the switch.

    from inaemu.hostlib.ddp import InaHookState, ina_allreduce_hook
    state = InaHookState(client, codec=FixedPointCodec())
    ddp_model.register_comm_hook(state, ina_allreduce_hook)

Every bucket is summed over the job's workers by `InaClient.allreduce` with the chosen codec and
divided by the world size, as DDP's default all-reduce hook averages. Making the state starts a
new run on the client (docs/protocol.md, "Runs and installations"; the client needs no `run=`
of its own): rank 0 draws a run id and broadcasts it over the default process group, so every
rank must make its state (a collective call, as DDP's own construction is), after
`init_process_group`; or pass the same `run` on every rank, e.g. one from `inaemu job
new-run`, which never issues one twice (a drawn one repeats the last run's with probability
2^-16). Buckets are all-reduced in the order DDP hands them over, which is the same on every
rank; the hook runs synchronously (the future it returns is already complete), so the client
is never used concurrently.
Gradients must live on the CPU.

The state takes any client with `InaClient`'s allreduce interface (`AllreduceClient`): the INA
client, or `inaemu.hostlib.collective.executor.ScheduleClient` (a host collective, the
baseline), whose `codec=None` sums plain float32 where `InaClient`'s defaults to fixed point.
"""

# No `from __future__ import annotations` here: DDP checks the hook's annotations at run time
# against the real dist.GradBucket and torch.futures.Future[torch.Tensor] objects.
import secrets
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from inaemu.hostlib.codecs.base import HomomorphicCodec
from inaemu.hostlib.wire import MAX_RUN

try:
    import torch
    import torch.distributed as dist
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "hostlib.ddp needs PyTorch: pip install torch==2.13.0 (the CPU build)"
    ) from exc


class AllreduceClient(Protocol):
    """What the hook needs of a client: `InaClient` and `ScheduleClient` both have it."""

    @property
    def n_workers(self) -> int | None: ...

    def start_run(self, run: int) -> None: ...

    def allreduce(
        self, x: npt.NDArray[np.generic], codec: HomomorphicCodec | None = None
    ) -> npt.NDArray[np.generic]: ...


@dataclass
class InaHookState:
    client: AllreduceClient
    codec: HomomorphicCodec | None = None  # None: the client's default (InaClient: fixed point)
    run: int | None = None  # None: rank 0 draws a fresh run id for every rank (shared_run_id)
    buckets: int = 0
    elements: int = 0
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.run is None:
            self.run = shared_run_id()
        self.client.start_run(self.run)


def shared_run_id() -> int:
    """A fresh run id, the same on every rank: rank 0 draws it at random and broadcasts it
    over the default process group (a collective: every rank calls it)."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "the INA hook state needs torch.distributed initialized (init_process_group) to "
            "share a run id between the ranks, or an explicit run= (the same on every rank)"
        )
    drawn = secrets.randbelow(MAX_RUN + 1) if dist.get_rank() == 0 else 0
    value = torch.tensor([drawn], dtype=torch.int64)
    dist.broadcast(value, src=0)
    return int(value.item())


def ina_allreduce_hook(
    state: InaHookState,
    bucket: dist.GradBucket,  # type: ignore[name-defined]  # exported only when distributed is built
) -> torch.futures.Future[torch.Tensor]:
    """A DDP comm hook (`register_comm_hook(state, ina_allreduce_hook)`)."""
    tensor: torch.Tensor = bucket.buffer()
    if tensor.device.type != "cpu":
        raise ValueError(f"the INA hook needs CPU gradients, got a bucket on {tensor.device}")
    start = time.perf_counter()
    array = tensor.detach().numpy()
    total = state.client.allreduce(array, state.codec)
    world = state.client.n_workers or dist.get_world_size()
    averaged = torch.from_numpy(np.asarray(total, dtype=array.dtype) / world).to(tensor.dtype)
    tensor.copy_(averaged.reshape(tensor.shape))
    state.buckets += 1
    state.elements += array.size
    state.seconds += time.perf_counter() - start
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(tensor)
    return fut
