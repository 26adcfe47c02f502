"""Property: under loss, duplication, reordering and retransmission, across reruns, reinstalls,
pools handed to another job and runs abandoned half-way, the softswitch gives every worker
exactly the sum of every chunk of its own run, never any other job's or run's data, and never
sends a worker a result twice for one use of a (slot, set) except in answer to a
retransmission.

The network is a bag of in-flight packets; hypothesis picks, step by step, which packet is
delivered next (any order), dropped or duplicated, and which worker times out and retransmits.
Workers follow SwitchML's window: chunk i uses slot i mod W and set (i div W) mod 2, and a
result for chunk i releases chunk i + W; seq = run << 16 | i.

A test is a series of sessions. In each, every installed job runs its workers once (a run,
from chunk 0); the run completes, or is abandoned part-way (workers die, possibly mid-round).
Between sessions each job is rerun with a new run id, reinstalled with a new epoch (with the
same run id or a new one), or removed with its pool given to a new job (other workers, maybe
other ports and fan-in), as the controller and launchers do. Sometimes the controller has lost
its epoch counter and starts again from 1: then a run id the (job, epoch) has not seen, or the
new job's id, is what tells the slot's owners apart.

The assumptions (docs/protocol.md): a packet does not outlive two rounds of its slot, so an
up-going packet of chunk i is gone from the network once chunk i + 2W has been sent; and no
packet of a run is delivered once the next session has started (the network is drained).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inaemu.common.wire import (
    INA_OFFSET,
    INA_UDP_PORT,
    RUN_SHIFT,
    SEQ_CHUNK_MASK,
    Endpoint,
    Flag,
    FrameTemplate,
    InaHeader,
    K,
    Opcode,
    pack_frames,
    pack_payloads,
    parse_frames,
    seq_field,
    slot_field,
)
from inaemu.controller.jobs import next_epoch
from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.state import ActionCall, TableEntry
from tests.helpers import accounted

SWITCH = Endpoint("00:00:00:00:00:fe", "10.0.0.254")


@dataclass
class Install:
    """One installation of a job on the switch: its entries, pool and epoch."""

    job_id: int
    ports: list[int]
    window: int  # = pool size
    base: int
    epoch: int
    mgid: int


@dataclass
class Run:
    install: Install
    run: int
    values: npt.NDArray[np.int32]  # (workers, chunks, K)

    @property
    def chunks(self) -> int:
        return int(self.values.shape[1])

    def total(self, chunk: int) -> npt.NDArray[np.int64]:
        total: npt.NDArray[np.int64] = self.values[:, chunk].astype(np.int64).sum(axis=0)
        return total


@dataclass
class Worker:
    run: Run
    index: int
    port: int
    next_chunk: int = 0
    outstanding: set[int] = field(default_factory=set)
    results: dict[int, npt.NDArray[np.int32]] = field(default_factory=dict)

    def frame(self, chunk: int, retx: bool) -> bytes:
        inst = self.run.install
        w = inst.window
        rec = pack_frames(
            FrameTemplate(
                Endpoint(f"00:00:00:00:01:{self.port:02x}", f"10.0.1.{self.port}"), SWITCH
            ),
            pack_payloads(
                opcode=Opcode.SUM,
                job_id=inst.job_id,
                tree_id=0,
                slot=slot_field(chunk % w, (chunk // w) % 2),
                seq=seq_field(self.run.run, chunk),
                values=self.run.values[self.index, chunk][None, :],
                flags=int(Flag.RETX) if retx else 0,
            ),
        )
        return rec.tobytes()


def install(pipe: Pipeline, inst: Install) -> None:
    pipe.ina_job.insert(
        TableEntry(
            (inst.job_id, 0),
            ActionCall(
                "agg_node", (inst.base, inst.window, len(inst.ports), inst.mgid, 1, 0, inst.epoch)
            ),
        )
    )
    for i, port in enumerate(inst.ports):
        key = (inst.job_id, 0, port, INA_UDP_PORT)
        pipe.ina_child.insert(TableEntry(key, ActionCall("set_child", (i,))))
    pipe.multicast.insert(inst.mgid, [(p, INA_UDP_PORT) for p in inst.ports])


def uninstall(pipe: Pipeline, inst: Install) -> None:
    pipe.ina_job.delete((inst.job_id, 0))
    for port in inst.ports:
        pipe.ina_child.delete((inst.job_id, 0, port, INA_UDP_PORT))
    pipe.multicast.delete(inst.mgid)


def values(data: st.DataObject, workers: int) -> npt.NDArray[np.int32]:
    chunks = data.draw(st.integers(1, 7), label="chunks")
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    return rng.integers(-1000, 1000, (workers, chunks, K), dtype=np.int32)


@st.composite
def first_installs(draw: st.DrawFn) -> list[Install]:
    installs = []
    port, base = 1, 0
    for j in range(draw(st.integers(1, 2), label="jobs")):
        n = draw(st.integers(1, 4), label="workers")
        window = draw(st.integers(1, 3), label="window")
        installs.append(Install(j + 1, list(range(port, port + n)), window, base, 1, j + 1))
        port += n
        base += window
    return installs


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(installs=first_installs(), data=st.data())
def test_exact_sums_across_runs_reinstalls_and_tenants(
    installs: list[Install], data: st.DataObject
) -> None:
    draw = data.draw
    pipe = Pipeline()
    for inst in installs:
        install(pipe, inst)
    epoch = 1  # the switch's last epoch (the controller's per-switch counter)
    next_job, next_port, next_mgid = len(installs) + 1, max(installs[-1].ports) + 1, 10
    runs_seen: dict[tuple[int, int], set[int]] = {}  # (job, epoch) -> run ids used
    arrivals_total = 0

    for session in range(draw(st.integers(1, 4), label="sessions")):
        if session:
            # Between sessions: every job is rerun, reinstalled or replaced by another job.
            for k, old in enumerate(installs):
                change = draw(st.sampled_from(["rerun", "reinstall", "new job"]), label="change")
                if change == "rerun":
                    continue
                uninstall(pipe, old)
                # The controller's next epoch, or 1 again if it lost its counters (then the
                # job id, or a new run id, must tell the owners apart).
                lost = draw(st.integers(0, 3), label="epoch counter lost") == 0
                epoch = 1 if lost else next_epoch(epoch)
                if change == "reinstall":
                    new = Install(old.job_id, old.ports, old.window, old.base, epoch, old.mgid)
                else:  # the freed pool goes to a new job, on the same ports or others
                    n = draw(st.integers(1, 4), label="workers")
                    if draw(st.booleans(), label="same ports") and n <= len(old.ports):
                        ports = old.ports[:n]
                    else:
                        ports = list(range(next_port, next_port + n))
                        next_port += n
                    new = Install(next_job, ports, old.window, old.base, epoch, next_mgid)
                    next_job, next_mgid = next_job + 1, next_mgid + 1
                install(pipe, new)
                installs[k] = new
        runs = []
        for inst in installs:
            used = runs_seen.setdefault((inst.job_id, inst.epoch), set())
            # A run id the installation has not seen; a reinstalled job may keep its last one
            # (e.g. the default run 0): the new epoch tells the runs apart.
            run_id = draw(st.sampled_from(sorted(set(range(6)) - used)), label="run")
            used.add(run_id)
            runs.append(Run(inst, run_id, values(data, len(inst.ports))))
        arrivals_total += play_session(pipe, runs, data)

    packets_in, packets_accounted = accounted(pipe)
    assert packets_in == packets_accounted == arrivals_total


def play_session(pipe: Pipeline, runs: list[Run], data: st.DataObject) -> int:
    """One run of every job: chaos, then completion or abandonment. Returns the packets sent
    into the switch."""
    draw = data.draw
    workers = {p: Worker(run, i, p) for run in runs for i, p in enumerate(run.install.ports)}
    in_flight: list[tuple[str, int, bytes]] = []  # ("up"|"down", port, frame)
    # (port, seq) -> results the switch sent / copies of the contribution it received.
    # The switch cannot tell a retransmission from a network duplicate: every copy after the
    # first is one, and may be answered once.
    results_sent: Counter[tuple[int, int]] = Counter()
    arrivals: Counter[tuple[int, int]] = Counter()

    def send(w: Worker, chunk: int, retx: bool) -> None:
        if not retx:
            # packets of chunk - 2W no longer exist (the first assumption, see module doc)
            stale = seq_field(w.run.run, chunk - 2 * w.run.install.window)
            in_flight[:] = [
                f
                for f in in_flight
                if not (f[0] == "up" and workers[f[1]].run is w.run and _seq(f[2]) == stale)
            ]
            w.outstanding.add(chunk)
        in_flight.append(("up", w.port, w.frame(chunk, retx)))

    def release(w: Worker) -> None:
        window = w.run.install.window
        while w.next_chunk < w.run.chunks and (
            w.next_chunk < window or (w.next_chunk - window) in w.results
        ):
            send(w, w.next_chunk, retx=False)
            w.next_chunk += 1

    def deliver(item: tuple[str, int, bytes]) -> None:
        direction, port, frame = item
        if direction == "up":
            arrivals[(port, _seq(frame))] += 1
            for out_port, out in pipe.process(port, frame):
                check_result(out_port, out)
                results_sent[(out_port, _seq(out))] += 1
                in_flight.append(("down", out_port, out))
            return
        w = workers[port]
        chunk = _seq(frame) & SEQ_CHUNK_MASK
        if chunk in w.outstanding:
            w.outstanding.discard(chunk)
            w.results[chunk] = parse_frames(frame)[0]["values"].copy()
            release(w)

    def check_result(port: int, frame: bytes) -> None:
        """Every result goes to a worker of its job's current run, and is exactly that run's
        sum of the chunk it names: no other job's, installation's or run's data."""
        rec = parse_frames(frame)[0]
        assert int(rec["ver_flags"]) & Flag.RESULT
        assert port in workers, f"a result left on port {port}, which has no worker now"
        run = workers[port].run
        seq = int(rec["seq"])
        assert int(rec["job_id"]) == run.install.job_id, "another job's result"
        assert seq >> RUN_SHIFT == run.run, "another run's result"
        chunk = seq & SEQ_CHUNK_MASK
        assert chunk < run.chunks
        expected = run.total(chunk)
        assert np.array_equal(rec["values"].astype(np.int64), expected), f"chunk {chunk}"
        assert int(rec["contrib"]) == len(run.install.ports)

    def check_answers() -> None:
        for (port, seq), sent in results_sent.items():
            assert sent <= arrivals[(port, seq)], (
                f"port {port} got {sent} results for seq {seq:#x} but sent only "
                f"{arrivals[(port, seq)]} copies (first + retransmissions)"
            )

    for w in workers.values():
        release(w)

    for _ in range(draw(st.integers(0, 100), label="chaotic steps")):
        if not in_flight:
            break
        action = draw(st.sampled_from(["deliver"] * 6 + ["drop", "dup", "retx"]))
        i = draw(st.integers(0, len(in_flight) - 1), label="packet")
        if action == "deliver":
            deliver(in_flight.pop(i))
        elif action == "drop":
            in_flight.pop(i)
        elif action == "dup":
            in_flight.append(in_flight[i])
        else:
            w = workers[draw(st.sampled_from(sorted(workers)), label="worker")]
            if w.outstanding:
                send(w, min(w.outstanding), retx=True)

    if draw(st.booleans(), label="abandon"):
        # The run is abandoned where it stands: workers die, their packets are gone.
        # Whatever was half-aggregated stays in the switch for the next session.
        check_answers()
        return sum(arrivals.values())

    # Calm network: deliver in order; time out and retransmit whatever is still missing.
    # Each timeout round completes at least one more chunk of every job, so a run needs at
    # most as many rounds as it has chunks; a bound keeps a stuck run from spinning.
    for _ in range(4 * max(run.chunks for run in runs) + 4):
        while in_flight:
            deliver(in_flight.pop(0))
        pending = [w for w in workers.values() if w.outstanding]
        if not pending:
            break
        for w in pending:
            for chunk in sorted(w.outstanding):
                send(w, chunk, retx=True)

    for w in workers.values():
        assert sorted(w.results) == list(range(w.run.chunks)), "every chunk completed"
        for chunk, got in w.results.items():
            assert np.array_equal(got.astype(np.int64), w.run.total(chunk))
    check_answers()
    return sum(arrivals.values())


def _seq(frame: bytes) -> int:
    return InaHeader.unpack(frame[INA_OFFSET:]).seq
