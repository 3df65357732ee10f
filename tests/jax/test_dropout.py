"""`common.layers.Dropout` on JAX inside `dropout_rng("rbg")`: Keras's rate and scaling from
XLA's RngBitGenerator, reproducible, advancing the seed state inside a jitted stateless step."""

from __future__ import annotations

import pytest

from tests.jax.conftest import requires_jax, run_worker

pytestmark = [requires_jax, pytest.mark.slow]


def test_rbg_dropout_keeps_the_rate_and_scale_and_advances_the_seed():
    result = run_worker("dropout", {"rate": 0.25, "shape": [256, 512], "seed": 5})
    assert result["backend"] == "jax"
    # 131,072 draws of p = 0.75: the standard deviation of the kept fraction is 0.0012.
    assert result["kept"] == pytest.approx(0.75, abs=0.006)
    assert result["values"] == pytest.approx([0.0, 4.0 / 3.0], rel=1e-6)
    assert result["same_seed_same_mask"] and result["keras_mask_differs"]
    assert result["outside_context_equals_keras"]
    assert result["jit_steps_differ"] and result["jit_state_advanced"]
    assert result["noise_shape_broadcast"]  # noise_shape (None, 1): one draw per row
