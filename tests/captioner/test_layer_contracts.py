"""Every layer and model of `captioner` passes `run_layer_test`: config and serialization round
trips, symbolic and eager shapes, a training step, a `.keras` save and reload, mixed precision.

Encoders use `weights="none"`, so nothing is downloaded. `test_every_layer_class_is_checked`
walks the package's modules, so a new layer that is not added here fails it.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

import captioner
from captioner.config import DecoderConfig, EncoderConfig
from captioner.decoder import ShowAttendTellDecoder
from captioner.encoders import ImageEncoder
from captioner.model import MovingAverage, ShowAttendTell
from captioner.scst import SelfCriticalCaptioner
from tests.helpers.layers import (
    check_config_round_trip,
    check_serialization_round_trip,
    layer_classes,
    run_layer_test,
)

B, T, L, D, V = 2, 4, 6, 5, 11
RNG = np.random.default_rng(0)
IMAGES = RNG.uniform(0, 255, (B, 16, 16, 3)).astype("float32")
ANNOTATIONS = RNG.normal(size=(B, L, D)).astype("float32")
CAPTION_IN = np.array([[1, 4, 5, 6], [1, 7, 0, 0]], np.int32)
DECODER = {"vocab_size": V, "embedding_dim": 6, "units": 8, "attention_units": 6,
           "dropout": 0.0, "num_regions": L}
SOFT = {"logits": (B, T, V), "alpha": (B, T, L)}
HARD = dict(SOFT, log_prob=(B, T), entropy=(B, T), sampled=(B,))
ENCODER = EncoderConfig("small-cnn", (16, 16), "none", filters=(4, 8))

CASES = {
    "encoder-small-cnn": (ImageEncoder, {"encoder": "small-cnn", "image_size": (16, 16),
                                         "weights": "none", "filters": (4, 8)},
                          IMAGES, (B, 16, 8), {}),
    "encoder-context-coordinates": (
        ImageEncoder, {"encoder": "small-cnn", "image_size": (16, 16), "weights": "none",
                       "filters": (4,), "context_convs": 1, "coordinates": True},
        IMAGES, (B, 64, 6), {}),
    "decoder-soft": (ShowAttendTellDecoder, DECODER, (ANNOTATIONS, CAPTION_IN), SOFT, {}),
    "decoder-soft-general-word-query": (
        ShowAttendTellDecoder, dict(DECODER, score="general", query="hidden+word"),
        (ANNOTATIONS, CAPTION_IN), SOFT, {}),
    # Hard attention samples one region per step: the attention's weights get gradient only
    # through the expected context, so not every weight need move in one step.
    "decoder-hard": (ShowAttendTellDecoder, dict(DECODER, attention="hard"),
                     (ANNOTATIONS, CAPTION_IN), HARD, {"check_all_weights_change": False}),
    "show-attend-tell": (
        ShowAttendTell,
        {"vocab_size": V, "encoder": ENCODER,
         "decoder": DecoderConfig(embedding_dim=6, units=8, attention_units=6, dropout=0.0)},
        ({"image": IMAGES, "caption_in": CAPTION_IN},), {"logits": (B, T, V),
                                                        "alpha": (B, T, 16)}, {}),
    # SCST's captioner: the same forward pass (its `loss_terms` is tested in test_scst.py).
    "self-critical": (
        SelfCriticalCaptioner,
        {"vocab_size": V, "encoder": ENCODER,
         "decoder": DecoderConfig(embedding_dim=6, units=8, attention_units=6, dropout=0.0),
         "scst": {"enabled": True, "samples": 2}},
        ({"image": IMAGES, "caption_in": CAPTION_IN},), {"logits": (B, T, V),
                                                        "alpha": (B, T, 16)}, {}),
}


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_layer_contract(case):
    cls, init_kwargs, inputs, shape, options = CASES[case]
    run_layer_test(cls, init_kwargs, inputs, expected_output_shape=shape, atol=1e-5,
                   rtol=1e-5, **options)


def test_moving_average_contract():
    """`MovingAverage` has no `call` (the model updates it), so it gets the config and
    serialization checks of `run_layer_test`, and its update against the formula."""
    check_config_round_trip(MovingAverage, {"decay": 0.8})
    check_serialization_round_trip(MovingAverage(0.8))
    average, expected = MovingAverage(0.8), None
    for x in (-3.0, 1.0, 2.5):
        average.update(x)
        expected = x if expected is None else 0.8 * expected + 0.2 * x
        np.testing.assert_allclose(float(average.value), expected, rtol=1e-6)


def test_every_layer_class_is_checked():
    checked = {cls for cls, *_ in CASES.values()} | {MovingAverage}
    missing = sorted(cls.__name__ for cls in layer_classes(captioner) - checked)
    assert not missing, f"layers without a run_layer_test case: {missing}"
