"""The translator architectures by name, and building one from a `ModelConfig`.

`ARCHS` maps an architecture name to the `module:class` path of its translator, a
`seq2seq.translator_base.Translator` built as `Translator(config, source_vocab_size,
target_vocab_size)`. The class is imported only when a model is built, so the command line can
list the names without loading TensorFlow.

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

import importlib
from typing import Any

from common.registry import Registry
from seq2seq.config import ModelConfig

ARCHS = Registry("architecture")
# The architecture name -> "module:class" of its translator, which takes the `ModelConfig`.
for _name, _path in (("bahdanau", "seq2seq.bahdanau:BahdanauTranslator"),
                     ("seq2seq-noattn", "seq2seq.encoder_decoder:EncoderDecoderTranslator"),
                     ("transformer", "seq2seq.transformer:TransformerTranslator")):
    ARCHS.add(_name, _path)


def translator_class(arch: str) -> type:
    """The translator class of architecture `arch`, imported on first use (an
    `UnknownNameError` for an unknown name)."""
    module, name = ARCHS.get(arch).split(":")
    return getattr(importlib.import_module(module), name)


def build_model(config: ModelConfig, source_vocab_size: int, target_vocab_size: int,
                shared_vocab: bool = False) -> Any:
    """Builds the architecture `config.arch` (an `UnknownNameError` for an unknown one);
    `shared_vocab`: one vocabulary for both sides (`DataConfig.shared_vocab`)."""
    return translator_class(config.arch)(config, source_vocab_size, target_vocab_size,
                                         shared_vocab=shared_vocab,
                                         name=config.arch.replace("-", "_"))


def learning_rate(config: ModelConfig, peak_learning_rate: float) -> Any:
    """The learning rate to train `config.arch` with: the inverse-square-root warm-up schedule
    for the Transformer, the constant `peak_learning_rate` otherwise."""
    if config.arch == "transformer":
        from seq2seq.transformer_layers import InverseSqrtSchedule

        return InverseSqrtSchedule(peak_learning_rate, config.transformer.warmup_steps)
    return peak_learning_rate
