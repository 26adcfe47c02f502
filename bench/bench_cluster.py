"""Training across machines as the namespace test runs it: iteration time of the example's DDP
training through the switch (INA) against gloo on the same machines and switch (root).

    sudo .venv/bin/python bench/bench_cluster.py [--switch softswitch bmv2] [--steps 40]
        [--machines 2] [--ranks 2] [--backends gloo ina-fixedpoint ina-sketch] [--json F]

Per switch (the softswitch on AF_PACKET; simple_switch_grpc where bmv2 is installed): the
"machines" are network namespaces cabled by veths to the switch's namespace, set up only with
the commands `inaemu cluster init` prints (tests/netns_cluster.py), and torchrun starts
examples/train_ddp.py on each with every backend in turn, `--steps` iterations. Printed per
backend: the median iteration (forward, backward with the allreduce, optimizer step; the
slowest rank's), the median allreduce within it, the first iteration (its one-time warm-up),
and torchrun's wall time from start to the last machine's exit.

What bounds these numbers is this machine's CPU, not a link: every rank, every torchrun agent
and the switch share its cores (2 here), and the veths are unshaped. gloo's allreduce is two
kernel TCP rings over the switch's routes; INA's is one round trip through the switch per
chunk, whose every packet a switch in user space handles on those same cores. Prints a table;
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inaemu.conformance.bmv2_target import bmv2_available
from inaemu.p4.build import compile_p4
from tests.bmv2_grpc import grpc_missing
from tests.netns import namespaces_missing
from tests.netns_cluster import Machines, Training


def row(kind: str, t: Training) -> dict[str, object]:
    run = t.run
    later = run.step_seconds[1:] or run.step_seconds
    reduce = run.allreduce_seconds[1:] or run.allreduce_seconds
    return {
        "switch": kind,
        "backend": t.backend,
        "ok": all(code == 0 for code in t.exits.values()),
        "iterations": len(run.iterations),
        "step_ms": statistics.median(later) * 1e3,
        "allreduce_ms": statistics.median(reduce) * 1e3,
        "first_ms": (run.first_seconds or 0.0) * 1e3,
        "wall_s": t.seconds,
        "final_loss": run.loss[-1] if run.loss else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--switch", nargs="+", default=["softswitch", "bmv2"])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--bmv2-steps", type=int, default=8, help="bmv2 handles ~1 iteration/s")
    ap.add_argument("--machines", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=2, help="torchrun's --nproc-per-node")
    ap.add_argument("--backends", nargs="+", default=["gloo", "ina-fixedpoint", "ina-sketch"])
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args()
    missing = namespaces_missing()
    if missing is not None:
        print(f"bench_cluster: {missing}")
        return 0
    rows = []
    print(f"# {platform.node()}: {args.machines} machines x {args.ranks} ranks, example training")
    for kind in args.switch:
        program = ""
        if kind == "bmv2":
            why = grpc_missing() or bmv2_available()
            if why is not None:
                print(f"# bmv2 skipped: {why}")
                continue
            program = str(compile_p4())
        steps = args.bmv2_steps if kind == "bmv2" else args.steps
        with tempfile.TemporaryDirectory(prefix="inaemu-cluster-") as tmp:
            machines = Machines(
                Path(tmp), kind, machines=args.machines, ranks=args.ranks, program=program
            )
            with machines:
                for backend in args.backends:
                    rows.append(row(kind, machines.train(backend, steps=steps)))
                    r = rows[-1]
                    print(
                        f"{kind:10} {backend:15} ok={r['ok']!s:5} it={r['iterations']:3} "
                        f"step {r['step_ms']:7.1f} ms  allreduce {r['allreduce_ms']:7.1f} ms  "
                        f"first {r['first_ms']:7.1f} ms  wall {r['wall_s']:5.1f} s",
                        flush=True,
                    )
    gloo = {r["switch"]: r for r in rows if r["backend"] == "gloo"}
    for r in rows:
        base = gloo.get(str(r["switch"]))
        if base is not None and r is not base:
            ratio = float(r["step_ms"]) / float(base["step_ms"])  # type: ignore[arg-type]
            print(f"# {r['switch']}: {r['backend']} iteration {ratio:.2f}x gloo's")
    print("# bound: this machine's CPU (ranks, agents and switch share its cores; veths unshaped)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
