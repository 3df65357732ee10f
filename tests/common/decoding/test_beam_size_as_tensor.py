"""Beam search with the beam size and `n_best` as tensors: one graph for every size, as an
export compiles it, against the plain-Python reference and the search with Python sizes."""

import numpy as np
import pytest
import tensorflow as tf

from common.decoding import beam_search

EXAMPLES, LENGTH = 40, 6


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_one_graph_gives_every_size_the_answer_of_its_own_search(toys, alpha):
    toy = toys.MarkovToy(vocab=8, max_length=LENGTH, examples=EXAMPLES, seed=0)

    def search(beam_size, n_best):
        return beam_search(toy.step, toy.initial_state(), EXAMPLES, toys.START, toys.END, LENGTH,
                           beam_size=beam_size, length_penalty=alpha, n_best=n_best)

    one_graph = tf.function(search, autograph=False,
                            input_signature=[tf.TensorSpec([], tf.int32)] * 2)
    for beam_size in (1, 2, 3):
        for n_best in sorted({1, beam_size}):
            got = one_graph(tf.constant(beam_size), tf.constant(n_best))
            own = search(beam_size, n_best)  # Python sizes: static shapes
            assert got.tokens.shape == (EXAMPLES, n_best, LENGTH)
            for name, value in got._asdict().items():
                expected = getattr(own, name).numpy()
                if value.dtype.is_floating:
                    np.testing.assert_allclose(np.asarray(value), expected, rtol=1e-6, atol=1e-6)
                else:
                    np.testing.assert_array_equal(np.asarray(value), expected, err_msg=name)
            tokens, lengths = np.asarray(got.tokens), np.asarray(got.lengths)
            for b in range(EXAMPLES):
                for k, (_, score, hypothesis, finished) in enumerate(
                        toy.beam(b, beam_size, alpha, n_best)):
                    assert tokens[b, k, : lengths[b, k]].tolist() == hypothesis, (b, k)
                    assert bool(got.finished[b, k]) == finished
                    np.testing.assert_allclose(got.scores[b, k], score, rtol=1e-5, atol=1e-5)
    assert one_graph.experimental_get_tracing_count() == 1
