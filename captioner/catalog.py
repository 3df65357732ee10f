"""The captioner's registries, importable without Keras (see `common.catalog`).

Datasets (`captioner.datasets.DATASETS`) and presets (`captioner.presets.PRESETS`) already
live in light modules; the encoders, built with Keras, are declared here.
"""

from __future__ import annotations

from common.registry import Registry

ENCODERS = Registry("encoder")
for _name in ("small-cnn", "vgg19", "resnet50", "resnet101", "inception_v3", "efficientnet_b0",
              "mobilenet_v3_small", "mobilenet_v3_large"):
    ENCODERS.declare(_name, "captioner.encoders")
