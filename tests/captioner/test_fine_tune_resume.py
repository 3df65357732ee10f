"""`captioner train --resume --fine-tune N`: the encoder's top N layers train from that point."""

import json

import keras
import numpy as np
import pytest

from captioner.cli import main

TRAIN = ["train", "--preset", "tiny", "--encoder", "mobilenet_v3_small", "--weights", "none",
         "--image-size", "32", "--validation-examples", "0", "--verbose", "0"]


def _backbone_weights(run_dir, checkpoint):
    from captioner.inference import load_run

    backbone = load_run(run_dir, checkpoint).model.encoder.backbone
    weighted = [layer for layer in backbone.layers if layer.weights]
    return [[keras.ops.convert_to_numpy(w.value) for w in layer.weights] for layer in weighted]


@pytest.mark.slow
def test_resume_with_fine_tune_trains_the_top_layers_from_there(tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*TRAIN, "--epochs", "1", "--out", str(run)]) == 0
    assert main([*TRAIN, "--epochs", "2", "--fine-tune", "3", "--resume", "--out", str(run),
                 "--verbose", "1"]) == 0
    out = capsys.readouterr().out
    assert "Fine-tuning the encoder's top 3 layers from here on (a new optimizer)" in out
    assert json.loads((run / "config.json").read_text())["encoder"]["fine_tune"] == 3

    # Checkpoints are named by step: the first epoch's and the second's.
    first, second = sorted(int(p.stem.split("-")[1]) for p in (run / "checkpoints").glob("ckpt-*.index"))
    before, after = _backbone_weights(run, str(first)), _backbone_weights(run, str(second))
    changed = [any(not np.array_equal(a, b) for a, b in zip(x, y, strict=True))
               for x, y in zip(before, after, strict=True)]
    # The top three weighted layers are trainable now (those the loss reaches move); the
    # layers below stay frozen.
    assert any(changed[-3:])
    assert not any(changed[:-3])


@pytest.mark.slow
def test_resume_keeps_the_rest_of_the_model(tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*TRAIN, "--epochs", "1", "--out", str(run)]) == 0
    # A model option that differs is refused (one line), the run untouched; the same command
    # with --resume (and new training settings) goes on with the model as it was.
    before = (run / "config.json").read_text()
    assert main([*TRAIN, "--epochs", "2", "--units", "48", "--resume", "--out", str(run)]) == 2
    assert "decoder.units 48 (the run has 32)" in capsys.readouterr().err
    assert (run / "config.json").read_text() == before
    assert main([*TRAIN, "--epochs", "2", "--resume", "--out", str(run)]) == 0
    assert json.loads((run / "config.json").read_text())["decoder"]["units"] == 32
