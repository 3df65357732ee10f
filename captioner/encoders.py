"""Image encoders: raw 0–255 images in, annotation vectors `(B, L, D)` out.

Show, Attend and Tell (Xu et al. 2015, https://arxiv.org/abs/1502.03044) attends over the
`L = h × w` positions of a convolutional feature map; each position's `D` channels are one
annotation vector. The grid shape `(h, w)` is kept on the encoder for attention overlays.

Shapes: `B` batch, `H×W` image size, `L = h·w` regions, `D` features.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import keras
from keras import layers, ops

from captioner.catalog import ENCODERS  # noqa: F401  (declared there, registered here)
from captioner.config import EncoderConfig
from common.config import to_dict
from common.errors import UserError


class _Backbone:
    """A registry entry: how to build a feature extractor and how to preprocess its input;
    `pretrained`: it can load ImageNet weights (`weights="imagenet"`); `min_side`: the
    smallest image side it takes (Keras applications' own minimum: 32, InceptionV3's 75), or
    a function of the config that says it."""

    def __init__(self, build: Callable[[EncoderConfig], keras.Model], preprocessing: str,
                 pretrained: bool = True,
                 min_side: int | Callable[[EncoderConfig], int] = 32):
        self.build = build
        self.preprocessing = preprocessing
        self.pretrained = pretrained
        self._min_side = min_side

    def min_side(self, config: EncoderConfig) -> int:
        return self._min_side(config) if callable(self._min_side) else self._min_side


def keras_models_dir() -> Path:
    """Where Keras looks for (and downloads) pretrained weights: `$KERAS_HOME/models`, else
    `~/.keras/models` (`/tmp/.keras/models` when the home directory is not writable)."""
    if "KERAS_HOME" in os.environ:
        home = Path(os.environ["KERAS_HOME"]).expanduser()
    else:
        base = Path("~").expanduser()
        home = (base if os.access(base, os.W_OK) else Path("/tmp")) / ".keras"
    if not os.access(home, os.W_OK):  # what `keras.utils.get_file` falls back to
        home = Path("/tmp/.keras")
    return home / "models"


_FETCH_FAILURE = re.compile(r"^URL fetch failure on (\S+?): (.*)$", re.DOTALL)


def _application(constructor_name: str, feature_layer: str | None = None, **kwargs):
    def build(config: EncoderConfig) -> keras.Model:
        constructor = getattr(keras.applications, constructor_name)
        weights = None if config.weights == "none" else config.weights
        try:
            base = constructor(include_top=False, weights=weights,
                               input_shape=(*config.image_size, 3), **kwargs)
        except Exception as exc:  # `keras.utils.get_file` raises a bare Exception offline
            failure = _FETCH_FAILURE.match(str(exc)) if weights == "imagenet" else None
            if failure is None:
                raise
            url, reason = failure.groups()
            reason = " ".join(reason.split(" -- ", 1)[-1].split())  # "None -- [Errno -2] ..."
            file = url.rsplit("/", 1)[-1]
            raise UserError(
                f"could not fetch the ImageNet weights of {config.name} from {url} "
                f"({reason}); Keras looks for {file} in {keras_models_dir()} "
                "(set KERAS_HOME to look elsewhere): place the file there, or train from "
                "scratch with --weights none") from None
        if feature_layer is None:
            return base
        return keras.Model(base.input, base.get_layer(feature_layer).output, name=base.name)

    return build


def _small_cnn(config: EncoderConfig) -> keras.Model:
    # Batch statistics over the global batch under tf.distribute (a mirrored step then equals
    # one device); only the TensorFlow backend has it, and other backends train on one device.
    synchronized = keras.backend.backend() == "tensorflow"
    inputs = keras.Input((*config.image_size, 3))
    x = inputs
    for i, filters in enumerate(config.filters):
        x = layers.Conv2D(filters, 3, padding="same", name=f"conv{i + 1}")(x)
        x = layers.BatchNormalization(synchronized=synchronized, name=f"bn{i + 1}")(x)
        x = layers.Activation("relu", name=f"relu{i + 1}")(x)
        x = layers.MaxPooling2D(2, name=f"pool{i + 1}")(x)
    for i in range(config.context_convs):
        x = layers.Conv2D(config.filters[-1], 3, padding="same", name=f"context{i + 1}")(x)
        x = layers.BatchNormalization(synchronized=synchronized,
                                      name=f"context_bn{i + 1}")(x)
        x = layers.Activation("relu", name=f"context_relu{i + 1}")(x)
    return keras.Model(inputs, x, name="small_cnn")


# Each pooling halves the grid: at least one position must be left.
ENCODERS.add("small-cnn", _Backbone(_small_cnn, "unit", pretrained=False,
                                    min_side=lambda config: 2 ** len(config.filters)))
ENCODERS.add("vgg19", _Backbone(_application("VGG19", "block5_conv4"), "caffe"))
ENCODERS.add("resnet50", _Backbone(_application("ResNet50"), "caffe"))
ENCODERS.add("resnet101", _Backbone(_application("ResNet101"), "caffe"))
ENCODERS.add("inception_v3", _Backbone(_application("InceptionV3"), "tf", min_side=75))
# EfficientNet and MobileNetV3 rescale 0–255 inputs inside the model.
ENCODERS.add("efficientnet_b0", _Backbone(_application("EfficientNetB0"), "none"))
ENCODERS.add("mobilenet_v3_small", _Backbone(_application("MobileNetV3Small"), "none"))
ENCODERS.add("mobilenet_v3_large", _Backbone(_application("MobileNetV3Large"), "none"))

_CAFFE_MEAN_BGR = (103.939, 116.779, 123.68)


def preprocess(images, mode: str):
    """Map raw RGB images in [0, 255] `(B, H, W, 3)` to what a backbone expects.

    `caffe`: BGR minus the ImageNet mean; `tf`: [-1, 1]; `unit`: [0, 1]; `none`: unchanged.
    """
    images = ops.cast(images, "float32")
    if mode == "caffe":
        return ops.flip(images, axis=-1) - ops.convert_to_tensor(_CAFFE_MEAN_BGR, "float32")
    if mode == "tf":
        return images / 127.5 - 1.0
    if mode == "unit":
        return images / 255.0
    return images


@keras.saving.register_keras_serializable(package="captioner")
class ImageEncoder(keras.layers.Layer):
    """A convolutional backbone whose feature map is flattened into annotation vectors.

    Paper: Xu et al. 2015, "Show, Attend and Tell", section 3.1.1 (the encoder).

    Args:
        encoder: the encoder registry name (`small-cnn`, `vgg19`, `resnet50`, ...).
        image_size: `(H, W)` of the input images.
        weights: `"imagenet"` or `"none"`.
        fine_tune: number of top weighted layers of the backbone left trainable (0 = frozen;
            `small-cnn`, trained from scratch, is always trainable). Batch normalization
            layers stay frozen when fine-tuning a pretrained backbone.
        filters: `small-cnn` conv widths.
        context_convs: `small-cnn` 3x3 convs after the last pooling.
        coordinates: append each region's (row, column) in [-1, 1] to its annotation.

    Call arguments:
        images: `(B, H, W, 3)` raw RGB values in [0, 255].
        training: passed to the backbone (batch normalization / dropout).

    Returns:
        annotations: `(B, L, D)` with `L = h·w` (`self.grid_shape == (h, w)`).

    Example:
    >>> encoder = ImageEncoder("small-cnn", image_size=(32, 32), weights="none")
    >>> encoder(np.zeros((2, 32, 32, 3))).shape
    TensorShape([2, 16, 128])
    """

    def __init__(
        self,
        encoder: str = "small-cnn",
        image_size: tuple[int, int] = (224, 224),
        weights: str = "imagenet",
        fine_tune: int = 0,
        filters: tuple[int, ...] = (32, 64, 128),
        context_convs: int = 0,
        coordinates: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.image_size = tuple(image_size)
        self.weights_name = weights
        self.fine_tune = int(fine_tune)
        self.filters = tuple(filters)
        self.context_convs = int(context_convs)
        self.coordinates = bool(coordinates)
        entry = ENCODERS.get(encoder)
        self.preprocessing = entry.preprocessing
        config = EncoderConfig(encoder, self.image_size, weights, self.fine_tune, self.filters,
                               self.context_convs, self.coordinates)
        self.encoder_config = config
        self.backbone = entry.build(config)
        _set_trainable(self.backbone, encoder == "small-cnn", self.fine_tune)
        h, w, d = self.backbone.output.shape[1:]
        self.grid_shape = (int(h), int(w))
        self.feature_dim = int(d) + (2 if self.coordinates else 0)
        self.built = True

    @classmethod
    def from_config_object(cls, config: EncoderConfig, **kwargs) -> ImageEncoder:
        return cls(config.name, config.image_size, config.weights, config.fine_tune,
                   config.filters, config.context_convs, config.coordinates, **kwargs)

    @property
    def num_regions(self) -> int:
        return self.grid_shape[0] * self.grid_shape[1]

    @property
    def frozen(self) -> bool:
        return not self.backbone.trainable_weights

    def call(self, images, training=None):
        x = preprocess(images, self.preprocessing)
        # A frozen backbone runs in inference mode (batch-norm statistics fixed).
        features = self.backbone(x, training=training if not self.frozen else False)
        h, w = self.grid_shape
        features = ops.reshape(features, (-1, self.num_regions, features.shape[-1]))
        if self.coordinates:
            rows, cols = ops.meshgrid(ops.linspace(-1.0, 1.0, h), ops.linspace(-1.0, 1.0, w),
                                      indexing="ij")
            grid = ops.reshape(ops.stack([rows, cols], axis=-1), (1, h * w, 2))
            grid = ops.tile(ops.cast(grid, features.dtype), (ops.shape(features)[0], 1, 1))
            features = ops.concatenate([features, grid], axis=-1)
        return features

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_regions, self.feature_dim)

    def get_config(self):
        config = super().get_config()
        fields = to_dict(self.encoder_config)
        fields["encoder"] = fields.pop("name")  # `name` is the layer's own
        config.update(fields)
        return config


def _set_trainable(backbone: keras.Model, from_scratch: bool, fine_tune: int) -> None:
    if from_scratch:
        backbone.trainable = True
        return
    backbone.trainable = fine_tune > 0
    if fine_tune == 0:
        return
    weighted = [layer for layer in backbone.layers if layer.weights]
    top = set(id(layer) for layer in weighted[-fine_tune:])
    for layer in backbone.layers:
        layer.trainable = id(layer) in top and not isinstance(
            layer, layers.BatchNormalization
        )


def fetch_pretrained_weights(config: EncoderConfig) -> None:
    """Make sure the pretrained weights `config` asks for are on this machine.

    Builds the backbone once, which downloads its weights into the Keras cache or finds them
    there, so that training can fail before it loads any data when they cannot be had.

    Raises:
        UserError: the weights could not be fetched (offline): the message names the file,
            the folder Keras looks in, and `--weights none`.
    """
    entry = ENCODERS.get(config.name)
    if entry.pretrained and config.weights != "none":
        entry.build(config)


def build_encoder(config: EncoderConfig, **kwargs) -> ImageEncoder:
    """The `ImageEncoder` a config describes (raises `UnknownNameError` for a wrong name)."""
    return ImageEncoder.from_config_object(config, **kwargs)
