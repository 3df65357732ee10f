"""scripts/benchmarks/engines.py: every engine decodes the same forced-length sentences, timed
in turns; the ratios are those of the medians; the targets are counted; bad options are
refused in one line."""

from __future__ import annotations

import json
import statistics
import sys

import pytest

from tests.helpers.benchmarks import load_script


def _script():
    return load_script("engines")


ENGINES = ["inprocess", "inprocess_xla", "savedmodel_float32", "savedmodel_int8",
           "ctranslate2_float32", "ctranslate2_int8"]


@pytest.mark.slow  # two SavedModel exports and every engine's first call: ~50 s on 2 cores
def test_quick_run_times_every_engine_of_each_cell_in_turns(tmp_path):
    out = tmp_path / "engines.json"
    assert _script().main(["--quick", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = report["results"]
    assert [(r["batch"], r["beam"], r["engine"]) for r in rows] == [(2, 1, e) for e in ENGINES]
    for row in rows:
        assert row["full_length"] and row["size"] == "tiny" and row["tokens"] == 20
        assert len(row["rounds_s"]) == 1
        seconds = statistics.median(row["rounds_s"])
        assert row["median_ms"] == pytest.approx(1000 * seconds)
        assert row["tokens_per_s"] == pytest.approx(2 * 20 / seconds)
        assert row["ms_per_sentence"] == pytest.approx(1000 * seconds / 2)
    speed = {r["engine"]: r["tokens_per_s"] for r in rows}
    [cell] = report["ratios"]
    assert set(cell) == {"size", "batch", "beam", *report["targets"], *[
        "savedmodel_int8_over_savedmodel_float32", "ctranslate2_int8_over_ctranslate2_float32",
        "savedmodel_float32_over_inprocess", "inprocess_xla_over_inprocess"]}
    assert cell["savedmodel_int8_over_ctranslate2_int8"] == pytest.approx(
        speed["savedmodel_int8"] / speed["ctranslate2_int8"])
    assert cell["inprocess_xla_over_inprocess"] == pytest.approx(
        speed["inprocess_xla"] / speed["inprocess"])
    for name, least in (("savedmodel_float32_over_ctranslate2_float32", 1.0),
                        ("savedmodel_int8_over_ctranslate2_int8", 0.8)):
        target = report["targets"][name]
        assert target["at_least"] == least and target["cells"] == 1
        missed = [] if cell[name] >= least else [
            {"size": "tiny", "batch": 2, "beam": 1, "ratio": cell[name]}]
        assert target["missed"] == missed and target["met"] == 1 - len(missed)
    model = report["models"]["tiny"]
    assert model["ctranslate2_int8"]["compute_type"].startswith("int8")
    assert model["ctranslate2_float32"]["compute_type"] == "float32"
    assert model["ctranslate2_int8"]["intra_threads"] == 2
    assert model["savedmodel_int8"]["variables_bytes"] > 0
    assert report["threads"]["ctranslate2_inter_threads"] == 1
    assert len(report["load_average_before"]) == len(report["load_average_after"]) == 3
    assert "min_decoding_length" in report["forcing"]["ctranslate2"]


@pytest.mark.parametrize("argv, message", [
    (["--engines", "onnx"], "unknown engine 'onnx'; choose from: inprocess,"),
    (["--sizes", "huge"], "unknown size 'huge'; choose from:"),
    (["--rounds", "0"], "--rounds must be >= 1, got 0"),
])
def test_bad_options_are_refused_in_one_line(argv, message, capsys):
    assert _script().main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_without_ctranslate2_it_names_the_requirements(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # as if not installed
    assert _script().main(["--quick"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "pip install -r scripts/benchmarks/requirements-engines.txt" in err
