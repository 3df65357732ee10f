"""`common.metrics.seeds`: the spread over seeds of numbers and of curves (lists), and the JSON
lines that record them."""

import json

import numpy as np
import pytest

from common.metrics.seeds import record, summarize


def test_numbers_get_mean_sample_std_min_and_max():
    runs = [{"seed": 1, "bleu": 40.0, "ok": True, "name": "a"},
            {"seed": 2, "bleu": 43.0, "ok": False, "name": "b"},
            {"seed": 3, "bleu": 41.5, "ok": True, "name": "c"}]
    summary = summarize({"name": "x"}, runs)
    assert summary["kind"] == "summary" and summary["runs"] == 3 and summary["name"] == "x"
    assert summary["bleu"]["mean"] == pytest.approx(41.5)
    assert summary["bleu"]["std"] == pytest.approx(np.std([40, 43, 41.5], ddof=1))
    assert (summary["bleu"]["min"], summary["bleu"]["max"]) == (40.0, 43.0)
    assert "seed" not in summary and "ok" not in summary  # skipped; booleans are not numbers


def test_a_curve_is_summarized_point_by_point():
    curves = np.array([[6.0, 4.0, 3.0], [6.4, 4.2, 2.9], [5.9, 3.7, 3.1]])
    summary = summarize({}, [{"loss": list(c)} for c in curves])
    assert summary["loss"]["mean"] == pytest.approx(list(curves.mean(axis=0)))
    assert summary["loss"]["std"] == pytest.approx(list(curves.std(axis=0, ddof=1)))
    assert summary["loss"]["min"] == pytest.approx(list(curves.min(axis=0)))
    assert summary["loss"]["max"] == pytest.approx(list(curves.max(axis=0)))


@pytest.mark.parametrize("other", [[1.0], None, "n/a", [1.0, "x"]])
def test_a_field_some_run_lacks_or_shapes_otherwise_is_left_out(other):
    summary = summarize({}, [{"loss": [1.0, 2.0], "n": 1.0}, {"loss": other, "n": 2.0}])
    assert "loss" not in summary and summary["n"]["mean"] == 1.5


def test_one_run_has_zero_spread():
    summary = summarize({}, [{"bleu": 40.0, "loss": [2.0, 1.0]}])
    assert summary["bleu"]["std"] == 0.0 and summary["loss"]["std"] == [0.0, 0.0]


def test_record_rounds_numbers_in_lists_and_appends_a_line(tmp_path):
    path = tmp_path / "r" / "results.jsonl"
    line = record(path, {"loss": [1.23456, 2.0], "s": {"mean": [0.1111]}, "n": 3})
    record(path, {"n": 4})
    assert json.loads(line) == {"loss": [1.23, 2.0], "s": {"mean": [0.11]}, "n": 3}
    assert [json.loads(x)["n"] for x in path.read_text().splitlines()] == [3, 4]
