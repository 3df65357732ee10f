"""`ToyModule`: a `DecodingModule` over a table of next-token logits, no model: an export in
seconds for the tests of what every export shares (its signatures' graph, its warm-up file,
serving it).

The input `examples (B,)` holds example ids ("0".."5") as strings; example `e` after token `t`
scores the next token with `table[e, t]`. The logits are random, with `<end>` pulled late and
a pull back to recent tokens, so that beams of different sizes find different hypotheses.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from common.export.module import DecodingModule, ExportedModel
from common.text import Vocabulary

WORDS = ["<pad>", "<start>", "<end>", "<unk>", "a", "b", "c", "d", "e"]
EXAMPLES, LENGTH = 6, 8
RAW = [str(i).encode() for i in range(EXAMPLES)]


def table(seed: int = 0) -> np.ndarray:
    """`(E, V, V)` next-token logits per example."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(EXAMPLES, len(WORDS), len(WORDS))).astype(np.float32)
    logits[:, :, 2] -= 1.0  # <end> late
    for token in range(4, len(WORDS)):
        logits[:, token, token] += 1.0
    return logits


class ToyModule(DecodingModule):
    """Decodes example ids over a table of logits; its warm-up input is example "0".

    Args:
        beam_sizes: the exported beam sizes.
        default_beam_size: the beam size of `serving_default`.
        warmup: whether the export gets a warm-up file (`warmup_input`).
        words: the vocabulary (`WORDS`: the four specials first).
        logits: `(E, V, V)` next-token logits over `words` (None: `table()`).
    """

    KIND = "test.toy"
    WHAT = "a toy export"
    SEVERAL = "texts per input"
    INPUT = "examples"
    TEXT = "texts"
    OPTIONS_SIGNATURE = "decode_with_options"
    OUTPUTS = ("texts", "tokens", "lengths", "scores", "finished")

    def __init__(self, beam_sizes: Sequence[int] = (1, 2, 3), default_beam_size: int = 2,
                 warmup: bool = True, words: Sequence[str] = WORDS,
                 logits: np.ndarray | None = None):
        self.table = tf.Variable(table() if logits is None else logits)
        self.warmup = warmup
        super().__init__("toy", Vocabulary(list(words)), LENGTH, LENGTH, beam_sizes=beam_sizes,
                         default_beam_size=default_beam_size, length_penalty=0.6)

    def read_inputs(self, raw):
        return tf.strings.to_number(raw, tf.int32)

    def prepare(self, features):
        return features, {}

    def search_inputs(self, search, max_length):
        def step(tokens, state, index):
            logits = tf.gather_nd(self.table, tf.stack([state, tokens], axis=1))
            return logits, state, tf.zeros([tf.shape(tokens)[0], 0])

        return step, search, tf.shape(search)[0]

    def warmup_input(self) -> str | None:
        return "0" if self.warmup else None


class ExportedToy(ExportedModel):
    MODULE = ToyModule
