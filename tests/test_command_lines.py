"""The command lines the README shows: options and positional arguments in any order, and
ordinary mistakes (another dataset's preset, no internet for ImageNet weights) told in one
line with exit status 2, never a traceback.

Each README line is written as its positional arguments and its options (each option with
its values), so a test can move the options around: before the positionals, and between the
first positional and the rest (`seq2seq translate RUN --beam-size 4 "12 May 2020"`, which
plain argparse refused).
"""

from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from captioner.cli import main as captioner_main
from captioner.cli import subcommands as captioner_subcommands
from common.cli import build_parser
from seq2seq.cli import main as seq2seq_main
from seq2seq.cli import subcommands as seq2seq_subcommands

REPO = Path(__file__).resolve().parents[1]
COCO_MINI = REPO.parent / "shared" / "data" / "coco-mini"
SAMPLES = ["assets/samples/shapes_1.png", "assets/samples/shapes_2.png"]

# (PROG COMMAND POSITIONALS..., [OPTION VALUES..., ...]) as the README shows them; the
# README's `assets/samples/*.png` is written as two of those files.
README_LINES = [
    ("captioner train", ["--dataset shapes", "--preset demo", "--out runs/demo"]),
    ("captioner train", ["--dataset shapes", "--preset demo", "--attention hard", "--no-coverage",
                         "--out runs/demo-hard"]),
    ("captioner train", ["--dataset shapes", "--preset demo-scst", "--init-from runs/demo",
                         "--out runs/demo-scst"]),
    ("captioner train", ["--dataset coco", "--data-dir data/coco", "--preset coco", "--scst",
                         "--init-from runs/coco", "--learning-rate 5e-5", "--epochs 5",
                         "--out runs/coco-scst"]),
    ("captioner evaluate runs/demo", ["--dataset shapes", "--split test", "--beam-size 3",
                                      "--json runs/demo/test.json"]),
    (f"captioner caption runs/demo {' '.join(SAMPLES)}", ["--beam-size 3"]),
    ("captioner train", ["--dataset coco", "--data-dir ../shared/data/coco-mini",
                         "--encoder small-cnn", "--weights none", "--epochs 1",
                         "--out runs/coco-mini"]),
    ("captioner evaluate runs/coco-mini", ["--dataset coco",
                                           "--data-dir ../shared/data/coco-mini",
                                           "--split train"]),
    (f"captioner caption runs/demo {' '.join(SAMPLES)}",
     ["--overlay out/cap.png", "--gif out/cap.gif", "--html out/captions.html"]),
    ("captioner caption runs/demo assets/samples/shapes_2.png", ["--json"]),
    ("captioner render out/cap.json", ["--image assets/samples/shapes_2.png",
                                       "--out out/shapes_2.png", "--html out/one.html"]),
    ("captioner export runs/demo export/demo", ["--beam-sizes 1,2,3,4,5"]),
    ("captioner caption export/demo photo.jpg scan.tiff", ["--json"]),
    ("captioner serve export/demo", ["--port 8501"]),
    ("seq2seq train", ["--dataset dates", "--arch transformer", "--preset dates-demo",
                       "--out runs/dates-transformer"]),
    ("seq2seq evaluate runs/dates-transformer", ["--dataset dates", "--beam-size 4"]),
    ("seq2seq translate runs/dates-transformer '25th of November 2026' 'Nov 3, 1999'", []),
    ("seq2seq average runs/spa-eng-transformer", ["--last 5", "--out runs/spa-eng-avg5"]),
    ("seq2seq evaluate runs/spa-eng-avg5", ["--data data/spa-eng/valid.tsv", "--beam-size 4",
                                            "--length-penalty 0.6"]),
    ("seq2seq translate runs/spa-eng-avg5", ["--beam-size 4"]),
    ("seq2seq train", ["--dataset tsv", "--data ../shared/data/spa-eng", "--arch bahdanau",
                       "--preset spa-eng-compare", "--out runs/spa-eng-compare-bahdanau"]),
    ("seq2seq train", ["--dataset tsv", "--data ../shared/data/spa-eng", "--arch transformer",
                       "--copy", "--preset spa-eng-compare",
                       "--out runs/spa-eng-compare-transformer-copy"]),
    ("seq2seq train", ["--dataset tsv", "--data ../shared/data/spa-eng",
                       "--arch seq2seq-noattn", "--preset spa-eng-cpu",
                       "--out runs/spa-eng-noattn"]),
    ("seq2seq translate runs/dates-bahdanau '25th of November 2026' 'Nov 3, 1999'",
     ["--plot out/dates.png", "--html out/dates.html"]),
    ("seq2seq translate runs/dates-transformer 'Nov 3, 1999'",
     ["--plot out/heads.png", "--all-heads", "--attention-layer 0"]),
    ("seq2seq export runs/dates-transformer export/dates", ["--beam-sizes 1,2,3,4,5"]),
    ("seq2seq translate export/dates '25th of November 2026'", ["--beam-size 4"]),
    ("seq2seq translate export/dates", ["--json"]),
    ("seq2seq serve export/dates", ["--model-name dates", "--port 8501"]),
    # The example: options before the text.
    ("seq2seq translate RUN '12 May 2020'", ["--beam-size 4"]),
]


def orders(head: str, options: list[str]) -> dict[str, list[str]]:
    """The argv (without PROG) of a line in three orders: the README's (positionals, then
    options), options first, and options between the first positional and the rest (in
    reverse, so that their own order changes too)."""
    words = shlex.split(head)[1:]
    command, positionals = words[0], words[1:]
    flat = [word for option in options for word in shlex.split(option)]
    moved = [word for option in reversed(options) for word in shlex.split(option)]
    return {
        "readme": [command, *positionals, *flat],
        "options first": [command, *flat, *positionals],
        "options inside": [command, *positionals[:1], *moved, *positionals[1:]],
    }


def _parser(prog: str):
    if prog == "captioner":
        return build_parser("captioner", "", captioner_subcommands())
    return build_parser("seq2seq", "", seq2seq_subcommands())


@pytest.mark.parametrize("head, options", README_LINES, ids=[h for h, _ in README_LINES])
def test_a_readme_line_means_the_same_in_any_order(head, options):
    parser = _parser(head.split()[0])
    parsed = {}
    for name, argv in orders(head, options).items():
        try:
            parsed[name] = vars(parser.parse_args(argv))
        except SystemExit:
            pytest.fail(f"{name} order refused: {shlex.join(argv)}")
    assert parsed["options first"] == parsed["readme"]
    assert parsed["options inside"] == parsed["readme"]


def test_options_after_the_model_do_not_swallow_the_texts():
    args = _parser("seq2seq").parse_args(["translate", "RUN", "--beam-size", "4",
                                          "12 May 2020", "Nov 3, 1999"])
    assert (args.run_dir, args.text, args.beam_size) == ("RUN", ["12 May 2020", "Nov 3, 1999"],
                                                         4)


def test_every_subcommand_parses_intermixed(capsys):
    # Intermixed parsing refuses some parser shapes (a REMAINDER positional, a positional in
    # a mutually exclusive group) with a TypeError: every sub-command's --help must still work.
    for prog in ("captioner", "seq2seq"):
        parser = _parser(prog)
        for command in (captioner_subcommands() if prog == "captioner"
                        else seq2seq_subcommands()):
            with pytest.raises(SystemExit) as exc:
                parser.parse_args([command.name, "--help"])
            assert exc.value.code == 0
    capsys.readouterr()


# -- the lines run for real, in a changed order, on tiny runs ------------------------------

def _run(head: str, options: list[str], stdin: str | None = None, **places) -> None:
    """Run a line, options inside, through the real `main` and assert exit status 0 (an
    exception would fail the test with its traceback)."""
    head, options = head.format(**places), [o.format(**places) for o in options]
    argv = orders(head, options)["options inside"]
    main = captioner_main if head.startswith("captioner") else seq2seq_main
    old_stdin = sys.stdin
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    try:
        status = main(argv)
    finally:
        sys.stdin = old_stdin
    assert status == 0, f"exit {status}: {shlex.join(argv)}"


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict[str, str]:
    """Tiny runs made by the README's train lines (tiny presets, a changed option order; one
    step and no validation: the later lines need a run, not a good one)."""
    root = tmp_path_factory.mktemp("readme")
    (root / "out").mkdir()
    places = {"tmp": str(root), "out": str(root / "out"), "coco": str(COCO_MINI),
              "samples": " ".join(str(REPO / s) for s in SAMPLES),
              "sample": str(REPO / SAMPLES[1])}
    _run("captioner train", ["--dataset shapes", "--preset tiny", "--out {tmp}/demo",
                             "--verbose 0", "--steps-per-epoch 1", "--validation-examples 0"],
         **places)
    _run("seq2seq train", ["--dataset dates", "--arch transformer", "--preset tiny",
                           "--out {tmp}/dates-transformer", "--verbose 0",
                           "--steps-per-epoch 1", "--validation-examples 0"], **places)
    return places


RUN_LINES = [
    ("captioner evaluate {tmp}/demo", ["--dataset shapes", "--split test", "--beam-size 3",
                                       "--json {tmp}/demo/test.json",
                                       "--data-option num_images=4"], None),
    ("captioner caption {tmp}/demo {samples}", ["--beam-size 3"], None),
    # The README's coco-mini line with the tiny preset: the preset's shapes options must not
    # reach the coco loader. One step (each batch's caption length traces the step anew).
    ("captioner train", ["--dataset coco", "--data-dir {coco}", "--encoder small-cnn",
                         "--weights none", "--epochs 1", "--preset tiny",
                         "--out {tmp}/coco-mini", "--verbose 0", "--validation-examples 0",
                         "--steps-per-epoch 1"], None),
    ("captioner caption {tmp}/demo {samples}",
     ["--overlay {out}/cap.png", "--gif {out}/cap.gif", "--html {out}/captions.html"], None),
    ("captioner caption {tmp}/demo {sample}", ["--json", "--beam-size 1"], None),
    ("seq2seq evaluate {tmp}/dates-transformer", ["--dataset dates", "--beam-size 4",
                                                  "--limit 4"], None),
    ("seq2seq translate {tmp}/dates-transformer '25th of November 2026' 'Nov 3, 1999'",
     ["--beam-size 2"], None),
    ("seq2seq translate {tmp}/dates-transformer", ["--beam-size 4"], "March 3, 1999\n"),
    ("seq2seq translate {tmp}/dates-transformer '25th of November 2026' 'Nov 3, 1999'",
     ["--plot {out}/dates.png", "--html {out}/dates.html"], None),
    ("seq2seq translate {tmp}/dates-transformer 'Nov 3, 1999'",
     ["--plot {out}/heads.png", "--all-heads", "--attention-layer 0"], None),
]


@pytest.mark.slow
@pytest.mark.parametrize("head, options, stdin", RUN_LINES,
                         ids=[f"{h} {' '.join(o)}" for h, o, _ in RUN_LINES])
def test_a_readme_line_runs_with_its_options_moved(places, head, options, stdin, monkeypatch,
                                                   tmp_path):
    if head.startswith("captioner evaluate"):
        # No `java` on the PATH (an empty folder): the scores' simple tokenizer, not the PTB
        # tokenizer and METEOR's jar (most of this line's time), which
        # tests/captioner/test_evaluate.py and tests/common/metrics run.
        monkeypatch.setenv("PATH", str(tmp_path))
    _run(head, options, stdin, **places)


@pytest.mark.slow
def test_render_runs_with_its_options_moved(places, capsys):
    capsys.readouterr()
    _run("captioner caption {tmp}/demo {sample}", ["--json"], **places)
    results = Path(places["out"]) / "cap.json"
    results.write_text(capsys.readouterr().out)
    assert json.loads(results.read_text())[0]["image"] == places["sample"]
    _run("captioner render {out}/cap.json", ["--image {sample}", "--out {out}/shapes_2.png",
                                             "--html {out}/one.html"], **places)
    assert (Path(places["out"]) / "shapes_2.png").is_file()


# -- one line, exit 2, for a preset of another dataset and for missing ImageNet weights ----

def _presets_of_other_datasets():
    from captioner.datasets import DATASETS
    from captioner.presets import PRESETS, get_preset

    return [(dataset, preset) for dataset in DATASETS for preset in PRESETS
            if get_preset(preset)["data"]["dataset"] != dataset
            and not get_preset(preset).get("scst", {}).get("fact_weight")]


@pytest.mark.parametrize("dataset, preset", _presets_of_other_datasets())
def test_a_preset_of_another_dataset_gives_its_loader_no_options(monkeypatch, tmp_path,
                                                                 dataset, preset):
    seen = []
    monkeypatch.setattr("captioner.train.train",
                        lambda config, *args, **kwargs: seen.append(config) or [])
    assert captioner_main(["train", "--dataset", dataset, "--data-dir", str(tmp_path),
                           "--preset", preset, "--out", str(tmp_path / "r")]) == 0
    (config,) = seen
    assert config.data.dataset == dataset and config.data.options == {}
    from captioner.datasets.records import check_options

    check_options(dataset, config.data.options)  # what load_split checks first


def test_a_preset_that_reads_its_datasets_scenes_is_refused_on_another(capsys, tmp_path):
    # demo-scst-facts rewards captions checked against shapes' scenes: coco has none.
    assert captioner_main(["train", "--dataset", "coco", "--data-dir", str(tmp_path),
                           "--preset", "demo-scst-facts", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--scst-fact-weight checks captions" in err
    assert not (tmp_path / "r").exists()


def test_data_options_add_to_the_preset_of_the_same_dataset(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr("captioner.train.train",
                        lambda config, *args, **kwargs: seen.append(config) or [])
    assert captioner_main(["train", "--preset", "tiny", "--data-option", "seed=5",
                           "--out", str(tmp_path / "r")]) == 0
    assert captioner_main(["train", "--preset", "tiny", "--dataset", "shapes",
                           "--data-option", "num_images=7", "--out", str(tmp_path / "r")]) == 0
    assert [config.data.options for config in seen] == [{"num_images": 48, "seed": 5},
                                                        {"num_images": 7}]


def test_an_option_the_loader_does_not_take_is_one_line(capsys, tmp_path):
    status = captioner_main(["train", "--dataset", "coco", "--data-dir", str(tmp_path),
                             "--data-option", "num_images=3", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1, err
    assert "'num_images'" in err and "year, captions_file" in err


def test_imagenet_weights_offline_is_one_line(tmp_path):
    """The machine has no internet: the VGG-19 download really fails. KERAS_HOME points at
    an empty folder so that no cached file is found (it is read when Keras is imported,
    hence a fresh process)."""
    keras_home = tmp_path / "keras-home"
    keras_home.mkdir()
    env = {**os.environ, "KERAS_HOME": str(keras_home), "TF_CPP_MIN_LOG_LEVEL": "3"}
    # Small enough to finish quickly should the download succeed on an online machine.
    argv = [sys.executable, "-m", "captioner", "train", "--dataset", "shapes",
            "--preset", "coco", "--data-option", "num_images=4", "--epochs", "1",
            "--steps-per-epoch", "1", "--batch-size", "2", "--out", str(tmp_path / "r")]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env,
                            cwd=REPO)
    if result.returncode == 0:
        pytest.skip("the ImageNet weights could be downloaded: this machine is online")
    err = result.stderr.strip()
    assert "Traceback" not in err, err
    assert result.returncode == 2, err
    assert len(err.splitlines()) == 1, err
    assert "vgg19_weights_tf_dim_ordering_tf_kernels_notop.h5" in err
    assert f"in {keras_home / 'models'} " in err
    assert "--weights none" in err
    # It failed before writing anything into the run directory, so the same line reruns.
    assert not (tmp_path / "r" / "status.json").exists()


def readme_outputs() -> set[str]:
    """What the README's commands write: the paths after `--out`, `--overlay`, `--gif`,
    `--html`, `--plot`, `--json`, `mkdir -p` and `>`, and the OUT_DIR of each `export`."""
    import re

    written = set()
    text = (REPO / "README.md").read_text(encoding="utf-8")
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            for option, value in zip(words, words[1:]):
                if option in ("--out", "--overlay", "--gif", "--html", "--plot", "--json", "-p",
                              ">") and not value.startswith(("-", ">", "|")):
                    written.add(value)
            if words[:2] in (["captioner", "export"], ["seq2seq", "export"]):
                written.add(words[3])
    return written


def test_the_folders_the_readme_writes_are_ignored_by_git():
    import shutil

    if shutil.which("git") is None or subprocess.run(
            ["git", "rev-parse"], cwd=REPO, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    folders = {Path(path).parts[0] for path in readme_outputs()}
    assert {"runs", "out", "export", "data"} <= folders  # the README was read
    for folder in sorted(folders):
        probe = f"{folder}/anything.json"
        result = subprocess.run(["git", "check-ignore", "--no-index", "-q", probe], cwd=REPO)
        assert result.returncode == 0, f"{folder}/ is not in .gitignore"
