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

from seq2seq.bahdanau import RecurrentTranslator


@keras.saving.register_keras_serializable(package="seq2seq")
class EncoderDecoderTranslator(RecurrentTranslator):
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
        config: a `ModelConfig` (its `bahdanau` sizes and `label_smoothing`), its dict, or a
            `BahdanauConfig` alone; of the sizes only `embedding_dim`, `units`, `cell` and
            `dropout` are used.
        source_vocab_size: source vocabulary size.
        target_vocab_size: target vocabulary size `V`.

    Call arguments and returns: those of `seq2seq.translator_base.Translator`, without
    `source_copy`; the attention `return_attention` adds is empty, `(B, T, 0)`.

    Example:
    >>> model = EncoderDecoderTranslator(BahdanauConfig(embedding_dim=8, units=8), 20, 30)
    >>> tokens = ops.ones((2, 5), "int32")
    >>> logits, alpha = model({"source": tokens, "target_in": tokens[:, :4]},
    ...                       return_attention=True)
    >>> tuple(logits.shape), tuple(alpha.shape)
    ((2, 4, 30), (2, 4, 0))
    """

    arch = "seq2seq-noattn"
    has_attention = False

    def _create_memory_layers(self) -> None:
        self.summary = keras.layers.Dense(self.units, activation="tanh", name="summary")

    def _memory(self, values, forward, backward, mask) -> dict:
        """The summary `c (B, U)` of the final encoder states (their `h` for an LSTM)."""
        return {"context": self.summary(ops.concatenate([forward[0], backward[0]], axis=-1))}

    def _attend(self, query, state):
        """The same summary at every step, and no attention weights `(B, 0)`."""
        context = state["context"]
        return context, ops.zeros((ops.shape(context)[0], 0), "float32")
