"""PyTorch DDP communication hook: all-reduce gradient buckets through the switch.

    from inaemu.hostlib.ddp import InaHookState, ina_allreduce_hook
    state = InaHookState(client, codec=FixedPointCodec())
    ddp_model.register_comm_hook(state, ina_allreduce_hook)

Every bucket is summed over the job's workers by `InaClient.allreduce` with the chosen codec and
divided by the world size, as DDP's default all-reduce hook averages; the average is written
into the bucket in place, with no copy of it on the way. Making the state starts a
new run on the client (docs/protocol.md, "Runs and installations"; the client needs no `run=`
of its own): rank 0 draws a run id and broadcasts it over the default process group, so every
rank must make its state (a collective call, as DDP's own construction is), after
`init_process_group`; or pass the same `run` on every rank, e.g. one from `inaemu job
new-run`, which never issues one twice. A drawn one repeats the last run's with probability
2^-16: the client's run check then refuses it (`InaRunError`), it never sums with the last
run's state. An `InaClient` made without `rank=` takes the process group's rank and world
size here. Buckets are all-reduced in the order DDP hands them over, which is the same on every
rank; the hook runs synchronously (the future it returns is already complete), so the client
is never used concurrently.
Gradients must live on the CPU.

The state takes any client with `InaClient`'s allreduce interface (`AllreduceClient`): the INA
client, `inaemu.hostlib.collective.executor.ScheduleClient` (a host collective, the baseline,
with its codecs: `InceptionnCodec` for the ring with INCEPTIONN), whose `codec=None` sums
plain float32 where `InaClient`'s defaults to fixed point, or `GlooClient` (PyTorch's own
all_reduce over the process group, through the same hook, so that every backend's allreduce
is timed alike).

Under the launcher (`inaemu train SCRIPT ...`, which starts the switches, installs the job and
takes a run id for every run), or under torchrun on machines cabled to a switch with a cluster
file (`INAEMU_CLUSTER`: docs/cluster.md), a script needs one call for all of that:

    worker = from_environment()          # process group, client, codec, run id: INAEMU_*
    model = DDP(net)
    worker.register(model)               # the hook, whatever the backend
    with worker:                         # closed at the end; a dead switch or peer: one line
        ...
        worker.record(it, loss=..., accuracy=..., step_seconds=..., allreduce_seconds=...)

`examples/train_ddp.py` is a whole script.
"""

# No `from __future__ import annotations` here: DDP checks the hook's annotations at run time
# against the real dist.GradBucket and torch.futures.Future[torch.Tensor] objects.
import json
import os
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from inaemu.common.wire import MAX_RUN
from inaemu.hostlib.launch import Launch, LaunchError

if TYPE_CHECKING:
    from inaemu.hostlib.client import InaClient
    from inaemu.hostlib.collective.executor import ScheduleClient, ScheduleCodec

try:
    import torch
    import torch.distributed as dist
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "hostlib.ddp needs PyTorch: pip install torch==2.13.0 (the CPU build)"
    ) from exc

RENDEZVOUS_TIMEOUT = 120.0  # seconds the launched processes have to meet (they start slowly)
GLOO_IFNAME = "GLOO_SOCKET_IFNAME"  # the interface gloo's process group uses


class AllreduceClient(Protocol):
    """What the hook needs of a client: `InaClient`, `ScheduleClient` and `GlooClient` have it.
    `codec` is whatever the client takes (`HomomorphicCodec` for `InaClient`, a
    `ScheduleCodec` for `ScheduleClient`, only None for `GlooClient`)."""

    @property
    def n_workers(self) -> int | None: ...

    def start_run(self, run: int) -> None: ...

    def allreduce(
        self, x: npt.NDArray[np.generic], codec: Any = None
    ) -> npt.NDArray[np.generic]: ...


@dataclass
class InaHookState:
    client: AllreduceClient
    codec: "ScheduleCodec | None" = None  # None: the client's default (InaClient: fixed point)
    run: int | None = None  # None: rank 0 draws a fresh run id for every rank (shared_run_id)
    buckets: int = 0
    elements: int = 0
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.run is None:
            self.run = shared_run_id()
        _take_rank(self.client)
        self.client.start_run(self.run)


def _take_rank(client: AllreduceClient) -> None:
    """An `InaClient` made without `rank=` (or `n_workers=`) takes the default process group's
    rank (and world size), which its run check needs."""
    from inaemu.hostlib.client import InaClient

    if not isinstance(client, InaClient) or client.rank is not None:
        return
    if dist.is_available() and dist.is_initialized():
        client.rank = dist.get_rank()
        if client.n_workers is None:
            client.n_workers = dist.get_world_size()


class GlooError(RuntimeError):
    """gloo's all_reduce failed: a peer went away (its process or machine), or its
    connection broke. The message is gloo's first line."""


class GlooClient:
    """PyTorch's all_reduce (SUM) over the default process group, as an `AllreduceClient`:
    the baseline through the same hook as the others (synchronous, timed alike). A broken
    peer is a `GlooError` (gloo raises a bare RuntimeError, or `DistError`)."""

    @property
    def n_workers(self) -> int:
        return dist.get_world_size()

    def start_run(self, run: int) -> None:
        """Nothing to do: the process group tells its runs apart itself."""

    def allreduce(self, x: npt.NDArray[np.generic], codec: Any = None) -> npt.NDArray[np.generic]:
        if codec is not None:
            raise ValueError(f"gloo sums plain floats; it takes no codec, got {codec!r}")
        tensor = torch.from_numpy(np.array(x))  # a copy: the caller's array stays as it was
        try:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        except RuntimeError as exc:  # gloo's: "[.../pair.cc:537] Read error [ip]:port: ..."
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            shown = "".join(c for c in first if c.isprintable())
            raise GlooError(f"gloo's allreduce failed: {shown}") from exc
        out: npt.NDArray[np.generic] = tensor.numpy()
        return out


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
    array = tensor.detach().numpy()  # the bucket's own memory
    total = state.client.allreduce(array, state.codec)
    world = state.client.n_workers or dist.get_world_size()
    summed = np.asarray(total, dtype=array.dtype).reshape(array.shape)
    if array.dtype.kind == "f":  # the average written straight into the bucket: no copy
        np.divide(summed, world, out=array)
    else:  # (integer buckets: numpy's true division makes floats, truncated back as before)
        tensor.copy_(torch.from_numpy(summed / world).to(tensor.dtype))
    state.buckets += 1
    state.elements += array.size
    state.seconds += time.perf_counter() - start
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(tensor)
    return fut


class LaunchedWorker:
    """One training process as the launcher started it (`from_environment`): the gloo process
    group is up, `state` holds the backend's client, codec and run id."""

    def __init__(
        self, launch: Launch, state: InaHookState, close_client: Callable[[], None]
    ) -> None:
        self.launch = launch
        self.state = state
        self._close_client = close_client
        # `{rank}` in the path: a file per rank (torchrun gives a machine's ranks one environment)
        records = launch.records.replace("{rank}", str(launch.rank))
        self._records = open(records, "a", buffering=1) if records else None  # noqa: SIM115
        self._closed = False

    @property
    def rank(self) -> int:
        return self.launch.rank

    @property
    def world_size(self) -> int:
        return self.launch.world_size

    @property
    def backend(self) -> str:
        return self.launch.backend

    @property
    def allreduce_seconds(self) -> float:
        """Seconds spent in the hook's allreduces so far (every bucket of every iteration)."""
        return self.state.seconds

    def register(self, model: "torch.nn.parallel.DistributedDataParallel") -> None:
        """Make `model` (a DDP module) all-reduce its gradients through this backend."""
        model.register_comm_hook(self.state, ina_allreduce_hook)

    def record(
        self,
        iteration: int,
        *,
        loss: float,
        step_seconds: float,
        allreduce_seconds: float,
        accuracy: float | None = None,
    ) -> None:
        """One iteration's record for the launcher (a JSON line in INAEMU_RECORDS): this rank's
        training loss, held-out accuracy (if it measured one), the iteration's seconds and the
        part of them spent in allreduces. The launcher averages the losses over the ranks and
        plots them against iterations and time."""
        if self._records is None:
            return
        line = {
            "rank": self.rank,
            "backend": self.backend,
            "iteration": iteration,
            "loss": loss,
            "accuracy": accuracy,
            "step_seconds": step_seconds,
            "allreduce_seconds": allreduce_seconds,
        }
        self._records.write(json.dumps(line) + "\n")

    def close(self) -> None:
        """Detach from the switch or peers, wait for every rank, end the process group. Called
        while an exception propagates (a `finally:` after a failure), it waits for nobody: the
        other ranks see the process group go and fail too, instead of waiting for this one."""
        if self._closed:
            return
        self._closed = True
        failing = sys.exc_info()[0] is not None
        try:
            self._close_client()
        finally:
            if self._records is not None:
                self._records.close()
            if dist.is_initialized():
                store = _own_store(self.launch)
                if not failing:
                    dist.barrier()  # nobody leaves while another still talks to it
                dist.destroy_process_group()
                if store is not None and not failing:
                    _leave_store_last(store, self.rank, self.world_size)

    def __enter__(self) -> "LaunchedWorker":
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        """Close; a network failure of the allreduce (the switch or a peer stopped answering, a
        machine died: `network_failures`) ends the process with one line on stderr, naming
        this rank and its machine, and exit status 1, instead of a traceback through DDP."""
        self.close()
        if isinstance(exc, network_failures()):
            where = f"rank {self.rank}" + (
                f" on {self.launch.machine}" if self.launch.machine else ""
            )
            print(f"{where} ({self.backend}): {exc}", file=sys.stderr, flush=True)
            raise SystemExit(1) from None


STORE_LINGER = 10.0  # seconds rank 0 waits, at most, for the others to leave its store


def _own_store(launch: Launch) -> Any:  # a torch Store (untyped in its stubs), or None
    """Under torchrun, with its store not shared (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, what
    `inaemu cluster init` prints: docs/cluster.md), rank 0's process holds the process group's
    TCPStore server: that store, else None."""
    if not launch.under_torchrun or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return None
    return dist.distributed_c10d._get_default_store()


def _leave_store_last(store: Any, rank: int, world: int) -> None:
    """Every other rank says it is done with the store; rank 0, which serves it, waits for
    them before its process ends and takes the server down (bounded by STORE_LINGER). A
    server taken down at the process's end while others were still connected has aborted
    rank 0 once ("terminate called without an active exception", SIGABRT)."""
    key = "inaemu/left"
    try:
        if rank != 0:
            store.add(key, 1)
            return
        deadline = time.monotonic() + STORE_LINGER
        while store.add(key, 0) < world - 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)  # their last request answered, their connections closing
    except (RuntimeError, dist.DistError):
        pass  # a rank gone already: nothing left to wait for


def network_failures() -> tuple[type[BaseException], ...]:
    """What an allreduce raises when the network, the switch or another rank fails: the INA
    client's errors, a host collective's peers', the transport's, and gloo's (`GlooError`)."""
    from inaemu.hostlib.client import InaError
    from inaemu.hostlib.collective.peers import PeerError
    from inaemu.hostlib.transport import TransportError

    return (InaError, PeerError, TransportError, GlooError)


def from_environment(environ: dict[str, str] | None = None) -> LaunchedWorker:
    """The training process the launcher (`inaemu train`) or torchrun started: reads its
    variables (`inaemu.hostlib.launch`: INAEMU_*, under torchrun also torchrun's and the
    cluster file's), joins the gloo process group at the launcher's rendezvous or torchrun's
    (unless the script did already) and makes the backend's client with the launcher's run
    id, or one the ranks draw together. `LaunchError` if the variables are missing or wrong.

    Under torchrun gloo's process group uses the interface that faces the switch
    (GLOO_SOCKET_IFNAME, unless it is set): where the host name resolves to another network
    (or to 127.0.1.1), gloo would otherwise listen where its peers cannot reach it."""
    launch = Launch.from_env(environ)
    if launch.under_torchrun and not os.environ.get(GLOO_IFNAME):
        from inaemu.hostlib.worker import facing_interface

        try:
            os.environ[GLOO_IFNAME] = facing_interface(launch.agg_ip, launch.ip)
        except OSError as exc:
            raise LaunchError(f"{launch.machine} cannot reach its switch: {exc}") from None
    if not dist.is_initialized():
        dist.init_process_group(
            "gloo",
            init_method=launch.rendezvous,
            rank=launch.rank,
            world_size=launch.world_size,
            timeout=timedelta(seconds=max(RENDEZVOUS_TIMEOUT, launch.timeout)),
        )
    backend = launch.parsed_backend
    client: AllreduceClient
    codec: ScheduleCodec | None
    if backend.kind == "gloo":
        client, codec, close = GlooClient(), None, lambda: None
    elif backend.kind == "ina":
        from inaemu.hostlib.codecs import make_codec

        ina = _ina_client(launch)
        client, codec, close = ina, make_codec(backend.codec), ina.transport.close
    else:
        from inaemu.hostlib.collective.executor import make_schedule_codec

        sc = _schedule_client(launch)
        client, codec, close = sc, make_schedule_codec(backend.codec), sc.close
    return LaunchedWorker(launch, InaHookState(client, codec, run=launch.run), close)


def _ina_client(launch: Launch) -> "InaClient":
    from inaemu.common.wire import Endpoint
    from inaemu.hostlib.client import InaClient
    from inaemu.hostlib.transport import LoopbackWireTransport, Transport, UdpTransport

    transport: Transport
    if launch.wire_dir:
        transport = LoopbackWireTransport(
            launch.port,
            launch.wire_dir,
            switch_name=launch.switch,
            host=Endpoint(launch.mac, launch.ip),
            switch=Endpoint(launch.agg_mac, launch.agg_ip),
        )
    else:  # a Mininet host: the kernel's UDP, from the MAC that results come back to
        from inaemu.hostlib.worker import check_mac, facing_interface

        check_mac(facing_interface(launch.agg_ip, launch.ip), launch.mac)
        transport = UdpTransport(launch.ip, launch.agg_ip, local_port=launch.udp_port)
    return InaClient(
        transport,
        job_id=launch.job,
        window=launch.window,
        n_workers=launch.world_size,
        rank=launch.rank,
        n_trees=launch.trees,
        run=launch.run,
        give_up_after=launch.timeout,
    )


def _schedule_client(launch: Launch) -> "ScheduleClient":
    from pathlib import Path

    from inaemu.collectives.schedule import Schedule
    from inaemu.common.wire import Endpoint
    from inaemu.hostlib.collective.executor import ScheduleClient
    from inaemu.hostlib.collective.peers import PeerChannel, parse_peers
    from inaemu.hostlib.collective.tcp_peers import TcpPeers
    from inaemu.hostlib.collective.wire_peers import on_host_wire
    from inaemu.hostlib.collective.worker import default_token

    run = launch.run
    if run is None:  # the launcher gives every host collective's run its id
        raise LaunchError(f"{launch.backend}: INAEMU_RUN is not set (`inaemu train` sets it)")
    schedule = Schedule.load(Path(launch.schedule))
    channel: PeerChannel
    if launch.wire_dir:  # peers: mac/ip of every rank, frames routed by the switches
        pairs = [p.partition("/") for p in launch.peers.split(",")]
        endpoints = [Endpoint(mac, ip) for mac, _, ip in pairs]
        me = Endpoint(launch.mac, launch.ip)
        if me not in endpoints:
            raise LaunchError(f"INAEMU_PEERS does not name this worker ({me.mac}/{me.ip})")
        channel = on_host_wire(
            endpoints.index(me),
            endpoints,
            launch.wire_dir,
            launch.switch,
            launch.port,
            run=run,
            mtu=launch.mtu,
            give_up=launch.timeout,
        )
    else:  # peers: ip:port of every rank, TCP through the switches' routes
        addresses = parse_peers(launch.peers)
        ips = [ip for ip, _ in addresses]
        if launch.ip not in ips:
            raise LaunchError(f"INAEMU_PEERS does not name this worker's address {launch.ip}")
        token = default_token(Path(launch.schedule), launch.peers, run)
        channel = TcpPeers(ips.index(launch.ip), addresses, token=token, timeout=launch.timeout)
    try:
        return ScheduleClient(schedule, channel.rank, channel, timeout=launch.timeout, run=run)
    except BaseException:
        channel.close()
        raise
