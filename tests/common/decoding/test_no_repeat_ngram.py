"""`no_repeat_ngram`: greedy decoding, beam search and sampling against plain-Python decoders
with the same ban (`repeats_ngram` in the conftest), and 0 bit-identical to no ban at all."""

import numpy as np
import pytest
from keras import ops

from common.decoding import beam_search, greedy_decode, make_strategy, sample_decode
from common.decoding.sampling import _uniform
from common.decoding.utils import repeated_ngrams
from common.errors import UserError
from tests.helpers.backends import compile_search, tf_only

FILLER = -1e8  # at or below: a slot no allowed hypothesis reaches (scored about -1e9)


def test_the_ban_matches_the_rule_on_random_histories(toys):
    # Random histories over a small vocabulary (so n-grams repeat), <end> and ids outside
    # [0, V) among them; every index and n from 1 to 4.
    rng = np.random.default_rng(0)
    vocab, steps = 5, 9
    history = rng.integers(-1, vocab + 2, size=(12, steps)).astype(np.int32)
    history[:, ::4] = toys.END
    for n in (1, 2, 3, 4):
        for index in range(steps):
            banned = np.asarray(repeated_ngrams(
                ops.convert_to_tensor(history), ops.convert_to_tensor(index), n, vocab,
                ops.convert_to_tensor(toys.END)))
            for row in range(len(history)):
                before = history[row, :index].tolist()
                expected = [toys.repeats_ngram(before, t, n) for t in range(vocab)]
                assert banned[row].tolist() == expected, (n, index, row, before)
    assert repeated_ngrams(ops.convert_to_tensor(history), 3, 0, vocab, toys.END) is None


@pytest.mark.parametrize("n", [1, 2, 3])
def test_greedy_matches_a_plain_greedy_loop_with_the_ban(toys, n):
    toy = toys.MarkovToy(vocab=6, max_length=8, examples=12, seed=n, scale=2.0)
    out = greedy_decode(toy.step, toy.initial_state(), 12, toys.START, toys.END, 8,
                        no_repeat_ngram=n)
    changed = 0
    for b in range(12):
        tokens, score, finished = toy.greedy(b, no_repeat_ngram=n)
        assert np.asarray(out.tokens)[b, 0, : len(tokens)].tolist() == tokens, b
        assert (np.asarray(out.tokens)[b, 0, len(tokens) :] == toys.PAD).all()
        assert bool(out.finished[b, 0]) == finished
        np.testing.assert_allclose(out.scores[b, 0], score, rtol=1e-5, atol=1e-5)
        assert not toys.has_repeated_ngram(tokens, n)
        changed += tokens != toy.greedy(b)[0]
    assert changed > 0  # the ban changed some outputs: these tables repeat themselves


@pytest.mark.parametrize("beam_size", [1, 2, 3])
@pytest.mark.parametrize("alpha", [0.0, 0.6])
@pytest.mark.parametrize("n", [1, 2])
def test_beam_matches_a_plain_beam_search_with_the_ban(toys, beam_size, alpha, n):
    """40 random tables against `reference_beam_search` with the same ban. With n = 1 and five
    words in six steps, some hypotheses run out of words: the slots no allowed hypothesis
    reaches hold fillers scored about -1e9 in both."""
    toy = toys.MarkovToy(vocab=8, max_length=6, examples=40, seed=0)
    out = beam_search(toy.step, toy.initial_state(), 40, toys.START, toys.END, 6,
                      beam_size=beam_size, length_penalty=alpha, n_best=beam_size,
                      no_repeat_ngram=n)
    tokens, lengths, scores = np.asarray(out.tokens), np.asarray(out.lengths), np.asarray(out.scores)
    changed = 0
    for b in range(40):
        expected = toy.beam(b, beam_size, alpha, beam_size, no_repeat_ngram=n)
        for k, (normalized, score, hypothesis, finished) in enumerate(expected):
            if score <= FILLER:
                assert scores[b, k] <= FILLER, (b, k)
                continue
            assert tokens[b, k, : lengths[b, k]].tolist() == hypothesis, (b, k)
            assert not toys.has_repeated_ngram(hypothesis, n)
            assert bool(out.finished[b, k]) == finished
            np.testing.assert_allclose(scores[b, k], score, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(out.normalized_scores[b, k], normalized, rtol=1e-5,
                                       atol=1e-5)
        unbanned = toy.beam(b, beam_size, alpha, beam_size)
        changed += [h[2] for h in expected] != [h[2] for h in unbanned]
    assert changed > 0  # the ban changed some answers


@pytest.mark.parametrize("n", [1, 2])
def test_large_beam_finds_the_brute_force_n_best_without_repeats(toys, n):
    # V=6 with 4 emittable tokens, T=3: every hypothesis fits in 64 beams, so the answer is
    # the brute-force n best among the sequences without a repeated n-gram, then fillers.
    toy = toys.MarkovToy(vocab=6, max_length=3, examples=2, seed=4, scale=1.0)
    out = beam_search(toy.step, toy.initial_state(), 2, toys.START, toys.END, 3,
                      beam_size=64, length_penalty=0.6, n_best=40, no_repeat_ngram=n)
    for b in range(2):
        expected = toy.n_best(b, 0.6, 40, no_repeat_ngram=n)
        assert len(expected) < 40  # fewer than without the ban
        for k, (normalized, score, tokens, finished) in enumerate(expected):
            assert np.asarray(out.tokens)[b, k, : len(tokens)].tolist() == tokens, (b, k)
            assert bool(out.finished[b, k]) == finished
            np.testing.assert_allclose(out.scores[b, k], score, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(out.normalized_scores[b, k], normalized, rtol=1e-5,
                                       atol=1e-5)
        assert (np.asarray(out.scores)[b, len(expected) :] <= FILLER).all()


def reference_sample(toy, toys, example, n, seed, temperature, top_k):
    """A plain sampler over `toy` with the same random numbers (`_uniform`, a hash of seed,
    step, row and token) and the same ban: (tokens, score, finished)."""
    tokens, score, previous = [], 0.0, toys.START
    for index in range(toy.max_length):
        logits = toy.W[example, previous] + toy.E[index] + toy.bias[example]
        masked = logits.copy()
        banned = [t for t in range(toy.vocab) if toys.repeats_ngram(tokens, t, n)]
        masked[[toys.PAD, toys.START, *banned]] = -1e9
        masked = masked / np.float32(temperature)
        if top_k:
            masked[masked < np.sort(masked)[-top_k]] = -1e9
        u = np.asarray(_uniform((toy.examples, toy.vocab), seed, index))[example]
        token = int(np.argmax(masked - np.log(-np.log(u))))
        tokens.append(token)
        score += toys.np_log_softmax(logits)[token]
        previous = token
        if token == toys.END:
            return tokens, score, True
    return tokens, score, False


@pytest.mark.parametrize("n, temperature, top_k", [(1, 1.0, 0), (2, 1.5, 0), (2, 0.8, 3)])
def test_sampling_matches_a_plain_sampler_with_the_ban(toys, n, temperature, top_k):
    toy = toys.MarkovToy(vocab=6, max_length=8, examples=12, seed=5, scale=1.0)
    out = sample_decode(toy.step, toy.initial_state(), 12, toys.START, toys.END, 8,
                        temperature=temperature, top_k=top_k, seed=17, no_repeat_ngram=n)
    for b in range(12):
        tokens, score, finished = reference_sample(toy, toys, b, n, 17, temperature, top_k)
        assert np.asarray(out.tokens)[b, 0, : len(tokens)].tolist() == tokens, b
        assert bool(out.finished[b, 0]) == finished
        np.testing.assert_allclose(out.scores[b, 0], score, rtol=1e-5, atol=1e-5)
        assert not toys.has_repeated_ngram(tokens, n)


METHODS = {
    "greedy": {},
    "beam": {"beam_size": 3, "n_best": 3, "length_penalty": 0.6},
    "sample": {"seed": 7, "temperature": 1.3},
}


@tf_only
@pytest.mark.parametrize("name", list(METHODS))
def test_zero_is_bit_identical_to_no_ban_also_as_a_graph_input(toys, name):
    """0, a Python int or a tensor input of a traced function (as in an export), gives exactly
    the output of a strategy built without the option (eagerly, and traced alike)."""
    toy = toys.HistoryToy(vocab=7, max_length=6, examples=4, seed=1)
    args = (toy.step, toy.initial_state(), 4, toys.START, toys.END, 6)
    import tensorflow as tf

    plain = make_strategy(name, **METHODS[name])(*args)
    zero = make_strategy(name, no_repeat_ngram=0, **METHODS[name])(*args)
    length = tf.TensorSpec([], tf.int32)

    @tf.function(input_signature=[length])
    def plain_graph(max_length):
        strategy = make_strategy(name, **METHODS[name])
        return strategy(toy.step, toy.initial_state(), 4, toys.START, toys.END, max_length)

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32), length])
    def graph(n, max_length):
        strategy = make_strategy(name, no_repeat_ngram=n, **METHODS[name])
        return strategy(toy.step, toy.initial_state(), 4, toys.START, toys.END, max_length)

    traced, plain_traced = graph(tf.constant(0), tf.constant(6)), plain_graph(tf.constant(6))
    for field in plain._fields:
        np.testing.assert_array_equal(getattr(zero, field), getattr(plain, field))
        np.testing.assert_array_equal(getattr(traced, field), getattr(plain_traced, field))
    # The same traced function bans with n = 1, as the eager search does.
    eager = make_strategy(name, no_repeat_ngram=1, **METHODS[name])(*args)
    banned = graph(tf.constant(1), tf.constant(6))
    for field in plain._fields:
        np.testing.assert_allclose(getattr(banned, field), getattr(eager, field), rtol=1e-6)


@pytest.mark.parametrize("name", list(METHODS))
@pytest.mark.parametrize("n", [1, 2])
def test_no_output_repeats_and_scores_stay_the_models_own(toys, name, n):
    # HistoryToy's logits depend on the whole path, and its state must follow its hypothesis.
    toy = toys.HistoryToy(vocab=6, max_length=7, examples=6, seed=2)
    out = make_strategy(name, no_repeat_ngram=n, **METHODS[name])(
        toy.step, toy.initial_state(), 6, toys.START, toys.END, 7)
    toys.check_against_replay(toy, out)
    tokens, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
    for b, k in np.ndindex(*lengths.shape):
        if np.asarray(out.scores)[b, k] > FILLER:
            assert not toys.has_repeated_ngram(tokens[b, k, : lengths[b, k]].tolist(), n)


def test_end_stays_open_when_every_word_is_banned(toys):
    # One word, "a" (3): from <start> "a" 0.9, <end> 0.1; after "a", "a" 0.99, <end> 0.01.
    # Without the ban greedy says "a a a a"; with n = 1, "a" once, then <end>, whatever its
    # probability.
    toy = toys.TableToy(4, {toys.START: {3: 0.9, toys.END: 0.1}, 3: {3: 0.99, toys.END: 0.01}})
    args = (toy.step, toy.initial_state(), 1, toys.START, toys.END, 4)
    assert np.asarray(greedy_decode(*args).tokens).tolist() == [[[3, 3, 3, 3]]]
    for out in (greedy_decode(*args, no_repeat_ngram=1),
                sample_decode(*args, seed=3, no_repeat_ngram=1)):
        assert np.asarray(out.tokens).tolist() == [[[3, toys.END, 0, 0]]]
        np.testing.assert_allclose(np.exp(np.asarray(out.scores)), [[0.9 * 0.01]], rtol=1e-5)
    # Beam 2, alpha 0: "<end>" (0.1) and "a <end>" (0.009); no other hypothesis exists.
    out = beam_search(*args, beam_size=2, n_best=2, length_penalty=0.0, no_repeat_ngram=1)
    assert np.asarray(out.tokens)[0, :, :2].tolist() == [[toys.END, 0], [3, toys.END]]
    np.testing.assert_allclose(np.exp(np.asarray(out.scores)), [[0.1, 0.009]], rtol=1e-5)
    assert np.asarray(out.finished).all()


def test_an_n_longer_than_the_output_changes_nothing(toys):
    toy = toys.MarkovToy(vocab=6, max_length=5, examples=8, seed=3, scale=3.0)
    args = (toy.step, toy.initial_state(), 8, toys.START, toys.END, 5)
    plain = beam_search(*args, beam_size=2, n_best=2)
    long = beam_search(*args, beam_size=2, n_best=2, no_repeat_ngram=5)
    np.testing.assert_array_equal(long.tokens, plain.tokens)
    np.testing.assert_array_equal(long.scores, plain.scores)


@pytest.mark.parametrize("name", list(METHODS))
def test_jit_compile_matches_eager(toys, name):
    toy = toys.HistoryToy(vocab=6, max_length=6, examples=3, seed=4)
    strategy = make_strategy(name, no_repeat_ngram=2, **METHODS[name])
    args = (toy.step, toy.initial_state(), 3, toys.START, toys.END, 6)
    eager = strategy(*args)
    compiled = compile_search(lambda: strategy(*args))()
    for field in eager._fields:
        np.testing.assert_allclose(getattr(compiled, field), getattr(eager, field), rtol=1e-5,
                                   atol=1e-5)


@pytest.mark.parametrize("name", list(METHODS))
@pytest.mark.parametrize("value", [-1, 2.5, True, "2", [2]])
def test_bad_values_are_a_user_error_naming_the_option(name, value):
    with pytest.raises(UserError, match="no_repeat_ngram"):
        make_strategy(name, no_repeat_ngram=value, **METHODS[name])
