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
