"""Runs, reinstallations and tenants through the real client and a running softswitch: no
state from an earlier run, installation or job reaches a new one (docs/protocol.md, section 5).
Also the client's side of the run id: seq layout, the 16-bit chunk counter wrapping within a
run, and results of other runs ignored."""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from inaemu.cli import main as cli
from inaemu.common.wire import (
    INA_DTYPE,
    INA_VERSION,
    RUN_SHIFT,
    SEQ_CHUNK_MASK,
    Flag,
    K,
    seq_field,
)
from inaemu.controller.star import star_job_plan
from inaemu.hostlib.client import InaClient, InaError, InaRunError, InaTimeoutError
from inaemu.hostlib.transport import LoopbackWireTransport
from inaemu.p4.constants import Event
from inaemu.p4.plan import LOSS_TABLE, SwitchPlan, TableWrite, loss_threshold
from inaemu.softswitch.pipeline import Pipeline
from inaemu.softswitch.state import ActionCall, TableEntry
from inaemu.topology.builders import star
from tests.helpers import accounted, run_threads, running_switch, workers


def inputs(n: int, size: int, seed: int) -> list[npt.NDArray[np.int32]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(-(2**20), 2**20, size, dtype=np.int32) for _ in range(n)]


def exact(xs: list[npt.NDArray[np.int32]]) -> npt.NDArray[np.int64]:
    total: npt.NDArray[np.int64] = np.stack(xs).astype(np.int64).sum(axis=0)
    return total


def install(pipe: Pipeline, plan: SwitchPlan) -> None:
    with pipe.lock:
        for w in plan.tables:
            pipe.tables[w.table].insert(TableEntry(w.key, ActionCall(w.action, w.params)))
        for g in plan.groups:
            pipe.multicast.insert(g.mgid, list(g.replicas))


def remove(pipe: Pipeline, plan: SwitchPlan) -> None:
    with pipe.lock:
        for w in plan.tables:
            pipe.tables[w.table].delete(w.key)
        for g in plan.groups:
            pipe.multicast.delete(g.mgid)


def clients(
    wire_dir: str,
    ports: list[int],
    job_id: int,
    window: int,
    run: int,
    *,
    give_up_after: float = 30.0,
    initial_rto: float = 0.1,
) -> list[InaClient]:
    return [
        InaClient(
            LoopbackWireTransport(p, wire_dir),
            job_id=job_id,
            window=window,
            run=run,
            rank=rank,
            n_workers=len(ports),
            give_up_after=give_up_after,
            initial_rto=initial_rto,
        )
        for rank, p in enumerate(ports)
    ]


def reduce_all(cs: list[InaClient], xs: list[npt.NDArray[np.int32]]) -> list[npt.NDArray[np.int32]]:
    outs = run_threads([partial(c.allreduce_int32, x) for c, x in zip(cs, xs, strict=True)])
    return [o for o, _ in outs]


def abandon_half_round(c: InaClient, pipe: Pipeline) -> None:
    """`c` alone starts an operation its peers never join, and gives up: a worker whose peer
    died mid-round. Its contributions stay in the switch's cells. Then its last packets are
    let through the switch: no packet of a run outlives it (the protocol's assumption)."""
    c.give_up_after, c.max_rto = 0.3, 0.05
    with pytest.raises(InaTimeoutError):
        c.allreduce_int32(np.full(2 * K, 99, dtype=np.int32))
    settle(pipe)


def settle(pipe: Pipeline, quiet: float = 0.1, timeout: float = 10.0) -> None:
    """Wait until the switch has received nothing for `quiet` seconds."""
    deadline = time.monotonic() + timeout
    seen = -1
    while time.monotonic() < deadline:
        now = sum(pipe.port_rx.packets)
        if now == seen:
            return
        seen = now
        time.sleep(quiet)
    raise AssertionError("the switch kept receiving packets")


def test_reruns_on_one_installation_get_their_own_sums() -> None:
    """Run 1 (10 chunks, W=4) leaves results and bitmaps in every cell; run 2 numbers its
    chunks from 0 again with fewer than 2W of them (each seq the same as run 1's in that
    cell); run 3 starts on the same clients (start_run) after a worker of run 2 gave up
    mid-round. Each run gets exactly its own sums."""
    ws = workers(3)
    ports = [w.port for w in ws]
    with running_switch(ports, seed=3) as (sw, wire_dir):
        install(sw.pipeline, star_job_plan(1, ws, base=0, pool_size=4, mgid=1))
        xs1 = inputs(3, 10 * K, seed=1)
        cs = clients(wire_dir, ports, 1, 4, run=1)
        assert all(np.array_equal(o, exact(xs1)) for o in reduce_all(cs, xs1))
        for c in cs:
            c.transport.close()
        xs2 = inputs(3, 5 * K + 3, seed=2)
        cs = clients(wire_dir, ports, 1, 4, run=2)
        assert all(np.array_equal(o, exact(xs2)) for o in reduce_all(cs, xs2))
        abandon_half_round(cs[0], sw.pipeline)
        for c in cs:
            c.start_run(3)
        xs3 = inputs(3, 6 * K, seed=3)
        assert all(np.array_equal(o, exact(xs3)) for o in reduce_all(cs, xs3))
        for c in cs:
            c.transport.close()
    pipe = sw.pipeline
    assert pipe.ina_events.packets[Event.TAKEOVER] == 4 + 4 + 4  # every slot, every run
    packets_in, packets_accounted = accounted(pipe)
    assert packets_in == packets_accounted


def rerun_with_default_arguments(
    wire_dir: str, ports: list[int], xs: list[npt.NDArray[np.int32]]
) -> str | None:
    """New workers of job 1 (W=64) made with InaClient's default arguments sum `xs`: None if
    every one got the exact sum, else the clear error they raised. A wrong sum fails."""
    cs = [
        InaClient(LoopbackWireTransport(p, wire_dir), job_id=1, window=64, give_up_after=10)
        for p in ports
    ]
    try:
        outs = reduce_all(cs, xs)
    except InaError as exc:
        return str(exc)
    finally:
        for c in cs:
            c.transport.close()
    for rank, o in enumerate(outs):
        wrong = int(np.count_nonzero(o != exact(xs)))
        assert wrong == 0, f"worker {rank}: {wrong} of {o.size} elements wrong, and no error"
    return None


def test_rerun_with_default_arguments_gets_the_exact_sum_or_a_clear_error() -> None:
    """Four workers run job 1 (4,096 elements each: 64 chunks, one per slot), then four new
    workers run it again on the same installation, both times with the client's default
    arguments, as a restarted training job does. Each time every worker gets the exact sum or
    an error that says how to get a run id, never a wrong sum. (With a silent default run id,
    the second run's chunks had the seqs the first left in the cells: the switch answered
    them as retransmissions with the first run's sums, every element wrong.)"""
    ws = workers(4)
    ports = [w.port for w in ws]
    with running_switch(ports) as (sw, wire_dir):
        install(sw.pipeline, star_job_plan(1, ws, base=0, pool_size=64, mgid=1))
        for seed in (1, 2):
            error = rerun_with_default_arguments(wire_dir, ports, inputs(4, 4096, seed))
            if error is not None:
                assert "run id" in error and "inaemu job new-run" in error, error
                assert "\n" not in error


def rerun(
    wire_dir: str, ports: list[int], run: int, xs: list[npt.NDArray[np.int32]], timeout: float
) -> list[object]:
    """New workers of job 1 (W=64) with run id `run` sum `xs`: per worker, its exact sum (True)
    or the error it raised. A wrong sum fails."""
    cs = clients(wire_dir, ports, 1, 64, run=run, give_up_after=timeout, initial_rto=0.02)

    def one(c: InaClient, x: npt.NDArray[np.int32]) -> object:
        try:
            out, _ = c.allreduce_int32(x)
        except InaError as exc:
            return exc
        wrong = int(np.count_nonzero(out != exact(xs)))
        assert wrong == 0, f"{wrong} of {out.size} elements wrong, and no error"
        return True

    try:
        return run_threads([partial(one, c, x) for c, x in zip(cs, xs, strict=True)])
    finally:
        for c in cs:
            c.transport.close()


@pytest.mark.parametrize("size", [1000, 4096, 200_000])
def test_a_reused_run_id_is_refused_never_summed(size: int) -> None:
    """Issue 22's reproduction: two runs of job 1's four workers (W=64) with one explicit run
    id. Before the run check, with 4,096 elements (64 chunks, one per slot) the first run's
    results stayed READY in every cell and the second run's chunks were answered with them,
    every element wrong on every worker and no error; with 200,000 the second run's chunks
    were dropped as STALE and it timed out. Now no worker returns a sum: with 1,000 elements
    (16 chunks: the run check's cell still holds the first run's nonces) every worker
    refuses at once (`InaRunError`); longer first runs leave the run check's cell with other
    seqs or cleared bits, so the second run's chunks are dropped as STALE (a timeout that
    says a reused id is a cause) or answered with sums whose contrib is not this run's
    (refused)."""
    ws = workers(4)
    ports = [w.port for w in ws]
    with running_switch(ports) as (sw, wire_dir):
        install(sw.pipeline, star_job_plan(1, ws, base=0, pool_size=64, mgid=1))
        assert rerun(wire_dir, ports, 9, inputs(4, size, seed=1), 30.0) == [True] * 4
        second = rerun(wire_dir, ports, 9, inputs(4, size, seed=2), 2.0)
        settle(sw.pipeline)
    for got in second:
        assert isinstance(got, InaRunError | InaTimeoutError), got
        if size == 1000:
            assert isinstance(got, InaRunError), got
        text = str(got)
        assert "run id 9 was used before" in text or "used before on this installation" in text
        assert "\n" not in text
    packets_in, packets_accounted = accounted(sw.pipeline)
    assert packets_in == packets_accounted


def test_a_reused_run_id_after_an_abandoned_round_is_refused() -> None:
    """A worker of run 5 gives up mid-operation after the run (its contributions stay in the
    cells of the other set); then all workers run again with run id 5. The workers whose bits
    the run check's cell still holds get the first run's nonces back and refuse; the one that
    moved on finds its bit cleared (STALE) and times out: no wrong sum anywhere."""
    ws = workers(3)
    ports = [w.port for w in ws]
    with running_switch(ports) as (sw, wire_dir):
        install(sw.pipeline, star_job_plan(1, ws, base=0, pool_size=4, mgid=1))
        cs = clients(wire_dir, ports, 1, 4, run=5)
        xs = inputs(3, 3 * K, seed=3)
        assert all(np.array_equal(o, exact(xs)) for o in reduce_all(cs, xs))
        abandon_half_round(cs[0], sw.pipeline)
        for c in cs:
            c.transport.close()
        cs = clients(wire_dir, ports, 1, 4, run=5, give_up_after=2.0, initial_rto=0.02)

        def one(c: InaClient, x: npt.NDArray[np.int32]) -> object:
            try:
                return c.allreduce_int32(x)[0]
            except InaError as exc:
                return exc

        got = run_threads(
            [partial(one, c, x) for c, x in zip(cs, inputs(3, 3 * K, 4), strict=True)]
        )
        for c in cs:
            c.transport.close()
    assert isinstance(got[0], InaTimeoutError), got[0]
    assert all(isinstance(g, InaRunError) for g in got[1:]), got


def test_reinstall_with_the_same_run_id_starts_clean() -> None:
    """A job's workers (default run 0) leave a round half-done; the job is reinstalled
    (a new epoch, as the controller gives) over the same pool, and its new workers use run 0
    again: they get exactly their sums, not the old state's."""
    ws = workers(2)
    ports = [w.port for w in ws]
    with running_switch(ports) as (sw, wire_dir):
        first = star_job_plan(1, ws, base=0, pool_size=4, mgid=1, epoch=1)
        install(sw.pipeline, first)
        xs1 = inputs(2, 3 * K, seed=4)  # fewer than 2W chunks: run 0's seqs again below
        cs = clients(wire_dir, ports, 1, 4, run=0)
        assert all(np.array_equal(o, exact(xs1)) for o in reduce_all(cs, xs1))
        abandon_half_round(cs[1], sw.pipeline)
        for c in cs:
            c.transport.close()
        remove(sw.pipeline, first)
        install(sw.pipeline, star_job_plan(1, ws, base=0, pool_size=4, mgid=1, epoch=2))
        drops = list(sw.pipeline.ina_drops.packets)  # the abandoned worker's duplicates
        xs2 = inputs(2, 3 * K, seed=5)
        cs = clients(wire_dir, ports, 1, 4, run=0, give_up_after=10)
        assert all(np.array_equal(o, exact(xs2)) for o in reduce_all(cs, xs2))
        for c in cs:
            c.transport.close()
    assert sw.pipeline.ina_drops.packets == drops  # nothing of the new run dropped


def test_a_freed_pool_given_to_another_job_leaks_nothing() -> None:
    """Job 1 (ports 1-2) completes a run and leaves a half-finished round; it is removed and
    job 2 (ports 3-4, the same child indexes) gets the same pool. Job 2 gets its own sums."""
    ws = workers(4)
    with running_switch([w.port for w in ws]) as (sw, wire_dir):
        plan1 = star_job_plan(1, ws[:2], base=0, pool_size=4, mgid=1, epoch=1)
        install(sw.pipeline, plan1)
        xs1 = inputs(2, 4 * K, seed=6)
        cs = clients(wire_dir, [1, 2], 1, 4, run=7)
        assert all(np.array_equal(o, exact(xs1)) for o in reduce_all(cs, xs1))
        abandon_half_round(cs[0], sw.pipeline)
        for c in cs:
            c.transport.close()
        remove(sw.pipeline, plan1)
        install(sw.pipeline, star_job_plan(2, ws[2:], base=0, pool_size=4, mgid=1, epoch=2))
        xs2 = inputs(2, 4 * K, seed=7)
        cs = clients(wire_dir, [3, 4], 2, 4, run=7, give_up_after=10)
        assert all(np.array_equal(o, exact(xs2)) for o in reduce_all(cs, xs2))
        for c in cs:
            c.transport.close()


def test_chunk_counter_wraps_within_a_run_under_loss() -> None:
    """seq carries the chunk counter mod 2^16: a run longer than that wraps it, here in the
    middle of one operation, with loss (retransmissions matched across the wrap)."""
    ws = workers(3)
    with running_switch([w.port for w in ws], seed=9) as (sw, wire_dir):
        plan = star_job_plan(1, ws, base=0, pool_size=8, mgid=1)
        for w in ws:
            plan.tables.append(
                TableWrite(LOSS_TABLE, (w.port,), "set_loss", (loss_threshold(0.05),))
            )
        install(sw.pipeline, plan)
        cs = clients(wire_dir, [w.port for w in ws], 1, 8, run=0xBEEF, initial_rto=0.02)
        for c in cs:
            c.next_chunk = (1 << 16) - 13  # as if 65523 chunks had gone before in this run
        xs = inputs(3, 40 * K, seed=8)
        assert all(np.array_equal(o, exact(xs)) for o in reduce_all(cs, xs))
        assert sum(c.stats.retransmissions for c in cs) > 0
        assert cs[0].next_chunk == (1 << 16) + 27 + 1  # + 1: the run check's chunk
        for c in cs:
            c.transport.close()


class ScriptedTransport:
    """Answers every chunk the client sends with the results `answer` makes of it."""

    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.pending: list[npt.NDArray[np.void]] = []
        self.sent: list[npt.NDArray[np.void]] = []

    def send(self, payloads: npt.NDArray[np.void]) -> None:
        self.sent.append(payloads.copy())
        for rec in payloads:
            self.pending.extend(self.answer(rec))  # type: ignore[operator]

    def recv(self, timeout: float) -> npt.NDArray[np.void]:
        out = np.array(self.pending, dtype=INA_DTYPE)
        self.pending = []
        return out

    def close(self) -> None:
        pass


def _result(rec: npt.NDArray[np.void], seq: int, value: int) -> npt.NDArray[np.void]:
    out = rec.copy()
    out["ver_flags"] = (INA_VERSION << 4) | int(Flag.RESULT)
    out["seq"] = seq
    out["values"] = value
    return out


def test_results_of_other_runs_and_chunks_are_ignored() -> None:
    """Every chunk is first answered with a result of another run (same counter), and one
    with the right run but another chunk's counter: the client ignores both (foreign) and
    takes only its own run's result for that chunk."""

    def answer(rec: npt.NDArray[np.void]) -> list[npt.NDArray[np.void]]:
        seq = int(rec["seq"])
        other_run = seq ^ (1 << RUN_SHIFT)
        other_chunk = (seq & ~SEQ_CHUNK_MASK) | ((seq + 1) & SEQ_CHUNK_MASK)
        mine = seq & SEQ_CHUNK_MASK
        return [_result(rec, other_run, -1), _result(rec, other_chunk, -2), _result(rec, seq, mine)]

    t = ScriptedTransport(answer)
    c = InaClient(t, job_id=3, window=2, run=0x1234, check_run=False)  # no sums to check
    out, _ = c.allreduce_int32(np.zeros(5 * K, dtype=np.int32))
    assert np.array_equal(out.reshape(5, K), np.repeat(np.arange(5), K).reshape(5, K))
    sent = np.concatenate([s["seq"] for s in t.sent])
    assert sent.tolist() == [seq_field(0x1234, i) for i in range(5)]
    assert c.stats.foreign_packets == 2 * 5 and c.stats.results == 5


def test_run_id_is_checked_and_restarts_the_numbering() -> None:
    t = ScriptedTransport(lambda rec: [])
    with pytest.raises(ValueError, match=r"run must be 0\.\.65535"):
        InaClient(t, job_id=1, window=4, run=1 << 16)
    c = InaClient(t, job_id=1, window=4)
    assert (c.run, c.next_chunk) == (None, 0)  # no default: nothing goes out without one
    with pytest.raises(InaError, match="no run id"):
        c.allreduce_int32(np.zeros(K, dtype=np.int32))
    assert t.sent == []
    c.next_chunk = 17
    c.start_run(5)
    assert (c.run, c.next_chunk) == (5, 0)
    with pytest.raises(ValueError, match="run must be"):
        c.start_run(-1)


def _ddp_rank(rank: int, tcp_port: int, q: Any) -> None:
    import torch.distributed as dist

    from inaemu.hostlib.ddp import InaHookState

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{tcp_port}", rank=rank, world_size=2
    )
    try:
        runs = []
        for _ in range(2):  # a new state: a new run, the same on both ranks
            client = InaClient(ScriptedTransport(lambda rec: []), job_id=1, window=4)
            client.next_chunk = 5
            state = InaHookState(client)
            runs.append((state.run, client.run, client.next_chunk))
        q.put((rank, runs))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_ddp_hook_state_shares_one_run_id_between_ranks() -> None:
    """Rank 0 draws the run id and broadcasts it: every rank's client starts the same run."""
    pytest.importorskip("torch", reason="PyTorch not installed")
    import multiprocessing as mp
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        tcp_port = int(s.getsockname()[1])
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_ddp_rank, args=(r, tcp_port, q)) for r in range(2)]
    for p in procs:
        p.start()
    got = dict(q.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    assert got[0] == got[1]
    for state_run, client_run, next_chunk in got[0]:
        assert state_run == client_run and 0 <= client_run <= 0xFFFF and next_chunk == 0


def test_ddp_hook_state_with_an_explicit_run_needs_no_process_group() -> None:
    pytest.importorskip("torch", reason="PyTorch not installed")
    from inaemu.hostlib.ddp import InaHookState

    client = InaClient(ScriptedTransport(lambda rec: []), job_id=1, window=4)
    InaHookState(client, run=77)
    assert client.run == 77
    with pytest.raises(RuntimeError, match="init_process_group"):
        InaHookState(client)


def test_controller_continues_the_epochs_it_is_given() -> None:
    """A restarted controller handed the last epochs gives the next installation a new one."""
    from inaemu.controller.jobs import JobSpec
    from inaemu.controller.p4rt import Controller
    from inaemu.topology.builders import star

    ctl = Controller(star(2), epochs={"s1": 41})
    assert ctl.jobs.plan_add(JobSpec(1, ("h1", "h2"), pool_size=4)).epochs == {"s1": 42}


def _job_state(tmp_path: Path, **job: object) -> tuple[Path, Path]:
    """A star(2) topology and a job state file with job 1 on it, as `job add` writes it (no
    switch needed: `job new-run` and `job list` read only the file)."""
    topo = tmp_path / "t.json"
    star(2).save(topo)
    record = {
        "job_id": 1,
        "workers": ["h1", "h2"],
        "pool_size": 4,
        "n_trees": 1,
        "pools": {"s1": [0, 4]},
        "mgids": [{"s1": 1}],
        "epochs": {"s1": 1},
    }
    state = tmp_path / "t.json.jobs.json"
    state.write_text(json.dumps({"jobs": [record | job], "epochs": {"s1": 1}}))
    return topo, state


def test_job_new_run_issues_each_run_id_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`inaemu job new-run` prints the next run id of the job's installation and records it in
    the job state file: 1, 2, 3 across commands (a state file from before run ids starts at
    1), and a command that rewrites the file (here `job new-run` of another job) keeps them."""
    topo, state = _job_state(tmp_path)
    argv = ["job", "new-run", "-t", str(topo), "--job", "1"]
    issued = []
    for _ in range(3):
        assert cli.main(argv) == 0
        issued.append(capsys.readouterr().out)
    assert issued == ["1\n", "2\n", "3\n"]
    assert json.loads(state.read_text())["jobs"][0]["last_run"] == 3
    assert cli.main(["job", "list", "-t", str(topo)]) == 0
    assert "job 1: workers h1,h2" in capsys.readouterr().out


def test_job_new_run_under_concurrent_commands(tmp_path: Path) -> None:
    """Eight `job new-run` commands at once (threads: each opens the state file itself, as
    processes do) issue eight different run ids: the commands hold the file in turn."""
    topo, state = _job_state(tmp_path)
    argv = ["job", "new-run", "-t", str(topo), "--job", "1"]
    codes = run_threads([partial(cli.main, argv) for _ in range(8)])
    assert codes == [0] * 8
    assert json.loads(state.read_text())["jobs"][0]["last_run"] == 8


@pytest.mark.parametrize(
    ("job", "last_run", "message"),
    [
        (2, 0, "job 2 is not installed (`inaemu job add` first)"),
        (1, 0xFFFF, "job 1 has used all 65535 run ids of its installation; reinstall it"),
    ],
    ids=["unknown-job", "exhausted"],
)
def test_job_new_run_refusals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], job: int, last_run: int, message: str
) -> None:
    topo, state = _job_state(tmp_path, last_run=last_run)
    before = state.read_text()
    assert cli.main(["job", "new-run", "-t", str(topo), "--job", str(job)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("inaemu job: ") and message in err and err.count("\n") == 1, err
    assert state.read_text() == before


def test_reinstallation_numbers_runs_from_one_again() -> None:
    """`next_run` counts per installation: a reinstalled job (a new epoch on every switch)
    starts again from 1, which its new epoch tells apart from the old installation's 1."""
    from inaemu.controller.jobs import JobManager, JobSpec

    jobs = JobManager(star(2))
    spec = JobSpec(1, ("h1", "h2"), pool_size=4)
    jobs.commit_add(jobs.plan_add(spec))
    assert [jobs.next_run(1) for _ in range(3)] == [1, 2, 3]
    jobs.commit_remove(1)
    record = jobs.plan_add(spec)
    jobs.commit_add(record)
    assert record.epochs == {"s1": 2} and jobs.next_run(1) == 1
