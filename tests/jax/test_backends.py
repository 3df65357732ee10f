"""The same weights give the same loss on TensorFlow and on JAX, for every model family."""

from __future__ import annotations

import pytest

from tests.jax.conftest import requires_jax, run_worker

pytestmark = [requires_jax]

# float32 on both backends; the sums differ only in the order of their terms.
RTOL, ATOL = 1e-5, 1e-5


@pytest.mark.slow
def test_same_weights_same_loss_terms_on_tensorflow_and_jax(tmp_path):
    """Transformer, Bahdanau, and the captioner (small-cnn, no pretrained weights) with soft
    and with hard attention: weights saved by TensorFlow (`.weights.h5`) and loaded by JAX
    give the same `loss_terms` on the same batch."""
    on_tf = run_worker("losses", {"dir": str(tmp_path), "save": True}, backend="tensorflow",
                       TF_ALLOWED="1")
    on_jax = run_worker("losses", {"dir": str(tmp_path), "save": False})
    assert sorted(on_jax) == ["bahdanau", "captioner-hard", "captioner-soft", "transformer"]
    for name, terms in on_tf.items():
        assert terms["count"] > 0
        assert sorted(on_jax[name]) == sorted(terms), name
        for key, value in terms.items():
            assert on_jax[name][key] == pytest.approx(value, rel=RTOL, abs=ATOL), (name, key)
