"""Multi-head attention that returns per-head weights, takes a key padding mask, and caches.

Dimensions: `B` batch, `T` target (query) steps, `S` source (key) steps, `H` heads,
`D` features, `K` `key_dim`.
"""

from __future__ import annotations

import inspect
import math

import keras
from keras import ops

from common.layers.masking import causal_mask, expand_key_mask


@keras.saving.register_keras_serializable(package="common")
class MultiHeadAttention(keras.layers.MultiHeadAttention):
    """`keras.layers.MultiHeadAttention` with weights, key padding masks and a key/value cache.

    From "Attention Is All You Need" (Vaswani et al., 2017). The same weights and arguments as
    `keras.layers.MultiHeadAttention`, and only its public API. Attention is computed here from
    the public `query_dense`, `key_dense`, `value_dense` and `output_dense` weights, their
    products taken over all `B * T` rows at once when `fused_projections` (see `_project`), and
    keras' own `call` runs (with `return_attention_scores=True`, so its dropout
    applies): with `fused_projections=False`, and when training with dropout but no
    `weights_dropout` (keras' dropout layer is private). The call differs:
    - it returns the per-head attention weights `(B, H, T, S)` (None with
      `return_weights=False`);
    - `mask` is a `(B, S)` key padding mask, combined (logical and) with an optional
      `(B, T, S)` `attention_mask` and the causal mask of `use_causal_mask`;
    - a query row whose keys are all masked gets zero weights (not uniform ones), so its
      output is the output projection's bias;
    - it reads a key/value cache laid out as keras-hub's `CachedMultiHeadAttention`,
      `(B, 2, S, H, K)` with keys at `[:, 0]` and values at `[:, 1]` (so `value_dim` must
      equal `key_dim`).

    With `cache` the keys and values are the cache's, e.g. cross-attention over a source
    whose keys and values were computed once with `compute_cache` (`value` and `key` are then
    ignored). The cached call is for decoding: it applies no dropout, and refuses
    `training=True` when `dropout > 0`. Implicit Keras masks (`_keras_mask`) are not read:
    pass `mask` explicitly.

    A caller that does not need the weights says so with `return_weights=False`. Where no
    dropout applies to the weights (not training, or `dropout == 0`) and the backend is one of
    `FUSED_BACKENDS`, the attention is then computed by `keras.ops.dot_product_attention`,
    which never forms the `(B, H, T, S)` weights where the backend has a fused kernel (cuDNN's
    flash attention on a GPU under JAX, in bf16 or fp16) and is the same formula elsewhere;
    the output is the same, to float rounding, including zeros for a query row with no allowed
    key. TensorFlow has no such kernel, so there the weights are formed as ever and dropped:
    nothing to gain, and its numerics and CPU figures stay as they were.

    Args:
        num_heads: `H`.
        key_dim: `K`, the size of each head's queries and keys.
        fused_projections: compute the projections as matrix products over all `B * T` rows,
            the query, key and value of self-attention in one (`_project`): the same weights
            and, to float rounding, the same result as keras' `call`, which runs when this is
            False (the default). It trains the keras-io size (heads of 256) 1.7x as fast on a
            CPU, but the `spa-eng-cpu` size (heads of 48) at 0.5-0.9x (docs/benchmarks.md),
            so it is off unless asked for.
        **kwargs: the other arguments of `keras.layers.MultiHeadAttention` (`value_dim`,
            `dropout`, `use_bias`, `output_shape`, initializers, ...) and base layer arguments.

    Call arguments:
        query: `(B, T, D)` queries.
        value: `(B, S, D)` values (ignored with a cache).
        key: `(B, S, D)` keys; defaults to `value`.
        mask: `(B, S)` bool key padding mask, true for real keys.
        attention_mask: `(B, T, S)` bool, true where query `t` may attend key `s`.
        use_causal_mask: apply a causal mask.
        cache: `(B, 2, S, H, K)` keys and values (`compute_cache`), or None.
        training: Keras training flag (dropout on the weights).
        weights_dropout: `weights -> weights`, the dropout of the attention weights when
            training (e.g. the caller's `keras.layers.Dropout` of rate `dropout`, called with
            `training=True`); without it, training with `dropout > 0` runs keras' `call`
            (its own dropout layer), which is slower.
        return_weights: False: the weights are not needed (`weights` is None), so that the
            attention may be fused (see above). Without a cache only.

    Returns:
        output: `(B, T, D)`.
        weights: `(B, H, T, S)`, or None with `return_weights=False`.
        cache: the `cache`, unchanged, only when `cache` is given.

    Example:
    >>> attention = MultiHeadAttention(num_heads=2, key_dim=4)
    >>> x = np.ones((2, 3, 8))
    >>> output, weights = attention(x, x, mask=np.ones((2, 3), bool), use_causal_mask=True)
    >>> output.shape, weights.shape
    ((2, 3, 8), (2, 2, 3, 3))
    """

    # The backends on which `return_weights=False` computes through
    # `keras.ops.dot_product_attention` (see the class docstring): JAX, where it is tested.
    FUSED_BACKENDS = ("jax",)

    def __init__(self, num_heads: int, key_dim: int, fused_projections: bool = False,
                 **kwargs):
        if kwargs.get("attention_axes") not in (None, 1, (1,), [1]):
            raise ValueError("common.layers.MultiHeadAttention attends over axis 1 only")
        # Arguments of newer Keras versions that the cached attention here does not implement.
        for name, why in (
            ("sliding_window", "does not support sliding_window"),
            ("use_gate", "does not support use_gate"),
            (
                "flash_attention",
                "returns attention weights, which flash attention does not compute; "
                "pass flash_attention=False",
            ),
        ):
            if kwargs.get(name):
                raise ValueError(f"common.layers.MultiHeadAttention {why}")
        super().__init__(num_heads=num_heads, key_dim=key_dim, **kwargs)
        self._output_dim = kwargs.get("output_shape")
        self.fused_projections = fused_projections

    def get_config(self):
        return {**super().get_config(), "fused_projections": self.fused_projections}

    def _fuses_projections(self) -> bool:
        """Whether the projections run as `_project` and `_output_projection` compute them:
        `fused_projections`, an integer output width, and no projection quantized (an int8
        kernel has a scale that only its layer's own call applies; `keras.Model.quantize`)."""
        denses = (self.query_dense, self.key_dense, self.value_dense, self.output_dense)
        return (self.fused_projections and isinstance(self._output_dim or 0, int)
                and all(dense.quantization_mode is None for dense in denses))

    def compute_cache(self, value, key=None):
        """Keys and values of a source, projected once: `(B, 2, S, H, K)`.

        For cross-attention while decoding: the keys and values of every step (`cache`).
        """
        if not self.built:
            raise ValueError(
                "compute_cache needs a built layer: call it once or call "
                "build(query_shape, value_shape) first"
            )
        key = value if key is None else key
        return ops.stack((self.key_dense(key), self.value_dense(value)), axis=1)

    def call(
        self,
        query,
        value,
        key=None,
        mask=None,
        attention_mask=None,
        use_causal_mask=False,
        cache=None,
        training=None,
        weights_dropout=None,
        return_weights=True,
    ):
        if cache is None:
            allowed = self._combined_mask(
                ops.shape(query)[1], ops.shape(value)[1], mask, attention_mask,
                use_causal_mask,
            )
            dropping = bool(training) and self.dropout > 0
            if (not (return_weights or dropping) and len(query.shape) == 3
                    and keras.backend.backend() in self.FUSED_BACKENDS):
                return self._fused_call(query, value, key, allowed), None
            if (not self._fuses_projections() or len(query.shape) != 3
                    or (dropping and weights_dropout is None)):
                output, weights = self._keras_call(query, value, key, allowed, training)
            else:
                query, key, value = self._project(query, value, key)
                context, weights = self._attend(
                    query, key, value, allowed, weights_dropout if dropping else None)
                output = self._output_projection(context)
            return output, weights if return_weights else None

        if training is True and self.dropout > 0:
            raise ValueError(
                "the cached call is for decoding and applies no dropout; call it with "
                "training=False (or without a cache to train)"
            )
        if not return_weights:
            raise ValueError("the cached call always returns the weights; omit return_weights")
        key, value = cache[:, 0, ...], cache[:, 1, ...]
        allowed = self._combined_mask(
            ops.shape(query)[1], ops.shape(key)[1], mask, attention_mask, use_causal_mask
        )
        context, weights = self._attend(self.query_dense(query), key, value, allowed)
        return self.output_dense(context), weights, cache

    def _fused_call(self, query, value, key, allowed):
        """The output `(B, T, D)` through `keras.ops.dot_product_attention`, without the
        weights (no dropout on them): the projections as the layer computes them, then the
        attention of `_fused_attend` where it applies (equal head sizes), `_attend` otherwise."""
        if self._fuses_projections():
            query, key, value = self._project(query, value, key)
            output_projection = self._output_projection
        else:
            key = value if key is None else key
            query, key, value = (self.query_dense(query), self.key_dense(key),
                                 self.value_dense(value))
            output_projection = self.output_dense
        if self.key_dim == self.value_dim:
            context = self._fused_attend(query, key, value, allowed)
        else:
            context, _ = self._attend(query, key, value, allowed)
        return output_projection(context)

    def _fused_attend(self, query, key, value, allowed):
        """`_attend`'s context `(B, T, H, K)` by `keras.ops.dot_product_attention`, which
        takes this `(B, T, H, K)` layout as it is. The mask goes in whole, `(B, 1, T, S)` (cuDNN
        takes a mask of every query and key; JAX falls back to its XLA formula otherwise), and
        a query with no allowed key, which the formula would spread evenly over all keys, gets
        a zero context, as in `_attend`."""
        mask = None
        if allowed is not None:
            shape = (ops.shape(query)[0], ops.shape(query)[1], ops.shape(key)[1])
            allowed = ops.broadcast_to(allowed, shape)
            mask = ops.expand_dims(allowed, 1)  # the head axis
        # cuDNN's kernel takes bf16 and fp16 only: other dtypes ask for the formula outright,
        # rather than have Keras try the kernel and log its refusal.
        half = keras.backend.standardize_dtype(query.dtype) in ("bfloat16", "float16")
        context = ops.dot_product_attention(query, key, value, mask=mask,
                                            scale=1.0 / math.sqrt(self.key_dim),
                                            flash_attention=None if half else False)
        if allowed is not None:
            any_key = ops.any(allowed, axis=-1)[:, :, None, None]  # (B, T, 1, 1)
            context = ops.where(any_key, context, ops.zeros_like(context))
        return context

    def _keras_call(self, query, value, key, allowed, training):
        """Keras' own `call` (the reference of the fused projections)."""
        # Copies carry no implicit Keras mask: keras' `call` would apply the inputs', and
        # its softmax leaves the attention mask on the weights. Keras' softmax (since 3.15)
        # gives a row with no allowed key zero weights, as `_attend` does.
        output, weights = super().call(
            ops.copy(query),
            ops.copy(value),
            None if key is None else ops.copy(key),
            attention_mask=allowed,
            return_attention_scores=True,
            training=training,
        )
        return output, ops.copy(weights)

    def _project(self, query, value, key=None):
        """The query, key and value heads `(B, T or S, H, K)` as matrix products over all
        `B * T` rows at once (the same weights as `query_dense`, `key_dense`, `value_dense`).

        Keras' `EinsumDense` multiplies `(B, T, D)` by the `(D, H * K)` kernel as a batch of
        `B` products; its kernel gradient is then `B` products summed, several times the
        work of one `(D, B * T) x (B * T, H * K)` product on a CPU. Self-attention (`value`
        is `query`, no `key`) takes one product with the three kernels side by side,
        cross-attention one for the key and value.
        """
        dtype = self.compute_dtype
        heads = self.num_heads
        if key is None and value is query:
            groups = [(query, [self.query_dense, self.key_dense, self.value_dense])]
        elif key is None:
            groups = [(query, [self.query_dense]), (value, [self.key_dense, self.value_dense])]
        else:
            groups = [(query, [self.query_dense]), (key, [self.key_dense]),
                      (value, [self.value_dense])]
        heads_out = []
        for x, denses in groups:
            x = ops.cast(x, dtype)
            rows, length = ops.shape(x)[0], ops.shape(x)[1]
            kernels = [ops.reshape(ops.cast(d.kernel, dtype), (x.shape[-1], -1)) for d in denses]
            widths = [k.shape[-1] for k in kernels]
            kernel = kernels[0] if len(kernels) == 1 else ops.concatenate(kernels, axis=-1)
            y = ops.matmul(ops.reshape(x, (-1, x.shape[-1])), kernel)
            if all(d.bias is not None for d in denses):
                biases = [ops.reshape(ops.cast(d.bias, dtype), (-1,)) for d in denses]
                y = y + (biases[0] if len(biases) == 1 else ops.concatenate(biases, axis=0))
            parts = [y] if len(widths) == 1 else ops.split(
                y, [sum(widths[: i + 1]) for i in range(len(widths) - 1)], axis=-1)
            for part, width in zip(parts, widths):
                heads_out.append(ops.reshape(part, (rows, length, heads, width // heads)))
        return tuple(heads_out)

    def _output_projection(self, context):
        """`output_dense` of the heads `(B, T, H, V)` as one `(B * T, H * V)` product."""
        dense = self.output_dense
        kernel = ops.cast(dense.kernel, self.compute_dtype)
        rows, length = ops.shape(context)[0], ops.shape(context)[1]
        kernel = ops.reshape(kernel, (-1, kernel.shape[-1]))
        y = ops.matmul(ops.reshape(context, (-1, kernel.shape[0])), kernel)
        if dense.bias is not None:
            y = y + ops.cast(dense.bias, self.compute_dtype)
        return ops.reshape(y, (rows, length, kernel.shape[-1]))

    def _attend(self, query, key, value, allowed, weights_dropout=None):
        """Scaled dot-product attention over projected heads, as keras computes it.

        Args:
            query: `(B, T, H, K)`.
            key: `(B, S, H, K)`.
            value: `(B, S, H, V)`.
            allowed: `(B or 1, T, S)` bool, or None for no mask.
            weights_dropout: applied to the weights before they weigh the values (not to the
                weights returned), or None.

        Returns:
            context: `(B, T, H, V)`.
            weights: `(B, H, T, S)`, zero where not allowed.
        """
        query = ops.multiply(query, ops.cast(1.0 / math.sqrt(self.key_dim), query.dtype))
        logits = ops.einsum("bthk,bshk->bhts", query, key)
        if allowed is not None:
            allowed = ops.expand_dims(allowed, 1)  # the head axis
            # What keras.layers.Softmax puts at masked positions (-1e9 overflows float16).
            float16 = keras.backend.standardize_dtype(logits.dtype) == "float16"
            logits = ops.where(allowed, logits, ops.cast(-3e4 if float16 else -1e9, logits.dtype))
        weights = ops.softmax(logits, axis=-1)
        if allowed is not None:
            weights = ops.where(allowed, weights, ops.zeros_like(weights))
        weighing = weights if weights_dropout is None else weights_dropout(weights)
        return ops.einsum("bhts,bshv->bthv", weighing, value), weights

    def compute_mask(self, inputs, previous_mask=None):
        # `mask` is a key padding mask over S, not a mask of the (B, T, D) output.
        return None

    def _combined_mask(self, query_length, key_length, mask, attention_mask, causal):
        """The `(B or 1, T, S)` bool mask of every constraint given, or None."""
        combined = None
        for part in (
            None if mask is None else expand_key_mask(mask, 3),
            None if attention_mask is None else ops.cast(attention_mask, "bool"),
            causal_mask(query_length, key_length) if causal else None,
        ):
            if part is not None:
                combined = part if combined is None else ops.logical_and(combined, part)
        return combined

    def compute_output_spec(self, *args, **kwargs):
        # The arguments of `call`, bound by name.
        arguments = inspect.signature(self.call).bind(*args, **kwargs).arguments
        query, value, cache = arguments["query"], arguments["value"], arguments.get("cache")
        return_weights = arguments.get("return_weights", True)
        output_dim = self._output_dim if self._output_dim else query.shape[-1]
        if isinstance(output_dim, int):
            output_dim = (output_dim,)
        source_length = value.shape[1] if cache is None else cache.shape[2]
        output = keras.KerasTensor(
            tuple(query.shape[:-1]) + tuple(output_dim), dtype=self.compute_dtype
        )
        weights = keras.KerasTensor(
            (query.shape[0], self.num_heads, query.shape[1], source_length),
            dtype=self.compute_dtype,
        )
        if cache is not None:
            return output, weights, keras.KerasTensor(cache.shape, dtype=self.compute_dtype)
        return output, weights if return_weights else None
