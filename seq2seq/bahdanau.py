"""RNNsearch: a bidirectional recurrent encoder and an attentive recurrent decoder.

Paper: Bahdanau, Cho and Bengio, "Neural Machine Translation by Jointly Learning to Align and
Translate", ICLR 2015 (https://arxiv.org/abs/1409.0473); optional input feeding and local
attention from Luong, Pham and Manning, "Effective Approaches to Attention-based Neural Machine
Translation", 2015 (https://arxiv.org/abs/1508.04025); optional copying from See, Liu and
Manning, "Get To The Point", 2017 (`seq2seq.copying`).

Dimensions: `B` batch, `S` source steps, `T` target steps, `E` embedding, `U` recurrent units,
`V` target vocabulary.
"""

from __future__ import annotations

import keras
from keras import ops

from common.errors import UserError
from common.layers import Attention, LocalAttention
from seq2seq.config import BahdanauConfig, ModelConfig
from seq2seq.copying import UNK_ID, embeddable, pointer_generator_log_probs
from seq2seq.translator_base import Translator


class RecurrentTranslator(Translator):
    """The recurrent encoder-decoder both `BahdanauTranslator` and
    `seq2seq.encoder_decoder.EncoderDecoderTranslator` are: embeddings, a bidirectional
    GRU/LSTM encoder whose final states are bridged into the decoder's initial state, a decoder
    cell reading `[y_{t-1}; c_t]` (plus the previous attentional vector with input feeding), the
    attentional vector `a_t = tanh(W [s_t; c_t; y_{t-1}])` and the output projection.

    A subclass says what the decoder reads of the source, the context `c_t`: it creates the
    layers for it (`_create_memory_layers`), keeps what it needs of the encoder in the state
    (`_memory`) and reads it at each step (`_attend`). Sizes come from `config.bahdanau`.

    Args:
        config: a `ModelConfig` (or its dict, or a `BahdanauConfig`).
        source_vocab_size: source vocabulary size.
        target_vocab_size: target vocabulary size `V`.
    """

    # The longest source the `location` score has a bias for.
    max_source_length = 128

    def __init__(self, config: ModelConfig | BahdanauConfig | dict | None,
                 source_vocab_size: int, target_vocab_size: int, **kwargs):
        super().__init__(config, source_vocab_size, target_vocab_size, **kwargs)
        rnn = keras.layers.LSTM if self.cell == "lstm" else keras.layers.GRU
        self.source_embedding = keras.layers.Embedding(
            source_vocab_size, self.embedding_dim, name="source_embedding"
        )
        self.target_embedding = keras.layers.Embedding(
            target_vocab_size, self.embedding_dim, name="target_embedding"
        )
        self.encoder = keras.layers.Bidirectional(
            rnn(self.units, return_sequences=True, return_state=True), name="encoder"
        )
        # One attribute per layer: tf.train.Checkpoint does not follow Keras' tracked lists.
        self.bridge_h = keras.layers.Dense(self.units, activation="tanh", name="bridge_h")
        if self.cell == "lstm":
            self.bridge_c = keras.layers.Dense(self.units, activation="tanh", name="bridge_c")
        self._create_memory_layers()
        cell_class = keras.layers.LSTMCell if self.cell == "lstm" else keras.layers.GRUCell
        self.decoder_cell = cell_class(self.units, name="decoder_cell")
        self.attentional = keras.layers.Dense(self.units, activation="tanh", name="attentional")
        self.output_projection = keras.layers.Dense(target_vocab_size, name="output_projection")
        self.embedding_dropout = keras.layers.Dropout(self.dropout)
        self.output_dropout = keras.layers.Dropout(self.dropout)
        if self.copy:
            self.generate_gate = keras.layers.Dense(1, activation="sigmoid", name="generate_gate")

    @property
    def _num_states(self) -> int:
        return 2 if self.cell == "lstm" else 1

    @property
    def _bridges(self) -> list:
        return [self.bridge_h] + ([self.bridge_c] if self.cell == "lstm" else [])
    def _create_memory_layers(self) -> None:
        """The layers that read the encoder states."""
        raise NotImplementedError

    def _memory(self, values, forward, backward, mask) -> dict:
        """What the decoder keeps of the source (entries of the decoding state)."""
        raise NotImplementedError

    def _attend(self, query, state):
        """`query (B, U)` -> `(context (B, C), alpha (B, S'))` from the state's memory."""
        raise NotImplementedError

    # -- encoder -------------------------------------------------------------------------

    def encode(self, source, training=False, source_copy=None):
        """Encodes `source (B, S)` into the decoder's initial state (a dict, leading dim B).

        `source_copy (B, S)` is the copy ids of a `copy` model (default: every real source
        token points at `<unk>`).
        """
        mask = ops.not_equal(source, 0)
        x = self.embedding_dropout(self.source_embedding(source), training=training)
        outputs = self.encoder(x, mask=mask, training=training)
        values, states = outputs[0], outputs[1:]
        n = self._num_states
        forward, backward = states[:n], states[n:]
        recurrent = [
            layer(ops.concatenate([f, b], axis=-1))
            for layer, f, b in zip(self._bridges, forward, backward)
        ]
        values = values * ops.cast(mask[:, :, None], values.dtype)
        batch = ops.shape(source)[0]
        state = {
            "recurrent": recurrent,
            "feed": ops.zeros((batch, self.units), values.dtype),
            **self._memory(values, forward, backward, mask),
        }
        if self.copy:
            if source_copy is None:
                source_copy = ops.where(mask, UNK_ID, 0)
            state["copy_ids"] = ops.cast(source_copy, "int32")
        return state

    def _decoder_step(self, embedded, state, training=False):
        """One step from `embedded (B, E)`.

        Returns:
            `(updates, attentional (B, U), alpha (B, S), p_gen (B,) or None)`: `updates` are
            the new `recurrent`, `feed` (and `position`) entries of the state.
        """
        recurrent = state["recurrent"]
        context, alpha = self._attend(recurrent[0], state)
        pieces = [embedded, context] + ([state["feed"]] if self.input_feeding else [])
        output, new_recurrent = self.decoder_cell(
            ops.concatenate(pieces, axis=-1), list(recurrent), training=training
        )
        if not isinstance(new_recurrent, (list, tuple)):
            new_recurrent = [new_recurrent]
        features = ops.concatenate([output, context, embedded], axis=-1)
        attentional = self.attentional(features)
        updates = {"recurrent": list(new_recurrent), "feed": attentional}
        if "position" in state:
            updates["position"] = state["position"] + 1.0
        p_gen = self.generate_gate(features)[:, 0] if self.copy else None
        return updates, attentional, alpha, p_gen
    # -- teacher-forced pass -----------------------------------------------------------------

    def _teacher_forced(self, inputs, training=False, positions=False) -> dict:
        """Runs the decoder over `target_in`: a dict of `logits`, `alpha` `(B, T, S)` (and
        `positions (B, T)`, the local windows' centres, when asked)."""
        state = self.encode(inputs["source"], training=training,
                            source_copy=inputs.get("source_copy"))
        target_in = inputs["target_in"]
        if self.copy:
            target_in = embeddable(target_in, self.target_vocab_size)
        embedded = self.embedding_dropout(self.target_embedding(target_in), training=training)
        # Run one step outside the loop so every sub-layer is built before tracing the scan.
        self._decoder_step(embedded[:, 0], state)
        batch, source_len = ops.shape(inputs["source"])[0], ops.shape(inputs["source"])[1]
        zeros = ops.zeros((batch,), "float32")
        # Keras' TensorFlow scan wants the per-step outputs shaped as the carry: one dict.
        init = {"recurrent": state["recurrent"], "feed": state["feed"],
                "alpha": ops.zeros((batch, 0 if "context" in state else source_len), "float32")}
        if "position" in state:
            init["position"] = state["position"]
        if self.copy:
            init["p_gen"] = zeros
        if positions:
            init["window"] = zeros

        def body(carry, x):
            current = dict(state, **carry)
            updates, attentional, alpha, p_gen = self._decoder_step(x, current,
                                                                    training=training)
            new = dict(updates, alpha=ops.cast(alpha, "float32"))
            new["feed"] = attentional
            if p_gen is not None:
                new["p_gen"] = ops.cast(p_gen, "float32")
            if positions:
                new["window"] = self.aligned_positions(current["recurrent"][0], current)
            return new, new

        _, outputs = ops.scan(body, init, ops.transpose(embedded, (1, 0, 2)))
        outputs = {k: ops.moveaxis(v, 0, 1) for k, v in outputs.items() if k != "recurrent"}
        outputs["attentional"] = outputs["feed"]
        logits = self.output_projection(
            self.output_dropout(outputs["attentional"], training=training))
        if self.copy:
            logits = pointer_generator_log_probs(logits, outputs["p_gen"], outputs["alpha"],
                                                 state["copy_ids"])
        result = {"logits": logits, "alpha": outputs["alpha"]}
        if positions:
            result["positions"] = outputs["window"]
        return result

    def call(self, inputs, training=False, return_attention=False):
        outputs = self._teacher_forced(inputs, training=training)
        if return_attention:
            return outputs["logits"], outputs["alpha"]
        return outputs["logits"]
    # -- incremental decoding ------------------------------------------------------------

    def initial_state(self, source, source_copy=None):
        """The decoding state for `source (B, S)`: a dict of tensors with leading dim B."""
        self.ensure_built()
        return self.encode(source, training=False, source_copy=source_copy)

    def step(self, tokens, state, index):
        """One decoding step for `common.decoding`.

        Args:
            tokens: `(N,)` int32, the previous token of each hypothesis.
            state: the dict from `initial_state` (tiled to N rows).
            index: scalar, the position being generated (unused: the state carries it).

        Returns:
            `(logits (N, V), new_state, alpha (N, S))`; with `copy`, log-probabilities
            `(N, V + S)` instead of the logits.
        """
        if self.copy:
            tokens = embeddable(tokens, self.target_vocab_size)
        embedded = self.target_embedding(tokens)
        updates, attentional, alpha, p_gen = self._decoder_step(embedded, state)
        logits = self.output_projection(attentional)
        if self.copy:
            logits = pointer_generator_log_probs(
                logits[:, None], p_gen[:, None], alpha[:, None], state["copy_ids"])[:, 0]
        return logits, dict(state, **updates), alpha

    def make_step(self, attention_layer: int = -1, attention_head: int | None = None,
                  **unused):
        """The step function for `common.decoding`.

        This architecture has one attention: a layer or head to choose (`evaluate`, `export`
        and `translate`'s `--attention-layer/--attention-head`) is refused, not ignored.
        """
        given = [flag for flag, on in (("--attention-layer", attention_layer != -1),
                                       ("--attention-head", attention_head is not None)) if on]
        if given:
            raise UserError(f"{'/'.join(given)}: a {self.arch} model has no attention layers "
                            "or heads to choose from; expected a transformer run, or leave "
                            "them out")
        return self.step


@keras.saving.register_keras_serializable(package="seq2seq")
class BahdanauTranslator(RecurrentTranslator):
    """Bahdanau's attentive encoder-decoder translator.

    The encoder is a bidirectional GRU or LSTM over the source embeddings; padding (id 0) is
    masked, so it changes nothing. The decoder's initial state is `tanh(W [h_fwd; h_bwd])`.
    At step `t` the previous decoder state `s_{t-1}` queries the encoder states with any score
    of `common.layers.SCORES` (keys are the encoder states projected to `U`, values the encoder
    states themselves), the cell reads `[y_{t-1}; c_t]` (plus the previous attentional vector
    with input feeding), and the attentional vector `a_t = tanh(W [s_t; c_t; y_{t-1}])` gives
    the logits. Training is teacher-forced; `step` runs one decoding step for
    `common.decoding`.

    With `local` the attention is Luong's local attention (`common.layers.LocalAttention`):
    a window of `2 * attention_window + 1` source positions around `p_t = t` (`"monotonic"`,
    local-m) or around a position predicted from `s_{t-1}` (`"predictive"`, local-p, with the
    Gaussian term); weights outside the window are exactly zero.

    With `copy` the decoder is a pointer-generator (`seq2seq.copying`): `p_gen = sigmoid(w [s_t;
    c_t; y_{t-1}])` mixes the vocabulary distribution with the attention over the source, and
    the model returns log-probabilities over the extended vocabulary `V + S` instead of logits
    over `V` (decoding takes either). The inputs then carry `source_copy (B, S)`.

    Args:
        config: a `ModelConfig` (its `bahdanau` sizes, `label_smoothing` and `copy`), its
            dict, or a `BahdanauConfig` alone. The sizes (`embedding_dim`, `units`, `cell`,
            `score`, `attention_units`, `input_feeding`, `dropout`, `local`,
            `attention_window`) become attributes of the model.
        source_vocab_size: source vocabulary size.
        target_vocab_size: target vocabulary size `V`.

    Call arguments:
        inputs: a dict with `source` `(B, S)` int and `target_in` `(B, T)` int
            (`<start>` followed by the target, without `<end>`); with `copy`, optionally
            `source_copy (B, S)` (`seq2seq.copying.copy_ids`; without it every source token
            points at `<unk>`).
        training: whether dropout is on.
        return_attention: also return the attention weights `(B, T, S)`.

    Returns:
        logits `(B, T, V)` (log-probabilities `(B, T, V + S)` with `copy`).

    Example:
    >>> model = BahdanauTranslator(BahdanauConfig(embedding_dim=8, units=8), 20, 30)
    >>> logits = model({"source": ops.ones((2, 5), "int32"),
    ...                 "target_in": ops.ones((2, 4), "int32")})
    >>> tuple(logits.shape)
    (2, 4, 30)
    """

    arch = "bahdanau"

    def _create_memory_layers(self) -> None:
        """The layers that read the encoder states: the key projection and the attention."""
        self.key_projection = keras.layers.Dense(self.units, use_bias=False,
                                                 name="key_projection")
        score_kwargs = {}
        if self.score == "additive":
            score_kwargs["units"] = self.attention_units
        elif self.score == "location":
            score_kwargs["max_positions"] = self.max_source_length
        # No `name=`: Attention passes it on to scores without their own __init__ (DotScore).
        if self.local is None:
            self.attention = Attention(score=self.score, **score_kwargs)
        else:
            self.attention = LocalAttention(score=self.score, mode=self.local,
                                            window=self.attention_window, **score_kwargs)

    def _memory(self, values, forward, backward, mask) -> dict:
        """What the decoder reads of the source: keys, values and mask for the attention."""
        memory = {
            "keys": self.attention.project_keys(self.key_projection(values)),
            "values": values,
            "mask": ops.cast(mask, "float32"),
        }
        if self.local == "monotonic":
            memory["position"] = ops.zeros((ops.shape(values)[0],), "float32")
        return memory

    def _attend(self, query, state):
        """`query (B, U)` -> `(context (B, 2U), alpha (B, S))` over the state's memory."""
        options = {}
        if self.local == "monotonic":
            options["positions"] = state["position"][:, None]
        context, alpha = self.attention.attend(
            query[:, None, :], state["keys"], state["values"],
            mask=ops.cast(state["mask"], "bool"), **options,
        )
        return context[:, 0], alpha[:, 0]

    def aligned_positions(self, query, state):
        """The local window's centre `p_t (B,)` for `query (B, U)` (local attention only)."""
        options = {}
        if self.local == "monotonic":
            options["positions"] = state["position"]
        return self.attention.aligned_positions(query, ops.cast(state["mask"], "bool"),
                                                **options)

    def window_positions(self, inputs):
        """The local windows' centres `p_t (B, T)` of the teacher-forced pass (float32, in
        `[0, S' - 1]` for a source of `S'` real tokens). Local attention only."""
        if self.local is None:
            raise UserError("window_positions: this model has global attention (no window)")
        return self._teacher_forced(inputs, positions=True)["positions"]
