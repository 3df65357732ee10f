"""`train --init-from RUN_DIR[:CHECKPOINT]`: a new run starts from another run's weights."""

import json

import pytest

from captioner.cli import main as captioner_main
from seq2seq.cli import main as seq2seq_main

TINY = ["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
        "--verbose", "0"]


@pytest.fixture(scope="module")
def source_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "source"
    assert seq2seq_main([*TINY, "--out", str(out)]) == 0
    return out


def _epochs(run_dir):
    records = [json.loads(line) for line in (run_dir / "history.jsonl").open()]
    return [r for r in records if r["kind"] == "epoch"]


@pytest.mark.slow
def test_a_warm_start_trains_on_from_the_other_runs_weights(source_run, tmp_path, capsys):
    warm = tmp_path / "warm"
    assert seq2seq_main([*TINY, "--out", str(warm), "--init-from", f"{source_run}:last",
                         "--verbose", "1"]) == 0
    assert f"Starting from the weights of {source_run}/checkpoints/ckpt-" in capsys.readouterr().out
    # Its first epoch's loss is the source's last loss, not a fresh model's first.
    cold = tmp_path / "cold"
    assert seq2seq_main([*TINY, "--out", str(cold)]) == 0
    assert _epochs(warm)[0]["loss"] < _epochs(cold)[0]["loss"]
    assert _epochs(warm)[0]["step"] == _epochs(cold)[0]["step"]  # the position starts afresh


@pytest.mark.slow
def test_a_resumed_run_says_it_does_not_take_the_warm_start(source_run, tmp_path, capsys):
    # The same command again with --resume must pass, so --init-from is not refused; the
    # run goes on from its own checkpoint and says that the warm start is not used.
    warm = tmp_path / "warm"
    assert seq2seq_main([*TINY, "--out", str(warm), "--init-from", str(source_run)]) == 0
    before = _epochs(warm)
    capsys.readouterr()
    assert seq2seq_main([*TINY, "--out", str(warm), "--init-from", str(source_run), "--resume",
                         "--epochs", str(len(before) + 1), "--verbose", "2"]) == 0
    said = capsys.readouterr().out
    assert f"Not starting from the weights of {source_run}" in said
    assert "goes on from its own checkpoint" in said
    assert _epochs(warm)[:len(before)] == before and len(_epochs(warm)) == len(before) + 1


@pytest.mark.slow
def test_other_vocabularies_or_a_missing_checkpoint_are_one_line(source_run, tmp_path, capsys):
    status = seq2seq_main([*TINY, "--out", str(tmp_path / "a"), "--max-vocab", "20",
                           "--init-from", str(source_run)])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "vocab.source.txt differs from this run's" in err and "first difference at id" in err
    status = seq2seq_main([*TINY, "--out", str(tmp_path / "b"), "--init-from",
                           f"{source_run}:9"])
    err = capsys.readouterr().err
    assert status == 2 and "has no checkpoint number 9; it has: ckpt-" in err
    status = seq2seq_main([*TINY, "--out", str(tmp_path / "b"), "--init-from",
                           f"{source_run}:nope"])
    err = capsys.readouterr().err
    assert status == 2 and f"--init-from {source_run}: 'nope': expected best, last" in err
    status = seq2seq_main([*TINY, "--out", str(tmp_path / "c"), "--init-from",
                           str(tmp_path / "nowhere")])
    assert status == 2 and "is not a run directory" in capsys.readouterr().err
    # A run of the other family is refused by its config.
    status = captioner_main(["train", "--preset", "tiny", "--out", str(tmp_path / "d"),
                             "--init-from", str(source_run)])
    assert status == 2 and "not a captioner run config" in capsys.readouterr().err


@pytest.mark.slow
def test_a_warm_start_may_change_the_dropout_rates(source_run, tmp_path, capsys):
    """The source trained without dropout (no random generators in its checkpoint); a warm
    start with dropout, and attention and activation rates of their own, has more, and loads
    the weights."""
    warm = tmp_path / "warm"
    rates = ["--dropout", "0.2", "--attention-dropout", "0.3", "--activation-dropout", "0.05"]
    assert seq2seq_main([*TINY, "--out", str(warm), "--init-from", f"{source_run}:last",
                         *rates, "--verbose", "1"]) == 0
    assert f"Starting from the weights of {source_run}/checkpoints/ckpt-" in capsys.readouterr().out
    config = json.loads((warm / "config.json").read_text())["model"]["transformer"]
    assert (config["dropout"], config["attention_dropout"],
            config["activation_dropout"]) == (0.2, 0.3, 0.05)
    cold = tmp_path / "cold"
    assert seq2seq_main([*TINY, "--out", str(cold), *rates]) == 0
    assert _epochs(warm)[0]["loss"] < _epochs(cold)[0]["loss"]
