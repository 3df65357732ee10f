"""The token loss both translators train with: masked cross-entropy with label smoothing.

`token_loss_terms` returns the sums the common `Trainer` expects from `loss_terms`: the loss
summed over the real (non-padding) target tokens, how many there are, and how many were
predicted right. The Trainer divides by the global token count.

Dimensions: `B` batch, `T` target steps, `V` target vocabulary.
"""

from __future__ import annotations

from keras import ops


def token_loss_terms(logits, targets, label_smoothing: float = 0.0, pad_id: int = 0,
                     closed_form_gradient: bool = True) -> dict:
    """Masked token cross-entropy sum, token count and correct-token sum.

    With label smoothing `eps` the target distribution is `q = (1 - eps)` on the true token
    plus `eps / V` everywhere (Szegedy et al. 2016), so the per-token loss is
    `(1 - eps) * -log p[y] + eps * mean_v(-log p[v])`.

    Args:
        logits: `(B, T, V)` unnormalized scores.
        targets: `(B, T)` int token ids; `pad_id` marks padding, which is ignored.
        label_smoothing: `eps` in [0, 1).
        pad_id: the padding id.
        closed_form_gradient: differentiate through `smoothed_token_nll`'s closed form
            (`softmax - q`, one pass over the logits); False: through automatic
            differentiation of the same formula (an ablation, `docs/benchmarks.md`).

    Returns:
        A dict of scalars: `loss_sum`, `count` (real tokens), `accuracy` (correct tokens; the
        Trainer reports it divided by `count`).

    Example:
    >>> terms = token_loss_terms(ops.zeros((1, 2, 4)), ops.array([[1, 0]]))
    >>> float(terms["count"])
    1.0
    """
    targets = ops.cast(targets, "int32")
    if closed_form_gradient:
        nll = smoothed_token_nll(logits, targets, label_smoothing)
    else:
        nll = _smoothed_nll(ops.cast(logits, "float32"), targets, label_smoothing)[0]
    # The accuracy's argmax over float32 (the cast is exact; XLA fuses it into the reduction).
    return _sums(nll, ops.cast(logits, "float32"), targets, pad_id)


def _smoothed_nll(logits, targets, label_smoothing: float):
    """Per-token `-sum_v q[v] log p[v]` of float32 `logits (..., V)` and the log-normalizer.

    Written from the logits, not from a `log_softmax` tensor: `-log p[y] = lse - logits[y]` and
    `mean_v(-log p[v]) = lse - mean_v(logits)`, so every term is a reduction over the logits
    and the `(..., V)` log-probabilities are never formed.
    """
    lse = ops.logsumexp(logits, axis=-1)
    one_hot = ops.one_hot(targets, ops.shape(logits)[-1], dtype="float32")
    nll = lse - ops.sum(one_hot * logits, axis=-1)
    if label_smoothing:
        nll = (1.0 - label_smoothing) * nll + label_smoothing * (lse - ops.mean(logits, axis=-1))
    return nll, lse


def smoothed_token_nll(logits, targets, label_smoothing: float = 0.0):
    """Per-token label-smoothed cross-entropy `(...)` of `logits (..., V)` (any float dtype)
    and int `targets (...)`, with its gradient in closed form: `d nll / d logits = softmax(logits)
    - q`, `q` the smoothed target distribution.

    Why not automatic differentiation: differentiating `logsumexp` keeps its `exp(logits - max)`
    (float32, `(..., V)`) for the backward pass, and the float32 copy of the logits with it: on
    a GPU, for a 32k vocabulary, passes over such tensors cost more than the output projection
    itself (`docs/benchmarks.md`). Here the backward pass keeps only the logits (in their own
    dtype) and the per-token log-normalizer, and forms the gradient in one element-wise pass,
    in float32, cast back to the logits' dtype. The value is `_smoothed_nll`'s; the gradient
    with respect to `targets` is none (they are ids).
    """
    targets = ops.cast(targets, "int32")

    @ops.custom_gradient
    def nll(x):
        loss, lse = _smoothed_nll(ops.cast(x, "float32"), targets, label_smoothing)

        def grad(*args, upstream=None):  # Keras's signature on every backend
            if upstream is None:
                (upstream,) = args
            vocab = ops.shape(x)[-1]
            q = ops.one_hot(targets, vocab, dtype="float32") * (1.0 - label_smoothing)
            if label_smoothing:
                q = q + label_smoothing / vocab
            p = ops.exp(ops.cast(x, "float32") - ops.expand_dims(lse, -1))
            return ops.cast(ops.expand_dims(ops.cast(upstream, "float32"), -1) * (p - q),
                            x.dtype)

        return loss, grad

    return nll(logits)


def log_prob_loss_terms(log_probs, targets, label_smoothing: float = 0.0, pad_id: int = 0,
                        smoothing_size: int | None = None) -> dict:
    """`token_loss_terms` of normalized log-probabilities `(B, T, V')`.

    The copying translators (`seq2seq.copying`) give log-probabilities over an extended
    vocabulary `V' = V + S`; their label smoothing spreads `eps` over the first
    `smoothing_size` ids (the target vocabulary `V`) only, the per-batch source slots being no
    words of their own.

    Args:
        log_probs: `(B, T, V')` log-probabilities (each row's exponentials sum to 1).
        targets: `(B, T)` int ids in `[0, V')`; `pad_id` marks padding.
        label_smoothing: `eps` in [0, 1).
        pad_id: the padding id.
        smoothing_size: how many leading ids the smoothing covers (None: all `V'`).

    Returns:
        The dict of `token_loss_terms`.
    """
    log_probs = ops.cast(log_probs, "float32")
    targets = ops.cast(targets, "int32")
    vocab_size = ops.shape(log_probs)[-1]
    one_hot = ops.one_hot(targets, vocab_size, dtype="float32")
    nll = -ops.sum(one_hot * log_probs, axis=-1)
    if label_smoothing:
        smoothed = log_probs if smoothing_size is None else log_probs[..., :smoothing_size]
        smooth = -ops.mean(smoothed, axis=-1)
        nll = (1.0 - label_smoothing) * nll + label_smoothing * smooth
    return _sums(nll, log_probs, targets, pad_id)


def _sums(nll, scores, targets, pad_id: int) -> dict:
    """The `loss_terms` dict of per-token losses `nll (B, T)` over the tokens that are not
    `pad_id`, accuracy by `argmax(scores)`."""
    mask = ops.cast(ops.not_equal(targets, pad_id), "float32")
    predictions = ops.cast(ops.argmax(scores, axis=-1), "int32")
    correct = ops.cast(ops.equal(predictions, targets), "float32") * mask
    return {
        "loss_sum": ops.sum(nll * mask),
        "count": ops.sum(mask),
        "accuracy": ops.sum(correct),
    }
