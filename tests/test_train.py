"""`inaemu train`: the launcher trains examples/train_ddp.py with DDP through every backend.

The embedded run (no root) brings up a softswitch, installs the job and starts the example
4 times per backend (the README's training, 4 workers, 100 iterations): gloo, INA with fixed
point and with the sketch, the ring with INCEPTIONN; it checks the records, the plot, and that
gloo's and the INA backends' losses are, bit for bit, those of the training replayed in one
process with the same sums (bench/train_numerics.py: gloo's float32 ring, the codecs against
the reference switch), while INCEPTIONN's lossy ring differs, a little. The replay then
pins what the README says of the losses: fixed point's summed gradient stays within its
error bound, and its losses within the first-order bound that follows from it until a ReLU
unit sits at its kink. The Mininet run (root, Mininet) trains over the kernel's UDP and TCP
through the switches. The rest needs no network: the environment contract, backend names,
the records' merge, refusals.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from inaemu.cli.train.launcher import (
    BackendRun,
    main,
    merge_records,
    parse_backends,
    time_label,
)
from inaemu.hostlib.launch import EVERY_BACKEND, Launch, LaunchError, parse_backend
from tests.test_mininet import assert_removed, in_root_ns, mininet_ready  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_ddp.py"
STEPS = 4


# ---------------------------------------------------------------------- no network


def test_the_launch_travels_through_the_environment() -> None:
    launch = Launch(
        rank=1,
        world_size=2,
        backend="ring-inceptionn",
        rendezvous="file:///tmp/x",
        run=7,
        timeout=12.5,
        peers="02:00:00:00:00:01/10.0.0.1,02:00:00:00:00:02/10.0.0.2",
    )
    env = launch.to_env()
    assert env["INAEMU_RANK"] == "1" and env["RANK"] == "1" and env["WORLD_SIZE"] == "2"
    assert env["INAEMU_RUN"] == "7" and env["INAEMU_TIMEOUT"] == "12.5"
    assert Launch.from_env(env) == launch
    assert launch.parsed_backend == parse_backend("ring-inceptionn")
    assert parse_backend("ina-sketch-compact").codec == "sketch-compact"


def test_a_script_outside_the_launcher_is_told_how_to_start() -> None:
    with pytest.raises(LaunchError, match="inaemu train SCRIPT"):
        Launch.from_env({})
    env = Launch(rank=0, world_size=2, backend="gloo", rendezvous="file:///x").to_env()
    with pytest.raises(LaunchError, match=r"INAEMU_RANK=2 is not within 0\.\.1"):
        Launch.from_env({**env, "INAEMU_RANK": "2"})
    with pytest.raises(LaunchError, match="INAEMU_RUN='x': expected int"):
        Launch.from_env({**env, "INAEMU_RUN": "x"})
    with pytest.raises(LaunchError, match="INAEMU_BACKEND"):
        Launch.from_env({**env, "INAEMU_BACKEND": "ina"})
    # the example itself, run by hand: one line saying what to run, no traceback of ours
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("INAEMU_")},
    )
    assert proc.returncode != 0 and "inaemu train SCRIPT" in proc.stderr


def test_backend_names() -> None:
    assert [b.name for b in parse_backends("all")] == list(EVERY_BACKEND)
    assert [b.kind for b in parse_backends("gloo,hd-plain")] == ["gloo", "hd"]
    for text, message in [
        ("ina-int32", "INA trains with fixedpoint"),
        ("tree-plain", "unknown host collective 'tree'"),
        ("ring-int32", "a host collective trains with plain"),
        ("gloo,gloo", "name each backend once"),
        ("ina", "use gloo, ina-CODEC"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_backends(text)


def test_records_of_every_rank_are_merged(tmp_path: Path) -> None:
    def line(rank: int, it: int, loss: float, acc: float | None, step: float) -> str:
        rec = {"rank": rank, "iteration": it, "loss": loss, "accuracy": acc}
        return json.dumps(rec | {"step_seconds": step, "allreduce_seconds": step / 2})

    (tmp_path / "rank0.jsonl").write_text(
        "\n".join(line(0, i, 1.0 + i, 0.5, 0.1) for i in range(3)) + "\n"
    )
    # rank 1 died in its third iteration, its last line cut short
    (tmp_path / "rank1.jsonl").write_text(
        line(1, 0, 3.0, None, 0.3) + "\n" + line(1, 1, 4.0, None, 0.1) + '\n{"rank": 1, "it'
    )
    run = BackendRun("gloo", 1)
    merge_records(run, [tmp_path / "rank0.jsonl", tmp_path / "rank1.jsonl"])
    assert run.iterations == [0, 1]
    assert run.loss == [2.0, 3.0]  # the mean over the ranks
    assert run.accuracy == [0.5, 0.5]  # rank 0's
    assert run.step_seconds == [0.3, 0.1]  # the slowest rank's
    # the first iteration's warm-up is apart, not in the training time
    assert run.first_seconds == 0.3
    assert run.time == pytest.approx([0.0, 0.1])
    assert time_label(run) == "gloo (first iteration: 0.30 s)"


def test_bad_command_lines_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in [
        (["nosuch.py"], "nosuch.py: no such script"),
        (["--backend", "ina-int32", str(EXAMPLE)], "INA trains with"),
        (["--workers", "1", str(EXAMPLE)], "--workers must be at least 2"),
        (["--bw", "10", str(EXAMPLE)], "--bw and --switch are for --mininet"),
        (["--mininet", "--bw", "0", str(EXAMPLE)], "--bw 0: Mininet shapes 0 < bw <= 1000"),
        (["--prefix", "x-", str(EXAMPLE)], "--prefix is for --mininet"),
        (["--mininet", "--prefix", "a/b", str(EXAMPLE)], "--prefix 'a/b': letters, digits"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("inaemu train: ") and message in err, err
        assert "Traceback" not in err
    # a schedule that does not run on the topology: refused before anything starts
    argv = ["--backend", "hdrm-plain", "--out", str(tmp_path), str(EXAMPLE)]
    assert main(argv) == 2
    assert "hdrm does not run on a star topology" in capsys.readouterr().err


# ---------------------------------------------------------------------- training


def check_training(
    out: Path, backends: list[str], steps: int = STEPS, workers: int = 2
) -> dict[str, dict[str, Any]]:
    """The records and the plot exist and hold every iteration of every backend."""
    summary = json.loads((out / "train.json").read_text())
    assert (out / "train.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs: dict[str, dict[str, Any]] = summary["backends"]
    assert list(runs) == backends
    for name, run in runs.items():
        assert run["error"] == "" and run["iterations"] == list(range(steps)), name
        for key in ("loss", "accuracy", "step_seconds", "allreduce_seconds", "time"):
            assert len(run[key]) == steps and None not in run[key], (name, key)
        pairs = zip(run["allreduce_seconds"], run["step_seconds"], strict=True)
        assert all(0 < a <= s for a, s in pairs), name
        for rank in range(workers):
            assert (out / "records" / name / f"rank{rank}.jsonl").exists()
    return runs


def test_every_backend_trains_on_the_embedded_network(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], numerics: ModuleType
) -> None:
    """The README's training as written there (4 workers, the example's 100 iterations)."""
    pytest.importorskip("matplotlib", reason="the plot needs matplotlib")
    example = numerics.load_example()
    argv = ["--backend", "all", "--workers", "4", "--out", str(tmp_path)]
    assert main([*argv, str(EXAMPLE)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "ina-fixedpoint: 4 workers, run 2" in out
    assert "times are the emulator's, not a network's" in out
    runs = check_training(tmp_path, list(EVERY_BACKEND), example.STEPS, 4)
    gloo = runs["gloo"]["loss"]
    # the same initial weights and batches: iteration 0's loss is computed before any
    # allreduce, identical for every backend
    assert {run["loss"][0] for run in runs.values()} == {gloo[0]}
    # gloo's and INA's losses are the replay's, bit for bit: the network delivers exactly the
    # codec's sum (what the reference switch sums), and every run is deterministic. A lost,
    # misplaced or unaveraged bucket, a codec off by an ulp, would not be.
    for name, backend in numerics.BACKENDS.items():
        replayed = [s.loss for s in numerics.replay(example, name, workers=4)]
        assert runs[backend]["loss"] == replayed, backend
    # INCEPTIONN drops what is below its bound (2^-10) at every hop: a lossy sum, so the
    # losses leave gloo's after the first update
    ring = runs["ring-inceptionn"]["loss"]
    gaps = [abs(a - b) for a, b in zip(ring, gloo, strict=True)]
    assert gaps[0] == 0 and gaps[1] > 0
    # every backend's row of the README's table is this run's (deterministic, see above)
    assert readme_cells("ring-inceptionn")[2] == f"{max(gaps):.2g}"
    for backend, run in runs.items():
        final = [f"{run['loss'][-1]:.4f}", f"{run['accuracy'][-1]:.3f}"]
        assert readme_cells(backend)[:2] == final, backend


def readme_cells(backend: str) -> list[str]:
    """The README training table's cells of `backend` after its name: final loss, accuracy,
    max |loss - gloo|, ..."""
    readme = (ROOT / "README.md").read_text()
    row = re.search(rf"^\| {re.escape(backend)} \|(.*)\|$", readme, re.MULTILINE)
    assert row is not None, f"README's training table has no row {backend}"
    return [c.strip() for c in row.group(1).split("|")]


def test_fixed_point_trains_as_gloo_until_a_relu_sits_at_its_kink(numerics: ModuleType) -> None:
    """What the README says of the INA backends' losses, on the example's training as the
    launcher runs it (the test above: the replay is that training, bit for bit)."""
    example = numerics.load_example()
    gloo = numerics.replay(example, "gloo")
    fixed = numerics.replay(example, "fixedpoint")
    # every iteration's summed gradient is within fixed point's error bound of the exact sum
    assert max(s.sum_ratio for s in fixed) <= 1
    gaps = numerics.gaps(gloo, fixed)
    limits = numerics.gap_limits(gloo, fixed)
    flip = numerics.first_flip(gloo, fixed)
    # the losses stay within the first-order bound that follows from the codec's (and
    # float32's) bound on the sums, through the iteration at which some ReLU unit is on in
    # one run and off in the other: its gradient differs by a finite amount from then on
    end = len(gaps) if flip is None else flip + 1
    over = [(t, gaps[t], limits[t]) for t in range(end) if gaps[t] > limits[t]]
    assert not over, over
    # the README's figures and its explanation are this training's
    sketch = numerics.gaps(gloo, numerics.replay(example, "sketch"))
    for backend, g in (("ina-fixedpoint", gaps), ("ina-sketch", sketch)):
        worst = max(range(len(g)), key=g.__getitem__)
        assert readme_cells(backend)[2] == f"{g[worst]:.2e} (iteration {worst})", backend
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"at iteration {flip}, one ReLU unit" in readme


def test_a_sum_off_its_bound_breaks_the_loss_bound(numerics: ModuleType) -> None:
    """The check above can fail: fixed point's sum made 2^-12 too large (far beyond its
    bound, still a plausible-looking training) leaves the first-order bound at once."""
    example = numerics.load_example()
    exact = numerics.summation("fixedpoint")

    def biased(xs: Sequence[npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
        total: npt.NDArray[np.float32] = exact(xs) * np.float32(1 + 2**-12)
        return total

    steps = 10
    gloo = numerics.replay(example, "gloo", steps=steps)
    off = numerics.replay(example, "fixedpoint", steps=steps, reduce=biased)
    assert max(s.sum_ratio for s in off) > 1
    assert numerics.first_flip(gloo, off) is None
    assert numerics.parted(gloo, off) is not None


def test_a_full_disk_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22, item 13: --out on a full disk. The plot is the largest file and the last,
    written by PIL through matplotlib: its OSError (ENOSPC) was a traceback."""
    pytest.importorskip("torch", reason="PyTorch not installed")
    pytest.importorskip("matplotlib", reason="the plot needs matplotlib")
    from matplotlib.figure import Figure

    def full(self: Figure, path: Any, **_: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Figure, "savefig", full)
    argv = ["--backend", "gloo", "--workers", "2", "--out", str(tmp_path)]
    assert main([*argv, str(EXAMPLE), "--steps", str(STEPS)]) == 1
    err = capsys.readouterr().err
    assert err == f"inaemu train: cannot write {tmp_path}: No space left on device\n"
    assert (tmp_path / "train.json").exists()  # what was written before it stays


@pytest.mark.usefixtures("mininet_ready", "in_root_ns")
def test_training_on_mininet(tmp_path: Path) -> None:
    """INA over the kernel's UDP and the ring over TCP, through the softswitch on Mininet."""
    pytest.importorskip("torch", reason="PyTorch not installed")
    pytest.importorskip("matplotlib", reason="the plot needs matplotlib")
    backends = ["ina-fixedpoint", "ring-inceptionn"]
    argv = ["--mininet", "--backend", ",".join(backends), "--workers", "2", "--out", str(tmp_path)]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "inaemu.cli",
            "train",
            *argv,
            str(EXAMPLE),
            "--steps",
            str(STEPS),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Mininet, softswitch switches" in proc.stdout
    runs = check_training(tmp_path, backends)
    assert runs["ina-fixedpoint"]["loss"][0] == runs["ring-inceptionn"]["loss"][0]
    # every worker process ran on a Mininet host, and is gone with the network
    record = json.loads((tmp_path / "mininet" / "build" / "network.json").read_text())
    assert sorted({p["host"] for p in record["processes"]}) == ["h1", "h2"]
    assert_removed(tmp_path / "mininet")


def test_a_failing_worker_is_named_and_the_others_stopped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank 1 fails at once while rank 0 would run for a minute: the launcher names rank 1,
    its message and its log, stops rank 0 and the switch, and exits 1."""
    script = tmp_path / "fails.py"
    script.write_text(
        "import os, sys, time\n"
        "if os.environ['INAEMU_RANK'] == '1':\n"
        "    sys.exit('rank 1: the data set is missing')\n"
        "time.sleep(60)\n"
    )
    started = time.monotonic()
    assert main(["--backend", "gloo", "--workers", "2", "--out", str(tmp_path), str(script)]) == 1
    assert time.monotonic() - started < 30
    captured = capsys.readouterr()
    assert "gloo: FAILED: rank 1 exited with 1: rank 1: the data set is missing" in captured.out
    assert str(tmp_path / "logs" / "gloo" / "rank1.log") in captured.out
    assert captured.err.startswith("inaemu train: gloo failed")


def test_a_script_that_refuses_its_arguments_stops_the_launcher(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Launcher options after the script are the script's (torchrun's rule); a script that
    refuses them on every rank (argparse: exit status 2) stops the launcher at the first
    backend, in one line with the script's own message, instead of trying every backend."""
    script = tmp_path / "refuses.py"
    script.write_text("import argparse\nargparse.ArgumentParser().parse_args()\n")
    argv = ["--backend", "gloo,ina-fixedpoint", "--workers", "2", "--out", str(tmp_path)]
    assert main([*argv, str(script), "--workers", "4"]) == 2
    captured = capsys.readouterr()
    assert "  gloo: 2 workers, run 1" in captured.out, captured.out
    assert "  ina-fixedpoint: 2 workers" not in captured.out, captured.out
    [line] = captured.err.splitlines()
    assert line == (
        "inaemu train: refuses.py refused its arguments '--workers 4' on every rank (gloo: "
        "exit status 2): refuses.py: error: unrecognized arguments: --workers 4; --workers is "
        "the launcher's: put launcher options before the script (inaemu train [OPTIONS] "
        "SCRIPT [SCRIPT ARGS]); no other backend was run"
    ), line


def test_the_example_is_written_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`inaemu train --example FILE`: the example, shipped in the package, for an installed
    user who has no checkout (tests/test_packaging.py trains with it from a wheel)."""
    out = tmp_path / "my_train.py"
    assert main(["--example", str(out)]) == 0
    assert out.read_text() == EXAMPLE.read_text()
    assert f"wrote {out}" in capsys.readouterr().out
    assert main(["--example", str(tmp_path / "build" / "t.py")]) == 0  # its folder is made
    assert (tmp_path / "build" / "t.py").read_text() == EXAMPLE.read_text()
    capsys.readouterr()
    for argv, message in [
        (["--example", str(out)], f"--example {out}: exists; give a new file name"),
        (["--example", str(out / "x.py")], f"--example {out / 'x.py'}: "),  # under a file
        (["--example", str(tmp_path / "y.py"), str(EXAMPLE)], "give it alone"),
        ([], "give the training script: inaemu train [OPTIONS] SCRIPT"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("inaemu train: ") and message in err, err
