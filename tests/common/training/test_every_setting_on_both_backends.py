"""Every training setting is honoured by both backends' trainers or refused from one table
(`common/training/capabilities.py`, and a family's `Family.capabilities`): none is dropped
silently, whether a flag, a preset or a config file gives it.

The JAX trainer honours a `TrainingConfig` field when its code reads it: the test reads the
modules it runs (the trainer, the loop they share, the best checkpoint, the validation) for
the field's name as an attribute (`config.batch_size`, `training.best_mode`); a field neither
read there nor in the table fails it. Each refused setting is then refused in one line, as an
option and from a config file; and every option of both families' `train` parsers sets a
field of their config, so the walk covers what a user can give.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from common.errors import UserError
from common.training.capabilities import CAPABILITIES, explicit_settings, refuse_unsupported
from common.training.config import TrainingConfig

REPO = Path(__file__).resolve().parents[3]
# What the JAX trainer runs: its own module and what it shares with the TensorFlow one.
JAX_PATH = ["common/training/jax_trainer.py", "common/training/loop.py",
            "common/training/best.py", "common/training/validation.py", "common/runner.py"]
# Settings that choose where the run goes rather than how it trains: the JAX trainer takes
# its own `--distribute` names (none, data-parallel, model-parallel: `Runner.train_jax`).
PLACEMENT = {"distribute"}


def _attributes_read(paths: list[str]) -> set[str]:
    names = set()
    for path in paths:
        for node in ast.walk(ast.parse((REPO / path).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
    return names


def test_every_training_field_is_read_by_the_jax_trainer_or_refused_there():
    read = _attributes_read(JAX_PATH)
    refused = {name for name, c in CAPABILITIES.items()
               if c.section == "training" and "jax" not in c.backends}
    for field in dataclasses.fields(TrainingConfig):
        honoured = field.name in read or field.name in PLACEMENT
        assert honoured != (field.name in refused), (
            f"{field.name}: {'read and refused' if honoured else 'neither read nor refused'} "
            "on JAX")


@pytest.mark.parametrize("name", sorted(n for n, c in CAPABILITIES.items()
                                        if c.section == "training"))
def test_each_refused_setting_is_one_line_from_an_option_or_a_config_file(name):
    field = next(f for f in dataclasses.fields(TrainingConfig) if f.name == name)
    value = {bool: True, int: 2}.get(type(field.default), True)
    if name == "jit_compile":
        value = False
    for given in ({name: value},  # an option
                  explicit_settings({**dataclasses.asdict(TrainingConfig()), name: value})):
        with pytest.raises(UserError) as caught:
            refuse_unsupported(given, "jax", "here")
        message = str(caught.value)
        assert f"--{name.replace('_', '-')}" in message and "\n" not in message
    refuse_unsupported({name: value}, "tensorflow", "here")  # the TensorFlow trainer's own


def test_the_defaults_are_never_refused():
    assert explicit_settings(dataclasses.asdict(TrainingConfig())) == {}
    refuse_unsupported(explicit_settings(dataclasses.asdict(TrainingConfig())), "jax", "here")


@pytest.mark.parametrize("family_name", ["captioner", "seq2seq"])
def test_every_train_option_sets_a_config_field_of_its_family(family_name, tmp_path):
    """Each `--option` of `train` that sets the run's config sets a path that exists in the
    family's config (so the table and the prepared config see it); a config file with every
    training field at a non-default value reads back whole."""
    from common.cli import SubcommandParser, add_config_options
    from common.config import OPTIONS_DEST, to_dict
    from common.family import family_named

    family = family_named(family_name)
    parser = SubcommandParser(add_help=False)
    add_config_options(parser, family)
    declarations = parser.get_default(OPTIONS_DEST) or ()
    assert declarations, "the parser declares the options that set the config"
    config = to_dict(family.config_class())
    for declaration in declarations:
        paths = declaration.path if isinstance(declaration.path, (list, tuple)) else [
            declaration.path]
        for path in paths:
            if not isinstance(path, str):
                continue  # a path function: it reads the config merged so far
            node = config
            for part in path.split(".")[:-1]:
                assert part in node, (declaration, path)
                node = node[part]
            last = path.split(".")[-1]
            assert last in node or path.startswith("training.") or isinstance(node, dict), (
                declaration, path)
    file = tmp_path / "training.json"
    file.write_text(json.dumps({"training": {"early_stopping": 3, "keep_checkpoints": 5}}))
    assert explicit_settings({**dataclasses.asdict(TrainingConfig()), **json.loads(
        file.read_text())["training"]}) == {"early_stopping": 3, "keep_checkpoints": 5}
