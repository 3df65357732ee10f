"""The encoder-decoder without attention: the whole source in one fixed-size vector.

Papers: Cho et al., "Learning Phrase Representations using RNN Encoder-Decoder for
Statistical Machine Translation", EMNLP 2014 (https://arxiv.org/abs/1406.1078), and Sutskever,
Vinyals and Le, "Sequence to Sequence Learning with Neural Networks", NeurIPS 2014
(https://arxiv.org/abs/1409.3215). The baseline ("RNNencdec") of Bahdanau et al. 2015, whose
figure 2 shows its BLEU falling with the source length.

Dimensions: `B` batch, `S` source steps, `T` target steps, `E` embedding, `U` recurrent units,
`V` target vocabulary.
"""

from __future__ import annotations

import keras
from keras import ops

from seq2seq.bahdanau import BahdanauTranslator


@keras.saving.register_keras_serializable(package="seq2seq")
class EncoderDecoderTranslator(BahdanauTranslator):
    """Cho et al.'s RNN encoder-decoder: a summary vector instead of attention.

    The same bidirectional GRU/LSTM encoder, embeddings, decoder cell and output layer as
    `BahdanauTranslator`, so the two differ only in what the decoder reads of the source: here
    the summary `c = tanh(W [h_fwd_S; h_bwd_1])` of the encoder's final states (Cho et al.'s
    `c`), fed to the decoder at every step in place of the attention context — the cell reads
    `[y_{t-1}; c]` and the output is `tanh(W [s_t; c; y_{t-1}])`. The decoder's initial state
    is bridged from the same final states. Nothing else of the source reaches the decoder: the
    "fixed-size embedding" whose limits motivate attention.

    Decoding steps return an empty attention `(N, 0)`; `call(..., return_attention=True)`
    gives `(B, T, 0)` weights.

    Args:
        source_vocab_size: source vocabulary size.
        target_vocab_size: target vocabulary size `V`.
        embedding_dim: embedding size `E`.
        units: encoder units per direction and decoder units `U`.
        cell: `"gru"` or `"lstm"`.
        dropout: dropout rate on embeddings and output vectors.
        label_smoothing: label smoothing of the training loss.

    Call arguments:
        inputs: a dict with `source` `(B, S)` int and `target_in` `(B, T)` int.
        training: whether dropout is on.
        return_attention: also return the (empty) attention `(B, T, 0)`.

    Returns:
        logits `(B, T, V)`.

    Example:
    >>> model = EncoderDecoderTranslator(20, 30, embedding_dim=8, units=8)
    >>> logits = model({"source": ops.ones((2, 5), "int32"),
    ...                 "target_in": ops.ones((2, 4), "int32")})
    >>> tuple(logits.shape)
    (2, 4, 30)
    """

    has_attention = False

    def __init__(
        self,
        source_vocab_size: int,
        target_vocab_size: int,
        embedding_dim: int = 128,
        units: int = 128,
        cell: str = "gru",
        dropout: float = 0.1,
        label_smoothing: float = 0.0,
        **kwargs,
    ):
        super().__init__(source_vocab_size, target_vocab_size, embedding_dim=embedding_dim,
                         units=units, cell=cell, dropout=dropout,
                         label_smoothing=label_smoothing, **kwargs)

    def _create_memory_layers(self) -> None:
        self.summary = keras.layers.Dense(self.units, activation="tanh", name="summary")

    def _memory(self, values, forward, backward, mask) -> dict:
        """The summary `c (B, U)` of the final encoder states (their `h` for an LSTM)."""
        return {"context": self.summary(ops.concatenate([forward[0], backward[0]], axis=-1))}

    def _attend(self, query, state):
        """The same summary at every step, and no attention weights `(B, 0)`."""
        context = state["context"]
        return context, ops.zeros((ops.shape(context)[0], 0), "float32")

    def get_config(self):
        config = super().get_config()
        for name in ("score", "attention_units", "input_feeding", "max_source_length", "local",
                     "attention_window", "copy"):
            config.pop(name)
        return config
