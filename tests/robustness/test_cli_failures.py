"""Training from the command lines: a diverging loss and an output directory that cannot be
written each end with one line on stderr and exit status 2, leaving no corrupt run."""

from __future__ import annotations

import json

import pytest

from captioner.cli import main as captioner_main
from seq2seq.cli import main as seq2seq_main

TINY = ["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
        "--verbose", "0"]


def one_line_error(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines()
           if line.strip() and "WARNING" not in line and not line.startswith(" ")]
    assert len(err) == 1, err
    return err[0]


@pytest.mark.slow
def test_a_diverging_translator_stops_with_exit_2_and_keeps_the_good_checkpoint(tmp_path, capsys):
    run = tmp_path / "run"
    assert seq2seq_main([*TINY, "--out", str(run)]) == 0  # 3 good steps, ckpt-3
    capsys.readouterr()
    status = seq2seq_main([*TINY, "--out", str(run), "--resume", "--epochs", "2",
                           "--learning-rate", "1e30", "--checkpoint-every", "1"])
    assert status == 2
    error = one_line_error(capsys)
    assert error.startswith("seq2seq train: error: training diverged: the loss was nan")
    assert "Last good checkpoint: " + str(run / "checkpoints" / "ckpt-3") in error
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "checkpoint", "ckpt-3.data-00000-of-00001", "ckpt-3.index"]
    state = json.loads((run / "status.json").read_text())
    assert state["state"] == "failed" and state["step"] == 3
    assert seq2seq_main(["translate", str(run), "March 3, 1999"]) == 0  # still usable


@pytest.mark.parametrize("main, argv", [
    (seq2seq_main, TINY),
    (captioner_main, ["train", "--preset", "tiny"]),
])
def test_an_output_path_that_cannot_be_a_directory_is_a_one_line_error(main, argv, tmp_path,
                                                                        capsys):
    # Running as root, permission bits do not stop writes: a file standing where the run
    # directory's parent should be is what makes the path unwritable here.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main([*argv, "--out", str(blocker / "run")]) == 2
    error = one_line_error(capsys)
    assert f"cannot write {blocker / 'run'}: Not a directory" in error
    assert "expected a writable run directory" in error
    assert blocker.read_text() == ""


@pytest.mark.parametrize("main, argv", [
    (seq2seq_main, TINY),
    (captioner_main, ["train", "--preset", "tiny"]),
])
def test_a_read_only_output_directory_is_a_one_line_error(main, argv, tmp_path, capsys):
    import os

    if os.geteuid() == 0:
        pytest.skip("running as root: permission bits do not stop writes (see the test above)")
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    readonly.chmod(0o555)
    try:
        assert main([*argv, "--out", str(readonly)]) == 2
    finally:
        readonly.chmod(0o755)
    assert "Permission denied" in one_line_error(capsys)
    assert list(readonly.iterdir()) == []
