"""One captioner training step under MirroredStrategy vs one device; run in a subprocess by
`test_distributed.py`, because the logical devices must be configured before TensorFlow
initializes its devices.

    python tests/captioner/distributed_check.py [--jit-compile] [--gpu]

It builds the `tiny` captioner (soft attention, no dropout, the encoder trained: its batch
norm sees the batch) twice, with the default strategy and mirrored over two logical CPUs (with
`--gpu`: two logical GPUs split from the first GPU, or two real GPUs), copies the one-device
weights into the mirrored model, runs `STEPS` SGD steps of
`common.training.step.make_train_step` on the same global batches, and prints one JSON line:
`{"replicas": [1, 2], "losses": [[...], [...]], "max_weight_diff": float,
"max_weight_change": float, "max_start_diff": float, "weights": int, "devices": [...]}`.

The captions have ragged lengths, so the two replicas hold different token counts: a step
that normalized by a replica's own count rather than the global one would give other
weights, and so would batch norm over each replica's half of the batch instead of the whole.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

GLOBAL_BATCH = 8
CAPTION_STEPS = 9
VOCAB = 29
STEPS = 2


def make_batches(image_size: tuple[int, int], seed: int = 0) -> list[dict]:
    """`STEPS` global batches: random images in [0, 255] and captions padded after a random
    length per row."""
    import numpy as np

    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(STEPS):
        images = rng.uniform(0, 255, size=(GLOBAL_BATCH, *image_size, 3)).astype("float32")
        words = rng.integers(4, VOCAB, size=(GLOBAL_BATCH, CAPTION_STEPS)).astype("int32")
        lengths = rng.integers(2, CAPTION_STEPS, size=(GLOBAL_BATCH, 1))
        positions = np.arange(CAPTION_STEPS)[None, :]
        caption_out = np.where(positions < lengths, words, 0)
        caption_out[positions[0] == lengths[:, 0][:, None]] = 2  # <end>
        caption_in = np.concatenate([np.ones((GLOBAL_BATCH, 1), "int32"),
                                     caption_out[:, :-1]], axis=1)
        caption_in[caption_in == 2] = 0
        batches.append({"image": images, "caption_in": caption_in.astype("int32"),
                        "caption_out": caption_out.astype("int32")})
    return batches


def make_config():
    from captioner.config import CaptionerRunConfig
    from captioner.presets import get_preset
    from captioner.train import apply_overrides

    config = apply_overrides(CaptionerRunConfig(), get_preset("tiny"))
    return apply_overrides(config, {"decoder": {"dropout": 0.0, "max_length": CAPTION_STEPS}})


def train_steps(strategy, jit_compile: bool, initial_weights=None) -> dict:
    """Builds the tiny captioner in `strategy`'s scope and runs `STEPS` SGD steps."""
    import keras
    import tensorflow as tf

    from captioner.train import build_model
    from common.training.step import make_train_step

    config = make_config()
    batches = make_batches(tuple(config.encoder.image_size))
    keras.utils.set_random_seed(1234)
    with strategy.scope():
        model = build_model(config, VOCAB)
        optimizer = keras.optimizers.SGD(0.5)
        model.loss_terms({k: v[:2] for k, v in batches[0].items()}, training=False)  # builds
        optimizer.build(model.trainable_variables)
    if initial_weights is not None:
        model.set_weights(initial_weights)
    start = [w.copy() for w in model.get_weights()]
    step = make_train_step(model, optimizer, strategy, jit_compile=jit_compile)
    losses = []
    for batch in batches:
        dataset = tf.data.Dataset.from_tensor_slices(batch).batch(GLOBAL_BATCH)
        distributed = next(iter(strategy.experimental_distribute_dataset(dataset)))
        losses.append(float(step(distributed)["loss"]))
    return {"model": model, "losses": losses, "start": start,
            "replicas": strategy.num_replicas_in_sync}


def compare(mirrored, jit_compile: bool) -> dict:
    import numpy as np

    from common.training import make_strategy

    single = train_steps(make_strategy("none"), jit_compile)
    multi = train_steps(mirrored, jit_compile, initial_weights=single["start"])
    after_single = single["model"].get_weights()
    after_multi = multi["model"].get_weights()

    def largest(pairs):
        return max(float(np.max(np.abs(a - b))) for a, b in pairs)

    return {
        "replicas": [single["replicas"], multi["replicas"]],
        "losses": [single["losses"], multi["losses"]],
        "weights": len(after_single),
        "max_weight_diff": largest(zip(after_single, after_multi)),
        "max_start_diff": largest(zip(single["start"], multi["start"])),
        "max_weight_change": largest(zip(after_single, single["start"])),
        "devices": list(mirrored.extended.worker_devices),
        "jit_compile": jit_compile,
    }


def gpu_mirrored_strategy():
    """Mirrored over two GPUs: the first two, or two logical GPUs split from the only one."""
    import tensorflow as tf

    from common.training.distribute import configure_logical_gpus

    gpus = tf.config.list_physical_devices("GPU")
    names = configure_logical_gpus(2) if len(gpus) == 1 else [
        d.name for d in tf.config.list_logical_devices("GPU")]
    return tf.distribute.MirroredStrategy(names[:2])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jit-compile", action="store_true")
    parser.add_argument("--gpu", action="store_true",
                        help="mirror over two (logical) GPUs instead of two logical CPUs")
    args = parser.parse_args(argv)
    from common.training import make_strategy

    # Before any other TensorFlow op: logical devices are fixed once TensorFlow starts.
    mirrored = gpu_mirrored_strategy() if args.gpu else make_strategy("mirrored", 2)
    return compare(mirrored, args.jit_compile)


if __name__ == "__main__":
    print(json.dumps(main()))
