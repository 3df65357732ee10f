"""caption_scores against pycocoevalcap called directly, and its fallbacks."""

import logging
import math
import subprocess

import pytest
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.rouge.rouge import Rouge
from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

from common.errors import UserError
from common.metrics import caption_metrics
from common.metrics.caption_metrics import caption_scores, simple_tokenize
from tests.common.metrics.java import needs_java

REFERENCES = {
    1: ["A dog runs on the grass.", "A brown dog is running outside!", "dog running in a field"],
    2: ["Two cats sleep on a sofa.", "Cats on a couch, sleeping.", "two cats asleep"],
    3: ["A man rides a bike down the street.", "A cyclist on a city road."],
    "x": ["A plate of food with broccoli.", "Broccoli and rice on a plate."],
}
HYPOTHESES = {1: "A dog running on the grass.", 2: "a cat sleeping on a couch",
              3: "a man riding a bike", "x": "a plate of broccoli"}
FAST = ("bleu", "rouge", "cider")


def _direct(references, hypotheses, tokenize):
    """The scores from pycocoevalcap's own scorers, on 0-100."""
    gts = {i: [tokenize(r) for r in references[i]] for i in hypotheses}
    res = {i: [tokenize(h)] for i, h in hypotheses.items()}
    bleu = Bleu(4).compute_score(gts, res, verbose=0)[0]
    return {**{f"BLEU-{n + 1}": 100 * b for n, b in enumerate(bleu)},
            "ROUGE-L": 100 * Rouge().compute_score(gts, res)[0],
            "CIDEr": 100 * Cider().compute_score(gts, res)[0]}


@needs_java
def test_scores_match_pycocoevalcap_with_its_ptb_tokenizer():
    got = caption_scores(REFERENCES, HYPOTHESES, metrics=FAST)
    tokenized_refs = PTBTokenizer().tokenize(
        {i: [{"caption": c} for c in refs] for i, refs in REFERENCES.items()})
    tokenized_hyps = PTBTokenizer().tokenize({i: [{"caption": h}] for i, h in HYPOTHESES.items()})
    gts = {i: tokenized_refs[i] for i in HYPOTHESES}
    res = {i: tokenized_hyps[i] for i in HYPOTHESES}
    bleu = Bleu(4).compute_score(gts, res, verbose=0)[0]
    assert got["BLEU-4"] == pytest.approx(100 * bleu[3], abs=1e-9)
    assert got["BLEU-1"] == pytest.approx(100 * bleu[0], abs=1e-9)
    assert got["CIDEr"] == pytest.approx(100 * Cider().compute_score(gts, res)[0], abs=1e-9)
    assert got["ROUGE-L"] == pytest.approx(100 * Rouge().compute_score(gts, res)[0], abs=1e-9)
    assert set(got) == {"BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "ROUGE-L", "CIDEr",
                        "tokenizer"}
    assert got["tokenizer"] == "ptb"  # the JSON says which tokenizer ran
    assert all(isinstance(v, float) for k, v in got.items() if k != "tokenizer")


@needs_java
def test_identical_captions_score_perfectly():
    references = {i: [refs[0]] for i, refs in REFERENCES.items()}
    hypotheses = {i: refs[0] for i, refs in REFERENCES.items()}
    got = caption_scores(references, hypotheses, metrics=FAST)
    assert got["BLEU-4"] == pytest.approx(100.0)
    assert got["BLEU-1"] == pytest.approx(100.0)
    assert got["ROUGE-L"] == pytest.approx(100.0)
    assert got["CIDEr"] > 0


def test_only_the_hypotheses_images_are_scored():
    subset = {1: HYPOTHESES[1], 2: HYPOTHESES[2]}
    refs = {i: REFERENCES[i] for i in subset}
    assert caption_scores(REFERENCES, subset, metrics=FAST) == caption_scores(
        refs, subset, metrics=FAST)


def test_without_java_a_simple_tokenizer_is_used_and_meteor_skipped(monkeypatch, caplog):
    monkeypatch.setattr(caption_metrics, "java_available", lambda: False)
    monkeypatch.setattr(caption_metrics, "_warned", set())
    with caplog.at_level(logging.WARNING):
        got = caption_scores(REFERENCES, HYPOTHESES)  # METEOR asked for, but skipped
        again = caption_scores(REFERENCES, HYPOTHESES, metrics=FAST)
    assert "METEOR" not in got
    assert caplog.text.count("java is not installed") == 1  # warned once
    expected = _direct(REFERENCES, HYPOTHESES, simple_tokenize)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, abs=1e-9)
        assert again[name] == got[name]


def test_simple_tokenize():
    assert simple_tokenize("A Dog, running!  Fast.") == "a dog running fast"


@needs_java
@pytest.mark.slow  # the METEOR jar takes 10-30 s to load its paraphrase table
def test_meteor_runs_on_the_0_to_100_scale():
    references = {i: refs[:1] for i, refs in REFERENCES.items()}
    hypotheses = {i: refs[0] for i, refs in REFERENCES.items()}
    got = caption_scores(references, hypotheses, metrics=["meteor"])
    # Exact matches: METEOR is 1 minus a fragmentation penalty of 0.5 (1 chunk / m words)^3.
    assert set(got) == {"METEOR", "tokenizer"} and 98 < got["METEOR"] <= 100


def test_bad_input_is_a_user_error():
    with pytest.raises(UserError, match="no references"):
        caption_scores({1: ["a"]}, {2: "a"}, metrics=FAST)
    with pytest.raises(UserError, match="Unknown caption metric"):
        caption_scores({1: ["a"]}, {1: "a"}, metrics=["bleurt"])
    with pytest.raises(UserError, match="no hypotheses"):
        caption_scores({1: ["a"]}, {}, metrics=FAST)
    with pytest.raises(UserError, match="no reference captions"):
        caption_scores({1: []}, {1: "a"}, metrics=FAST)
    with pytest.raises(UserError, match="expected one caption string"):
        caption_scores({1: ["a"]}, {1: ["a"]}, metrics=FAST)


def test_spice_is_skipped_without_its_models(monkeypatch, tmp_path):
    monkeypatch.setattr(caption_metrics, "_package_dir", lambda: tmp_path)
    monkeypatch.setattr(caption_metrics, "java_available", lambda: False)
    got = caption_scores(REFERENCES, HYPOTHESES, metrics=["bleu", "spice"])
    assert "SPICE" not in got and not math.isnan(got["BLEU-4"])


@needs_java
def test_a_meteor_that_does_not_answer_in_time_is_skipped(monkeypatch, caplog):
    monkeypatch.setattr(caption_metrics, "_warned", set())
    with caplog.at_level(logging.WARNING):
        got = caption_scores(REFERENCES, HYPOTHESES, metrics=["meteor", "bleu"],
                             meteor_timeout=0.01)
    assert "METEOR" not in got and "BLEU-4" in got
    assert "METEOR skipped" in caplog.text


def test_without_java_on_the_path_the_scores_say_the_simple_tokenizer_ran(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no java to be found
    monkeypatch.setattr(caption_metrics, "_warned", set())
    got = caption_scores(REFERENCES, HYPOTHESES, metrics=FAST)
    assert got["tokenizer"] == "simple"
    assert got["BLEU-4"] == pytest.approx(
        _direct(REFERENCES, HYPOTHESES, simple_tokenize)["BLEU-4"], abs=1e-9)


def test_a_failing_ptb_tokenizer_is_reported_as_the_simple_one(monkeypatch):
    def broken(texts):
        raise OSError("the jar is missing")

    monkeypatch.setattr(caption_metrics, "java_available", lambda: True)
    monkeypatch.setattr(caption_metrics, "ptb_tokenize", broken)
    monkeypatch.setattr(caption_metrics, "_warned", set())
    assert caption_scores(REFERENCES, HYPOTHESES, metrics=["bleu"])["tokenizer"] == "simple"


# Characters that end a line for Python's str.splitlines(); Java's PTB tokenizer breaks lines at
# U+2028 and form feeds too, which shifted every later caption onto the wrong image.
LINE_BREAKS = ["\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@needs_java
def test_ptb_tokenizer_gives_one_line_per_caption_whatever_breaks_a_line():
    texts = [f"a man{b}riding a horse" for b in LINE_BREAKS] + ["", "A red bus.", ""]
    assert caption_metrics.ptb_tokenize(texts) == (
        ["a man riding a horse"] * len(LINE_BREAKS) + ["", "a red bus", ""])
    references = {i: [r.replace(" ", "\u2028", 1)] for i, r in enumerate(REFERENCES[1])}
    hypotheses = {i: refs[0].replace("\u2028", " ") for i, refs in references.items()}
    assert caption_scores(references, hypotheses, metrics=["bleu"])["BLEU-4"] == (
        pytest.approx(100.0))


def test_a_ptb_output_of_another_length_is_a_failure_not_a_shift(monkeypatch, tmp_path):
    jar = tmp_path / "tokenizer" / "stanford-corenlp-3.4.1.jar"
    jar.parent.mkdir()
    jar.write_bytes(b"")
    monkeypatch.setattr(caption_metrics, "_package_dir", lambda: tmp_path)
    for stdout in (b"a\nb\nc\n", b"a\n"):  # one line too many, one too few, for two captions
        monkeypatch.setattr(caption_metrics.subprocess, "run",
                            lambda *a, out=stdout, **k: subprocess.CompletedProcess(a, 0, out))
        with pytest.raises(subprocess.SubprocessError, match="3 lines|1 lines"):
            caption_metrics.ptb_tokenize(["a", "b"])
