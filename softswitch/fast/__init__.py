"""The softswitch's compiled data plane (numba): `FastPipeline`, a `Pipeline` whose packets run
through one compiled function per batch. `softswitch/pipeline.py` stays the reference that it
must agree with frame for frame and counter for counter (docs/architecture.md)."""
