"""scripts/benchmarks/benchmark_latency.py: the table runs end to end, and the keras-io comparison times
the keras-io example in the same run (or gives no ratio without it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.benchmarks import benchmark_lib, load_script, script_path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = script_path("benchmark_latency")
PEERS = REPO.parent / "shared" / "peers"


def _script():
    return load_script("benchmark_latency")


def _run(tmp_path, *argv):
    out = tmp_path / "latency.json"
    status = _script().main(["--quick", *argv, "--out", str(out)])
    assert status == 0
    return json.loads(out.read_text())


def test_no_figure_of_another_program_is_written_in_the_script():
    text = SCRIPT.read_text()
    assert "1.6" not in text and "KERAS_IO_SECONDS" not in text


def test_quick_table_without_the_peer_folder_gives_no_ratio(tmp_path, capsys):
    payload = _run(tmp_path, "--models", "bahdanau,keras-io", "--beams", "2",
                   "--peers", str(tmp_path / "no_peers"))
    table = payload["results"]
    assert {r["model"] for r in table} == {"bahdanau"}
    assert {(r["method"], r["beam"], r["batch"]) for r in table} == {
        (method, beam, batch) for method, beam in (("greedy", 1), ("beam", 2))
        for batch in (1, 4)}
    assert all(r["full_length"] and r["batch_ms"] > 0 for r in table)
    keras_io = payload["keras_io"]
    assert not keras_io["peer_found"] and keras_io["sentence"] is None
    assert [(r["side"], r["path"]) for r in keras_io["rows"]] == [
        ("project", "cached"), ("project", "uncached")]
    for row in keras_io["rows"]:
        assert row["speedup"] is None and row["full_length"]
        assert row["batch"] == 1 and row["tokens"] == 20 and len(row["times_s"]) == 3
    assert keras_io["speedup_cached"] is None and keras_io["speedup_uncached"] is None
    assert len(keras_io["source_ids"]) == 20
    out = capsys.readouterr().out
    assert "no ratio" in out and "faster" not in out


@pytest.mark.slow
def test_keras_io_is_timed_against_the_example_in_the_same_run(tmp_path, capsys):
    peer = benchmark_lib("benchmark").load_peer("keras_io_nmt", PEERS)
    if peer is None:
        pytest.skip(f"no peer programs at {PEERS}")
    keras_io = _run(tmp_path, "--models", "keras-io")["keras_io"]
    assert keras_io["peer_found"] and keras_io["peers_dir"] == str(PEERS)
    cached, uncached, example = keras_io["rows"]
    assert example["side"] == "peer" and example["params"] == 19_960_216
    assert abs(cached["params"] - example["params"]) < 0.001 * example["params"]
    for row in (cached, uncached, example):
        assert row["full_length"] and row["tokens"] == 20 and row["batch"] == 1
        assert len(row["times_s"]) == 3 and row["median_ms"] > 0
    assert cached["speedup"] == pytest.approx(example["median_ms"] / cached["median_ms"])
    assert keras_io["speedup_uncached"] == pytest.approx(
        example["median_ms"] / uncached["median_ms"])
    # the same sentence: the project decoded the example's own ids of it
    sentence = keras_io["sentence"]
    ids = peer.Peer().eng_vectorization([sentence]).numpy()[0].tolist()
    assert keras_io["source_ids"] == ids
    assert "faster than the keras-io example" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--rounds", "2"], "--rounds must be >= 3"),
    (["--models", "gpt"], "unknown model 'gpt'"),
    (["--repeats", "0"], "--repeats must be >= 1"),
    (["--models", "keras-io", "--tokens", "30"], "at most 20 tokens"),
])
def test_bad_options_are_one_line_errors(argv, message, capsys):
    assert _script().main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
