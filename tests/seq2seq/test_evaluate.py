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
