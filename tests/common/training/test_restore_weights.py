"""`restore_model(..., weights_only=True)` (warm starts): the weights of a checkpoint into a model
whose dropout layers (so random-generator states) differ, against the saved arrays."""

import keras
import numpy as np
import pytest

from common.errors import UserError
from common.training.checkpoints import restore_model, write_model_checkpoint


def _model(rates=(0.0, 0.5), units=3):
    """Dense layers with dropouts between them: Keras keeps a generator only at a rate > 0."""
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(units),
                             keras.layers.Dropout(rates[0], seed=1), keras.layers.Dense(5),
                             keras.layers.Dropout(rates[1], seed=2), keras.layers.Dense(2)])


def _saved(model, tmp_path):
    """A checkpoint of random weights; returns its path and the weights' values."""
    rng = np.random.default_rng(0)
    for variable in model.weights:
        variable.assign(rng.normal(size=variable.shape).astype(np.float32))
    path = write_model_checkpoint(model, tmp_path / "ckpt-1")
    return path, [np.asarray(v) for v in model.weights]


@pytest.mark.parametrize("rates", [(0.3, 0.5), (0.0, 0.0), (0.2, 0.0)],
                         ids=["more-generators", "none", "others"])
def test_weights_load_into_a_model_with_other_dropout_layers(tmp_path, rates):
    path, values = _saved(_model((0.0, 0.5)), tmp_path)
    model = _model(rates)
    weights = {id(v) for v in model.weights}
    states = [np.asarray(v) for v in model.variables if id(v) not in weights]
    assert len(states) == sum(rate > 0 for rate in rates)
    assert restore_model(model, path, weights_only=True) == str(path)
    for variable, value in zip(model.weights, values, strict=True):
        np.testing.assert_array_equal(np.asarray(variable), value)
    # The model's own generators are left as they were.
    assert [np.asarray(v).tolist() for v in model.variables if id(v) not in weights] == [
        s.tolist() for s in states]
    if rates != (0.0, 0.5):  # the full restore needs the same generators
        with pytest.raises(UserError, match="does not match the model"):
            restore_model(_model(rates), path)


def test_other_weights_are_one_line_naming_the_weight(tmp_path):
    path, _ = _saved(_model(), tmp_path)
    with pytest.raises(UserError, match=r"dense_\d+/kernel is \(4, 4\) in the model, \(4, 3\) "
                                        "there"):
        restore_model(_model(units=4), path, weights_only=True)
    fewer = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    with pytest.raises(UserError, match="it holds 6 weights, the model has 2"):
        restore_model(fewer, path, weights_only=True)
