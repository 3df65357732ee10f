"""`run_layer_test` passes a well-behaved layer and catches the faults it promises to catch."""

import keras
import numpy as np
import pytest
from keras import ops

from tests.helpers.layers import run_layer_test

PACKAGE = "tests_common_testing"


@keras.saving.register_keras_serializable(package=PACKAGE)
class ScaledSum(keras.layers.Layer):
    """Takes `(a, b)`, returns `{"sum": a * w + b, "norm": |a|}`."""

    def __init__(self, factor=1.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def build(self, a_shape, b_shape):
        self.w = self.add_weight(shape=(a_shape[-1],), initializer="ones", name="w")

    def call(self, a, b):
        return {"sum": a * self.w * self.factor + b, "norm": ops.sqrt(ops.sum(a * a, -1))}

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


@keras.saving.register_keras_serializable(package=PACKAGE)
class ForgetsItsArgument(ScaledSum):
    def get_config(self):
        config = super().get_config()
        del config["factor"]
        return config


class Unregistered(ScaledSum):
    pass


@keras.saving.register_keras_serializable(package=PACKAGE)
class HasAnUnusedWeight(ScaledSum):
    def build(self, a_shape, b_shape):
        super().build(a_shape, b_shape)
        self.unused = self.add_weight(shape=(2,), initializer="zeros", name="unused")


INPUTS = (np.ones((2, 3), "float32"), np.full((2, 3), 2.0, "float32"))


def test_passes_a_good_layer_with_tuple_inputs_and_dict_outputs():
    outputs = run_layer_test(
        ScaledSum,
        {"factor": 2.0},
        INPUTS,
        expected_output_shape={"norm": (2,), "sum": (2, 3)},
        expected_output_data={"norm": np.full(2, np.sqrt(3.0)), "sum": np.full((2, 3), 4.0)},
        expected_num_trainable_weights=1,
    )
    np.testing.assert_allclose(outputs["sum"], 4.0)


def test_catches_a_config_missing_an_init_argument():
    with pytest.raises(AssertionError, match="factor"):
        run_layer_test(ForgetsItsArgument, {"factor": 2.0}, INPUTS)


def test_catches_an_unregistered_layer():
    with pytest.raises(Exception, match="Unregistered|Could not locate"):
        run_layer_test(Unregistered, {}, INPUTS)


def test_catches_a_weight_that_training_does_not_change():
    with pytest.raises(AssertionError, match="unused"):
        run_layer_test(HasAnUnusedWeight, {}, INPUTS, run_saving_check=False)
    run_layer_test(HasAnUnusedWeight, {}, INPUTS, check_all_weights_change=False)


def test_catches_a_wrong_output_shape():
    with pytest.raises(AssertionError, match="output shapes"):
        run_layer_test(ScaledSum, {}, INPUTS, expected_output_shape=((2, 3), (2, 3)))
