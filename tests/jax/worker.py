"""Subprocess side of the JAX tests: `python tests/jax/worker.py TASK ARGS_JSON`.

Each task runs on the backend of `KERAS_BACKEND` and prints one JSON line (the last line of
stdout). Unless `TF_ALLOWED=1`, importing TensorFlow raises (a meta-path finder, as in
`common.export.savedmodel`), so every JAX task also proves that it needs no TensorFlow. Task
`batch` runs several tasks in turn in one process (Keras and JAX imported once); a task that
patches the trainer undoes it when it ends.
"""

from __future__ import annotations

import importlib.abc
import json
import os
import sys
import traceback
from pathlib import Path
from unittest import mock


class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "tensorflow":
            raise ImportError(f"this process may not import TensorFlow ({name})")
        return None


if os.environ.get("TF_ALLOWED") != "1":
    sys.meta_path.insert(0, Block())
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

# The models of the backend comparison: tiny, with dropout (off in `loss_terms(training=False)`).
TRANSLATORS = {
    "transformer": {"arch": "transformer", "transformer": {
        "num_layers": 1, "hidden_dim": 16, "num_heads": 2, "intermediate_dim": 32}},
    "bahdanau": {"arch": "bahdanau", "bahdanau": {
        "embedding_dim": 8, "units": 8, "attention_units": 8}},
}
CAPTIONERS = {
    "captioner-soft": "soft",
    "captioner-hard": "hard",
}


def comparison_models():
    from captioner.config import CaptionerRunConfig, DecoderConfig, EncoderConfig
    from captioner.train import build_model as build_captioner
    from common.config import from_dict
    from seq2seq.config import ModelConfig
    from seq2seq.models import build_model

    rng = np.random.default_rng(0)
    ids = lambda shape, high: rng.integers(1, high, shape).astype(np.int32)  # noqa: E731
    translation = {"source": ids((3, 7), 30), "target_in": ids((3, 5), 30),
                   "target_out": ids((3, 5), 30)}
    translation["source"][0, 5:] = 0  # padding
    translation["target_out"][1, 3:] = 0
    captions = {"image": rng.uniform(0, 255, (3, 32, 32, 3)).astype(np.float32),
                "caption_in": ids((3, 6), 20), "caption_out": ids((3, 6), 20)}
    captions["caption_out"][2, 4:] = 0
    for name, config in TRANSLATORS.items():
        model = build_model(from_dict(ModelConfig, config), 30, 30)
        model(translation)
        yield name, model, translation
    for name, attention in CAPTIONERS.items():
        config = CaptionerRunConfig(
            encoder=EncoderConfig(image_size=(32, 32), weights="none", filters=(4, 8)),
            # Soft attention as the demo's: the word query and coverage (a state of its own).
            decoder=DecoderConfig(embedding_dim=8, units=8, attention_units=8,
                                  attention=attention, coverage=attention == "soft",
                                  query="hidden+word" if attention == "soft" else "hidden"))
        yield name, build_captioner(config, 20), captions


def task_losses(args):
    """Save (`args["save"]`) or load each comparison model's weights; its `loss_terms`."""
    import keras

    keras.utils.set_random_seed(0)
    out = {}
    for name, model, batch in comparison_models():
        path = Path(args["dir"]) / f"{name}.weights.h5"
        if args["save"]:
            model.save_weights(path)
        else:
            model.load_weights(path)
        terms = model.loss_terms(batch, training=False)
        out[name] = {k: float(keras.ops.convert_to_numpy(v)) for k, v in terms.items()}
    return out


def task_decode(args):
    """Each comparison model, its weights loaded from `args["dir"]` (or saved there, with
    `args["save"]`), decodes its batch (`comparison_models`) with every search of
    `args["searches"]` (name -> `make_strategy`'s method and options), compiled as validation
    compiles it (`CompiledSearch`): name -> search -> the `Decoded`'s fields as lists."""
    import keras

    from common.decoding import make_strategy
    from common.decoding.compiled import CompiledSearch

    keras.utils.set_random_seed(0)
    out = {}
    for name, model, batch in comparison_models():
        path = Path(args["dir"]) / f"{name}.weights.h5"
        if args["save"]:
            model.save_weights(path)
        else:
            model.load_weights(path)
        if name.startswith("captioner"):
            inputs = {"image": batch["image"]}

            def state(inputs, model=model):
                return model.initial_decoding_state(inputs["image"])
        else:
            inputs = {"source": batch["source"]}

            def state(inputs, model=model):
                return model.decoding_state(inputs["source"], args["max_length"])
        out[name] = {}
        for search, options in args["searches"].items():
            options = dict(options)
            strategy = make_strategy(options.pop("method"), **options)

            def run(inputs, model=model, strategy=strategy, state=state):
                return strategy(model.make_step(), state(inputs), 3, 1, 2, args["max_length"])

            decoded = CompiledSearch(model, run)(inputs)
            out[name][search] = {field: value.tolist()
                                 for field, value in decoded._asdict().items()}
    return out


def task_validate(args):
    """A JAX run's validation of its best weights (`best/model.weights.h5`), from its prepared
    folder, as its trainer validates: the inputs, the decoded tokens and lengths, and the
    scores."""
    import keras

    from common.family import family_named
    from common.training.jax_trainer import build_family_model
    from common.training.prepare import load_prepared
    from common.training.validation import Validator

    prepared = load_prepared(args["prepared"])
    family = family_named(prepared.family)
    model, _ = build_family_model(prepared.family, prepared.config, {
        name: len(tokens) for name, tokens in prepared.vocabularies.items()})
    family.create_variables(model, prepared.config)
    model.load_weights(Path(args["run_dir"]) / "best" / "model.weights.h5")
    validation = family.validation(prepared.config, prepared, args["examples"])
    validator = Validator(model, validation, args["beam_size"])
    decoded = validator.decode()
    scores = validation.score(decoded)
    return {"inputs": {k: v.tolist() for k, v in validation.inputs.items()},
            "tokens": decoded.tokens.tolist(), "lengths": decoded.lengths.tolist(),
            "scores": {k: float(v) for k, v in scores.items()
                       if isinstance(v, (int, float, np.floating))},
            "keras_backend": keras.backend.backend()}


def task_train(args):
    """Train a prepared folder with `JaxTrainer` (optionally in two goes, resuming), save the
    final state as `args["state"]`."""
    from common.config import from_dict
    from common.training.config import TrainingConfig
    from common.training.jax_trainer import JaxTrainer, initialize_processes
    from common.training.prepare import load_prepared

    if "coordinator" in args:
        initialize_processes(args["coordinator"], args["num_processes"], args["process_id"])
    prepared = load_prepared(args["prepared"])
    training = from_dict(TrainingConfig, {**prepared.config["training"], **args["training"]})
    records = []
    for epochs, resume, *stage in args.get("stages", [[training.epochs, False]]):
        overrides = stage[0] if stage else {}  # this stage's own training settings
        trainer = JaxTrainer(prepared, args["run_dir"], from_dict(
            TrainingConfig, {**prepared.config["training"], **args["training"], **overrides,
                             "epochs": epochs}),
            args.get("distribute", "none"), args.get("model_parallel", 1))
        records += trainer.fit(resume=resume, verbose=0)
    np.savez(args["state"], **trainer.host_state())
    import jax

    # The optimizer's constant rate as the last step used it (None under a schedule).
    rates = [float(value) for variable, value in zip(trainer.optimizer.variables, trainer.state[2])
             if variable.name == "learning_rate"]
    return {"records": records, "devices": jax.device_count(),
            "learning_rate": rates[0] if rates else None,
            "trainable": [v.path for v in trainer.model.trainable_variables],
            "processes": jax.process_count(), "tensorflow": "tensorflow" in sys.modules}


def task_train_jax(args):
    """The library call `train_jax(prepared, run_dir, training=args["training"])`; returns
    the training settings the run recorded."""
    from common.training.jax_trainer import train_jax

    records = train_jax(args["prepared"], args["run_dir"], training=args["training"],
                        distribute="none", verbose=0)
    config = json.loads((Path(args["run_dir"]) / "config.json").read_text(encoding="utf-8"))
    return {"records": len(records), "training": config["training"]}


def task_average(args):
    """`JaxTrainer.average_checkpoints(args["last"])` on a trained run; saves the state."""
    from common.config import from_dict
    from common.training.config import TrainingConfig
    from common.training.jax_trainer import JaxTrainer
    from common.training.prepare import load_prepared

    prepared = load_prepared(args["prepared"])
    training = from_dict(TrainingConfig, {**prepared.config["training"], **args["training"]})
    trainer = JaxTrainer(prepared, args["run_dir"], training, "none")
    folders = trainer.average_checkpoints(args["last"])
    np.savez(args["state"], **trainer.host_state())
    return {"folders": folders}


def task_diverge(args):
    """Train until the trainer stops on a non-finite loss or weight; report its message and
    whether every checkpoint it left is finite."""
    from common.config import from_dict
    from common.errors import UserError
    from common.training.config import TrainingConfig
    from common.training.jax_trainer import STATE_FILE, JaxTrainer, complete_jax_checkpoints
    from common.training.prepare import load_prepared

    prepared = load_prepared(args["prepared"])
    training = from_dict(TrainingConfig, {**prepared.config["training"], **args["training"]})
    trainer = JaxTrainer(prepared, args["run_dir"], training, "none")
    try:
        trainer.fit(verbose=0)
        error = None
    except UserError as exc:
        error = str(exc)
    finite = []
    for folder in complete_jax_checkpoints(trainer.checkpoints):
        with np.load(folder / STATE_FILE) as npz:
            finite.append(all(np.all(np.isfinite(npz[k])) for k in npz.files
                              if np.issubdtype(npz[k].dtype, np.floating)))
    return {"error": error, "finite": finite, "step": trainer.position["step"]}


def task_weights_diverge_at_epoch_end(args):
    """Train with the weights read back non-finite at the end of epoch 0 (the loss stays
    finite); report the trainer's message and the history's epoch records."""
    import json

    from common.config import from_dict
    from common.errors import UserError
    from common.training.config import TrainingConfig
    from common.training.jax_trainer import JaxTrainer
    from common.training.prepare import load_prepared

    prepared = load_prepared(args["prepared"])
    training = from_dict(TrainingConfig, {**prepared.config["training"], **args["training"]})
    trainer = JaxTrainer(prepared, args["run_dir"], training, "none")
    real = trainer.host_state

    def poisoned():
        host = real()
        name = next(k for k, v in host.items() if np.issubdtype(v.dtype, np.floating))
        return {**host, name: np.full_like(host[name], np.inf)}

    trainer.host_state = poisoned
    try:
        trainer.fit(verbose=0)
        error = None
    except UserError as exc:
        error = str(exc)
    history = trainer.run_dir.path / "history.jsonl"
    lines = history.read_text().splitlines() if history.exists() else []
    epochs = [r for r in map(json.loads, lines) if r.get("kind") == "epoch"]
    return {"error": error, "epoch_records": len(epochs),
            "checkpoints": sorted(p.name for p in trainer.checkpoints.glob("ckpt-*"))}


def task_dropout(args):
    """`common.layers.Dropout` under `dropout_rng(args["generator"])` (default "rbg") on JAX:
    mask statistics, determinism, Keras's masks outside the context, and the seed state through
    a jitted stateless step."""
    import jax
    import keras

    from common.layers import Dropout, dropout_rng

    rate, shape, seed = args["rate"], tuple(args["shape"]), args["seed"]
    generator = args.get("generator", "rbg")
    x = np.ones(shape, np.float32)
    with dropout_rng(generator):
        first = np.asarray(Dropout(rate, seed=seed)(x, training=True))
        again = np.asarray(Dropout(rate, seed=seed)(x, training=True))
        rows = np.asarray(Dropout(rate, noise_shape=(None, 1), seed=seed)(x, training=True))
    keras_mask = np.asarray(keras.layers.Dropout(rate, seed=seed)(x, training=True))
    plain = np.asarray(Dropout(rate, seed=seed)(x, training=True))

    layer = Dropout(rate, seed=seed)
    state = [v.value for v in layer.non_trainable_variables]

    @jax.jit
    def step(state, x):
        with keras.StatelessScope(state_mapping=list(zip(layer.non_trainable_variables, state))
                                  ) as scope, dropout_rng(generator):
            y = layer(x, training=True)
        return y, [scope.get_current_value(v) for v in layer.non_trainable_variables]

    y1, state1 = step(state, x)
    y2, state2 = step(state1, x)
    return {
        "backend": keras.backend.backend(),
        "kept": float((first != 0).mean()),
        "values": sorted(float(v) for v in np.unique(first)),
        "same_seed_same_mask": bool(np.array_equal(first, again)),
        "keras_mask_differs": not np.array_equal(first != 0, keras_mask != 0),
        "outside_context_equals_keras": bool(np.array_equal(plain, keras_mask)),
        "jit_steps_differ": not np.array_equal(np.asarray(y1), np.asarray(y2)),
        "jit_state_advanced": not np.array_equal(np.asarray(state[0]), np.asarray(state1[0])),
        "noise_shape_broadcast": bool(np.all(rows == rows[:, :1])),
    }


def task_loss_gradient(args):
    """`token_loss_terms`'s loss sum and its gradient by the logits (`jax.grad`), in the closed
    form and by automatic differentiation, for `args["logits"]` in `args["dtype"]`."""
    import jax
    import jax.numpy as jnp

    from seq2seq.losses import token_loss_terms

    logits = jnp.asarray(np.asarray(args["logits"], np.float32), args["dtype"])
    targets = jnp.asarray(args["targets"], jnp.int32)
    result = {}
    for name, closed in (("closed", True), ("autodiff", False)):
        def loss(x, closed=closed):
            return token_loss_terms(x, targets, args["eps"], closed_form_gradient=closed)[
                "loss_sum"]

        value, grad = jax.jit(jax.value_and_grad(loss))(logits)
        result[name] = {"loss": float(value), "dtype": str(grad.dtype),
                        "grad": np.asarray(grad, np.float32).tolist()}
    return result


def task_layer_norm(args):
    """`common.layers.LayerNormalization` on `args["x"]` in `args["dtype"]` (bfloat16: under
    mixed_bfloat16, float32 variables): its output and the
    gradients of `sum(y * args["w"])` by x, gamma and beta (`jax.grad`), with Keras's call and
    with the closed-form gradient."""
    import jax
    import jax.numpy as jnp
    import keras

    from common.layers import LayerNormalization

    x = jnp.asarray(np.asarray(args["x"], np.float32), args["dtype"])
    w = jnp.asarray(np.asarray(args["w"], np.float32))
    policy = "mixed_bfloat16" if args["dtype"] == "bfloat16" else "float32"
    layer = LayerNormalization(epsilon=1e-5, dtype=policy)
    layer.build(x.shape)
    layer.gamma.assign(np.asarray(args["gamma"], np.float32))
    layer.beta.assign(np.asarray(args["beta"], np.float32))
    result = {}
    for name, closed in (("keras", False), ("closed", True)):
        LayerNormalization.CLOSED_FORM_GRADIENT = closed

        def loss(x, gamma, beta):
            with keras.StatelessScope(state_mapping=[(layer.gamma, gamma), (layer.beta, beta)]):
                y = layer(x)
            return jnp.sum(y.astype(jnp.float32) * w), y

        (_, y), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(
            x, layer.gamma.value, layer.beta.value)
        result[name] = {"y": np.asarray(y, np.float32).tolist(), "y_dtype": str(y.dtype),
                        "dtypes": [str(g.dtype) for g in grads],
                        "grads": [np.asarray(g, np.float32).tolist() for g in grads]}
    LayerNormalization.CLOSED_FORM_GRADIENT = False
    return result


def task_transformer_step(args):
    """The Transformer's decoding step (`make_step`) under `jax.jit`, one compiled program
    for every position (the index and the state traced): for each of `args["models"]`
    (`config` a `seq2seq.config.ModelConfig` dict, `weights` a `.weights.h5` of it, 30 ids
    both sides), its `target_in` fed one column at a time over `args["source"]` (and
    `args["source_copy"]` for a `copy` model): the logits `(B, T, V)`, the last layer's
    head-average attention `(B, T, S)` and the number of programs compiled."""
    import jax
    import keras

    from common.config import from_dict
    from seq2seq.config import ModelConfig
    from seq2seq.models import build_model

    source = np.asarray(args["source"], np.int32)
    out = {}
    for name, spec in args["models"].items():
        target_in = np.asarray(spec["target_in"], np.int32)
        model = build_model(from_dict(ModelConfig, spec["config"]), 30, 30)
        model.build()
        model.load_weights(spec["weights"])
        variables = model.trainable_variables + model.non_trainable_variables

        @jax.jit
        def step(values, tokens, state, index, model=model, variables=variables):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return model.make_step()(tokens, state, index)

        options = {"source_copy": np.asarray(args["source_copy"], np.int32)} if model.copy \
            else {}
        state = model.initial_state(source, max_length=target_in.shape[1], **options)
        values = [v.value for v in variables]
        logits, attention = [], []
        for t in range(target_in.shape[1]):
            step_logits, state, alpha = step(values, target_in[:, t], state, np.int32(t))
            logits.append(np.asarray(step_logits, np.float32))
            attention.append(np.asarray(alpha, np.float32))
        out[name] = {"logits": np.stack(logits, 1).tolist(),
                     "attention": np.stack(attention, 1).tolist(),
                     "compiled": step._cache_size()}
    return out


def task_log_probs(args):
    """The teacher-forced log-probabilities `(B, T, V)` (float64) of the JAX model of a run
    directory (its `model.weights.h5`, built through the family's public hooks) on
    `args["batch"]`'s `source` and `target_in` ids."""
    import keras

    from common.family import family_named
    from common.training.jax_trainer import WEIGHTS_FILE
    from common.training.prepare import load_prepared

    prepared = load_prepared(args["prepared"])
    family = family_named(prepared.family)
    sizes = {name: len(tokens) for name, tokens in prepared.vocabularies.items()}
    model = family.build_model(prepared.config, sizes)
    family.create_variables(model, prepared.config)
    model.load_weights(Path(args["run_dir"]) / WEIGHTS_FILE)
    inputs = {k: np.asarray(args["batch"][k], np.int32) for k in ("source", "target_in")}
    logits = np.asarray(keras.ops.convert_to_numpy(model(inputs, training=False)), np.float64)
    top = logits.max(axis=-1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))
    return {"log_probs": log_probs.tolist(), "backend": keras.backend.backend()}


def task_fused_attention(args):
    """`common.layers.MultiHeadAttention` without weights (`keras.ops.dot_product_attention`)
    against the path that forms them, on this backend, in `args["precision"]`: the largest
    difference of the outputs and of the gradients of every variable and input (a jitted
    `jax.grad` through `stateless_call`), and whether Keras logged a failed implementation."""
    import logging

    import jax
    import keras

    from common.layers import MultiHeadAttention

    failures = []

    class Catch(logging.Handler):
        def emit(self, record):
            if "Failed to apply" in record.getMessage():
                failures.append(record.getMessage())

    logging.getLogger().addHandler(Catch())
    keras.mixed_precision.set_global_policy(args["precision"])
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 6, 16)).astype(np.float32)
    source = rng.normal(size=(2, 4, 16)).astype(np.float32)
    mask = np.array([[1] * 6, [1, 1, 1, 1, 0, 0]], bool)
    no_source = np.array([[1, 1, 1, 0], [0, 0, 0, 0]], bool)  # row 1: no key to attend
    layer = MultiHeadAttention(num_heads=2, key_dim=8, fused_projections=args["fused_projections"])
    layer(x, x)
    variables = layer.trainable_variables

    def loss(values, x, return_weights):
        (self_out, _), _ = layer.stateless_call(
            values, [], x, x, mask=mask, use_causal_mask=True, training=True,
            return_weights=return_weights)
        (cross_out, _), _ = layer.stateless_call(
            values, [], x, source, mask=no_source, training=True, return_weights=return_weights)
        return keras.ops.sum(keras.ops.cast(self_out + cross_out, "float32") ** 2)

    values = [v.value for v in variables]
    grads = {flag: jax.jit(jax.value_and_grad(loss, argnums=(0, 1)), static_argnums=2)(
        values, x, flag) for flag in (False, True)}
    (fused_loss, (fused_dv, fused_dx)), (loss_ref, (ref_dv, ref_dx)) = grads[False], grads[True]
    fused = [np.asarray(g, np.float32) for g in [*fused_dv, fused_dx]]
    reference = [np.asarray(g, np.float32) for g in [*ref_dv, ref_dx]]
    gradient_error = max(float(np.max(np.abs(a - b))) for a, b in zip(fused, reference))
    scale = max(float(np.max(np.abs(b))) for b in reference)
    return {"backend": keras.backend.backend(), "loss": float(fused_loss),
            "loss_reference": float(loss_ref), "gradient_error": gradient_error,
            "gradient_scale": scale, "failures": failures}


def _trainer(args, **training):
    """A `JaxTrainer` of `args["prepared"]` (its config deep-merged with `args["patch"]`),
    with `training` over the folder's training settings, into `args["run_dir"]`."""
    from common.config import deep_merge, from_dict
    from common.training.config import TrainingConfig
    from common.training.jax_trainer import JaxTrainer
    from common.training.prepare import load_prepared

    prepared = load_prepared(args["prepared"])
    prepared.config.update(deep_merge(prepared.config, args.get("patch", {})))
    config = from_dict(TrainingConfig, {**prepared.config["training"], **training})
    return JaxTrainer(prepared, args["run_dir"], config, "none")


def task_save_order(args):
    """Train with a checkpoint due on each pass's last step, killed (a `KeyboardInterrupt`)
    once while validating epoch 0, then resumed: the position of every checkpoint written and
    the epoch records `history.jsonl` holds at the end."""
    from common.training.jax_trainer import JaxTrainer

    steps = sum(1 for _ in _trainer(args).epoch_batches(0))
    saved = []
    original_save, original_evaluate = JaxTrainer._save, JaxTrainer.evaluate
    killed = []

    def save(self, *args, **kwargs):
        saved.append(dict(self.position))
        return original_save(self, *args, **kwargs)

    def evaluate(self, split="valid"):
        if not killed:
            killed.append(dict(self.position))
            raise KeyboardInterrupt
        return original_evaluate(self, split)

    training = {"epochs": 2, "checkpoint_every": steps, "steps_per_epoch": None}
    with mock.patch.multiple(JaxTrainer, _save=save, evaluate=evaluate):
        try:
            _trainer(args, **training).fit(verbose=0)
        except KeyboardInterrupt:
            pass
        _trainer(args, **training).fit(resume=True, verbose=0)
    history = Path(args["run_dir"]) / "history.jsonl"
    records = [json.loads(line) for line in history.read_text(encoding="utf-8").splitlines()]
    return {"steps_per_pass": steps, "saved": saved, "killed_at": killed[0],
            "epochs": [r for r in records if r["kind"] == "epoch"]}


def task_evaluate(args):
    """`JaxTrainer.evaluate(args["split"])` of the same initial weights at each batch size of
    `args["batch_sizes"]`, with the rows each served."""
    out = []
    for batch_size in args["batch_sizes"]:
        trainer = _trainer(args, batch_size=batch_size)
        batches = list(trainer._batches(args["split"], 0, training=False))
        out.append({"batch_size": batch_size, "metrics": trainer.evaluate(args["split"]),
                    "batches": len(batches),
                    "rows": sum(trainer.prepared.real_rows(b) for b in batches)})
    return out


def task_compile_steps(args):
    """`compile_steps()`, then `fit`: which of the trainer's steps compiled during `fit`
    (jax_log_compiles), whether `compile_steps` left the state as it was, and the shapes."""
    import logging

    import jax

    trainer = _trainer(args, **args.get("training", {}))
    before = trainer.host_state()
    compiled = trainer.compile_steps()
    after = trainer.host_state()
    messages = []

    class Collect(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler = Collect()
    logging.getLogger("jax").addHandler(handler)
    jax.config.update("jax_log_compiles", True)
    trainer.fit(verbose=0)
    jax.config.update("jax_log_compiles", False)
    logging.getLogger("jax").removeHandler(handler)
    return {"compiled": compiled,
            "unchanged": all(np.array_equal(before[k], after[k]) for k in before),
            "fit_compiles": [m[:120] for m in messages if "Compiling" in m
                             and ("train_step" in m or "eval_step" in m)],
            "shapes": sorted({b["source"].shape[1] for b in trainer._batches("train", 0)})}


def run_tasks(tasks: dict, namespace: dict) -> dict:
    """Each of `tasks` ({name: [TASK, ARGS]}, the functions `task_TASK` of `namespace`) in
    turn: {name: its result, or {"crashed": its traceback}}, so that one that fails does not
    hide what the others found."""
    results = {}
    for name, (task, arguments) in tasks.items():
        try:
            results[name] = namespace[f"task_{task}"](arguments)
        except BaseException:  # noqa: BLE001 (a stand-in for a kill included)
            results[name] = {"crashed": traceback.format_exc()}
    return results


def task_batch(args):
    """`args["tasks"]` ({name: [TASK, ARGS]}) in turn in this process (`run_tasks`)."""
    return run_tasks(args["tasks"], globals())


if __name__ == "__main__":
    task, arguments = sys.argv[1], json.loads(sys.argv[2])
    result = globals()[f"task_{task}"](arguments)
    print(json.dumps(result))
