"""scripts/benchmarks/engines_real_text.py: a trained translator's real sentences through every
engine in turns; its seconds, BLEU and ratios are those of what each engine translated; bad
options are refused in one line."""

from __future__ import annotations

import json

import pytest

from tests.helpers.benchmarks import load_script


def _script():
    return load_script("engines_real_text")


@pytest.fixture(scope="module")
def held_out(tmp_path_factory):
    """The first 24 held-out dates as a TSV of source<TAB>reference."""
    from seq2seq.datasets import load_pairs

    pairs = load_pairs("dates", split="test", seed=0, size=24)
    path = tmp_path_factory.mktemp("real-text") / "dates.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in zip(pairs.sources, pairs.targets)),
                    encoding="utf-8")
    return path


@pytest.mark.slow  # two exports and three engines' first calls
def test_every_engine_translates_the_split_and_is_scored(dates_transformer, held_out, tmp_path):
    out = tmp_path / "real.json"
    engines = "run_directory,savedmodel_float32,ctranslate2_float32"
    assert _script().main([str(dates_transformer), "--data", str(held_out), "--engines",
                           engines, "--beams", "2", "--batches", "8", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["sentences"] == 24 and len(report["load_average_before"]) == 3
    [cell] = report["results"]
    assert (cell["beam_size"], cell["batch_size"]) == (2, 8)
    rows = cell["engines"]
    assert list(rows) == engines.split(",")
    for name, row in rows.items():
        assert row["sentences_per_s"] == pytest.approx(24 / row["seconds"], rel=1e-3)
        assert row["bleu"] == 100.0  # the fixture's model is sure of every date
        assert row["same_text_as_run_directory"] == 24, name
    ratio = rows["savedmodel_float32"]["seconds"] / rows["ctranslate2_float32"]["seconds"]
    assert cell["ratios"]["savedmodel_float32_over_ctranslate2_float32"] == pytest.approx(
        ratio, rel=1e-2)


@pytest.mark.parametrize("argv, message", [
    (["--engines", "onnx"], "--engines: unknown onnx"),
    (["--data", "missing.tsv"], "--data missing.tsv: no such file"),
])
def test_bad_options_are_refused_in_one_line(argv, message, capsys, tmp_path):
    argv = [str(tmp_path), *(["--data", "missing.tsv"] if "--data" not in argv else []), *argv]
    assert _script().main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
