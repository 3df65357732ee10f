"""Exporting models as SavedModels that stand on stock TensorFlow.

- `savedmodel`: atomic saving with the `assets.extra/` marker and input defaults, the kind
  check, and TensorFlow Serving's directory of versions.
- `beam_sizes`: the beam search sizes an export compiles, chosen at run time.

Serving them is `common.serving`'s job.
"""
