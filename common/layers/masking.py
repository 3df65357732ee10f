"""Masks and masked softmaxes shared by the attention layers.

Dimensions: `B` batch, `T` target (query) steps, `S` source (key) steps.

Padded keys must get exactly zero attention weight, and a row whose keys are all padding must
give zero weights rather than NaN. `masked_softmax` guarantees both, in float32 whatever the
layer's compute dtype, so it is safe under mixed precision.
"""

from __future__ import annotations

from keras import ops

# Logit given to masked keys before the softmax. Finite, so a fully masked row never produces
# `-inf - (-inf) = NaN`; large enough that `exp(NEG_INF - max_logit)` underflows to exactly 0
# in float32.
NEG_INF = -1e9


def expand_key_mask(mask, logits_rank: int = 3):
    """Turns a `(B, S)` key padding mask into a bool mask broadcastable to `(B, T, S)`.

    Args:
        mask: `(B, S)` (or already `(B, T, S)`) bool or 0/1 tensor, true for real keys.
        logits_rank: rank of the logits the mask will be applied to.

    Returns:
        A bool tensor of rank `logits_rank` (`(B, 1, S)` for the default).
    """
    mask = ops.cast(mask, "bool")
    while len(mask.shape) < logits_rank:
        mask = ops.expand_dims(mask, -2)
    return mask


def masked_logits(logits, mask=None):
    """Float32 logits with masked positions set to a large finite negative number.

    Args:
        logits: `(..., S)` float tensor.
        mask: bool tensor broadcastable to `logits`, true where a key may be attended.

    Returns:
        `(..., S)` float32 tensor.
    """
    logits = ops.cast(logits, "float32")
    if mask is None:
        return logits
    return ops.where(ops.cast(mask, "bool"), logits, ops.cast(NEG_INF, "float32"))


def masked_softmax(logits, mask=None):
    """Softmax over the last axis that gives masked positions exactly zero weight.

    A row whose positions are all masked gets all-zero weights (not NaN, not uniform).
    Computed in float32; returns float32.

    Args:
        logits: `(..., S)` float tensor.
        mask: bool (or 0/1) tensor broadcastable to `logits`, true for positions that may be
            attended; None for no mask.

    Returns:
        `(..., S)` float32 weights that sum to 1 over unmasked positions (0 for fully masked
        rows).

    Example:
    >>> w = masked_softmax(np.zeros((1, 3)), np.array([[True, True, False]]))
    >>> np.asarray(w)
    array([[0.5, 0.5, 0. ]], dtype=float32)
    """
    if mask is None:
        return ops.softmax(ops.cast(logits, "float32"), axis=-1)
    mask = ops.cast(mask, "bool")
    weights = ops.softmax(masked_logits(logits, mask), axis=-1)
    weights = ops.where(mask, weights, ops.zeros_like(weights))
    total = ops.sum(weights, axis=-1, keepdims=True)
    # Renormalise (a no-op up to rounding when some key is unmasked) and send fully masked rows
    # to 0 / tiny = 0.
    return weights / ops.maximum(total, ops.cast(1e-30, "float32"))


def masked_log_softmax(logits, mask=None):
    """Log-softmax over the last axis, in float32, with masked positions near `NEG_INF`.

    Masked positions get a very negative (finite) log-probability, so sampling from these
    log-probabilities never picks them and no NaN appears, even in a fully masked row.

    Args:
        logits: `(..., S)` float tensor.
        mask: bool tensor broadcastable to `logits`, or None.

    Returns:
        `(..., S)` float32 log-probabilities.
    """
    return ops.log_softmax(masked_logits(logits, mask), axis=-1)


def causal_mask(query_length, key_length, offset=0):
    """A `(1, T, S)` bool mask letting query `t` see keys `s <= offset + t`.

    `offset` is the absolute position of the first query, e.g. the cache index when decoding
    step by step, so that positions not yet written to a cache are hidden too.

    Args:
        query_length: `T`, int or scalar int tensor.
        key_length: `S`, int or scalar int tensor.
        offset: int or scalar int tensor.

    Returns:
        `(1, T, S)` bool tensor.
    """
    query_positions = ops.arange(query_length, dtype="int32") + ops.cast(offset, "int32")
    key_positions = ops.arange(key_length, dtype="int32")
    mask = ops.expand_dims(key_positions, 0) <= ops.expand_dims(query_positions, 1)
    return ops.expand_dims(mask, 0)
