"""Greedy decoding against a plain NumPy greedy loop and a NumPy replay of the path."""

import keras
import numpy as np
import pytest
from keras import ops

from common.decoding import Decoded, greedy_decode
from common.errors import UserError


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_matches_numpy_greedy_loop(toys, seed):
    toy = toys.MarkovToy(vocab=7, max_length=6, examples=4, seed=seed)
    out = greedy_decode(toy.step, toy.initial_state(), 4, toys.START, toys.END, 6)
    assert isinstance(out, Decoded)
    assert out.tokens.shape == (4, 1, 6) and out.attention.shape == (4, 1, 6, 0)
    for b in range(4):
        tokens, score, finished = toy.greedy(b)
        length = len(tokens)
        np.testing.assert_array_equal(out.tokens[b, 0, :length], tokens)
        assert (np.asarray(out.tokens)[b, 0, length:] == toys.PAD).all()
        assert out.lengths[b, 0] == length
        assert bool(out.finished[b, 0]) == finished
        np.testing.assert_allclose(out.scores[b, 0], score, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out.normalized_scores, out.scores)


def test_greedy_reorders_nothing_and_attention_matches_replay(toys):
    toy = toys.HistoryToy(vocab=6, max_length=7, examples=5, seed=3)
    out = greedy_decode(toy.step, toy.initial_state(), 5, toys.START, toys.END, 7)
    toys.check_against_replay(toy, out)


def test_greedy_never_ending_returns_full_length_unfinished(toys):
    bias = np.zeros((2, 5), np.float32)
    bias[:, toys.END] = -1e9
    toy = toys.MarkovToy(vocab=5, max_length=4, examples=2, bias=bias)
    out = greedy_decode(toy.step, toy.initial_state(), 2, toys.START, toys.END, 4)
    np.testing.assert_array_equal(out.lengths, [[4], [4]])
    np.testing.assert_array_equal(out.finished, [[False], [False]])
    assert (np.asarray(out.tokens) != toys.END).all()
    assert np.isfinite(np.asarray(out.scores)).all()


def test_greedy_some_examples_finish_early(toys):
    bias = np.zeros((3, 5), np.float32)
    bias[0, toys.END] = 50.0  # ends at once
    bias[1, toys.END] = -1e9  # never ends
    toy = toys.MarkovToy(vocab=5, max_length=5, examples=3, bias=bias)
    out = greedy_decode(toy.step, toy.initial_state(), 3, toys.START, toys.END, 5)
    np.testing.assert_array_equal(out.tokens[0, 0], [toys.END, 0, 0, 0, 0])
    assert out.lengths[0, 0] == 1 and out.lengths[1, 0] == 5
    for b in range(3):
        tokens, score, _ = toy.greedy(b)
        np.testing.assert_array_equal(out.tokens[b, 0, : len(tokens)], tokens)
        np.testing.assert_allclose(out.scores[b, 0], score, rtol=1e-5, atol=1e-5)


def test_greedy_accepts_low_precision_logits(toys):
    toy = toys.MarkovToy(vocab=5, max_length=4, examples=2)

    def step(tokens, state, index):
        logits, state, attention = toy.step(tokens, state, index)
        return ops.cast(logits, "float16"), state, attention

    out = greedy_decode(step, toy.initial_state(), 2, toys.START, toys.END, 4)
    dtype = keras.backend.standardize_dtype
    assert dtype(out.scores.dtype) == "float32" and dtype(out.tokens.dtype) == "int32"


@pytest.mark.parametrize(
    "kwargs",
    [{"max_length": 0}, {"batch_size": 0}, {"end_id": -1}, {"max_length": 2.5}],
)
def test_greedy_rejects_bad_arguments(toys, kwargs):
    toy = toys.MarkovToy(vocab=5, max_length=4)
    args = {"batch_size": 1, "start_id": 1, "end_id": 2, "max_length": 4, **kwargs}
    with pytest.raises(UserError):
        greedy_decode(toy.step, toy.initial_state(), **args)


@pytest.mark.parametrize("decoder", ["greedy", "beam", "sample"])
def test_every_decoder_fills_pad_id_after_end_when_it_stops_early(toys, decoder):
    # Every example ends at once, so the loop stops after one step; the other steps still
    # hold pad_id (here 4, a word id, which is then never emitted either).
    from common.decoding import beam_search, sample_decode

    bias = np.zeros((2, 6), np.float32)
    bias[:, toys.END] = 50.0
    toy = toys.MarkovToy(vocab=6, max_length=4, examples=2, bias=bias)
    decode = {"greedy": greedy_decode, "sample": sample_decode,
              "beam": lambda *a, **k: beam_search(*a, beam_size=2, **k)}[decoder]  # fmt: skip
    out = decode(toy.step, toy.initial_state(), 2, toys.START, toys.END, 4, pad_id=4)
    np.testing.assert_array_equal(out.tokens, [[[toys.END, 4, 4, 4]]] * 2)
