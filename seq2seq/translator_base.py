"""What every translator shares: its config, its build, its training loss and its Keras config.

A translator is built from its `seq2seq.config.ModelConfig` (as nanoGPT's `GPT(GPTConfig)`):
`Translator(config, source_vocab_size, target_vocab_size)`. The sizes of its architecture
(`config.bahdanau` or `config.transformer`, by `SIZES_SECTION`) become attributes of the model
(`model.units`, `model.num_heads`, ...), so one hyperparameter is written once, in its
dataclass. `get_config` stores `to_dict(config)`; `from_config` rebuilds the dataclass.

Dimensions: `B` batch, `S` source steps, `T` target steps, `V` target vocabulary.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
from keras import ops

from common.config import from_dict, to_dict
from seq2seq.config import SIZES_SECTION, BahdanauConfig, ModelConfig, TransformerConfig
from seq2seq.losses import log_prob_loss_terms, token_loss_terms


def model_config(config: ModelConfig | BahdanauConfig | TransformerConfig | dict | None,
                 arch: str) -> ModelConfig:
    """The `ModelConfig` of architecture `arch` from a `ModelConfig`, its dict, the sizes
    dataclass of the architecture alone (`BahdanauConfig`, `TransformerConfig`), or None (the
    defaults). `config.arch` is set to `arch`.

    Example:
    >>> model_config(BahdanauConfig(units=8), "bahdanau").bahdanau.units
    8
    """
    if config is None or isinstance(config, dict):
        config = from_dict(ModelConfig, {"arch": arch, **(config or {})})
    elif isinstance(config, (BahdanauConfig, TransformerConfig)):
        config = ModelConfig(arch=arch, **{SIZES_SECTION[arch]: config})
    elif not isinstance(config, ModelConfig):
        raise TypeError(f"expected a ModelConfig, got {type(config).__name__}")
    return dataclasses.replace(config, arch=arch)


class Translator(keras.Model):
    """The base of the translators: config handling, `build`, `loss_terms` and `get_config`.

    A subclass sets `arch` (its `seq2seq.models.ARCHS` name), creates its layers in
    `__init__` after `super().__init__` (the sizes are attributes by then) and implements
    `call(inputs, training, return_attention)`, `initial_state` and `make_step`.

    Args:
        config: a `ModelConfig` (or its dict, or the architecture's sizes dataclass alone).
        source_vocab_size: source vocabulary size.
        target_vocab_size: target vocabulary size `V`.
        shared_vocab: source and target share one vocabulary (the same ids): the
            Transformer's `tie_embeddings` then ties its source embedding too.

    Call arguments:
        inputs: a dict with `source` `(B, S)` int and `target_in` `(B, T)` int (`<start>`
            followed by the target, without `<end>`); with `copy`, optionally `source_copy
            (B, S)` (`seq2seq.copying.copy_ids`; without it every source token points at
            `<unk>`).
        training: whether dropout is on.
        return_attention: also return the attention weights.

    Returns:
        logits `(B, T, V)` (log-probabilities `(B, T, V + S)` with `copy`).
    """

    arch: str = ""

    def __init__(self, config: ModelConfig | BahdanauConfig | TransformerConfig | dict | None,
                 source_vocab_size: int, target_vocab_size: int, shared_vocab: bool = False,
                 **kwargs):
        super().__init__(**kwargs)
        self.model_config = model_config(config, self.arch)
        self.sizes = getattr(self.model_config, SIZES_SECTION[self.arch])
        for field in dataclasses.fields(self.sizes):
            setattr(self, field.name, getattr(self.sizes, field.name))
        self.source_vocab_size = int(source_vocab_size)
        self.target_vocab_size = int(target_vocab_size)
        self.shared_vocab = bool(shared_vocab)
        if self.shared_vocab and self.source_vocab_size != self.target_vocab_size:
            raise ValueError(f"a shared vocabulary has one size; got {self.source_vocab_size} "
                             f"source, {self.target_vocab_size} target ids")
        self.label_smoothing = self.model_config.label_smoothing
        self.copy = self.model_config.copy

    def build(self, input_shape=None):
        # Sub-layers are built by one tiny forward pass, so that a checkpoint can be restored
        # into a freshly built model.
        tokens = ops.ones((1, 2), "int32")
        self.call({"source": tokens, "target_in": tokens})
        self.built = True

    def ensure_built(self) -> None:
        """Builds the model if it is not yet (before decoding from a fresh model)."""
        if not self.built:
            self.build()

    def loss_terms(self, batch, training: bool) -> dict:
        """Masked (label-smoothed) token cross-entropy terms for `common.training.Trainer`.

        `batch` is a dict of `source (B, S)`, `target_in (B, T)`, `target_out (B, T)` (and
        `source_copy (B, S)` with `copy`, `target_out` then over the extended vocabulary).
        """
        inputs = {"source": batch["source"], "target_in": batch["target_in"]}
        if self.copy:
            inputs["source_copy"] = batch.get("source_copy")
            log_probs = self(inputs, training=training)
            return log_prob_loss_terms(log_probs, batch["target_out"], self.label_smoothing,
                                       smoothing_size=self.target_vocab_size)
        logits = self(inputs, training=training)
        return token_loss_terms(logits, batch["target_out"], self.label_smoothing)

    def decoding_state(self, source: Any, max_length: Any, source_copy: Any = None,
                       max_length_limit: int | None = None, growing: bool = False) -> Any:
        """The decoding state of `source (B, S)` for `max_length` steps (`initial_state` with
        what each translator takes: a copying model's `source_copy`, the Transformer's cache
        size).

        The Transformer's self-attention cache holds `max_length` steps and its size must be a
        Python int: for a `max_length` tensor (an export) it is built for `max_length_limit`
        steps and cut to `max_length`, the same cache. With `growing` (TensorFlow graphs, not
        XLA) it starts empty and grows by a step at each step, whatever `max_length`.
        """
        options = {"source_copy": source_copy} if getattr(self, "copy", False) else {}
        if not hasattr(self, "max_length"):  # no cache: the recurrent translators
            return self.initial_state(source, **options)
        if growing:
            return self.initial_state(source, growing=True, **options)
        if isinstance(max_length, int):
            return self.initial_state(source, max_length=max_length, **options)
        state = self.initial_state(source, max_length=max_length_limit, **options)
        return dict(state, self_cache=tuple((keys[:, :max_length], values[:, :max_length])
                                            for keys, values in state["self_cache"]))

    def get_config(self):
        config = super().get_config()
        config.update(config=to_dict(self.model_config),
                      source_vocab_size=self.source_vocab_size,
                      target_vocab_size=self.target_vocab_size,
                      shared_vocab=self.shared_vocab)
        return config
