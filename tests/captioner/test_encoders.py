"""Encoders: annotation shapes and grids, preprocessing, frozen vs fine-tuned weights."""

import numpy as np
import pytest

from captioner.config import EncoderConfig
from captioner.encoders import ENCODERS, ImageEncoder, build_encoder, preprocess
from common.registry import UnknownNameError


def test_registry_holds_every_required_encoder():
    expected = {"small-cnn", "vgg19", "resnet50", "resnet101", "inception_v3",
                "efficientnet_b0", "mobilenet_v3_small", "mobilenet_v3_large"}
    assert expected <= set(ENCODERS.names())


def test_unknown_encoder_names_the_choices():
    with pytest.raises(UnknownNameError, match="small-cnn"):
        build_encoder(EncoderConfig(name="alexnet", weights="none"))


def test_small_cnn_gives_one_annotation_per_grid_cell():
    encoder = ImageEncoder("small-cnn", image_size=(32, 48), weights="none", filters=(4, 8, 12))
    images = np.random.default_rng(0).uniform(0, 255, (2, 32, 48, 3)).astype("float32")
    annotations = np.asarray(encoder(images))
    assert encoder.grid_shape == (4, 6)
    assert annotations.shape == (2, 24, 12)
    # Region l is grid cell (l // w, l % w) of the backbone's feature map.
    feature_map = np.asarray(encoder.backbone(images / 255.0, training=False))
    np.testing.assert_allclose(annotations.reshape(2, 4, 6, 12), feature_map, rtol=1e-5,
                               atol=1e-5)


def test_small_cnn_is_trained_from_scratch():
    encoder = ImageEncoder("small-cnn", image_size=(16, 16), weights="none", filters=(4,))
    assert encoder.trainable_weights and not encoder.frozen


@pytest.mark.parametrize("name, size, grid, depth", [
    ("mobilenet_v3_small", 64, (2, 2), 576),
    ("efficientnet_b0", 64, (2, 2), 1280),
])
def test_application_encoder_shapes(name, size, grid, depth):
    encoder = ImageEncoder(name, image_size=(size, size), weights="none")
    out = encoder(np.zeros((1, size, size, 3), "float32"))
    assert encoder.grid_shape == grid
    assert tuple(out.shape) == (1, grid[0] * grid[1], depth)


@pytest.mark.slow
@pytest.mark.parametrize("name, size, grid, depth", [
    ("vgg19", 64, (4, 4), 512),       # block5_conv4: 14 x 14 at 224
    ("resnet50", 64, (2, 2), 2048),
])
def test_heavy_application_encoder_shapes(name, size, grid, depth):
    encoder = ImageEncoder(name, image_size=(size, size), weights="none")
    out = encoder(np.zeros((1, size, size, 3), "float32"))
    assert encoder.grid_shape == grid
    assert tuple(out.shape) == (1, grid[0] * grid[1], depth)


def test_pretrained_backbones_are_frozen_by_default_and_fine_tune_the_top_layers():
    frozen = ImageEncoder("mobilenet_v3_small", image_size=(32, 32), weights="none")
    assert frozen.frozen and not frozen.trainable_weights
    tuned = ImageEncoder("mobilenet_v3_small", image_size=(32, 32), weights="none",
                         fine_tune=3)
    weighted = [layer for layer in tuned.backbone.layers if layer.weights]
    top = weighted[-3:]
    expected = sum(len(layer.trainable_weights) for layer in top
                   if type(layer).__name__ != "BatchNormalization")
    assert 0 < len(tuned.trainable_weights) == expected
    names = {id(v) for v in tuned.trainable_weights}
    assert not any(id(v) in names for layer in weighted[:-3] for v in layer.weights)


def test_preprocessing_matches_the_keras_formulas():
    rng = np.random.default_rng(1)
    images = rng.uniform(0, 255, (2, 3, 3, 3)).astype("float32")
    caffe = images[..., ::-1] - np.array([103.939, 116.779, 123.68], "float32")
    np.testing.assert_allclose(preprocess(images, "caffe"), caffe, rtol=1e-6, atol=1e-4)
    np.testing.assert_allclose(preprocess(images, "tf"), images / 127.5 - 1, atol=1e-6)
    np.testing.assert_allclose(preprocess(images, "unit"), images / 255, atol=1e-6)


def test_encoder_config_round_trip():
    encoder = ImageEncoder("small-cnn", image_size=(16, 16), weights="none", filters=(4, 8))
    clone = ImageEncoder.from_config(encoder.get_config())
    assert clone.grid_shape == encoder.grid_shape == (4, 4)
    assert clone.get_config() == encoder.get_config()


def test_coordinates_append_each_regions_row_and_column():
    encoder = ImageEncoder("small-cnn", image_size=(16, 32), weights="none", filters=(4, 5),
                           coordinates=True)
    annotations = np.asarray(encoder(np.zeros((2, 16, 32, 3), "float32")))
    assert encoder.grid_shape == (4, 8) and encoder.feature_dim == 7
    assert annotations.shape == (2, 32, 7)
    rows, cols = np.meshgrid(np.linspace(-1, 1, 4), np.linspace(-1, 1, 8), indexing="ij")
    expected = np.stack([rows.ravel(), cols.ravel()], axis=-1)
    np.testing.assert_allclose(annotations[1, :, -2:], expected, atol=1e-6)
