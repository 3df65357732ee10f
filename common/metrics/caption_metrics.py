"""Caption metrics as the COCO evaluation server computes them (pycocoevalcap).

`caption_scores` tokenizes references and hypotheses with the Stanford PTB tokenizer (lower
case, punctuation removed; pycocoevalcap's jar, run with `java`) and returns BLEU-1..4
(Papineni et al. 2002), METEOR (Banerjee & Lavie 2005), ROUGE-L (Lin 2004) and CIDEr-D
(Vedantam et al. 2015) on a 0-100 scale (CIDEr: 100 x pycocoevalcap's value, so 0.95 -> 95).

Without `java` (or when the tokenizer fails), text is tokenized by a simple rule instead
(lowercase, punctuation removed, split on spaces), METEOR is skipped, and a warning is
given once. The simple rule splits some words the PTB tokenizer keeps whole and the other way
round (contractions, hyphens), which shifts BLEU, ROUGE-L and CIDEr: the scores therefore
name the tokenizer that ran (`"tokenizer": "ptb"` or `"simple"`), and such figures are not
comparable with published ones. `scripts/install_java.sh` installs a Java runtime. SPICE needs Stanford CoreNLP models that pycocoevalcap downloads on first use;
it is computed only when asked for and the models are already there, else skipped with a
warning.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from common.errors import UserError

logger = logging.getLogger(__name__)

METRICS = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr")
_GROUPS = ("bleu", "meteor", "rouge", "cider", "spice")
# The punctuation pycocoevalcap's PTBTokenizer removes after tokenizing.
_PTB_PUNCTUATION = {"''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-", ".", "?", "!",
                    ",", ":", "-", "--", "...", ";"}
_SIMPLE_PUNCTUATION = re.compile(r"[^\w\s]|_")
_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(message)


def _package_dir() -> Path:
    import pycocoevalcap  # a namespace package: no __file__

    return Path(next(iter(pycocoevalcap.__path__)))


def java_available() -> bool:
    return shutil.which("java") is not None


def simple_tokenize(text: str) -> str:
    """The fallback tokenizer: lowercase, punctuation removed, words joined by one space."""
    return " ".join(_SIMPLE_PUNCTUATION.sub(" ", text.lower()).split())


def ptb_tokenize(texts: Sequence[str], timeout: float = 300.0) -> list[str]:
    """pycocoevalcap's PTB tokenization of `texts` (lowercased, punctuation tokens removed).

    The same jar, options and punctuation list as `pycocoevalcap.tokenizer.PTBTokenizer`,
    but the temporary file goes to the system temp folder rather than into the installed
    package, so it works from a read-only install.

    Raises:
        OSError or subprocess.SubprocessError when `java` cannot run the tokenizer.
    """
    jar = _package_dir() / "tokenizer" / "stanford-corenlp-3.4.1.jar"
    if not jar.is_file():
        raise OSError(f"{jar} is missing")
    # One caption a line: every character that ends a line (Java's tokenizer also breaks at
    # U+2028, form feeds and the like, which would shift every later caption onto the wrong
    # image) becomes a space, as str.splitlines() knows them.
    lines = [" ".join(t.splitlines()) for t in texts]
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write("".join(line + "\n" for line in lines).encode("utf-8"))
        name = f.name
    try:
        command = ["java", "-cp", str(jar), "edu.stanford.nlp.process.PTBTokenizer",
                   "-preserveLines", "-lowerCase", name]
        result = subprocess.run(command, capture_output=True, timeout=timeout, check=True)
    finally:
        os.unlink(name)
    output = result.stdout.decode("utf-8").split("\n")
    if output and not output[-1]:  # after the newline that ends the last line
        output.pop()
    if len(output) != len(lines):
        raise subprocess.SubprocessError(
            f"PTBTokenizer returned {len(output)} lines for {len(lines)} captions")
    return [" ".join(w for w in line.rstrip().split(" ") if w and w not in _PTB_PUNCTUATION)
            for line in output]


def _tokenize_all(texts: list[str], tokenizer: str = "auto") -> tuple[list[str], bool]:
    """Tokenized `texts` and whether the PTB tokenizer (rather than the fallback) was used."""
    if tokenizer == "simple":
        return [simple_tokenize(t) for t in texts], False
    if java_available():
        try:
            return ptb_tokenize(texts), True
        except (OSError, subprocess.SubprocessError, UnicodeDecodeError) as exc:
            _warn_once("ptb", f"the PTB tokenizer failed ({exc}); using a simple tokenizer "
                              "and skipping METEOR")
    else:
        _warn_once("java", "java is not installed: caption metrics use a simple tokenizer "
                           "instead of the PTB tokenizer (BLEU, ROUGE-L and CIDEr shift) and "
                           "METEOR is skipped; bash scripts/install_java.sh installs Java")
    return [simple_tokenize(t) for t in texts], False


def _meteor(gts: dict, res: dict, timeout: float) -> float | None:
    """pycocoevalcap's METEOR, or None (with a warning) when it fails or hangs."""
    from pycocoevalcap.meteor.meteor import Meteor

    result: dict[str, Any] = {}
    try:
        scorer = Meteor()  # starts the jar; it loads its paraphrase table while we wait
    except OSError as exc:
        _warn_once("meteor", f"METEOR skipped: {exc}")
        return None

    def run() -> None:
        try:
            result["score"] = scorer.compute_score(gts, res)[0]
        except (OSError, ValueError) as exc:  # the jar died: its output ended early
            result["error"] = exc
            if scorer.lock.locked():
                scorer.lock.release()  # so that Meteor.__del__ does not wait forever

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    process = scorer.meteor_p  # stop the jar now rather than whenever it is collected
    if process.poll() is None:
        process.kill()
    process.wait()
    thread.join(5.0)
    for pipe in (process.stdin, process.stdout, process.stderr):
        try:
            pipe.close()
        except OSError:  # unflushed input to a killed jar
            pass
    if "score" not in result:
        reason = result.get("error") or f"no result within {timeout:.0f} s"
        _warn_once("meteor", f"METEOR skipped: {reason}")
        return None
    return result["score"]


def _spice(gts: dict, res: dict) -> float | None:
    lib = _package_dir() / "spice" / "lib"
    if not (lib / "stanford-corenlp-3.6.0-models.jar").is_file():
        _warn_once("spice", "SPICE skipped: it needs the Stanford CoreNLP 3.6.0 models in "
                            f"{lib} (pycocoevalcap downloads them on first use)")
        return None
    from pycocoevalcap.spice.spice import Spice

    try:
        return Spice().compute_score(gts, res)[0]
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        _warn_once("spice-run", f"SPICE failed ({exc}); skipped")
        return None


def caption_scores(references: Mapping[Hashable, Sequence[str]],
                   hypotheses: Mapping[Hashable, str],
                   metrics: Iterable[str] = ("bleu", "meteor", "rouge", "cider"),
                   meteor_timeout: float = 600.0, tokenizer: str = "auto") -> dict[str, Any]:
    """COCO caption metrics of generated captions against reference captions, 0-100.

    Args:
        references: `{image_id: [reference caption, ...]}`; it may hold more images than
            `hypotheses` (only the hypotheses' images are scored).
        hypotheses: `{image_id: generated caption}`, one per image.
        metrics: which groups to compute, out of `"bleu"`, `"meteor"`, `"rouge"`, `"cider"`,
            `"spice"` (SPICE is off by default; see the module docstring).
        meteor_timeout: seconds to wait for the METEOR jar before skipping it.
        tokenizer: "auto" (PTB when Java runs, else simple) or "simple" (no Java: the
            training's validation, where a Java start per epoch is not worth it; METEOR is
            then skipped).

    Returns:
        `{"BLEU-1": ..., "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr"}`
        (`"SPICE"` when computed) with the groups asked for, floats; a metric that could not
        run is left out. And `"tokenizer"`: `"ptb"` (pycocoevalcap's PTB tokenizer, as the
        COCO server) or `"simple"` (the fallback without Java; see the module docstring).

    Example:
    >>> refs = {1: ["A dog runs on the grass.", "A brown dog running."]}
    >>> caption_scores(refs, {1: "a dog runs on the grass"}, metrics=["bleu"])["BLEU-1"]
    100.0
    """
    metrics = [m.lower() for m in metrics]
    unknown = sorted(set(metrics) - set(_GROUPS))
    if unknown:
        raise UserError(f"Unknown caption metric(s) {', '.join(unknown)}; choose from: "
                        f"{', '.join(_GROUPS)}")
    if not hypotheses:
        raise UserError("no hypotheses to score; expected at least one caption")
    missing = [i for i in hypotheses if i not in references]
    if missing:
        raise UserError(f"{len(missing)} hypothesis image id(s) have no references, e.g. "
                        f"{missing[0]!r}; expected ids from the references")
    ids = list(hypotheses)
    empty = [i for i in ids if not references[i]]
    if empty:
        raise UserError(f"image {empty[0]!r} has no reference captions; expected at least one")
    for i in ids:
        if not isinstance(hypotheses[i], str):
            raise UserError(f"hypothesis for image {i!r} is a {type(hypotheses[i]).__name__}; "
                            "expected one caption string")

    texts = [hypotheses[i] for i in ids] + [r for i in ids for r in references[i]]
    if tokenizer not in ("auto", "simple"):
        raise UserError(f"unknown tokenizer {tokenizer!r}; choose auto or simple")
    tokens, ptb = _tokenize_all(texts, tokenizer)
    res = {i: [tokens[k]] for k, i in enumerate(ids)}
    gts, k = {}, len(ids)
    for i in ids:
        gts[i] = tokens[k : k + len(references[i])]
        k += len(references[i])

    scores: dict[str, Any] = {}
    if "bleu" in metrics:
        from pycocoevalcap.bleu.bleu import Bleu

        bleu = Bleu(4).compute_score(gts, res, verbose=0)[0]
        scores.update({f"BLEU-{n + 1}": 100.0 * b for n, b in enumerate(bleu)})
    if "meteor" in metrics:
        if not ptb:
            pass  # METEOR's own normalization expects the PTB tokens: skipped (warned)
        elif (meteor := _meteor(gts, res, meteor_timeout)) is not None:
            scores["METEOR"] = 100.0 * meteor
    if "rouge" in metrics:
        from pycocoevalcap.rouge.rouge import Rouge

        scores["ROUGE-L"] = 100.0 * float(Rouge().compute_score(gts, res)[0])
    if "cider" in metrics:
        from pycocoevalcap.cider.cider import Cider

        scores["CIDEr"] = 100.0 * float(Cider().compute_score(gts, res)[0])
    if "spice" in metrics and (spice := _spice(gts, res)) is not None:
        scores["SPICE"] = 100.0 * spice
    scores["tokenizer"] = "ptb" if ptb else "simple"
    return scores
