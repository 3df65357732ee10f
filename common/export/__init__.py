"""Exporting models as SavedModels that stand on stock TensorFlow.

- `savedmodel`: atomic saving with the `assets.extra/` marker and input defaults, the kind
  check, and TensorFlow Serving's directory of versions.
- `beam_sizes`: the beam search sizes an export compiles, chosen at run time.
- `quantization`: int8 weights through Keras's `model.quantize` (`export --quantization int8`).

Serving them is `common.serving`'s job.
"""
