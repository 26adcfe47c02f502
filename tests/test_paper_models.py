"""bench/paper_models.py: the training papers' models, their sizes and compute, and the model
of an iteration. The parameter counts are computed from layer shapes and checked against the
published totals (torchvision's weights metadata, Caffe's BVLC AlexNet, Hugging Face's BERT);
every model has a sourced compute time or says why not; the speedup's properties hold for any
times (hypothesis).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "paper_models", ROOT / "bench" / "paper_models.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["paper_models"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


pm = load()

# Published totals, written here independently of the module's own `published_params`.
PUBLISHED = {
    "alexnet_torchvision": 61_100_840,  # torchvision AlexNet_Weights meta num_params
    "alexnet": 60_965_224,  # Caffe bvlc_alexnet weight count
    "vgg16": 138_357_544,  # torchvision VGG16_Weights meta
    "vgg19": 143_667_240,  # torchvision VGG19_Weights meta
    "resnet50": 25_557_032,  # torchvision ResNet50_Weights meta
    "bert_base": 109_482_240,  # Hugging Face BertModel bert-base-uncased
    "ncf": 31_832_577,  # NeuMF on ML-20M, DeepLearningExamples defaults
}


@pytest.mark.parametrize("key", sorted(PUBLISHED))
def test_params_match_the_published_totals(key: str) -> None:
    model = pm.MODELS[key]
    assert model.params == PUBLISHED[key]
    assert model.params == model.published_params


def test_rounded_totals_within_their_rounding() -> None:
    """The LSTM's published total is '66M': the shapes must land within 1 % of it."""
    lstm = pm.MODELS["lstm"]
    assert lstm.published_rounding > 0
    assert abs(lstm.params - 66_000_000) <= 0.01 * 66_000_000
    for m in pm.MODELS.values():
        assert abs(m.params - m.published_params) <= m.published_rounding * m.published_params


def test_papers_sizes_in_their_own_words() -> None:
    """INCEPTIONN: 'AlexNet and ResNet-50 consist of 232 MB and 98 MB of weights' (MiB)."""
    assert round(pm.MODELS["alexnet"].gradient_bytes / 2**20) == 233  # 232.56 MiB
    assert math.floor(pm.MODELS["alexnet"].gradient_bytes / 2**20) == 232
    assert round(pm.MODELS["resnet50"].gradient_bytes / 2**20) == 97  # 97.49 MiB, "98 MB"
    assert round(pm.MODELS["bert_base"].params / 1e6) == 109  # "110 million" rounded up


def test_builders_are_the_architectures() -> None:
    """A few shapes that distinguish the variants (the totals alone could hide a swap)."""
    shapes = {t.name: t.shape for t in pm.alexnet_bvlc()}
    assert shapes["conv2.weight"] == (256, 48, 5, 5)  # 2 groups
    assert {t.name: t.shape for t in pm.resnet50()}["fc.weight"] == (1000, 2048)
    assert len([t for t in pm.vgg("vgg19") if t.name.endswith("weight")]) == 19
    with pytest.raises(ValueError, match="groups"):
        pm.conv("bad", 3, 64, 3, bias=False, groups=2)


def test_gradient_bytes_are_float32() -> None:
    for m in pm.MODELS.values():
        assert m.gradient_bytes == 4 * m.params
    assert pm.allreduce_sizes(["sketch"])["vgg19"] == 4 * 143_667_240


def test_every_model_has_a_sourced_compute_or_says_why_not() -> None:
    for m in pm.MODELS.values():
        assert m.compute_note.strip(), m.key
        if not m.compute:
            assert "not found" in m.compute_note or "no published" in m.compute_note, m.key
        for c in m.compute:
            assert c.gpu and c.precision and c.what
            assert "github.com" in c.source or "http" in c.source, (m.key, c.source)
            assert c.batch > 0 and 0 < c.seconds < 10, (m.key, c)


def test_compute_times_are_the_published_numbers() -> None:
    """Spot checks against the sources' tables (ms at batch 16; samples/s at a batch)."""
    by_gpu = {c.gpu: c for c in pm.MODELS["resnet50"].compute}
    assert by_gpu["NVIDIA Titan X (Pascal)"].seconds == pytest.approx(0.10358)
    assert by_gpu["NVIDIA V100 16GB (DGX-1)"].seconds == pytest.approx(112 / 367)
    assert pm.MODELS["vgg19"].compute[0].seconds == pytest.approx(0.14732)
    assert pm.MODELS["ncf"].compute[0].seconds == pytest.approx(1_048_576 / 10.42e6)
    with pytest.raises(ValueError, match="positive"):
        pm.ComputeTime("x", 0, 1.0, "FP32", "", "")


def test_papers_name_only_sized_models_and_state_what_is_missing() -> None:
    for p in pm.PAPERS.values():
        assert p.models and all(k in pm.MODELS for k in p.models)
        assert 1 < p.speedup_low <= p.speedup_high
        assert p.speedup_source and p.models_note and p.baseline
        for value in (p.nodes, p.gpu, p.link_gbps):
            if value is None:
                assert "not found" in p.setting_note
    assert (pm.PAPERS["inceptionn"].speedup_low, pm.PAPERS["inceptionn"].speedup_high) == (2.2, 3.1)
    assert pm.PAPERS["sketch"].speedup_high == 3.74
    assert set(pm.PAPERS["sketch"].models) == {"ncf", "lstm", "vgg19", "bert_base"}


# ---------------------------------------------------------------------- the iteration model

times = st.floats(min_value=0.0, max_value=1e3, allow_nan=False)
positive = st.floats(min_value=1e-6, max_value=1e3, allow_nan=False)
fractions = st.floats(min_value=0.0, max_value=1.0)


def test_iteration_seconds_by_hand() -> None:
    assert pm.iteration_seconds(1.0, 2.0) == 3.0  # compute then all-reduce
    assert pm.iteration_seconds(1.0, 2.0, overlap=1.0) == 2.0  # hidden up to the compute
    assert pm.iteration_seconds(3.0, 2.0, overlap=0.5) == 4.0  # half of 2 s under 3 s
    assert pm.iteration_speedup(0.0, 4.0, 1.0) == 4.0  # no compute: the all-reduce ratio
    assert pm.iteration_speedup(1.0, 4.0, 1.0) == 2.5  # (1 + 4) / (1 + 1)
    for bad in ((-1.0, 1.0, 0.0), (1.0, -1.0, 0.0), (1.0, 1.0, 1.5)):
        with pytest.raises(ValueError):
            pm.iteration_seconds(*bad)
    with pytest.raises(ValueError, match="no speedup"):
        pm.iteration_speedup(0.0, 1.0, 0.0)


@given(compute=times, a=positive, b=positive, f=fractions)
def test_speedup_between_one_and_the_comm_ratio(
    compute: float, a: float, b: float, f: float
) -> None:
    slow, fast = max(a, b), min(a, b)
    s = pm.iteration_speedup(compute, slow, fast, f)
    assert 1.0 - 1e-12 <= s <= slow / fast * (1 + 1e-12)
    assert pm.iteration_speedup(compute, a, a, f) == pytest.approx(1.0)


@given(compute=times, extra=positive, a=positive, b=positive, f=fractions)
def test_speedup_shrinks_with_compute(
    compute: float, extra: float, a: float, b: float, f: float
) -> None:
    slow, fast = max(a, b), min(a, b)
    more = pm.iteration_speedup(compute + extra, slow, fast, f)
    assert more <= pm.iteration_speedup(compute, slow, fast, f) * (1 + 1e-12)


@given(compute=times, a=positive, b=positive, extra=positive, f=fractions)
def test_speedup_grows_with_the_baselines_comm(
    compute: float, a: float, b: float, extra: float, f: float
) -> None:
    base = pm.iteration_speedup(compute, a, b, f)
    assert pm.iteration_speedup(compute, a + extra, b, f) >= base * (1 - 1e-12)
    assert pm.iteration_speedup(compute, a, b + extra, f) <= base * (1 + 1e-12)


@given(compute=times, comm=positive, f=fractions, g=fractions)
def test_iteration_at_least_each_part_and_at_most_their_sum(
    compute: float, comm: float, f: float, g: float
) -> None:
    t = pm.iteration_seconds(compute, comm, f)
    assert max(compute, comm) <= t * (1 + 1e-12)
    assert t <= compute + comm
    lo, hi = sorted((f, g))
    assert pm.iteration_seconds(compute, comm, hi) <= pm.iteration_seconds(compute, comm, lo)


def test_density_bounds_from_the_lookup_tables() -> None:
    """Dense models have density 1; the embedding-heavy ones a bound from their tables."""
    for key in ("alexnet", "vgg16", "vgg19", "resnet50"):
        assert pm.MODELS[key].min_density == 1.0
    ncf = pm.MODELS["ncf"]
    assert ncf.min_density == pytest.approx(107_073 / 31_832_577)  # the MLP and final layer
    bert = pm.MODELS["bert_base"]
    tables = (30522 + 512 + 2) * 768
    assert bert.min_density == pytest.approx(1 - tables / 109_482_240)
    assert 0.77 < pm.MODELS["lstm"].min_density < 0.78  # 15M of 66M in the embedding
