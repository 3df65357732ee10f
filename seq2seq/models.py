"""The translator architectures by name, and building one from a `ModelConfig`.

`ARCHS` maps an architecture name to a builder `(ModelConfig, source_vocab_size,
target_vocab_size) -> keras.Model`. The builders import Keras only when called, so the command
line can list the names without loading TensorFlow.

Every model built here has the same translator interface:
- `model({"source": (B, S), "target_in": (B, T)}, training=...) -> logits (B, T, V)`;
- `model.loss_terms({"source", "target_in", "target_out"}, training) -> {"loss_sum", "count",
  "accuracy"}` for `common.training.Trainer`;
- `model.initial_state(source (B, S)) -> state` and `model.make_step(...) -> step(tokens (N,),
  state, index) -> (logits (N, V), state, alpha (N, S))` for `common.decoding` (`alpha` is
  `(N, 0)` for `seq2seq-noattn`, which has no attention).

A model built with `config.copy` (`model.copy` true) also takes `source_copy (B, S)` in its
inputs and in `initial_state(source, source_copy)`, and gives log-probabilities over the
extended vocabulary `V + S` where the others give logits (`seq2seq.copying`).
"""

from __future__ import annotations

from typing import Any

from common.registry import Registry
from seq2seq.config import ModelConfig

ARCHS = Registry("architecture")


@ARCHS.register("bahdanau")
def build_bahdanau(config: ModelConfig, source_vocab_size: int, target_vocab_size: int) -> Any:
    """A `BahdanauTranslator` with the sizes of `config.bahdanau`."""
    from seq2seq.bahdanau import BahdanauTranslator

    sizes = config.bahdanau
    return BahdanauTranslator(
        source_vocab_size,
        target_vocab_size,
        embedding_dim=sizes.embedding_dim,
        units=sizes.units,
        cell=sizes.cell,
        score=sizes.score,
        attention_units=sizes.attention_units,
        input_feeding=sizes.input_feeding,
        dropout=sizes.dropout,
        label_smoothing=config.label_smoothing,
        local=sizes.local,
        attention_window=sizes.attention_window,
        copy=config.copy,
        name="bahdanau",
    )


@ARCHS.register("seq2seq-noattn")
def build_encoder_decoder(config: ModelConfig, source_vocab_size: int,
                          target_vocab_size: int) -> Any:
    """An `EncoderDecoderTranslator` (no attention) with the recurrent sizes of
    `config.bahdanau`."""
    from seq2seq.encoder_decoder import EncoderDecoderTranslator

    sizes = config.bahdanau
    return EncoderDecoderTranslator(
        source_vocab_size,
        target_vocab_size,
        embedding_dim=sizes.embedding_dim,
        units=sizes.units,
        cell=sizes.cell,
        dropout=sizes.dropout,
        label_smoothing=config.label_smoothing,
        name="seq2seq_noattn",
    )


@ARCHS.register("transformer")
def build_transformer(config: ModelConfig, source_vocab_size: int, target_vocab_size: int) -> Any:
    """A `TransformerTranslator` with the sizes of `config.transformer`."""
    from seq2seq.transformer import TransformerTranslator

    sizes = config.transformer
    return TransformerTranslator(
        source_vocab_size,
        target_vocab_size,
        num_layers=sizes.num_layers,
        hidden_dim=sizes.hidden_dim,
        num_heads=sizes.num_heads,
        intermediate_dim=sizes.intermediate_dim,
        dropout=sizes.dropout,
        positions=sizes.positions,
        max_length=sizes.max_length,
        norm_first=sizes.norm_first,
        tie_embeddings=sizes.tie_embeddings,
        label_smoothing=config.label_smoothing,
        copy=config.copy,
        head_dim=sizes.head_dim,
        name="transformer",
    )


def build_model(config: ModelConfig, source_vocab_size: int, target_vocab_size: int) -> Any:
    """Builds the architecture `config.arch` (an `UnknownNameError` for an unknown one)."""
    return ARCHS.get(config.arch)(config, source_vocab_size, target_vocab_size)


def learning_rate(config: ModelConfig, peak_learning_rate: float) -> Any:
    """The learning rate to train `config.arch` with: the inverse-square-root warm-up schedule
    for the Transformer, the constant `peak_learning_rate` otherwise."""
    if config.arch == "transformer":
        from seq2seq.transformer_layers import InverseSqrtSchedule

        return InverseSqrtSchedule(peak_learning_rate, config.transformer.warmup_steps)
    return peak_learning_rate
