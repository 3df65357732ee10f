"""token_loss_terms against a NumPy reference, with and without label smoothing."""

import numpy as np
import pytest

from seq2seq.losses import token_loss_terms


def reference(logits, targets, eps):
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    total, count, correct = 0.0, 0, 0
    for b in range(targets.shape[0]):
        for t in range(targets.shape[1]):
            y = targets[b, t]
            if y == 0:
                continue
            q = np.full(logits.shape[-1], eps / logits.shape[-1])
            q[y] += 1 - eps
            total += -(q * logp[b, t]).sum()
            count += 1
            correct += int(logits[b, t].argmax() == y)
    return total, count, correct


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_matches_numpy_reference(eps):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 7)).astype(np.float32)
    targets = rng.integers(1, 7, size=(3, 5)).astype(np.int32)
    targets[0, 3:] = 0
    targets[2, 1:] = 0
    terms = token_loss_terms(logits, targets, label_smoothing=eps)
    total, count, correct = reference(logits, targets, eps)
    assert float(terms["count"]) == count
    assert float(terms["accuracy"]) == correct
    np.testing.assert_allclose(float(terms["loss_sum"]), total, rtol=1e-5)
