"""Settings shared by every test module."""

from __future__ import annotations

from hypothesis import settings

# No per-example deadline: CI machines are shared and slow at times, and a property test is a
# correctness test, not a timed one (speed is measured by bench/).
settings.register_profile("inaemu", deadline=None)
settings.load_profile("inaemu")
