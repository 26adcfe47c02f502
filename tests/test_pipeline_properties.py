"""Property: under loss, duplication, reordering and retransmission, the softswitch gives every
worker exactly the sum of every chunk, and never sends a worker a result twice for one use of a
(slot, set) except in answer to a retransmission.

The network is a bag of in-flight packets; hypothesis picks, step by step, which packet is
delivered next (any order), dropped or duplicated, and which worker times out and retransmits.
Workers follow SwitchML's window: chunk i uses slot i mod W and set (i div W) mod 2, and a
result for chunk i releases chunk i + W. The one assumption (as in SwitchML): a packet does not
outlive two rounds of its slot, so an up-going packet of chunk i is gone from the network once
chunk i + 2W has been sent.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inaemu.hostlib.wire import (
    INA_OFFSET,
    Endpoint,
    Flag,
    FrameTemplate,
    InaHeader,
    K,
    Opcode,
    pack_frames,
    pack_payloads,
    parse_frames,
    slot_field,
)
from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.state import ActionCall, TableEntry
from tests.helpers import accounted

SWITCH = Endpoint("00:00:00:00:00:fe", "10.0.0.254")


@dataclass
class Job:
    job_id: int
    ports: list[int]
    window: int
    values: npt.NDArray[np.int32]  # (workers, chunks, K)
    base: int

    @property
    def chunks(self) -> int:
        return int(self.values.shape[1])


@dataclass
class Worker:
    job: Job
    index: int
    port: int
    next_chunk: int = 0
    outstanding: set[int] = field(default_factory=set)
    results: dict[int, npt.NDArray[np.int32]] = field(default_factory=dict)

    def frame(self, chunk: int, retx: bool) -> bytes:
        w = self.job.window
        rec = pack_frames(
            FrameTemplate(
                Endpoint(f"00:00:00:00:01:{self.port:02x}", f"10.0.1.{self.port}"), SWITCH
            ),
            pack_payloads(
                opcode=Opcode.SUM,
                job_id=self.job.job_id,
                tree_id=0,
                slot=slot_field(chunk % w, (chunk // w) % 2),
                seq=chunk,
                values=self.job.values[self.index, chunk][None, :],
                flags=int(Flag.RETX) if retx else 0,
            ),
        )
        return rec.tobytes()


def program(pipe: Pipeline, job: Job) -> None:
    mgid = job.job_id
    pipe.ina_job.insert(
        TableEntry(
            (job.job_id, 0),
            ActionCall("agg_node", (job.base, job.window, len(job.ports), mgid, 1, 0)),
        )
    )
    for i, port in enumerate(job.ports):
        pipe.ina_child.insert(TableEntry((job.job_id, 0, port), ActionCall("set_child", (i,))))
    pipe.multicast.insert(mgid, [(p, 0) for p in job.ports])


@st.composite
def scenarios(draw: st.DrawFn) -> list[Job]:
    n_jobs = draw(st.integers(1, 2))
    jobs = []
    port = 1
    base = 0
    for j in range(n_jobs):
        n = draw(st.integers(1, 4))
        window = draw(st.integers(1, 3))
        chunks = draw(st.integers(1, 7))
        seed = draw(st.integers(0, 2**32 - 1))
        values = np.random.default_rng(seed).integers(-1000, 1000, (n, chunks, K), dtype=np.int32)
        jobs.append(Job(j + 1, list(range(port, port + n)), window, values, base))
        port += n
        base += window
    return jobs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=scenarios(), data=st.data())
def test_exact_sums_under_loss_duplication_reordering(jobs: list[Job], data: st.DataObject) -> None:
    pipe = Pipeline()
    for job in jobs:
        program(pipe, job)
    workers = {p: Worker(job, i, p) for job in jobs for i, p in enumerate(job.ports)}
    in_flight: list[tuple[str, int, bytes]] = []  # ("up"|"down", port, frame)
    # (port, chunk) -> results the switch sent / copies of the contribution it received.
    # The switch cannot tell a retransmission from a network duplicate: every copy after the
    # first is one, and may be answered once.
    results_sent: Counter[tuple[int, int]] = Counter()
    arrivals: Counter[tuple[int, int]] = Counter()

    def send(w: Worker, chunk: int, retx: bool) -> None:
        if not retx:
            # packets of chunk - 2W no longer exist (the one assumption, see module doc)
            stale = chunk - 2 * w.job.window
            in_flight[:] = [
                f
                for f in in_flight
                if not (f[0] == "up" and workers[f[1]].job is w.job and _seq(f[2]) == stale)
            ]
            w.outstanding.add(chunk)
        in_flight.append(("up", w.port, w.frame(chunk, retx)))

    def release(w: Worker) -> None:
        while w.next_chunk < w.job.chunks and (
            w.next_chunk < w.job.window or (w.next_chunk - w.job.window) in w.results
        ):
            send(w, w.next_chunk, retx=False)
            w.next_chunk += 1

    def deliver(item: tuple[str, int, bytes]) -> None:
        direction, port, frame = item
        if direction == "up":
            arrivals[(port, _seq(frame))] += 1
            for out_port, out in pipe.process(port, frame):
                rec = parse_frames(out)[0]
                assert int(rec["ver_flags"]) & Flag.RESULT
                results_sent[(out_port, int(rec["seq"]))] += 1
                in_flight.append(("down", out_port, out))
            return
        w = workers[port]
        rec = parse_frames(frame)[0]
        seq = int(rec["seq"])
        if seq in w.outstanding:
            expected = w.job.values[:, seq].astype(np.int64).sum(axis=0)
            assert np.array_equal(rec["values"].astype(np.int64), expected), f"chunk {seq}"
            assert int(rec["contrib"]) == len(w.job.ports)
            w.outstanding.discard(seq)
            w.results[seq] = rec["values"].copy()
            release(w)

    for w in workers.values():
        release(w)

    for _ in range(data.draw(st.integers(0, 150), label="chaotic steps")):
        if not in_flight:
            break
        action = data.draw(st.sampled_from(["deliver"] * 6 + ["drop", "dup", "retx"]))
        i = data.draw(st.integers(0, len(in_flight) - 1), label="packet")
        if action == "deliver":
            deliver(in_flight.pop(i))
        elif action == "drop":
            in_flight.pop(i)
        elif action == "dup":
            in_flight.append(in_flight[i])
        else:
            w = workers[data.draw(st.sampled_from(sorted(workers)), label="worker")]
            if w.outstanding:
                send(w, min(w.outstanding), retx=True)

    # Calm network: deliver in order; time out and retransmit whatever is still missing.
    for _ in range(10_000):
        if in_flight:
            deliver(in_flight.pop(0))
            continue
        pending = [w for w in workers.values() if w.outstanding]
        if not pending:
            break
        for w in pending:
            for chunk in sorted(w.outstanding):
                send(w, chunk, retx=True)

    for w in workers.values():
        assert sorted(w.results) == list(range(w.job.chunks)), "every chunk completed"
    packets_in, packets_accounted = accounted(pipe)
    assert packets_in == packets_accounted == sum(arrivals.values())
    for (port, seq), sent in results_sent.items():
        assert sent <= arrivals[(port, seq)], (
            f"port {port} got {sent} results for chunk {seq} but sent only "
            f"{arrivals[(port, seq)]} copies (first + retransmissions)"
        )


def _seq(frame: bytes) -> int:
    return InaHeader.unpack(frame[INA_OFFSET:]).seq
