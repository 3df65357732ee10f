"""A test set of names the model never saw, and how many of them each run carries over.

The copying comparison of issue #9 (See et al. 2017; the notes' "Caecilius" example), in two
steps:

    python scripts/experiments/copy_names.py make --data ../shared/data/spa-eng --out copy_test.tsv
    python scripts/experiments/copy_names.py evaluate --data copy_test.tsv \
        bahdanau=runs/spa-eng-compare-bahdanau bahdanau-copy=runs/spa-eng-compare-bahdanau-copy \
        --json copy_names.json

`make`: in the test pairs, every name found on both sides (a capitalized word such as "Tom" or
"Boston", the same on both sides, used more often capitalized than lowercase in the training
data, so that "No" is not taken for a name) is replaced on both sides by an invented name that
no training sentence holds. Writes OUT.tsv (source TAB target, as `seq2seq evaluate --data`
reads) and OUT.names.json (the names of each line, and the originals they replace).

`evaluate`: translates those sources with each run and counts the invented names found in the
output as whole words: with the post-hoc `<unk>` replacement (`seq2seq translate` as it is)
and without it (only what the model emits: a pointer-generator's copies, or nothing for a
model without `--copy`). A translator can only produce such a name by copying it. Prints a
table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from common.cli import (  # noqa: E402
    HelpFormatter,
    Parser,
    SubcommandParser,
    check_distinct_labels,
    labelled_run,
    positive_int,
    run_cli,
)
from common.errors import DataError, UserError  # noqa: E402
from common.outputs import check_output_file, reported_write  # noqa: E402

CONSONANTS = "bcdfgklmnprstvz"
VOWELS = "aeiou"


@dataclass(frozen=True)
class CopyCase:
    """One test pair with its names substituted.

    Attributes:
        source: the source sentence, names replaced.
        target: the reference, names replaced the same way.
        names: the invented names it holds (each on both sides).
        originals: the names they replace, in the same order.
    """

    source: str
    target: str
    names: list[str]
    originals: list[str]


def is_name_like(token: str) -> bool:
    """A capitalized alphabetic word of two letters or more: "Tom", "Boston", "María"."""
    return len(token) >= 2 and token.isalpha() and token[0].isupper() and token[1:].islower()


def shared_names(source_tokens: Sequence[str], target_tokens: Sequence[str],
                 counts: Counter) -> list[str]:
    """The name-like tokens found on both sides, in source order, that the training data
    (token `counts`) uses more often as they are than in lowercase ("Tom", not "No")."""
    target = set(target_tokens)
    seen: list[str] = []
    for token in source_tokens:
        if (token in target and is_name_like(token) and counts[token] >= counts[token.lower()]
                and token not in seen):
            seen.append(token)
    return seen


def invent_names(count: int, exclude: set[str], seed: int = 0) -> list[str]:
    """`count` different invented names (consonant-vowel syllables, capitalized), none of them
    in `exclude` (in any case).

    Example:
    >>> names = invent_names(3, {"Tom"}, seed=1)
    >>> len(set(names)), all(n[0].isupper() for n in names)
    (3, True)
    """
    rng = random.Random(seed)
    lowered = {token.lower() for token in exclude}
    names: list[str] = []
    while len(names) < count:
        syllables = rng.choice((2, 3))
        word = "".join(rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(syllables))
        word = (word + rng.choice(CONSONANTS)).capitalize()
        if word.lower() not in lowered and word not in names:
            names.append(word)
    return names


def _replace_word(text: str, word: str, replacement: str) -> str:
    return re.sub(rf"(?<!\w){re.escape(word)}(?!\w)", replacement, text)


def make_copy_testset(test: Any, train: Any, seed: int = 0,
                      limit: int | None = None) -> list[CopyCase]:
    """The test pairs holding a shared name, each name replaced by an invented one.

    Args:
        test: the test `PairsSplit` (`seq2seq.datasets.load_pairs`).
        train: the training `PairsSplit`: no invented name occurs in it, and its token counts
            tell names from capitalized words.
        seed: chooses the invented names.
        limit: keep at most this many cases.

    Returns:
        The cases, in test order; pairs without a shared name are left out.
    """
    counts: Counter = Counter()
    for tokens in list(train.source_tokens) + list(train.target_tokens):
        counts.update(tokens)
    vocabulary = set(counts)
    found = []
    for source, target, source_tokens, target_tokens in zip(
            test.sources, test.targets, test.source_tokens, test.target_tokens):
        names = shared_names(source_tokens, target_tokens, counts)
        if names:
            found.append((source, target, names))
        if limit is not None and len(found) >= limit:
            break
    pool = invent_names(sum(len(names) for _, _, names in found),
                        vocabulary | set().union(*(set(t) for t in test.source_tokens)),
                        seed=seed)
    cases, used = [], 0
    for source, target, originals in found:
        invented = pool[used : used + len(originals)]
        used += len(originals)
        for original, name in zip(originals, invented):
            source = _replace_word(source, original, name)
            target = _replace_word(target, original, name)
        cases.append(CopyCase(source, target, list(invented), list(originals)))
    return cases


def names_path(tsv: str | Path) -> Path:
    """`OUT.names.json` beside `OUT.tsv`."""
    tsv = Path(tsv)
    return tsv.with_name(tsv.stem + ".names.json")


def write_copy_testset(cases: Iterable[CopyCase], out_tsv: str | Path) -> tuple[Path, Path]:
    """Writes `OUT.tsv` (source TAB target) and `OUT.names.json`; returns both paths."""
    cases = list(cases)
    out_tsv = Path(out_tsv)
    out_tsv.write_text("".join(f"{c.source}\t{c.target}\n" for c in cases), encoding="utf-8")
    names = names_path(out_tsv)
    names.write_text(json.dumps([{"names": c.names, "originals": c.originals} for c in cases],
                                ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return out_tsv, names


def read_copy_testset(tsv: str | Path) -> list[CopyCase]:
    """The cases written by `write_copy_testset`."""
    tsv = Path(tsv)
    if not tsv.is_file() or not names_path(tsv).is_file():
        raise DataError(f"{tsv}: expected it and {names_path(tsv).name} beside it, written by "
                        "scripts/experiments/copy_names.py make")
    try:
        lines = tsv.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise DataError(f"{tsv}: not UTF-8 text; expected the OUT.tsv of "
                        "scripts/experiments/copy_names.py make") from None
    try:
        names = json.loads(names_path(tsv).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{names_path(tsv)}: not the JSON that scripts/experiments/copy_names.py "
                        f"make writes ({exc})") from None
    if not isinstance(names, list) or not all(
            isinstance(entry, dict) and isinstance(entry.get("names"), list)
            and isinstance(entry.get("originals"), list) for entry in names):
        raise DataError(f"{names_path(tsv)}: expected a list of {{\"names\": [...], "
                        "\"originals\": [...]}, as scripts/experiments/copy_names.py make writes")
    if len(lines) != len(names):
        raise DataError(f"{tsv} has {len(lines)} lines but {names_path(tsv).name} "
                        f"{len(names)} entries")
    cases = []
    for line, entry in zip(lines, names):
        source, _, target = line.partition("\t")
        cases.append(CopyCase(source, target, entry["names"], entry["originals"]))
    return cases


def carried(text: str, name: str) -> bool:
    """Whether `name` occurs in `text` as a whole word ("Zorvik's" carries "Zorvik")."""
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None


def names_carried(run_dir: str | Path, tsv: str | Path, beam_size: int = 1,
                  batch_size: int = 64, limit: int | None = None) -> dict[str, Any]:
    """The share of the invented names a run carries into its translations.

    Decodes the sources once per setting: with the post-hoc `<unk>` replacement
    (`seq2seq translate` as it is) and without it (only what the model emits itself: a
    pointer-generator's copies, or nothing for a model without `--copy`).

    Returns:
        `{"run_dir", "arch", "copy", "sentences", "names", "carried", "share",
        "carried_without_unk_replacement", "share_without_unk_replacement", "bleu",
        "examples"}` (shares in %; `examples`: the first few sources and outputs).
    """
    from common.metrics.translation import translation_scores
    from common.text import tokenize_texts
    from seq2seq.inference import Translator, screen_lines

    cases = read_copy_testset(tsv)[:limit]
    if not cases:
        raise UserError(f"{tsv}: no test cases")
    translator = Translator.from_run_dir(run_dir)
    token_lists = tokenize_texts([c.source for c in cases],
                                 lowercase=translator.config.data.lowercase)
    _, good = screen_lines([c.source for c in cases], token_lists, translator.max_source_tokens)
    outputs: dict[bool, list[str]] = {}
    for copy_unknown in (True, False):
        texts = [""] * len(cases)
        for start in range(0, len(good), batch_size):
            chunk = good[start : start + batch_size]
            results = translator.translate_tokens([token_lists[i] for i in chunk],
                                                  beam_size=beam_size, copy_unknown=copy_unknown)
            for i, result in zip(chunk, results):
                texts[i] = result.text
        outputs[copy_unknown] = texts
    total = sum(len(c.names) for c in cases)
    counts = {flag: sum(carried(text, name) for c, text in zip(cases, texts) for name in c.names)
              for flag, texts in outputs.items()}
    model = translator.config.model
    return {
        "run_dir": str(run_dir), "arch": model.arch, "copy": model.copy,
        "sentences": len(cases), "names": total,
        "carried": counts[True], "share": round(100.0 * counts[True] / total, 2),
        "carried_without_unk_replacement": counts[False],
        "share_without_unk_replacement": round(100.0 * counts[False] / total, 2),
        "bleu": round(translation_scores(outputs[True], [c.target for c in cases],
                                         lowercase=translator.config.data.lowercase)["bleu"], 2),
        "examples": [{**asdict(c), "translation": t}
                     for c, t in list(zip(cases, outputs[True]))[:5]],
    }


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="copy_names.py", description=__doc__.split("\n\n")[0],
               formatter_class=HelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands",
                           parser_class=SubcommandParser)
    sub.required = True
    making = sub.add_parser("make", help="write the test set of invented names",
                            description="Write OUT.tsv and OUT.names.json: the test pairs "
                                        "holding a name, each name replaced by an invented one.",
                            formatter_class=HelpFormatter)
    making.add_argument("--data", required=True, metavar="DIR",
                        help="a folder with train.tsv and test.tsv (the spa-eng layout)")
    making.add_argument("--out", required=True, metavar="OUT.tsv",
                        help="the test set to write (OUT.names.json is written beside it)")
    making.add_argument("--seed", type=int, default=0, help="chooses the invented names")
    making.add_argument("--limit", type=positive_int, help="keep at most N pairs")
    making.set_defaults(_run=make, _command="make")
    scoring = sub.add_parser("evaluate", help="count the names each run carries over",
                             description="Translate the test set with each run and count the "
                                         "invented names carried into the translations.",
                             formatter_class=HelpFormatter)
    scoring.add_argument("runs", nargs="+", type=labelled_run, metavar="LABEL=RUN_DIR",
                         help="the translator runs to compare (a bare RUN_DIR is labelled by "
                              "its folder name)")
    scoring.add_argument("--data", required=True, metavar="OUT.tsv",
                         help="the test set written by `make` (OUT.names.json beside it)")
    scoring.add_argument("--json", help="also write the results here")
    scoring.add_argument("--beam-size", type=positive_int, default=1,
                         help="beam size of the translations (1: greedy)")
    scoring.add_argument("--limit", type=positive_int, help="only the first N pairs")
    scoring.set_defaults(_run=evaluate, _command="evaluate")
    return p


def make(args: argparse.Namespace) -> None:
    data = Path(args.data)
    if not data.is_dir():
        raise UserError(f"--data {data}: {'is not a folder' if data.exists() else 'no such folder'}"
                        "; expected a folder with train.tsv and test.tsv")
    inputs = [data / "train.tsv", data / "test.tsv"]
    for path in inputs:
        if not path.is_file():
            raise UserError(f"--data {data}: no {path.name} there")
    tsv = check_output_file(args.out, "--out", inputs=inputs)
    check_output_file(names_path(tsv), "--out", inputs=inputs)

    from seq2seq.datasets import load_pairs

    train = load_pairs("tsv", path=args.data, split="train")
    test = load_pairs("tsv", path=args.data, split="test")
    cases = make_copy_testset(test, train, seed=args.seed, limit=args.limit)
    if not cases:
        raise UserError(f"no test pair of {args.data} holds a name on both sides")
    with reported_write(tsv, "--out"):
        tsv, names = write_copy_testset(cases, tsv)
    originals = sorted({n for c in cases for n in c.originals})
    print(f"{len(cases)} of {len(test)} test pairs hold {sum(len(c.names) for c in cases)} "
          f"names ({len(originals)} different, e.g. {', '.join(originals[:6])}); "
          f"wrote {tsv} and {names}")


def check_run_dir(run_dir: str) -> None:
    """A one-line `UserError` unless `run_dir` holds a translator run's config.json."""
    config = Path(run_dir) / "config.json"
    if not config.is_file():
        raise UserError(f"{run_dir}: not a translator run directory (expected {config}); make "
                        "one with `seq2seq train --out RUN_DIR`")
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        data = None
    family = data.get("family") if isinstance(data, dict) else None
    if family != "seq2seq":
        raise UserError(f"{run_dir}: holds a {family!r} run; expected a translator ('seq2seq') "
                        "run")


RESULT_KEYS = ("data", "runs")  # what `evaluate --json` writes: an earlier one may be replaced


def evaluate(args: argparse.Namespace) -> None:
    check_distinct_labels(args.runs)
    for _, run_dir in args.runs:
        check_run_dir(run_dir)
    try:
        cases = read_copy_testset(args.data)  # before any translation
    except DataError as exc:
        raise UserError(f"--data {exc}") from None
    if not cases:
        raise UserError(f"--data {args.data}: no test cases")
    if args.json:
        check_output_file(args.json, "--json", result_keys=RESULT_KEYS,
                          inputs=[args.data, names_path(args.data)])
    results = {label: names_carried(run_dir, args.data, beam_size=args.beam_size,
                                    limit=args.limit)
               for label, run_dir in args.runs}
    print(f"{'run':<24}{'copy':>6}{'names':>7}{'carried':>9}{'no <unk> repl.':>16}{'BLEU':>7}")
    for label, r in results.items():
        print(f"{label:<24}{'yes' if r['copy'] else 'no':>6}{r['names']:>7}{r['share']:>8.1f}%"
              f"{r['share_without_unk_replacement']:>15.1f}%{r['bleu']:>7.1f}")
    if args.json:
        with reported_write(args.json, "--json"):
            Path(args.json).write_text(json.dumps({"data": args.data, "runs": results},
                                                  indent=2, ensure_ascii=False) + "\n",
                                       encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` and runs the sub-command; a `UserError` prints one line and gives 2."""
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
