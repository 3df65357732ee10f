"""The two console scripts: installed, self-explaining, and strict about their input."""

import subprocess
import sys

import pytest


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("prog", ["captioner", "seq2seq"])
def test_help_lists_subcommands(prog):
    result = run(sys.executable, "-m", prog, "--help")
    assert result.returncode == 0, result.stderr
    for command in ["train", "evaluate", "export", "serve"]:
        assert command in result.stdout


@pytest.mark.parametrize("prog", ["captioner", "seq2seq"])
def test_console_script_is_installed(prog):
    from shutil import which

    path = which(prog) or str(__import__("pathlib").Path(sys.executable).parent / prog)
    result = run(path, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout


@pytest.mark.parametrize("prog", ["captioner", "seq2seq"])
def test_unknown_subcommand_exits_2_without_traceback(prog):
    result = run(sys.executable, "-m", prog, "frobnicate")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("prog, command", [("captioner", "render"), ("seq2seq", "translate")])
def test_every_error_of_a_subcommand_has_one_prefix_whoever_finds_it(prog, command, tmp_path,
                                                                     capsys):
    """argparse's own (a bad value), the command line's (an unknown option) and the
    sub-command's (a `UserError`) all say `PROG COMMAND: error: ...`; before a sub-command is
    chosen, `PROG: error: ...`."""
    import importlib

    main = importlib.import_module(f"{prog}.cli").main
    missing = str(tmp_path / "missing")
    cases = {
        "captioner": [["render", "r.json", "--index", "one"], ["render", "r.json", "--bogus"],
                      ["render", missing, "--out", str(tmp_path / "o.png")]],
        "seq2seq": [["translate", missing, "--beam-size", "one"],
                    ["translate", missing, "--bogus"], ["translate", missing, "a"]],
    }[prog]
    needles = ["'one'", "unrecognized arguments: --bogus", missing]
    for argv, needle in zip(cases, needles, strict=True):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith(f"{prog} {command}: error: "), err
        assert needle in err
    assert main(["frobnicate"]) == 2
    assert capsys.readouterr().err.startswith(f"{prog}: error: argument COMMAND: invalid choice")


@pytest.mark.parametrize("prog, command", [("seq2seq", "translate"), ("seq2seq", "evaluate"),
                                           ("captioner", "caption"), ("captioner", "evaluate")])
def test_the_no_repeat_ngram_help_says_when_it_hurts(prog, command, capsys):
    import importlib

    assert importlib.import_module(f"{prog}.cli").main([command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    start = text.index("--no-repeat-ngram N never")  # its entry, not the usage line
    said = text[start:text.index("--", start + 20)]
    for needle in ("it hurts those that must: dates", "1999-03-03", "numbers, code",
                   "(default: 0)"):
        assert needle in said, said


def test_translate_takes_options_before_its_texts(tmp_path):
    # The line: `--beam-size 4` between MODEL and TEXT used to be refused with
    # "unrecognized arguments: 12 May 2020"; now the line is read and the missing run named.
    missing = tmp_path / "no-run"
    missing.mkdir()
    result = run(sys.executable, "-m", "seq2seq", "translate", str(missing), "--beam-size", "4",
                 "12 May 2020")
    assert result.returncode == 2
    assert "unrecognized arguments" not in result.stderr
    assert "not a translator run directory" in result.stderr
    assert "Traceback" not in result.stderr


# -- what needs no model is answered before TensorFlow is imported ----------------------------

# `main(argv)` in a fresh interpreter; prints the heavy modules it imported, exits with its
# status.
IMPORTS_AFTER_MAIN = (
    "import sys\n"
    "from {prog}.cli import main\n"
    "status = main(sys.argv[1:])\n"
    "print('imported:', sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))\n"
    "sys.exit(status)\n"
)


def run_main(prog: str, *argv: str) -> subprocess.CompletedProcess:
    return run(sys.executable, "-c", IMPORTS_AFTER_MAIN.format(prog=prog), *map(str, argv))


def setup_version() -> str:
    """The version `setup.py` declares, read from its text."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "setup.py").read_text(encoding="utf-8")
    return re.search(r"""\bversion=["']([^"']+)["']""", text)[1]


@pytest.mark.parametrize("prog", ["captioner", "seq2seq"])
def test_version_is_the_package_version_and_imports_no_tensorflow(prog):
    result = run_main(prog, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{prog} {setup_version()}", "imported: []"]


@pytest.fixture
def models(tmp_path):
    """Folders a MODEL argument may name: nothing, an empty folder, a run of the other family
    and something shaped like a SavedModel (never loaded: each case fails before)."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "seq2seq-run").mkdir()
    (tmp_path / "seq2seq-run" / "config.json").write_text('{"family": "seq2seq"}')
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "saved_model.pb").write_bytes(b"")
    (tmp_path / "export" / "assets.extra").mkdir()
    (tmp_path / "export" / "assets.extra" / "export_info.json").write_text(
        '{"beam_sizes": [1, 2, 3, 4, 5], "default_beam_size": 3}')
    (tmp_path / "ct2").mkdir()  # a CTranslate2 export
    (tmp_path / "ct2" / "model.bin").write_bytes(b"")
    (tmp_path / "ct2" / "export_info.json").write_text(
        '{"format": "ctranslate2", "beam_sizes": [1, 2, 4], "default_beam_size": 1}')
    (tmp_path / "grey.png").write_bytes(b"not read")
    return tmp_path


@pytest.mark.parametrize("prog, argv, needle", [
    ("captioner", ["caption", "{tmp}/nope", "x.png"],
     "{tmp}/nope is not a captioner run directory nor a SavedModel (no such file or folder)"),
    ("captioner", ["caption", "{tmp}/empty", "x.png"],
     "{tmp}/empty is not a captioner run directory (no config.json)"),
    ("captioner", ["caption", "{tmp}/grey.png", "x.png"],
     "grey.png is not a captioner run directory nor a SavedModel (a file)"),
    ("captioner", ["caption", "{tmp}/seq2seq-run", "x.png"],
     "{tmp}/seq2seq-run holds a 'seq2seq' run; expected a 'captioner' run"),
    ("captioner", ["caption", "{tmp}/export", "x.png", "--checkpoint", "last"],
     "--checkpoint: a SavedModel holds the weights chosen at export time"),
    ("captioner", ["caption", "{tmp}/export", "x.png", "--overlay", "{tmp}/o.jpg"],
     "expected a file name ending in .png"),
    ("captioner", ["caption", "{tmp}/export", "{tmp}/grey.png", "--overlay", "{tmp}/grey.png"],
     "is an input of this command"),
    ("captioner", ["render", "{tmp}/none.json", "--out", "{tmp}/o.png"], "none.json: no such file"),
    ("captioner", ["render", "{tmp}/empty", "--out", "{tmp}/o.png"],
     "empty: a folder; expected a list of caption results"),
    ("seq2seq", ["translate", "{tmp}/nope", "Nov 3, 1999"],
     "{tmp}/nope is not a translator run directory nor a SavedModel (no such file or folder)"),
    ("seq2seq", ["translate", "{tmp}/empty", "Nov 3, 1999"],
     "{tmp}/empty is not a translator run directory (no config.json)"),
    ("seq2seq", ["translate", "{tmp}/export", "Nov 3, 1999", "--length-penalty", "0.6"],
     "--length-penalty: a SavedModel decodes with the length penalty it was exported with"),
    ("seq2seq", ["translate", "{tmp}/export", "Nov 3, 1999", "--attention-layer", "0"],
     "--attention-layer/--attention-head: a SavedModel returns the attention chosen"),
    ("seq2seq", ["translate", "{tmp}/export", "Nov 3, 1999", "--plot", "{tmp}/o.jpg"],
     "expected a file name ending in .png"),
    # An export's beam sizes are in its export_info.json: refused before it loads (24 s), with
    # the option that would do.
    ("seq2seq", ["translate", "{tmp}/export", "Nov 3, 1999", "--beam-size", "7"],
     "--beam-size 7: this export has beam sizes 1, 2, 3, 4, 5 (chosen at export time"),
    ("seq2seq", ["translate", "{tmp}/export", "Nov 3, 1999", "--n-best", "3"],
     "--n-best 3 needs a beam of at least 3 (got 1): add --beam-size 3 (this export has beam "
     "sizes 1, 2, 3, 4, 5)"),
    ("seq2seq", ["translate", "{tmp}/ct2", "Nov 3, 1999", "--n-best", "3", "--beam-size", "2"],
     "--n-best 3 needs a beam of at least 3 (got 2): add --beam-size 4 (this export has beam "
     "sizes 1, 2, 4)"),
    ("seq2seq", ["evaluate", "{tmp}/export", "--dataset", "dates", "--beam-size", "6"],
     "--beam-size 6: this export has beam sizes 1, 2, 3, 4, 5"),
    ("captioner", ["caption", "{tmp}/export", "x.png", "--n-best", "4"],  # its default: 3
     "--n-best 4 needs a beam of at least 4 (got 3): add --beam-size 4"),
    ("captioner", ["caption", "{tmp}/export", "x.png", "--n-best", "9", "--beam-size", "5"],
     "--n-best 9 needs a beam of at least 9; this export has beam sizes 1, 2, 3, 4, 5: ask for "
     "--n-best 5 or fewer, or export the run again with `--beam-sizes` up to 9"),
])
def test_errors_that_need_no_model_come_before_tensorflow(models, prog, argv, needle):
    # `captioner caption runs/nope x.png` took 10.9 s to say there is no such run directory:
    # the whole of it importing TensorFlow.
    result = run_main(prog, *[a.format(tmp=models) for a in argv])
    err = result.stderr.strip()
    assert result.returncode == 2, err
    # Prefixed by the sub-command, as argparse's own errors of a sub-command are.
    assert len(err.splitlines()) == 1 and err.startswith(f"{prog} {argv[0]}: error: "), err
    assert needle.format(tmp=models) in err
    assert result.stdout.splitlines() == ["imported: []"]


def test_render_draws_without_tensorflow(tmp_path):
    from PIL import Image

    Image.new("RGB", (40, 30), (200, 200, 200)).save(tmp_path / "grey.png")
    result = {"image": str(tmp_path / "grey.png"), "caption": "a b", "words": ["a", "b"],
              "attention": [[1, 0, 0, 0], [0, 0, 0, 1], [0.25] * 4], "grid": [2, 2]}
    (tmp_path / "r.json").write_text(__import__("json").dumps([result]))
    out = run_main("captioner", "render", tmp_path / "r.json", "--out", tmp_path / "o.png",
                   "--html", tmp_path / "o.html")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["imported: []"]
    assert Image.open(tmp_path / "o.png").size[0] == 3 * 224 and (tmp_path / "o.html").is_file()


@pytest.mark.parametrize("kind, text, expected", [
    (int, "1,2,3", [1, 2, 3]), (int, "0", [0]), (float, "0.6,1.0", [0.6, 1.0])])
def test_distinct_list_parses_comma_separated_values(kind, text, expected):
    from common.cli import distinct_list

    assert distinct_list(kind)(text) == expected


@pytest.mark.parametrize("kind, text", [
    (int, "1,1"), (int, "-1,2"), (int, "1,x"), (int, ""), (int, "1.5"), (float, "0.6,0.6")])
def test_distinct_list_refuses_repeats_negatives_and_junk(kind, text):
    import argparse

    from common.cli import distinct_list

    with pytest.raises(argparse.ArgumentTypeError):
        distinct_list(kind)(text)


def _quick_parser():
    from common.cli import Parser, beam_size_list

    parser = Parser(prog="bench")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--batches", type=beam_size_list, default="1,32")
    parser.add_argument("--quick", action="store_true")
    return parser


@pytest.mark.parametrize("argv, expected", [
    (["--quick"], (3, 2, [4])),                        # the smoke run's settings
    (["--quick", "--rounds", "7"], (7, 2, [4])),       # a given option wins over --quick
    (["--rounds=5", "--quick"], (5, 2, [4])),          # even given at its default value
    (["--quick", "--rou", "6", "--batches", "8"], (6, 2, [8])),  # abbreviated too
    (["--rounds", "7"], (7, 30, [1, 32])),             # no --quick: nothing changes
])
def test_quick_sets_only_the_options_the_command_line_did_not_give(argv, expected):
    from common.cli import apply_quick

    args = _quick_parser().parse_args(argv)
    apply_quick(args, {"rounds": 3, "runs": 2, "batches": [4]})
    assert (args.rounds, args.runs, list(args.batches)) == expected


def test_a_given_option_wins_over_quick_in_a_script():
    """benchmark_decoding.py --quick --rounds 4: the smoke sizes, and the 4 rounds given (the
    script used to overwrite every option --quick names)."""
    from tests.helpers.benchmarks import load_script

    script = load_script("benchmark_decoding")
    args = script.check_args(script.build_parser().parse_args(
        ["--quick", "--rounds", "4", "--batch-sizes", "3"]))
    assert (args.rounds, args.batch_sizes, args.layers, args.steps) == (4, [3], 1, 8)
