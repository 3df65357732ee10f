"""`common.layers.Dropout` on JAX inside `dropout_rng("rbg")` (and "rbg16": 16-bit words and a
threshold): Keras's rate and scaling from XLA's RngBitGenerator, reproducible, advancing the seed state inside a jitted stateless step."""

from __future__ import annotations

import pytest

from tests.jax.conftest import requires_jax, run_worker

pytestmark = [requires_jax, pytest.mark.slow]


@pytest.mark.parametrize("generator", ["rbg", "rbg16"])
def test_rbg_dropout_keeps_the_rate_and_scale_and_advances_the_seed(generator):
    result = run_worker("dropout", {"rate": 0.25, "shape": [256, 512], "seed": 5,
                                    "generator": generator})
    assert result["backend"] == "jax"
    # 131,072 draws of p = 0.75: the standard deviation of the kept fraction is 0.0012.
    assert result["kept"] == pytest.approx(0.75, abs=0.006)
    assert result["values"] == pytest.approx([0.0, 4.0 / 3.0], rel=1e-6)
    assert result["same_seed_same_mask"] and result["keras_mask_differs"]
    assert result["outside_context_equals_keras"]
    assert result["jit_steps_differ"] and result["jit_state_advanced"]
    assert result["noise_shape_broadcast"]  # noise_shape (None, 1): one draw per row


def test_rbg16_rounds_the_rate_to_sixteen_bits_and_scales_by_it():
    """rate 0.1: dropped below round(0.1 * 65536) = 6554 of 65,536, scaled by 65536 / 58982."""
    result = run_worker("dropout", {"rate": 0.1, "shape": [256, 512], "seed": 2,
                                    "generator": "rbg16"})
    assert result["kept"] == pytest.approx(58982 / 65536, abs=0.004)  # sd 0.0008
    assert result["values"] == pytest.approx([0.0, 65536 / 58982], rel=1e-6)


def test_rbg16_takes_rbgs_draws_for_a_rate_that_rounds_to_no_word():
    """rate 1e-6 rounds to 0 of 65,536: not 1/65,536 (15x the rate); the layer draws as "rbg"
    does, the same mask, at Keras's scale."""
    args = {"rate": 1e-6, "shape": [256, 512], "seed": 3}
    rbg16 = run_worker("dropout", {**args, "generator": "rbg16"})
    rbg = run_worker("dropout", {**args, "generator": "rbg"})
    assert rbg16["kept"] == rbg["kept"] and rbg16["values"] == rbg["values"]
    assert max(rbg16["values"]) == pytest.approx(1 / (1 - 1e-6), rel=1e-7)
