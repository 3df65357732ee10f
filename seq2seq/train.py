"""Training a translator into a run directory: configs, vocabularies, data, the common Trainer.

`options_from_args` turns `seq2seq train` options into a `RunConfig` (defaults, then the
preset, then every option given explicitly); `train(config, run_dir)` builds the vocabularies,
writes `config.json` and `vocab.*.txt`, and trains with `common.training.Trainer`, reporting the
held-out exact match after each epoch when the dataset has a validation split.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from common.config import from_dict, load_json, save_json, to_dict
from common.errors import DataError, UserError
from seq2seq.config import SIZES_SECTION, DataConfig, ModelConfig, RunConfig
from seq2seq.models import ARCHS
from seq2seq.presets import get_preset

# `seq2seq train` option -> (config section, field); sections: training, model, bahdanau,
# transformer, data.
OPTION_FIELDS = {
    "epochs": ("training", "epochs"),
    "steps_per_epoch": ("training", "steps_per_epoch"),
    "batch_size": ("training", "batch_size"),
    "learning_rate": ("training", "learning_rate"),
    "clip_norm": ("training", "clip_norm"),
    "seed": ("training", "seed"),
    "deterministic": ("training", "deterministic"),
    "checkpoint_every": ("training", "checkpoint_every"),
    "precision": ("training", "precision"),
    "jit_compile": ("training", "jit_compile"),
    "distribute": ("training", "distribute"),
    "logical_cpus": ("training", "logical_cpus"),
    "embedding_dim": ("bahdanau", "embedding_dim"),
    "units": ("bahdanau", "units"),
    "cell": ("bahdanau", "cell"),
    "score": ("bahdanau", "score"),
    "attention_units": ("bahdanau", "attention_units"),
    "input_feeding": ("bahdanau", "input_feeding"),
    "local": ("bahdanau", "local"),
    "attention_window": ("bahdanau", "attention_window"),
    "copy": ("model", "copy"),
    "layers": ("transformer", "num_layers"),
    "hidden_dim": ("transformer", "hidden_dim"),
    "heads": ("transformer", "num_heads"),
    "head_dim": ("transformer", "head_dim"),
    "intermediate_dim": ("transformer", "intermediate_dim"),
    "positions": ("transformer", "positions"),
    "max_length": ("transformer", "max_length"),
    "tie_embeddings": ("transformer", "tie_embeddings"),
    "warmup_steps": ("transformer", "warmup_steps"),
    "label_smoothing": ("model", "label_smoothing"),
    "max_decode_length": ("model", "max_decode_length"),
    "data": ("data", "data"),
    "reverse": ("data", "reverse"),
    "min_count": ("data", "min_count"),
    "max_vocab": ("data", "max_vocab"),
}

VALIDATION_PAIRS = 200


def make_run_config(
    arch: str,
    dataset: str,
    preset: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> RunConfig:
    """Defaults, then `preset`'s values for `arch`, then `overrides` (`OPTION_FIELDS` names).

    `dropout` and `post_norm` apply to the chosen architecture. Raises `UserError` for an
    unknown architecture, preset or score.
    """
    from common.layers import SCORES

    ARCHS.get(arch)
    sections: dict[str, dict[str, Any]] = {
        "training": {}, "model": {}, "bahdanau": {}, "transformer": {}, "data": {},
    }
    if preset is not None:
        values = get_preset(preset).for_arch(arch)
        model = dict(values.get("model", {}))
        sections["bahdanau"].update(model.pop("bahdanau", {}))
        sections["transformer"].update(model.pop("transformer", {}))
        sections["model"].update(model)
        sections["data"].update(values.get("data", {}))
        sections["training"].update(values.get("training", {}))
    for name, value in (overrides or {}).items():
        if value is None:
            continue
        if name == "dropout":
            sections[SIZES_SECTION[arch]]["dropout"] = value
        elif name == "post_norm":
            sections["transformer"]["norm_first"] = not value
        else:
            section, field = OPTION_FIELDS[name]
            sections[section][field] = value
    score = sections["bahdanau"].get("score", "additive")
    SCORES.get(score)
    model = ModelConfig(
        arch=arch,
        bahdanau=from_dict(ModelConfig().bahdanau.__class__, sections["bahdanau"]),
        transformer=from_dict(ModelConfig().transformer.__class__, sections["transformer"]),
        **sections["model"],
    )
    data = DataConfig(dataset=dataset, **sections["data"])
    return RunConfig(model=model, data=data, training=_training_dict(sections["training"]),
                     preset=preset)


def _training_dict(values: dict[str, Any]) -> dict[str, Any]:
    from common.training.config import TrainingConfig

    return to_dict(TrainingConfig(**values))


def options_from_args(args: argparse.Namespace) -> RunConfig:
    """The `RunConfig` of `seq2seq train` options (see `make_run_config`)."""
    names = list(OPTION_FIELDS) + ["dropout", "post_norm"]
    overrides = {name: getattr(args, name, None) for name in names}
    return make_run_config(args.arch, args.dataset, args.preset, overrides)


def _check_data(config: DataConfig) -> None:
    from seq2seq.datasets import DATASETS

    DATASETS.get(config.dataset)
    if config.dataset == "tsv":
        if not config.data:
            raise UserError("--dataset tsv needs --data PATH (a .tsv file or a folder of them)")
        if not Path(config.data).exists():
            raise DataError(f"{config.data}: no such file or folder; expected a TSV of pairs")


def load_split(config: RunConfig, split: str, max_length: int | None = None,
               size: int | None = None) -> Any:
    """One split of the run's dataset (`seq2seq.datasets.load_pairs`)."""
    from seq2seq.datasets import load_pairs

    data = config.data
    return load_pairs(data.dataset, path=data.data, split=split, reverse=data.reverse,
                      max_length=max_length, seed=0, size=size, lowercase=data.lowercase)


def train(config: RunConfig, run_dir: str | Path, resume: bool = False,
          verbose: int = 1) -> list[dict[str, Any]]:
    """Trains `config` into `run_dir`; returns the Trainer's epoch records.

    With `resume`, the model and data configs and the vocabularies of the run directory are
    kept (only the training options come from `config`), and training continues from the
    latest checkpoint.
    """
    import tensorflow as tf

    from common.text import Vocabulary
    from common.training import RunDir, Trainer, TrainingConfig, make_strategy
    from common.training.distribute import is_chief
    from seq2seq.datasets import build_vocabularies, make_dataset
    from seq2seq.inference import SOURCE_VOCAB, TARGET_VOCAB
    from seq2seq.models import build_model, learning_rate

    run = RunDir(run_dir)
    config_path = run.path / "config.json"
    if resume and config_path.is_file():
        saved = from_dict(RunConfig, load_json(config_path))
        config = dataclasses.replace(saved, training=config.training)
    _check_data(config.data)
    training = from_dict(TrainingConfig, config.training)
    # Before any TensorFlow op: logical CPU devices can only be made before TF starts.
    strategy = make_strategy(training.distribute, training.logical_cpus)
    chief = is_chief(strategy)  # only the chief writes into the run directory
    if chief:
        run.claim(resume)  # refuses a directory holding another run before anything is written

    pairs = load_split(config, "train", max_length=config.data.max_length)
    if not pairs.sources:
        raise DataError(f"no training pairs in {config.data.data or config.data.dataset}")
    if resume and (run.path / SOURCE_VOCAB).is_file():
        source_vocab = Vocabulary.load(run.path / SOURCE_VOCAB)
        target_vocab = Vocabulary.load(run.path / TARGET_VOCAB)
    else:
        source_vocab, target_vocab = build_vocabularies(
            pairs, min_count=config.data.min_count, max_size=config.data.max_vocab
        )
        if chief:
            source_vocab.save(run.path / SOURCE_VOCAB)
            target_vocab.save(run.path / TARGET_VOCAB)
    if chief:
        save_json(config_path, config)
    if verbose:
        print(f"{len(pairs.sources)} training pairs ({pairs.dropped} longer than "
              f"{config.data.max_length} tokens dropped); vocabularies: "
              f"{len(source_vocab)} source, {len(target_vocab)} target tokens", flush=True)

    def make(epoch: int, context: tf.distribute.InputContext) -> tf.data.Dataset:
        batch = context.get_per_replica_batch_size(training.batch_size)
        dataset = make_dataset(pairs, source_vocab, target_vocab, batch, shuffle=True,
                               seed=training.seed + epoch, drop_remainder=False,
                               copy=config.model.copy)
        if context.num_input_pipelines > 1:
            dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        return dataset.repeat() if training.steps_per_epoch else dataset

    def build_optimizer(cfg: TrainingConfig):
        import keras

        return keras.optimizers.Adam(learning_rate(config.model, cfg.learning_rate))

    trainer = Trainer(
        run.path, training,
        lambda: build_model(config.model, len(source_vocab), len(target_vocab)),
        build_optimizer=build_optimizer, strategy=strategy,
    )
    validate = _make_validate(config, source_vocab, target_vocab, verbose)
    return trainer.fit(make, resume=resume, validate=validate, verbose=verbose)


def _make_validate(config: RunConfig, source_vocab: Any, target_vocab: Any, verbose: int):
    """BLEU and exact match of greedy decoding on up to `VALIDATION_PAIRS` validation pairs
    (None when the dataset has no validation split)."""
    from seq2seq.evaluate import score_translations
    from seq2seq.inference import Translator

    if config.data.dataset == "tsv" and not Path(config.data.data).is_dir():
        return None  # a single file has no validation split
    try:
        valid = load_split(config, "valid", size=VALIDATION_PAIRS)
    except UserError:
        return None
    if not valid.sources:
        return None
    sources, references = valid.source_tokens, valid.targets
    translators: dict[int, Translator] = {}  # one per model, so its decoder is traced once

    def validate(model, epoch: int) -> dict[str, float]:
        if id(model) not in translators:
            translators[id(model)] = Translator(model, source_vocab, target_vocab, config)
        outputs = translators[id(model)].translate_tokens(sources)
        scores = score_translations([o.text for o in outputs], list(references),
                                    lowercase=config.data.lowercase)
        return {"bleu": scores["bleu"], "exact_match": scores["exact_match"]}

    return validate
