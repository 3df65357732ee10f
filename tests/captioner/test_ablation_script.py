"""scripts/experiments/captioner_ablation.py: a preset variant trained and scored on shapes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "experiments" / "captioner_ablation.py"
# The script imports the packages as installed: this checkout first, so it is what is tested.
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=600, env=ENV)


def test_a_variant_is_trained_with_its_overrides_scored_on_valid_then_on_test_once(tmp_path):
    variant = ["word", "--preset", "tiny", "--out-dir", str(tmp_path), "--images", "6",
               "--override", '{"decoder": {"query": "hidden+word"}, "training": {"epochs": 1}}']
    done = _run(*variant)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    config = json.loads((tmp_path / "word" / "config.json").read_text())
    assert config["decoder"]["query"] == "hidden+word"
    assert (result["split"], result["images"], result["preset"]) == ("valid", 6, "tiny")
    assert "chosen_on" not in result
    for key in ("BLEU-4", "object_accuracy", "attention_correctness",
                "attention_uniform_baseline"):
        assert 0.0 <= result[key] <= 100.0, (key, result)

    done = _run(*variant, "--split", "test")
    assert done.returncode == 0, done.stderr[-2000:]
    test = json.loads(done.stdout.strip().splitlines()[-1])
    assert (test["split"], test["chosen_on"], test["test_scored"]) == ("test", "valid", 1)
    saved = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert saved == [result, test]


def test_bad_overrides_are_one_line_errors(tmp_path):
    for override in ("[1, 2]", "{not json", '{"decoder": {"query": "word"}}'):
        done = _run("bad", "--preset", "tiny", "--out-dir", str(tmp_path), "--override", override)
        assert done.returncode == 2, (override, done.stderr[-500:])
        assert "Traceback" not in done.stderr
        assert not (tmp_path / "bad").exists()


def test_teacher_forced_attention_report_against_a_direct_computation(trained_captioner):
    """shapes_relation_report.teacher_forced_attention, recomputed caption by caption."""
    import importlib.util

    import numpy as np

    from captioner.datasets.shapes import load_shapes
    from captioner.datasets.shapes_metrics import parse_caption
    from captioner.inference import load_run
    from common.metrics.attention_correctness import region_fractions

    path = SCRIPT.parent / "shapes_relation_report.py"
    spec = importlib.util.spec_from_file_location("shapes_relation_report", path)
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    run = load_run(trained_captioner)
    max_length = run.config.decoder.max_length
    test = [r for r in load_shapes("test", num_images=60, image_size=run.image_size[0])
            if len(r.objects) == 2][:4]
    named, other = [], []
    for record in test:
        by_name = {(o.attributes["colour"], o.attributes["shape"]): o for o in record.objects}
        for caption in record.captions:
            words, parsed = caption.split(), parse_caption(caption)
            if len(parsed.objects) != 2 or len(words) > max_length:
                continue
            objects = [by_name[(o.colour, o.shape)] for o in parsed.objects]
            step = words.index(parsed.objects[0].shape)
            caption_in = np.zeros((1, max_length), np.int32)
            caption_in[0, :len(words)] = ([run.vocab.start_id] + run.vocab.encode(words))[
                :len(words)]
            alpha = run.model({"image": record.image[None].astype("float32"),
                               "caption_in": caption_in}, training=False)["alpha"].numpy()
            grid = run.grid_shape
            masses = [float((alpha[0, step].reshape(grid) * region_fractions(
                [o.box], (record.height, record.width), grid)).sum()) for o in objects]
            named.append(masses[0])
            other.append(masses[1])
    assert named, "no eligible caption: pick more images"
    got = report.teacher_forced_attention(run, test)
    assert got["captions"] == len(named)
    assert got["named_object"] == pytest.approx(np.mean(named), abs=1e-6)
    assert got["other_object"] == pytest.approx(np.mean(other), abs=1e-6)


def test_seeds_train_one_run_each_and_summarize_them(tmp_path):
    done = _run("v", "--preset", "tiny", "--out-dir", str(tmp_path), "--test-images", "4",
                "--seeds", "3,5", "--override", '{"training": {"epochs": 1}}')
    assert done.returncode == 0, done.stderr[-2000:]
    *runs, summary = [json.loads(line) for line in done.stdout.splitlines()
                      if line.startswith("{")]
    assert [r["name"] for r in runs] == ["v-seed3", "v-seed5"]
    for run, seed in zip(runs, (3, 5)):
        config = json.loads((tmp_path / f"v-seed{seed}" / "config.json").read_text())
        assert config["training"]["seed"] == seed == run["seed"]
    assert summary["kind"] == "summary" and summary["seeds"] == [3, 5]
    import numpy as np

    values = [r["BLEU-4"] for r in runs]
    assert summary["BLEU-4"]["mean"] == pytest.approx(np.mean(values), abs=0.01)
    assert summary["BLEU-4"]["std"] == pytest.approx(np.std(values, ddof=1), abs=0.01)
    assert summary["BLEU-4"]["min"] == pytest.approx(min(values), abs=0.01)
    assert summary["BLEU-4"]["max"] == pytest.approx(max(values), abs=0.01)


def test_bad_seeds_are_one_line_errors(tmp_path):
    for seeds in ("1,x", "1,1", "-1"):
        done = _run("bad", "--preset", "tiny", "--out-dir", str(tmp_path), "--seeds", seeds)
        assert done.returncode == 2, (seeds, done.stderr[-500:])
        assert "Traceback" not in done.stderr
