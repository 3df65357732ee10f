"""Beam search against brute force over all sequences, greedy decoding and a NumPy replay."""

import numpy as np
import pytest

from common.decoding import beam_search, greedy_decode
from common.errors import UserError


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_large_beam_finds_the_brute_force_n_best(toys, alpha):
    # V=5 with 3 emittable tokens, T=3: 7 finished + 8 unfinished sequences, all within 96
    # beams. The answer: the 7 finished best first, then the 3 best unfinished.
    toy = toys.MarkovToy(vocab=5, max_length=3, examples=2, seed=4, scale=1.0)
    n_best = 10
    out = beam_search(
        toy.step,
        toy.initial_state(),
        2,
        toys.START,
        toys.END,
        3,
        beam_size=96,
        length_penalty=alpha,
        n_best=n_best,
    )
    assert out.tokens.shape == (2, n_best, 3)
    for b in range(2):
        expected = toy.n_best(b, alpha, n_best)
        assert sum(finished for *_, finished in expected) == 7
        for k, (normalized, score, tokens, finished) in enumerate(expected):
            got = np.asarray(out.tokens)[b, k]
            np.testing.assert_array_equal(got[: len(tokens)], tokens)
            assert (got[len(tokens) :] == toys.PAD).all()
            assert out.lengths[b, k] == len(tokens)
            assert bool(out.finished[b, k]) == finished
            np.testing.assert_allclose(out.scores[b, k], score, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(
                out.normalized_scores[b, k], normalized, rtol=1e-5, atol=1e-5
            )


def test_brute_force_best_found_with_modest_beam(toys):
    # Not guaranteed for beam search in general, but this table is peaked enough.
    toy = toys.MarkovToy(vocab=4, max_length=4, examples=3, seed=5, scale=3.0)
    out = beam_search(
        toy.step, toy.initial_state(), 3, toys.START, toys.END, 4, beam_size=4, length_penalty=0.0
    )
    for b in range(3):
        _, score, tokens, finished = toy.n_best(b, 0.0, 1)[0]
        np.testing.assert_array_equal(np.asarray(out.tokens)[b, 0, : len(tokens)], tokens)
        np.testing.assert_allclose(out.scores[b, 0], score, rtol=1e-5, atol=1e-5)
        assert bool(out.finished[b, 0]) == finished


@pytest.mark.parametrize("beam_size", [1, 2, 3])
@pytest.mark.parametrize("alpha", [0.0, 0.6])
@pytest.mark.parametrize("n_best", ["one", "all"])
def test_matches_a_plain_beam_search_keeping_every_finished_candidate_of_the_top_2k(
    toys, beam_size, alpha, n_best
):
    """40 random tables (one batch) against `reference_beam_search`, a plain-Python beam search
    with the same rule: each step's `2K` best candidates, every one that ends finished, the `K`
    best others alive. It is not an exhaustive search (the rule does not always find the
    optimum), and it never stops early, so the search's early stop must not change an answer.
    """
    n_best = 1 if n_best == "one" else beam_size
    toy = toys.MarkovToy(vocab=8, max_length=6, examples=40, seed=0)
    out = beam_search(
        toy.step,
        toy.initial_state(),
        40,
        toys.START,
        toys.END,
        6,
        beam_size=beam_size,
        length_penalty=alpha,
        n_best=n_best,
    )
    tokens, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
    fairseq_loses = 0
    for b in range(40):
        expected = toy.beam(b, beam_size, alpha, n_best)
        for k, (normalized, score, hypothesis, finished) in enumerate(expected):
            assert tokens[b, k, : lengths[b, k]].tolist() == hypothesis, (b, k)
            assert (tokens[b, k, lengths[b, k] :] == toys.PAD).all()
            assert bool(out.finished[b, k]) == finished
            np.testing.assert_allclose(out.scores[b, k], score, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(out.normalized_scores[b, k], normalized, rtol=1e-5, atol=1e-5)
        # fairseq's rule (only <end>s among the K best finish) returns a worse finished answer
        # on some of these tables, and a better one on none.
        fairseq = toy.beam(b, beam_size, alpha, n_best, end_ranks=beam_size)
        if fairseq[0][3]:
            assert expected[0][0] >= fairseq[0][0]
            fairseq_loses += expected[0][0] > fairseq[0][0]
    assert fairseq_loses > 0


@pytest.mark.parametrize("alpha", [0.0, 0.6])
@pytest.mark.parametrize("seed", range(4))
def test_beam_size_one_returns_greedy_or_a_better_finished_hypothesis(toys, alpha, seed):
    # One beam follows greedy's path (the best token that does not end), and every <end> among
    # the two best candidates of a step finishes: greedy's own <end> (ranked first) and any
    # runner-up. So a finished greedy hypothesis is returned or beaten by a finished one, and an
    # unfinished one is returned unless some runner-up <end> finished on the way.
    toy = toys.MarkovToy(vocab=9, max_length=8, examples=6, seed=seed)
    greedy = greedy_decode(toy.step, toy.initial_state(), 6, toys.START, toys.END, 8)
    beam = beam_search(
        toy.step, toy.initial_state(), 6, toys.START, toys.END, 8, beam_size=1, length_penalty=alpha
    )
    greedy_normalized = np.asarray(greedy.scores) / toys.gnmt_penalty(np.asarray(greedy.lengths), alpha)
    same = (np.asarray(beam.tokens) == np.asarray(greedy.tokens)).all(axis=-1)
    better = np.asarray(beam.normalized_scores) > greedy_normalized
    finished, greedy_finished = np.asarray(beam.finished), np.asarray(greedy.finished)
    assert (same | (finished & (better | ~greedy_finished))).all()
    assert (finished | ~greedy_finished).all()


@pytest.mark.parametrize("beam_size, n_best", [(3, 3), (5, 2)])
def test_nested_state_and_attention_follow_their_hypothesis(toys, beam_size, n_best):
    toy = toys.HistoryToy(vocab=6, max_length=6, examples=4, seed=6)
    out = beam_search(
        toy.step,
        toy.initial_state(),
        4,
        toys.START,
        toys.END,
        6,
        beam_size=beam_size,
        length_penalty=0.6,
        n_best=n_best,
    )
    assert out.attention.shape == (4, n_best, 6, 6)
    toys.check_against_replay(toy, out)
    # Best first, and normalized_scores are the scores over the GNMT penalty.
    normalized = np.asarray(out.normalized_scores)
    assert (np.diff(normalized, axis=1) <= 0).all()
    penalty = toys.gnmt_penalty(np.asarray(out.lengths), 0.6)
    np.testing.assert_allclose(normalized, np.asarray(out.scores) / penalty, rtol=1e-5)


def test_never_ending_beams_are_returned_unfinished_at_full_length(toys):
    bias = np.zeros((2, 6), np.float32)
    bias[:, toys.END] = -1e9
    toy = toys.MarkovToy(vocab=6, max_length=5, examples=2, seed=7, bias=bias)
    out = beam_search(
        toy.step, toy.initial_state(), 2, toys.START, toys.END, 5, beam_size=4, n_best=4
    )
    np.testing.assert_array_equal(out.lengths, np.full((2, 4), 5))
    assert not np.asarray(out.finished).any()
    assert (np.asarray(out.tokens) != toys.END).all()
    assert np.isfinite(np.asarray(out.scores)).all() and (np.asarray(out.scores) > -1e3).all()
    # Four distinct hypotheses per example, best first, each scored as NumPy scores it.
    for b in range(2):
        assert len({tuple(t) for t in np.asarray(out.tokens)[b]}) == 4
        scores = {tuple(t): s for _, s, t, _ in toy.all_sequences(b, 0.6)}
        expected = [scores[tuple(t)] for t in np.asarray(out.tokens)[b].tolist()]
        np.testing.assert_allclose(out.scores[b], expected, rtol=1e-5)
        assert (np.diff(out.scores[b]) <= 0).all()
        np.testing.assert_allclose(out.scores[b, 0], max(scores.values()), rtol=1e-5)


def test_examples_finishing_early_do_not_disturb_the_others(toys):
    bias = np.zeros((3, 6), np.float32)
    bias[0, toys.END] = 50.0
    bias[1, toys.END] = -1e9
    toy = toys.MarkovToy(vocab=6, max_length=5, examples=3, seed=8, bias=bias)
    out = beam_search(
        toy.step, toy.initial_state(), 3, toys.START, toys.END, 5, beam_size=3, n_best=2
    )
    np.testing.assert_array_equal(out.tokens[0, 0], [toys.END, 0, 0, 0, 0])
    assert not np.asarray(out.finished)[1].any()
    for b in range(3):
        alone = toys.MarkovToy(vocab=6, max_length=5, examples=3, seed=8, bias=bias)
        state = {key: value[b : b + 1] for key, value in alone.initial_state().items()}
        single = beam_search(alone.step, state, 1, toys.START, toys.END, 5, beam_size=3, n_best=2)
        np.testing.assert_array_equal(out.tokens[b], single.tokens[0])
        np.testing.assert_allclose(out.scores[b], single.scores[0], rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs",
    [{"beam_size": 0}, {"beam_size": 2, "n_best": 3}, {"length_penalty": -0.1}, {"beam_size": 2.0}],
)
def test_beam_search_rejects_bad_arguments(toys, kwargs):
    toy = toys.MarkovToy(vocab=5, max_length=4)
    args = {"beam_size": 2, **kwargs}
    with pytest.raises(UserError):
        beam_search(toy.step, toy.initial_state(), 1, 1, 2, 4, **args)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_stops_early_once_no_alive_hypothesis_can_win(toys, alpha):
    bias = np.zeros((2, 6), np.float32)
    bias[:, toys.END] = 30.0  # <end> first beats every other path by far
    toy = toys.MarkovToy(vocab=6, max_length=8, examples=2, seed=9, bias=bias)
    calls = []

    def step(tokens, state, index):
        toys.record_step(calls, index)
        return toy.step(tokens, state, index)

    out = beam_search(
        step, toy.initial_state(), 2, toys.START, toys.END, 8, beam_size=3, length_penalty=alpha
    )
    assert calls == [0]
    np.testing.assert_array_equal(out.lengths, [[1], [1]])
    assert np.asarray(out.finished).all()
