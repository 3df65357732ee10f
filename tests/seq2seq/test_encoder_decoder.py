"""`seq2seq-noattn`: the encoder-decoder without attention, beside Bahdanau and the Transformer."""

import json

import numpy as np
import pytest
import tensorflow as tf

from common.errors import UserError
from seq2seq.bahdanau import BahdanauTranslator
from seq2seq.cli import main
from seq2seq.config import BahdanauConfig, ModelConfig
from seq2seq.encoder_decoder import EncoderDecoderTranslator
from seq2seq.export import ExportedTranslator
from seq2seq.inference import Translator, decode_batch
from seq2seq.train import make_run_config

SOURCE = np.array([[4, 5, 6, 2, 0, 0], [7, 8, 2, 0, 0, 0]], np.int32)
TARGET_IN = np.array([[1, 9, 10, 11], [1, 12, 13, 0]], np.int32)


def tiny(label_smoothing=0.0, **kwargs):
    sizes = BahdanauConfig(embedding_dim=8, units=8, dropout=0.0, **kwargs)
    return EncoderDecoderTranslator(ModelConfig(bahdanau=sizes, label_smoothing=label_smoothing),
                                    20, 30)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_step_by_step_matches_teacher_forcing_and_there_is_no_attention(cell):
    model = tiny(cell=cell)
    logits, alpha = model({"source": SOURCE, "target_in": TARGET_IN}, return_attention=True)
    assert tuple(logits.shape) == (2, 4, 30) and tuple(alpha.shape) == (2, 4, 0)
    state = model.initial_state(SOURCE)
    assert set(state) == {"recurrent", "feed", "context"}  # no per-position memory
    for t in range(TARGET_IN.shape[1]):
        step_logits, state, step_alpha = model.step(tf.constant(TARGET_IN[:, t]), state, t)
        assert tuple(step_alpha.shape) == (2, 0)
        np.testing.assert_allclose(step_logits, logits[:, t], atol=1e-5)


def test_source_padding_changes_nothing_and_the_source_matters():
    model = tiny()
    logits = model({"source": SOURCE, "target_in": TARGET_IN})
    padded = np.concatenate([SOURCE, np.zeros((2, 5), np.int32)], axis=1)
    np.testing.assert_allclose(logits, model({"source": padded, "target_in": TARGET_IN}),
                               atol=1e-5)
    other = SOURCE.copy()
    other[0, 0] = 11
    assert not np.allclose(model({"source": other, "target_in": TARGET_IN})[0], logits[0])


def test_it_is_bahdanau_without_the_attention_layers():
    model, attentive = tiny(), BahdanauTranslator(BahdanauConfig(embedding_dim=8, units=8), 20, 30)
    model.build()
    attentive.build()
    names = lambda m: {layer.name for layer in m.layers}  # noqa: E731
    assert "summary" in names(model) and "key_projection" not in names(model)
    assert not hasattr(model, "attention")
    assert len(model.trainable_weights) < len(attentive.trainable_weights)


def test_config_round_trip():
    model = tiny(cell="lstm", label_smoothing=0.1)
    clone = EncoderDecoderTranslator.from_config(model.get_config())
    assert clone.get_config() == model.get_config()
    assert "score" not in model.get_config()


def test_greedy_and_beam_decoding_give_empty_attention():
    model = tiny()
    greedy = decode_batch(model, SOURCE, start_id=1, end_id=2, max_length=5)
    beam = decode_batch(model, SOURCE, start_id=1, end_id=2, max_length=5, beam_size=1)
    wide = decode_batch(model, SOURCE, start_id=1, end_id=2, max_length=5, beam_size=3)
    np.testing.assert_array_equal(greedy.tokens, beam.tokens)
    assert tuple(greedy.attention.shape) == (2, 1, 5, 0)
    assert tuple(wide.attention.shape) == (2, 1, 5, 0)


def test_run_config_takes_the_recurrent_sizes_and_refuses_copy():
    config = make_run_config("seq2seq-noattn", "dates", preset="dates-demo",
                             overrides={"dropout": 0.3})
    assert config.model.arch == "seq2seq-noattn"
    assert config.model.bahdanau.units == 64  # dates-demo's Bahdanau sizes
    assert config.model.bahdanau.dropout == 0.3
    with pytest.raises(UserError, match="seq2seq-noattn has none"):
        make_run_config("seq2seq-noattn", "dates", overrides={"copy": True})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "noattn"
    status = main(["train", "--dataset", "dates", "--arch", "seq2seq-noattn", "--preset",
                   "tiny", "--out", str(out), "--verbose", "0"])
    assert status == 0
    return out


SENTENCES = ["March 3, 1999", "25th of November 2026 Zyx"]


@pytest.mark.slow
def test_cli_trains_translates_exports_and_refuses_to_plot(run_dir, tmp_path, capsys):
    assert json.loads((run_dir / "config.json").read_text())["model"]["arch"] == "seq2seq-noattn"
    expected = Translator.from_run_dir(run_dir).translate(SENTENCES)
    assert all(r.attention is None and r.error is None for r in expected)
    status = main(["translate", str(run_dir), *SENTENCES, "--plot", str(tmp_path / "a.png")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "no attention to draw" in err[0], err
    assert not list(tmp_path.glob("*.png"))
    export = tmp_path / "export"
    assert main(["export", str(run_dir), str(export), "--beam-sizes", "1"]) == 0
    got = ExportedTranslator(export).translate(SENTENCES)
    assert [g.tokens for g in got] == [e.tokens for e in expected]
    assert all(g.attention is None for g in got)
    capsys.readouterr()
    status = main(["translate", str(export), SENTENCES[0], "--html", str(tmp_path / "a.html")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and "no attention to draw" in err[-1]
