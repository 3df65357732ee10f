"""What the translator benchmarks share (`scripts/benchmarks/benchmark_training.py`,
`benchmark_latency.py`, `benchmark_decoding.py` and `profile_translator.py` beside it).

- `TRANSLATOR_SIZES`: size -> (preset or None, the Transformer's overrides, vocabulary size).
  `keras-io` is the keras-io English-Spanish example's Transformer (heads of 256, learned
  positions for 20 tokens), `base` Transformer-base (Vaswani et al. 2017); the others are
  `seq2seq.presets` presets as they are.
- `uncached_initial_state` / `uncached_step`: the Transformer decoded without its key/value
  cache (the whole decoder re-run over the tokens so far at every step), the reference the
  cached path is timed against.

Importing this module imports neither TensorFlow nor Keras, so a script's `--help` can list
the sizes.
"""

from __future__ import annotations

from typing import Any

TRANSLATOR_SIZES: dict[str, tuple[str | None, dict[str, Any], int]] = {
    "keras-io": (None, {"layers": 1, "hidden_dim": 256, "heads": 8, "head_dim": 256,
                        "intermediate_dim": 2048, "dropout": 0.5, "positions": "learned",
                        "max_length": 20}, 15000),
    "spa-eng-cpu": ("spa-eng-cpu", {}, 12000),
    "dates-demo": ("dates-demo", {}, 64),
    "base": (None, {"layers": 6, "hidden_dim": 512, "heads": 8, "intermediate_dim": 2048,
                    "dropout": 0.1, "max_length": 128}, 32000),
    "tiny": ("tiny", {}, 32),
}


def uncached_initial_state(model, source, steps: int) -> dict:
    """The state of `uncached_step`: the encoded source and a `(B, steps)` token buffer."""
    import tensorflow as tf

    memory, source_mask = model.encode(source)
    return {"memory": memory, "source_mask": tf.cast(source_mask, tf.float32),
            "tokens": tf.zeros((tf.shape(source)[0], steps), tf.int32)}


def uncached_step(model):
    """A `common.decoding` step that re-runs `model`'s whole decoder over the tokens so far
    and keeps the last position (what a Transformer without a cache does)."""
    import tensorflow as tf

    def step(tokens, state, index):
        buffer = tf.tensor_scatter_nd_update(
            tf.transpose(state["tokens"]), [[index]], tokens[None, :]
        )
        buffer = tf.transpose(buffer)
        prefix = buffer[:, : index + 1]
        source_mask = tf.cast(state["source_mask"], tf.bool)
        logits, weights = model.decode(prefix, state["memory"], source_mask)
        attention = tf.reduce_mean(weights[-1][:, :, -1], axis=1)
        return logits[:, -1], dict(state, tokens=buffer), attention

    return step
