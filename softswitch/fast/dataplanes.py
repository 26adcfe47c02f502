"""Which data plane a softswitch runs: `--dataplane fast` (default) or `reference`.

    pipeline = make_pipeline(args.dataplane, seed=args.seed)

`fast` is `Pipeline(compiled=True)` (the compiled engine, softswitch/fast/), `reference`
`Pipeline(compiled=False)` (softswitch/reference.py): the flag's two spellings of the one
choice the code calls `compiled`. numba is imported only when the fast one is made.
"""

from __future__ import annotations

from inaemu.softswitch.pipeline import Pipeline

DATAPLANES = ("fast", "reference")
DEFAULT_DATAPLANE = "fast"


def compiled(dataplane: str) -> bool:
    """Whether `dataplane` (a --dataplane value) is the compiled one."""
    if dataplane not in DATAPLANES:
        raise ValueError(f"unknown data plane {dataplane!r}: choose {' or '.join(DATAPLANES)}")
    return dataplane == "fast"


def make_pipeline(dataplane: str = DEFAULT_DATAPLANE, *, seed: int = 0) -> Pipeline:
    return Pipeline(seed=seed, compiled=compiled(dataplane))


def warm_up(dataplane: str) -> str:
    """What a switch process needs loaded, through the one warm-up (`common.jit.warm_up`):
    `dataplane` ready to take frames without a pause (the fast one loads its compiled code
    from numba's cache, or compiles it); how that went, as the READY line's fields, e.g.
    `dataplane=fast warmup=cache:0.21s`."""
    if not compiled(dataplane):
        return f"dataplane={dataplane}"
    from inaemu.common import jit
    from inaemu.softswitch.fast import engine

    return f"dataplane=fast warmup={jit.warm_up(engine.load)}"
