"""scripts/experiments/scst_seeds.py: a start run per seed (reused when finished), the SCST stage
from it, four evaluations each, and a summary over the seeds; its one-line refusals."""

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
@pytest.mark.skipif(bool(os.environ.get("CI")), reason="about 5 minutes (four evaluations of "
                    "the full split): run by hand until the script can score fewer images")
def test_a_seed_on_tiny_presets_trains_both_stages_and_records_every_variant(script, tmp_path,
                                                                             capsys):
    out = tmp_path / "out"
    record_file = tmp_path / "record.json"
    assert script.main(["--seeds", "2", "--out-dir", str(out), "--json", str(record_file),
                        "--split", "valid", "--presets", "tiny,tiny", "--",
                        "--scst-samples", "2", "--scst-xe-weight", "0.5"]) == 0
    record = json.loads(record_file.read_text())
    assert [r["start"] for r in record["runs"]] == ["train"]
    assert record["runs"][0]["start_train_s"] > 0
    assert json.loads((out / "demo-2" / "config.json").read_text())["training"]["seed"] == 2
    assert record["tokenizer"] and record["commit"] and record["split"] == "valid"
    assert record["scst_args"] == ["--scst-samples", "2", "--scst-xe-weight", "0.5"]
    for run in record["runs"]:
        assert run["scst"] == {"enabled": True, "samples": 2, "baseline": "greedy",
                               "xe_weight": 0.5, "fact_weight": 0.0}
        assert run["scst_train_s"] > 0 and len(run["scst_history"]["reward"]) == 1
        assert (Path(run["scst_run"]) / "best").is_dir()
        variants = run["variants"]
        assert list(variants) == list(script.VARIANTS)
        for name, scores in variants.items():
            assert scores["split"] == "valid" and scores["beam_size"] == 3
            assert scores["no_repeat_ngram"] == (3 if name.endswith("+no-repeat") else 0)
            assert Path(scores["checkpoint"]).parts[-3] == Path(
                run["start_run" if name.startswith("start") else "scst_run"]).name
            for key in ("CIDEr", "object_accuracy", "objects_named_twice",
                        "attention_correctness_references"):
                assert key in scores, (name, key)
        start_cider = variants["start"]["CIDEr"]
        for scores in variants.values():  # a tiny run may score CIDEr 0: no ratio then
            assert scores["cider_ratio"] == (
                pytest.approx(scores["CIDEr"] / start_cider) if start_cider else None)
    ciders = [r["variants"]["scst"]["CIDEr"] for r in record["runs"]]
    assert record["summary"]["scst"]["CIDEr"]["mean"] == pytest.approx(np.mean(ciders))
    assert "seed 2: SCST" in capsys.readouterr().out


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
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert message in _one_line_error(script, capsys, argv)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
