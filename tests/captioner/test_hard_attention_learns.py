"""REINFORCE with a baseline teaches hard attention where to look.

A toy problem: each of `L` regions holds a random class (one-hot) but only the flagged region's
class is the answer, so the one-word caption can only be right when the sampled location is
the flagged one. The mean annotation (the LSTM's initial state) mixes all classes and cannot
tell which is meant. With the expected context switched off, the only learning signal for the
attention is the REINFORCE estimator; it must learn to pick the flagged region.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from captioner.config import DecoderConfig, EncoderConfig
from captioner.model import ShowAttendTell

L, C, B = 6, 3, 64
V = 4 + C  # <pad> <start> <end> <unk> then one word per class


def _toy_batch(rng):
    classes = rng.integers(0, C, size=(B, L))
    flagged = rng.integers(0, L, size=B)
    features = np.zeros((B, L, 1 + C), "float32")
    features[:, :, 0] = np.arange(L)[None] == flagged[:, None]
    features[np.arange(B)[:, None], np.arange(L)[None], 1 + classes] = 1.0
    answer = 4 + classes[np.arange(B), flagged]
    caption_in = np.stack([np.ones(B), answer], 1).astype("int32")
    caption_out = np.stack([answer, np.full(B, 2)], 1).astype("int32")
    return {"features": features, "caption_in": caption_in, "caption_out": caption_out}, flagged


@pytest.mark.parametrize("reward", ["caption", "to-go"])
def test_hard_attention_learns_to_pick_the_only_informative_region(reward):
    keras.utils.set_random_seed(0)
    model = ShowAttendTell(V, EncoderConfig("small-cnn", (8, 8), "none", filters=(1 + C,)),
                           DecoderConfig(embedding_dim=8, units=16, attention_units=16,
                                         attention="hard", dropout=0.0, penalty_weight=0.0,
                                         expected_context_prob=0.0, entropy_weight=0.002,
                                         reward=reward))
    variables = model.decoder.trainable_variables
    optimizer = keras.optimizers.Adam(0.01)

    @tf.function
    def step(batch):
        with tf.GradientTape() as tape:
            terms = model.loss_terms(batch, training=True)
            loss = terms["loss_sum"] / terms["count"]
        optimizer.apply(tape.gradient(loss, variables), variables)
        return terms

    rng = np.random.default_rng(0)

    def accuracy():
        batch, flagged = _toy_batch(rng)
        decoded = model.caption(features=batch["features"], method="greedy", max_length=2)
        words = np.asarray(decoded.tokens)[:, 0, 0]
        looked = np.asarray(decoded.attention)[:, 0, 0].argmax(-1)
        return (words == batch["caption_out"][:, 0]).mean(), (looked == flagged).mean()

    before, _ = accuracy()
    for _ in range(400):
        step(_toy_batch(rng)[0])
    words, looks = accuracy()
    assert before < 0.6
    assert words > 0.9, (before, words, looks)
    assert looks > 0.9, (before, words, looks)
    assert float(model.baseline) > -0.5  # the reward (log-likelihood) approaches 0
