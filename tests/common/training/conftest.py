"""A tiny linear-regression model implementing `loss_terms`, and its deterministic data.

`mirrored_check.py` loads this file by path, so it must not depend on pytest fixtures only.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

FEATURES = 3
OUTPUTS = 2
EXAMPLES = 32


@keras.saving.register_keras_serializable(package="tests")
class TinyRegressor(keras.Model):
    """y = x W + b with squared error summed over outputs, mean over examples.

    `loss_terms` also reports `abs_error` (summed absolute error) and, when `dropout` > 0,
    uses dropout so that resumed runs must restore the random state. `baseline` is a
    non-trainable `tf.Variable` updated by hand, like a REINFORCE baseline.
    """

    def __init__(self, dropout: float = 0.0, poison_step: int = -1, **kwargs):
        super().__init__(**kwargs)
        self.dropout = dropout
        self.poison_step = poison_step
        self.dense = keras.layers.Dense(OUTPUTS, name="dense")
        self.drop = keras.layers.Dropout(dropout, seed=7, name="drop")
        self.baseline = tf.Variable(0.0, trainable=False, name="baseline")
        self.calls = tf.Variable(0, trainable=False, dtype=tf.int64, name="calls")

    def call(self, x, training=False):
        return self.dense(self.drop(x, training=training))

    def loss_terms(self, batch, training):
        x, y = batch
        error = keras.ops.cast(self(x, training=training), "float32") - y
        loss_sum = keras.ops.sum(keras.ops.square(error))
        if training and self.poison_step >= 0:
            # Count training calls; from `poison_step` on the loss is NaN.
            self.calls.assign_add(1)
            loss_sum = tf.where(self.calls > self.poison_step, np.nan, 1.0) * loss_sum
        return {
            "loss_sum": loss_sum,
            "count": keras.ops.cast(keras.ops.shape(x)[0], "float32"),
            "abs_error": keras.ops.sum(keras.ops.abs(error)),
        }

    def get_config(self):
        return {**super().get_config(), "dropout": self.dropout, "poison_step": self.poison_step}


def regression_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(EXAMPLES, FEATURES)).astype("float32")
    w = rng.normal(size=(FEATURES, OUTPUTS)).astype("float32")
    y = (x @ w + 0.5 + 0.01 * rng.normal(size=(EXAMPLES, OUTPUTS))).astype("float32")
    return x, y


def dataset_maker(batch_size: int, seed: int = 0, shuffle: bool = True):
    """`make_dataset(epoch, input_context)` over `regression_data`, shuffled by `seed + epoch`."""
    x, y = regression_data()

    def make_dataset(epoch, context):
        dataset = tf.data.Dataset.from_tensor_slices((x, y))
        if context.num_input_pipelines > 1:
            dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        if shuffle:
            dataset = dataset.shuffle(EXAMPLES, seed=seed + epoch)
        return dataset.batch(context.get_per_replica_batch_size(batch_size))

    return make_dataset


@pytest.fixture
def run_dir(tmp_path):
    return tmp_path / "run"
