"""One helper that checks a Keras layer from every side, for the tests of every package.

In the spirit of keras-hub's `TestCase.run_layer_test`, but a plain function that works in any
pytest test:

>>> from tests.helpers.layers import run_layer_test
>>> run_layer_test(
...     Attention,
...     {"score": "additive", "units": 8},
...     {"query": np.ones((2, 3, 4)), "value": np.ones((2, 5, 6))},
...     expected_output_shape=((2, 3, 6), (2, 3, 5)),
... )

How `input_data` is passed to the layer:
- a dict: as keyword arguments, `layer(**input_data)`;
- a tuple: as positional arguments, `layer(*input_data)`;
- anything else (an array, a list of arrays): as the single first argument, `layer(input_data)`.
Leaves are NumPy arrays or tensors; non-tensor call arguments (`use_causal_mask=True`,
`sample=True`) go in `call_kwargs`.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import tempfile
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
from keras import ops, tree


def _to_numpy(structure):
    return tree.map_structure(lambda x: np.asarray(ops.convert_to_numpy(x)), structure)


def _call(layer: Callable, inputs, call_kwargs: dict):
    if isinstance(inputs, dict):
        return layer(**inputs, **call_kwargs)
    if isinstance(inputs, tuple):
        return layer(*inputs, **call_kwargs)
    return layer(inputs, **call_kwargs)


def _is_shape(x) -> bool:
    return isinstance(x, (tuple, list)) and all(d is None or isinstance(d, int) for d in x)


def _flatten_shapes(shapes) -> list[tuple]:
    """Flattens a nest of shapes (a shape is a tuple of ints / None) into a list of tuples."""
    if _is_shape(shapes):
        return [tuple(shapes)]
    if isinstance(shapes, dict):
        return [s for key in sorted(shapes) for s in _flatten_shapes(shapes[key])]
    if isinstance(shapes, (tuple, list)):
        return [s for item in shapes for s in _flatten_shapes(item)]
    raise TypeError(f"expected a shape or a nest of shapes, got {shapes!r}")


def _output_shapes(outputs) -> list[tuple]:
    return [tuple(x.shape) for x in tree.flatten(outputs)]


def _shapes_compatible(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is None or y is None or x == y for x, y in zip(a, b))


def _is_float(x) -> bool:
    return "float" in keras.backend.standardize_dtype(x.dtype)


def check_config_round_trip(layer_cls: type, init_kwargs: dict) -> None:
    """`get_config` repeats every `__init__` argument, and `from_config` rebuilds the layer."""
    layer = layer_cls(**init_kwargs)
    config = layer.get_config()
    for name, parameter in inspect.signature(layer_cls.__init__).parameters.items():
        if name == "self" or parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
            continue
        assert name in config, f"{layer_cls.__name__}.get_config() lacks __init__ arg {name!r}"
    for name in init_kwargs:
        assert name in config, f"{layer_cls.__name__}.get_config() lacks init kwarg {name!r}"
    revived = layer_cls.from_config(config)
    assert revived.get_config() == config, "from_config(get_config()) changed the config"


def check_serialization_round_trip(layer: keras.layers.Layer) -> None:
    """The layer serializes to JSON and deserializes, by its registered name, to the same."""
    serialized = keras.saving.serialize_keras_object(layer)
    json.dumps(serialized)
    revived = keras.saving.deserialize_keras_object(json.loads(json.dumps(serialized)))
    assert type(revived) is type(layer), f"deserialized as {type(revived).__name__}"
    assert revived.get_config() == layer.get_config(), "serialization changed the config"


def _input(x, name=None):
    return keras.Input(
        batch_shape=x.shape, dtype=keras.backend.standardize_dtype(x.dtype), name=name
    )


def _functional_model(layer_cls, init_kwargs, input_data, call_kwargs):
    if isinstance(input_data, dict):
        inputs = {
            k: tree.map_structure(lambda x, k=k: _input(x, k), v) for k, v in input_data.items()
        }
    else:
        inputs = tree.map_structure(_input, input_data)
    outputs = _call(layer_cls(**init_kwargs), inputs, call_kwargs)
    model_inputs = list(inputs) if isinstance(inputs, tuple) else inputs
    return keras.Model(model_inputs, outputs), model_inputs, outputs


def _model_x(input_data):
    return list(input_data) if isinstance(input_data, tuple) else input_data


def check_training_step(
    layer_cls: type,
    init_kwargs: dict,
    input_data,
    call_kwargs: dict,
    check_all_weights_change: bool = True,
) -> None:
    """One `fit` step on a small functional model around the layer changes its weights.

    The float outputs are flattened and concatenated into one `(B, N)` output regressed with
    MSE onto fixed random targets, with Adam (so that every weight with a non-zero gradient
    moves). Layers without trainable weights are run through `predict` (graph mode) instead.
    """
    model, model_inputs, outputs = _functional_model(
        layer_cls, init_kwargs, input_data, call_kwargs
    )
    float_outputs = [o for o in tree.flatten(outputs) if _is_float(o) and len(o.shape) >= 1]
    assert float_outputs, "the layer has no float output to train on"
    flat = []
    for o in float_outputs:
        o = keras.layers.Reshape((1,))(o) if len(o.shape) == 1 else o
        flat.append(keras.layers.Flatten()(o) if len(o.shape) > 2 else o)
    joined = flat[0] if len(flat) == 1 else keras.layers.Concatenate()(flat)
    train_model = keras.Model(model_inputs, joined)
    x = _model_x(input_data)
    batch_size = int(tree.flatten(input_data)[0].shape[0])
    if not train_model.trainable_weights:
        train_model.predict(x, batch_size=batch_size, verbose=0)
        return
    before = [np.array(ops.convert_to_numpy(w)) for w in train_model.trainable_weights]
    target = np.random.default_rng(0).normal(size=tuple(joined.shape)).astype("float32")
    train_model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=1e-2), loss="mse", jit_compile=False
    )
    train_model.fit(x, target, batch_size=batch_size, epochs=1, verbose=0)
    after = [np.array(ops.convert_to_numpy(w)) for w in train_model.trainable_weights]
    changed = [not np.array_equal(b, a) for b, a in zip(before, after)]
    names = [w.path for w in train_model.trainable_weights]
    if check_all_weights_change:
        unchanged = [n for n, c in zip(names, changed) if not c]
        assert not unchanged, f"weights not changed by a training step: {unchanged}"
    else:
        assert any(changed), "no weight changed in a training step"


def check_saving(
    layer_cls: type,
    init_kwargs: dict,
    input_data,
    call_kwargs: dict,
    atol: float = 1e-6,
    rtol: float = 1e-6,
) -> None:
    """A functional model around the layer, saved as `.keras` and reloaded with
    `safe_mode=True` (no custom objects: the layer must be registered), gives the same outputs
    in inference mode."""
    model, _, _ = _functional_model(layer_cls, init_kwargs, input_data, call_kwargs)
    x = _model_x(input_data)
    expected = _to_numpy(model(x, training=False))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        restored = keras.saving.load_model(path, safe_mode=True)
    actual = _to_numpy(restored(x, training=False))
    for e, a in zip(tree.flatten(expected), tree.flatten(actual)):
        np.testing.assert_allclose(a, e, atol=atol, rtol=rtol, err_msg="reloaded model differs")


def run_layer_test(
    layer_cls: type,
    init_kwargs: dict,
    input_data: Any,
    expected_output_shape: Any = None,
    *,
    call_kwargs: dict | None = None,
    expected_output_data: Any = None,
    expected_num_trainable_weights: int | None = None,
    run_training_check: bool = True,
    run_saving_check: bool = True,
    run_mixed_precision_check: bool = True,
    check_all_weights_change: bool = True,
    atol: float = 1e-6,
    rtol: float = 1e-6,
):
    """Checks a layer from every side; returns its eager outputs for further assertions.

    1. Config round trip: `get_config` holds every `__init__` argument and `from_config`
       rebuilds an equal config.
    2. Serialization round trip through JSON with `serialize_keras_object` /
       `deserialize_keras_object`, by the layer's registered name.
    3. A symbolic call (on `keras.KerasTensor`s) and an eager call give compatible output
       shapes, equal to `expected_output_shape` when given (a nest of shape tuples matching the
       outputs, e.g. `((2, 3, 6), (2, 3, 5))`); the eager outputs equal
       `expected_output_data` when given.
    4. (`run_training_check`) one `fit` step in a functional model changes the weights.
    5. (`run_saving_check`) a `.keras` save and `load_model(safe_mode=True)` reload gives the
       same outputs (`training=False`).
    6. (`run_mixed_precision_check`, unless `init_kwargs` sets `dtype`) under
       `mixed_float16` the weights stay float32 and the float outputs are finite.

    Args:
        layer_cls: the layer class.
        init_kwargs: keyword arguments of `layer_cls(...)`.
        input_data: the call's inputs (see the module docstring for dict / tuple / other).
        expected_output_shape: a nest of shape tuples, or None to skip.
        call_kwargs: non-tensor keyword arguments for every call.
        expected_output_data: a nest of arrays to compare with the eager outputs.
        expected_num_trainable_weights: the number of trainable weights after the call.
        run_training_check: run step 4.
        run_saving_check: run step 5.
        run_mixed_precision_check: run step 6.
        check_all_weights_change: in step 4 require every trainable weight to change (else at
            least one).
        atol: absolute tolerance of the output comparisons.
        rtol: relative tolerance of the output comparisons.

    Returns:
        The eager outputs of the layer on `input_data`.
    """
    call_kwargs = dict(call_kwargs or {})
    input_data = _to_numpy(input_data)

    check_config_round_trip(layer_cls, init_kwargs)
    check_serialization_round_trip(layer_cls(**init_kwargs))

    symbolic_inputs = tree.map_structure(
        lambda x: keras.KerasTensor(x.shape, dtype=keras.backend.standardize_dtype(x.dtype)),
        input_data,
    )
    symbolic_outputs = _call(layer_cls(**init_kwargs), symbolic_inputs, call_kwargs)
    symbolic_shapes = _output_shapes(symbolic_outputs)

    layer = layer_cls(**init_kwargs)
    outputs = _call(layer, input_data, call_kwargs)
    eager_shapes = _output_shapes(outputs)
    assert len(symbolic_shapes) == len(eager_shapes) and all(
        _shapes_compatible(s, e) for s, e in zip(symbolic_shapes, eager_shapes)
    ), f"symbolic output shapes {symbolic_shapes} differ from eager ones {eager_shapes}"
    if expected_output_shape is not None:
        expected = _flatten_shapes(expected_output_shape)
        assert eager_shapes == expected, f"output shapes {eager_shapes}, expected {expected}"
    if expected_output_data is not None:
        for e, a in zip(tree.flatten(expected_output_data), tree.flatten(_to_numpy(outputs))):
            np.testing.assert_allclose(a, e, atol=atol, rtol=rtol)
    if expected_num_trainable_weights is not None:
        assert len(layer.trainable_weights) == expected_num_trainable_weights, (
            f"{len(layer.trainable_weights)} trainable weights, "
            f"expected {expected_num_trainable_weights}"
        )

    if run_training_check:
        check_training_step(
            layer_cls, init_kwargs, input_data, call_kwargs, check_all_weights_change
        )
    if run_saving_check:
        check_saving(layer_cls, init_kwargs, input_data, call_kwargs, atol=atol, rtol=rtol)
    if run_mixed_precision_check and "dtype" not in init_kwargs:
        mixed = layer_cls(**init_kwargs, dtype="mixed_float16")
        mixed_outputs = _call(mixed, input_data, call_kwargs)
        for w in mixed.weights:
            if _is_float(w):
                assert keras.backend.standardize_dtype(w.dtype) == "float32", w.path
        for o in tree.flatten(mixed_outputs):
            if _is_float(o):
                assert np.all(np.isfinite(ops.convert_to_numpy(o))), "non-finite mixed output"
    return outputs


def layer_classes(package: Any) -> set[type]:
    """Every public `keras.layers.Layer` subclass defined in `package`'s modules (imports
    them all), for the tests that fail when a layer has no `run_layer_test` case."""
    found = set()
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if (issubclass(obj, keras.layers.Layer) and obj.__module__ == module.__name__
                    and not obj.__name__.startswith("_")):
                found.add(obj)
    return found
