"""Training keeps no pair longer than the model reads: `data.max_length`, and for the
Transformer its positions less one (learned positions of 32 used to meet a 40-token pair and
fail with a traceback; sine positions trained on pairs `translate` then refused)."""

import json

import pytest

from seq2seq.cli import main
from seq2seq.config import DataConfig, ModelConfig, RunConfig, TransformerConfig


def test_the_limit_is_the_data_filter_within_the_transformers_positions():
    short = ModelConfig(arch="transformer", transformer=TransformerConfig(max_length=32))
    assert RunConfig(model=short, data=DataConfig(max_length=50)).length_limit == 31
    assert RunConfig(model=short, data=DataConfig(max_length=20)).length_limit == 20
    recurrent = ModelConfig(arch="bahdanau", transformer=TransformerConfig(max_length=32))
    assert RunConfig(model=recurrent, data=DataConfig(max_length=50)).length_limit == 50


@pytest.mark.slow
@pytest.mark.parametrize("positions", ["learned", "sine"])
def test_pairs_longer_than_the_positions_are_dropped_not_a_crash(tmp_path, capsys, positions):
    long = " ".join(["word"] * 40)
    data = tmp_path / "train.tsv"
    data.write_text("".join([f"{long}\t{long}\n"] * 16 + ["a short one\tuna corta\n"] * 16),
                    encoding="utf-8")
    run = tmp_path / "run"
    assert main(["train", "--dataset", "tsv", "--data", str(data), "--arch", "transformer",
                 "--preset", "tiny", "--positions", positions, "--out", str(run)]) == 0
    assert "16 training pairs (16 longer than 31 tokens dropped)" in capsys.readouterr().out
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
