"""The decoders inside tf.function (with an input_signature, under XLA) and a SavedModel."""

import numpy as np
import pytest
import tensorflow as tf

from common.decoding import beam_search, greedy_decode, sample_decode

DECODERS = {
    "greedy": lambda step, state, b, m: greedy_decode(step, state, b, 1, 2, m),
    "beam": lambda step, state, b, m: beam_search(
        step, state, b, 1, 2, m, beam_size=3, length_penalty=0.6, n_best=2
    ),
    "sample": lambda step, state, b, m: sample_decode(
        step, state, b, 1, 2, m, temperature=0.8, top_k=4, seed=3
    ),
}


def _bias(toys, examples=3, vocab=6):
    bias = np.zeros((examples, vocab), np.float32)
    bias[0, toys.END] = 50.0  # finishes at once
    bias[1, toys.END] = -1e9  # never finishes
    return bias


def _assert_same(a, b):
    for field in a._fields:
        np.testing.assert_allclose(getattr(a, field), getattr(b, field), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(DECODERS))
def test_tf_function_with_input_signature_matches_eager(toys, name):
    toy = toys.MarkovToy(vocab=6, max_length=5, examples=3, seed=1, bias=_bias(toys))
    decode = DECODERS[name]

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([None, 6], tf.float32),
            tf.TensorSpec([], tf.int32),
        ]
    )
    def graph(example, bias, max_length):
        state = {"example": example, "bias": bias}
        return decode(toy.step, state, tf.shape(bias)[0], max_length)

    eager = decode(toy.step, toy.initial_state(), 3, 5)
    state = toy.initial_state()
    out = graph(state["example"], state["bias"], tf.constant(5))
    _assert_same(out, eager)
    assert out.lengths[0, 0] == 1 and not np.asarray(out.finished)[1].any()
    assert (np.asarray(out.lengths)[1] == 5).all()


@pytest.mark.parametrize("name", list(DECODERS))
def test_jit_compile_matches_eager(toys, name):
    toy = toys.HistoryToy(vocab=6, max_length=5, examples=3, seed=2)
    decode = DECODERS[name]
    eager = decode(toy.step, toy.initial_state(), 3, 5)
    compiled = tf.function(
        lambda: decode(toy.step, toy.initial_state(), 3, 5), jit_compile=True, autograph=False
    )()
    _assert_same(compiled, eager)


def test_exported_savedmodel_decodes_like_eager(toys, tmp_path):
    toy = toys.HistoryToy(vocab=6, max_length=5, examples=3, seed=4)

    class Decoder(tf.Module):
        def __init__(self):
            super().__init__()
            self.table = tf.Variable(toy.W)

        def step(self, tokens, state, index):
            logits, state, attention = toy.step(tokens, state, index)
            return logits + 0.0 * tf.reduce_sum(self.table), state, attention

        @tf.function(
            input_signature=[tf.TensorSpec([None, 5], tf.int32), tf.TensorSpec([None], tf.int32)]
        )
        def __call__(self, history, hash_):
            state = {"history": history, "inner": {"hash": hash_}}
            out = DECODERS["beam"](self.step, state, tf.shape(hash_)[0], 5)
            return out._asdict()

    tf.saved_model.save(Decoder(), str(tmp_path / "decoder"))
    loaded = tf.saved_model.load(str(tmp_path / "decoder"))
    state = toy.initial_state()
    out = loaded(state["history"], state["inner"]["hash"])
    eager = DECODERS["beam"](toy.step, state, 3, 5)
    for field in eager._fields:
        np.testing.assert_allclose(out[field], getattr(eager, field), rtol=1e-5, atol=1e-5)
