"""The same weights decode to the same hypotheses on TensorFlow and on JAX: the Transformer,
Bahdanau and the captioner with soft and with hard attention, greedy, beam search of 1 to 5,
n-best 3 and `no_repeat_ngram` 2, each compiled as validation compiles it
(`common.decoding.compiled.CompiledSearch`: `tf.function` and `jax.jit`).

The two backends' kernels round differently in the last bits, so a hypothesis may part from
the other backend's where two of its candidates are within float32 rounding of each other:
each slot's tokens are the other backend's, or its scores are within `TOLERANCE` of them (the
tie broken the other way scores the same); the rows that agree have the same lengths, finish
and attention."""

from __future__ import annotations

import numpy as np
import pytest

from tests.jax.conftest import requires_jax, run_worker

pytestmark = [requires_jax, pytest.mark.slow]

TOLERANCE = 1e-4
#: name -> the method and options of `common.decoding.make_strategy`.
SEARCHES = {
    "greedy": {"method": "greedy"},
    **{f"beam_{k}": {"method": "beam", "beam_size": k} for k in range(1, 6)},
    "beam_3_n_best_3": {"method": "beam", "beam_size": 3, "n_best": 3},
    "greedy_no_repeat_2": {"method": "greedy", "no_repeat_ngram": 2},
    "beam_3_no_repeat_2": {"method": "beam", "beam_size": 3, "no_repeat_ngram": 2},
}
MODELS = ["transformer", "bahdanau", "captioner-soft", "captioner-hard"]
# 36 tiny programs: LLVM at -O0 behind XLA compiles them in a fraction of the time.
FAST_COMPILE = "--xla_force_host_platform_device_count=1 --xla_backend_optimization_level=0"


def test_every_search_decodes_the_same_on_both_backends(tmp_path):
    args = {"dir": str(tmp_path), "max_length": 6, "searches": SEARCHES}
    on_tf = run_worker("decode", {**args, "save": True}, backend="tensorflow", TF_ALLOWED="1")
    on_jax = run_worker("decode", {**args, "save": False}, XLA_FLAGS=FAST_COMPILE)
    assert sorted(on_tf) == sorted(on_jax) == sorted(MODELS)
    agreeing = total = 0
    for name in MODELS:
        assert sorted(on_jax[name]) == sorted(SEARCHES)
        for search in SEARCHES:
            a = {k: np.asarray(v) for k, v in on_tf[name][search].items()}
            b = {k: np.asarray(v) for k, v in on_jax[name][search].items()}
            assert a["tokens"].shape == b["tokens"].shape, (name, search)
            for row, k in np.ndindex(*a["scores"].shape):
                where = (name, search, row, k)
                total += 1
                np.testing.assert_allclose(b["normalized_scores"][row, k],
                                           a["normalized_scores"][row, k], atol=TOLERANCE,
                                           err_msg=str(where))
                if not np.array_equal(a["tokens"][row, k], b["tokens"][row, k]):
                    continue  # a near tie, broken the other way: the same score, checked
                agreeing += 1
                assert a["lengths"][row, k] == b["lengths"][row, k], where
                assert a["finished"][row, k] == b["finished"][row, k], where
                np.testing.assert_allclose(b["scores"][row, k], a["scores"][row, k],
                                           atol=TOLERANCE, err_msg=str(where))
                np.testing.assert_allclose(b["attention"][row, k], a["attention"][row, k],
                                           atol=TOLERANCE, err_msg=str(where))
    # Ties are rare: nearly every hypothesis is the same, token for token.
    assert agreeing >= 0.9 * total, (agreeing, total)
    # The searches differ from one another (the test can tell them apart).
    transformer = on_tf["transformer"]
    assert transformer["beam_3_n_best_3"]["tokens"] != transformer["greedy"]["tokens"]
