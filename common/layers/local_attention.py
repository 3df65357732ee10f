"""Luong's local attention: soft attention inside a window around an aligned source position.

Dimensions: `B` batch, `T` target (query) steps, `S` source (key) steps, `Dq` query features,
`Dk` key features, `Dv` value features.
"""

from __future__ import annotations

from numbers import Integral

import keras
from keras import ops

from common.errors import UserError
from common.layers.attention import BaseAttention, _as_sequence, soft_output_shape
from common.layers.masking import expand_key_mask, masked_softmax

MODES = ("monotonic", "predictive")


@keras.saving.register_keras_serializable(package="common")
class LocalAttention(BaseAttention):
    """Local attention: softmax over a window `[p_t - D, p_t + D]` of the source only.

    From "Effective Approaches to Attention-based Neural Machine Translation" (Luong et al.,
    2015), §3.2. For each query step `t` an aligned source position `p_t` is chosen, and the
    content score (any name in `common.layers.SCORES`) is softmaxed over the keys `s` with
    `|s - p_t| <= D` only; keys outside the window and padded keys get exactly zero weight.

    - `mode="monotonic"` (local-m): `p_t = t`, the query's step index, or the `positions`
      passed to the call (needed for a single-step query: the step index).
    - `mode="predictive"` (local-p): `p_t = (S' - 1) · sigmoid(v_pᵀ tanh(W_p h_t))`, where `S'`
      is the true source length (the number of real keys in `mask`), and the window weights
      are multiplied by the Gaussian `exp(-(s - p_t)² / (2σ²))`, `σ = D / 2`, which is what
      carries gradients to `W_p` and `v_p`. Luong writes `S · sigmoid(...)`, which can place
      `p_t` one past the last position; scaling by `S' - 1` keeps `p_t` in `[0, S' - 1]`.

    Both modes keep `p_t` in `[0, S' - 1]` (local-m clips it, so steps past the end of the
    source look at the last `D + 1` keys). As in the paper, the local-p weights are NOT
    renormalised after the Gaussian (they sum to at most 1); `renormalize=True` divides them by
    their sum. The softmax itself is always renormalised inside the window. A row with no real
    key gets zero weights and a zero context (no NaN). With `D >= S - 1`, local-m is global
    `Attention` with the same score.

    Args:
        score: name of the content score.
        mode: `"monotonic"` (local-m) or `"predictive"` (local-p).
        window: the half-width `D` of the window, an int >= 0 (>= 1 for `"predictive"`).
        position_units: size of `W_p` for `"predictive"`; None means `Dq`.
        renormalize: for `"predictive"`, divide the weights by their sum after the Gaussian.
        **kwargs: the score's arguments (`units=` for `additive`, ...) and base layer
            arguments (`name`, `dtype`, ...).

    Call arguments:
        query, value, key, mask: as `common.layers.attention.BaseAttention`.
        positions: `"monotonic"` only: the aligned positions, `(B, T)` (or `(B,)` / a scalar
            step index for a single-step query); None means `0, 1, ..., T - 1`.

    Returns:
        context: `(B, T, Dv)` (`(B, Dv)` for a single-step query).
        weights: `(B, T, S)` float32 attention weights (`(B, S)` for a single-step query).

    Example:
    >>> attention = LocalAttention("general", mode="predictive", window=2)
    >>> context, weights = attention(np.ones((2, 3, 8)), np.ones((2, 10, 8)))
    >>> context.shape, weights.shape
    ((2, 3, 8), (2, 3, 10))
    """

    def __init__(
        self,
        score: str = "additive",
        mode: str = "monotonic",
        window: int = 5,
        position_units: int | None = None,
        renormalize: bool = False,
        **kwargs,
    ):
        super().__init__(score, **kwargs)
        if mode not in MODES:
            raise UserError(f"Unknown local attention mode {mode!r}; choose one of: "
                            f"{', '.join(MODES)}")
        smallest = 1 if mode == "predictive" else 0
        if isinstance(window, bool) or not isinstance(window, Integral) or window < smallest:
            raise UserError(
                f"the local attention window D must be an int >= {smallest} for mode {mode!r}; "
                f"received {window!r}"
            )
        if position_units is not None and (
            isinstance(position_units, bool) or not isinstance(position_units, Integral)
            or position_units < 1
        ):
            raise UserError(f"position_units must be a positive int; received {position_units!r}")
        self.mode = mode
        self.window = int(window)
        self.position_units = None if position_units is None else int(position_units)
        self.renormalize = bool(renormalize)
        # local-p's position network, built with the query size (`W_p` is `(Dq, units)`).
        self.position_hidden = self.position_output = None

    def build(self, query_shape, value_shape, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        self._build_positions(query_shape[-1])
        self.built = True

    def _build_positions(self, query_dim):
        """Creates and builds `W_p` (`position_hidden`) and `v_p` (`position_output`)."""
        if self.mode != "predictive" or self.position_hidden is not None:
            return
        units = self.position_units or query_dim
        self.position_hidden = keras.layers.Dense(
            units, use_bias=False, activation="tanh", dtype=self.dtype_policy,
            name="position_hidden",
        )
        self.position_output = keras.layers.Dense(
            1, use_bias=False, dtype=self.dtype_policy, name="position_output"
        )
        self.position_hidden.build((None, query_dim))
        self.position_output.build((None, units))

    def call(self, query, value, key=None, mask=None, positions=None):
        projected_keys = self.project_keys(value if key is None else key)
        return self.attend(query, projected_keys, value, mask, positions)

    def attend(self, query, projected_keys, value, mask=None, positions=None):
        """Attends with keys already projected by `project_keys`; returns `(context, weights)`."""
        query, single_step = _as_sequence(query)
        # Decoders call `project_keys`/`attend` directly, never `__call__` (which builds).
        self._build_positions(query.shape[-1])
        logits = self.scorer.score(query, projected_keys)  # (B, T, S)
        source_length = ops.shape(logits)[-1]
        aligned = self._aligned(query, mask, positions, single_step, source_length)  # (B, T)
        offsets = ops.arange(source_length, dtype="float32") - ops.expand_dims(aligned, -1)
        allowed = ops.abs(offsets) <= float(self.window)  # (B, T, S)
        if mask is not None:
            allowed = ops.logical_and(allowed, expand_key_mask(mask, 3))
        weights = masked_softmax(logits, allowed)  # float32, exactly 0 outside the window
        if self.mode == "predictive":
            sigma = self.window / 2.0
            gaussian = ops.exp(-ops.square(offsets) / (2.0 * sigma**2))
            weights = ops.where(allowed, weights * gaussian, 0.0)
            if self.renormalize:
                total = ops.sum(weights, axis=-1, keepdims=True)
                weights = weights / ops.maximum(total, 1e-30)
        context = ops.matmul(ops.cast(weights, value.dtype), value)  # (B, T, Dv)
        if single_step:
            return ops.squeeze(context, 1), ops.squeeze(weights, 1)
        return context, weights

    def aligned_positions(self, query, mask=None, positions=None, source_length=None):
        """The aligned positions `p_t`: float32 `(B, T)` (`(B,)` for a `(B, Dq)` query).

        `source_length` is `S`; it may be left out when `mask` is given.
        """
        query, single_step = _as_sequence(query)
        if source_length is None:
            if mask is None:
                raise UserError("aligned_positions needs `mask` or `source_length`")
            source_length = ops.shape(mask)[-1]
        self._build_positions(query.shape[-1])
        aligned = self._aligned(query, mask, positions, single_step, source_length)
        return ops.squeeze(aligned, 1) if single_step else aligned

    def _aligned(self, query, mask, positions, single_step, source_length):
        """`p_t` as float32 `(B, T)`, in `[0, S' - 1]` with `S'` the true source length."""
        batch, steps = ops.shape(query)[0], ops.shape(query)[1]
        if mask is None:
            last = ops.cast(source_length - 1, "float32")
        else:
            real = ops.cast(ops.cast(mask, "bool"), "float32")
            if len(mask.shape) == 3:  # (B, T, S): the last axis holds the keys
                real = ops.max(real, axis=1)
            last = ops.sum(real, axis=-1, keepdims=True) - 1.0  # (B, 1)
        last = ops.maximum(last, 0.0)
        if self.mode == "predictive":
            if positions is not None:
                raise UserError("positions are given by the model in mode 'predictive'; "
                                "pass positions only with mode 'monotonic'")
            hidden = self.position_output(self.position_hidden(query))  # (B, T, 1)
            return last * ops.sigmoid(ops.cast(ops.squeeze(hidden, -1), "float32"))
        if positions is None:
            if single_step:
                raise UserError("a single-step (B, Dq) query in mode 'monotonic' needs "
                                "positions: the step index, a scalar or (B,)")
            positions = ops.arange(steps, dtype="float32")[None, :]
        positions = ops.cast(positions, "float32")
        if single_step and len(positions.shape) == 1:  # (B,): one position per example
            positions = ops.expand_dims(positions, -1)
        positions = ops.broadcast_to(positions, (batch, steps))
        return ops.minimum(ops.maximum(positions, 0.0), last)

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        return soft_output_shape(query_shape, value_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "mode": self.mode,
                "window": self.window,
                "position_units": self.position_units,
                "renormalize": self.renormalize,
            }
        )
        return config
