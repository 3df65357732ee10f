"""Multi-head attention without weights on JAX: `keras.ops.dot_product_attention` (cuDNN's fused
kernel on a GPU; here JAX's XLA formula) gives the loss and gradients of the path that forms
the weights, in float32 and bf16, and Keras never logs a failed attention implementation."""

from __future__ import annotations

import pytest

from tests.jax.conftest import requires_jax, run_worker

pytestmark = [requires_jax, pytest.mark.slow]


@pytest.mark.parametrize("precision, tolerance", [("float32", 1e-5), ("mixed_bfloat16", 2e-2)])
@pytest.mark.parametrize("fused_projections", [False, True], ids=["keras-dense", "fused-proj"])
def test_fused_attention_has_the_loss_and_gradients_of_the_weights_path(
        precision, tolerance, fused_projections):
    result = run_worker("fused_attention", {"precision": precision,
                                            "fused_projections": fused_projections})
    assert result["backend"] == "jax"
    assert result["loss"] == pytest.approx(result["loss_reference"], rel=tolerance)
    assert result["gradient_error"] <= tolerance * result["gradient_scale"]
    assert result["failures"] == []
