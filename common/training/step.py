"""The distributed training step: loss terms -> global mean -> gradients -> update.

A model implements `loss_terms(batch, training) -> {"loss_sum", "count", ...}` (design.md):
scalar sums over the examples of the replica's batch. Inside each replica the step computes

    global_count = all_reduce(SUM, count)
    loss = loss_sum / global_count + sum(model.losses) / num_replicas

so that the per-replica losses add up to the mean loss over the global batch, and the
per-replica gradients add up to its gradient. Keras 3 optimizers sum the gradients across
replicas in `apply_gradients` (`TFOptimizer._all_reduce_sum_gradients`); the tests check this
against one device.

Clipping (`clip_norm`) scales every replica's gradient by `min(1, clip_norm / ||g||)` where
`g` is the cross-replica *summed* gradient, so the optimizer applies exactly the clipped global
gradient; with several replicas this costs one extra all-reduce. Under float16 loss scaling the
norm is unscaled first, and a non-finite gradient is left to the `LossScaleOptimizer` (which
skips the update and lowers the scale).

The step returns, identical on every replica, `loss`, `count` (global), `examples` (global
batch size) and every other term divided by the global count.

XLA (`jit_compile`): under the default strategy the whole step is compiled. Under a
distributing strategy (mirrored, multi-worker) XLA cannot compile the cross-device collectives
nor reach another replica's variables, so only each replica's forward and backward pass is
compiled, returning the gradient of `loss_sum` (and of `model.losses`); the all-reduces, the
division by the global count (the same gradient: it is linear) and the update run outside it.
A model whose layers all-reduce inside the forward pass (synchronized batch norm) cannot be
split so; it gets TensorFlow's XLA auto-clustering instead, which compiles what it can on
each device (on GPUs; on CPUs only with `TF_XLA_FLAGS=--tf_xla_cpu_global_jit`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

RESERVED = ("loss", "examples")


def _as_float_sums(terms: Any) -> dict[str, tf.Tensor]:
    if not isinstance(terms, dict) or "loss_sum" not in terms or "count" not in terms:
        keys = sorted(terms) if isinstance(terms, dict) else type(terms).__name__
        raise TypeError(
            f"loss_terms must return a dict with 'loss_sum' and 'count', got {keys}"
        )
    clash = [k for k in RESERVED if k in terms]
    if clash:
        raise TypeError(f"loss_terms may not return the reserved key(s) {clash}")
    sums = {}
    for key, value in terms.items():
        value = tf.cast(value, tf.float32)
        if value.shape.rank not in (0, None):
            raise TypeError(f"loss_terms[{key!r}] must be a scalar, got shape {value.shape}")
        sums[key] = tf.reshape(value, [])
    return sums


def _batch_size(batch: Any) -> tf.Tensor:
    first = tf.nest.flatten(batch)[0]
    return tf.cast(tf.shape(first)[0], tf.float32)


def make_train_step(
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    strategy: tf.distribute.Strategy,
    clip_norm: float | None = None,
    jit_compile: bool = False,
) -> Callable[[Any], dict[str, tf.Tensor]]:
    """The `tf.function` that runs one optimizer step on a distributed batch.

    Args:
        model: a model with `loss_terms(batch, training)`, built inside `strategy.scope()`.
        optimizer: its optimizer (a `LossScaleOptimizer` for float16), built likewise.
        strategy: the distribution strategy.
        clip_norm: clip the global gradient to this norm; None disables clipping.
        jit_compile: compile the step with XLA.

    Returns:
        `step(distributed_batch) -> dict` of scalar float32 tensors: `loss`, `count`,
        `examples` and each extra term of `loss_terms` divided by the global count.
    """
    num_replicas = strategy.num_replicas_in_sync
    loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def replica_step(batch):
        context = tf.distribute.get_replica_context()
        with tf.GradientTape() as tape:
            sums = _as_float_sums(model.loss_terms(batch, training=True))
            global_count = context.all_reduce("sum", sums["count"])
            denominator = tf.maximum(global_count, 1.0)
            loss = sums["loss_sum"] / denominator
            if model.losses:
                regularization = tf.add_n([tf.cast(x, tf.float32) for x in model.losses])
                loss += regularization / num_replicas
            target = optimizer.scale_loss(loss) if loss_scaled else loss
        variables = model.trainable_variables
        grads = tape.gradient(target, variables)
        if clip_norm is not None:
            grads = _clip(grads, context, clip_norm, optimizer if loss_scaled else None)
        optimizer.apply_gradients(zip(grads, variables))
        return _report(context, sums, loss, batch, global_count, denominator)

    if jit_compile and _distributing(strategy):
        if _all_reduces_in_forward(model):
            tf.config.optimizer.set_jit("autoclustering")
        else:
            replica_step = _jit_replica_step(model, optimizer, num_replicas, clip_norm,
                                             loss_scaled)
        jit_compile = False

    def step(distributed_batch):
        per_replica = strategy.run(replica_step, args=(distributed_batch,))
        # Every replica holds the same all-reduced values; take the first local one.
        return tf.nest.map_structure(
            lambda v: strategy.experimental_local_results(v)[0], per_replica
        )

    return tf.function(step, jit_compile=jit_compile, reduce_retracing=True)


def _report(context, sums, loss, batch, global_count, denominator) -> dict[str, tf.Tensor]:
    """The step's outputs, all-reduced: `loss`, `count`, `examples` and the extra terms over
    the global count."""
    extras = {k: v for k, v in sums.items() if k not in ("loss_sum", "count")}
    totals = context.all_reduce("sum", {"loss": loss, "examples": _batch_size(batch), **extras})
    report = {k: v / denominator for k, v in totals.items() if k in extras}
    report.update(loss=totals["loss"], count=global_count, examples=totals["examples"])
    return report


def _distributing(strategy: tf.distribute.Strategy) -> bool:
    return strategy.num_replicas_in_sync > 1 or isinstance(
        strategy, (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy))


def _all_reduces_in_forward(model: keras.Model) -> bool:
    from common.training.sublayers import sublayers

    return any(getattr(layer, "synchronized", False) for layer in [model, *sublayers(model)])


def _jit_replica_step(model, optimizer, num_replicas, clip_norm, loss_scaled):
    """`replica_step` with the forward and backward pass compiled by XLA, the collectives and
    the update outside it (see the module docstring)."""

    def gradients(batch):
        with tf.GradientTape(persistent=bool(model.losses)) as tape:
            sums = _as_float_sums(model.loss_terms(batch, training=True))
            loss_sum = sums["loss_sum"]
            target = optimizer.scale_loss(loss_sum) if loss_scaled else loss_sum
            regularization = None
            if model.losses:
                regularization = tf.add_n([tf.cast(x, tf.float32) for x in model.losses])
                scaled = optimizer.scale_loss(regularization) if loss_scaled else regularization
        variables = model.trainable_variables
        grads = tape.gradient(target, variables)
        extra = tape.gradient(scaled, variables) if regularization is not None else None
        return sums, grads, regularization, extra

    compiled = tf.function(gradients, jit_compile=True, reduce_retracing=True)

    def replica_step(batch):
        context = tf.distribute.get_replica_context()
        sums, grads, regularization, extra = compiled(batch)
        global_count = context.all_reduce("sum", sums["count"])
        denominator = tf.maximum(global_count, 1.0)
        loss = sums["loss_sum"] / denominator
        grads = [None if g is None else _scale(g, 1.0 / denominator) for g in grads]
        if regularization is not None:
            loss += regularization / num_replicas
            grads = [g if e is None else (e / num_replicas if g is None else g + e / num_replicas)
                     for g, e in zip(grads, extra)]
        if clip_norm is not None:
            grads = _clip(grads, context, clip_norm, optimizer if loss_scaled else None)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return _report(context, sums, loss, batch, global_count, denominator)

    return replica_step


def _clip(grads, context, clip_norm, loss_scale_optimizer):
    present = [g for g in grads if g is not None]
    if not present:
        return grads
    dense = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in present]
    if context.num_replicas_in_sync > 1:
        dense = context.all_reduce("sum", dense)
    norm = tf.linalg.global_norm(dense)
    if loss_scale_optimizer is not None:
        norm = norm / tf.cast(loss_scale_optimizer.dynamic_scale, norm.dtype)
    factor = clip_norm / tf.maximum(norm, clip_norm)
    return [None if g is None else _scale(g, factor) for g in grads]


def _scale(grad, factor):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values * tf.cast(factor, grad.values.dtype),
                                grad.indices, grad.dense_shape)
    return grad * tf.cast(factor, grad.dtype)
