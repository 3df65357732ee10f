"""Decoding methods by name: the registry, `make_strategy`, and a TensorFlow-free import."""

import subprocess
import sys

import numpy as np
import pytest
from keras import ops

from common.decoding import (
    DECODING_METHODS,
    BeamSearch,
    GreedySearch,
    Sampling,
    beam_search,
    default_method,
    greedy_decode,
    make_strategy,
    sample_decode,
)
from common.errors import UserError

# Tokens: 0 <pad>, 1 <start>, 2 <end>, 3 and 4 words; row i: next-token probabilities.
TABLE = np.log(np.array([[.2] * 5, [.01, .01, .28, .4, .3], [.2] * 5,
                         [.01, .01, .5, .18, .3], [.01, .01, .6, .28, .1]], np.float32))


def step(tokens, state, index):
    return ops.take(TABLE, tokens, axis=0), state, ops.zeros((ops.shape(tokens)[0], 0))


def test_names_and_classes():
    assert DECODING_METHODS.names() == ["greedy", "beam", "sample"]
    assert type(make_strategy("greedy", beam_size=4, temperature=2.0)) is GreedySearch
    beam = make_strategy("beam", beam_size=3, n_best=2, temperature=2.0)
    assert type(beam) is BeamSearch and (beam.beam_size, beam.n_best) == (3, 2)
    sample = make_strategy("sample", beam_size=3, temperature=0.5, seed=None)
    assert type(sample) is Sampling and sample.temperature == 0.5 and sample.seed is None
    assert [default_method(1), default_method(2)] == ["greedy", "beam"]


def test_unknown_method_is_one_line_naming_the_methods():
    with pytest.raises(UserError, match="decoding method 'topp'; choose one of: greedy, beam, "
                                        "sample"):
        make_strategy("topp")


@pytest.mark.parametrize("name, options, reference", [
    ("greedy", {}, lambda *a: greedy_decode(*a)),
    ("beam", {"beam_size": 3, "n_best": 2, "length_penalty": 0.0},
     lambda *a: beam_search(*a, beam_size=3, n_best=2, length_penalty=0.0)),
    ("sample", {"seed": 11, "temperature": 0.7},
     lambda *a: sample_decode(*a, seed=11, temperature=0.7)),
])
def test_a_strategy_by_name_decodes_as_its_function(name, options, reference):
    problem = (step, {}, 4, 1, 2, 6)
    got, expected = make_strategy(name, **options)(*problem), reference(*problem)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_beam_search_table_by_hand():
    # From <start>: "3" 0.4, "4" 0.3, <end> 0.28. Two beams, alpha 0: <end> ranks 3rd, within
    # the 2K = 4 candidates, and finishes; then "3 <end>" (0.4 * 0.5 = 0.2) beats "4 <end>"
    # (0.3 * 0.6 = 0.18) and every alive hypothesis (at most 0.4 * 0.3 = 0.12): done.
    out = make_strategy("beam", beam_size=2, n_best=2, length_penalty=0.0)(step, {}, 1, 1, 2, 4)
    assert np.asarray(out.tokens)[0, :, :2].tolist() == [[2, 0], [3, 2]]
    np.testing.assert_allclose(np.exp(np.asarray(out.scores)[0]), [0.28, 0.2], rtol=1e-5)


def test_the_registry_imports_without_tensorflow():
    code = ("import sys; from common.decoding import DECODING_METHODS; "
            "print(DECODING_METHODS.names(), 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "['greedy', 'beam', 'sample'] False"
