"""scripts/experiments/scst_seeds.py: on valid, a start run per seed (reused when finished),
the SCST stage from it, four evaluations each and a summary over the seeds; on test, the
checkpoints the valid record scored, scored once; its one-line refusals."""

import importlib.util
import json
import os
import socket
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "experiments" / "scst_seeds.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("scst_seeds", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _variant(cider, objects, relations, attention, twice):
    return {"CIDEr": cider, "object_accuracy": objects, "relation_accuracy": relations,
            "attention_correctness": attention, "attention_correctness_references": attention,
            "objects_named_twice": twice, "tokenizer": "ptb", "images": 500}


def test_the_summary_is_the_mean_sd_and_range_over_seeds_and_targets_are_judged_per_seed(
        script):
    rng = np.random.default_rng(0)
    seeds = []
    for _ in range(3):
        variants = {name: _variant(*rng.uniform(50, 100, 4), int(rng.integers(0, 5)))
                    for name in script.VARIANTS}
        for v in variants.values():
            v["cider_ratio"] = v["CIDEr"] / variants["start"]["CIDEr"]
        seeds.append({"variants": variants, "scst_train_s": float(rng.uniform(200, 300))})
    summary = script.summarize(seeds)
    for name in script.VARIANTS:
        for key in ("CIDEr", "object_accuracy", "objects_named_twice", "cider_ratio"):
            values = np.array([s["variants"][name][key] for s in seeds], float)
            got = summary[name][key]
            assert got["mean"] == pytest.approx(values.mean())
            assert got["std"] == pytest.approx(values.std(ddof=1))
            assert (got["min"], got["max"]) == (values.min(), values.max())
        assert "images" not in summary[name] and "tokenizer" not in summary[name]
    times = [s["scst_train_s"] for s in seeds]
    assert summary["scst_train_s"]["mean"] == pytest.approx(np.mean(times))

    start = _variant(300.0, 90.0, 95.0, 60.0, 4)
    variants = {"start": start, "start+no-repeat": _variant(310.0, 92.0, None, 61.0, 0),
                "scst": _variant(340.0, 97.0, 98.0, 59.9, 4),
                "scst+no-repeat": _variant(329.0, 96.9, 97.9, 60.0, 5)}
    for v in variants.values():
        v["cider_ratio"] = v["CIDEr"] / start["CIDEr"]
    met = script.targets_met(variants)
    assert met["scst"] == {"object_accuracy": True, "relation_accuracy": True,
                           "cider_ratio": True, "attention_correctness": False,
                           "attention_correctness_references": False,
                           "objects_named_twice": True}
    assert met["scst+no-repeat"] == {"object_accuracy": False, "relation_accuracy": False,
                                     "cider_ratio": False, "attention_correctness": True,
                                     "attention_correctness_references": True,
                                     "objects_named_twice": False}
    assert met["start+no-repeat"]["relation_accuracy"] is None
    demo = script.demo_targets_met(
        {"a": {"object_accuracy": 98.0, "relation_accuracy": 98.9, "relations_stated": 0.38,
               "objects_named_twice_rate": 1.0, "attention_correctness": 80.0},
         "b": {"object_accuracy": 97.9, "relation_accuracy": None, "relations_stated": 0.1,
               "objects_named_twice_rate": 1.2, "attention_correctness": 74.9}})
    assert demo == {"a": {"object_accuracy": True, "relation_accuracy": False,
                          "relations_stated": True, "objects_named_twice_rate": True,
                          "attention_correctness": True},
                    "b": {"object_accuracy": False, "relation_accuracy": None,
                          "relations_stated": False, "objects_named_twice_rate": False,
                          "attention_correctness": False}}


def test_a_finished_start_run_is_reused_a_killed_one_resumed_and_none_trained(script,
                                                                              tmp_path):
    _run_dir(tmp_path / "finished", 1)
    _run_dir(tmp_path / "killed", 1, "training", pid=2**22 + 12345)  # no such process
    _run_dir(tmp_path / "failed", 1, "failed")
    (tmp_path / "empty").mkdir()
    assert script.start_run(tmp_path / "finished", 1) == "reuse"
    assert script.start_run(tmp_path / "killed", 1) == "resume"
    assert script.start_run(tmp_path / "failed", 1) == "resume"
    assert script.start_run(tmp_path / "empty", 1) == "train"
    assert script.start_run(tmp_path / "none", 1) == "train"


@pytest.mark.slow
def test_a_seed_is_chosen_on_valid_then_its_checkpoints_scored_on_test_once(script, tmp_path,
                                                                           capsys, monkeypatch):
    # The script's own work is what is tested, not Java's: without it the caption metrics
    # use the simple tokenizer and skip METEOR, and each evaluation starts no JVM.
    monkeypatch.setattr("common.metrics.caption_metrics.java_available", lambda: False)
    out = tmp_path / "out"
    assert script.main(["--seeds", "2", "--out-dir", str(out), "--presets", "tiny,tiny",
                        "--num-images", "4", "--", "--scst-samples", "2",
                        "--scst-xe-weight", "0.5"]) == 0
    valid = json.loads((out / "demo-scst-valid.json").read_text())
    assert valid["split"] == "valid" and valid["name"] == "demo-scst"
    assert "chosen_on" not in valid and valid["num_images"] == 4
    assert [r["start"] for r in valid["runs"]] == ["train"]
    assert valid["runs"][0]["start_train_s"] > 0
    assert json.loads((out / "demo-2" / "config.json").read_text())["training"]["seed"] == 2
    assert valid["tokenizer"] == ["simple"] and valid["commit"]
    assert valid["scst_args"] == ["--scst-samples", "2", "--scst-xe-weight", "0.5"]
    for run in valid["runs"]:
        assert run["scst"] == {"enabled": True, "samples": 2, "baseline": "greedy",
                               "xe_weight": 0.5, "fact_weight": 0.0, "relation_bonus": 0.0}
        assert run["scst_train_s"] > 0 and len(run["scst_history"]["reward"]) == 1
        assert (Path(run["scst_run"]) / "best").is_dir()
        variants = run["variants"]
        assert list(variants) == list(script.VARIANTS)
        for name, scores in variants.items():
            assert scores["split"] == "valid" and scores["beam_size"] == 3
            assert scores["images"] == 4
            assert scores["no_repeat_ngram"] == (3 if name.endswith("+no-repeat") else 0)
            role = "start" if name.startswith("start") else "scst"
            assert Path(scores["checkpoint"]).parts[-3] == Path(run[f"{role}_run"]).name
            assert scores["checkpoint"] == run["checkpoints"][role]["path"]
            for key in ("CIDEr", "object_accuracy", "objects_named_twice",
                        "attention_correctness_references"):
                assert key in scores, (name, key)
        start_cider = variants["start"]["CIDEr"]
        for scores in variants.values():  # a tiny run may score CIDEr 0: no ratio then
            assert scores["cider_ratio"] == (
                pytest.approx(scores["CIDEr"] / start_cider) if start_cider else None)
    ciders = [r["variants"]["scst"]["CIDEr"] for r in valid["runs"]]
    assert valid["summary"]["scst"]["CIDEr"]["mean"] == pytest.approx(np.mean(ciders))
    assert "seed 2 on valid: SCST" in capsys.readouterr().out

    # On test: the same checkpoints, scored once, nothing trained or replaced.
    runs_before = _snapshot(out)
    assert script.main(["--out-dir", str(out), "--split", "test", "--seeds", "2",
                        "--num-images", "4"]) == 0
    test_file = out / "demo-scst-test.json"
    test = json.loads(test_file.read_text())
    assert (test["split"], test["chosen_on"], test["test_scored"]) == ("test", "valid", 1)
    assert test["chosen_record"] == str(out / "demo-scst-valid.json")
    assert (test["presets"], test["scst_args"]) == (valid["presets"], valid["scst_args"])
    (run,) = test["runs"]
    for key in script.TRAINING:
        assert run[key] == valid["runs"][0][key], key
    for name, scores in run["variants"].items():
        assert scores["split"] == "test" and scores["images"] == 4
        role = "start" if name.startswith("start") else "scst"
        assert scores["checkpoint"] == valid["runs"][0]["checkpoints"][role]["path"]
    assert "seed 2 on test: SCST" in capsys.readouterr().out
    assert {k: v for k, v in _snapshot(out).items() if k != test_file.name} == runs_before

    # A second look at test, or another candidate on test, is refused before any work.
    written = test_file.read_bytes()
    argv = ["--out-dir", str(out), "--split", "test"]
    assert "--overwrite scores it again" in _one_line_error(script, capsys, argv)
    assert "chose on valid ([2])" in _one_line_error(script, capsys, [*argv, "--seeds", "3"])
    assert "is not what" in _one_line_error(script, capsys, [*argv, "--", "--scst-samples", "3"])
    assert test_file.read_bytes() == written


def _snapshot(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _one_line_error(script, capsys, argv):
    status = script.main(argv)
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1, err
    return err


def _run_dir(path, seed, state="finished", pid=None):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(
        {"data": {"dataset": "shapes"}, "training": {"seed": seed}}))
    (path / "status.json").write_text(json.dumps(
        {"state": state, "pid": pid, "host": socket.gethostname()}))


def _write_json(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))
    return path


def _valid_record(script, out, checkpoint):
    """A valid record of demo-scst in `out` whose checkpoints are the file `checkpoint`."""
    checkpoint.write_text("weights")
    digest = {"path": str(checkpoint.with_suffix("")),
              "sha256": script.checkpoint_digest(checkpoint.with_suffix(""))}
    record = {"kind": "scst_seeds", "name": "demo-scst", "split": "valid", "seeds": [1],
              "presets": ["demo", "demo-scst"], "beam_size": 3, "no_repeat_ngram": 3,
              "scst_args": [], "summary": {},
              "runs": [{"seed": 1, "checkpoints": {"start": digest, "scst": digest}}]}
    _write_json(out / "demo-scst-valid.json", record)
    return record


@pytest.mark.parametrize("case, message", [
    ("name", "--name 'demo': expected a plain name"),
    ("json", "--json"),
    ("file", "--out-dir"),
    ("training", "still training (process"),
    ("seed", "a run of dataset 'shapes' and seed 7; expected the shapes demo of seed 1"),
    ("foreign", "not a run directory (no config.json)"),
    ("scst-foreign", "not a run; the SCST run replaces this folder"),
    ("set-here", "the script sets --out, --seed"),
    ("presets", "--presets 'tiny': expected XE,SCST"),
    ("seeds", "expected distinct values >= 0, got '1,1'"),
    ("test-without-valid", "no {out}/demo-scst-valid.json; run this with --split valid first"),
    ("test-on-a-test-record", "not a --split valid record of scst_seeds.py (split 'test')"),
    ("test-of-another-name", "the record of NAME 'facts', not --name 'demo-scst'"),
    ("test-of-another-candidate", "--presets ['demo', 'demo-scst-facts'] is not what"),
    ("test-of-a-changed-checkpoint", "that {out}/demo-scst-valid.json scored on valid "
                                     "(changed or gone since)"),
    ("test-twice", "scored on test already"),
    ("test-over-its-valid-record", "is an input of this command"),
    ("valid-over-a-test-record", "holds test scores; a valid run does not replace them"),
    ("overwrite-on-valid", "--chosen-on and --overwrite go with --split test"),
])
def test_bad_input_is_refused_in_one_line_before_any_training(script, capsys, tmp_path, case,
                                                              message):
    out = tmp_path / "out"
    argv = ["--seeds", "1", "--out-dir", str(out)]
    if case == "name":
        argv += ["--name", "demo"]
    elif case == "json":
        (tmp_path / "folder").mkdir()
        argv += ["--json", str(tmp_path / "folder")]
    elif case == "file":
        out.write_text("x")
    elif case == "training":
        _run_dir(out / "demo-1", 1, "training", os.getpid())
    elif case == "seed":
        _run_dir(out / "demo-1", 7)
    elif case == "foreign":
        (out / "demo-1").mkdir(parents=True)
        (out / "demo-1" / "notes.txt").write_text("mine")
    elif case == "scst-foreign":
        _run_dir(out / "demo-1", 1)
        (out / "demo-scst-1").mkdir()
        (out / "demo-scst-1" / "notes.txt").write_text("mine")
    elif case == "set-here":
        argv += ["--", "--seed", "3"]
    elif case == "presets":
        argv += ["--presets", "tiny"]
    elif case == "seeds":
        argv = ["--seeds", "1,1", "--out-dir", str(out)]
    elif case.startswith("test"):
        argv = ["--out-dir", str(out), "--split", "test"]
        if case != "test-without-valid":
            record = _valid_record(script, out, tmp_path / "ckpt-3.index")
        if case == "test-on-a-test-record":
            _write_json(out / "demo-scst-valid.json", {**record, "split": "test"})
        elif case == "test-of-another-name":
            argv += ["--chosen-on", str(_write_json(out / "facts.json",
                                                    {**record, "name": "facts"}))]
        elif case == "test-of-another-candidate":
            argv += ["--presets", "demo,demo-scst-facts"]
        elif case == "test-of-a-changed-checkpoint":
            (tmp_path / "ckpt-3.index").write_text("trained again")
        elif case == "test-twice":
            _write_json(out / "demo-scst-test.json", {**record, "split": "test"})
        elif case == "test-over-its-valid-record":
            argv += ["--json", str(out / "demo-scst-valid.json")]
    elif case == "valid-over-a-test-record":
        _write_json(tmp_path / "test.json", {"kind": "scst_seeds", "split": "test",
                                             "runs": [], "summary": {}})
        argv += ["--json", str(tmp_path / "test.json")]
    elif case == "overwrite-on-valid":
        argv += ["--overwrite"]
    message = message.format(out=out)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert message in _one_line_error(script, capsys, argv)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
