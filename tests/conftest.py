"""Settings shared by every test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import settings

from inaemu.sim.engine import Ns3, Simulation, load

# No per-example deadline: CI machines are shared and slow at times, and a property test is a
# correctness test, not a timed one (speed is measured by bench/).
settings.register_profile("inaemu", deadline=None)
settings.load_profile("inaemu")


# ns-3 for the simulator's tests (tests/test_sim*.py skip where it is not installed): loaded
# once per module (its first import takes seconds), a fresh simulation per test.


@pytest.fixture(scope="module")
def ns3() -> Ns3:
    return load()


@pytest.fixture
def sim(ns3: Ns3) -> Iterator[Simulation]:
    s = Simulation(ns3)
    yield s
    s.close()
