"""Beam search on hand-written step tables, each expected result worked out in a comment.

Tokens: 0 <pad>, 1 <start>, 2 <end>, 3-6 words a b c d, 7-16 ten fillers; V = 17. Scores are natural
logs; lp(n) = ((5 + n) / 6) ** alpha, so lp(1) = 1 and, for alpha = 0.6, lp(2) = 1.0969,
lp(3) = 1.1885, lp(4) = 1.2754, lp(6) = 1.4387.
"""

import numpy as np
import pytest

from common.decoding import beam_search, greedy_decode, sample_decode

PAD, START, END = 0, 1, 2
A, B, C, D = 3, 4, 5, 6
FILLERS = range(7, 17)
V = 17
ANY_FILLER = {f: 0.1 for f in FILLERS}

# The eviction case: <end> at once (0.09) or "a" (0.90); after "a", "b" or "c";
# then fillers that never end.
EVICTION = {START: {A: 0.90, END: 0.09, B: 0.01}, A: {B: 0.5, C: 0.5}, B: ANY_FILLER,
            C: ANY_FILLER, **{f: ANY_FILLER for f in FILLERS}}  # fmt: skip
# A short hypothesis [<end>] (log .40 = -0.9163) against a long one [a b c <end>]
# (log .60 + 3 log .85 = -0.9983): the raw score prefers the short one, lp(4) = 1.2754
# the long one (-0.9983 / 1.2754 = -0.7827).
LENGTHS = {START: {END: 0.40, A: 0.60}, A: {B: 0.85, END: 0.15}, B: {C: 0.85, END: 0.15},
           C: {END: 0.85, D: 0.15}, D: {D: 1.0}}  # fmt: skip
# The review's case: <end> at once (log .16 = -1.833) ranks 3rd (BURIED_3RD) or 4th (BURIED_4TH)
# of the first step's candidates, below two beams but within 2K = 4. Then "d" or "f0" (7), and
# after either <end> .1 or a filler .09.
ENDING_FILLER = {END: 0.1, **{f: 0.09 for f in FILLERS}}
AFTER_WORDS = {A: {D: 0.6, 7: 0.4}, B: {D: 0.6, 7: 0.4}, C: {D: 0.6, 7: 0.4}, D: ENDING_FILLER,
               **{f: ENDING_FILLER for f in FILLERS}}  # fmt: skip
BURIED_3RD = {START: {A: 0.50, B: 0.34, END: 0.16}, **AFTER_WORDS}
BURIED_4TH = {START: {A: 0.40, B: 0.25, C: 0.19, END: 0.16}, **AFTER_WORDS}
# Nothing ever ends.
ENDLESS = {START: {A: 0.6, B: 0.4}, A: {A: 0.7, B: 0.3}, B: {A: 0.6, B: 0.4}}
# The most probable tokens are <pad> and <start>, which no search may emit.
SPECIALS = {START: {PAD: 0.5, START: 0.3, A: 0.15, END: 0.05}, A: {START: 0.6, END: 0.3, A: 0.1}}

log = np.log


def lp(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha


def search(toys, table, max_length, **kwargs):
    toy = toys.TableToy(V, table)
    out = beam_search(toy.step, toy.initial_state(), 1, START, END, max_length, **kwargs)
    toys.check_table_attention(toy, out)
    return out, toy.calls


@pytest.mark.parametrize("beam_size", [2, 3])
@pytest.mark.parametrize("alpha, steps", [(0.0, 3), (0.6, 4)])
def test_finished_hypothesis_is_not_evicted_by_alive_ones(toys, beam_size, alpha, steps):
    # Step 0: [<end>] (-2.408) ranks 2nd of the candidates and goes to the buffer; "a"
    # (-0.105) and "b" (-4.605) stay alive. Step 1: "a b", "a c" (-0.798). Step 2: fillers,
    # -3.101, which can no longer beat -2.408 (alpha 0); with alpha 0.6 the bound is
    # -3.101 / lp(6) = -2.155 > -2.408, and one step later -5.404 / lp(6) = -3.756: done.
    # The old search returned the unfinished "a b f f f f" (-10.0) instead.
    out, calls = search(toys, EVICTION, 6, beam_size=beam_size, length_penalty=alpha)
    np.testing.assert_array_equal(out.tokens, [[[END, PAD, PAD, PAD, PAD, PAD]]])
    np.testing.assert_allclose(out.scores, [[log(0.09)]], rtol=1e-6)
    np.testing.assert_allclose(out.normalized_scores, [[log(0.09)]], rtol=1e-6)
    np.testing.assert_array_equal(out.lengths, [[1]])
    assert np.asarray(out.finished).all()
    assert calls == list(range(steps))


@pytest.mark.parametrize(
    "table",
    [
        # Step 0: "a" (-0.693), "b" (-1.079) alive; [<end>] (-1.833, rank 3) finishes. Step 1:
        # "a d" (-1.204), "b d" (-1.590), no <end>. Step 2: [a d <end>] (-3.507 / lp(3) =
        # -2.951) ranks first and finishes; "a d f" (-3.612) stays alive, bound -3.612 / lp(6)
        # = -2.511 < -1.833: done.
        BURIED_3RD,
        # Step 0: "a" (-0.916), "b" (-1.386) alive; "c" (-1.661) is dropped and [<end>] (rank
        # 4) finishes. Step 1: "a d" (-1.427), "a f0" (-1.833). Step 2: [a d <end>] (-3.730 /
        # lp(3) = -3.138) finishes; bound -3.835 / lp(6) = -2.666 < -1.833: done.
        BURIED_4TH,
    ],
)
def test_end_ranked_below_the_beams_but_within_2k_finishes_and_wins(toys, table):
    # fairseq's rule finished only <end>s among the K best candidates: it dropped [<end>] here,
    # ran one step more and returned [a d <end>].
    out, calls = search(toys, table, 6, beam_size=2, length_penalty=0.6)
    np.testing.assert_array_equal(out.tokens, [[[END, PAD, PAD, PAD, PAD, PAD]]])
    np.testing.assert_allclose(out.scores, [[log(0.16)]], rtol=1e-6)
    np.testing.assert_allclose(out.normalized_scores, [[log(0.16)]], rtol=1e-6)
    assert np.asarray(out.finished).all()
    assert calls == [0, 1, 2]
    # With n_best 2 the runner-up is the hypothesis the old rule returned.
    two, _ = search(toys, table, 6, beam_size=2, length_penalty=0.6, n_best=2)
    np.testing.assert_array_equal(two.tokens[0], [[END, PAD, PAD, PAD, PAD, PAD],
                                                  [A, D, END, PAD, PAD, PAD]])  # fmt: skip
    np.testing.assert_allclose(
        two.scores[0], [log(0.16), log(table[START][A]) + log(0.6) + log(0.1)], rtol=1e-5
    )


def test_buffer_short_of_n_best_is_topped_up_with_the_best_alive(toys):
    # Only [<end>] ever finishes, so the search runs all 6 steps and the second slot holds the
    # best alive hypothesis: "a b" or "a c" and four fillers, log .9 + log .5 + 4 log .1.
    out, calls = search(toys, EVICTION, 6, beam_size=2, length_penalty=0.0, n_best=2)
    assert calls == list(range(6))
    tokens = np.asarray(out.tokens)[0]
    np.testing.assert_array_equal(tokens[0], [END, PAD, PAD, PAD, PAD, PAD])
    assert tokens[1, 0] == A and tokens[1, 1] in (B, C) and set(tokens[1, 2:]) <= set(FILLERS)
    np.testing.assert_array_equal(out.finished, [[True, False]])
    np.testing.assert_array_equal(out.lengths, [[1, 6]])
    np.testing.assert_allclose(
        out.scores, [[log(0.09), log(0.9) + log(0.5) + 4 * log(0.1)]], rtol=1e-5
    )


@pytest.mark.parametrize(
    "alpha, expected_tokens, expected_score",
    [
        # No penalty: [<end>] (-0.9163) beats [a b c <end>] (-0.9983).
        (0.0, [END, PAD, PAD, PAD, PAD, PAD], log(0.4)),
        # GNMT penalty: [a b c <end>] (-0.7827) beats [<end>] (-0.9163) and [a <end>]
        # (-2.4079 / lp(2) = -2.195); the alive "a b c d" (-2.733 / lp(6) = -1.900) cannot.
        (0.6, [A, B, C, END, PAD, PAD], log(0.6) + 3 * log(0.85)),
        (2.0, [A, B, C, END, PAD, PAD], log(0.6) + 3 * log(0.85)),
    ],
)
def test_length_penalty_chooses_between_short_and_long(
    toys, alpha, expected_tokens, expected_score
):
    out, _ = search(toys, LENGTHS, 6, beam_size=2, length_penalty=alpha)
    np.testing.assert_array_equal(out.tokens, [[expected_tokens]])
    np.testing.assert_allclose(out.scores, [[expected_score]], rtol=1e-5)
    length = expected_tokens.index(END) + 1
    np.testing.assert_allclose(
        out.normalized_scores, [[expected_score / lp(length, alpha)]], rtol=1e-5
    )
    assert np.asarray(out.finished).all()


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_n_best_are_sorted_by_normalized_score(toys, alpha):
    # The same two hypotheses in either order: with alpha 0.6 the long one comes first
    # although its raw score is lower.
    short = ([END, PAD, PAD, PAD, PAD, PAD], log(0.4), 1)
    long = ([A, B, C, END, PAD, PAD], log(0.6) + 3 * log(0.85), 4)
    expected = [short, long] if alpha == 0 else [long, short]
    out, _ = search(toys, LENGTHS, 6, beam_size=2, length_penalty=alpha, n_best=2)
    np.testing.assert_array_equal(out.tokens[0], [tokens for tokens, _, _ in expected])
    np.testing.assert_allclose(out.scores[0], [score for _, score, _ in expected], rtol=1e-5)
    np.testing.assert_allclose(
        out.normalized_scores[0], [s / lp(n, alpha) for _, s, n in expected], rtol=1e-5
    )
    np.testing.assert_array_equal(out.lengths[0], [n for _, _, n in expected])
    assert np.asarray(out.finished).all()


def test_max_length_with_nothing_finished_returns_the_best_unfinished(toys):
    # Step 1 keeps "a a" (-0.868) and "b a" (-1.427); step 2 "a a a" (log .6 + 2 log .7 =
    # -1.224) and "b a a" (log .4 + log .6 + log .7 = -1.784), the two best of all eight.
    out, _ = search(toys, ENDLESS, 3, beam_size=2, length_penalty=0.6, n_best=2)
    np.testing.assert_array_equal(out.tokens[0], [[A, A, A], [B, A, A]])
    scores = [log(0.6) + 2 * log(0.7), log(0.4) + log(0.6) + log(0.7)]
    np.testing.assert_allclose(out.scores[0], scores, rtol=1e-5)
    np.testing.assert_allclose(out.normalized_scores[0], np.array(scores) / lp(3, 0.6), rtol=1e-5)
    np.testing.assert_array_equal(out.lengths, [[3, 3]])
    assert not np.asarray(out.finished).any()


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_examples_in_a_batch_are_decoded_as_if_alone(toys, alpha):
    # The eviction example is done after 3 or 4 steps, the others run on; its buffer must not
    # take later hypotheses.
    tables = [EVICTION, LENGTHS, ENDLESS]
    toy = toys.TableToy(V, *tables)
    args = dict(beam_size=3, length_penalty=alpha, n_best=2)
    batch = beam_search(toy.step, toy.initial_state(), 3, START, END, 6, **args)
    toys.check_table_attention(toy, batch)
    for b, table in enumerate(tables):
        alone, _ = search(toys, table, 6, **args)
        for field in batch._fields:
            np.testing.assert_allclose(
                getattr(batch, field)[b], getattr(alone, field)[0], rtol=1e-6
            )


def test_one_beam_equals_greedy_without_penalty_and_may_beat_it_with_one(toys):
    # Greedy takes [<end>] (log .45 = -0.799). With alpha 0.6 one beam keeps it in the buffer
    # and goes on with "a" (-0.821 / lp(6) = -0.571 could still win): [a <end>] scores
    # (log .44 + log .99) / lp(2) = -0.758 and wins. With alpha 0, -0.821 cannot beat -0.799.
    table = {START: {END: 0.45, A: 0.44, B: 0.11}, A: {END: 0.99, B: 0.01}, B: {END: 1.0}}
    toy = toys.TableToy(V, table)
    greedy = greedy_decode(toy.step, toy.initial_state(), 1, START, END, 6)
    np.testing.assert_array_equal(greedy.tokens[0, 0, :1], [END])
    plain, _ = search(toys, table, 6, beam_size=1, length_penalty=0.0)
    np.testing.assert_array_equal(plain.tokens, greedy.tokens)
    np.testing.assert_array_equal(plain.scores, greedy.scores)
    penalized, _ = search(toys, table, 6, beam_size=1, length_penalty=0.6)
    np.testing.assert_array_equal(penalized.tokens[0, 0, :2], [A, END])
    np.testing.assert_allclose(
        penalized.normalized_scores, [[(log(0.44) + log(0.99)) / lp(2, 0.6)]], rtol=1e-5
    )


def test_no_search_emits_pad_or_start(toys):
    # <pad> (.5) and <start> (.3) are the most probable first tokens, <start> (.6) after "a".
    # Greedy: "a" (log .15), then <end> (log .3); scores are the model's, not renormalized.
    # Beam 2: [<end>] (log .05 = -2.996) from step 0 beats [a <end>] (-3.101).
    toy = toys.TableToy(V, SPECIALS)
    greedy = greedy_decode(toy.step, toy.initial_state(), 1, START, END, 4)
    np.testing.assert_array_equal(greedy.tokens, [[[A, END, PAD, PAD]]])
    np.testing.assert_allclose(greedy.scores, [[log(0.15) + log(0.3)]], rtol=1e-6)
    toys.check_table_attention(toy, greedy)
    beam, _ = search(toys, SPECIALS, 4, beam_size=2, length_penalty=0.0, n_best=2)
    np.testing.assert_array_equal(beam.tokens[0], [[END, PAD, PAD, PAD], [A, END, PAD, PAD]])
    np.testing.assert_allclose(beam.scores[0], [log(0.05), log(0.15) + log(0.3)], rtol=1e-6)
    rows = 500
    toy = toys.TableToy(V, *[SPECIALS] * rows)
    sampled = sample_decode(toy.step, toy.initial_state(), rows, START, END, 4, seed=1)
    toys.check_table_attention(toy, sampled)
    tokens, lengths = np.asarray(sampled.tokens)[:, 0], np.asarray(sampled.lengths)[:, 0]
    assert len({tuple(row) for row in tokens}) > 2
    for b, (row, length) in enumerate(zip(tokens, lengths, strict=True)):
        assert not np.isin(row[:length], [PAD, START]).any()
        fed = [START, *row[: length - 1]]
        expected = sum(log(SPECIALS[p][t]) for p, t in zip(fed, row[:length], strict=True))
        np.testing.assert_allclose(sampled.scores[b, 0], expected, rtol=1e-5)
