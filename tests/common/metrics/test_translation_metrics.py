"""translation_scores: agrees with sacreBLEU called directly and with hand-computed cases."""

import math

import pytest
import sacrebleu

from common.errors import UserError
from common.metrics.translation import translation_scores

HYPS = ["The cat is on the mat.", "¿Dónde está Tom?", "I don't know him at all."]
REFS = ["The cat sat on the mat.", "¿Dónde está Tom?", "I do not know him."]


def test_matches_sacrebleu_called_directly():
    scores = translation_scores(HYPS, REFS)
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    assert 0 < scores["bleu"] < 100 and 0 < scores["chrf"] < 100
    assert scores["count"] == 3


def test_identical_corpus_scores_100_everywhere():
    refs = ["the cat is on the mat", "Él dijo: \"soy de Canadá\"."]
    scores = translation_scores(refs, refs)
    assert scores["bleu"] == pytest.approx(100.0)
    assert scores["chrf"] == pytest.approx(100.0)
    assert scores["exact_match"] == 100.0
    assert scores["brevity_penalty"] == 1.0


def test_brevity_penalty_by_hand():
    # every n-gram of the hypothesis is in the reference; only the brevity penalty bites
    scores = translation_scores(["a b c d"], ["a b c d e f"])
    assert scores["bleu_precisions"] == [100.0, 100.0, 100.0, 100.0]
    assert scores["brevity_penalty"] == pytest.approx(math.exp(1 - 6 / 4))
    assert scores["bleu"] == pytest.approx(100 * math.exp(-0.5))
    assert (scores["hyp_length"], scores["ref_length"]) == (4, 6)


def test_case_matters_as_in_the_files():
    lower = translation_scores(["the cat is on the mat"], ["The Cat Is On The Mat"])
    assert lower["bleu"] < 100 and lower["exact_match"] == 0.0


def test_exact_match_counts_whole_sentences():
    hyps = ["Hola.", "Adiós.", "Gracias ", "Buenas noches."]
    refs = ["Hola.", "Adios.", "Gracias", "Buenas noches!"]
    assert translation_scores(hyps, refs)["exact_match"] == 50.0


def test_several_references_per_sentence():
    hyps = ["Bienvenidas.", "Te quiero mucho ahora mismo."]
    refs = [["Bienvenidos.", "Bienvenidas."], ["Te quiero mucho ahora mismo."]]
    scores = translation_scores(hyps, refs)
    assert scores["exact_match"] == 100.0
    streams = [["Bienvenidos.", "Te quiero mucho ahora mismo."], ["Bienvenidas.", None]]
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, streams).score)
    assert scores["bleu_signature"].startswith("nrefs:var")


def test_signatures_say_how_it_was_computed():
    scores = translation_scores(HYPS, REFS)
    assert "tok:13a" in scores["bleu_signature"] and "case:mixed" in scores["bleu_signature"]
    assert "nrefs:1" in scores["bleu_signature"]
    assert scores["chrf_signature"].startswith("nrefs:1|case:mixed")


@pytest.mark.parametrize(
    "hyps, refs, message",
    [([], [], "no hypotheses"), (["a"], ["a", "b"], "1 hypotheses but 2 references"),
     ([None], ["a"], "hypothesis 0"), (["a"], [[]], "reference 0")],
)
def test_bad_input_is_a_user_error(hyps, refs, message):
    with pytest.raises(UserError, match=message):
        translation_scores(hyps, refs)


def test_a_lowercasing_run_is_scored_case_insensitively_and_the_signature_says_so():
    hyps = ["the cat is on the mat.", "¿dónde está tom?", "i don't know him at all."]
    lower = translation_scores(hyps, REFS, lowercase=True)
    # sacreBLEU's own scores of the lowercased text, computed apart.
    lowered = [r.lower() for r in REFS]
    assert lower["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [lowered]).score)
    assert lower["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [lowered]).score)
    assert "case:lc" in lower["bleu_signature"] and "case:lc" in lower["chrf_signature"]
    assert lower["lowercase"] is True and lower["exact_match"] == pytest.approx(100 / 3)
    cased = translation_scores(hyps, REFS)
    assert "case:mixed" in cased["bleu_signature"] and "case:mixed" in cased["chrf_signature"]
    assert cased["lowercase"] is False and cased["exact_match"] == 0.0
    assert cased["bleu"] < lower["bleu"]


def test_group_references_keeps_first_order_and_distinct_references():
    from common.metrics.translation import group_references, several_references

    sources = ["a b c d", "e f g h", "a b c d", "e f g h", "i j k l"]
    references = ["A", "E", "B", "E", "I"]
    assert group_references(sources, references) == (
        ["a b c d", "e f g h", "i j k l"], [["A", "B"], ["E"], ["I"]])
    assert several_references(sources, references) == 2  # the two lines of "a b c d"
    with pytest.raises(UserError, match="2 sources but 1 references"):
        group_references(["x", "y"], ["X"])
