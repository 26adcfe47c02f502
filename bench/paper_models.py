"""What one training iteration of the seed papers' models needs: the gradients' size and the
compute time, each with its public source; the two training papers' settings as far as they
could be found; and the model of an iteration that turns an all-reduce time into a speedup.

Data only (no I/O, no torch): parameter counts are computed here from the models' layer shapes
(small builders below, in torchvision's / Caffe's / Hugging Face's layouts), so that a test can
check each against its published total, and gradient bytes are float32 (4 per parameter). Every
compute time names its GPU, batch size, precision and source; a number that could not be found
is None with the reason, never a guess. issue 24, item 5; docs in /work/notes/compute.md.

The iteration model (`iteration_seconds`): an iteration computes (forward and backward) and
all-reduces its gradients; with `overlap` = f, a fraction f of the all-reduce can run under
the compute (as DDP overlaps its buckets' all-reduces with the backward pass), so

    t(comm) = max(comm, compute + (1 - f) * comm)

f = 0 is compute then all-reduce (INCEPTIONN's worker-aggregator iterates this way); f = 1 is
perfect overlap. The per-iteration speedup of an all-reduce taking `comm_b` over one taking
`comm_a` is t(comm_a) / t(comm_b): between 1 and comm_a / comm_b, and smaller the more the
iteration computes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

FLOAT32_BYTES = 4

# ---------------------------------------------------------------------- layer shapes


@dataclass(frozen=True)
class Tensor:
    """One trainable parameter tensor: a name, its shape, and whether it is a lookup table
    (an embedding, whose gradient has non-zero rows only for the ids a batch looks up)."""

    name: str
    shape: tuple[int, ...]
    lookup: bool = False

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def conv(name: str, cin: int, cout: int, k: int, *, bias: bool, groups: int = 1) -> list[Tensor]:
    """A 2-D convolution k x k (weight out x in/groups x k x k, optional bias)."""
    if cin % groups or cout % groups:
        raise ValueError(f"{name}: {cin} and {cout} channels do not split into {groups} groups")
    out = [Tensor(f"{name}.weight", (cout, cin // groups, k, k))]
    return [*out, Tensor(f"{name}.bias", (cout,))] if bias else out


def linear(name: str, fin: int, fout: int, *, bias: bool = True) -> list[Tensor]:
    out = [Tensor(f"{name}.weight", (fout, fin))]
    return [*out, Tensor(f"{name}.bias", (fout,))] if bias else out


def norm(name: str, c: int) -> list[Tensor]:
    """BatchNorm or LayerNorm: a scale and a shift (running statistics are buffers, not
    parameters, and are not all-reduced)."""
    return [Tensor(f"{name}.weight", (c,)), Tensor(f"{name}.bias", (c,))]


def embedding(name: str, rows: int, dim: int) -> list[Tensor]:
    return [Tensor(f"{name}.weight", (rows, dim), lookup=True)]


def lstm(name: str, fin: int, hidden: int) -> list[Tensor]:
    """One LSTM layer as torch.nn.LSTM holds it: 4 gates, input and hidden weights, two biases."""
    g = 4 * hidden
    return [
        Tensor(f"{name}.weight_ih", (g, fin)),
        Tensor(f"{name}.weight_hh", (g, hidden)),
        Tensor(f"{name}.bias_ih", (g,)),
        Tensor(f"{name}.bias_hh", (g,)),
    ]


def count(tensors: Iterable[Tensor]) -> int:
    return sum(t.numel for t in tensors)


# ---------------------------------------------------------------------- the models' builders


def alexnet_torchvision(classes: int = 1000) -> list[Tensor]:
    """torchvision.models.alexnet (the "one weird trick" single-tower variant: 64-192-384-256-256
    channels, no groups)."""
    t: list[Tensor] = []
    for i, (cin, cout, k) in enumerate(
        [(3, 64, 11), (64, 192, 5), (192, 384, 3), (384, 256, 3), (256, 256, 3)]
    ):
        t += conv(f"features.conv{i + 1}", cin, cout, k, bias=True)
    t += linear("classifier.fc6", 256 * 6 * 6, 4096)
    t += linear("classifier.fc7", 4096, 4096)
    t += linear("classifier.fc8", 4096, classes)
    return t


def alexnet_bvlc(classes: int = 1000) -> list[Tensor]:
    """Caffe's BVLC AlexNet (the original two-tower net: 96-256-384-384-256 channels, conv2,
    conv4 and conv5 in 2 groups); the variant of jcjohnson/cnn-benchmarks and, by its 232 MB
    of weights, of INCEPTIONN."""
    t = conv("conv1", 3, 96, 11, bias=True)
    t += conv("conv2", 96, 256, 5, bias=True, groups=2)
    t += conv("conv3", 256, 384, 3, bias=True)
    t += conv("conv4", 384, 384, 3, bias=True, groups=2)
    t += conv("conv5", 384, 256, 3, bias=True, groups=2)
    t += linear("fc6", 256 * 6 * 6, 4096)
    t += linear("fc7", 4096, 4096)
    t += linear("fc8", 4096, classes)
    return t


M = 0  # a 2x2 max pool in a VGG configuration

VGG_CONFIGS: Mapping[str, tuple[int, ...]] = {
    # torchvision's cfgs "D" and "E" (Simonyan & Zisserman's configurations D and E)
    "vgg16": (*(64, 64, M, 128, 128, M), *(256,) * 3, M, *(512,) * 3, M, *(512,) * 3, M),
    "vgg19": (*(64, 64, M, 128, 128, M), *(256,) * 4, M, *(512,) * 4, M, *(512,) * 4, M),
}


def vgg(config: str, classes: int = 1000) -> list[Tensor]:
    """torchvision.models.vgg16 / vgg19 (no batch norm): 3x3 convolutions, then 3 linear layers
    on 512 x 7 x 7."""
    t: list[Tensor] = []
    cin = 3
    for i, v in enumerate(VGG_CONFIGS[config]):
        if v != M:
            t += conv(f"features.{i}", cin, v, 3, bias=True)
            cin = v
    t += linear("classifier.0", 512 * 7 * 7, 4096)
    t += linear("classifier.3", 4096, 4096)
    t += linear("classifier.6", 4096, classes)
    return t


def resnet50(classes: int = 1000) -> list[Tensor]:
    """torchvision.models.resnet50 (bottleneck blocks [3, 4, 6, 3], expansion 4, convolutions
    without bias, a batch norm after each; v1.5 has the same shapes, its stride moved)."""
    t = conv("conv1", 3, 64, 7, bias=False) + norm("bn1", 64)
    cin = 64
    for stage, (planes, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
        for b in range(blocks):
            p = f"layer{stage + 1}.{b}"
            t += conv(f"{p}.conv1", cin, planes, 1, bias=False) + norm(f"{p}.bn1", planes)
            t += conv(f"{p}.conv2", planes, planes, 3, bias=False) + norm(f"{p}.bn2", planes)
            t += conv(f"{p}.conv3", planes, 4 * planes, 1, bias=False)
            t += norm(f"{p}.bn3", 4 * planes)
            if b == 0:
                t += conv(f"{p}.downsample.0", cin, 4 * planes, 1, bias=False)
                t += norm(f"{p}.downsample.1", 4 * planes)
            cin = 4 * planes
    t += linear("fc", 2048, classes)
    return t


def bert(
    *,
    vocab: int = 30522,
    hidden: int = 768,
    layers: int = 12,
    intermediate: int = 3072,
    positions: int = 512,
    token_types: int = 2,
    pooler: bool = True,
) -> list[Tensor]:
    """Hugging Face's BertModel (bert-base-uncased by default: the encoder and its pooler,
    without the pre-training heads)."""
    h = hidden
    t = embedding("embeddings.word", vocab, h) + embedding("embeddings.position", positions, h)
    t += embedding("embeddings.token_type", token_types, h) + norm("embeddings.LayerNorm", h)
    for i in range(layers):
        p = f"encoder.layer.{i}"
        for m in ("query", "key", "value"):
            t += linear(f"{p}.attention.self.{m}", h, h)
        t += linear(f"{p}.attention.output.dense", h, h) + norm(f"{p}.attention.output.LN", h)
        t += linear(f"{p}.intermediate.dense", h, intermediate)
        t += linear(f"{p}.output.dense", intermediate, h) + norm(f"{p}.output.LayerNorm", h)
    if pooler:
        t += linear("pooler.dense", h, h)
    return t


def neumf(
    users: int = 138_493,
    items: int = 26_744,
    factors: int = 64,
    mlp: tuple[int, ...] = (256, 256, 128, 64),
) -> list[Tensor]:
    """NCF's NeuMF as NVIDIA DeepLearningExamples builds it (PyTorch/Recommendation/NCF,
    neumf.py, ncf.py's defaults): MF and MLP embeddings of users and items, the MLP, a final
    linear layer; sizes of MovieLens-20M (138,493 users, 26,744 rated movies)."""
    t = embedding("mf_user_embed", users, factors) + embedding("mf_item_embed", items, factors)
    t += embedding("mlp_user_embed", users, mlp[0] // 2)
    t += embedding("mlp_item_embed", items, mlp[0] // 2)
    for i in range(1, len(mlp)):
        t += linear(f"mlp.{i - 1}", mlp[i - 1], mlp[i])
    t += linear("final", mlp[-1] + factors, 1)
    return t


def lstm_lm(vocab: int = 10_000, hidden: int = 1500, layers: int = 2) -> list[Tensor]:
    """A word-level LSTM language model: embedding, stacked LSTM, output projection to the
    vocabulary. Defaults: Zaremba et al. 2014's "large" PTB model (10k words, 2 x 1500)."""
    t = embedding("encoder", vocab, hidden)
    for i in range(layers):
        t += lstm(f"rnn.{i}", hidden, hidden)
    t += linear("decoder", hidden, vocab)
    return t


# ---------------------------------------------------------------------- compute times

JCJ = (
    "jcjohnson/cnn-benchmarks README (Torch, CUDA 8.0, input 16x3x224x224, forward + backward "
    "of one minibatch), https://github.com/jcjohnson/cnn-benchmarks"
)
DLE_RN50 = (
    "NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md, "
    "'Training performance results' (pytorch-21.03 NGC container; batch per GPU from "
    "ConvNets/configs.yml), https://github.com/NVIDIA/DeepLearningExamples"
)
DLE_NCF = (
    "NVIDIA DeepLearningExamples, PyTorch/Recommendation/NCF/README.md, 'Training performance "
    "results' (PyTorch 21.04-py3 NGC container, ML-20M, throughput averaged over an epoch), "
    "https://github.com/NVIDIA/DeepLearningExamples"
)


@dataclass(frozen=True)
class ComputeTime:
    """One published measurement of a training iteration's compute on one GPU."""

    gpu: str
    batch: int  # samples per GPU per iteration
    seconds: float  # compute of one iteration at that batch
    precision: str  # FP32, TF32, ...
    what: str  # what the number times, and how it was derived from the source
    source: str

    def __post_init__(self) -> None:
        if self.batch <= 0 or not self.seconds > 0:
            raise ValueError(f"{self.gpu}: batch and seconds must be positive")


def forward_backward_ms(gpu: str, cudnn: str, total_ms: float) -> ComputeTime:
    """A row of jcjohnson/cnn-benchmarks: batch 16, FP32, forward + backward in ms."""
    return ComputeTime(
        gpu=gpu,
        batch=16,
        seconds=total_ms / 1000,
        precision="FP32",
        what=f"forward + backward, cuDNN {cudnn}: {total_ms} ms (no optimizer step)",
        source=JCJ,
    )


def from_throughput(
    gpu: str, batch: int, per_second: float, precision: str, source: str
) -> ComputeTime:
    """A training-throughput row of one GPU: an iteration of `batch` takes batch / throughput
    (forward, backward and the optimizer step: the whole single-GPU iteration)."""
    return ComputeTime(
        gpu=gpu,
        batch=batch,
        seconds=batch / per_second,
        precision=precision,
        what=f"1-GPU training throughput {per_second:,.0f} samples/s at batch {batch}",
        source=source,
    )


# ---------------------------------------------------------------------- the models


@dataclass(frozen=True)
class Model:
    """A model the papers name: its parameters (from its layer shapes), the published total
    they are checked against, and the published compute times found for it."""

    key: str
    name: str
    variant: str  # which definition the shapes follow
    tensors: tuple[Tensor, ...]
    published_params: int
    published_source: str
    published_rounding: float  # relative rounding of the published total (0: exact)
    compute: tuple[ComputeTime, ...]
    compute_note: str  # why the compute is what it is (or missing)

    @property
    def params(self) -> int:
        return count(self.tensors)

    @property
    def gradient_bytes(self) -> int:
        """The all-reduce of one iteration: every parameter's float32 gradient."""
        return FLOAT32_BYTES * self.params

    @property
    def min_density(self) -> float:
        """A lower bound of one worker's gradient density (non-zero share): every parameter
        outside the lookup tables has a (dense) gradient every iteration; a table's rows only
        where the batch looks them up, which depends on the batch and the data."""
        return 1.0 - count(t for t in self.tensors if t.lookup) / self.params


MODELS: Mapping[str, Model] = {
    m.key: m
    for m in (
        Model(
            key="alexnet",
            name="AlexNet",
            variant="Caffe BVLC AlexNet (grouped conv2/4/5), 1000 classes",
            tensors=tuple(alexnet_bvlc()),
            published_params=60_965_224,
            published_source=(
                "Caffe bvlc_alexnet weights: 60,965,224 floats ('WEIGHTS_FILE_SIZE 60965224 "
                "//fc8-1000' in public FPGA AlexNet code); INCEPTIONN's 'AlexNet ... 232 MB of "
                "weights' is 60,965,224 x 4 B = 232.6 MiB"
            ),
            published_rounding=0.0,
            compute=(
                forward_backward_ms("NVIDIA Titan X (Pascal)", "5.1.05", 14.56),
                forward_backward_ms("NVIDIA GTX 1080 Ti", "5.1.10", 13.89),
            ),
            compute_note=(
                "INCEPTIONN's GPU was not found; Pascal-generation measurements (2016-17), of "
                "the same BVLC variant, at batch 16"
            ),
        ),
        Model(
            key="alexnet_torchvision",
            name="AlexNet (torchvision)",
            variant="torchvision.models.alexnet, 1000 classes",
            tensors=tuple(alexnet_torchvision()),
            published_params=61_100_840,
            published_source="torchvision AlexNet_Weights.IMAGENET1K_V1: num_params 61,100,840",
            published_rounding=0.0,
            compute=(),
            compute_note=(
                "no published compute found for this variant; the papers' AlexNet is the BVLC "
                "one (key 'alexnet'); kept to pin the builder against torchvision's total"
            ),
        ),
        Model(
            key="vgg16",
            name="VGG-16",
            variant="torchvision.models.vgg16 (configuration D, no batch norm)",
            tensors=tuple(vgg("vgg16")),
            published_params=138_357_544,
            published_source="torchvision VGG16_Weights.IMAGENET1K_V1: num_params 138,357,544",
            published_rounding=0.0,
            compute=(
                forward_backward_ms("NVIDIA Titan X (Pascal)", "5.1.05", 128.62),
                forward_backward_ms("NVIDIA GTX 1080 Ti", "5.1.10", 128.14),
            ),
            compute_note="Pascal-generation measurements at batch 16; the papers' GPU not found",
        ),
        Model(
            key="vgg19",
            name="VGG-19",
            variant="torchvision.models.vgg19 (configuration E, no batch norm)",
            tensors=tuple(vgg("vgg19")),
            published_params=143_667_240,
            published_source="torchvision VGG19_Weights.IMAGENET1K_V1: num_params 143,667,240",
            published_rounding=0.0,
            compute=(
                forward_backward_ms("NVIDIA Titan X (Pascal)", "5.1.05", 147.32),
                forward_backward_ms("NVIDIA GTX 1080 Ti", "5.1.10", 148.19),
            ),
            compute_note=(
                "only Pascal-generation measurements (batch 16) were found; no V100/A100 "
                "training time of VGG-19 was found, and the 2024 paper's GPU is unknown"
            ),
        ),
        Model(
            key="resnet50",
            name="ResNet-50",
            variant="torchvision.models.resnet50 (v1.5 has the same shapes)",
            tensors=tuple(resnet50()),
            published_params=25_557_032,
            published_source=(
                "torchvision ResNet50_Weights.IMAGENET1K_V1: num_params 25,557,032; INCEPTIONN's "
                "'ResNet-50 ... 98 MB of weights' is 25,557,032 x 4 B = 97.5 MiB"
            ),
            published_rounding=0.0,
            compute=(
                forward_backward_ms("NVIDIA Titan X (Pascal)", "5.1.05", 103.58),
                forward_backward_ms("NVIDIA GTX 1080 Ti", "5.1.10", 101.21),
                from_throughput("NVIDIA V100 16GB (DGX-1)", 112, 367, "FP32", DLE_RN50),
                from_throughput("NVIDIA A100 80GB (DGX A100)", 256, 938, "TF32", DLE_RN50),
            ),
            compute_note=(
                "Pascal rows: forward + backward at batch 16 (INCEPTIONN's era); V100/A100 rows: "
                "whole single-GPU iterations of NVIDIA's ResNet-50 v1.5 recipe"
            ),
        ),
        Model(
            key="bert_base",
            name="BERT-base",
            variant="Hugging Face BertModel bert-base-uncased (encoder + pooler, no MLM head)",
            tensors=tuple(bert()),
            published_params=109_482_240,
            published_source=(
                "BertModel.from_pretrained('bert-base-uncased'): 109,482,240 parameters (public "
                "model summaries); Devlin et al. 2018 and the 2024 paper: '110 million'"
            ),
            published_rounding=0.0,
            compute=(),
            compute_note=(
                "not found: NVIDIA DeepLearningExamples publishes BERT-base inference latency "
                "only (TensorFlow BERT README) and training throughput for BERT-large; no "
                "BERT-base training iteration time on a named GPU was found"
            ),
        ),
        Model(
            key="ncf",
            name="NCF (NeuMF)",
            variant=(
                "NVIDIA DeepLearningExamples NeuMF on MovieLens-20M: 64 factors, MLP "
                "256-256-128-64 (the 2024 paper's own NCF size was not found)"
            ),
            tensors=tuple(neumf()),
            published_params=31_832_577,
            published_source=(
                "31,832,577: the NeuMF ML-20M parameter count quoted in a public NCF run script "
                "('threshold=1/(2*(31832577*density)^(1/2))'); dims from DeepLearningExamples "
                "ncf.py defaults and MLPerf's reference (nb_users=138493, nb_items=26744)"
            ),
            published_rounding=0.0,
            compute=(
                from_throughput("NVIDIA V100 16GB (DGX-1)", 1_048_576, 10.42e6, "FP32", DLE_NCF),
                from_throughput("NVIDIA A100 40GB (DGX A100)", 1_048_576, 22.59e6, "TF32", DLE_NCF),
            ),
            compute_note=(
                "NVIDIA's recipe trains with a global batch of 2^20 samples; an iteration at "
                "another batch scales about linearly (not measured here)"
            ),
        ),
        Model(
            key="lstm",
            name="LSTM language model",
            variant=(
                "Zaremba et al. 2014 'large' PTB LSTM (10k words, 2 layers of 1500, torch's "
                "two biases per gate); the 2024 paper's own LSTM size was not found"
            ),
            tensors=tuple(lstm_lm()),
            published_params=66_000_000,
            published_source=(
                "'Zaremba et al. (2014) - LSTM (large): 66M' (parameter column of the PTB "
                "tables in later papers, e.g. ON-LSTM, Shen et al. ICLR 2019)"
            ),
            published_rounding=0.01,
            compute=(),
            compute_note=(
                "not found: no published training iteration time of this LSTM on a named GPU"
            ),
        ),
    )
}


# ---------------------------------------------------------------------- the papers' settings


@dataclass(frozen=True)
class PaperSetting:
    """What a training paper states of its setting, each part either found (with a quote and
    where) or None with the reason."""

    key: str
    title: str
    citation: str
    models: tuple[str, ...]  # keys of MODELS the paper names and we could size
    models_note: str
    nodes: int | None
    gpu: str | None
    link_gbps: float | None
    setting_note: str  # where nodes, GPU and links come from, or why they are missing
    speedup_low: float
    speedup_high: float
    speedup_quote: str
    speedup_source: str
    baseline: str
    densities: Mapping[str, float] = field(default_factory=dict)  # model key -> non-zero share
    densities_note: str = ""


PAPERS: Mapping[str, PaperSetting] = {
    p.key: p
    for p in (
        PaperSetting(
            key="inceptionn",
            title=(
                "A Network-Centric Hardware/Algorithm Co-Design to Accelerate Distributed "
                "Training of Deep Neural Networks"
            ),
            citation="Y. Li, J. Park, M. Alian, Y. Yuan, Z. Qu, P. Pan, R. Wang, A. G. Schwing, "
            "H. Esmaeilzadeh, N. S. Kim, MICRO 2018, doi:10.1109/MICRO.2018.00023",
            models=("alexnet", "resnet50", "vgg16"),
            models_note=(
                "The text we could read (abstract and introduction: docslib.org doc 3866191, "
                "fdocuments.net) names AlexNet and ResNet-50: 'AlexNet and ResNet-50 consist of "
                "232 MB and 98 MB of weights'. VGG-16 (and HDC, a small handwritten-digit "
                "network) are in the evaluation by issue 24's recollection, not verified: the "
                "evaluation section was not readable in the stored corpora. HDC's layers were "
                "not found, so it is not sized here."
            ),
            nodes=None,
            gpu=None,
            link_gbps=None,
            setting_note=(
                "not found: node count, GPU and link rate are in the evaluation section, which "
                "no stored copy reached. docs/papers.md assumes 4 nodes (the issue's words) and "
                "10 Gbit/s Ethernet is recalled, not verified."
            ),
            speedup_low=2.2,
            speedup_high=3.1,
            speedup_quote="2.2-3.1x system (training) speedup",
            speedup_source=(
                "issue 24 and bench/papers.py CLAIMS; the sentence itself was not found in the "
                "stored copies (their excerpts stop inside the abstract)"
            ),
            baseline=(
                "the worker-aggregator hierarchy ('The aggregators repeatedly receive gradient "
                "updates from their allocated group of the workers, and send back the updated "
                "weights') against INCEPTIONN's ring-like gradient-centric exchange with its "
                "NIC compression"
            ),
        ),
        PaperSetting(
            key="sketch",
            title="Accelerating Distributed Deep Learning using Lossless Homomorphic Compression",
            citation="H. Li, Y. Xu, J. Chen, R. Dwivedula, W. Wu, K. He, A. Akella, D. Kim, "
            "arXiv:2402.07529, 2024",
            models=("ncf", "lstm", "vgg19", "bert_base"),
            models_note=(
                "Abstract (arxiv.org/html/2402.07529v1): 'validated across diverse DNN models "
                "such as NCF, LSTM, VGG19, and BERT-base'; introduction: 'BERT-base and "
                "BERT-large have 110 million and 340 million parameters'. The sizes of its NCF "
                "and LSTM were not found: ours are public reference configurations."
            ),
            nodes=None,
            gpu=None,
            link_gbps=None,
            setting_note=(
                "not found: workers, GPUs, switch and link rates are in the evaluation "
                "section, which no stored copy reached"
            ),
            speedup_low=3.74,
            speedup_high=3.74,
            speedup_quote="'a 3.74x increase in per-iteration training speed' (up to)",
            speedup_source="arXiv:2402.07529 abstract (arxiv.org/html/2402.07529v1)",
            baseline=(
                "uncompressed in-network aggregation (its 'up to 6.33x improvement in "
                "aggregation throughput' is over it); here: fixed-point INA"
            ),
            densities={},
            densities_note=(
                "the paper's per-model gradient densities were not found; docs/papers.md "
                "measures densities of small NCF-like and LSTM models trained here (0.024, "
                "0.56 of one worker's gradient)"
            ),
        ),
    )
}


# ---------------------------------------------------------------------- the iteration model


def iteration_seconds(compute_s: float, comm_s: float, overlap: float = 0.0) -> float:
    """One iteration: compute, and an all-reduce of which a fraction `overlap` can run under
    the compute; the rest follows it. max(comm, compute + (1 - overlap) * comm)."""
    if compute_s < 0 or comm_s < 0:
        raise ValueError(f"times must be >= 0, got compute {compute_s}, comm {comm_s}")
    if not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap is a fraction in [0, 1], got {overlap}")
    return max(comm_s, compute_s + (1.0 - overlap) * comm_s)


def iteration_speedup(
    compute_s: float, comm_a_s: float, comm_b_s: float, overlap: float = 0.0
) -> float:
    """Per-iteration speedup of all-reduce b over all-reduce a (the baseline) for a model that
    computes `compute_s` per iteration: iteration_seconds(a) / iteration_seconds(b)."""
    if comm_b_s <= 0 and compute_s <= 0:
        raise ValueError("an iteration of no compute and no communication has no speedup")
    return iteration_seconds(compute_s, comm_a_s, overlap) / iteration_seconds(
        compute_s, comm_b_s, overlap
    )


def allreduce_sizes(papers: Iterable[str] = tuple(PAPERS)) -> dict[str, int]:
    """The gradient bytes each paper's models all-reduce per iteration (model key -> bytes)."""
    return {k: MODELS[k].gradient_bytes for p in papers for k in PAPERS[p].models}
