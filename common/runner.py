"""`Runner(family, run_dir)`: train, evaluate, predict and export one run of any family.

The run directory (`common.training.RunDir`) owns its files; the config of a new run is made
once for every family (`make_config`: defaults, preset, `--config FILE`, options), and a resumed
run keeps its model and data: only its training settings may change.
(OpenNMT-tf's `Runner` is the model.)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from common.config import (
    config_overrides,
    deep_merge,
    differing_paths,
    from_dict,
    load_config_file,
    merge_config,
    nested,
    to_dict,
)
from common.family import Family
from common.training.run_dir import RunDir, failed_writes_named

# The training settings that say where a run goes on, not what it trains.
PLACEMENT = ("distribute", "logical_cpus")


class Runner:
    """One run directory of `family`.

    Example:
    >>> from seq2seq.family import FAMILY                            # doctest: +SKIP
    >>> runner = Runner(FAMILY, "runs/dates")                        # doctest: +SKIP
    >>> config = runner.make_config("tiny", options={"arch": "transformer",
    ...                                               "dataset": "dates"})  # doctest: +SKIP
    >>> runner.train(config)                                          # doctest: +SKIP
    """

    def __init__(self, family: Family, run_dir: str | os.PathLike):
        self.family = family
        self.run = RunDir(run_dir)

    def make_config(self, preset: str | None = None, config_file: str | None = None,
                    options: argparse.Namespace | Mapping[str, Any] | None = None,
                    resume: bool = False) -> Any:
        """The run's config: defaults <- preset <- `config_file` <- `options`.

        `options` is the parsed command line (its `add_config_option` declarations come with
        it) or a mapping of option names to values for a family's declarations. With `resume`
        and a `config.json` in the run directory, that config is kept and only the training
        settings of the file and the options apply (and the family's `resume_fields`); the
        devices to run on (`distribute`, `logical_cpus`) are the options' or the defaults,
        not the saved run's, so a run trained on two workers resumes on one machine.
        """
        from common.training.config import TrainingConfig

        family = self.family
        file = load_config_file(config_file, family.config_class) if config_file else {}
        named = file.get("preset")
        if named is not None and named != preset:
            from common.errors import UserError

            # The preset a run records is the one applied: a file's is not applied.
            raise UserError(f"{config_file}: preset {named!r} is applied by --preset {named}, "
                            "not from a config file; expected that option, or the key left out")
        declared = _declarations(family, options)
        defaults = to_dict(family.config_class())
        saved = (family.load_config(self.run.path)
                 if resume and self.run.config.is_file() else None)
        # Options are read against the config they change: a resumed run's own (`--dropout`
        # is its architecture's), else the defaults.
        explicit = deep_merge(file, config_overrides(
            options or {}, declared, deep_merge(to_dict(saved) if saved else defaults, file)))
        if saved is not None:
            _refuse_changes(family, saved, explicit, preset)
            # Where the run goes on (its devices) is this command's, not the saved run's.
            placement = {name: getattr(TrainingConfig(), name) for name in PLACEMENT}
            changes = {"training": {**placement, **explicit.get("training", {})}}
            for path in family.resume_fields:  # what a resumed run may change besides
                value = _get_path(explicit, path)
                if value is not _MISSING:
                    changes = deep_merge(changes, nested(path, value))
            config = merge_config(family.config_class, to_dict(saved), changes)
        else:
            layer = family.preset(preset, explicit)
            base = deep_merge(deep_merge(defaults, layer), file)
            flags = config_overrides(options or {}, declared, base)
            config = merge_config(family.config_class, layer, file, flags)
        return self._checked(config)

    def _checked(self, config: Any) -> Any:
        """`config` with its training settings complete (`TrainingConfig` checks them)."""
        from common.errors import UserError
        from common.training.config import TrainingConfig

        training = to_dict(from_dict(TrainingConfig, config.training))
        config = dataclasses.replace(config, training=training)
        self.family.check_config(config)
        known = self.family.validation_metrics
        metric = training["best_metric"]
        if known and metric not in (None, "auto") and metric not in known:
            raise UserError(f"--best-metric {metric!r}: the {self.family.name} validation "
                            f"reports {', '.join(known)}; expected one of them, auto or none")
        return config

    def train(self, config: Any, resume: bool = False, verbose: int = 1,
              init_from: str | None = None) -> list[dict[str, Any]]:
        """Train `config` into the run directory; `init_from` "RUN_DIR[:CHECKPOINT]" starts
        from another run's weights (see `WarmStart`)."""
        from common.training.config import refuse_jax_dropout_rng
        from common.training.distribute import chief_task

        refuse_jax_dropout_rng((config.training or {}).get("dropout_rng", "keras"))
        warm = WarmStart.parse(init_from, self.family) if init_from else None
        with terminated_as_interrupt(), taken_back_on_failure(self.run, resume,
                                                              writer=chief_task):
            return self.family.train(config, self.run.path, resume=resume, verbose=verbose,
                                     init_from=warm)

    def evaluate(self, args: argparse.Namespace) -> dict[str, Any]:
        return self.family.evaluate(self.run.path, args)

    def predict(self, inputs: list[Any], **options: Any) -> list[Any]:
        """Predict with the run directory (or a SavedModel at its path)."""
        return self.family.predict(self.family.open_model(self.run.path), inputs, **options)

    def prepare(self, config: Any) -> Path:
        """Write the run directory's path as a prepared folder of `config` (tokenized,
        bucketed data as NumPy arrays, vocabularies, config), what the JAX trainer reads."""
        return self.family.prepare(config, self.run.path)

    def train_jax(self, prepared: str | os.PathLike, options: argparse.Namespace | None = None,
                  resume: bool = False, verbose: int = 1, model_parallel: int = 1
                  ) -> list[dict[str, Any]]:
        """Train the prepared folder's model into the run directory on Keras's JAX backend
        (`common.training.jax_trainer`), over every visible device by default.

        The model and data come from the folder; of `options` only the training settings
        apply, `distribute` being the JAX one (none, data-parallel, model-parallel, with
        `model_parallel` devices on the model axis). A resumed run keeps its own training
        settings (`RUN_DIR/config.json`), as on TensorFlow; the options given change them.
        Settings of the TensorFlow trainer that the JAX one does not honour
        (`common.training.capabilities.CAPABILITIES`), given as options, are refused rather
        than dropped.
        """
        from common.config import load_json
        from common.errors import UserError
        from common.training.capabilities import refuse_unsupported

        folder = Path(prepared)
        saved = load_json(folder / RunDir.config) if (folder / RunDir.config).is_file() else None
        if not isinstance(saved, dict) or saved.get("family") != self.family.name:
            raise UserError(f"--prepared {prepared}: not a folder of `{self.family.name} "
                            "prepare` (no config.json of this family)")
        flags = config_overrides(options, None, saved) if options is not None else {}
        refuse_unsupported(flags.get("training", {}), "jax", "with --prepared",
                           sections=flags, family=self.family.capabilities)
        others = sorted(key for key in flags if key != "training")
        if others:
            raise UserError(f"--prepared {prepared}: the model and data come from the prepared "
                            f"folder; options of {', '.join(others)} apply to `prepare`")
        return self._train_prepared(folder, flags.get("training", {}), resume, verbose,
                                    model_parallel)

    def _train_prepared(self, folder: Path, given: dict[str, Any] | None, resume: bool,
                        verbose: int, model_parallel: int) -> list[dict[str, Any]]:
        """`train_jax` of the prepared `folder` with the training settings `given` over the
        folder's (or, resumed, the run's)."""
        from common.config import load_json
        from common.errors import UserError
        from common.training.jax_trainer import resumed_training, train_jax

        given = given or {}
        saved = load_json(folder / RunDir.config)
        training = deep_merge(resumed_training(self.run.path, saved.get("training", {}), resume),
                              given)
        distribute = given.get("distribute", "data-parallel")
        if model_parallel != 1 and distribute != "model-parallel":
            raise UserError(f"--model-parallel {model_parallel} needs --distribute "
                            "model-parallel")
        training["distribute"] = "none"  # TrainingConfig names TensorFlow's strategies
        with terminated_as_interrupt(), taken_back_on_failure(self.run, resume,
                                                              writer=_first_jax_process):
            return train_jax(folder, self.run.path, training=training,
                             distribute="data-parallel" if distribute == "auto" else distribute,
                             model_parallel=model_parallel, resume=resume, verbose=verbose)

    def train_jax_from_data(self, config: Any, distribute: str | None = None,
                            resume: bool = False, verbose: int = 1,
                            model_parallel: int = 1) -> list[dict[str, Any]]:
        """`train` on Keras's JAX backend from the run's data, as the TensorFlow trainer takes
        it: `config` (merged as for TensorFlow: the preset, the config file, the options) is
        prepared into `RUN_DIR/prepared/` first (`Family.prepare`, which reads the data with
        TensorFlow's tokenizer and image decoding), then trained by `train_jax`. A resumed run
        trains on the folder it prepared. What the JAX trainer does not honour is refused in
        one line before anything is written, whether a flag, the preset or the config file
        set it (`common.training.capabilities`).

        Raises:
            UserError: such a setting; or no TensorFlow here to prepare the data with (the GPU
                machine): `prepare` where it is, then `train --prepared`.
        """
        import importlib.util

        from common.errors import UserError
        from common.training.capabilities import explicit_settings, refuse_unsupported

        refuse_unsupported(explicit_settings(config.training or {}), "jax",
                           "on KERAS_BACKEND=jax", sections=dataclasses.asdict(config),
                           family=self.family.capabilities)
        folder = self.run.prepared
        if not (resume and (folder / RunDir.config).is_file()):
            if importlib.util.find_spec("tensorflow") is None:
                raise UserError(
                    "no TensorFlow here to read the data with: run `"
                    f"{self.family.name} prepare ... --out DIR` where it is installed, then "
                    f"`KERAS_BACKEND=jax {self.family.name} train --prepared DIR ...`")
            self.run.claim(resume, first=not resume, backend="jax")
            if folder.exists():  # a start that stopped before training: prepared again
                shutil.rmtree(folder)
            self.family.prepare(config, folder)
        training = {"distribute": distribute} if distribute else None
        return self._train_prepared(folder, training, resume, verbose, model_parallel)

    def average(self, out_dir: str | os.PathLike, last: int) -> Path:
        """Average the weights of the run's last `last` checkpoints into a new run directory.

        The new run holds the config and vocabularies of this one and one checkpoint of the
        averaged weights, named as the newest checkpoint averaged (`checkpoints/ckpt-STEP`;
        model entries only: it evaluates, decodes, exports and warm-starts, it does not
        resume); its `status.json` says which checkpoints went in.

        Raises:
            UserError: fewer than `last` complete checkpoints, or `out_dir` holds a run.
        """
        import shutil

        from common.errors import UserError
        from common.training.checkpoints import (
            average_checkpoints,
            complete_checkpoints,
            write_model_checkpoint,
        )

        found = complete_checkpoints(self.run.checkpoints)
        if last < 1 or len(found) < last:
            jax_dir = self.run.jax_checkpoints
            hint = ("train with --keep-checkpoints N to keep more" if found or not jax_dir.is_dir()
                    else f"this run trained on JAX: its checkpoints are in {jax_dir}, averaged "
                         "by JaxTrainer.average_checkpoints (docs/jax.md)")
            raise UserError(f"--last {last}: {self.run.checkpoints} has {len(found)} complete "
                            f"checkpoint(s); expected at least {max(last, 1)} ({hint})")
        paths = found[:last]
        out = RunDir(out_dir)
        if out.path.resolve() == self.run.path.resolve():
            raise UserError(f"{out_dir}: the averaged run needs a directory of its own")
        model = self.family.open_model(self.run.path).model  # a run of this family, first
        files = self.family.vocabulary_files(self.family.load_config(self.run.path))
        before = _present(out)
        out.claim(resume=False, first=True)  # refuses a directory that holds a run
        average_checkpoints(model, paths)
        # All or nothing: a failed write (a full disk) takes back what was written, so that
        # the same command runs again into the same directory.
        try:
            with failed_writes_named(out.path):
                for name in (RunDir.config, *files):
                    shutil.copyfile(self.run.path / name, out.path / name)
                out.record_vocabularies(files)
                # named as the newest checkpoint averaged: the step it ends at
                write_model_checkpoint(model, out.checkpoints / Path(paths[0]).name)
                out.write_status("finished", averaged=[str(Path(p)) for p in paths],
                                 source=str(self.run.path))
        except BaseException:
            _take_back(out, before, entries=True)
            raise
        return out.path

    def export(self, out_dir: str | os.PathLike, **options: Any) -> Path:
        """Write a self-contained SavedModel of the run (`export_run` of the family)."""
        import importlib

        module = importlib.import_module(self.family.export_module)
        return module.export_run(self.run.path, out_dir, **options)


class Terminated(KeyboardInterrupt):
    """A SIGTERM (`kill PID`, a scheduler stopping a job) while a run trains, raised as Ctrl-C
    raises `KeyboardInterrupt`, so that the same clean-up runs: the trainers write status
    "failed" (error "Terminated: SIGTERM received") and a new run takes back its files.

    Attributes:
        signum: the signal's number (the command line exits with 128 + it).
    """

    def __init__(self, signum: int):
        super().__init__(f"{signal.Signals(signum).name} received")
        self.signum = signum


@contextlib.contextmanager
def terminated_as_interrupt() -> Iterator[None]:
    """Inside the block, SIGTERM raises `Terminated` rather than end the process on the spot
    (its default, which leaves `status.json` saying "training"). A second SIGTERM ends it at
    once. A handler installed by someone else, and a block outside the main thread (where
    Python runs handlers), are left as they are."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signum, signal.SIG_DFL)  # the next one is not caught
        raise Terminated(signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def taken_back_on_failure(run: RunDir, resume: bool,
                          writer: Callable[[], bool] = lambda: True) -> Iterator[None]:
    """A new run that fails before its trainer holds the directory takes back what it wrote.

    Its config and vocabularies are written before training starts; a refusal after them (an
    option the data cannot serve, a warm start of another vocabulary, a full disk), or an
    interruption, would leave files that make the corrected command refuse the directory.
    When the run fails with none of the trainer's entries yet (`RunDir.run_entries`: no
    checkpoint, log, history or status), the family files that were not there before, the
    empty entry folders and the directory itself, when this made it, are removed; a user's
    files and anything of a run are kept. `writer()` says whether this process is the one
    that writes the run (not a non-chief worker of a cluster, whose failure would otherwise
    take the chief's files away); a resumed run is left as it is.
    """
    if resume:
        yield
        return
    before = _present(run)
    try:
        yield
    except BaseException:
        if writer() and not run.run_entries():
            _take_back(run, before)
        raise


_ENTRIES = ("checkpoints", "logs", "best", "history", "status")


def _present(run: RunDir) -> set[Path]:
    """What of a run `run.path` holds (its own path too, when it exists)."""
    paths = (run.path, *run.own_files(), *(getattr(run, name) for name in _ENTRIES))
    return {path for path in paths if path.exists()}


def _take_back(run: RunDir, before: set[Path], entries: bool = False) -> None:
    """Remove the family files of `run` that are not in `before`, and with `entries` the
    trainer's entries too; then its empty entry folders and, when `before` did not hold it,
    the directory itself if empty. What cannot be removed stays: the failure is the news."""
    import shutil

    try:
        for path in run.own_files():
            if path not in before and path.is_file():
                path.unlink()
        for path in (getattr(run, name) for name in _ENTRIES):
            if path in before or not path.exists():
                continue
            if not path.is_dir():
                if entries:
                    path.unlink()
            elif entries:
                shutil.rmtree(path)
            elif not any(path.iterdir()):
                path.rmdir()
        if run.path not in before and run.path.is_dir() and not any(run.path.iterdir()):
            run.path.rmdir()
    except OSError:
        pass


def _first_jax_process() -> bool:
    import jax

    return jax.process_index() == 0


@dataclasses.dataclass(frozen=True)
class WarmStart:
    """Another run's checkpoint to start a new run from (`train --init-from`).

    Args:
        run_dir: the run the weights come from.
        checkpoint: its checkpoint (`common.training.checkpoints.resolve_checkpoint`).
        vocabularies: the family's vocabulary file names, which must be the same in both runs.
    """

    run_dir: Path
    checkpoint: str
    vocabularies: tuple[str, ...]

    @classmethod
    def parse(cls, spec: str, family: Family) -> WarmStart:
        """`RUN_DIR` or `RUN_DIR:CHECKPOINT` (best, last, a number or a path)."""
        from common.errors import UserError
        from common.training.checkpoints import resolve_checkpoint

        path, sep, which = spec.rpartition(":")
        if not sep or not path or not Path(path).is_dir():
            path, which = spec, None
        run = RunDir(path)
        if not run.config.is_file():
            raise UserError(f"--init-from {spec}: {path} is not a run directory (no "
                            f"{RunDir.config})")
        config = family.load_config(run.path)  # the same family, readable
        run.check_vocabularies()  # those of its weights: the new run's are compared with them
        checkpoint = resolve_checkpoint(run.path, which, option=f"--init-from {path}:")
        if not Path(checkpoint).resolve().is_relative_to(run.path.resolve()):
            # Its vocabularies are checked against the run's: the weights must be that run's.
            raise UserError(f"--init-from {spec}: {checkpoint} is not a checkpoint of {path}; "
                            "expected RUN_DIR:CHECKPOINT with the checkpoint inside RUN_DIR")
        return cls(run.path, checkpoint, family.vocabulary_files(config))

    def check_vocabulary(self, name: str, tokens: list[str]) -> None:
        """Raise a one-line `UserError` unless the new run's vocabulary `name` (one of
        `vocabularies`) holds the same `tokens` as the run the weights come from."""
        from common.errors import UserError

        if name not in self.vocabularies:
            raise UserError(
                f"--init-from {self.run_dir}: it has no {name} (its vocabularies: "
                f"{', '.join(self.vocabularies)}); expected the same kind of vocabulary "
                "(same --vocab and --shared-vocab)")
        theirs = _tokens(self.run_dir / name)
        if tokens == theirs:
            return
        where = next((i for i, (a, b) in enumerate(zip(tokens, theirs)) if a != b),
                     min(len(tokens), len(theirs)))
        raise UserError(
            f"--init-from {self.run_dir}: its {name} differs from this run's ({len(theirs)} vs "
            f"{len(tokens)} tokens; first difference at id {where}: {_token(tokens, where)} "
            f"here, {_token(theirs, where)} there); expected the same vocabulary (same data "
            "and vocabulary options)")


_MISSING = object()


def _refuse_changes(family: Any, saved: Any, explicit: Mapping[str, Any],
                    preset: str | None) -> None:
    """A resumed run keeps its model and data: an option, config file or preset that would
    change them is refused in one line, rather than silently dropped. The same command again
    with `--resume` changes nothing, so it passes."""
    from common.errors import UserError

    before = to_dict(saved)
    # A preset is held to the run as options are (options over it, as for a new run).
    layer = family.preset(preset, deep_merge(before, explicit)) if preset else {}
    others = {k: v for k, v in deep_merge(layer, explicit).items() if k != "training"}
    if not others:
        return
    after = to_dict(merge_config(family.config_class, before, others))
    changed = [f"{path} {_get_path(after, path)!r} (the run has {_get_path(before, path)!r})"
               for path in differing_paths(before, after)
               if path.split(".")[0] != "training" and path not in family.resume_fields]
    if changed:
        raise UserError(f"--resume keeps the run's model and data; these settings differ from "
                        f"it: {'; '.join(changed)}")


def _get_path(data: Mapping[str, Any], path: str) -> Any:
    """`data["a"]["b"]` for "a.b", or `_MISSING`."""
    for key in path.split("."):
        if not isinstance(data, Mapping) or key not in data:
            return _MISSING
        data = data[key]
    return data


def _tokens(path: Path) -> list[str]:
    """The tokens of a vocabulary file: a word list, or a SentencePiece model's pieces."""
    if not path.is_file():
        return []
    if path.suffix == ".model":
        from common.text.subwords import SubwordVocabulary

        return SubwordVocabulary.load(path).tokens
    return path.read_text(encoding="utf-8").splitlines()


def _token(tokens: list[str], index: int) -> str:
    return repr(tokens[index]) if index < len(tokens) else "none"


def _declarations(family: Family, options: Any) -> tuple | None:
    """The option declarations: those of a parsed namespace, or the family's own."""
    if isinstance(options, argparse.Namespace):
        return None
    from common.options import config_declarations

    return config_declarations(family)
