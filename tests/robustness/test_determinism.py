"""The same seed and data give the same model, bit for bit, and so the same translations and
captions; another seed gives another model (so the comparison is not vacuous)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from captioner.cli import main as captioner_main
from common.training.checkpoints import latest_checkpoint
from seq2seq.cli import main as seq2seq_main

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SENTENCES = ["March 3, 1999", "25th of November 2026", "3/3/1999", "the 7th of July, 2001"]


def checkpoint_tensors(run_dir: Path) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(latest_checkpoint(run_dir / "checkpoints"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def assert_same_tensors(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_translator_trained_twice_with_one_seed_translates_identically(tmp_path, capsys):
    argv = ["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
            "--steps-per-epoch", "12", "--dropout", "0.2", "--verbose", "0"]
    outputs, tensors = [], []
    for name, seed in (("a", "5"), ("b", "5"), ("other", "6")):
        run = tmp_path / name
        assert seq2seq_main([*argv, "--seed", seed, "--out", str(run)]) == 0
        tensors.append(checkpoint_tensors(run))
        if name == "other":
            break
        capsys.readouterr()
        assert seq2seq_main(["translate", str(run), *SENTENCES, "--json",
                             "--beam-size", "2"]) == 0
        outputs.append(capsys.readouterr().out)
    assert_same_tensors(tensors[0], tensors[1])
    assert outputs[0] == outputs[1]  # tokens, scores and attention, as printed
    assert any(not np.array_equal(tensors[0][k], tensors[2][k]) for k in tensors[0]
               if "model_variables" in k)


def test_captioner_trained_twice_with_one_seed_captions_identically(tmp_path, capsys):
    argv = ["train", "--preset", "tiny", "--steps-per-epoch", "8", "--dropout", "0.2",
            "--seed", "5"]
    images = [str(p) for p in sorted((REPO / "assets" / "samples").glob("*.png"))]
    assert images
    outputs, tensors = [], []
    for name in ("a", "b"):
        run = tmp_path / name
        assert captioner_main([*argv, "--out", str(run)]) == 0
        tensors.append(checkpoint_tensors(run))
        capsys.readouterr()
        assert captioner_main(["caption", str(run), *images, "--json"]) == 0
        outputs.append(capsys.readouterr().out)
    assert_same_tensors(*tensors)
    assert outputs[0] == outputs[1] and outputs[0].strip()
