"""The translators' registries, importable without Keras (see `common.catalog`).

Architectures (`seq2seq.models.ARCHS`) and presets (`seq2seq.presets.PRESETS`) already live in
light modules; the datasets, whose pipeline imports TensorFlow, are declared here.
"""

from __future__ import annotations

from common.registry import Registry

DATASETS = Registry("translation dataset")
for _name in ("tsv", "dates"):
    DATASETS.declare(_name, "seq2seq.datasets")
