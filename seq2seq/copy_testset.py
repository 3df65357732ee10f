"""A test set of names the model never saw, and how many of them a translator carries over.

The copying comparison of issue #9 (See et al. 2017; the notes' "Caecilius" example): in the
test pairs, every name found on both sides (a capitalized word such as "Tom" or "Boston", the
same on both sides, used more often capitalized than lowercase in the training data, so that
"No" is not taken for a name) is replaced on both sides by an invented name that no training
sentence holds. A translator can only produce such a name by copying it: through a
pointer-generator (`--copy`), or by the post-hoc `<unk>` replacement of `seq2seq.inference`.

- `make_copy_testset(test, train)` -> `CopyCase`s; `write_copy_testset(cases, OUT.tsv)` writes
  `OUT.tsv` (source TAB target, as `--dataset tsv` reads) and `OUT.names.json` (the names of
  each line, and the originals they replace).
- `names_carried(run_dir, OUT.tsv)` translates the sources and counts the names found in the
  output as whole words, with and without the `<unk>` replacement.

`scripts/make_copy_testset.py` and `scripts/evaluate_copy_names.py` are the command lines.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common.errors import DataError, UserError

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
                        "scripts/make_copy_testset.py")
    lines = tsv.read_text(encoding="utf-8").splitlines()
    names = json.loads(names_path(tsv).read_text(encoding="utf-8"))
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
