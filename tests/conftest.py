"""Settings shared by every test module."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

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


@pytest.fixture(scope="module")
def numerics() -> ModuleType:
    """bench/train_numerics.py: the example's training (examples/train_ddp.py) replayed in one
    process, with gloo's float32 ring or a codec's sums (tests of `inaemu train` and of
    training across machines compare their losses with it)."""
    pytest.importorskip("torch", reason="PyTorch not installed")
    path = Path(__file__).resolve().parents[1] / "bench" / "train_numerics.py"
    spec = importlib.util.spec_from_file_location("train_numerics", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_numerics"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
