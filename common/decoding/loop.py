"""The decoding loops' `while_loop`: `keras.ops.while_loop`, with TensorFlow's shape
invariants where that backend needs them.

A search's loop variables keep their shapes from one step to the next, but on TensorFlow a
step may know less of a shape than the first step, run outside the loop, did (a leading
dimension computed from a tensor, a reshape by `-1`), and a step's state may grow (the
Transformer's growing self-attention cache, `seq2seq.transformer_layers`): `tf.while_loop`
then refuses the loop unless told that the dimensions may vary. That is all this adds; on JAX
(and every other backend) it is `keras.ops.while_loop`, under `jax.jit` too, where shapes
are fixed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
from keras import ops


def while_loop(cond: Callable[..., Any], body: Callable[..., tuple], loop_vars: tuple) -> tuple:
    """`keras.ops.while_loop(cond, body, loop_vars)` over a tuple of loop variables (tensor
    nests); on TensorFlow every dimension of a variable may change but the last of a matrix
    or higher (which stays known: an attention's width, a head's size, read after the
    loop)."""
    if keras.backend.backend() != "tensorflow":
        return tuple(ops.while_loop(cond, body, loop_vars))
    import tensorflow as tf

    def invariant(x):
        if not x.shape.rank:
            return x.shape
        if x.shape.rank == 1:
            return tf.TensorShape([None])
        return tf.TensorShape([None] * (x.shape.rank - 1)).concatenate(x.shape[-1:])

    loop_vars = tf.nest.map_structure(tf.convert_to_tensor, loop_vars)
    return tuple(tf.while_loop(cond, lambda *args: tuple(body(*args)), loop_vars,
                               shape_invariants=tf.nest.map_structure(invariant, loop_vars)))
