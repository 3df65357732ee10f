"""`PROG average RUN_DIR --last N --out NEW_RUN_DIR` against a NumPy mean of the checkpoints."""

import json

import numpy as np
import pytest
import tensorflow as tf

from seq2seq.cli import main


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "source"
    assert main(["train", "--dataset", "dates", "--arch", "bahdanau", "--preset", "tiny",
                 "--epochs", "3", "--keep-checkpoints", "5", "--validation-examples", "0",
                 "--out", str(out), "--verbose", "0"]) == 0
    return out


def _model_tensors(prefix):
    """`{key: array}` of a checkpoint's model variables, read without the package."""
    reader = tf.train.load_checkpoint(str(prefix))
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
            if key.startswith("model_variables/") and key.endswith("VARIABLE_VALUE")}


@pytest.mark.slow
def test_the_averaged_run_holds_the_mean_of_the_last_checkpoints(run_dir, tmp_path, capsys):
    out = tmp_path / "averaged"
    assert main(["average", str(run_dir), "--last", "2", "--out", str(out)]) == 0
    assert "Averaged the last 2 checkpoints" in capsys.readouterr().out
    # 3 steps an epoch: ckpt-3, ckpt-6, ckpt-9, numbered by step; the average is named as
    # the newest that went in
    second, third = (_model_tensors(run_dir / "checkpoints" / f"ckpt-{n}") for n in (6, 9))
    assert sorted(p.name for p in (out / "checkpoints").glob("*.index")) == ["ckpt-9.index"]
    averaged = _model_tensors(out / "checkpoints" / "ckpt-9")
    floats = [k for k in third if third[k].dtype.kind == "f"]
    assert floats and set(averaged) == set(third)
    for key in floats:
        np.testing.assert_allclose(averaged[key], (second[key] + third[key]) / 2, rtol=1e-6,
                                   atol=1e-7)
    assert json.loads((out / "status.json").read_text())["averaged"][0].endswith("ckpt-9")
    # Every command reads it.
    assert main(["evaluate", str(out), "--dataset", "dates", "--limit", "8"]) == 0
    assert main(["translate", str(out), "Nov 3, 1999"]) == 0


@pytest.mark.slow
def test_too_few_checkpoints_or_a_taken_directory_is_one_line(run_dir, tmp_path, capsys):
    assert main(["average", str(run_dir), "--last", "9", "--out", str(tmp_path / "a")]) == 2
    assert "has 3 complete checkpoint(s); expected at least 9" in capsys.readouterr().err
    assert main(["average", str(run_dir), "--last", "2", "--out", str(run_dir)]) == 2
    assert "needs a directory of its own" in capsys.readouterr().err


@pytest.mark.slow
def test_resuming_an_averaged_run_is_refused_before_anything_is_written(run_dir, tmp_path,
                                                                       capsys):
    out = tmp_path / "averaged"
    assert main(["average", str(run_dir), "--last", "2", "--out", str(out)]) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["train", "--out", str(out), "--resume", "--verbose", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"seq2seq train: error: {out}: an averaged run holds no optimizer to resume: use "
                   f"--init-from {out} with a new --out"), err
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before  # not even config.json rewritten
    for p in before:
        assert p.stat().st_mtime_ns <= (out / "status.json").stat().st_mtime_ns, p
    # Without --resume the refusal points at --init-from, not at the --resume just refused.
    assert main(["train", "--dataset", "dates", "--arch", "transformer", "--out", str(out),
                 "--verbose", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "already holds an averaged run" in err and f"--init-from {out}" in err, err
    assert "--resume" not in err, err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_a_refused_average_leaves_no_directory_behind(run_dir, tmp_path, capsys):
    """A source that is the other family's run is refused before the new directory exists."""
    from captioner.cli import main as captioner_main

    new = tmp_path / "new"
    assert captioner_main(["average", str(run_dir), "--last", "2", "--out", str(new)]) == 2
    assert "error" in capsys.readouterr().err
    assert not new.exists()


@pytest.mark.slow
def test_a_full_disk_takes_back_the_partial_average(run_dir, tmp_path, capsys, monkeypatch):
    """A write that fails half-way (TensorFlow's temporary checkpoint folder left behind) is
    one line, and leaves nothing that would make the same command refuse the directory."""
    import common.training.checkpoints as checkpoints

    def full_disk(model, prefix):
        partial = prefix.parent / f"{prefix.name}_temp"
        partial.mkdir(parents=True)
        (partial / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"\0" * 10)
        raise tf.errors.ResourceExhaustedError(
            None, None, "{{function_node __wrapped__SaveV2}} /x/ckpt-1_temp/part; No space "
            "left on device [Op:SaveV2]")

    out = tmp_path / "averaged"
    with monkeypatch.context() as patch:
        patch.setattr(checkpoints, "write_model_checkpoint", full_disk)
        assert main(["average", str(run_dir), "--last", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "No space left on device" in err
    assert not out.exists()
    assert main(["average", str(run_dir), "--last", "2", "--out", str(out)]) == 0
