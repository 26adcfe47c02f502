"""The softswitch's compiled engine (numba): `Pipeline(compiled=True)` runs a pipeline's state
through one compiled function per batch. `softswitch/reference.py` stays the reference that it
must agree with frame for frame and counter for counter (docs/architecture.md)."""
