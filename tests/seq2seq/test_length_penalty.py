"""Beam search's length penalty is a run setting (`--length-penalty` at training, kept in
`config.json`) that validation, `evaluate`, `translate` and the export decode with, and that
`evaluate` / `translate` may override for one call."""

import json

import numpy as np
import pytest

from common.training.checkpoints import resolve_checkpoint
from seq2seq.cli import main
from seq2seq.inference import Translator, decode_batch, pad_batch, source_ids

SENTENCES = ["25/11/2026", "March 3, 1999", "1 jan 2001", "thursday, 26 november 2026",
             "12.05.1987", "Sat, Feb 29 2020", "7 July 1977", "2001-09-11", "31 dec 99",
             "the 4th of june, 1905"]
ALPHAS = [0.0, 8.0]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "penalty"
    status = main(["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
                   "--steps-per-epoch", "300", "--hidden-dim", "16", "--intermediate-dim", "32",
                   "--length-penalty", "1.3", "--out", str(out), "--verbose", "0"])
    assert status == 0
    return out


@pytest.mark.slow
def test_the_run_keeps_its_length_penalty_and_decodes_with_it(run_dir):
    config = json.loads((run_dir / "config.json").read_text())
    assert config["model"]["length_penalty"] == 1.3
    translator = Translator.from_run_dir(run_dir)
    assert translator.module().length_penalty == 1.3
    assert translator.module(length_penalty=0.0).length_penalty == 0.0


@pytest.mark.slow
def test_translate_decodes_with_the_penalty_asked_for(run_dir):
    # Independent reference: the beam search run directly on the ids with that penalty.
    translator = Translator.from_run_dir(run_dir)
    vocabs = translator.vocabularies
    tokens = vocabs.tokenize(SENTENCES, translator.config.data.lowercase)
    source = pad_batch([source_ids(vocabs.source, t) for t in tokens])
    max_length = translator.config.model.max_decode_length
    outputs = {}
    for alpha in ALPHAS:
        expected = decode_batch(translator.model, source, vocabs.target.start_id,
                                vocabs.target.end_id, max_length, beam_size=4,
                                length_penalty=alpha)
        words = []
        for row in np.asarray(expected.tokens)[:, 0]:
            ids = list(row)
            ids = ids[:ids.index(vocabs.target.end_id)] if vocabs.target.end_id in ids else ids
            words.append([vocabs.target.tokens[i] for i in ids if i != 0])
        results = translator.translate(SENTENCES, beam_size=4, length_penalty=alpha,
                                       copy_unknown=False)
        assert [r.tokens for r in results] == words, alpha
        outputs[alpha] = words
    # The penalties chosen change some output, so the check above can tell them apart.
    assert outputs[ALPHAS[0]] != outputs[ALPHAS[1]]


@pytest.mark.slow
def test_evaluate_reports_the_penalty_it_used(run_dir, tmp_path):
    out = tmp_path / "scores.json"
    assert main(["evaluate", str(run_dir), "--dataset", "dates", "--limit", "8",
                 "--beam-size", "2", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["length_penalty"] == 1.3
    assert main(["evaluate", str(run_dir), "--dataset", "dates", "--limit", "8",
                 "--beam-size", "2", "--length-penalty", "0", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["length_penalty"] == 0.0
    # Greedy decoding has no length penalty; the JSON says which weights and length it used.
    assert main(["evaluate", str(run_dir), "--dataset", "dates", "--limit", "8",
                 "--beam-size", "1", "--length-penalty", "2", "--checkpoint", "last",
                 "--max-decode-length", "5", "--json", str(out)]) == 0
    scores = json.loads(out.read_text())
    assert scores["length_penalty"] is None and scores["beam_size"] == 1
    assert scores["max_decode_length"] == 5
    assert scores["checkpoint"] == str(resolve_checkpoint(run_dir, "last"))


def test_a_savedmodel_refuses_another_penalty(tmp_path, capsys):
    (tmp_path / "saved_model.pb").write_bytes(b"")
    assert main(["translate", str(tmp_path), "--length-penalty", "1.0", "hello"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--length-penalty" in err[0] and "SavedModel" in err[0]


@pytest.mark.parametrize("value", ["-1", "x"])
def test_a_bad_penalty_is_a_one_line_error(value, tmp_path, capsys):
    assert main(["evaluate", str(tmp_path), "--dataset", "dates", "--length-penalty",
                 value]) == 2
    assert "--length-penalty" in capsys.readouterr().err
