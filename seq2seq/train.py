"""Training a translator into a run directory: configs, vocabularies, data, the common Trainer.

`make_run_config` makes a `RunConfig` as `seq2seq train` does (defaults, then the preset,
then every option given explicitly); `train(config, run_dir)` builds the vocabularies,
writes `config.json` and the vocabularies (`seq2seq.vocabularies`), and trains with `common.training.Trainer`, reporting the
held-out exact match after each epoch when the dataset has a validation split.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from common.config import from_dict, load_json, save_json
from common.errors import DataError, UserError
from seq2seq.config import DataConfig, RunConfig


def make_run_config(
    arch: str,
    dataset: str,
    preset: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> RunConfig:
    """Defaults, then `preset`'s values for `arch`, then `overrides`, keyed by the `dest` of
    the `seq2seq train` options (`hidden_dim`, `heads`, `dropout`, `post_norm`, ...).

    The merge of `seq2seq train` (`common.runner.Runner.make_config`). Raises `UserError`
    for an unknown architecture, preset, option or score.
    """
    from common.runner import Runner
    from seq2seq.family import FAMILY

    options = {**(overrides or {}), "arch": arch, "dataset": dataset}
    return Runner(FAMILY, ".").make_config(preset, options=options)


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
          verbose: int = 1, init_from: Any = None) -> list[dict[str, Any]]:
    """Trains `config` into `run_dir`; returns the Trainer's epoch records.

    `init_from`: a `common.runner.WarmStart` (another run's weights to start from).

    With `resume`, the model and data configs and the vocabularies of the run directory are
    kept (only the training options come from `config`), and training continues from the
    latest checkpoint.
    """
    import tensorflow as tf

    from common.training import RunDir, Trainer, TrainingConfig, make_strategy
    from common.training.distribute import is_chief
    from common.training.run_dir import failed_writes_named
    from seq2seq.datasets import make_dataset
    from seq2seq.models import build_model, learning_rate
    from seq2seq.vocabularies import Vocabularies, vocabulary_files

    run = RunDir(run_dir)
    if resume and run.config.is_file():
        saved = from_dict(RunConfig, load_json(run.config))
        config = dataclasses.replace(saved, training=config.training)
    _check_data(config.data)
    training = from_dict(TrainingConfig, config.training)
    # Before any TensorFlow op: logical CPU devices can only be made before TF starts.
    strategy = make_strategy(training.distribute, training.logical_cpus)
    chief = is_chief(strategy)  # only the chief writes into the run directory
    if chief:
        run.claim(resume, first=True)  # refuses a directory holding another run before anything is written

    # Subwords are counted once the SentencePiece models exist: they train on every pair.
    subwords = config.data.vocab != "word"
    limit = config.length_limit  # data.max_length, within the Transformer's positions
    pairs = load_split(config, "train", max_length=None if subwords else limit)
    if not pairs.sources:
        raise DataError(f"no training pairs in {config.data.data or config.data.dataset}")
    if resume and (run.vocab_digests.is_file()  # a vocabulary lost is not built anew
                   or all((run.path / n).is_file() for n in vocabulary_files(config.data))):
        vocabs = Vocabularies.load(run.path, config.data)
    else:
        vocabs = Vocabularies.build(pairs, config.data)
        if chief:
            with failed_writes_named(run.path):
                vocabs.save(run.path)
            run.record_vocabularies(vocabs.files())
    pairs = vocabs.tokenize_pairs(pairs, limit)
    if not pairs.sources:
        raise DataError(f"no training pairs of at most {limit} subwords in "
                        f"{config.data.data or config.data.dataset}")
    source_vocab, target_vocab = vocabs.source, vocabs.target
    if init_from is not None:
        vocabs.check_warm_start(init_from)
    if chief:
        with failed_writes_named(run.config):
            save_json(run.config, config)
    if verbose:
        unit = "subwords" if subwords else "tokens"
        print(f"{len(pairs.sources)} training pairs ({pairs.dropped} longer than "
              f"{limit} {unit} dropped); vocabularies: "
              f"{len(source_vocab)} source, {len(target_vocab)} target {unit}", flush=True)

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
        lambda: build_model(config.model, len(source_vocab), len(target_vocab),
                            shared_vocab=config.data.shared_vocab),
        build_optimizer=build_optimizer, strategy=strategy,
    )
    validate = _make_validate(config, training, vocabs)
    return trainer.fit(make, resume=resume, validate=validate, verbose=verbose,
                       init_from=init_from.checkpoint if init_from else None)


def _make_validate(config: RunConfig, training: Any, vocabs: Any):
    """The validation of `seq2seq.validation` (BLEU, chrF and exact match, three sample
    translations for TensorBoard) over the first `training.validation_examples` validation
    pairs, decoded with beam size `training.validation_beam_size` and the run's length
    penalty; None when the dataset has no validation split or validation is off."""
    from common.training.validation import Validator
    from seq2seq.validation import make_validation, pairs_from_data

    if not training.validation_examples:
        return None
    if config.data.dataset == "tsv" and not Path(config.data.data).is_dir():
        return None  # a single file has no validation split
    try:
        pairs = pairs_from_data(config, vocabs, training.validation_examples)
    except UserError as exc:
        # One line, as the captioner says it: the run goes on, with nothing to keep a best by.
        print(f"seq2seq: warning: validation is off (no best checkpoint kept): "
              f"{' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return None
    validation = make_validation(config, pairs, vocabs.source.tokens, vocabs.target.tokens,
                                 vocabs.target_subwords)
    validators: dict[int, Validator] = {}  # one per model, so its search is traced once

    def validate(model, epoch: int) -> dict[str, Any]:
        if id(model) not in validators:
            validators[id(model)] = Validator(model, validation, training.validation_beam_size)
        return validators[id(model)]()

    return validate
