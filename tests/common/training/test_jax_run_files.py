"""What the TensorFlow side reads of a run trained on JAX, and a damaged JAX checkpoint, on
files alone (no JAX needed)."""

import json

import numpy as np
import pytest

from common.errors import DataError
from common.training.checkpoints import jax_run_weights
from common.training.jax_trainer import (
    POSITION_FILE,
    STATE_FILE,
    WEIGHTS_FILE,
    JaxTrainer,
    complete_jax_checkpoints,
)
from common.training.run_dir import RunDir


def _checkpoint(run, step):
    folder = run / "jax" / f"ckpt-{step}"
    folder.mkdir(parents=True)
    for name in (WEIGHTS_FILE, STATE_FILE, POSITION_FILE):
        (folder / name).write_bytes(b"")
    return folder


@pytest.mark.parametrize("state, has_final, expected", [
    ("finished", True, "final"),   # the final weights, which equal the newest checkpoint's
    ("training", True, "newest"),  # resumed: the final file is of the run's earlier finish
    ("failed", True, "newest"),
    (None, True, "newest"),        # killed before any status
    ("training", False, "newest"),  # killed before its first finish
])
def test_a_jax_run_is_read_from_its_newest_weights(tmp_path, state, has_final, expected):
    run = tmp_path / "run"
    run.mkdir()
    _checkpoint(run, 4)
    newest = _checkpoint(run, 10)
    if has_final:
        (run / WEIGHTS_FILE).write_bytes(b"")
    if state is not None:
        (run / "status.json").write_text(json.dumps({"state": state}))
    found = jax_run_weights(RunDir(run))
    assert found == (run / WEIGHTS_FILE if expected == "final" else newest / WEIGHTS_FILE)


def test_a_run_with_no_jax_weights_is_not_a_jax_run(tmp_path):
    assert jax_run_weights(RunDir(tmp_path)) is None
    (tmp_path / WEIGHTS_FILE).write_bytes(b"")
    assert jax_run_weights(RunDir(tmp_path)) == tmp_path / WEIGHTS_FILE


@pytest.mark.parametrize("damage", ["truncated", "not a zip"])
def test_a_damaged_jax_checkpoint_is_one_line_naming_its_file(tmp_path, damage):
    folder = _checkpoint(tmp_path, 6)
    with open(folder / STATE_FILE, "wb") as f:
        np.savez(f, t00000=np.ones(3, np.float32))
    data = (folder / STATE_FILE).read_bytes()
    (folder / STATE_FILE).write_bytes(data[: len(data) // 2] if damage == "truncated"
                                      else b"garbage")
    assert complete_jax_checkpoints(tmp_path / "jax") == [folder]
    with pytest.raises(DataError, match=f"{folder / STATE_FILE}: cannot be read") as caught:
        JaxTrainer._read_state(folder)
    assert "move the folder away to use the one before" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_jax_run_records_what_it_does_for_each_setting_it_does_not_honour():
    from common.training.capabilities import CAPABILITIES
    from common.training.config import TrainingConfig
    from common.training.jax_trainer import JAX_TRAINING_FACTS

    refused_on_jax = {name for name, c in CAPABILITIES.items()
                      if "jax" not in c.backends and c.section == "training"}
    assert set(JAX_TRAINING_FACTS) == refused_on_jax
    TrainingConfig(**JAX_TRAINING_FACTS)  # a valid config, so a resumed run reads it back


@pytest.mark.parametrize("given, backend, refused", [
    ({"validation_beam_size": 3, "deterministic": True, "logical_cpus": 2}, "jax",
     "--deterministic needs the tensorflow trainer, --logical-cpus needs the tensorflow "
     "trainer (not the jax one"),
    ({"validation_beam_size": 3}, "jax", None),  # both validate by beam search
    ({"jit_compile": False}, "jax", "--jit-compile needs the tensorflow trainer"),
    ({"validation_beam_size": 1, "validation_examples": 50, "early_stopping": 2,
      "best_metric": "bleu", "best_mode": "min"}, "jax", None),
    ({"validation_beam_size": 3, "deterministic": True, "logical_cpus": 2}, "tensorflow", None),
])
def test_the_capability_table_refuses_in_one_line_naming_the_backend(given, backend, refused):
    from common.errors import UserError
    from common.training.capabilities import refuse_unsupported

    if refused is None:
        refuse_unsupported(given, backend, "here")
        return
    with pytest.raises(UserError) as caught:
        refuse_unsupported(given, backend, "here")
    assert refused in str(caught.value) and "\n" not in str(caught.value)


def test_a_folder_named_with_a_non_ascii_digit_is_not_a_checkpoint(tmp_path):
    """`str.isdigit` accepts "²", which `int` refuses: such a folder is passed over."""
    newest = _checkpoint(tmp_path, 12)
    _checkpoint(tmp_path, "²")
    older = _checkpoint(tmp_path, 3)
    assert complete_jax_checkpoints(tmp_path / "jax") == [newest, older]
