"""Frozen dataclass configs of a Show-Attend-Tell captioner and of a captioner run.

`EncoderConfig` and `DecoderConfig` say how the model is built, `DataConfig` which data it
reads, and `CaptionerRunConfig` composes them with the trainer's settings into the
`config.json` of a run directory, so that the run can be rebuilt, resumed and evaluated.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from common.errors import UserError

ATTENTION_KINDS = ("soft", "hard")
ATTENTION_QUERIES = ("hidden", "hidden+word")
REWARDS = ("caption", "to-go")
SCST_BASELINES = ("greedy", "mean")
WEIGHTS = ("imagenet", "none")

#: The captioner's decoding defaults (the shared ones, the length penalty among them, are in
#: `common.decoding.defaults`): beam search with 3 hypotheses (`caption`, `evaluate`, `export`,
#: `CaptionerRun.caption_batch`, `ShowAttendTell.caption`), and captions of at most 20 tokens
#: (`DecoderConfig.max_length`, also the longest caption trained on, `DataConfig.max_length`).
BEAM_SIZE = 3
MAX_LENGTH = 20


@dataclass(frozen=True)
class EncoderConfig:
    """How images become annotations `(B, L, D)`.

    Args:
        name: an encoder registry name (`captioner.encoders.ENCODERS`).
        image_size: `(height, width)` the images are resized to before the encoder.
        weights: `"imagenet"` (pretrained; downloads once) or `"none"` (random init).
        fine_tune: how many of the backbone's top weighted layers to train; 0 = frozen.
        filters: conv widths of `small-cnn` (one 2x2 pooling stage per entry).
        context_convs: `small-cnn` 3x3 convs after the last pooling stage, widening each
            region's receptive field to whole objects at little cost.
        coordinates: append each region's (row, column) position in [-1, 1] to its
            annotation (`D + 2` features), so the context says where, not only what: spatial
            relations ("left of", "above") need it.
    """

    name: str = "small-cnn"
    image_size: tuple[int, int] = (224, 224)
    weights: str = "imagenet"
    fine_tune: int = 0
    filters: tuple[int, ...] = (32, 64, 128)
    context_convs: int = 0
    coordinates: bool = False

    def __post_init__(self):
        _check_choice("weights", self.weights, WEIGHTS)
        if self.fine_tune < 0:
            raise UserError(f"fine_tune must be >= 0, got {self.fine_tune}")


@dataclass(frozen=True)
class DecoderConfig:
    """The attentive LSTM decoder and its loss.

    Args:
        embedding_dim: word embedding size `E` (also the deep output size).
        units: LSTM size `U`.
        attention_units: hidden size of the additive score.
        attention: `"soft"` (deterministic, expected context) or `"hard"` (stochastic).
        score: an attention score registry name (`common.layers.SCORES`).
        dropout: dropout rate on the LSTM output before the deep output layer.
        penalty_weight: λ of the doubly stochastic penalty λ Σᵢ (τ − Σₜ αₜᵢ)².
        penalty_tau: τ; `None` means T/L per caption (its caption length over the regions), the
            uniform coverage, so the penalty only discourages attending one place all along.
        entropy_weight: hard attention's entropy bonus λₑ.
        baseline_decay: hard attention's moving-average baseline decay.
        expected_context_prob: hard attention's probability of the expected context per image.
        max_length: the longest caption (tokens without `<start>`) decoding produces.
        query: what the attention is asked with at step t: `"hidden"`, the paper's
            h_{t-1}, or `"hidden+word"`, h_{t-1} and the embedding of the word y_{t-1} the
            step reads, so that after "red" the attention can look for what is red.
        reward: hard attention's REINFORCE reward: `"caption"`, the paper's caption
            log-likelihood against a moving average, or `"to-go"`, each step's location
            rewarded with the log-likelihood of the words from that step on against a
            per-word moving average (`captioner.model.reinforce_surrogate`).
        expected_context_warmup: hard attention: over the first N training steps the
            probability of the expected context falls linearly from 1 to
            `expected_context_prob`, so the attention first learns from the deterministic
            gradient (as soft attention does) before sampled locations take their share.
        coverage: the additive score also sees how much attention each region has had so
            far, `vᵀ tanh(W_q s + W_k aᵢ + w_c Σ_{t'<t} α_{t'i})` (Tu et al. 2016's coverage),
            so that a second object of a colour already named is told from the first (soft
            attention with the additive score).
    """

    embedding_dim: int = 256
    units: int = 512
    attention_units: int = 256
    attention: str = "soft"
    score: str = "additive"
    dropout: float = 0.3
    penalty_weight: float = 0.01
    penalty_tau: float | None = None
    entropy_weight: float = 0.002
    baseline_decay: float = 0.9
    expected_context_prob: float = 0.5
    max_length: int = MAX_LENGTH
    query: str = "hidden"
    reward: str = "caption"
    expected_context_warmup: int = 0
    coverage: bool = False

    def __post_init__(self):
        _check_choice("attention query", self.query, ATTENTION_QUERIES)
        if self.coverage and (self.attention != "soft" or self.score != "additive"):
            raise UserError(f"coverage is a term of the additive score of soft attention; "
                            f"got attention {self.attention!r} with score {self.score!r} "
                            "(the demo presets set it: add --no-coverage)")
        _check_choice("reward", self.reward, REWARDS)
        _check_choice("attention", self.attention, ATTENTION_KINDS)
        if self.expected_context_warmup < 0:
            raise UserError(
                f"expected_context_warmup must be >= 0, got {self.expected_context_warmup}")
        if not 0 <= self.dropout < 1:
            raise UserError(f"dropout must be in [0, 1), got {self.dropout}")


@dataclass(frozen=True)
class DataConfig:
    """Which dataset a run reads.

    Args:
        dataset: a dataset registry name (`captioner.datasets`).
        data_dir: where its files are (`None`: the dataset's default or generated).
        max_length: the longest caption kept for training (tokens, without `<start>`).
        min_count: the fewest occurrences a word needs to enter the vocabulary.
        cache_features: train from encoder features computed once to the run directory.
        options: extra dataset-specific keyword arguments (e.g. shapes sizes).
    """

    dataset: str = "shapes"
    data_dir: str | None = None
    max_length: int = MAX_LENGTH
    min_count: int = 1
    cache_features: bool = False
    options: dict[str, Any] = field(default_factory=dict)


#: The datasets whose captions `scst.fact_weight` can check against the image's scene.
FACT_DATASETS = ("shapes",)


@dataclass(frozen=True)
class SelfCriticalConfig:
    """Self-critical sequence training (Rennie et al. 2017), `captioner.scst`: the training
    stage that maximizes the CIDEr-D of sampled captions instead of the references' likelihood.

    Args:
        enabled: train by SCST (`captioner train --scst`, usually with `--init-from` a run
            trained by cross-entropy); False: cross-entropy training.
        samples: `K`, captions sampled per image and step.
        baseline: what each sample's reward is compared with: `"greedy"`, the reward of the
            image's greedy caption (Rennie et al.), or `"mean"`, the mean reward of the image's
            other `K - 1` samples (Luo 2020, "new self-critical"; needs `K >= 2`).
        xe_weight: `w` in `loss = (1 - w) · SCST + w · XE`, the cross-entropy of the image's
            reference captions mixed into the policy gradient (self-critical.pytorch's
            `structure_loss_weight` is `1 - w`); 0, SCST alone; below 1.
        fact_weight: `W` in `reward = CIDEr-D + W · facts`, `facts` what the caption states
            checked against the image's annotated scene (`shapes` only:
            `captioner.datasets.shapes_metrics.fact_score`); 0, CIDEr-D alone; at least 0.
        relation_bonus: what each stated relation that holds adds to `facts` (0: a true
            relation earns only its n-grams, a false one costs 1, so the policy states few);
            at least 0, used with `fact_weight`.
    """

    enabled: bool = False
    samples: int = 5
    baseline: str = "greedy"
    xe_weight: float = 0.0
    fact_weight: float = 0.0
    relation_bonus: float = 0.0

    def __post_init__(self):
        _check_choice("scst baseline", self.baseline, SCST_BASELINES)
        if isinstance(self.samples, bool) or not isinstance(self.samples, int) or (
                self.samples < 1):
            raise UserError(f"scst samples must be an integer >= 1, got {self.samples!r}")
        if self.baseline == "mean" and self.samples < 2:
            raise UserError(f"the scst baseline 'mean' averages the other samples of an image; "
                            f"expected samples >= 2, got {self.samples}")
        weight = self.xe_weight
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not (
                0 <= weight < 1):
            raise UserError(f"scst xe_weight must be a number in [0, 1) (0: SCST alone; "
                            f"cross-entropy alone is --no-scst), got {weight!r}")
        weight = self.fact_weight
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not (
                0 <= weight and math.isfinite(weight)):
            raise UserError(f"scst fact_weight must be a number >= 0 (0: CIDEr-D alone), "
                            f"got {weight!r}")
        bonus = self.relation_bonus
        if isinstance(bonus, bool) or not isinstance(bonus, int | float) or not (
                0 <= bonus and math.isfinite(bonus)):
            raise UserError(f"scst relation_bonus must be a number >= 0, got {bonus!r}")
        if bonus and not self.fact_weight:
            raise UserError("scst relation_bonus adds to the facts of the reward, which "
                            "fact_weight 0 leaves out: expected a fact_weight > 0 with it")


@dataclass(frozen=True)
class CaptionerRunConfig:
    """Everything `captioner train` needs; saved as `RUN_DIR/config.json`.

    `training` holds the `common.training.TrainingConfig` fields as a plain dict, so this
    module does not depend on the trainer's import. `cosine_decay` lowers the learning rate
    along a cosine to 0 over the whole run (Adam either way). `scst` turns the run into a
    self-critical training stage (`SelfCriticalConfig`).
    """

    family: str = "captioner"
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    decoder: DecoderConfig = field(default_factory=DecoderConfig)
    data: DataConfig = field(default_factory=DataConfig)
    training: dict[str, Any] = field(default_factory=dict)
    cosine_decay: bool = False
    scst: SelfCriticalConfig = field(default_factory=SelfCriticalConfig)

    def __post_init__(self):
        # A cached encoder is frozen: cached features of a network that is never trained are
        # those of a random one. small-cnn has no pretrained weights; it trains from scratch.
        if self.data.cache_features and (self.encoder.name == "small-cnn"
                                         or self.encoder.weights == "none"):
            why = ("small-cnn trains from scratch" if self.encoder.name == "small-cnn"
                   else f"--weights none leaves {self.encoder.name} untrained")
            raise UserError(
                f"--cache-features caches the features of a frozen encoder, but {why}: its "
                "features would come from a random network that is never trained; expected a "
                "pretrained encoder (e.g. --encoder vgg19 --weights imagenet) or no "
                "--cache-features")
        if self.scst.fact_weight and self.data.dataset not in FACT_DATASETS:
            raise UserError(
                f"--scst-fact-weight checks captions against an annotated scene, which only "
                f"{', '.join(FACT_DATASETS)} has; dataset {self.data.dataset!r} has none: "
                "expected --scst-fact-weight 0")


def _check_choice(what: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UserError(f"Unknown {what} {value!r}; choose one of: {', '.join(choices)}")


def replace(config: Any, **changes: Any) -> Any:
    """`dataclasses.replace` that ignores `None` values (options left at their defaults)."""
    changes = {k: v for k, v in changes.items() if v is not None}
    return dataclasses.replace(config, **changes) if changes else config
