"""Training across machines, with machines as network namespaces (root): two "machines" of
two local ranks each, cabled by veths to a switch in a namespace of its own, the softswitch on
AF_PACKET and, where bmv2 is installed, simple_switch_grpc. Everything runs as a user runs it:
`inaemu cluster init` and then the commands it prints, each where it says
(`tests.netns_cluster`), with torchrun starting examples/train_ddp.py on every machine.

Per switch: the example trains through the switch (ina-fixedpoint) and with gloo over the
same switch's routes; both runs' losses are, bit for bit, those of the training replayed in
one process (bench/train_numerics.py), as `inaemu train`'s are. Then a machine dies
mid-training (every process in its namespace SIGKILLed), under INA and under gloo: each rank
of the other machine ends with one line naming itself and the allreduce that failed, within
the cluster's timeout and a few seconds of torchrun's, not a hang; the same torchrun lines run
again, on the same installation, with nothing else changed: the ranks draw a new run id, and
train; and one rank killed under `--max-restarts 1` has torchrun restart every rank, which
draw a new run id and train to the replay's losses.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from inaemu.conformance.bmv2_target import bmv2_available
from inaemu.p4.build import compile_p4
from tests.bmv2_grpc import grpc_missing
from tests.netns import namespaces_missing
from tests.netns_cluster import Machines, Training

NS_MISSING = namespaces_missing()
pytestmark = pytest.mark.skipif(NS_MISSING is not None, reason=f"machines: {NS_MISSING}")

# bmv2 (a default build, logging compiled in) forwards a few thousand packets a second here:
# an iteration's 2,044 chunks take about a second
STEPS = {"softswitch": 20, "bmv2": 6}
# The cluster's timeout: seconds without progress before a rank gives up. bmv2 on this busy
# 2-core machine loses about 3 % of what the machines send before its pipeline sees it (the
# switch side's veths received it all; docs/cluster.md), and a burst of such losses, each
# recovered by a retransmission after its timer, has left ranks without progress for 5 s.
TIMEOUT = {"softswitch": 5.0, "bmv2": 20.0}
TEARDOWN = 10.0  # seconds torchrun may take, after its ranks fail, to stop and exit


@pytest.fixture(params=["softswitch", "bmv2"])
def machines(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Machines]:
    pytest.importorskip("torch", reason="PyTorch not installed")
    program = ""
    if request.param == "bmv2":
        missing = grpc_missing() or bmv2_available()
        if missing is not None:
            pytest.skip(f"bmv2: {missing}")
        program = str(compile_p4())
    with Machines(tmp_path, request.param, timeout=TIMEOUT[request.param], program=program) as m:
        yield m


def tails(t: Training) -> str:
    """The end of every machine's output, for a failed assertion's message."""
    return "\n".join(f"===== {name}:\n{out[-2500:]}" for name, out in t.output.items())


def ok(t: Training) -> None:
    assert all(code == 0 for code in t.exits.values()), tails(t)


def test_torchrun_on_two_machines_through_one_switch(
    machines: Machines, numerics: ModuleType
) -> None:
    steps = STEPS[machines.kind]
    example = numerics.load_example()
    ina = machines.train("ina-fixedpoint", steps=steps)
    ok(ina)
    gloo = machines.train("gloo", steps=steps)
    ok(gloo)
    assert ina.run.iterations == gloo.run.iterations == list(range(steps))
    for t, name in ((ina, "fixedpoint"), (gloo, "gloo")):
        replayed = [s.loss for s in numerics.replay(example, name, workers=4, steps=steps)]
        assert t.run.loss == replayed, t.backend
    # and so INA's losses are gloo's to float32's rounding of the loss (no ReLU at its kink
    # in these iterations: `numerics.first_flip`); 6.0e-8 at most here
    gaps = [abs(a - b) for a, b in zip(ina.run.loss, gloo.run.loss, strict=True)]
    assert max(gaps) <= 2 * 2**-24 * max(gloo.run.loss), gaps
    print(  # the iteration times docs/cluster.md quotes (bench/bench_cluster.py measures more)
        f"{machines.kind}: median step ina-fixedpoint "
        f"{sorted(ina.run.step_seconds)[steps // 2] * 1e3:.1f} ms, gloo "
        f"{sorted(gloo.run.step_seconds)[steps // 2] * 1e3:.1f} ms"
    )

    # a machine dies mid-training: the other's ranks each say so in one line, in bounded time
    for backend, said in (
        ("ina-fixedpoint", ["job 1: no result for", "every worker of the job alive?"]),
        ("gloo", ["gloo's allreduce failed: ", "by peer"]),  # reset, or closed
    ):
        died = machines.train(backend, steps=10_000, kill="m2", kill_after=2, limit=180)
        assert died.faulted_at is not None, tails(died)
        assert died.exits["m1"] not in (0, None), tails(died)
        waited = died.ended["m1"] - died.faulted_at
        bound = TIMEOUT[machines.kind] + TEARDOWN
        assert waited < bound, f"{backend}: m1 ended {waited:.1f} s after m2 died"
        out = died.output["m1"]
        for rank in (0, 1):
            line = next(ln for ln in out.splitlines() if f"rank {rank} on m1 ({backend}): " in ln)
            assert all(s in line for s in said), line
        assert "[rank0]: Traceback" not in out and "[rank1]: Traceback" not in out, out

    # the same lines again, on the same installation: a new run id, drawn by the ranks
    again = machines.train("ina-fixedpoint", steps=3)
    ok(again)
    assert again.run.iterations == [0, 1, 2]

    # a rank crashes: torchrun (--max-restarts 1) restarts every rank, which draw a new run id
    # and train from the start, to the replay's losses
    restarted = machines.train(
        "ina-fixedpoint", steps=steps, kill="m2", one_rank=True, kill_after=2, restarts=1
    )
    ok(restarted)
    assert restarted.faulted_at is not None
    assert "exitcode: -9" in restarted.output["m2"]  # the rank torchrun saw die
    replayed = [s.loss for s in numerics.replay(example, "fixedpoint", workers=4, steps=steps)]
    assert restarted.run.loss == replayed
