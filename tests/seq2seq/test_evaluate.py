"""`seq2seq evaluate` scores a run that lowercases its text case-insensitively (sacreBLEU's
`lowercase=True`, `case:lc` in the signatures) and a cased run as the references stand."""

import dataclasses
import json

import pytest
import sacrebleu

from seq2seq.config import DataConfig, RunConfig
from seq2seq.evaluate import evaluate
from seq2seq.inference import Translation, Translator

PAIRS = [("Tom is here.", "Tom está aquí."), ("I like Madrid.", "Me gusta Madrid."),
         ("Where is Mary?", "¿Dónde está Mary?"), ("It is cold.", "Hace frío.")]
# What a model trained on lowercased text writes: right but for the capitals, one word wrong.
OUTPUTS = {"Tom is here.": "tom está aquí.", "I like Madrid.": "me gusta madrid.",
           "Where is Mary?": "¿dónde está mary?", "It is cold.": "hace calor."}


@dataclasses.dataclass
class FakeTranslator:
    """Stands in for a loaded run: its config, and translations looked up in OUTPUTS."""

    config: RunConfig
    checkpoint: str = "runs/fake/checkpoints/ckpt-1"

    def translate(self, sources, **kwargs):
        return [Translation(source=s, text=OUTPUTS[s]) for s in sources]


@pytest.fixture
def pairs_file(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS), encoding="utf-8")
    return path


@pytest.mark.parametrize("lowercase", [True, False], ids=["lowercased-run", "cased-run"])
def test_a_lowercasing_run_is_scored_against_lowercased_references(
        monkeypatch, tmp_path, pairs_file, lowercase):
    config = RunConfig(data=DataConfig(dataset="tsv", data=str(pairs_file), lowercase=lowercase))
    monkeypatch.setattr(Translator, "from_run_dir",
                        classmethod(lambda cls, run_dir, checkpoint=None: FakeTranslator(config)))
    out = tmp_path / "scores.json"
    scores = evaluate("run", data=str(pairs_file), progress=False, json_path=out)

    hypotheses = [OUTPUTS[s] for s, _ in PAIRS]
    references = [t.lower() if lowercase else t for _, t in PAIRS]
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score)
    case = "case:lc" if lowercase else "case:mixed"
    assert case in scores["bleu_signature"] and case in scores["chrf_signature"]
    assert scores["exact_match"] == (75.0 if lowercase else 0.0)
    assert json.loads(out.read_text())["lowercase"] is lowercase


# A source translated two ways on separate lines, as in Tatoeba's test split; and a source
# given twice with the same reference (grouped: one reference).
HI, RUN = "Hi, how are you today?", "Run to the station now!"
SEVERAL = [(HI, "Hola, ¿cómo estás hoy?"), (RUN, "¡Corre a la estación ahora!"),
           (HI, "Buenas, ¿qué tal estás hoy?"), (RUN, "¡Corre a la estación ahora!")]
PERFECT = {HI: "Buenas, ¿qué tal estás hoy?", RUN: "¡Corre a la estación ahora!"}


@pytest.mark.parametrize("mode", ["line", "grouped"])
def test_references_line_by_line_or_grouped_by_source(monkeypatch, tmp_path, mode):
    """Line by line, a right translation of HI matches one of its two lines only (so even a
    perfect system scores below 100); grouped, HI is translated once and scored against
    both references. Both agree with sacreBLEU called directly."""
    path = tmp_path / "several.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in SEVERAL), encoding="utf-8")
    translated = []

    class Perfect(FakeTranslator):
        def translate(self, sources, **kwargs):
            translated.append(list(sources))
            return [Translation(source=s, text=PERFECT[s]) for s in sources]

    config = RunConfig(data=DataConfig(dataset="tsv", data=str(path)))
    monkeypatch.setattr(Translator, "from_run_dir",
                        classmethod(lambda cls, run_dir, checkpoint=None: Perfect(config)))
    scores = evaluate("run", data=str(path), progress=False, references=mode)
    assert scores["references"] == mode and scores["lines_with_several_references"] == 2
    if mode == "line":
        assert translated == [[HI, RUN, HI, RUN]]
        hypotheses = [PERFECT[s] for s, _ in SEVERAL]
        expected = sacrebleu.corpus_bleu(hypotheses, [[t for _, t in SEVERAL]]).score
        assert scores["exact_match"] == 75.0 and scores["bleu"] < 100
    else:
        assert translated == [[HI, RUN]]  # each source once
        expected = sacrebleu.corpus_bleu([PERFECT[HI], PERFECT[RUN]],
                                         [[SEVERAL[0][1], SEVERAL[1][1]],
                                          [SEVERAL[2][1], None]]).score
        assert scores["exact_match"] == 100.0 and scores["bleu"] == pytest.approx(100.0)
    assert scores["bleu"] == pytest.approx(expected)
    assert scores["sentences"] == len(translated[0])


def test_an_unknown_reference_mode_is_refused(tmp_path, pairs_file):
    from common.errors import UserError

    with pytest.raises(UserError, match="expected one of: line, grouped"):
        evaluate("run", data=str(pairs_file), progress=False, references="all")
