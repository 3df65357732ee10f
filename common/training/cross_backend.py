"""Weights that cross backends: a run trained on JAX, made readable by the TensorFlow side.

`common.training.jax_trainer` leaves `RUN_DIR/model.weights.h5` (Keras's backend-neutral
weights file) beside the run's `config.json` and vocabularies. `import_jax_weights(run_dir)`
builds the same model with TensorFlow through the hooks of the family the config names
(`Family.build_model`, `Family.create_variables`), loads that file
and writes it as `RUN_DIR/checkpoints/ckpt-N` with `write_model_checkpoint`, the checkpoint
every TensorFlow command reads (`evaluate`, `translate`/`caption`, `export`):

    KERAS_BACKEND=jax seq2seq train --prepared PREPARED --out RUN ...   # on the GPU machine
    python -c "from common.training.cross_backend import import_jax_weights as i; i('RUN')"
    seq2seq export RUN export/RUN                                   # TensorFlow, as ever
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from common.config import load_json
from common.errors import UserError
from common.family import family_named
from common.training.best import best_weights_file
from common.training.jax_trainer import WEIGHTS_FILE


def import_jax_weights(run_dir: str | os.PathLike,
                       weights: str | os.PathLike | None = None) -> str:
    """Write the JAX run's weights as the run's next TensorFlow checkpoint; returns its path.

    Args:
        run_dir: a run directory written by the JAX trainer.
        weights: the `.weights.h5` to import (default: the best, `RUN_DIR/best/
            model.weights.h5`, where the run keeps one, else `RUN_DIR/model.weights.h5`; a
            checkpoint's `RUN_DIR/jax/ckpt-STEP/model.weights.h5` works too).

    Raises:
        UserError: not a run directory, or no weights file.
    """
    from common.training.checkpoints import write_model_checkpoint

    run_dir = Path(run_dir)
    config = load_json(run_dir / "config.json") if run_dir.is_dir() else None
    if not isinstance(config, dict) or "family" not in config:
        raise UserError(f"{run_dir}: not a run directory (no config.json with a family)")
    weights = Path(weights or best_weights_file(run_dir) or run_dir / WEIGHTS_FILE)
    if not weights.is_file():
        raise UserError(f"{weights}: no such weights file; expected the JAX trainer's "
                        f"{WEIGHTS_FILE}")
    family = family_named(config["family"])
    sizes = {}
    for name, file in family.prepared_layout().vocabularies.items():
        if not (run_dir / file).is_file():
            raise UserError(f"{run_dir / file}: missing; expected the run's vocabulary")
        sizes[name] = len((run_dir / file).read_text(encoding="utf-8").splitlines())
    model = family.build_model(config, sizes)
    family.create_variables(model, config)
    model.load_weights(weights)
    checkpoints = run_dir / "checkpoints"
    step = _weights_step(run_dir, weights)
    if step is None:  # weights from elsewhere: the number after the run's newest
        numbers = [int(m.group(1)) for p in checkpoints.glob("ckpt-*.index")
                   if (m := re.fullmatch(r"ckpt-(\d+)\.index", p.name))]
        step = max(numbers, default=0) + 1
    return write_model_checkpoint(model, checkpoints / f"ckpt-{step}")


def _weights_step(run_dir: Path, weights: Path) -> int | None:
    """The training step a JAX run's weights file holds, for the checkpoint's name (the one
    numbering of `--checkpoint N`): a checkpoint's (`jax/ckpt-STEP/`), the best's
    (`best.json`), the run's last (`status.json`); None when not known."""
    if re.fullmatch(r"ckpt-\d+", weights.parent.name) and weights.parent.name[5:].isascii():
        return int(weights.parent.name[5:])
    best = best_weights_file(run_dir)
    file = (weights.parent / "best.json" if best is not None and weights == Path(best)
            else run_dir / "status.json" if weights == run_dir / WEIGHTS_FILE else None)
    record = load_json(file) if file is not None and file.is_file() else None
    step = record.get("step") if isinstance(record, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None
