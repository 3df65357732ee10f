"""Training a captioner into a run directory: `captioner train` without the argument parsing.

`train(config, run_dir)` loads the training split, builds (or, on resume, reloads) the
vocabulary, writes `config.json` and `vocab.txt`, optionally caches the frozen encoder's
features, and hands the model and a dataset function to `common.training.Trainer`, which
writes the checkpoints, logs, `history.jsonl` and `status.json`. With `config.scst.enabled`
the model is a `captioner.scst.SelfCriticalCaptioner` (the same weights) trained on batches of
images by the policy gradient of their captions' CIDEr-D.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from captioner.config import FACT_DATASETS, CaptionerRunConfig
from captioner.validation import SHAPES_VALIDATION
from common.config import deep_merge, from_dict, save_json, to_dict
from common.errors import UserError
from common.training.run_dir import RunDir, failed_writes_named

# The run directory's file names are `RunDir`'s; these names stay for older imports.
CONFIG_FILE = RunDir.config
VOCAB_FILE = RunDir.vocab
FEATURES_DIR = RunDir.features


def build_model(config: CaptionerRunConfig, vocab_size: int):
    """The `ShowAttendTell` a run config describes (variables created)."""
    from captioner.model import ShowAttendTell

    model = ShowAttendTell(vocab_size, config.encoder, config.decoder, name="show_attend_tell")
    if config.data.cache_features:
        model.encoder.trainable = False
    return model


def apply_overrides(config: CaptionerRunConfig, overrides: dict[str, Any]) -> CaptionerRunConfig:
    """`config` with nested overrides (`{"encoder": {...}, "training": {...}, ...}`) applied
    (`common.config.deep_merge`, the merge of `captioner train`)."""
    return from_dict(CaptionerRunConfig, deep_merge(to_dict(config), overrides))


def check_config(config: CaptionerRunConfig) -> None:
    """Raise `UserError` for names that are not registered and settings that do not fit."""
    from captioner.datasets import DATASETS
    from captioner.encoders import ENCODERS
    from common.layers import SCORES

    DATASETS.get(config.data.dataset)
    backbone = ENCODERS.get(config.encoder.name)
    smallest = backbone.min_side(config.encoder)
    if min(config.encoder.image_size) < smallest:
        raise UserError(f"image_size {tuple(config.encoder.image_size)}: the {config.encoder.name} "
                        f"encoder takes sides of at least {smallest} pixels")
    SCORES.get(config.decoder.score)
    if config.data.cache_features and config.encoder.fine_tune:
        raise UserError(
            f"--cache-features needs a frozen encoder; got fine_tune={config.encoder.fine_tune}"
        )
    if config.data.max_length < 2:
        raise UserError(f"max_length must be >= 2, got {config.data.max_length}")
    if config.scst.enabled and config.training.get("jit_compile") is True:
        raise UserError("--scst computes its CIDEr-D reward in NumPy inside the step "
                        "(tf.numpy_function), which XLA cannot compile; expected "
                        "--no-jit-compile or the option left out")
    metric = config.training.get("best_metric")
    if metric in SHAPES_VALIDATION:
        if config.data.dataset not in FACT_DATASETS:
            raise UserError(f"--best-metric {metric}: only the validation on "
                            f"{', '.join(FACT_DATASETS)} reports it (captions checked against "
                            f"the scene); expected cider or bleu_4 for dataset "
                            f"{config.data.dataset!r}")


def learning_rate(config: CaptionerRunConfig, training: Any, steps_per_epoch: int) -> Any:
    """Adam's learning rate: `training.learning_rate`, decayed to 0 over the run's
    `steps_per_epoch * training.epochs` steps by a cosine where `config.cosine_decay` is set
    (both trainers read it here)."""
    if not config.cosine_decay:
        return training.learning_rate
    import keras

    return keras.optimizers.schedules.CosineDecay(
        training.learning_rate, decay_steps=steps_per_epoch * training.epochs)


def train(config: CaptionerRunConfig, run_dir: str | os.PathLike, resume: bool = False,
          verbose: int = 1, init_from: Any = None) -> list[dict[str, Any]]:
    """Train `config` into `run_dir`; returns the trainer's epoch records.

    `init_from`: a `common.runner.WarmStart` (another run's weights to start from).

    Raises:
        UserError: a bad name or setting, a missing data directory, pretrained weights that
            cannot be fetched, or a directory that already holds a run when `resume` is false.
    """
    import tensorflow as tf

    from captioner.datasets import load_split
    from captioner.datasets.pipeline import make_dataset
    from captioner.encoders import fetch_pretrained_weights
    from common.training import Trainer, TrainingConfig, make_strategy
    from common.training.distribute import is_chief

    check_config(config)
    training = from_dict(TrainingConfig, config.training)
    if config.scst.enabled and training.jit_compile is None:  # auto: never XLA (check_config)
        training = dataclasses.replace(training, jit_compile=False)
    # Logical CPU devices can only be made before TensorFlow runs its first op.
    strategy = make_strategy(training.distribute, training.logical_cpus)
    chief = is_chief(strategy)  # only the chief writes into the run directory
    fetch_pretrained_weights(config.encoder)  # offline: fail before loading any data
    run = RunDir(run_dir)
    if chief:
        run.claim(resume, first=True)  # refuse a directory holding another run before writing anything
    data = config.data
    split = load_split(data.dataset, "train", data.data_dir, **data.options)
    vocab = _vocabulary(run, split, data.min_count, resume, chief)
    if init_from is not None:
        init_from.check_vocabulary(RunDir.vocab, vocab.tokens)
    # `--resume --fine-tune N` unfreezes encoder layers from here on: the optimizer, whose
    # variables follow the trainable ones, starts afresh; everything else resumes.
    reset_optimizer = (resume and run.config.is_file()
                       and load_run_config(run.path).encoder.fine_tune != config.encoder.fine_tune)
    if reset_optimizer and verbose:
        print(f"Fine-tuning the encoder's top {config.encoder.fine_tune} layers from here on "
              "(a new optimizer)", flush=True)
    config_dict = to_dict(config)
    config_dict["training"] = to_dict(training)
    if chief:
        with failed_writes_named(run.config):
            save_json(run.config, config_dict)

    build_optimizer = _optimizer_builder(config, training, split)
    reward = references = None
    if config.scst.enabled:
        reward, references = _scst_reward(config, split, vocab, verbose)

    def make_model():
        if reward is None:
            return build_model(config, len(vocab))
        from captioner.scst import build_self_critical

        return build_self_critical(config, len(vocab), reward)

    trainer = Trainer(run_dir, training, make_model, build_optimizer, strategy=strategy)
    # `private`: a non-chief worker's own cache, when it cannot see the chief's.
    features, missing, private = _training_features(config, trainer, split, run, chief,
                                                    training.batch_size)

    def make_epoch_dataset(epoch: int, context: tf.distribute.InputContext) -> tf.data.Dataset:
        if config.scst.enabled:
            from captioner.scst import make_scst_dataset

            dataset = make_scst_dataset(
                split, context.get_per_replica_batch_size(training.batch_size), training.seed,
                epoch, config.encoder.image_size, features, missing or (),
                repeat=training.steps_per_epoch is not None, references=references)
            if context.num_input_pipelines > 1:
                dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
            return dataset
        kwargs = dict(
            batch_size=context.get_per_replica_batch_size(training.batch_size),
            shuffle=True, seed=training.seed + epoch, max_length=data.max_length,
            repeat=training.steps_per_epoch is not None, drop_remainder=True,
            pad_to_max_length=True,
        )
        if features is not None:
            from captioner.features import make_feature_dataset

            dataset = make_feature_dataset(features, split, vocab, missing=missing, **kwargs)
        else:
            dataset = make_dataset(split, vocab, image_size=config.encoder.image_size, **kwargs)
        if context.num_input_pipelines > 1:
            dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        return dataset

    validate = _make_validate(config, training, vocab)
    try:
        return trainer.fit(make_epoch_dataset, resume=resume, verbose=verbose, validate=validate,
                           reset_optimizer=reset_optimizer,
                           init_from=init_from.checkpoint if init_from else None)
    finally:
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)


def _vocabulary(run: RunDir, split: Any, min_count: int, resume: bool, chief: bool) -> Any:
    """The run's vocabulary: a resumed run's own (checked against its digest: one lost since
    training is not built anew), else built from the training split and saved by the
    chief."""
    from captioner.datasets.pipeline import build_vocabulary
    from common.text import Vocabulary

    if resume and (run.vocab.exists() or run.vocab_digests.is_file()):
        run.check_vocabularies()
        return Vocabulary.load(run.vocab)
    vocab = build_vocabulary(split, min_count=min_count)
    if chief:
        with failed_writes_named(run.vocab):
            vocab.save(run.vocab)
        run.record_vocabularies([RunDir.vocab])
    return vocab


def _optimizer_builder(config: CaptionerRunConfig, training: Any, split: Any):
    """With `cosine_decay`, the trainer's `build_optimizer` (Adam over the decay's steps);
    None for the trainer's own Adam at a constant rate."""
    if not config.cosine_decay:
        return None
    import keras

    # (SCST's batches are of images, cross-entropy's of captions.)
    examples = len(split) if config.scst.enabled else split.num_captions
    steps = training.steps_per_epoch or max(1, examples // training.batch_size)

    def build_optimizer(training_config):
        return keras.optimizers.Adam(learning_rate(config, training_config, steps))

    return build_optimizer


def _scst_reward(config: CaptionerRunConfig, split: Any, vocab: Any, verbose: int):
    """Self-critical training's `(reward, references)`: CIDEr-D against the training
    references (its document frequencies), plus the scene's facts with `fact_weight` (shapes;
    the config checked it); the references' ids when cross-entropy is mixed in, else None."""
    from captioner.scst import CaptionReward, reference_ids

    scst = config.scst
    if verbose:  # what the reward is, before the seconds of building it and the step
        said = (f" + {scst.fact_weight:g} x what each caption states, checked against its "
                "scene" if scst.fact_weight else "")
        greedy = " and decodes its greedy one" if scst.baseline == "greedy" else ""
        print(f"Self-critical training: a reward of CIDEr-D against the references of "
              f"{len(split):,} images{said}; each step samples {scst.samples} captions an "
              f"image{greedy}", flush=True)
    facts = None
    if scst.fact_weight:
        from captioner.datasets.shapes_metrics import fact_score

        scenes = [record.objects for record in split]

        def facts(caption: str, image: int) -> float:
            return fact_score(caption, scenes[image], scst.relation_bonus)

    reward = CaptionReward([record.captions for record in split], vocab, facts,
                           scst.fact_weight)
    references = (reference_ids(split, vocab, config.data.max_length) if scst.xe_weight
                  else None)
    return reward, references


def _training_features(config: CaptionerRunConfig, trainer: Any, split: Any, run: RunDir,
                       chief: bool, batch_size: int) -> tuple[Any, Any, Any]:
    """With `cache_features`, the training split's cached encoder features, the images
    missing from the cache and a worker's private cache folder (to remove after training);
    three Nones without."""
    if not config.data.cache_features:
        return None, None, None
    from captioner.features import load_features

    directory, private = _feature_cache(trainer, split, run.features, batch_size,
                                        to_dict(config.encoder), chief)
    features, missing = load_features(directory, "train")
    return features, missing, private


def _make_validate(config: CaptionerRunConfig, training: Any, vocab: Any):
    """The validation of `captioner.validation` (CIDEr and BLEU-4, on `shapes` also
    `SHAPES_VALIDATION`, three sample captions and the first image's attention for
    TensorBoard) over the first `training.validation_examples` images of the dataset's
    validation split, captioned with beam size `training.validation_beam_size`; None when
    validation is off or the dataset has no validation split."""
    from captioner.validation import images_from_data, make_validation, read_split
    from common.training.validation import Validator

    if not training.validation_examples:
        return None
    try:
        split = read_split(config)
    except UserError as exc:
        reason = " ".join(str(exc).split())
        if training.best_metric not in (None, "auto") or training.early_stopping:
            wanted = ("--early-stopping" if training.best_metric in (None, "auto")
                      else f"--best-metric {training.best_metric}")
            raise UserError(f"{wanted} needs the validation split, which cannot be read: "
                            f"{reason}") from None
        print(f"captioner: warning: validation is off (no best checkpoint kept): {reason}",
              file=sys.stderr)
        return None
    examples = images_from_data(config, split, training.validation_examples)
    if examples is None:
        return None
    validators: dict[int, Validator] = {}  # one per model, so its search is traced once

    def validate(model, epoch: int) -> dict[str, Any]:
        if id(model) not in validators:
            validation = make_validation(config, examples, vocab.tokens, model.grid_shape)
            validators[id(model)] = Validator(model, validation, training.validation_beam_size)
        return validators[id(model)]()

    return validate


def _feature_cache(trainer, split, directory: Path, batch_size: int,
                   encoder_config: dict[str, Any], chief: bool) -> tuple[Path, Path | None]:
    """The directory to read the feature cache from, and a private one to delete afterwards.

    Only the chief writes `RUN_DIR/features`. Under multi-worker training every worker then
    meets at a collective barrier; a worker that sees the chief's cache (a shared file system)
    reads it, and one that does not (a run directory of its own) encodes the images into a
    temporary directory of its own, removed after training.
    """
    import tensorflow as tf

    from captioner.features import cache_features, has_features

    if chief:
        cache_features(trainer.model.encoder, split, directory, batch_size, encoder_config)
    strategy = trainer.strategy
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        _barrier(strategy)
    if chief or has_features(directory, split.split, len(split), encoder_config):
        if not chief:
            print(f"reading the chief's feature cache in {directory}", flush=True)
        return directory, None
    private = Path(tempfile.mkdtemp(prefix="captioner-features-"))
    print(f"no feature cache from the chief in {directory}; encoding into {private}",
          flush=True)
    cache_features(trainer.model.encoder, split, private, batch_size, encoder_config)
    return private, private


def _barrier(strategy) -> None:
    """Returns once every worker of `strategy` has called it (a collective all-reduce)."""
    import tensorflow as tf

    def one():
        return tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0))

    for value in strategy.experimental_local_results(strategy.run(one)):
        value.numpy()  # the collective may run asynchronously: wait for its result


def load_run_config(run_dir: str | os.PathLike) -> CaptionerRunConfig:
    """The `config.json` of a captioner run directory (`UserError` if it is not one)."""
    from captioner.family import FAMILY

    return FAMILY.load_config(run_dir)
