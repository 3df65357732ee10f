"""The benchmarks' timing helpers (`scripts/benchmarks/_lib/benchmark.py`) and the training
benchmark script (`scripts/benchmarks/benchmark_training.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.errors import UserError
from tests.helpers import benchmarks

_lib = benchmarks.benchmark_lib("benchmark")
Throughput, alternate, format_table = _lib.Throughput, _lib.alternate, _lib.format_table
load_peer, time_steps, write_json = _lib.load_peer, _lib.time_steps, _lib.write_json

REPO = Path(__file__).resolve().parents[3]


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fake_run(clock: FakeClock, fetch_s: list[float], step_s: float, examples=8.0, count=50.0):
    """Batches that take `fetch_s[i]` to fetch, and a step that takes `step_s`."""
    delays = iter(fetch_s)

    def batches():
        for i, delay in enumerate(delays):
            clock.now += delay
            yield i

    seen = []

    def step(batch):
        seen.append(batch)
        clock.now += step_s
        return {"examples": examples, "count": count, "loss": 1.0}

    return batches(), step, seen


def test_time_steps_splits_input_wait_from_compute_and_skips_warmup():
    clock = FakeClock()
    # Two slow warm-up steps (tracing), then 4 timed steps: 0.1 s fetch + 0.3 s step each.
    batches, step, seen = fake_run(clock, [5.0, 5.0, 0.1, 0.1, 0.1, 0.1], 0.3)
    result = time_steps(step, batches, steps=4, warmup=2, clock=clock)
    assert seen == [0, 1, 2, 3, 4, 5]
    assert result.steps == 4
    assert result.seconds == pytest.approx(1.6)
    assert result.warmup_s == pytest.approx(10.6)
    assert result.examples == 32 and result.tokens == 200
    assert result.examples_per_s == pytest.approx(32 / 1.6)
    assert result.tokens_per_s == pytest.approx(200 / 1.6)
    assert result.input_wait_share == pytest.approx(0.1 / 0.4)
    assert result.median_step_ms == pytest.approx(400.0)


def test_input_wait_share_reflects_a_slow_pipeline():
    clock = FakeClock()
    batches, step, _ = fake_run(clock, [0.0, 0.9, 0.9, 0.0, 0.0], 0.1)
    result = time_steps(step, batches, steps=4, warmup=1, clock=clock)
    # Waits 0.9 + 0.9 + 0 + 0 of 0.9 + 0.9 + 4 * 0.1 seconds.
    assert result.input_wait_share == pytest.approx(1.8 / 2.2)
    assert result.median_step_ms == pytest.approx(550.0)


def test_as_dict_carries_the_rates():
    result = Throughput(steps=2, seconds=4.0, examples=64.0, tokens=640.0, input_wait_s=1.0,
                        step_times_s=(1.0, 3.0), warmup_s=9.0)
    record = result.as_dict()
    assert record["examples_per_s"] == 16.0 and record["tokens_per_s"] == 160.0
    assert record["input_wait_share"] == 0.25 and record["median_step_ms"] == 2000.0
    json.dumps(record)


def test_data_running_out_is_a_user_error_saying_how_many():
    clock = FakeClock()
    batches, step, _ = fake_run(clock, [0.0] * 3, 0.1)
    with pytest.raises(UserError, match="ran out after 3 batches; expected 5"):
        time_steps(step, batches, steps=3, warmup=2, clock=clock)


@pytest.mark.parametrize("steps, warmup", [(0, 1), (2, -1), (1.5, 0), (True, 0)])
def test_bad_step_counts_are_user_errors(steps, warmup):
    with pytest.raises(UserError, match="must be an integer"):
        time_steps(lambda b: {}, iter([]), steps=steps, warmup=warmup)


def test_a_step_without_examples_and_count_is_refused():
    with pytest.raises(TypeError, match="'examples' and 'count'"):
        time_steps(lambda b: {"loss": 1.0}, iter([1, 2]), steps=1, warmup=0)


def test_format_table_aligns_columns_and_marks_missing_values():
    rows = [{"arch": "transformer", "examples_per_s": 55.123456},
            {"arch": "bahdanau", "examples_per_s": 1234.5, "extra": 1}]
    lines = format_table(rows, ["arch", "examples_per_s", "gpu"]).splitlines()
    assert lines == [
        "arch         examples_per_s  gpu",
        "transformer  55.12           -",
        "bahdanau     1234            -",
    ]


def test_write_json_records_the_device_and_results(tmp_path):
    path = write_json(tmp_path / "sub" / "bench.json", [{"examples_per_s": 1.5}], command="x")
    payload = json.loads(path.read_text())
    assert payload["results"] == [{"examples_per_s": 1.5}]
    assert payload["command"] == "x"
    device = payload["device"]
    assert device["cpu_count"] >= 1 and device["tensorflow"] and "gpus" in device


def load_script():
    return benchmarks.load_script("benchmark_training")


@pytest.fixture(scope="module")
def sides_built_once():
    """The training benchmark with each side it times built once for the module
    (`_transformer_side`, `_captioner_side`): its runs with and without the peer programs time
    the same project sides, so a later run times those an earlier one built, as a model that
    several tests need is made once. Each run still warms every side up and times it in its
    own alternating rounds; a run alone (or without the peer programs, the other skipped)
    builds its own."""
    script = load_script()
    for name in ("_transformer_side", "_captioner_side"):
        setattr(script, name, _built_once(getattr(script, name)))
    return script


def _built_once(build):
    """`build`, each distinct call made once: a later call with the same arguments (a
    `bench` aside: the data, which each run makes again) gets what the first one built."""
    built = {}

    def once(*args, **kwargs):
        key = (args, tuple(sorted((k, v) for k, v in kwargs.items() if k != "bench")))
        if key not in built:
            built[key] = build(*args, **kwargs)
        return built[key]

    return once


def test_benchmark_script_times_both_translators(tmp_path, capsys):
    script = load_script()
    out = tmp_path / "bench.json"
    status = script.main(["--arch", "transformer,bahdanau", "--size", "tiny", "--steps", "2",
                          "--warmup", "1", "--batch-size", "4", "--length", "5",
                          "--out", str(out)])
    assert status == 0
    results = json.loads(out.read_text())["results"]
    assert [r["arch"] for r in results] == ["transformer", "bahdanau"]
    for r in results:
        assert r["steps"] == 2 and r["examples"] == 8  # 2 steps of 4
        assert r["tokens"] == 2 * 4 * 5  # no padding: every target token counts
        assert r["examples_per_s"] > 0 and 0 <= r["input_wait_share"] < 1
        assert r["params"] > 0
    assert "examples_per_s" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--size", "huge"], "unknown size 'huge'"),
    (["--arch", "bahdanau", "--size", "keras-io"], "Transformer size"),
    (["--model", "gpt"], "gpt"),
    (["--precision", "float8"], "precision"),
])
def test_benchmark_script_rejects_bad_options_in_one_line(argv, message, capsys):
    assert load_script().main([*argv, "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_benchmark_script_reads_a_real_dataset_through_the_training_pipeline(tmp_path):
    out = tmp_path / "bench.json"
    status = load_script().main(["--arch", "transformer", "--size", "tiny", "--data", "dates",
                                 "--steps", "2", "--warmup", "1", "--batch-size", "4",
                                 "--out", str(out)])
    assert status == 0
    (result,) = json.loads(out.read_text())["results"]
    assert result["data"] == "dates" and result["examples"] == 8
    # Real targets are shorter than `--length` and padded: fewer tokens than 8 * 20.
    assert 8 <= result["tokens"] < 8 * 20


def test_alternate_takes_turns_and_reverses_the_order_every_other_round():
    calls = []

    def measure(name, value):
        return lambda: calls.append(name) or value

    figures = alternate({"ours": measure("ours", 1.0), "peer": measure("peer", 3.0)}, 4)
    assert calls == ["ours", "peer", "peer", "ours", "ours", "peer", "peer", "ours"]
    assert figures == {"ours": [1.0] * 4, "peer": [3.0] * 4}
    with pytest.raises(UserError, match="rounds must be an integer >= 1"):
        alternate({"ours": measure("ours", 1.0)}, 0)


def test_load_peer_imports_a_program_from_its_folder_or_gives_none(tmp_path):
    assert load_peer("keras_io_nmt", tmp_path / "missing") is None
    assert load_peer("nothing_here", tmp_path) is None
    (tmp_path / "fake_peer.py").write_text("ANSWER = 42\n")
    module = load_peer("fake_peer", tmp_path)
    assert module.ANSWER == 42 and load_peer("fake_peer", tmp_path) is module


PEERS = REPO.parent / "shared" / "peers"


def test_the_peers_folder_is_beside_the_repository():
    """`../shared/peers` from the repository root, wherever the helpers live."""
    assert _lib.PEERS_DIR == PEERS


def run_vs_peer(script, tmp_path, *extra):
    out = tmp_path / "vs_peer.json"
    status = script.main(["--vs-peer", "--quick", *extra, "--out", str(out)])
    assert status == 0
    return json.loads(out.read_text())


@pytest.mark.slow
def test_vs_peer_times_the_keras_io_example_and_the_same_size_alternately(
        sides_built_once, tmp_path, capsys):
    if load_peer("keras_io_nmt", PEERS) is None:
        pytest.skip(f"no peer programs at {PEERS}")
    payload = run_vs_peer(sides_built_once, tmp_path)
    sides = {row["side"]: row for row in payload["results"]}
    assert list(sides) == ["project", "project-keras-attention", "peer"]
    project, keras_attention, peer = sides.values()
    assert payload["peer_found"] and payload["peers_dir"] == str(PEERS)
    for row in (project, keras_attention, peer):
        assert row["batch"] == 8 and row["length"] == 20 and row["rounds"] == 3
        assert len(row["examples_per_s_per_round"]) == 3 and row["examples_per_s"] > 0
        assert row["tflops"] == pytest.approx(
            row["flops_per_step"] * row["examples_per_s"] / 8 / 1e12)
    assert peer["params"] == 19_960_216 and peer["head_dim"] == project["head_dim"] == 256
    assert abs(project["params"] - peer["params"]) < 0.001 * peer["params"]
    assert project["flops_per_step"] == peer["flops_per_step"]  # equal size: equal FLOPs
    assert payload["examples_per_s_ratio"] == pytest.approx(
        project["examples_per_s"] / peer["examples_per_s"])
    assert payload["tflops_ratio"] == pytest.approx(project["tflops"] / peer["tflops"])
    # The project before the fused attention projections: the same model, the same FLOPs.
    assert keras_attention["params"] == project["params"]
    assert keras_attention["flops_per_step"] == project["flops_per_step"]
    assert payload["fused_over_keras_attention"] == pytest.approx(
        project["examples_per_s"] / keras_attention["examples_per_s"])
    assert "x the examples/s" in capsys.readouterr().out


def test_vs_peer_without_the_peer_folder_times_the_project_alone(sides_built_once, tmp_path,
                                                                capsys):
    payload = run_vs_peer(sides_built_once, tmp_path, "--peers", str(tmp_path / "no_peers"))
    project, keras_attention = payload["results"]
    assert project["side"] == "project" and project["examples_per_s"] > 0
    assert keras_attention["side"] == "project-keras-attention"
    assert not payload["peer_found"]
    assert payload["examples_per_s_ratio"] is None and payload["tflops_ratio"] is None
    out = capsys.readouterr().out
    assert "no ratio" in out and "keras-io example at equal size" not in out


@pytest.mark.parametrize("argv, message", [
    (["--size", "base"], "--size must be keras-io"),
    (["--length", "32"], "--length must be 20"),
    (["--rounds", "2"], "--rounds must be >= 3"),
    (["--jit-compile"], "without XLA"),
])
def test_vs_peer_rejects_unequal_settings_in_one_line(argv, message, capsys):
    assert load_script().main(["--vs-peer", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_vs_keras_attention_times_fused_and_keras_attention_alternately(tmp_path, capsys):
    out = tmp_path / "fused.json"
    status = load_script().main(["--vs-keras-attention", "--size", "tiny", "--quick",
                                 "--out", str(out)])
    assert status == 0
    payload = json.loads(out.read_text())
    fused, keras_attention = payload["results"]
    assert (fused["side"], keras_attention["side"]) == ("fused", "keras-attention")
    for row in (fused, keras_attention):
        assert row["size"] == "tiny" and row["batch"] == 8 and row["rounds"] == 3
        assert len(row["steps_per_s_per_round"]) == 3
        assert row["steps_per_s"] == sorted(row["steps_per_s_per_round"])[1]  # the median
    assert fused["params"] == keras_attention["params"]
    assert payload["fused_over_keras_attention"] == pytest.approx(
        fused["steps_per_s"] / keras_attention["steps_per_s"])
    assert "x the steps/s" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--arch", "bahdanau"], "times the Transformer"),
    (["--size", "tiny,keras-io"], "takes one size"),
    (["--rounds", "2"], "--rounds must be >= 3"),
    (["--jit-compile"], "without XLA"),
])
def test_vs_keras_attention_rejects_bad_options_in_one_line(argv, message, capsys):
    assert load_script().main(["--vs-keras-attention", "--size", "tiny", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def run_captioner_vs_peer(script, tmp_path, *extra):
    out = tmp_path / "captioner_vs_peer.json"
    status = script.main(["--model", "captioner", "--vs-peer", "--quick", *extra,
                          "--out", str(out)])
    assert status == 0
    return json.loads(out.read_text())


def _check_captioner_rows(payload):
    rows = {row["side"]: row for row in payload["results"]}
    for row in rows.values():
        assert row["rounds"] == 3 and len(row["examples_per_s_per_round"]) == 3
        assert row["examples_per_s"] == sorted(row["examples_per_s_per_round"])[1]  # median
        assert row["steps_per_s"] == pytest.approx(row["examples_per_s"] / row["batch"])
        assert row["tflops"] == pytest.approx(
            row["flops_per_step"] * row["steps_per_s"] / 1e12)
    assert payload["demo_steps_per_s_ratio"] == pytest.approx(
        rows["demo"]["steps_per_s"] / rows["demo, per-step"]["steps_per_s"])
    assert payload["coco_cached_steps_per_s_ratio"] == pytest.approx(
        rows["project"]["steps_per_s"] / rows["project, per-step"]["steps_per_s"])
    # --quick: demo is the project's configuration (tiny, batch 8), so it is built and timed
    # once, with the project; its rows carry those figures and say so.
    assert {side: row.get("timed_with") for side, row in rows.items() if side != "peer"} == {
        "project": None, "project, per-step": None, "project, mixed_bfloat16": None,
        "demo": "project", "demo, per-step": "project, per-step"}
    for side in ("demo", "demo, per-step"):
        assert (rows[side]["examples_per_s_per_round"]
                == rows[rows[side]["timed_with"]]["examples_per_s_per_round"])
    return rows


@pytest.mark.slow
def test_captioner_vs_peer_times_the_tutorial_captioner_and_the_project_alternately(
        sides_built_once, tmp_path, capsys):
    if load_peer("tf_captioning", PEERS) is None:
        pytest.skip(f"no peer programs at {PEERS}")
    payload = run_captioner_vs_peer(sides_built_once, tmp_path)
    rows = _check_captioner_rows(payload)
    assert set(rows) == {"project", "project, per-step", "project, mixed_bfloat16", "demo",
                         "demo, per-step", "peer"}
    peer = rows["peer"]
    assert peer["batch"] == 32 and peer["length"] == 20  # as published
    assert peer["flops_per_step"] == pytest.approx(24.6e9, rel=0.01)  # the count
    assert payload["tflops_ratio"] == pytest.approx(rows["project"]["tflops"] / peer["tflops"])
    assert payload["tflops_ratio_mixed_bfloat16"] == pytest.approx(
        rows["project, mixed_bfloat16"]["tflops"] / peer["tflops"])
    out = capsys.readouterr().out
    assert "x the FLOP rate" in out and "demo: the configuration of project, timed once" in out


def test_captioner_vs_peer_without_the_peer_folder_times_the_project_alone(
        sides_built_once, tmp_path, capsys):
    payload = run_captioner_vs_peer(sides_built_once, tmp_path, "--peers",
                                    str(tmp_path / "no_peers"))
    rows = _check_captioner_rows(payload)
    assert set(rows) == {"project", "project, per-step", "project, mixed_bfloat16", "demo",
                         "demo, per-step"}
    assert all(row["size"] == "tiny" and row["batch"] == 8 for row in rows.values())
    assert not payload["peer_found"] and payload["tflops_ratio"] is None
    assert "no ratio" in capsys.readouterr().out
