"""RNNsearch: a bidirectional recurrent encoder and an attentive recurrent decoder.

Paper: Bahdanau, Cho and Bengio, "Neural Machine Translation by Jointly Learning to Align and
Translate", ICLR 2015 (https://arxiv.org/abs/1409.0473); optional input feeding from Luong,
Pham and Manning, "Effective Approaches to Attention-based Neural Machine Translation", 2015.

Dimensions: `B` batch, `S` source steps, `T` target steps, `E` embedding, `U` recurrent units,
`V` target vocabulary.
"""

from __future__ import annotations

import keras
from keras import ops

from common.layers import Attention
from seq2seq.losses import token_loss_terms


@keras.saving.register_keras_serializable(package="seq2seq")
class BahdanauTranslator(keras.Model):
    """Bahdanau's attentive encoder-decoder translator.

    The encoder is a bidirectional GRU or LSTM over the source embeddings; padding (id 0) is
    masked, so it changes nothing. The decoder's initial state is `tanh(W [h_fwd; h_bwd])`.
    At step `t` the previous decoder state `s_{t-1}` queries the encoder states with any score
    of `common.layers.SCORES` (keys are the encoder states projected to `U`, values the encoder
    states themselves), the cell reads `[y_{t-1}; c_t]` (plus the previous attentional vector
    with input feeding), and the attentional vector `a_t = tanh(W [s_t; c_t; y_{t-1}])` gives
    the logits. Training is teacher-forced; `step` runs one decoding step for
    `common.decoding`.

    Args:
        source_vocab_size: source vocabulary size.
        target_vocab_size: target vocabulary size `V`.
        embedding_dim: embedding size `E`.
        units: encoder units per direction and decoder units `U`.
        cell: `"gru"` or `"lstm"`.
        score: attention score name (`common.layers.SCORES`).
        attention_units: hidden size of the additive score.
        input_feeding: feed `a_{t-1}` into the decoder cell.
        dropout: dropout rate on embeddings and attentional vectors.
        label_smoothing: label smoothing of the training loss.
        max_source_length: the longest source, used by the `location` score.

    Call arguments:
        inputs: a dict with `source` `(B, S)` int and `target_in` `(B, T)` int
            (`<start>` followed by the target, without `<end>`).
        training: whether dropout is on.

    Returns:
        logits `(B, T, V)`.

    Example:
    >>> model = BahdanauTranslator(20, 30, embedding_dim=8, units=8)
    >>> logits = model({"source": ops.ones((2, 5), "int32"),
    ...                 "target_in": ops.ones((2, 4), "int32")})
    >>> tuple(logits.shape)
    (2, 4, 30)
    """

    def __init__(
        self,
        source_vocab_size: int,
        target_vocab_size: int,
        embedding_dim: int = 128,
        units: int = 128,
        cell: str = "gru",
        score: str = "additive",
        attention_units: int = 128,
        input_feeding: bool = False,
        dropout: float = 0.1,
        label_smoothing: float = 0.0,
        max_source_length: int = 128,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.source_vocab_size = source_vocab_size
        self.target_vocab_size = target_vocab_size
        self.embedding_dim = embedding_dim
        self.units = units
        self.cell_type = cell
        self.score = score
        self.attention_units = attention_units
        self.input_feeding = input_feeding
        self.dropout = dropout
        self.label_smoothing = label_smoothing
        self.max_source_length = max_source_length

        rnn = keras.layers.LSTM if cell == "lstm" else keras.layers.GRU
        self.source_embedding = keras.layers.Embedding(
            source_vocab_size, embedding_dim, name="source_embedding"
        )
        self.target_embedding = keras.layers.Embedding(
            target_vocab_size, embedding_dim, name="target_embedding"
        )
        self.encoder = keras.layers.Bidirectional(
            rnn(units, return_sequences=True, return_state=True), name="encoder"
        )
        # One attribute per layer: tf.train.Checkpoint does not follow Keras' tracked lists.
        self.bridge_h = keras.layers.Dense(units, activation="tanh", name="bridge_h")
        if cell == "lstm":
            self.bridge_c = keras.layers.Dense(units, activation="tanh", name="bridge_c")
        self.key_projection = keras.layers.Dense(units, use_bias=False, name="key_projection")
        score_kwargs = {}
        if score == "additive":
            score_kwargs["units"] = attention_units
        elif score == "location":
            score_kwargs["max_positions"] = max_source_length
        # No `name=`: Attention passes it on to scores without their own __init__ (DotScore).
        self.attention = Attention(score=score, **score_kwargs)
        cell_class = keras.layers.LSTMCell if cell == "lstm" else keras.layers.GRUCell
        self.decoder_cell = cell_class(units, name="decoder_cell")
        self.attentional = keras.layers.Dense(units, activation="tanh", name="attentional")
        self.output_projection = keras.layers.Dense(target_vocab_size, name="output_projection")
        self.embedding_dropout = keras.layers.Dropout(dropout)
        self.output_dropout = keras.layers.Dropout(dropout)

    @property
    def _num_states(self) -> int:
        return 2 if self.cell_type == "lstm" else 1

    @property
    def _bridges(self) -> list:
        return [self.bridge_h] + ([self.bridge_c] if self.cell_type == "lstm" else [])

    # -- encoder -------------------------------------------------------------------------

    def encode(self, source, training=False):
        """Encodes `source (B, S)` into the decoder's initial state (a dict, leading dim B)."""
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
        keys = self.attention.project_keys(self.key_projection(values))
        batch = ops.shape(source)[0]
        state = {
            "recurrent": recurrent,
            "feed": ops.zeros((batch, self.units), values.dtype),
            "keys": keys,
            "values": values,
            "mask": ops.cast(mask, "float32"),
        }
        return state

    def _decoder_step(self, embedded, recurrent, feed, keys, values, mask, training=False):
        """One step: `embedded (B, E)` -> (attentional `(B, U)`, new recurrent, alpha `(B, S)`)."""
        query = recurrent[0][:, None, :]
        context, alpha = self.attention.attend(
            query, keys, values, mask=ops.cast(mask, "bool")
        )
        context, alpha = context[:, 0], alpha[:, 0]
        pieces = [embedded, context] + ([feed] if self.input_feeding else [])
        output, new_recurrent = self.decoder_cell(
            ops.concatenate(pieces, axis=-1), list(recurrent), training=training
        )
        if not isinstance(new_recurrent, (list, tuple)):
            new_recurrent = [new_recurrent]
        attentional = self.attentional(ops.concatenate([output, context, embedded], axis=-1))
        return attentional, list(new_recurrent), alpha

    def build(self, input_shape=None):
        # Sub-layers are built by one tiny forward pass, so that a checkpoint can be restored
        # into a freshly built model.
        tokens = ops.ones((1, 2), "int32")
        self.call({"source": tokens, "target_in": tokens})
        self.built = True

    # -- teacher-forced pass -----------------------------------------------------------------

    def call(self, inputs, training=False, return_attention=False):
        state = self.encode(inputs["source"], training=training)
        target_in = inputs["target_in"]
        embedded = self.embedding_dropout(self.target_embedding(target_in), training=training)
        keys, values, mask = state["keys"], state["values"], state["mask"]
        batch, source_len = ops.shape(values)[0], ops.shape(values)[1]
        # Run one step outside the loop so every sub-layer is built before tracing the scan.
        self._decoder_step(embedded[:, 0], state["recurrent"], state["feed"], keys, values, mask)

        def body(carry, x):
            attentional, recurrent, alpha = self._decoder_step(
                x, carry["recurrent"], carry["feed"], keys, values, mask, training=training
            )
            new = {"recurrent": recurrent, "feed": attentional, "alpha": alpha}
            return new, new

        init = {
            "recurrent": state["recurrent"],
            "feed": state["feed"],
            "alpha": ops.zeros((batch, source_len), values.dtype),
        }
        _, outputs = ops.scan(body, init, ops.transpose(embedded, (1, 0, 2)))
        attentional = ops.transpose(outputs["feed"], (1, 0, 2))
        logits = self.output_projection(self.output_dropout(attentional, training=training))
        if return_attention:
            return logits, ops.transpose(outputs["alpha"], (1, 0, 2))
        return logits

    def loss_terms(self, batch, training: bool) -> dict:
        """Masked token cross-entropy terms for `common.training.Trainer`.

        `batch` is a dict of `source (B, S)`, `target_in (B, T)`, `target_out (B, T)`.
        """
        inputs = {"source": batch["source"], "target_in": batch["target_in"]}
        logits = self(inputs, training=training)
        return token_loss_terms(logits, batch["target_out"], self.label_smoothing)

    # -- incremental decoding ------------------------------------------------------------

    def initial_state(self, source):
        """The decoding state for `source (B, S)`: a dict of tensors with leading dim B."""
        if not self.built:
            self.build()
        return self.encode(source, training=False)

    def step(self, tokens, state, index):
        """One decoding step for `common.decoding`.

        Args:
            tokens: `(N,)` int32, the previous token of each hypothesis.
            state: the dict from `initial_state` (tiled to N rows).
            index: scalar, the position being generated (unused: the state carries it).

        Returns:
            `(logits (N, V), new_state, alpha (N, S))`.
        """
        embedded = self.target_embedding(tokens)
        attentional, recurrent, alpha = self._decoder_step(
            embedded, state["recurrent"], state["feed"], state["keys"], state["values"],
            state["mask"],
        )
        logits = self.output_projection(attentional)
        new_state = dict(state, recurrent=recurrent, feed=attentional)
        return logits, new_state, alpha

    def make_step(self, **unused):
        """The step function for `common.decoding` (no options for this architecture)."""
        return self.step

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "source_vocab_size": self.source_vocab_size,
                "target_vocab_size": self.target_vocab_size,
                "embedding_dim": self.embedding_dim,
                "units": self.units,
                "cell": self.cell_type,
                "score": self.score,
                "attention_units": self.attention_units,
                "input_feeding": self.input_feeding,
                "dropout": self.dropout,
                "label_smoothing": self.label_smoothing,
                "max_source_length": self.max_source_length,
            }
        )
        return config
