"""`tests.helpers.ties`: two decodes agree, or part only at a near tie."""

import numpy as np
import pytest

from tests.helpers.ties import TIE_TOLERANCE, first_difference, rows_that_agree

END = 2


def _table(gap):
    """Next-token log-probabilities that depend only on the prefix's length: after one
    token, tokens 3 and 4 are `gap` apart; elsewhere token 3 leads clearly."""
    def next_log_probs(row, prefix):
        values = np.log(np.full(6, 0.05))
        values[3] = np.log(0.5)
        if len(prefix) == 1:
            values[4] = values[3] - gap
        return values
    return next_log_probs


def test_first_difference():
    assert first_difference([1, 2], [1, 2]) is None
    assert first_difference([1, 2], [1, 3]) == 1
    assert first_difference([1], [1, 3]) == 1


def test_equal_rows_agree_whole():
    tokens = np.array([[3, 3, END, 0], [3, 4, 3, END]])
    assert rows_that_agree(tokens, tokens.copy(), _table(1.0), END).tolist() == [True, True]


def test_tokens_after_end_are_not_compared():
    got, expected = np.array([[3, END, 5, 5]]), np.array([[3, END, 0, 0]])
    assert rows_that_agree(got, expected, _table(1.0), END).tolist() == [True]


def test_a_near_tie_may_part_the_rows():
    got, expected = np.array([[3, 4, 3, END]]), np.array([[3, 3, 4, END]])
    assert rows_that_agree(got, expected, _table(TIE_TOLERANCE / 2), END).tolist() == [False]


def test_a_clear_choice_may_not():
    got, expected = np.array([[3, 4, 3, END]]), np.array([[3, 3, 4, END]])
    with pytest.raises(AssertionError, match="not a tie"):
        rows_that_agree(got, expected, _table(10 * TIE_TOLERANCE), END)
    # An <end> where the other goes on is judged the same way (step 0: token 3 leads by 2.3).
    with pytest.raises(AssertionError, match="not a tie"):
        rows_that_agree(np.array([[END, 0]]), np.array([[3, END]]), _table(1.0), END)
