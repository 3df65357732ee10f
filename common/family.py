"""`Family`: what a model family (the captioner, the translators) tells the shared code.

A family implements this once, in a module that imports no Keras (so `--help` stays fast):
its config class and presets, its datasets, its training options (each declaring the config
field it sets), how it trains, evaluates, opens and exports a run. `common.runner.Runner`
drives any family through these hooks, and `common.cli.family_subcommands` builds the shared
sub-commands (train, evaluate, export, serve) from them, so a third family is one new package
with its `Family` and no edit to the command line, export or serving code.

`common/` never imports a family (`tests/test_layering.py`): where it has only a family's name
(a prepared folder's `prepared.json`, a run's `config.json`), `family_named(name)` finds it. A
family named N is the package N beside `common/`, whose module `N.family` holds its instance
as `FAMILY`; being there registers it.
"""

from __future__ import annotations

import argparse
import copy
import importlib
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from common.registry import Registry


class Family(ABC):
    """The hooks of one model family. Heavy imports go inside the methods.

    Class attributes:
        name: the family written as `config.json`'s "family" (and the command's name).
        description: the command line's description (`PROG --help`).
        vocabularies: the `RunDir` names of its vocabulary files (`--init-from` compares them,
            `average` copies them); `vocabulary_files(config)` when they depend on the config.
        resume_fields: config paths besides `training` that `--resume` may change
            (the captioner's `encoder.fine_tune`).
        validation_metrics: the numbers its validation reports after each epoch, the first
            one `best_metric` "auto"'s; a `best_metric` of another name is refused before
            the run starts (empty: not checked).
        config_class: the frozen dataclass of a run (`RUN_DIR/config.json`); it has a
            `training` dict of `common.training.TrainingConfig` fields.
        presets: the registry of `train --preset` (nested overrides of `config_class`).
        datasets: the registry of dataset names.
        output: what the model writes ("caption", "output"), for help texts.
        export_signature: the SavedModel's signature that takes options.
        export_beam_size: the default beam size compiled into an export.
        serve_model_name, serve_instances, serve_max_batch_size: `serve` defaults.
        export_kind: `(module, kind attribute, what attribute)` of the family's export module,
            read when serving to refuse a SavedModel of another kind.

    The JAX path (docs/jax.md) reaches the family through `prepare`, `prepared_layout`,
    `build_model`, `learning_rate`, `create_variables` and `validation`; its config
    comes in as the dict of `config.json` there, and its vocabularies by the names of
    `prepared_layout().vocabularies`.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    vocabularies: ClassVar[tuple[str, ...]] = ()
    resume_fields: ClassVar[tuple[str, ...]] = ()
    validation_metrics: ClassVar[tuple[str, ...]] = ()
    #: Settings of the family that only some backends' trainers honour (name ->
    #: `common.training.capabilities.Capability`), refused with the common ones.
    capabilities: ClassVar[dict[str, Any]] = {}
    config_class: ClassVar[type]
    presets: ClassVar[Registry]
    datasets: ClassVar[Registry]
    output: ClassVar[str]
    export_signature: ClassVar[str]
    export_beam_size: ClassVar[int]
    serve_model_name: ClassVar[str]
    serve_instances: ClassVar[str]
    serve_max_batch_size: ClassVar[int] = 32
    export_module: ClassVar[str]
    train_help: ClassVar[str]
    evaluate_help: ClassVar[str]

    # -- config --------------------------------------------------------------------------

    @abstractmethod
    def add_train_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The family's `train` options, each added with `common.config.add_config_option`."""

    def preset(self, name: str | None, explicit: dict[str, Any]) -> dict[str, Any]:
        """The nested overrides of preset `name` (None: no preset), given what the file and
        the options set explicitly (`explicit`, nested)."""
        return {} if name is None else copy.deepcopy(self.presets.get(name))

    def check_config(self, config: Any) -> None:
        """Raise `UserError` for names not registered and settings that do not fit."""
        return None

    def vocabulary_files(self, config: Any) -> tuple[str, ...]:
        """The `RunDir` names of the vocabulary files of a run made with `config`."""
        return self.vocabularies

    def load_config(self, run_dir: str | Path) -> Any:
        """The config of a run directory of this family (`UserError` if it is not one)."""
        from common.config import from_dict, load_json
        from common.errors import UserError
        from common.training.run_dir import RunDir

        run = RunDir(run_dir)
        if not run.path.is_dir():
            raise UserError(f"{run_dir}: no such run directory")
        if not run.config.exists():
            raise UserError(f"{run_dir}: not a {self.name} run directory (no {RunDir.config})")
        data = load_json(run.config)
        family = data.get("family") if isinstance(data, dict) else None
        if family != self.name:
            raise UserError(f"{run.config}: not a {self.name} run config (family {family!r})")
        return from_dict(self.config_class, data)

    # -- train, evaluate, predict, export ------------------------------------------------

    @abstractmethod
    def train(self, config: Any, run_dir: Path, resume: bool, verbose: int,
              init_from: Any = None) -> list[dict[str, Any]]:
        """Train `config` into `run_dir` (its data, vocabularies and metrics); the records.

        `init_from` is a `common.runner.WarmStart` or None: once the run's vocabularies are
        made, call its `check_vocabulary(name, tokens)` for each, and give its `checkpoint`
        to `Trainer.fit(init_from=...)`."""

    def train_summary(self, records: list[dict[str, Any]], run_dir: Path) -> str | None:
        """A line for the user once training ends (None: nothing)."""
        return None

    # -- the prepared folder and the JAX trainer ------------------------------------------

    def prepare(self, config: Any, out_dir: Path) -> Path:
        """Write the TensorFlow-free training folder of `config` (`common.training.prepare`:
        its helpers write the folder, the family reads its data and builds its vocabularies,
        as its `train` does); returns the folder."""
        raise NotImplementedError(f"{self.name} has no prepared-data path")

    def prepared_layout(self) -> Any:
        """How the family's data lies in a prepared folder and is served from it: a
        `common.training.prepare.PreparedLayout` (its vocabularies by name, its arrays, its
        batches, their checks), from a module that imports neither TensorFlow nor Keras."""
        raise NotImplementedError(f"{self.name} has no prepared-data path")

    def build_model(self, config: dict[str, Any], vocab_sizes: dict[str, int]) -> Any:
        """The Keras model of the run config `config` (a `config.json` as a dict) with
        vocabularies of `vocab_sizes` (by `prepared_layout().vocabularies`' names), built as
        the family's `train` builds it, through its public builder. It has
        `loss_terms(batch, training)` (`common.training.step`); its variables may wait for the
        first call (`create_variables`)."""
        raise NotImplementedError(f"{self.name} has no JAX path")

    def learning_rate(self, config: dict[str, Any], training: Any, steps_per_epoch: int) -> Any:
        """What the family's `train` gives Adam as its learning rate for `config` (a dict) and
        the `common.training.TrainingConfig` `training`: `training.learning_rate`, or a
        `keras.optimizers.schedules` schedule (over `steps_per_epoch * training.epochs`
        steps where it decays)."""
        return training.learning_rate

    def create_variables(self, model: Any, config: dict[str, Any]) -> None:
        """Create the variables of a `build_model` model without data, so that a weights file
        loads into it (`common.training.cross_backend`); by default the builder made them."""
        return None

    def validation(self, config: dict[str, Any], prepared: Any, examples: int) -> Any:
        """The JAX trainer's validation of a run config `config` (a dict) from the prepared
        folder `prepared` (`common.training.prepare.Prepared`): the
        `common.training.validation.Validation` of its first `examples` validation examples,
        the one the family's TensorFlow trainer builds from the run's data (the same
        examples, decoding and metrics: its `validation_metrics`, the first one first); None:
        nothing to validate on."""
        return None

    @abstractmethod
    def add_evaluate_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The options of `evaluate RUN_DIR`."""

    @abstractmethod
    def evaluate(self, run_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
        """Score a run with the family's metrics; prints them, returns the scores."""

    @abstractmethod
    def open_model(self, path: str | Path) -> Any:
        """A model to predict with: a run directory or an exported SavedModel."""

    @abstractmethod
    def predict(self, model: Any, inputs: list[Any], **options: Any) -> list[Any]:
        """The family's outputs for `inputs` (image paths, sentences)."""

    def add_export_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Export options of the family's own (after the shared ones)."""
        return None

    def export_options(self, args: argparse.Namespace) -> dict[str, Any]:
        """The keyword arguments of `export_run` from the family's own export options."""
        return {}

    def add_serve_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Serve options of the family's own (after the shared ones)."""
        return None

    def serve_options(self, args: argparse.Namespace) -> dict[str, Any]:
        """The keyword arguments of `common.cli.serve_savedmodel` from them."""
        return {}


def family_named(name: str) -> Family:
    """The family named `name` (a `config.json`'s or `prepared.json`'s "family"): `FAMILY` of
    the module `NAME.family` of the package `NAME` beside `common/` (`family_names()`).

    Raises:
        UserError: no such family.
    """
    from common.errors import UserError

    known = family_names()
    if name not in known:
        raise UserError(f"unknown family {name!r}; expected one of: {', '.join(known)}")
    family = getattr(importlib.import_module(f"{name}.family"), "FAMILY", None)
    if not isinstance(family, Family) or family.name != name:
        raise TypeError(f"{name}.family.FAMILY is {family!r}; expected the Family named {name!r}")
    return family


def family_names() -> tuple[str, ...]:
    """The names of the families: the packages beside `common/` that hold a `family.py`
    (found on disk, without importing them)."""
    root = Path(__file__).resolve().parents[1]
    return tuple(sorted(path.parent.name for path in root.glob("*/family.py")
                        if path.parent.name != "common"
                        and (path.parent / "__init__.py").is_file()))
