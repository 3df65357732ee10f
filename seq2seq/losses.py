"""The token loss both translators train with: masked cross-entropy with label smoothing.

`token_loss_terms` returns the sums the common `Trainer` expects from `loss_terms`: the loss
summed over the real (non-padding) target tokens, how many there are, and how many were
predicted right. The Trainer divides by the global token count.

Dimensions: `B` batch, `T` target steps, `V` target vocabulary.
"""

from __future__ import annotations

from keras import ops


def token_loss_terms(logits, targets, label_smoothing: float = 0.0, pad_id: int = 0) -> dict:
    """Masked token cross-entropy sum, token count and correct-token sum.

    With label smoothing `eps` the target distribution is `(1 - eps)` on the true token plus
    `eps / V` everywhere (Szegedy et al. 2016), so the per-token loss is
    `(1 - eps) * -log p[y] + eps * mean_v(-log p[v])`.

    Args:
        logits: `(B, T, V)` unnormalized scores.
        targets: `(B, T)` int token ids; `pad_id` marks padding, which is ignored.
        label_smoothing: `eps` in [0, 1).
        pad_id: the padding id.

    Returns:
        A dict of scalars: `loss_sum`, `count` (real tokens), `accuracy` (correct tokens; the
        Trainer reports it divided by `count`).

    Example:
    >>> terms = token_loss_terms(ops.zeros((1, 2, 4)), ops.array([[1, 0]]))
    >>> float(terms["count"])
    1.0
    """
    logits = ops.cast(logits, "float32")
    targets = ops.cast(targets, "int32")
    mask = ops.cast(ops.not_equal(targets, pad_id), "float32")
    log_probs = ops.log_softmax(logits, axis=-1)
    vocab_size = ops.shape(logits)[-1]
    one_hot = ops.one_hot(targets, vocab_size, dtype="float32")
    nll = -ops.sum(one_hot * log_probs, axis=-1)
    if label_smoothing:
        smooth = -ops.mean(log_probs, axis=-1)
        nll = (1.0 - label_smoothing) * nll + label_smoothing * smooth
    predictions = ops.cast(ops.argmax(logits, axis=-1), "int32")
    correct = ops.cast(ops.equal(predictions, targets), "float32") * mask
    return {
        "loss_sum": ops.sum(nll * mask),
        "count": ops.sum(mask),
        "accuracy": ops.sum(correct),
    }

