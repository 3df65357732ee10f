"""`common.metrics.cider_d.CiderD`: pycocoevalcap's CIDEr-D per caption when the document
frequencies are those of the same references, and the paper's formula with a corpus's."""

import math
import random
import re
import string
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from pycocoevalcap.cider.cider import Cider

from common.errors import UserError
from common.metrics.caption_metrics import simple_tokenize
from common.metrics.cider_d import CiderD

REPO = Path(__file__).resolve().parents[3]


def random_words(rng: random.Random, count: int) -> list[str]:
    """`count` distinct lowercase words (unchanged by `simple_tokenize`)."""
    words: set[str] = set()
    while len(words) < count:
        words.add("".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 6))))
    return sorted(words)


def random_candidate(rng: random.Random, vocabulary: list[str], refs: list[str],
                     stranger: list[str]) -> str:
    """A candidate of one of several kinds: random words, a reference, a reference with a
    word changed, words no reference has, one word repeated, or nothing."""
    kind = rng.random()
    if kind < 0.35:
        return " ".join(rng.choices(vocabulary, k=rng.randint(1, 20)))
    if kind < 0.55:
        return rng.choice(refs)
    if kind < 0.7:
        words = rng.choice(refs).split() or [rng.choice(vocabulary)]
        words[rng.randrange(len(words))] = rng.choice(vocabulary + stranger)
        return " ".join(words)
    if kind < 0.82:
        return " ".join(rng.choices(stranger, k=rng.randint(1, 20)))  # shares no n-gram
    if kind < 0.95:
        return " ".join([rng.choice(vocabulary)] * rng.randint(1, 20))
    return ""


def random_set(rng: random.Random) -> tuple[dict[int, list[str]], list[dict[int, str]]]:
    """A caption set: `{image: [reference, ...]}` (1-5 references of 1-20 words, a few empty)
    and 1-3 rounds of one candidate per image."""
    words = random_words(rng, rng.randint(2, 16))
    cut = rng.randint(1, len(words) - 1)
    vocabulary, stranger = words[:cut], words[cut:]
    references = {}
    for image in range(rng.randint(1, 6)):
        references[image] = [
            "" if rng.random() < 0.05 else
            " ".join(rng.choices(vocabulary, k=rng.randint(1, 20)))
            for _ in range(rng.randint(1, 5))]
    rounds = [{image: random_candidate(rng, vocabulary, refs, stranger)
               for image, refs in references.items()} for _ in range(rng.randint(1, 3))]
    return references, rounds


@pytest.mark.parametrize("sets", [100, pytest.param(1000, marks=pytest.mark.slow)])
def test_scores_equal_pycocoevalcap_on_random_caption_sets(sets):
    """Built from the references of the images scored (pycocoevalcap's document frequencies),
    every candidate's score is pycocoevalcap's for it, with the rounds' candidates scored in
    one shuffled batch, some as word lists. The fast tier checks the first 100 sets."""
    rng = random.Random(38)
    compared = no_reference_words = 0
    worst = 0.0
    for _ in range(sets):
        references, rounds = random_set(rng)
        batch = [(image, candidate, index) for index, candidates in enumerate(rounds)
                 for image, candidate in candidates.items()]
        rng.shuffle(batch)
        mixed = [c.split() if rng.random() < 0.5 else c for _, c, _ in batch]
        ours = CiderD(references).scores(mixed, [image for image, _, _ in batch])
        try:
            expected = [dict(zip(references, Cider().compute_score(
                references, {i: [c] for i, c in candidates.items()})[1]))
                for candidates in rounds]
        except ValueError:  # every reference empty: pycocoevalcap's max() of nothing
            assert not any(r for refs in references.values() for r in refs)
            no_reference_words += 1
            assert not ours.any()
            continue
        for (image, _, index), score in zip(batch, ours):
            worst = max(worst, abs(score - expected[index][image]))
            compared += 1
    assert worst < 1e-6
    assert compared > 3 * sets and no_reference_words < compared / 100


def ngram_counts(words: list[str], n: int = 4) -> Counter:
    return Counter(tuple(words[i:i + k]) for k in range(1, n + 1)
                   for i in range(len(words) - k + 1))


def plain_cider_d(candidate: list[str], refs: list[list[str]], df: Counter, images: int,
                  n: int = 4, sigma: float = 6.0) -> float:
    """CIDEr-D from its definition (Vedantam et al. 2015, with pycocoevalcap's clipping, and
    its length: the number of bigrams), with document frequencies `df` over `images`."""
    def vector(words):
        vec = {g: c * (math.log(images) - math.log(max(1, df[g])))
               for g, c in ngram_counts(words, n).items()}
        norms = [math.sqrt(sum(v * v for g, v in vec.items() if len(g) == k))
                 for k in range(1, n + 1)]
        return vec, norms

    mine, my_norms = vector(candidate)
    total = 0.0
    for ref in refs:
        theirs, their_norms = vector(ref)
        similarity = 0.0
        for k in range(1, n + 1):
            dot = sum(min(v, theirs.get(g, 0.0)) * theirs.get(g, 0.0)
                      for g, v in mine.items() if len(g) == k)
            norm = my_norms[k - 1] * their_norms[k - 1]
            similarity += dot / norm if norm else 0.0
        delta = max(len(candidate) - 1, 0) - max(len(ref) - 1, 0)
        total += similarity / n * math.exp(-delta**2 / (2 * sigma**2))
    return 10.0 * total / len(refs)


def test_corpus_document_frequencies_give_the_formula():
    """The reward's mode: document frequencies and N from a corpus of 60 images, candidates
    (several per image, some images not at all) scored by the plain formula."""
    rng = random.Random(7)
    vocabulary, stranger = random_words(rng, 14)[:10], ["zzzzzzz", "yyyyyyy"]
    corpus = {f"img{i}": [" ".join(rng.choices(vocabulary, k=rng.randint(1, 20)))
                          for _ in range(rng.randint(1, 5))] for i in range(60)}
    df = Counter(g for refs in corpus.values()
                 for g in {g for r in refs for g in ngram_counts(r.split())})
    cider = CiderD(corpus)
    for _ in range(20):
        images = rng.choices(list(corpus), k=rng.randint(1, 30))
        candidates = [random_candidate(rng, vocabulary, corpus[i], stranger) for i in images]
        expected = [plain_cider_d(c.split(), [r.split() for r in corpus[i]], df, len(corpus))
                    for c, i in zip(candidates, images)]
        np.testing.assert_allclose(cider.scores(candidates, images), expected, rtol=0,
                                   atol=1e-9)
        assert [cider.document_frequency(g) for g in list(df)[:50]] == list(df.values())[:50]


def test_a_score_does_not_depend_on_its_batch():
    references = {"a": ["a red circle", "a red circle above a square"],
                  "b": ["a blue square"], "c": ["two shapes", "a red circle"]}
    cider = CiderD(references)
    batch = ["a red circle", "a blue square", "a red circle", "a", "two shapes"]
    images = ["a", "b", "b", "c", "c"]
    alone = [cider.scores([c], [i])[0] for c, i in zip(batch, images)]
    np.testing.assert_array_equal(cider.scores(batch, images), alone)
    assert cider.scores(["a blue square"], ["b"])[0] > 0 and len(cider) == 3


def test_document_frequency_counts_images_not_references():
    cider = CiderD({1: ["a red circle", "a red square"], 2: ["a red"], 3: ["two"]})
    assert cider.document_frequency(("a", "red")) == 2
    assert cider.document_frequency(("red",)) == 2
    assert cider.document_frequency(("red", "circle")) == 1
    assert cider.document_frequency(("blue",)) == 0
    assert cider.document_frequency(("a", "red", "circle", "x")) == 0


@pytest.mark.parametrize("text", ["A Red, circle!", "the_big  square:\tleft-of a (blue) one",
                                  "Ünïcode ÉCOLE's l'été", "...", ""])
def test_text_is_tokenized_as_the_captioner_validation(text):
    """Strings and word lists both go through `simple_tokenize`, the rule of the captioner's
    validation CIDEr: as scores, `text` equals its tokens."""
    tokens = simple_tokenize(text).split()
    references = {0: [text, "a red circle"], 1: ["other words"]}
    by_tokens = CiderD({0: [" ".join(tokens), "a red circle"], 1: ["other words"]})
    cider = CiderD(references)
    for candidate in ("a red circle", text, text.split(), "A RED CIRCLE!"):
        expected = by_tokens.scores([simple_tokenize(" ".join(candidate) if isinstance(
            candidate, list) else candidate)], [0])
        np.testing.assert_array_equal(cider.scores([candidate], [0]), expected)


def test_tokenize_false_takes_words_as_given():
    cider = CiderD({0: ["A red circle"], 1: ["x"]}, tokenize=False)
    assert cider.scores(["A red circle"], [0])[0] > cider.scores(["a red circle"], [0])[0]
    assert cider.scores([["A", "red circle"]], [0])[0] < cider.scores(["A red circle"], [0])[0]


def test_no_candidates_give_no_scores():
    assert CiderD({0: ["a"]}).scores([], []).shape == (0,)


@pytest.mark.parametrize("build, call, message", [
    ({}, None, "references: expected a non-empty {image_id: [caption, ...]} mapping, got none"),
    ([["a"]], None, "references: expected a non-empty {image_id: [caption, ...]} mapping, got list"),
    ({0: []}, None, "image 0 has no list of reference captions"),
    ({0: "a red circle"}, None, "image 0 has no list of reference captions"),
    ({0: ["a", 3]}, None, "a reference of image 0 is a int"),
    ({0: ["a"]}, (["a", "b"], [0]), "2 candidates but 1 image ids"),
    ({0: ["a"]}, (["a"], [1]), "image id 1 is not in the corpus"),
    ({0: ["a"]}, (["a"], [[0]]), "image id [0] is not in the corpus"),
    ({0: ["a"]}, ([7], [0]), "candidate 0 is a int"),
    ({0: ["a"]}, ("a", [0]), "candidates is one string"),
])
def test_bad_input_is_one_user_error(build, call, message):
    with pytest.raises(UserError, match="^" + re.escape(message)):
        cider = CiderD(build)
        cider.scores(*call)


@pytest.mark.parametrize("options, message", [
    ({"n": 0}, "n must be an integer >= 1, got 0"),
    ({"sigma": 0.0}, "sigma must be > 0, got 0.0"),
])
def test_bad_options_are_one_user_error(options, message):
    with pytest.raises(UserError, match=message):
        CiderD({0: ["a"]}, **options)


def test_importing_it_imports_no_tensorflow():
    """The reward runs beside any backend's training step: NumPy only."""
    code = ("import sys, common.metrics.cider_d; "
            "print(sorted(m for m in ('tensorflow', 'keras', 'jax') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
