"""`seq2seq evaluate` says what it scored: the format, the weights' type and the checkpoint,
absolute (`seq2seq.evaluate.scored_model`)."""

import json
import os
from types import SimpleNamespace

from seq2seq.evaluate import EXPORT_DIRECTORY, scored_model


def _export(path, info, ctranslate2=False):
    path.mkdir()
    if ctranslate2:
        (path / "model.bin").write_bytes(b"")
        (path / "export_info.json").write_text(json.dumps(info))
    else:
        (path / "saved_model.pb").write_bytes(b"")
        (path / "assets.extra").mkdir()
        (path / "assets.extra" / "export_info.json").write_text(json.dumps(info))
    return SimpleNamespace(info=info, checkpoint=info.get("checkpoint"))


def test_a_run_is_scored_from_its_checkpoint_given_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = SimpleNamespace(checkpoint="runs/dates/best/ckpt-800")  # a Translator has no info
    assert scored_model("runs/dates", run) == {
        "format": "run", "quantization": "float32",
        "checkpoint": os.path.join(str(tmp_path), "runs/dates/best/ckpt-800")}


def test_an_export_says_its_format_weights_and_the_checkpoint_it_was_made_from(tmp_path):
    checkpoint = str(tmp_path / "runs" / "dates" / "best" / "ckpt-800")
    saved = _export(tmp_path / "int8", {"quantization": "int8", "checkpoint": checkpoint})
    assert scored_model(tmp_path / "int8", saved) == {
        "format": "savedmodel", "quantization": "int8", "checkpoint": checkpoint}
    engine = _export(tmp_path / "ct2", {"format": "ctranslate2", "quantization": "int16",
                                        "checkpoint": checkpoint}, ctranslate2=True)
    assert scored_model(tmp_path / "ct2", engine) == {
        "format": "ctranslate2", "quantization": "int16", "checkpoint": checkpoint}


def test_an_older_exports_relative_checkpoint_says_where_it_is_relative_to(tmp_path):
    old = _export(tmp_path / "old", {"checkpoint": "runs/dates/best/ckpt-800"})
    assert scored_model(tmp_path / "old", old) == {
        "format": "savedmodel", "quantization": "float32",
        "checkpoint": "runs/dates/best/ckpt-800", "checkpoint_relative_to": EXPORT_DIRECTORY}


def test_the_printout_and_json_hold_it(tmp_path, monkeypatch, capsys):
    """The command prints every entry of the result (the JSON's too), these among them."""
    from seq2seq.cli import main

    checkpoint = str(tmp_path / "best" / "ckpt-8")
    result = {"bleu": 50.0, "format": "savedmodel", "quantization": "int8",
              "checkpoint": checkpoint}
    monkeypatch.setattr("seq2seq.evaluate.evaluate", lambda *args, **kwargs: dict(result))
    monkeypatch.setattr("common.cli._import_tensorflow_quietly", lambda: None)
    (tmp_path / "run").mkdir()
    assert main(["evaluate", str(tmp_path / "run"), "--dataset", "dates"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "format        savedmodel" in lines and "quantization  int8" in lines
    assert f"checkpoint    {checkpoint}" in lines
