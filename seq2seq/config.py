"""Frozen dataclass configs of the translators and of a translator run.

A run directory's `config.json` is `to_dict(RunConfig)`: the family, the model (architecture
and the sizes of both families, only the chosen one is used: `bahdanau` and
`seq2seq-noattn` read the recurrent sizes, `transformer` the Transformer's), the data, the training
options and the decoding defaults. `seq2seq evaluate` and `seq2seq translate` rebuild the model
from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from common.catalog import SENTENCEPIECE_TYPES
from common.decoding.defaults import LENGTH_PENALTY
from common.errors import UserError
from common.text.specials import SPECIALS

CELLS = ("gru", "lstm")
POSITIONS = ("sine", "learned")
LOCAL_MODES = ("monotonic", "predictive")
VOCABS = ("word", "sentencepiece")  # `DataConfig.vocab` (`seq2seq.vocabularies`)
# The architecture -> the section of `ModelConfig` holding its sizes.
SIZES_SECTION = {"bahdanau": "bahdanau", "seq2seq-noattn": "bahdanau",
                 "transformer": "transformer"}


@dataclass(frozen=True)
class BahdanauConfig:
    """Sizes of the RNNsearch translator (Bahdanau et al. 2015), and of the encoder-decoder
    without attention (`seq2seq-noattn`, which uses `embedding_dim`, `units`, `cell` and
    `dropout` only).

    Args:
        embedding_dim: source and target embedding size `E`.
        units: encoder units per direction and decoder units `U`.
        cell: `"gru"` or `"lstm"`, for the encoder and the decoder.
        score: attention score name from `common.layers.SCORES`.
        attention_units: hidden size of the additive score (ignored by the others).
        input_feeding: feed the previous attentional vector into the decoder (Luong et al. 2015).
        dropout: dropout rate on embeddings and the attentional vector.
        local: None for global attention, or Luong's local attention (Luong et al. 2015):
            `"monotonic"` (local-m) or `"predictive"` (local-p).
        attention_window: the half-width `D` of the local window (2D + 1 positions).
    """

    embedding_dim: int = 128
    units: int = 128
    cell: str = "gru"
    score: str = "additive"
    attention_units: int = 128
    input_feeding: bool = False
    dropout: float = 0.1
    local: str | None = None
    attention_window: int = 5

    def __post_init__(self) -> None:
        if self.cell not in CELLS:
            raise UserError(f"unknown cell {self.cell!r}; choose one of: {', '.join(CELLS)}")
        if self.local is not None and self.local not in LOCAL_MODES:
            raise UserError(f"unknown local attention {self.local!r}; choose one of: "
                            f"{', '.join(LOCAL_MODES)}")
        _check_positive(self, "embedding_dim", "units", "attention_units")
        if not isinstance(self.attention_window, int) or self.attention_window < 0:
            # 0 is a window of one position, p_t itself.
            raise UserError(f"attention_window must be a non-negative integer, got "
                            f"{self.attention_window!r}")
        _check_rate(self.dropout)


@dataclass(frozen=True)
class TransformerConfig:
    """Sizes of the Transformer translator (Vaswani et al. 2017).

    Args:
        num_layers: encoder layers and decoder layers `N`.
        hidden_dim: model width `D`; a multiple of `num_heads` unless `head_dim` is given.
        num_heads: attention heads `H`.
        intermediate_dim: width of the feed-forward block.
        dropout: dropout rate.
        positions: `"sine"` (fixed sinusoids) or `"learned"` position embeddings.
        max_length: the longest source or target sequence, in tokens (with `<start>`/`<end>`).
        norm_first: pre-layer-norm (True) or post-layer-norm (False, as in the paper).
        tie_embeddings: share the target embedding with the output projection (and with
            the source embedding too when the run has one vocabulary, `DataConfig.shared_vocab`).
        warmup_steps: warm-up of the inverse-square-root learning-rate schedule.
        head_dim: each head's query/key/value size (None: `hidden_dim / num_heads`).
        attention_dropout: dropout rate of the attention weights (None: `dropout`). The paper
            drops only sub-layer outputs and embeddings (0 here); at 0 the attention may run
            fused, without forming its weights (`common.layers.MultiHeadAttention`: cuDNN's
            flash attention on a GPU under JAX).
        activation_dropout: dropout rate of the feed-forward block's inner (ReLU) activations
            (None: `dropout`). The paper has none there (0; fairseq's `activation_dropout`
            too); on a GPU it is the costliest dropout, its tensors 4x the model's width.
        fused_projections: compute each attention's projections as `(B x T)`-row matrix
            products, the self-attention's query, key and value as one
            (`common.layers.MultiHeadAttention`): the same weights and, to float rounding,
            the same outputs. Faster on a GPU (Transformer-base on an H200, docs/benchmarks.md)
            and for wide heads on a CPU, slower for narrow heads on a CPU, so off by default.
    """

    num_layers: int = 2
    hidden_dim: int = 128
    num_heads: int = 4
    intermediate_dim: int = 512
    dropout: float = 0.1
    positions: str = "sine"
    max_length: int = 64
    norm_first: bool = True
    tie_embeddings: bool = False
    warmup_steps: int = 400
    head_dim: int | None = None
    attention_dropout: float | None = None
    activation_dropout: float | None = None
    fused_projections: bool = False

    def __post_init__(self) -> None:
        if self.positions not in POSITIONS:
            raise UserError(
                f"unknown positions {self.positions!r}; choose one of: {', '.join(POSITIONS)}"
            )
        _check_positive(self, "num_layers", "hidden_dim", "num_heads", "intermediate_dim",
                        "max_length", "warmup_steps")
        if self.head_dim is not None:
            _check_positive(self, "head_dim")
        elif self.hidden_dim % self.num_heads:
            raise UserError(
                f"hidden_dim {self.hidden_dim} is not a multiple of num_heads {self.num_heads}"
            )
        _check_rate(self.dropout)
        if not isinstance(self.fused_projections, bool):
            raise UserError(f"fused_projections must be true or false, got "
                            f"{self.fused_projections!r}")
        for name in ("attention_dropout", "activation_dropout"):
            if getattr(self, name) is not None:
                _check_rate(getattr(self, name), name)


@dataclass(frozen=True)
class ModelConfig:
    """Which architecture, and the sizes of each.

    Args:
        arch: `"bahdanau"`, `"seq2seq-noattn"` or `"transformer"` (the
            `seq2seq.models.ARCHS` registry).
        bahdanau: sizes used when `arch` is `"bahdanau"` or `"seq2seq-noattn"`.
        transformer: sizes used when `arch == "transformer"`.
        label_smoothing: label smoothing of the token cross-entropy, in [0, 1).
        max_decode_length: the longest output generated, in tokens.
        length_penalty: beam search's GNMT length penalty α (Wu et al. 2016: scores divided by
            `((5 + length) / 6) ** α`; 0 ranks by raw log-probability, which favours short
            outputs): the run's default for validation, `evaluate`, `translate` and `export`.
        copy: a pointer-generator output that can copy source tokens (See et al. 2017;
            `seq2seq.copying`); Bahdanau and Transformer only.
    """

    arch: str = "transformer"
    bahdanau: BahdanauConfig = field(default_factory=BahdanauConfig)
    transformer: TransformerConfig = field(default_factory=TransformerConfig)
    label_smoothing: float = 0.0
    max_decode_length: int = 60
    length_penalty: float = LENGTH_PENALTY
    copy: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.label_smoothing < 1.0:
            raise UserError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        _check_positive(self, "max_decode_length")
        if self.length_penalty < 0:
            raise UserError(f"length_penalty must be >= 0, got {self.length_penalty}")
        if self.copy and self.arch == "seq2seq-noattn":
            raise UserError("copying points through the attention; seq2seq-noattn has none "
                            "(use --arch bahdanau or transformer with --copy)")


@dataclass(frozen=True)
class DataConfig:
    """Where the sentence pairs come from.

    Args:
        dataset: dataset name (`seq2seq.datasets`): `"tsv"` or `"dates"`.
        data: path of the training TSV (`tsv` only).
        reverse: swap the two columns (translate the second column into the first).
        lowercase: lowercase before tokenizing (off: the vocabulary keeps case).
        max_vocab: the largest vocabulary per side (None: every token seen `min_count` times).
        min_count: the fewest occurrences that put a token in the vocabulary.
        max_length: drop training pairs with more tokens than this on either side (words, or
            subword ids with `vocab="sentencepiece"`); for the Transformer at most its
            positions less one (`RunConfig.length_limit`).
        vocab: `"word"` (a `Vocabulary` per side from the tokenized text: `max_vocab`,
            `min_count`) or `"sentencepiece"` (subwords: a SentencePiece model trained on the
            training split's raw text, `seq2seq.vocabularies`).
        vocab_size: sentencepiece: the pieces per vocabulary, the four special ones included.
        sentencepiece_type: sentencepiece: `"unigram"` (Kudo 2018) or `"bpe"`.
        shared_vocab: sentencepiece: one vocabulary for both sides, trained on both (with the
            Transformer's `tie_embeddings`, one embedding for source, target and output).
    """

    dataset: str = "dates"
    data: str | None = None
    reverse: bool = False
    lowercase: bool = False
    max_vocab: int | None = None
    min_count: int = 1
    max_length: int = 50
    vocab: str = "word"
    vocab_size: int = 8000
    sentencepiece_type: str = "unigram"
    shared_vocab: bool = False

    def __post_init__(self) -> None:
        _check_choice("vocab", self.vocab, VOCABS)
        _check_choice("sentencepiece_type", self.sentencepiece_type, SENTENCEPIECE_TYPES)
        _check_positive(self, "vocab_size")
        _check_positive(self, "min_count")
        if self.max_vocab is not None and self.max_vocab < len(SPECIALS) + 1:
            raise UserError(f"max_vocab {self.max_vocab}: a vocabulary holds the "
                            f"{len(SPECIALS)} special tokens and at least one word; expected "
                            f"at least {len(SPECIALS) + 1}")
        if self.vocab == "word" and self.shared_vocab:
            raise UserError("--shared-vocab: one vocabulary for both sides is a SentencePiece "
                            "one; add --vocab sentencepiece")
        if self.vocab == "sentencepiece" and self.lowercase:
            raise UserError("lowercase applies to word vocabularies; SentencePiece keeps the "
                            "text as it is (use --vocab word)")


# The data settings that one kind of vocabulary uses and the other ignores: the kind, and the
# option that sets it.
VOCAB_SETTINGS = {
    "max_vocab": ("word", "--max-vocab"),
    "min_count": ("word", "--min-count"),
    "vocab_size": ("sentencepiece", "--vocab-size"),
    "sentencepiece_type": ("sentencepiece", "--sentencepiece-type"),
}


def check_vocabulary_settings(given: Mapping[str, Any],
                              preset: Mapping[str, Any] | None = None) -> None:
    """A one-line `UserError` for a data setting given that the run's vocabulary ignores
    (`--max-vocab` with `--vocab sentencepiece`, `--vocab-size` with word vocabularies).

    Only what the user chose is held to it: a preset's own setting (spa-eng-cpu's `max_vocab`)
    is not, and neither is a value equal to the one the run would have anyway (a whole
    `config.json` given as `--config` repeats the defaults). For a new run, where the options
    and the config file (`given`) and the preset are still apart (`Family.preset`).

    Args:
        given: the `data` settings of the options and the `--config` file.
        preset: the `data` settings of the preset, if any.
    """
    base = {**asdict(DataConfig()), **(preset or {})}
    vocab = given.get("vocab", base["vocab"])
    for name, (kind, flag) in VOCAB_SETTINGS.items():
        if kind != vocab and name in given and given[name] != base[name]:
            raise UserError(f"{flag} {given[name]}: applies to {kind} vocabularies, and this "
                            f"run's is {vocab} (add --vocab {kind}, or leave out {flag})")


@dataclass(frozen=True)
class RunConfig:
    """Everything a translator run directory was made with (`RUN_DIR/config.json`).

    Args:
        model: the `ModelConfig`.
        data: the `DataConfig`.
        training: `to_dict` of the `common.training.TrainingConfig`.
        preset: the preset it started from, if any.
        family: always `"seq2seq"`.
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    training: dict[str, Any] = field(default_factory=dict)
    preset: str | None = None
    family: str = "seq2seq"

    def __post_init__(self) -> None:
        if self.model.copy and self.data.vocab != "word":
            raise UserError("--copy copies source words: it applies to word vocabularies "
                            "(--vocab word), not to --vocab sentencepiece")

    @property
    def length_limit(self) -> int:
        """The most tokens (or subwords) a side of a training pair may have: `data.max_length`,
        and for the Transformer at most its positions less one (the decoder reads `<start>`
        before the target), so that no pair kept is longer than the model can read."""
        limit = self.data.max_length
        if self.model.arch == "transformer":
            limit = min(limit, self.model.transformer.max_length - 1)
        return limit


def _check_positive(config: Any, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or value < 1:
            raise UserError(f"{name} must be a positive integer, got {value!r}")


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UserError(f"unknown {name} {value!r}; choose one of: {', '.join(choices)}")


def _check_rate(rate: float, name: str = "dropout") -> None:
    if not 0.0 <= rate < 1.0:
        raise UserError(f"{name} must be in [0, 1), got {rate}")
