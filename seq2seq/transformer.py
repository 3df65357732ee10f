"""The Transformer translator, with cached incremental decoding.

Paper: Vaswani et al., "Attention Is All You Need", NeurIPS 2017
(https://arxiv.org/abs/1706.03762).

Dimensions: `B` batch, `S` source steps, `T` target steps, `D` model width, `H` heads,
`K` the head size (`D / H` by default), `N` layers, `V` target vocabulary, `T_max` the decoding
cache length.
"""

from __future__ import annotations

import math

import keras
import keras_hub
from keras import ops

from common.errors import UserError
from common.layers.dropout import Dropout
from common.layers.layer_norm import LayerNormalization, normalize
from common.layers.quantized_weights import float_embeddings, float_reverse_embeddings
from seq2seq.config import ModelConfig, TransformerConfig
from seq2seq.copying import UNK_ID, embeddable, pointer_generator_log_probs
from seq2seq.transformer_layers import (
    BLOCK_SIZES,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)
from seq2seq.translator_base import Translator


@keras.saving.register_keras_serializable(package="seq2seq")
class TransformerTranslator(Translator):
    """An encoder-decoder Transformer for translation.

    Token embeddings are scaled by `sqrt(D)` and added to sinusoidal
    (`keras_hub.layers.SinePositionEncoding`) or learned (`keras_hub.layers.PositionEmbedding`)
    positions. Source padding (id 0) is masked in every attention over the source; the decoder
    self-attention is causal. The output projection is a `keras_hub.layers.ReversibleEmbedding`,
    tied to the target embedding when `tie_embeddings`; with a shared vocabulary
    (`shared_vocab`) the source embedding is that same layer too (Press and Wolf 2017).

    Decoding is incremental: `initial_state` encodes the source once and computes each decoder
    layer's cross-attention keys/values; `step` runs one token through the decoder, writing its
    self-attention keys/values into a cache `(B, 2, T_max, H, K)` per layer, and gives the same
    logits as the full pass at that position.

    With `copy` the output is a pointer-generator (`seq2seq.copying`): the copy distribution
    is the last decoder layer's cross-attention averaged over heads, and `p_gen =
    sigmoid(w [x_t; e_t])` is read from the decoder's output `x_t` and its input embedding
    `e_t`. The model then returns log-probabilities over the extended vocabulary `V + S`
    instead of logits, and takes `source_copy (B, S)` in its inputs and `initial_state`.

    Args:
        config: a `ModelConfig` (its `transformer` sizes, `label_smoothing` and `copy`), its
            dict, or a `TransformerConfig` alone. The sizes (`num_layers` `N`, `hidden_dim`
            `D`, `num_heads` `H`, `intermediate_dim`, `dropout`, `positions`, `max_length` (the
            longest sequence: learned positions, cache size), `norm_first`, `tie_embeddings`,
            `head_dim` `K`, None for `D / H`; `attention_dropout` and `activation_dropout`, None
            for `dropout`; `fused_projections`) become attributes of the model.
        source_vocab_size: source vocabulary size.
        target_vocab_size: target vocabulary size `V`.

    Call arguments:
        inputs: a dict with `source` `(B, S)` int and `target_in` `(B, T)` int (and, with
            `copy`, optionally `source_copy (B, S)`; without it every source token points at
            `<unk>`).
        training: whether dropout is on.
        return_attention: also return each decoder layer's cross-attention `(B, H, T, S)`.

    Returns:
        logits `(B, T, V)` (log-probabilities `(B, T, V + S)` with `copy`).

    Example:
    >>> sizes = TransformerConfig(num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16)
    >>> model = TransformerTranslator(sizes, 20, 30)
    >>> logits = model({"source": ops.ones((2, 5), "int32"),
    ...                 "target_in": ops.ones((2, 4), "int32")})
    >>> tuple(logits.shape)
    (2, 4, 30)
    """

    arch = "transformer"

    def __init__(self, config: ModelConfig | TransformerConfig | dict | None,
                 source_vocab_size: int, target_vocab_size: int, **kwargs):
        super().__init__(config, source_vocab_size, target_vocab_size, **kwargs)
        hidden_dim, max_length = self.hidden_dim, self.max_length
        init = keras.initializers.RandomNormal(stddev=hidden_dim**-0.5)
        # The output projection in the compute dtype: an embedding's variable is not
        # autocast, so a tied projection under mixed_bfloat16 would otherwise run in float32
        # (on an H100 its three matrix products took 16% of Transformer-base's step). The loss
        # casts the logits to float32 before its reductions.
        self.target_embedding = keras_hub.layers.ReversibleEmbedding(
            target_vocab_size, hidden_dim, tie_weights=self.tie_embeddings,
            embeddings_initializer=init, name="target_embedding",
            reverse_dtype=self.dtype_policy.compute_dtype,
        )
        if self.tie_embeddings and self.shared_vocab:  # tied three ways: one weight
            self.source_embedding = self.target_embedding
        else:
            self.source_embedding = keras.layers.Embedding(
                source_vocab_size, hidden_dim, embeddings_initializer=init,
                name="source_embedding")
        if self.positions == "learned":
            self.source_positions = keras_hub.layers.PositionEmbedding(
                max_length, name="source_positions"
            )
            self.target_positions = keras_hub.layers.PositionEmbedding(
                max_length, name="target_positions"
            )
        else:
            self.source_positions = keras_hub.layers.SinePositionEncoding(name="source_positions")
            self.target_positions = keras_hub.layers.SinePositionEncoding(name="target_positions")
        block = {name: getattr(self, name) for name in BLOCK_SIZES}
        # One attribute per layer: tf.train.Checkpoint does not follow Keras' tracked lists.
        for i in range(self.num_layers):
            setattr(self, f"encoder_{i}", TransformerEncoderLayer(**block, name=f"encoder_{i}"))
            setattr(self, f"decoder_{i}", TransformerDecoderLayer(**block, name=f"decoder_{i}"))
        self.encoder_norm = LayerNormalization(epsilon=1e-5, name="encoder_norm")
        self.decoder_norm = LayerNormalization(epsilon=1e-5, name="decoder_norm")
        self.drop = Dropout(self.dropout)
        self._scale = math.sqrt(hidden_dim)
        if self.copy:
            self.generate_gate = keras.layers.Dense(1, activation="sigmoid", name="generate_gate")

    @property
    def encoder_layers(self) -> list[TransformerEncoderLayer]:
        return [getattr(self, f"encoder_{i}") for i in range(self.num_layers)]

    @property
    def decoder_layers(self) -> list[TransformerDecoderLayer]:
        return [getattr(self, f"decoder_{i}") for i in range(self.num_layers)]

    @property
    def attention_layers(self) -> list:
        """Every `MultiHeadAttention` of the encoder and decoder layers, in layer order."""
        return [getattr(layer, name) for layer in self.encoder_layers + self.decoder_layers
                for name in layer.attentions]

    # -- full pass -----------------------------------------------------------------------

    def _embed(self, embedding, positions, tokens, start_index=0, training=False):
        x = embedding(tokens) * self._scale
        x = x + ops.cast(positions(x, start_index=start_index), x.dtype)
        return self.drop(x, training=training)

    def encode(self, source, training=False):
        """`source (B, S)` -> `(memory (B, S, D), source_mask (B, S) bool)`."""
        source_mask = ops.not_equal(source, 0)
        x = self._embed(self.source_embedding, self.source_positions, source, training=training)
        for layer in self.encoder_layers:
            x = layer(x, padding_mask=source_mask, training=training)
        if self.norm_first:
            x = self.encoder_norm(x)
        return x, source_mask

    def decode(self, target_in, memory, source_mask, training=False, source_copy=None,
               return_weights=True):
        """Teacher-forced decoder: -> `(logits (B, T, V), [cross weights (B, H, T, S)] * N)`
        (log-probabilities `(B, T, V + S)` with `copy`). With `return_weights=False` the
        weights are None (but the last layer's with `copy`, which reads them), so that the
        cross-attention may run fused."""
        if self.copy:
            target_in = embeddable(target_in, self.target_vocab_size)
        target_mask = ops.not_equal(target_in, 0)
        embedded = x = self._embed(self.target_embedding, self.target_positions, target_in,
                                   training=training)
        weights = []
        for i, layer in enumerate(self.decoder_layers):
            need = return_weights or (self.copy and i == self.num_layers - 1)
            x, w = layer(x, memory, target_mask=target_mask, source_mask=source_mask,
                         training=training, return_weights=need)
            weights.append(w)
        if self.norm_first:
            x = self.decoder_norm(x)
        logits = self.target_embedding(x, reverse=True)
        if self.copy:
            if source_copy is None:
                source_copy = ops.where(source_mask, UNK_ID, 0)
            logits = self._pointer(logits, x, embedded, weights[-1], source_copy)
        return logits, weights

    def _pointer(self, logits, x, embedded, weights, source_copy):
        """The pointer-generator log-probabilities `(B, T, V + S)` from the vocabulary
        `logits (B, T, V)`, decoder output `x` and input `embedded` `(B, T, D)` and the last
        layer's cross-attention `weights (B, H, T, S)`."""
        p_gen = self.generate_gate(ops.concatenate([x, embedded], axis=-1))[..., 0]
        alpha = ops.mean(ops.cast(weights, "float32"), axis=1)
        return pointer_generator_log_probs(logits, p_gen, alpha, source_copy)

    def call(self, inputs, training=False, return_attention=False):
        memory, source_mask = self.encode(inputs["source"], training=training)
        logits, weights = self.decode(inputs["target_in"], memory, source_mask, training,
                                      source_copy=inputs.get("source_copy"),
                                      return_weights=return_attention)
        if return_attention:
            return logits, weights
        return logits

    # -- incremental decoding ------------------------------------------------------------

    def initial_state(self, source, max_length: int | None = None, source_copy=None,
                      growing: bool = False):
        """Encodes `source (B, S)` once for decoding.

        Args:
            source: `(B, S)` int token ids.
            max_length: the most steps that will be decoded (the self-attention cache size);
                at most the model's `max_length` with learned positions. Unused with
                `growing`.
            source_copy: `(B, S)` the copy ids of a `copy` model (`seq2seq.copying`).
            growing: a self-attention cache that grows by a position at each step
                (`TransformerDecoderLayer.call_step`): TensorFlow graphs only, not XLA or JAX.

        Returns:
            A dict with leading dimension B: `self_cache`, per decoder layer the `(keys,
            values)` of the positions decoded, each `(B, T_max, H, K)` zeros (under the key
            `grown_cache` and `(B, 0, H, K)` with `growing`); `cross_cache`, per layer the
            `(keys, values)` of the source, each `(B, S, H, K)`; `source_mask (B, S)` float;
            with `copy`, `copy_ids (B, S)` int32.
        """
        self.ensure_built()
        max_length = 0 if growing else (max_length or self.max_length)
        memory, source_mask = self.encode(source, training=False)
        batch = ops.shape(source)[0]
        key_dim = self.head_dim or self.hidden_dim // self.num_heads
        shape = (batch, max_length, self.num_heads, key_dim)
        state = {
            "grown_cache" if growing else "self_cache": tuple(
                (ops.zeros(shape, memory.dtype), ops.zeros(shape, memory.dtype))
                for _ in self.decoder_layers),
            "cross_cache": tuple(layer.cross_attention_cache(memory)
                                 for layer in self.decoder_layers),
            "source_mask": ops.cast(source_mask, "float32"),
        }
        if self.copy:
            if source_copy is None:
                source_copy = ops.where(source_mask, UNK_ID, 0)
            state["copy_ids"] = ops.cast(source_copy, "int32")
        return state

    def step_weights(self) -> dict:
        """The weights `fast_step` reads, read and laid out once per decode (outside its loop):
        each decoder layer's `step_weights`; the target embedding `(V, D)` in its compute
        dtype; the output kernel `(D, V)` (the embedding transposed once, when tied) in the
        dtype of the output product (`reverse_dtype`); the final norm (pre-norm); the learned
        positions `(max_length, D)`, or, with sine positions, the encoding's timescales and
        masks (keras-hub's own formula, in its compute dtype). int8 weights are read as their
        float values (`common.layers.quantized_weights`)."""
        self.ensure_built()
        embedding = self.target_embedding
        table = float_embeddings(embedding)
        kernel = (ops.transpose(table) if embedding.tie_weights
                  else float_reverse_embeddings(embedding))
        output_dtype = embedding.reverse_dtype or keras.backend.result_type(
            embedding.compute_dtype, kernel.dtype)
        weights = {
            "layers": [layer.step_weights() for layer in self.decoder_layers],
            # (Cast, which reads a variable here: `convert_to_tensor` would leave it to be
            # read at every step on TensorFlow.)
            "embeddings": ops.cast(table, embedding.compute_dtype),
            "output_kernel": ops.cast(kernel, output_dtype),
        }
        if self.norm_first:  # (a post-norm model leaves `decoder_norm` unused and unbuilt)
            gamma, beta = self.decoder_norm.gamma, self.decoder_norm.beta
            weights["norm"] = (ops.cast(gamma, gamma.dtype), ops.cast(beta, beta.dtype))
        positions = self.target_positions
        if self.positions == "learned":
            weights["positions"] = ops.cast(positions.position_embeddings,
                                            positions.compute_dtype)
        else:  # SinePositionEncoding.call, for one position
            dim, dtype = self.hidden_dim, positions.compute_dtype
            min_freq = ops.cast(1 / positions.max_wavelength, dtype)
            weights["timescales"] = ops.power(
                min_freq, ops.cast(2 * (ops.arange(dim) // 2), dtype) / ops.cast(dim, dtype))
            weights["cos_mask"] = ops.cast(ops.arange(dim) % 2, dtype)
            weights["sin_mask"] = 1 - weights["cos_mask"]
        return weights

    def fast_step(self, tokens, state, index, weights):
        """One token through the decoder (`TransformerDecoderLayer.call_step`), with `weights`
        from `step_weights()`: -> `(logits (N, V) float32, new_state, [(N, H, S)] * N)`
        (log-probabilities `(N, V + S)` with `copy`), the logits of the full pass at position
        `index` (tested against it)."""
        if self.copy:
            tokens = embeddable(tokens, self.target_vocab_size)
        x = ops.take(weights["embeddings"], tokens, axis=0) * self._scale
        if "timescales" in weights:
            angles = ops.cast(index, weights["timescales"].dtype) * weights["timescales"]
            positions = (ops.sin(angles) * weights["sin_mask"]
                         + ops.cos(angles) * weights["cos_mask"])
        else:  # (1, D)
            positions = ops.slice(weights["positions"], [index, 0], [1, self.hidden_dim])
        embedded = x = x + ops.cast(positions, x.dtype)
        growing = "grown_cache" in state
        cache_key = "grown_cache" if growing else "self_cache"
        visible = None
        if not growing:
            max_length = ops.shape(state["self_cache"][0][0])[1]
            visible = ops.less_equal(ops.arange(max_length), index)[None, :, None]
        source_visible = ops.cast(state["source_mask"], "bool")[:, :, None]
        caches, attention = [], []
        for i, layer in enumerate(self.decoder_layers):
            x, cache, w = layer.call_step(x, state[cache_key][i], state["cross_cache"][i],
                                          index, visible, source_visible, weights["layers"][i],
                                          growing=growing)
            caches.append(cache)
            attention.append(w)
        if self.norm_first:
            x = normalize(x, *weights["norm"], self.decoder_norm.epsilon)
        kernel = weights["output_kernel"]
        logits = ops.matmul(ops.cast(x, kernel.dtype), kernel)
        if self.copy:
            logits = self._pointer(logits[:, None], x[:, None], embedded[:, None],
                                   attention[-1][:, :, None], state["copy_ids"])[:, 0]
        return ops.cast(logits, "float32"), {**state, cache_key: tuple(caches)}, attention

    def make_step(self, attention_layer: int = -1, attention_head: int | None = None):
        """The `step(tokens, state, index)` for `common.decoding`: `fast_step`, with the
        weights read once, here. Call `make_step` inside the function that decodes (the
        `tf.function` of `seq2seq.inference.search` and the export, the `jax.jit` of
        `common.decoding.compiled`), so that they are read at every call of it.

        Args:
            attention_layer: which decoder layer's cross-attention to return (-1: the last).
            attention_head: which head, or None for the average over heads: an int, or a
                scalar int tensor read each time the step runs (a `tf.Variable`: one traced
                search then serves every head, `seq2seq.inference.Translator.module`).

        Returns:
            A function `(tokens (N,), state, index) -> (logits (N, V), state, alpha (N, S))`.
        """
        if not -self.num_layers <= attention_layer < self.num_layers:
            raise UserError(f"attention layer {attention_layer} does not exist; expected "
                            f"-{self.num_layers}..{self.num_layers - 1}")
        if isinstance(attention_head, int) and not 0 <= attention_head < self.num_heads:
            raise UserError(f"attention head {attention_head} does not exist; expected "
                            f"0..{self.num_heads - 1} (or none for the average)")
        layer = range(self.num_layers)[attention_layer]
        weights = self.step_weights()

        def step(tokens, state, index):
            logits, new_state, attention = self.fast_step(tokens, state, index, weights)
            w = attention[layer]
            alpha = (ops.mean(w, axis=1) if attention_head is None
                     else ops.take(w, attention_head, axis=1))
            return logits, new_state, alpha

        return step
