"""scripts/benchmarks/benchmark_decoding.py runs at a tiny size, finds identical tokens on every path
and reports ratios of its own medians."""

import json
import statistics

import pytest

from tests.helpers.benchmarks import load_script


def _script():
    return load_script("benchmark_decoding")


@pytest.mark.parametrize("beam", [1, 2])
def test_quick_run_agrees_and_its_ratios_are_of_its_medians(tmp_path, beam):
    out = tmp_path / "bench.json"
    assert _script().main(["--quick", "--beam-size", str(beam), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["beam_size"] == beam and report["output_tokens"] == 8
    assert report["rounds"] == 3 and "load_average_1m" in report["device"]
    assert [row["batch_size"] for row in report["results"]] == [2, 4]
    for row in report["results"]:
        assert row["identical_tokens"] and row["all_outputs_full_length"]
        for path in ("cached", "cached_xla", "uncached"):
            assert len(row["rounds_s"][path]) == 3
            assert row[f"{path}_s"] == statistics.median(row["rounds_s"][path])
        assert row["speedup_cached_xla"] == row["uncached_s"] / row["cached_xla_s"]
        assert row["speedup_cached"] == row["uncached_s"] / row["cached_s"]
        ops = row["ops_per_step"]
        assert set(ops) == {"cached", "uncached"} and ops["cached"] > 0


def test_loop_body_ops_counts_the_operations_of_the_while_body():
    """A loop whose body is `(i + 1, x * 2 - 1)`: three operations (AddV2, Mul, Sub) and the
    AddV2 of the iteration counter that `tf.while_loop` adds to every body; the condition's
    `Less`, constants and identities are not counted."""
    import tensorflow as tf

    @tf.function(autograph=False)
    def loop(x):
        return tf.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * 2.0 - 1.0),
                             (tf.constant(0), x))

    assert _script().loop_body_ops(loop, tf.constant(1.0)) == 4


def test_fewer_than_three_rounds_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        _script().parse_args(["--rounds", "2"])
    assert exit_info.value.code == 2
    assert "--rounds must be at least 3" in capsys.readouterr().err
