"""Checkpoint averaging against a NumPy mean of the saved variables."""

import keras
import numpy as np
import pytest

from common.errors import UserError
from common.training.checkpoints import (
    average_checkpoints,
    restore_model,
    write_model_checkpoint,
)


def _model(units=3):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(units),
                              keras.layers.Dropout(0.5, seed=7), keras.layers.Dense(2)])
    return model


def _save_versions(model, tmp_path, count=3):
    """`count` checkpoints of random weights; returns their paths and the saved values."""
    rng = np.random.default_rng(0)
    paths, saved = [], []
    for i in range(count):
        values = [rng.normal(size=v.shape).astype(np.float32) if v.dtype == "float32"
                  else np.full(v.shape, 10 * (i + 1), np.dtype(v.dtype)) for v in model.variables]
        for variable, value in zip(model.variables, values, strict=True):
            variable.assign(value)
        paths.append(write_model_checkpoint(model, tmp_path / f"ckpt-{i + 1}"))
        saved.append(values)
    return paths, saved


def test_average_is_the_numpy_mean_of_each_float_variable(tmp_path):
    model = _model()
    paths, saved = _save_versions(model, tmp_path)
    assert any(v.dtype != "float32" for v in model.variables)  # the dropout's seed state

    read = average_checkpoints(model, paths[1:])  # the last two
    assert read == paths[1:]
    for i, variable in enumerate(model.variables):
        got = keras.ops.convert_to_numpy(variable.value)
        if variable.dtype == "float32":
            np.testing.assert_allclose(got, (saved[1][i] + saved[2][i]) / 2, rtol=1e-6)
        else:  # integers come from the first checkpoint listed
            np.testing.assert_array_equal(got, saved[1][i])


def test_averaged_weights_round_trip_through_a_model_checkpoint(tmp_path):
    model = _model()
    paths, saved = _save_versions(model, tmp_path)
    average_checkpoints(model, paths)
    out = write_model_checkpoint(model, tmp_path / "averaged" / "ckpt-1")
    fresh = _model()
    restore_model(fresh, out)
    for a, b in zip(model.variables, fresh.variables, strict=True):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a.value),
                                      keras.ops.convert_to_numpy(b.value))
    first = keras.ops.convert_to_numpy(fresh.variables[0].value)
    np.testing.assert_allclose(first, np.mean([s[0] for s in saved], axis=0), rtol=1e-6)


def test_averaging_nothing_or_another_architecture_is_a_user_error(tmp_path):
    model = _model()
    paths, _ = _save_versions(model, tmp_path, count=1)
    with pytest.raises(UserError, match="nothing to average"):
        average_checkpoints(model, [])
    with pytest.raises(UserError, match="does not match"):
        average_checkpoints(_model(units=5), paths)
