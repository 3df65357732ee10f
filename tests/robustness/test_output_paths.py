"""Output files of the command lines (`evaluate --json`, `translate --plot/--html`, `caption
--overlay`, `render --out/--html`): a path that would destroy an input, a run's files or data,
or that cannot be written, is one line on stderr and exit status 2, before any model loads,
and the file it names is left byte for byte as it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PIL import Image

from captioner.cli import main as captioner_main
from seq2seq.cli import main as seq2seq_main


def one_line_error(capsys) -> str:
    """The one `PROG COMMAND: error: ...` line, the last of stderr (progress bars and warnings aside)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip()]
    errors = [line for line in lines if ": error: " in line]
    assert len(errors) == 1 and lines[-1] == errors[0], lines
    return errors[0]


@pytest.fixture(scope="module")
def translator(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("translator") / "run"
    assert seq2seq_main(["train", "--dataset", "dates", "--arch", "transformer", "--preset",
                         "tiny", "--out", str(run), "--verbose", "0"]) == 0
    return run


@pytest.fixture(scope="module")
def captioner_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("captioner") / "run"
    assert captioner_main(["train", "--preset", "tiny", "--out", str(run), "--steps-per-epoch",
                           "2", "--data-option", "num_images=20"]) == 0
    return run


@pytest.fixture
def images(tmp_path) -> list[Path]:
    from captioner.datasets import load_split

    paths = []
    for i, record in enumerate(load_split("shapes", "test", num_images=2)):
        paths.append(tmp_path / f"in{i}.png")
        Image.fromarray(record.image).resize((32, 32)).save(paths[-1])
    return paths


@pytest.fixture
def no_model(monkeypatch):
    """Fails the test if a model is loaded: the refusals come before any work."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the output path was checked")

    from captioner import inference as captioner_inference
    from seq2seq.inference import Translator

    monkeypatch.setattr(Translator, "from_run_dir", refuse)
    monkeypatch.setattr(captioner_inference, "load_run", refuse)
    monkeypatch.setattr(captioner_inference, "open_model", refuse)


def test_evaluate_json_refuses_a_run_file_and_the_data_it_scores(translator, captioner_run,
                                                                   tmp_path, capsys, no_model):
    data = tmp_path / "test.tsv"
    data.write_text("March 3, 1999\t1999-03-03\nMay 5, 2001\t2001-05-05\n")
    cases = [
        (seq2seq_main, ["evaluate", str(translator), "--dataset", "dates", "--limit", "2",
                        "--json"], translator / "config.json", "not an earlier result"),
        (seq2seq_main, ["evaluate", str(translator), "--data", str(data), "--json"], data,
         "is an input"),
        (captioner_main, ["evaluate", str(captioner_run), "--json"], captioner_run / "vocab.txt",
         "not an earlier result"),
        (captioner_main, ["evaluate", str(captioner_run), "--json"], captioner_run / "config.json",
         "not an earlier result"),
    ]
    for main, argv, target, why in cases:
        before = target.read_bytes()
        assert main([*argv, str(target)]) == 2
        error = one_line_error(capsys)
        assert f"error: --json {target}: " in error and why in error
        assert target.read_bytes() == before


@pytest.mark.parametrize("name, why", [
    ("folder", "is a folder"), ("afile/out.json", "afile is a file, not a folder"),
    ("missing/out.json", "does not exist"),
])
def test_evaluate_json_refuses_a_folder_or_a_bad_parent(translator, tmp_path, capsys, no_model,
                                                        name, why):
    (tmp_path / "folder").mkdir()
    (tmp_path / "afile").write_text("keep")
    assert seq2seq_main(["evaluate", str(translator), "--dataset", "dates", "--limit", "2",
                         "--json", str(tmp_path / name)]) == 2
    assert why in one_line_error(capsys)
    assert (tmp_path / "afile").read_text() == "keep"


def test_evaluate_json_replaces_an_earlier_result(translator, tmp_path):
    out = tmp_path / "scores.json"
    argv = ["evaluate", str(translator), "--dataset", "dates", "--limit", "2", "--json", str(out)]
    assert seq2seq_main(argv) == 0
    assert seq2seq_main(argv) == 0
    assert '"sentences": 2' in out.read_text()


def test_caption_never_draws_over_an_image_it_reads(captioner_run, images, tmp_path, capsys,
                                                    no_model):
    # `--overlay in0.png` of two images writes in0-1.png and in0-2.png: name the second input
    # in0-2.png, and the numbered name is an input too.
    second = images[1].rename(tmp_path / "in0-2.png")
    before = {p: p.read_bytes() for p in (images[0], second)}
    for argv, target in [
        ([str(images[0]), "--overlay", str(images[0])], images[0]),
        ([str(images[0]), str(second), "--overlay", str(images[0])], second),
        ([str(images[0]), "--overlay", f"{tmp_path}/../{tmp_path.name}/{images[0].name}"],
         images[0]),
    ]:
        assert captioner_main(["caption", str(captioner_run), *argv]) == 2
        error = one_line_error(capsys)
        assert "is an input of this command" in error and target.name in error
    assert {p: p.read_bytes() for p in before} == before
    assert not (tmp_path / "in0-1.png").exists()


def test_render_never_draws_over_its_image_or_results(captioner_run, images, tmp_path, capsys):
    assert captioner_main(["caption", str(captioner_run), str(images[0]), "--json"]) == 0
    results = tmp_path / "caption.html"  # a results file may have any name
    results.write_text(capsys.readouterr().out)
    before = {p: p.read_bytes() for p in (results, *images)}
    for argv, target, option in [
        (["--index", "0", "--image", str(images[1]), "--out", str(images[1])], images[1], "--out"),
        (["--html", str(results)], results, "--html"),
        (["--out", str(images[0])], images[0], "--out"),  # the result's own image
    ]:
        assert captioner_main(["render", str(results), *argv]) == 2
        error = one_line_error(capsys)
        assert f"error: {option} {target}" in error and "is an input" in error
    assert {p: p.read_bytes() for p in before} == before


def test_a_figure_under_a_file_names_the_file(translator, tmp_path, capsys, no_model):
    blocker = tmp_path / "afile"
    blocker.write_text("keep")
    assert seq2seq_main(["translate", str(translator), "March 3, 1999", "--html",
                         str(blocker / "x.html")]) == 2
    assert f"{blocker} is a file, not a folder" in one_line_error(capsys)
    assert blocker.read_text() == "keep"


def test_an_unwritable_folder_is_refused_before_any_work(translator, captioner_run, images,
                                                         tmp_path, capsys, monkeypatch,
                                                         no_model):
    # As root, permission bits do not stop writes: `os.access` says the folder is read-only.
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kwargs: (
        Path(path) != readonly and access(path, mode, **kwargs)))
    for main, argv in [
        (seq2seq_main, ["translate", str(translator), "March 3, 1999", "--plot",
                        str(readonly / "a.png")]),
        (seq2seq_main, ["translate", str(translator), "March 3, 1999", "--html",
                        str(readonly / "a.html")]),
        (captioner_main, ["caption", str(captioner_run), str(images[0]), "--overlay",
                          str(readonly / "a.png")]),
        (seq2seq_main, ["evaluate", str(translator), "--dataset", "dates", "--json",
                        str(readonly / "a.json")]),
    ]:
        assert main(argv) == 2
        assert f"the folder {readonly} is not writable" in one_line_error(capsys)
    assert list(readonly.iterdir()) == []


def test_a_write_that_still_fails_is_one_line(translator, captioner_run, images, tmp_path, capsys,
                                              monkeypatch):
    import captioner.visualize
    import seq2seq.evaluate
    import seq2seq.visualize

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "x"))

    monkeypatch.setattr(seq2seq.visualize, "write_translation_viewer", denied)
    monkeypatch.setattr(seq2seq.evaluate, "save_json", denied)
    monkeypatch.setattr(captioner.visualize, "render_caption_overlay", denied)
    for main, argv, option, out in [
        (seq2seq_main, ["translate", str(translator), "March 3, 1999"], "--html", "a.html"),
        (seq2seq_main, ["evaluate", str(translator), "--dataset", "dates", "--limit", "2"],
         "--json", "a.json"),
        (captioner_main, ["caption", str(captioner_run), str(images[0])], "--overlay", "a.png"),
    ]:
        assert main([*argv, option, str(tmp_path / out)]) == 2
        error = one_line_error(capsys)
        assert f"error: {option} {tmp_path / out}: cannot write it: Permission denied" in error
