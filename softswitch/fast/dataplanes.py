"""Which data plane a softswitch runs: `--dataplane fast` (default) or `reference`.

    pipeline = make_pipeline(args.dataplane, seed=args.seed)

`fast` is `FastPipeline` (compiled with numba, softswitch/fast/), `reference` the Python
`Pipeline` (softswitch/pipeline.py). numba is imported only when the fast one is made.
"""

from __future__ import annotations

from inaemu.softswitch.pipeline import Pipeline

DATAPLANES = ("fast", "reference")
DEFAULT_DATAPLANE = "fast"


def make_pipeline(dataplane: str = DEFAULT_DATAPLANE, *, seed: int = 0) -> Pipeline:
    if dataplane == "reference":
        return Pipeline(seed=seed)
    if dataplane == "fast":
        from inaemu.softswitch.fast.pipeline import FastPipeline

        return FastPipeline(seed=seed)
    raise ValueError(f"unknown data plane {dataplane!r}: choose {' or '.join(DATAPLANES)}")


def warm_up(dataplane: str) -> str:
    """Make `dataplane` ready to take frames without a pause (the fast one loads its compiled
    code from numba's cache, or compiles it); how that went, as the READY line's fields, e.g.
    `dataplane=fast warmup=cache:0.21s`."""
    if dataplane != "fast":
        return f"dataplane={dataplane}"
    from inaemu.softswitch.fast.pipeline import warm_up as warm_up_fast

    return f"dataplane=fast warmup={warm_up_fast()}"
