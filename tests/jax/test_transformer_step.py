"""The Transformer's decoding step runs under `jax.jit` and gives, on JAX, the logits and
attention of the TensorFlow full pass of the same weights at every position: a pre-norm model
with sine positions, and a post-norm pointer-generator with learned positions and tied
embeddings (worker task `transformer_step`)."""

from __future__ import annotations

import numpy as np

from tests.jax.conftest import requires_jax, run_worker

pytestmark = requires_jax

SIZES = {"num_layers": 2, "hidden_dim": 16, "num_heads": 2, "intermediate_dim": 32,
         "dropout": 0.0, "max_length": 16}
CONFIGS = {
    "sine-pre-norm": {"arch": "transformer", "transformer": SIZES},
    "learned-post-norm-copy": {"arch": "transformer", "copy": True, "transformer": {
        **SIZES, "positions": "learned", "norm_first": False, "tie_embeddings": True}},
}
SOURCE = np.array([[4, 5, 6, 2, 0, 0], [7, 8, 9, 10, 11, 2], [0, 0, 0, 0, 0, 0]], np.int32)
TARGET_IN = np.array([[1, 9, 10, 11, 12], [1, 12, 13, 14, 15], [1, 3, 4, 5, 6]], np.int32)
# A copying model's: row 0's third token an extended id, a copy of source position 1.
COPY_TARGET_IN = np.where(np.arange(5) == 2, [[31], [13], [4]], TARGET_IN).astype(np.int32)
SOURCE_COPY = np.where(SOURCE > 0, SOURCE, 0).astype(np.int32)
SOURCE_COPY[0, 1] = 31


def _tensorflow_full_pass(name, config, tmp_path):
    """The model of `config` on TensorFlow (this process), its weights drawn at random and
    saved: the path, its target prefix, and its full pass' logits and last-layer head-average
    attention."""
    import keras

    from common.config import from_dict
    from seq2seq.config import ModelConfig
    from seq2seq.models import build_model

    keras.utils.set_random_seed(0)
    model = build_model(from_dict(ModelConfig, config), 30, 30)
    model.build()
    rng = np.random.default_rng(0)
    for variable in model.weights:  # zero biases and unit norms would hide a dropped one
        variable.assign(rng.normal(0.0, 0.5, variable.shape).astype("float32"))
    path = tmp_path / f"{name}.weights.h5"
    model.save_weights(path)
    inputs = {"source": SOURCE, "target_in": COPY_TARGET_IN if model.copy else TARGET_IN}
    if model.copy:
        inputs["source_copy"] = SOURCE_COPY
    logits, weights = model(inputs, return_attention=True)
    return (path, inputs["target_in"], np.asarray(logits),
            np.asarray(weights[-1]).mean(axis=1))


def test_the_jitted_step_on_jax_gives_the_tensorflow_full_pass(tmp_path):
    expected, models = {}, {}
    for name, config in CONFIGS.items():
        path, target_in, *expected[name] = _tensorflow_full_pass(name, config, tmp_path)
        models[name] = {"config": config, "weights": str(path),
                        "target_in": target_in.tolist()}
    result = run_worker(
        "transformer_step",
        {"models": models, "source": SOURCE.tolist(), "source_copy": SOURCE_COPY.tolist()},
        XLA_FLAGS="--xla_force_host_platform_device_count=1 "
                  "--xla_backend_optimization_level=0")
    for name, (logits, attention) in expected.items():
        got = result[name]
        assert got["compiled"] == 1, name  # one program for every position
        assert float(np.abs(logits).max()) > 1.0
        np.testing.assert_allclose(np.asarray(got["logits"]), logits, rtol=1e-4, atol=1e-4,
                                   err_msg=name)
        np.testing.assert_allclose(np.asarray(got["attention"]), attention, atol=1e-5,
                                   err_msg=name)
        assert np.all(np.asarray(got["attention"])[2] == 0)  # a source of padding only
