"""The JAX path from the command line: `prepare`, `KERAS_BACKEND=jax train --prepared`, then
the TensorFlow commands read the run (its `model.weights.h5`) and export it.

The commands under KERAS_BACKEND=jax run in child processes, several to a process
(`tests.helpers.commands.run_commands`: each is `python -m seq2seq ARGV`, its status and its
output captured at the file descriptors, the folders it must not touch fingerprinted just
before and after it), one process per device count: `dates_run` (`prepare`, then `train`),
then `jax_commands` (every other one). A TensorFlow command runs in-process (`_main`: this
process has the TensorFlow backend), its file descriptors captured, so that a message is
still one line of all it writes."""

import json
import shutil

import pytest

from seq2seq.cli import main
from tests.helpers.commands import CommandResult, run_commands
from tests.jax.conftest import REPO, requires_jax, worker_env

# The JAX processes' devices: two, so that data-parallel splits each batch and model-parallel
# has a model axis.
DEVICES = 2


def _jax_env() -> dict[str, str]:
    """`worker_env` for KERAS_BACKEND=jax on `DEVICES` devices, LLVM at -O0 behind XLA's CPU
    backend: the same programs, compiled in about half the time, for runs of a few steps."""
    env = worker_env("jax", devices=DEVICES)
    env["XLA_FLAGS"] += " --xla_backend_optimization_level=0"
    return env


def _main(capfd, *argv):
    """`seq2seq ARGV` in this process, on TensorFlow: (status, stdout, stderr)."""
    capfd.readouterr()
    status = main(list(argv))
    out, err = capfd.readouterr()
    return status, out, err


def _one_line(result: CommandResult, message: str) -> None:
    """A refusal: exit status 2 and `message` in one line on stderr."""
    assert result.status == 2 and message in result.err, result.err[-2000:]
    assert len(result.err.strip().splitlines()) == 1, result.err[-2000:]


@pytest.fixture(scope="module")
def dates_folders(tmp_path_factory):
    """Two prepared `dates` folders of the tiny Transformer, the second 24 wide with 3 heads
    (another model, whose heads 2 devices do not divide): the first by `prepare` under
    KERAS_BACKEND=jax, then trained from the command line there (`dates_run`), the second in
    this process."""
    root = tmp_path_factory.mktemp("dates")
    prepare = ["prepare", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny"]
    run = root / "dates-run" / "run"
    results = run_commands("seq2seq", [
        [*prepare, "--out", root / "a"],
        ["train", "--prepared", root / "a", "--out", run, "--epochs", "1", "--steps-per-epoch",
         "2", "--batch-size", "16", "--seed", "7", "--distribute", "data-parallel",
         "--validation-examples", "0"],
    ], env=_jax_env(), cwd=REPO)
    for result in results:
        assert result.status == 0, result.err[-2000:]
    assert main([*prepare, "--out", str(root / "b"), "--hidden-dim", "24",
                 "--heads", "3"]) == 0
    return root / "a", root / "b", run


@pytest.fixture(scope="module")
def dates_run(dates_folders):
    """A JAX run of the first folder from the command line: one epoch of 2 steps of 16 pairs,
    seed 7, data-parallel over 2 devices (tests that train on, or write into, a run take a
    copy)."""
    return dates_folders[2]


# The refusals of `train --prepared`: (folder, options, message), the folder 0 (the tiny
# Transformer) or 1 (24 wide, 3 heads).
REFUSALS = [
    (0, ["--deterministic"], "--deterministic needs the tensorflow trainer"),
    (0, ["--model-parallel", "2"], "--model-parallel 2 needs --distribute model-parallel"),
    (0, ["--distribute", "model-parallel", "--model-parallel", "3"],
     "model_parallel 3 does not divide the 2 devices"),
    (1, ["--distribute", "model-parallel", "--model-parallel", "2"],  # 2 devices, 3 heads
     "model_parallel 2 does not divide the model: a weight of shape (24, 3, 8) is split"),
]


@pytest.fixture(scope="module")
def jax_commands(dates_folders, dates_run, tmp_path_factory) -> dict:
    """Every other command under KERAS_BACKEND=jax, in one process of 2 devices, by name:
    `CommandResult`s, and `root`, `resumed`, `tf_run`, `imported` (the runs they read)."""
    from common.training.cross_backend import import_jax_weights

    mine, other, _ = dates_folders
    root = tmp_path_factory.mktemp("jax-commands")
    resumed, tf_run, imported = root / "resumed", root / "tf-run", root / "imported"
    for copy in (resumed, tf_run, imported):
        shutil.copytree(dates_run, copy)  # 1 epoch of 2 steps, batch size 16, seed 7
    # A TensorFlow run's layout: checkpoints/ckpt-N and no jax/.
    shutil.rmtree(tf_run / "jax")
    (tf_run / "checkpoints").mkdir()
    (tf_run / "checkpoints" / "ckpt-4.index").write_bytes(b"")
    import_jax_weights(imported)  # TensorFlow checkpoints beside the JAX ones

    train = ["train", "--prepared"]
    deterministic = root / "deterministic.json"  # a setting only a config file sets here
    deterministic.write_text('{"training": {"deterministic": true}}')
    commands = {
        # The two that train first: a command that stops a model build halfway (refusal-4)
        # leaves Keras's variables in a state that no later command could train with.
        "resume": [*train, mine, "--out", resumed, "--epochs", "2", "--resume"],
        "model_parallel": [*train, mine, "--out", root / "model-parallel", "--epochs", "1",
                           "--steps-per-epoch", "2", "--distribute", "model-parallel",
                           "--model-parallel", "2", "--validation-examples", "0"],
        "resume_other": {"argv": [*train, other, "--out", resumed, "--resume"],
                         "watch": [resumed]},
        "resume_tf_run": {"argv": [*train, mine, "--out", tf_run, "--resume"],
                          "watch": [tf_run]},
        "resume_imported": [*train, mine, "--out", imported, "--epochs", "2", "--resume"],
        "prepared_as_out": {"argv": [*train, mine, "--out", mine, "--epochs", "1"],
                            "watch": [mine]},
        "translate": ["translate", root / "run", "Nov 3, 1999"],
        # The command TensorFlow takes: the data prepared into the run directory first.
        "from_data": ["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
                      "--out", root / "from-data", "--validation-examples", "5",
                      "--validation-beam-size", "2", "--distribute", "none"],
        "config_deterministic": {"argv": ["train", "--dataset", "dates", "--arch", "transformer",
                                          "--preset", "tiny", "--config", deterministic,
                                          "--out", root / "det"],
                                 "watch": [root]},
        "init_from": {"argv": ["train", "--dataset", "dates", "--arch", "transformer",
                               "--preset", "tiny", "--init-from", root / "run",
                               "--out", root / "warm"],
                      "watch": [root]},
        **{f"refusal-{i}": [*train, dates_folders[folder], "--out", root / f"refused-{i}",
                            *options] for i, (folder, options, _) in enumerate(REFUSALS)},
    }
    results = run_commands("seq2seq", list(commands.values()),
                           env=_jax_env(), cwd=REPO)
    return {**dict(zip(commands, results, strict=True)), "root": root, "resumed": resumed,
            "tf_run": tf_run, "imported": imported}


@requires_jax
@pytest.mark.slow
def test_prepare_train_on_jax_then_translate_and_export_with_tensorflow(dates_run, tmp_path,
                                                                        capsys):
    """`dates_folders` ran `prepare` and `train --distribute data-parallel` on the command
    line (under KERAS_BACKEND=jax); this process reads the run on TensorFlow."""
    run = dates_run
    assert (run / "model.weights.h5").is_file() and not (run / "checkpoints").exists()
    status = json.loads((run / "status.json").read_text())
    assert status["mesh"] == {"batch": DEVICES} and status["state"] == "finished"

    capsys.readouterr()
    assert main(["translate", str(run), "Nov 3, 1999", "12 May 2020"]) == 0
    in_process = capsys.readouterr().out
    assert main(["export", str(run), str(tmp_path / "export"), "--beam-sizes", "1"]) == 0
    capsys.readouterr()
    assert main(["translate", str(tmp_path / "export"), "Nov 3, 1999", "12 May 2020"]) == 0
    assert capsys.readouterr().out == in_process
    # `average` reads TensorFlow checkpoints; for a JAX run it says where its own are.
    assert main(["average", str(run), "--last", "2", "--out", str(tmp_path / "avg")]) == 2
    assert f"this run trained on JAX: its checkpoints are in {run / 'jax'}" in (
        capsys.readouterr().err)


@requires_jax
@pytest.mark.slow
def test_jax_training_from_the_data_prepares_it_into_the_run_directory(jax_commands, tmp_path,
                                                                      capfd):
    """`KERAS_BACKEND=jax seq2seq train --dataset dates ...`, the command TensorFlow takes,
    prepares the data into RUN_DIR/prepared and trains from it, validating by beam search;
    what the JAX trainer does not honour is one line whether a config file or a flag gave
    it, with nothing written; `--prepared` on TensorFlow is one line."""
    root = jax_commands["root"]
    result = jax_commands["from_data"]
    assert result.status == 0, result.err[-2000:]
    run = root / "from-data"
    assert (run / "prepared" / "config.json").is_file()
    assert (run / "prepared" / "valid.examples.json").is_file()
    training = json.loads((run / "config.json").read_text())["training"]
    assert (training["validation_examples"], training["validation_beam_size"]) == (5, 2)
    epochs = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert [r for r in epochs if r["kind"] == "epoch"][-1]["val_bleu"] >= 0
    for name, message in (("config_deterministic", "--deterministic needs the tensorflow "
                           "trainer"), ("init_from", "--init-from needs the tensorflow trainer")):
        result = jax_commands[name]
        _one_line(result, message)
        assert result.unchanged(root), name
    status, _, err = _main(capfd, "train", "--prepared", str(tmp_path / "nothing"), "--out",
                           str(tmp_path / "r"))
    assert status == 2 and "--prepared trains on Keras's JAX backend" in err


@requires_jax
@pytest.mark.slow
def test_a_resumed_jax_run_keeps_its_settings_and_refuses_another_run_untouched(
        dates_folders, jax_commands, capfd):
    """`--resume` continues with the run's own training settings (as on TensorFlow), and a
    run of another model, or a TensorFlow run, is refused in one line before anything of it
    is written."""
    other = dates_folders[1]
    run = jax_commands["resumed"]
    result = jax_commands["resume"]
    assert result.status == 0, result.err[-2000:]
    training = json.loads((run / "config.json").read_text())["training"]
    assert (training["batch_size"], training["seed"], training["epochs"],
            training["steps_per_epoch"]) == (16, 7, 2, 2)
    # The run's validation setting kept, and what the JAX trainer does where it has no
    # choice (`JAX_TRAINING_FACTS`), not the TensorFlow trainer's default `jit_compile` None.
    assert (training["validation_examples"], training["validation_beam_size"],
            training["jit_compile"], training["deterministic"]) == (0, 1, True, False)
    epochs = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    epochs = [r for r in epochs if r["kind"] == "epoch"]
    assert [r["step"] for r in epochs] == [2, 4]

    result = jax_commands["resume_other"]  # the resumed run, after `resume`
    _one_line(result, f"was trained from another prepared folder than {other}")
    assert "model.transformer.hidden_dim" in result.err
    assert result.unchanged(run) and result.before[str(run)]
    # The TensorFlow trainer does not resume it either: it trained over it from scratch,
    # history included.
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    status, _, err = _main(capfd, "train", "--dataset", "dates", "--arch", "transformer",
                           "--preset", "tiny", "--out", str(run), "--resume")
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "is a run of the JAX trainer" in err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before

    tf_run = str(jax_commands["tf_run"])
    result = jax_commands["resume_tf_run"]
    assert result.status == 2 and "is a TensorFlow run (checkpoints/ckpt-N)" in result.err
    assert result.after[tf_run]["history.jsonl"] == result.before[tf_run]["history.jsonl"]


@requires_jax
@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(REFUSALS)),
                         ids=[message for _, _, message in REFUSALS])
def test_jax_training_refuses_what_it_would_not_do(jax_commands, index):
    _one_line(jax_commands[f"refusal-{index}"], REFUSALS[index][2])
    # refused before the run directory is made
    assert not (jax_commands["root"] / f"refused-{index}").exists()


@requires_jax
@pytest.mark.slow
def test_model_parallel_from_the_command_line_splits_the_model(jax_commands, tmp_path, capfd):
    """`--distribute model-parallel --model-parallel 2` over two devices trains, and on
    TensorFlow `--model-parallel` is refused."""
    result = jax_commands["model_parallel"]
    assert result.status == 0, result.err[-2000:]
    run = jax_commands["root"] / "model-parallel"
    status = json.loads((run / "status.json").read_text())
    assert status["mesh"] == {"batch": 1, "model": 2} and status["state"] == "finished"
    status, _, err = _main(capfd, "train", "--dataset", "dates", "--arch", "transformer", "--out",
                           str(tmp_path / "t"), "--model-parallel", "2")
    assert status == 2 and "--model-parallel splits a model over JAX devices" in err


@requires_jax
@pytest.mark.slow
def test_jax_path_mistakes_are_one_line_and_lose_nothing(dates_folders, jax_commands,
                                                        tmp_path, capfd):
    """The prepared folder given as the run directory, `prepare` into a path that cannot be
    a folder or with settings the JAX trainer would not honour, a TensorFlow command under
    KERAS_BACKEND=jax, a seed out of range: each one line, exit 2, nothing written."""
    mine = dates_folders[0]
    result = jax_commands["prepared_as_out"]
    assert result.status == 2 and f"{mine} is the prepared folder" in result.err, \
        result.err[-2000:]
    assert result.unchanged(mine) and result.before[str(mine)]

    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for args, message in (
            (["--out", str(a_file / "sub")], f"cannot write {a_file / 'sub'}: "),
            (["--out", str(tmp_path / "p"), "--early-stopping", "1", "--deterministic"],
             "--deterministic needs the tensorflow trainer (not the jax one"),
            (["--out", str(tmp_path / "p"), "--seed", str(2**32)],
             "seed must be an integer <= 4294967295")):
        status, _, err = _main(capfd, "prepare", "--dataset", "dates", "--arch", "transformer",
                               "--preset", "tiny", *args)
        assert status == 2 and message in err, err[-2000:]
        assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p").exists()

    _one_line(jax_commands["translate"],
              "translate runs on the TensorFlow backend; got KERAS_BACKEND=jax")


@requires_jax
@pytest.mark.slow
def test_a_jax_run_with_imported_checkpoints_is_told_how_to_resume(jax_commands):
    """`import_jax_weights` writes TensorFlow checkpoints beside the JAX ones: a JAX resume
    then names them (training on would leave them stale), rather than calling the run a
    TensorFlow run."""
    run = jax_commands["imported"]
    result = jax_commands["resume_imported"]
    assert result.status == 2 and "holds TensorFlow checkpoints imported from this JAX run" \
        in result.err
    assert f"move {run}/checkpoints away to resume on JAX" in result.err
