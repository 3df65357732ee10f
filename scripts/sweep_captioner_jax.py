"""Train and score one captioner setting on Keras's JAX backend: a sweep tool for GPU machines
that have JAX but no TensorFlow.

    KERAS_BACKEND=jax python scripts/sweep_captioner_jax.py --name lam0 \
        --overrides '{"decoder": {"penalty_weight": 0.0}}' --steps 1600 --out lam0.json

Why: the package trains with TensorFlow (`captioner train`), but `ShowAttendTell` is written
in `keras.ops`, so the same model and loss (`loss_terms`) train on any backend. This script
starts from `--preset` (default `demo`), applies `--overrides` (a JSON object of
`encoder`/`decoder`/`data`/`training` sections, as a preset is written), trains for `--steps`
batches of shuffled (image, caption) pairs of the `shapes` training split with a
`jax.jit`-compiled step (Adam, cosine decay when the preset asks for it), then captions the
test split greedily and prints (and writes) object and relation accuracy
(`captioner.datasets.shapes_metrics`). It is for choosing settings, not for finished runs: no
checkpoints, no run directory; confirm a winner with `captioner train` and `captioner evaluate`.

Several settings share one GPU as separate processes; let each take memory as it needs it
(`XLA_PYTHON_CLIENT_PREALLOCATE=false`, else the first takes 75% of the GPU and the rest fail),
and allow about a minute of compilation per process:

    export KERAS_BACKEND=jax XLA_PYTHON_CLIENT_PREALLOCATE=false
    for lam in 0.0 0.01; do
      python scripts/sweep_captioner_jax.py --name lam$lam --steps 1600 --out lam$lam.json \
          --overrides "{\\"decoder\\": {\\"penalty_weight\\": $lam}}" &
    done; wait
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _merged_preset(name: str, overrides: dict) -> dict:
    from captioner.presets import get_preset

    preset = get_preset(name)
    for section, values in overrides.items():
        if isinstance(values, dict):
            preset.setdefault(section, {}).update(values)
        else:
            preset[section] = values
    return preset


def run(name: str, preset_name: str, overrides: dict, steps: int, seed: int) -> dict:
    import jax
    import keras
    import numpy as np

    from captioner.config import DecoderConfig, EncoderConfig
    from captioner.datasets.shapes import load_shapes
    from captioner.datasets.shapes_metrics import shapes_scores
    from captioner.model import ShowAttendTell
    from common.config import from_dict
    from common.text.specials import END_ID, SPECIALS, START_ID, UNK_ID

    preset = _merged_preset(preset_name, overrides)
    batch_size = preset["training"]["batch_size"]
    max_length = preset["data"]["max_length"]
    image_size = preset["encoder"]["image_size"][0]
    keras.utils.set_random_seed(seed)
    train = load_shapes("train", image_size=image_size, with_masks=False)
    test = load_shapes("test", image_size=image_size, with_masks=False)

    counts = Counter(w for r in train for c in r.captions for w in c.lower().split())
    vocab = list(SPECIALS) + sorted(counts, key=lambda w: (-counts[w], w))
    ids = {w: i for i, w in enumerate(vocab)}
    images = np.stack([r.image for r in train]).astype(np.float32)
    pairs = [(i, [ids.get(w, UNK_ID) for w in c.lower().split()][: max_length - 1])
             for i, r in enumerate(train) for c in r.captions]

    model = ShowAttendTell(len(vocab), from_dict(EncoderConfig, preset["encoder"]),
                           from_dict(DecoderConfig, preset["decoder"]))
    learning_rate = preset["training"]["learning_rate"]
    if preset.get("cosine_decay"):
        learning_rate = keras.optimizers.schedules.CosineDecay(learning_rate, steps)
    optimizer = keras.optimizers.Adam(learning_rate)
    optimizer.build(model.trainable_variables)
    trainable, non_trainable = model.trainable_variables, model.non_trainable_variables

    def loss_fn(trainable_values, non_trainable_values, batch):
        mapping = list(zip(trainable, trainable_values)) + list(zip(non_trainable,
                                                                    non_trainable_values))
        with keras.StatelessScope(state_mapping=mapping) as scope:
            terms = model.loss_terms(batch, training=True)
            updated = [scope.get_current_value(v) for v in non_trainable]
        updated = [new if new is not None else old
                   for new, old in zip(updated, non_trainable_values)]
        return terms["loss_sum"] / terms["count"], (updated, terms["xent"] / terms["count"])

    @jax.jit
    def train_step(state, batch):
        trainable_values, non_trainable_values, optimizer_values = state
        (_, (non_trainable_values, xent)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            trainable_values, non_trainable_values, batch)
        trainable_values, optimizer_values = optimizer.stateless_apply(
            optimizer_values, grads, trainable_values)
        return (trainable_values, non_trainable_values, optimizer_values), xent

    rng = np.random.default_rng(seed)
    state = ([v.value for v in trainable], [v.value for v in non_trainable],
             [v.value for v in optimizer.variables])
    order, position, log = rng.permutation(len(pairs)), 0, []
    start = time.perf_counter()
    for step in range(steps):
        if position + batch_size > len(order):
            order, position = rng.permutation(len(pairs)), 0
        chosen = [pairs[k] for k in order[position:position + batch_size]]
        position += batch_size
        caption_in = np.zeros((batch_size, max_length), np.int32)
        caption_out = np.zeros((batch_size, max_length), np.int32)
        for b, (_, words) in enumerate(chosen):
            caption_in[b, 0] = START_ID
            caption_in[b, 1:len(words) + 1] = words
            caption_out[b, :len(words)] = words
            caption_out[b, len(words)] = END_ID
        batch = {"image": images[[c[0] for c in chosen]], "caption_in": caption_in,
                 "caption_out": caption_out}
        state, xent = train_step(state, batch)
        if step % 400 == 0 or step == steps - 1:
            log.append((step, float(xent)))
    train_seconds = time.perf_counter() - start
    for variable, value in zip(trainable, state[0]):
        variable.assign(value)
    for variable, value in zip(non_trainable, state[1]):
        variable.assign(value)

    decoder = model.decoder

    @jax.jit
    def encode(pixels):
        annotations = model.encoder(pixels, training=False)
        h, c = decoder.initial_state(annotations)
        return annotations, decoder.project_keys(annotations), h, c

    @jax.jit
    def greedy_step(tokens, h, c, annotations, projected):
        logits, h, c, _ = decoder.step(tokens, h, c, annotations, projected)
        return keras.ops.argmax(logits, -1).astype("int32"), h, c

    annotations, projected, h, c = encode(np.stack([r.image for r in test]).astype(np.float32))
    tokens, rows = np.full((len(test),), START_ID, np.int32), []
    for _ in range(max_length):
        tokens, h, c = greedy_step(tokens, h, c, annotations, projected)
        rows.append(np.asarray(tokens))
    captions = {}
    for record, row in zip(test, np.stack(rows, 1)):
        words = []
        for token in row:
            if token == END_ID:
                break
            words.append(vocab[token])
        captions[record.image_id] = " ".join(words)
    return {"name": name, "preset": preset_name, "overrides": overrides, "steps": steps,
            "train_s": train_seconds, "xent_log": log, "device": jax.devices()[0].device_kind,
            **shapes_scores(captions, test),
            "examples": [captions[r.image_id] for r in list(test)[:5]]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", default="run", help="a label for the result")
    p.add_argument("--preset", default="demo", help="the captioner preset to start from")
    p.add_argument("--overrides", default="{}", help="JSON: preset sections to change")
    p.add_argument("--steps", type=int, default=1600, help="training batches")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="also write the result to this JSON file")
    args = p.parse_args(argv)
    try:
        overrides = json.loads(args.overrides)
    except json.JSONDecodeError as exc:
        p.error(f"--overrides is not JSON: {exc}")
    if not isinstance(overrides, dict):
        p.error("--overrides must be a JSON object of preset sections")
    if args.steps < 1:
        p.error(f"--steps must be >= 1, got {args.steps}")
    os.environ.setdefault("KERAS_BACKEND", "jax")  # before Keras is first imported
    result = run(args.name, args.preset, overrides, args.steps, args.seed)
    print(json.dumps(result), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
