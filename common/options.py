"""The option types and the config options of the command lines, importable without Keras.

The argparse types every command line uses (`positive_int`, `beam_size_list`, ...) and the
`train` options that set a run's config (`add_config_options`: the family's, then those of
`common.training.TrainingConfig`). `config_declarations(family)` gives those options'
declarations without a command line, for `common.runner.Runner.make_config` called with a
mapping of option names (the Python API, the scripts). `common.cli` re-exports them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from common.errors import UserError

# The action of a config flag: `--X` sets it, `--no-X` clears it (what a preset turned on can be
# turned off on the command line), and neither leaves the preset's value.
ON_OFF = argparse.BooleanOptionalAction


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def seed_number(text: str) -> int:
    """argparse type: a random seed, 0..2**32 - 1 (what NumPy's and Keras's seeding take)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to 2**32 - 1, got {text!r}")
    return value


def labelled_run(text: str) -> tuple[str, str]:
    """argparse type: a run given as `LABEL=RUN_DIR`, or a bare `RUN_DIR` labelled by its
    folder name.

    Example:
    >>> labelled_run("noattn=runs/a"), labelled_run("runs/b")
    (('noattn', 'runs/a'), ('b', 'runs/b'))
    """
    from pathlib import Path

    label, sep, path = text.partition("=")
    label, path = (label, path) if sep else (Path(text).name, text)
    if not label or not path:
        raise argparse.ArgumentTypeError(f"expected LABEL=RUN_DIR or RUN_DIR, got {text!r}")
    return label, path


def check_distinct_labels(runs: Sequence[tuple[str, str]]) -> None:
    """Refuse, in one line, one label given to two runs of `labelled_run` (the second's
    results would replace the first's)."""
    labels = [label for label, _ in runs]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise UserError(f"the label {repeated[0]!r} is given to more than one run; give each its "
                        "own (LABEL=RUN_DIR)")


def port_number(text: str) -> int:
    """argparse type: a TCP port, 1..65535."""
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 1 to 65535, got {value}")
    return value


def non_negative_float(text: str, bound: str = ">= 0") -> float:
    """argparse type: a finite float >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0 or value == float("inf") or (bound == "> 0" and value == 0):
        raise argparse.ArgumentTypeError(f"expected a finite number {bound}, got {text}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite float > 0."""
    return non_negative_float(text, "> 0")


def beam_size_list(text: str) -> tuple[int, ...]:
    """argparse type: comma-separated positive integers (`--beam-sizes 1,2,4`)."""
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers like 1,2,4, got {text!r}")
    return sizes


def distinct_list(kind: Callable[[str], Any] = int) -> Callable[[str], list]:
    """argparse type: comma-separated distinct values >= 0 of `kind` (`--seeds 1,2,3`,
    `--length-penalties 0.6,1.0`)."""
    def parse(text: str) -> list:
        try:
            values = [kind(part) for part in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a comma-separated list: {text!r}") from None
        if not values or min(values) < 0 or len(set(values)) != len(values):
            raise argparse.ArgumentTypeError(f"expected distinct values >= 0, got {text!r}")
        return values
    return parse


def add_config_options(parser: argparse.ArgumentParser, family: Any) -> None:
    """Every `train` option that sets the config: the family's, then the training ones."""
    family.add_train_arguments(parser)
    add_training_options(parser.add_argument_group("training (override the preset)"))


def add_training_options(group: Any) -> None:
    """The `train` options of `common.training.TrainingConfig`, every family's `training`."""
    from common.config import add_config_option

    def add(flag: str, **kwargs: Any) -> None:
        field = flag[2:].replace("-", "_")
        add_config_option(group, flag, path=f"training.{field}", **kwargs)

    add("--epochs", type=positive_int, help="passes to train (each --steps-per-epoch long)")
    add("--steps-per-epoch", type=positive_int,
        help="steps per epoch (default: one pass over the training data; more repeats it)")
    add("--batch-size", type=positive_int, help="examples per step (the global batch)")
    add("--learning-rate", type=positive_float,
        help="Adam's learning rate (the Transformer's peak after warm-up)")
    add("--clip-norm", type=positive_float, help="clip the gradient to this global norm")
    add("--seed", type=int, help="seeds the weights, data order and dropout (0 to 2**32-1)")
    add("--deterministic", action=ON_OFF,
        help="bit-identical runs for one seed (op determinism, no graph rewriting)")
    add("--checkpoint-every", type=int, metavar="N",
        help="also save a checkpoint every N steps (0: at epoch ends only)")
    add("--precision", choices=("auto", "float32", "mixed_float16", "mixed_bfloat16"),
        help="mixed_float16 adds loss scaling; auto (the default): bfloat16 on GPUs of compute "
             "capability 8+, float16 on 7.x, float32 on CPU")
    add("--jit-compile", action=ON_OFF,
        help="compile the training step with XLA (default: on with a GPU)")
    add("--keep-checkpoints", type=positive_int, metavar="N",
        help="how many of the latest checkpoints to keep (the best one is kept apart)")
    add("--validation-examples", type=int, metavar="N",
        help="after each epoch, decode the first N validation examples and score them (0: "
             "no validation)")
    add("--validation-beam-size", type=positive_int, metavar="K",
        help="the beam size of that decoding (1: greedy)")
    add("--best-metric", metavar="NAME",
        help="keep the checkpoint of the best validation by this metric in RUN_DIR/best/ "
             "(translators: bleu, chrf, exact_match; captioner: cider, bleu_4); auto (the "
             "default): the family's first, none: keep no best")
    add("--best-mode", choices=("max", "min"), help="whether higher or lower is better")
    add("--early-stopping", type=int, metavar="PATIENCE",
        help="stop after PATIENCE validations without a better --best-metric (0: never)")
    add("--distribute", help="none, mirrored, multi-worker or auto")
    # `logical_cpus` and `dropout_rng`, for experiments and the GPU lab, have no option: a
    # config file sets them (docs/training.md, "Settings only a config file sets").


def config_declarations(family: Any) -> tuple:
    """The declarations (`common.config.add_config_option`) of every `train` option of
    `family` that sets the config, as a parsed command line carries them."""
    from common.config import OPTIONS_DEST

    parser = argparse.ArgumentParser(add_help=False)
    add_config_options(parser, family)
    return parser.get_default(OPTIONS_DEST) or ()
