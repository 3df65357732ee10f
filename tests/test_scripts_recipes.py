"""The experiment scripts refuse bad input in one line, before any work: copy_names.py,
captioner_ablation.py, kernel_regression_example.py, translator_recipe.py,
make_readme_figures.py, gpu_train_jax.py and int8_by_isa.py.

Each case runs the script as a user would (a subprocess, in a scratch folder) and checks the
project's standard for bad input: exit status 2, one line on stderr that starts
`<script>.py: error: ` and names the option or path, no traceback, no usage block, no
TensorFlow start-up lines (TF_CPP_MIN_LOG_LEVEL=0 lets them through, so a check made after
TensorFlow's import would show), and nothing written, replaced or removed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.benchmarks import script_path

REPO = Path(__file__).resolve().parents[1]

TRAIN = "Tom is here.\tTom está aquí.\nno way\tde ninguna manera\nMary sings.\tMary canta.\n"
TEST = "Tom is tired.\tTom está cansado.\nMary saw Tom.\tMary vio a Tom.\n"


def _run(script: str, *args: str, cwd: Path, quiet_tensorflow: bool = False,
         **env: str) -> subprocess.CompletedProcess:
    """`scripts/[experiments/]SCRIPT ARGS` from `cwd`; TensorFlow's start-up lines let
    through unless `quiet_tensorflow` (for checks that need TensorFlow's packages loaded
    first)."""
    full = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "0", **env}
    if quiet_tensorflow:
        del full["TF_CPP_MIN_LOG_LEVEL"]
    path = script_path(script.removesuffix(".py"))
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True,
                          cwd=cwd, env=full, timeout=300)


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` with its bytes (None for a folder)."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*"))}


def _refused(done: subprocess.CompletedProcess, script: str, *named: str,
             prefix: str | None = None) -> str:
    """Asserts the one-line refusal of `script` naming each of `named`; returns the line."""
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith(f"{prefix or script}: error: "), lines[0]
    for text in named:
        assert text in lines[0], (text, lines[0])
    return lines[0]


# Scripts with sub-commands: their errors say `SCRIPT SUB: error:`, as argparse's own do.
WITH_SUBCOMMANDS = ("copy_names.py",)


def _refuses_without_writing(tmp_path: Path, script: str, args: list[str], *named: str,
                             prefix: str | None = None, **run_options) -> str:
    if prefix is None and script in WITH_SUBCOMMANDS:
        prefix = f"{script} {args[0]}"
    before = _snapshot(tmp_path)
    line = _refused(_run(script, *args, cwd=tmp_path, **run_options), script, *named,
                    prefix=prefix)
    assert _snapshot(tmp_path) == before
    return line


# -- copy_names.py --------------------------------------------------------------------------


@pytest.fixture
def pairs(tmp_path: Path) -> Path:
    """A spa-eng-like folder: train.tsv and test.tsv."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.tsv").write_text(TRAIN, encoding="utf-8")
    (folder / "test.tsv").write_text(TEST, encoding="utf-8")
    return folder


@pytest.fixture
def copy_set(tmp_path: Path) -> Path:
    """A test set as `copy_names.py make` writes it, and a translator run's folder `run`
    (its config.json only: every check comes before a model is loaded)."""
    (tmp_path / "copy.tsv").write_text("Zorvik is tired.\tZorvik está cansado.\n",
                                       encoding="utf-8")
    (tmp_path / "copy.names.json").write_text(
        json.dumps([{"names": ["Zorvik"], "originals": ["Tom"]}]), encoding="utf-8")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text('{"family": "seq2seq"}', encoding="utf-8")
    return tmp_path / "copy.tsv"


def test_copy_names_make_refuses_an_out_in_a_missing_folder_before_the_work(tmp_path, pairs):
    """It wrote the test set's pairs only at the end, and then failed with a traceback."""
    _refuses_without_writing(tmp_path, "copy_names.py",
                             ["make", "--data", "data", "--out", "missing/copy.tsv"],
                             "--out missing/copy.tsv", "missing does not exist")


def test_copy_names_make_refuses_to_write_over_its_data(tmp_path, pairs):
    """`--out data/test.tsv` replaced the test split it had just read."""
    _refuses_without_writing(tmp_path, "copy_names.py",
                             ["make", "--data", "data", "--out", "data/test.tsv"],
                             "--out data/test.tsv", "is an input")


def test_copy_names_make_names_a_missing_data_folder(tmp_path):
    _refuses_without_writing(tmp_path, "copy_names.py",
                             ["make", "--data", "nowhere", "--out", "copy.tsv"],
                             "--data nowhere", "no such folder")


def test_copy_names_evaluate_refuses_a_json_in_a_missing_folder_before_translating(
        tmp_path, copy_set):
    """`evaluate --json` in a missing folder failed with a traceback after every run had
    translated the test set."""
    _refuses_without_writing(tmp_path, "copy_names.py",
                             ["evaluate", "--data", "copy.tsv", "run", "--json", "missing/x.json"],
                             "--json missing/x.json", "missing does not exist")


def test_copy_names_evaluate_keeps_a_json_that_is_not_an_earlier_result(tmp_path, copy_set):
    (tmp_path / "notes.json").write_text('["mine"]', encoding="utf-8")
    _refuses_without_writing(tmp_path, "copy_names.py",
                             ["evaluate", "--data", "copy.tsv", "run", "--json", "notes.json"],
                             "--json notes.json", "not an earlier result")


def test_copy_names_evaluate_checks_every_run_before_translating_with_any(tmp_path, copy_set):
    """A missing second run failed only after the first had translated the test set."""
    _refuses_without_writing(tmp_path, "copy_names.py",
                             ["evaluate", "--data", "copy.tsv", "run", "gone"],
                             "gone", "not a translator run directory")


def test_copy_names_evaluate_refuses_one_label_for_two_runs(tmp_path, copy_set):
    """The second run's results silently replaced the first's under the shared label."""
    _refuses_without_writing(tmp_path, "copy_names.py",
                             ["evaluate", "--data", "copy.tsv", "a=run", "a=run"],
                             "'a'", "more than one run")


def test_copy_names_evaluate_names_an_unreadable_names_file(tmp_path, copy_set):
    (tmp_path / "copy.names.json").write_text("{", encoding="utf-8")
    _refuses_without_writing(tmp_path, "copy_names.py",
                             ["evaluate", "--data", "copy.tsv", "run"],
                             "--data", "copy.names.json", "not the JSON")


def test_copy_names_argument_errors_are_the_sub_commands_one_line(tmp_path):
    _refuses_without_writing(tmp_path, "copy_names.py",
                             ["make", "--data", "d", "--out", "x.tsv", "--limit", "0"],
                             "--limit", prefix="copy_names.py make")


# -- captioner_ablation.py ------------------------------------------------------------------


def test_ablation_refuses_an_out_dir_that_is_a_file_before_training(tmp_path):
    """It trained into OUT_DIR/NAME and failed with a traceback."""
    (tmp_path / "taken").write_text("a file", encoding="utf-8")
    _refuses_without_writing(tmp_path, "captioner_ablation.py",
                             ["v", "--out-dir", "taken", "--preset", "tiny"],
                             "--out-dir taken", "is a file")


def test_ablation_refuses_a_results_file_that_is_a_folder_before_training(tmp_path):
    (tmp_path / "out" / "results.jsonl").mkdir(parents=True)
    _refuses_without_writing(tmp_path, "captioner_ablation.py",
                             ["v", "--out-dir", "out", "--preset", "tiny"],
                             "results.jsonl", "is a folder")


@pytest.mark.parametrize("name", [".", "..", "../elsewhere", ""])
def test_ablation_refuses_a_name_that_is_not_one_folder(tmp_path, name):
    """NAME `.` removed the whole --out-dir (results.jsonl of every variant) before training;
    `..` its parent."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_text('{"name": "earlier"}\n', encoding="utf-8")
    # An override `train` refuses: the old script removed the folder before training failed.
    _refuses_without_writing(tmp_path, "captioner_ablation.py",
                             [name, "--out-dir", "out", "--preset", "tiny", "--override",
                              '{"training": {"epochs": "x"}}'], "NAME")


def test_ablation_checks_the_training_overrides_before_replacing_the_run(tmp_path):
    """A training setting `train` refuses removed the variant's existing run first, and came
    out as a traceback."""
    (tmp_path / "out" / "v").mkdir(parents=True)
    (tmp_path / "out" / "v" / "config.json").write_text("{}", encoding="utf-8")
    _refuses_without_writing(tmp_path, "captioner_ablation.py",
                             ["v", "--out-dir", "out", "--preset", "tiny", "--override",
                              '{"training": {"epochs": "x"}}'], "epochs", "'x'",
                             quiet_tensorflow=True)


def test_ablation_refuses_negative_threads(tmp_path):
    _refuses_without_writing(tmp_path, "captioner_ablation.py", ["v", "--threads", "-1"],
                             "--threads")


def _ablation_line(split="valid", name="v", **more):
    return {"name": name, "preset": "demo", "overrides": {}, "seed": None, "split": split,
            "beam_size": 3, "BLEU-4": 10.0, **more}


# A test run scores a variant chosen on valid, once: refused before TensorFlow is imported.
@pytest.mark.parametrize("args, lines, named", [
    (["--split", "test"], [], "has no valid line of v with this --preset, --override"),
    (["--split", "test"], [_ablation_line(overrides={"decoder": {"attention": "hard"}})],
     "choose on valid first"),
    (["--split", "test", "--beam-size", "1"], [_ablation_line()], "choose on valid first"),
    (["--split", "test"], [_ablation_line(), _ablation_line("test")],
     "holds test lines of v already"),
    (["--split", "test", "--seeds", "1,2"],
     [_ablation_line(name="v-seed1"), {"name": "v-seed2", "overrides": {}}],  # (before splits)
     "holds test lines of v-seed2 already"),
    (["--overwrite"], [], "--overwrite goes with --split test"),
])
def test_ablation_scores_test_once_for_a_variant_chosen_on_valid(tmp_path, args, lines, named):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    _refuses_without_writing(tmp_path, "captioner_ablation.py",
                             ["v", "--out-dir", "out", *args], named)


# -- translator_recipe.py -------------------------------------------------------------------


def test_recipe_refuses_an_out_dir_that_is_a_file_before_training(tmp_path, pairs):
    """A `seq2seq train` was started into it, and two error lines came back."""
    (pairs / "valid.tsv").write_text(TEST, encoding="utf-8")
    (tmp_path / "taken").write_text("a file", encoding="utf-8")
    _refuses_without_writing(tmp_path, "translator_recipe.py",
                             ["r", "--data", "data", "--seeds", "1", "--out-dir", "taken", "--",
                              "--epochs", "1"], "--out-dir taken", "is a file")


def test_recipe_refuses_a_results_file_that_is_a_folder_before_training(tmp_path, pairs):
    (pairs / "valid.tsv").write_text(TEST, encoding="utf-8")
    (tmp_path / "out" / "results.jsonl").mkdir(parents=True)
    _refuses_without_writing(tmp_path, "translator_recipe.py",
                             ["r", "--data", "data", "--seeds", "1", "--out-dir", "out", "--",
                              "--epochs", "0"], "results.jsonl", "is a folder")


def test_recipe_refuses_data_inside_a_run_it_replaces(tmp_path):
    """The run directory NAME-seedS is removed before training: the data inside went too."""
    data = tmp_path / "out" / "r-seed1" / "data"
    data.mkdir(parents=True)
    for split in ("train", "valid"):
        (data / f"{split}.tsv").write_text(TRAIN, encoding="utf-8")
    _refuses_without_writing(tmp_path, "translator_recipe.py",
                             ["r", "--data", "out/r-seed1/data", "--seeds", "1", "--out-dir",
                              "out", "--", "--epochs", "0"], "--data out/r-seed1/data")


# `--epochs 0` keeps a regression short: the training the old script started fails at once.
@pytest.mark.parametrize("args, named", [
    (["--length-penalties", "nan"], "--length-penalties"),
    (["--average", "-1"], "--average"),
    (["--", "--epochs", "0", "--out=elsewhere"], "--out"),
    (["--", "--epochs", "0", "--seed=4"], "--seed"),
])
def test_recipe_refuses_bad_values_before_training(tmp_path, pairs, args, named):
    """A length penalty `nan` was refused by `seq2seq evaluate` only after the training, and
    `--out=DIR` (the `=` form) slipped past the options the recipe sets itself."""
    (pairs / "valid.tsv").write_text(TEST, encoding="utf-8")
    _refuses_without_writing(tmp_path, "translator_recipe.py",
                             ["r", "--data", "data", "--seeds", "1", "--out-dir", "out", *args],
                             named)


def test_recipe_refuses_a_name_that_is_a_path(tmp_path, pairs):
    (pairs / "valid.tsv").write_text(TEST, encoding="utf-8")
    _refuses_without_writing(tmp_path, "translator_recipe.py",
                             ["../r", "--data", "data", "--seeds", "1", "--out-dir", "out", "--",
                              "--epochs", "0"], "NAME '../r'")


def _recipe_line(split, seed=1, checkpoint="last", penalty=1.0, **more):
    return {"name": "r", "seed": seed, "checkpoint": checkpoint, "length_penalty": penalty,
            "beam_size": 4, "split": split, "bleu": 10.0, "train_args": ["--epochs", "0"],
            **more}


# A test run scores one candidate chosen on valid, once: refused before any training.
@pytest.mark.parametrize("args, lines, named", [
    ([], [_recipe_line("valid")], "--split test scores one candidate chosen on valid"),
    (["--checkpoint", "last", "--length-penalties", "0.6,1.0"], [_recipe_line("valid")],
     "name it with --checkpoint and one --length-penalties value"),
    (["--checkpoint", "last", "--length-penalties", "1.0"], [],
     "has no valid line of r at --checkpoint last, length penalty 1.0"),
    (["--checkpoint", "last", "--length-penalties", "0.6"], [_recipe_line("valid")],
     "choose on valid first"),
    (["--checkpoint", "best", "--length-penalties", "1.0"], [_recipe_line("valid")],
     "--checkpoint best, length penalty 1.0"),
    (["--checkpoint", "last", "--length-penalties", "1.0", "--beam-size", "2"],
     [_recipe_line("valid")], "beam 2 with these training options"),
    (["--checkpoint", "last", "--length-penalties", "1.0"],
     [_recipe_line("valid", train_args=["--epochs", "1"])], "with these training options"),
    (["--checkpoint", "last", "--length-penalties", "1.0"],
     [_recipe_line("valid"), _recipe_line("test", checkpoint="best")],
     "holds test lines of r for seed 1 already"),
    (["--checkpoint", "average-2", "--length-penalties", "1.0"], [_recipe_line("valid")],
     "--checkpoint 'average-2': expected one of best, last"),
])
def test_recipe_scores_test_once_for_one_candidate_chosen_on_valid(tmp_path, pairs, args, lines,
                                                                  named):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    _refuses_without_writing(tmp_path, "translator_recipe.py",
                             ["r", "--data", "data", "--seeds", "1", "--out-dir", "out",
                              "--split", "test", *args, "--", "--epochs", "0"], named)


def test_recipe_overwrites_only_test_scores(tmp_path, pairs):
    (pairs / "valid.tsv").write_text(TEST, encoding="utf-8")
    _refuses_without_writing(tmp_path, "translator_recipe.py",
                             ["r", "--data", "data", "--seeds", "1", "--out-dir", "out",
                              "--overwrite", "--", "--epochs", "0"],
                             "--overwrite goes with --split test")


# -- make_readme_figures.py -----------------------------------------------------------------


def test_figures_refuse_an_unknown_figure_without_a_usage_block(tmp_path):
    _refuses_without_writing(tmp_path, "make_readme_figures.py", ["--only", "bogus"],
                             "--only", "'bogus'")


def test_figures_refuse_an_out_dir_that_is_a_file(tmp_path):
    (tmp_path / "taken").write_text("a file", encoding="utf-8")
    _refuses_without_writing(tmp_path, "make_readme_figures.py",
                             ["--only", "example", "--out-dir", "taken"],
                             "--out-dir taken", "is a file")


def test_figures_refuse_a_folder_where_a_figure_goes(tmp_path):
    (tmp_path / "figs" / "overlay_example.png").mkdir(parents=True)
    _refuses_without_writing(tmp_path, "make_readme_figures.py",
                             ["--only", "example", "--out-dir", "figs"],
                             "overlay_example.png", "is a folder")


def test_figures_check_the_translation_run_before_drawing_anything(tmp_path):
    """The example figure was drawn first, then the missing run refused."""
    _refuses_without_writing(tmp_path, "make_readme_figures.py",
                             ["--only", "example", "--only", "dates", "--translation-run",
                              "nowhere", "--out-dir", "figs"], "--translation-run nowhere")


def test_figures_refuse_a_translation_run_they_would_ignore(tmp_path):
    _refuses_without_writing(tmp_path, "make_readme_figures.py",
                             ["--only", "example", "--translation-run", "nowhere", "--out-dir",
                              "figs"], "--translation-run", "--only dates")


def test_figures_check_the_coco_attributions_before_training(tmp_path):
    """ATTRIBUTION.tsv was read after the coco captioner had trained (minutes), and its
    absence was a traceback."""
    photos = tmp_path / "coco" / "train2017"
    photos.mkdir(parents=True)
    for name in ("000000252639.jpg", "000000525891.jpg"):
        (photos / name).write_bytes(b"")
    _refuses_without_writing(tmp_path, "make_readme_figures.py",
                             ["--only", "coco", "--coco-data", "coco", "--coco-run", "run",
                              "--out-dir", "figs"], "--coco-data coco", "ATTRIBUTION.tsv")


# -- kernel_regression_example.py -----------------------------------------------------------


@pytest.mark.parametrize("args, named", [
    (["--out", "figure.xyz"], "--out figure.xyz"),  # matplotlib refused it after the fits
    (["--out", "missing/figure.png"], "--out missing/figure.png"),
    (["--out", "figure.png", "--json", "figure.png"], "--json figure.png"),
    (["--n-train", "1"], "--n-train"),
])
def test_kernel_regression_refuses_bad_outputs_and_values_before_fitting(tmp_path, args, named):
    _refuses_without_writing(tmp_path, "kernel_regression_example.py", args, named)


def test_kernel_regression_keeps_a_json_that_is_not_an_earlier_result(tmp_path):
    (tmp_path / "figure.json").write_text('{"mine": 1}', encoding="utf-8")
    _refuses_without_writing(tmp_path, "kernel_regression_example.py",
                             ["--out", "figure.png", "--steps", "1"], "figure.json",
                             "not an earlier result")


# -- gpu_train_jax.py -----------------------------------------------------------------------


@pytest.fixture
def without_tensorflow(tmp_path_factory) -> dict[str, str]:
    """The environment of the GPU machine: Keras on JAX and no TensorFlow (an import of it
    fails)."""
    shadow = tmp_path_factory.mktemp("no-tensorflow")
    (shadow / "tensorflow").mkdir()
    (shadow / "tensorflow" / "__init__.py").write_text(
        'raise ImportError("no TensorFlow on this machine")\n', encoding="utf-8")
    return {"PYTHONPATH": f"{shadow}{os.pathsep}{REPO}", "KERAS_BACKEND": "jax",
            "JAX_PLATFORMS": "cpu"}


def test_gpu_train_answers_help_without_tensorflow(tmp_path, without_tensorflow):
    done = _run("gpu_train_jax.py", "--help", cwd=tmp_path, **without_tensorflow)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--prepared" in done.stdout and done.stderr == ""


@pytest.mark.parametrize("args, named", [
    (["--prepared", "p", "--average", "0"], "--average"),  # was a usage block
    (["--prepared", "p", "--peak-tflops", "-1"], "--peak-tflops"),
    (["--prepared", "nowhere"], "--prepared nowhere"),
    (["--prepared", "p", "--out", "taken"], "--out taken"),
    (["--prepared", "p", "--out", "p"], "--out p"),
])
def test_gpu_train_refuses_bad_input_in_one_line_without_tensorflow(
        tmp_path, without_tensorflow, args, named):
    (tmp_path / "p").mkdir()
    (tmp_path / "taken").write_text("a file", encoding="utf-8")
    _refuses_without_writing(tmp_path, "gpu_train_jax.py", args, named, **without_tensorflow)


def test_gpu_train_refuses_an_out_whose_run_holds_the_prepared_folder(
        tmp_path, without_tensorflow):
    """OUT/run is removed before training: a prepared folder inside went with it."""
    (tmp_path / "out" / "run" / "prepared").mkdir(parents=True)
    (tmp_path / "out" / "run" / "prepared" / "prepared.json").write_text("{}", encoding="utf-8")
    _refuses_without_writing(tmp_path, "gpu_train_jax.py",
                             ["--prepared", "out/run/prepared", "--out", "out"], "--out out",
                             "--prepared", **without_tensorflow)


# -- int8_by_isa.py -------------------------------------------------------------------------


@pytest.mark.parametrize("args, named", [
    (["missing-run", "--data", "pairs.tsv", "--out", "r.json"], "missing-run"),
    (["run", "--data", "missing.tsv", "--out", "r.json"], "--data missing.tsv"),
    (["run", "--data", "pairs.tsv", "--out", "no/such/folder/r.json"], "--out"),
    (["run", "--data", "pairs.tsv", "--out", "r.json", "--other", "AVX2"], "--other"),
    (["run", "--data", "pairs.tsv", "--out", "r.json", "--beam-size", "0"], "--beam-size"),
])
def test_int8_by_isa_refuses_bad_input_before_exporting(tmp_path, args, named):
    """The four exports and ten evaluations take an hour on spa-eng: a typo is refused first."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text("{}", encoding="utf-8")
    (tmp_path / "pairs.tsv").write_text(TEST, encoding="utf-8")
    _refuses_without_writing(tmp_path, "int8_by_isa.py", args, named)
