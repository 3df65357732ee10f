"""A JAX-trained translator, imported into TensorFlow, gives the log-probabilities the JAX model
gives itself.

The JAX side runs the run's `model.weights.h5` in a JAX subprocess (`worker.task_log_probs`,
which cannot import TensorFlow); the TensorFlow side is the checkpoint `import_jax_weights`
writes, read as every TensorFlow command reads a run (`Translator.from_run_dir`, which
`evaluate`, `translate` and `export` use). Both score the same pairs under teacher forcing:
every log-probability of every target position, not a few greedy tokens, so a weight that
crossed wrongly (a query kernel taken for a key kernel) moves them past the tolerance even
where the greedy output would not change.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.jax.conftest import requires_jax, run_worker

pytestmark = [requires_jax, pytest.mark.slow]
PAIRS = 12
# float32 on two backends: the largest difference seen is about 1e-6.
ATOL = 1e-4


def teacher_forced_log_probs(model, batch) -> np.ndarray:
    """`(B, T, V)` float64 log-probabilities of a TensorFlow-backend `model` on `batch`."""
    logits = np.asarray(model({"source": batch["source"], "target_in": batch["target_in"]},
                              training=False), np.float64)
    top = logits.max(axis=-1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))


def test_imported_jax_run_gives_the_jax_models_log_probabilities(translation_folder,
                                                                 single_device_run, tmp_path):
    from common.training.cross_backend import import_jax_weights
    from common.training.prepare import load_prepared
    from seq2seq.inference import Translator

    run_dir = tmp_path / "run"
    shutil.copytree(single_device_run["run_dir"], run_dir)
    checkpoint = import_jax_weights(run_dir)
    # named by the step its weights hold: the best's when the run keeps one, else the last's
    record = run_dir / "best" / "best.json"
    record = record if record.is_file() else run_dir / "status.json"
    assert checkpoint.endswith(f"checkpoints/ckpt-{json.loads(record.read_text())['step']}")

    prepared = load_prepared(translation_folder)
    batch = next(prepared.batches("train", PAIRS, seed=0))
    assert len({tuple(row) for row in batch["target_out"]}) == PAIRS  # twelve other targets
    jax = run_worker("log_probs", {"prepared": str(translation_folder), "run_dir": str(run_dir),
                                   "batch": {k: v.tolist() for k, v in batch.items()}})
    assert jax["backend"] == "jax"
    jax_log_probs = np.asarray(jax["log_probs"])
    translator = Translator.from_run_dir(run_dir, checkpoint)
    tf_log_probs = teacher_forced_log_probs(translator.model, batch)

    real = batch["target_out"] != 0  # the positions with a target token
    assert tf_log_probs.shape == jax_log_probs.shape == (*real.shape, len(translator.target_vocab))
    # The source decides: after `<start>`, the same in every row, the first position's
    # log-probabilities differ between the pairs by far more than the tolerance, so the
    # comparison sees the encoder (a model that wrote one phrase for every input would not).
    assert np.ptp(tf_log_probs[:, 0], axis=0).max() > 100 * ATOL
    np.testing.assert_allclose(tf_log_probs[real], jax_log_probs[real], rtol=0, atol=ATOL)
