"""A decoder forced to a fixed length, for the decoding benchmarks (`benchmark_latency.py`,
`engines.py` beside this folder).

`make_decoder` decodes with `common.decoding` inside one `tf.function`, the model's step with
`<pad>` and `<end>` suppressed (their logits get -1e9), so every output is exactly `tokens` long
and a benchmark times the same work on every model and engine.

Importing this module imports neither TensorFlow nor Keras.
"""

from __future__ import annotations

START_ID, END_ID = 1, 2


def make_decoder(model, kind: str, vocab: int, method: str, beam: int, tokens: int,
                 uncached: bool):
    """A `tf.function` `(inputs) -> tokens (B, K, T)` decoding with `<end>` suppressed."""
    import tensorflow as tf

    from common.decoding import beam_search, greedy_decode

    no_end = -1e9 * tf.reduce_sum(tf.one_hot([0, END_ID], vocab), axis=0)

    def without_end(step):
        def wrapped(ids, state, index):
            logits, state, attention = step(ids, state, index)
            return tf.cast(logits, tf.float32) + no_end, state, attention

        return wrapped

    def decode(inputs):
        if kind == "captioner":
            state, step = model.initial_decoding_state(images=inputs), model.make_step()
        elif uncached:
            from _lib.translators import uncached_initial_state, uncached_step

            state, step = uncached_initial_state(model, inputs, tokens), uncached_step(model)
        elif kind == "transformer":
            state, step = model.initial_state(inputs, max_length=tokens), model.make_step()
        else:
            state, step = model.initial_state(inputs), model.make_step()
        batch = tf.shape(inputs)[0]
        common = dict(step=without_end(step), initial_state=state, batch_size=batch,
                      start_id=START_ID, end_id=END_ID, max_length=tokens)
        if method == "greedy":
            return greedy_decode(**common).tokens
        return beam_search(**common, beam_size=beam).tokens

    return tf.function(decode)
