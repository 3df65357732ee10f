"""Sampling: reproducible with a seed, top_k=1 is greedy, frequencies match the softmax over
the tokens a search may emit (not <pad> or <start>)."""

import numpy as np
import pytest
from keras import ops

from common.decoding import greedy_decode, sample_decode
from common.errors import UserError
from tests.helpers.backends import compile_search


def test_same_seed_same_samples_other_seed_other_samples(toys):
    toy = toys.MarkovToy(vocab=8, max_length=6, examples=16, seed=1, scale=0.5)
    args = (toy.step, toy.initial_state(), 16, toys.START, toys.END, 6)
    first = sample_decode(*args, seed=123)
    again = sample_decode(*args, seed=123)
    other = sample_decode(*args, seed=124)
    np.testing.assert_array_equal(first.tokens, again.tokens)
    np.testing.assert_array_equal(first.scores, again.scores)
    assert (np.asarray(first.tokens) != np.asarray(other.tokens)).any()
    compiled = compile_search(lambda: sample_decode(*args, seed=123))()
    np.testing.assert_array_equal(first.tokens, compiled.tokens)


def test_top_k_one_is_greedy(toys):
    toy = toys.MarkovToy(vocab=8, max_length=6, examples=8, seed=2)
    args = (toy.step, toy.initial_state(), 8, toys.START, toys.END, 6)
    greedy = greedy_decode(*args)
    sampled = sample_decode(*args, temperature=3.0, top_k=1, seed=5)
    np.testing.assert_array_equal(sampled.tokens, greedy.tokens)
    np.testing.assert_array_equal(sampled.scores, greedy.scores)


def test_scores_and_attention_follow_the_sampled_path(toys):
    toy = toys.HistoryToy(vocab=6, max_length=6, examples=8, seed=3)
    out = sample_decode(
        toy.step, toy.initial_state(), 8, toys.START, toys.END, 6, temperature=1.5, top_k=4, seed=9
    )
    toys.check_against_replay(toy, out)


@pytest.mark.parametrize("temperature, top_k", [(1.0, 0), (0.7, 0), (1.3, 3)])
def test_first_token_frequencies_match_softmax(toys, temperature, top_k):
    n = 20000
    toy = toys.MarkovToy(vocab=6, max_length=1, examples=1, seed=4, scale=1.0)
    state = {key: ops.repeat(value, n, axis=0) for key, value in toy.initial_state().items()}
    out = sample_decode(
        toy.step, state, n, toys.START, toys.END, 1, temperature=temperature, top_k=top_k, seed=11
    )
    logits = (toy.W[0, toys.START] + toy.E[0]).astype(np.float64) / temperature
    logits[[toys.PAD, toys.START]] = -np.inf  # never sampled; the other tokens renormalized
    if top_k:
        logits[np.argsort(logits)[:-top_k]] = -np.inf
    expected = np.exp(toys.np_log_softmax(logits))
    observed = np.bincount(np.asarray(out.tokens)[:, 0, 0], minlength=6) / n
    tolerance = 4 * np.sqrt(expected * (1 - expected) / n) + 1e-4
    assert (np.abs(observed - expected) <= tolerance).all(), (observed, expected)


@pytest.mark.parametrize(
    "kwargs", [{"temperature": 0.0}, {"temperature": -1.0}, {"top_k": -1}, {"seed": -3}]
)
def test_sampling_rejects_bad_arguments(toys, kwargs):
    toy = toys.MarkovToy(vocab=5, max_length=4)
    with pytest.raises(UserError):
        sample_decode(toy.step, toy.initial_state(), 1, 1, 2, 4, **kwargs)


def test_uniform_numbers_stay_inside_the_open_interval(monkeypatch):
    """The extremes of the hash, mapped to (0, 1): a 1.0 (or a 0.0) makes the Gumbel noise
    infinite, and that token is sampled whatever its logit, a masked one included."""
    from common.decoding import sampling

    hashed = ops.convert_to_tensor(np.array([[0, 1, 2**31, 2**32 - 2, 2**32 - 1]], np.uint32))
    real_hash = sampling._hash32
    # The per-element hashes give each extreme as the random bits.
    monkeypatch.setattr(sampling, "_hash32",
                        lambda x: hashed if len(x.shape) == 2 else real_hash(x))
    u = np.asarray(sampling._uniform((1, 5), 1, 0))
    monkeypatch.setattr(sampling, "_hash32", real_hash)
    assert u.dtype == np.float32 and 0.0 < u.min() and u.max() < 1.0
    gumbel = -np.log(-np.log(u.astype(np.float64)))
    assert np.all(np.isfinite(gumbel))
    # And over many real draws: the mean and spread of a uniform.
    draws = np.asarray(sampling._uniform((512, 512), 3, 0))
    assert 0.0 < draws.min() and draws.max() < 1.0
    assert abs(draws.mean() - 0.5) < 0.005 and abs(draws.std() - 12**-0.5) < 0.005
