"""Helpers for the tests of every package (not part of the library).

- `tests.helpers.layers.run_layer_test`: checks a Keras layer from every side.
- `tests.helpers.isolated`: runs an export's signature in a process that imports TensorFlow and
  NumPy only (`run_signature_isolated`; several calls in one process:
  `run_signatures_isolated`), and TensorFlow's `saved_model_cli` (several of its commands
  after such calls, in their process: `run_signatures_and_saved_model_cli`).
- `tests.helpers.commands`: runs several command lines of a family (`python -m seq2seq ...`)
  one after the other in one child process, each with its status, its output and the folders
  it must leave alone fingerprinted before and after it (`run_commands`).
- `tests.helpers.tracing`: counts a `tf.function`'s traces and collects TensorFlow's retracing
  warnings.
- `tests.helpers.benchmarks`: finds and loads a script of `scripts/` (or of its `benchmarks/`
  and `experiments/`) and its helpers, and checks a benchmark report.
- `tests.helpers.toy_export.ToyModule`: a `DecodingModule` over a table of logits, no model: an
  export in seconds for what every export shares (its graph, its warm-up file, serving it).
"""
