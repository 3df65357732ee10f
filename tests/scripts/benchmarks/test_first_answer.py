"""`scripts/benchmarks/first_answer.py`: its refusals (one line, before any work), its medians
and ratios, and its probe of an export (load and first-call times, graph sizes) on the toy
export of `tests.helpers.toy_export`."""

import json
import statistics

import pytest

from tests.helpers.benchmarks import load_script
from tests.helpers.toy_export import ToyModule

first_answer = load_script("first_answer")


@pytest.mark.parametrize("argv, message", [
    (["--families", "translator,decoder"], "--families: expected distinct names among"),
    (["--families", "captioner", "--translator", "RUN"],
     "--translator: the translator is not among --families captioner"),
    (["--captioner-export", "EXPORT"], "--captioner-export needs --captioner"),
    (["--translator", "missing"], "--translator missing: not a run directory (no config.json)"),
    (["--captioner", "run"], "--captioner run: holds a 'seq2seq' run; expected a 'captioner'"),
    (["--translator", "run", "--translator-export", "run"],
     "--translator-export run: not a SavedModel directory"),
    (["--work", "afile.txt"], "--work afile.txt: is a file; expected a folder"),
    (["--out", "missing/first.json"], "--out missing/first.json: the folder missing does not"),
    (["--rounds", "0"], "--rounds: expected a positive"),
])
def test_bad_options_are_one_line_before_any_work(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(json.dumps({"family": "seq2seq"}))
    (tmp_path / "afile.txt").write_text("x")
    assert first_answer.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("first_answer.py: error: "), lines
    assert message in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile.txt", "run"]


def test_the_summaries_are_medians_and_ratios_of_medians():
    seen = {"run_dir": [{"wall_s": w, "cpu_s": c, "stdout": "2026-11-25\n"}
                        for w, c in [(10, 5), (12, 6), (11, 7)]],
            "export": [{"wall_s": w, "cpu_s": c, "stdout": "2026-11-25\n"}
                       for w, c in [(8, 4), (30, 9), (9, 4)]]}
    cli = first_answer.summarize_cli(seen)
    assert cli["run_dir"]["wall_s"] == 11 and cli["export"]["wall_s"] == 9
    assert cli["ratio_wall"] == 9 / 11 and cli["ratio_cpu"] == 4 / 6
    assert cli["same_output"] and cli["output"] == "2026-11-25"
    seen["export"][1]["stdout"] = "1999-03-03\n"
    assert not first_answer.summarize_cli(seen)["same_output"]

    rounds = [{"available_s": a, "signatures": {"s": {"first_ms": f, "steady_ms": s,
                                                      "ratio": f / s}}}
              for a, f, s in [(5, 30, 20), (7, 90, 30), (6, 20, 20)]]
    serve = first_answer.summarize_serve(rounds)
    assert serve["available_s"] == 6
    assert serve["signatures"]["s"] == {"first_ms": 30, "steady_ms": 20,
                                        "ratio": statistics.median([1.5, 3.0, 1.0])}
    assert serve["within_2x"]
    rounds[2]["signatures"]["s"]["ratio"] = 2.5
    assert not first_answer.summarize_serve(rounds)["within_2x"]


@pytest.mark.slow
def test_the_probe_loads_an_export_and_counts_its_graph(tmp_path):
    # The options signature's request leaves out the options the probe fills in.
    export = ToyModule(beam_sizes=(1, 2), default_beam_size=2).save(tmp_path / "export")
    calls = {"decode_with_options": {"examples": ["1"], "beam_size": 2},
             "serving_default": {"examples": ["1"]}}
    found = first_answer.summarize_probes([first_answer.probe(str(export), calls, 300)])
    assert found["load_s"] > 0 and found["library_nodes"] > 100
    for name in calls:
        row = found["signatures"][name]
        assert 0 < row["second_call_s"] and 0 < row["first_call_s"]
        assert 100 < row["nodes"] <= found["library_nodes"]
