"""One training step of each translator under MirroredStrategy vs one device; run in a
subprocess by `test_distributed.py`, because the logical CPUs must be configured before
TensorFlow initializes its devices.

    python tests/seq2seq/distributed_check.py [ARCH ...]   # default: transformer bahdanau

For each architecture it builds the tiny model twice (default strategy, then mirrored over two
logical CPUs), copies the one-device weights into the mirrored model, runs `STEPS` SGD steps of
`common.training.step.make_train_step` on the same global batches, and prints one JSON line:
`{arch: {"replicas": [1, 2], "losses": [[...], [...]], "max_weight_diff": float,
"max_weight_change": float, "weights": int}}`.

The batches have ragged padding, so the two replicas hold different token counts: a step that
normalized by the replica's own count instead of the global one would give other weights. SGD
is linear in the gradient, so averaging instead of summing the replicas' gradients would too.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common.training import make_strategy  # noqa: E402

GLOBAL_BATCH = 8
SOURCE_STEPS = 7
TARGET_STEPS = 6
VOCAB = 23
STEPS = 2


def make_batches(seed: int = 0) -> list[dict]:
    """`STEPS` global batches of ids with padding (0) after a random length per row."""
    import numpy as np

    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(STEPS):
        batch = {}
        for key, steps in (("source", SOURCE_STEPS), ("target_in", TARGET_STEPS),
                           ("target_out", TARGET_STEPS)):
            ids = rng.integers(4, VOCAB, size=(GLOBAL_BATCH, steps)).astype("int32")
            lengths = rng.integers(1, steps + 1, size=(GLOBAL_BATCH, 1))
            ids[np.arange(steps)[None, :] >= lengths] = 0
            batch[key] = ids
        batch["target_in"][:, 0] = 1  # <start>
        batches.append(batch)
    return batches


def train_steps(arch: str, strategy, initial_weights=None) -> dict:
    """Builds the tiny `arch` in `strategy`'s scope and runs `STEPS` SGD steps."""
    import keras
    import tensorflow as tf

    from common.training.step import make_train_step
    from seq2seq.models import build_model
    from seq2seq.train import make_run_config

    config = make_run_config(arch, "dates", "tiny", {"dropout": 0.0})
    batches = make_batches()
    keras.utils.set_random_seed(1234)
    with strategy.scope():
        model = build_model(config.model, VOCAB, VOCAB)
        optimizer = keras.optimizers.SGD(0.5)
        model.loss_terms({k: v[:2] for k, v in batches[0].items()}, training=False)  # builds
        optimizer.build(model.trainable_variables)
    if initial_weights is not None:
        model.set_weights(initial_weights)
    start = [w.copy() for w in model.get_weights()]
    step = make_train_step(model, optimizer, strategy)
    losses = []
    for batch in batches:
        dataset = tf.data.Dataset.from_tensor_slices(batch).batch(GLOBAL_BATCH)
        distributed = next(iter(strategy.experimental_distribute_dataset(dataset)))
        losses.append(float(step(distributed)["loss"]))
    return {"model": model, "losses": losses, "start": start,
            "replicas": strategy.num_replicas_in_sync}


def compare(arch: str, mirrored) -> dict:
    import numpy as np

    single = train_steps(arch, make_strategy("none"))
    multi = train_steps(arch, mirrored, initial_weights=single["start"])
    after_single = single["model"].get_weights()
    after_multi = multi["model"].get_weights()
    return {
        "replicas": [single["replicas"], multi["replicas"]],
        "losses": [single["losses"], multi["losses"]],
        "weights": len(after_single),
        "max_weight_diff": max(float(np.max(np.abs(a - b)))
                               for a, b in zip(after_single, after_multi)),
        "max_start_diff": max(float(np.max(np.abs(a - b)))
                              for a, b in zip(single["start"], multi["start"])),
        "max_weight_change": max(float(np.max(np.abs(a - b)))
                                 for a, b in zip(after_single, single["start"])),
    }


def main(archs: list[str], gpu: bool = False) -> dict:
    """With `gpu`, mirror over two (logical) GPUs instead of two logical CPUs."""
    if gpu:  # the first two GPUs, or two logical GPUs split from the only one
        import tensorflow as tf

        from common.training.distribute import configure_logical_gpus

        if len(tf.config.list_physical_devices("GPU")) == 1:
            names = configure_logical_gpus(2)
        else:
            names = [d.name for d in tf.config.list_logical_devices("GPU")]
        mirrored = tf.distribute.MirroredStrategy(names[:2])
    else:
        mirrored = make_strategy("mirrored", logical_cpus=2)  # before any other TensorFlow op
    return {arch: compare(arch, mirrored) for arch in archs}


if __name__ == "__main__":
    names = [a for a in sys.argv[1:] if a != "--gpu"]
    print(json.dumps(main(names or ["transformer", "bahdanau"], gpu="--gpu" in sys.argv)))
