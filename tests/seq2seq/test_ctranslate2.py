"""`seq2seq export --format ctranslate2`: the Keras weights mapped exactly (teacher-forced
log-probabilities of every layout), the in-process model's tokens (greedy decoding; beam search
within the one rule CTranslate2's search differs by), `translate`, `evaluate` and `serve` on the
directory, and the one-line refusals.

The `ctranslate2` package is a test dependency (the `dev` extra, which `scripts/test.sh`
installs), so nothing here is skipped when it is missing: the suite fails instead.
"""

import json
import shutil
import socket
import sys
import urllib.error
import urllib.request

import keras
import numpy as np
import pytest

from common.config import from_dict, load_json
from common.export import ctranslate2 as ct2
from common.text import Vocabulary, tokenize_texts
from seq2seq.cli import main
from seq2seq.config import RunConfig
from seq2seq.ctranslate2_export import export_translator
from seq2seq.ctranslate2_translator import CTranslate2Translator, _gnmt
from seq2seq.datasets import load_pairs
from seq2seq.evaluate import score_translations
from seq2seq.export import N_BEST_OUTPUTS, OUTPUTS
from seq2seq.inference import Translator
from seq2seq.presets import get_preset
from seq2seq.transformer import TransformerTranslator

# The module trains a model (its fixture) and exports several: the whole file is slow (as
# tests/conftest.py would mark it from tests/durations.json), and still runs in CI.
pytestmark = pytest.mark.slow

SPECIALS = ["<pad>", "<start>", "<end>", "<unk>"]


@pytest.fixture(scope="module")
def run_dir(dates_transformer):
    # tests/seq2seq/conftest.py's: a few hundred steps, so beams end where the model is sure.
    return dates_transformer


@pytest.fixture(scope="module")
def exported(run_dir):
    out = run_dir.parent / "dates-ct2"
    assert main(["export", str(run_dir), str(out), "--format", "ctranslate2",
                 "--quantization", "float32", "--beam-sizes", "1,2,4"]) == 0
    return out


@pytest.fixture(scope="module")
def translator(run_dir):
    return Translator.from_run_dir(run_dir)


@pytest.fixture(scope="module")
def engine(exported):
    return CTranslate2Translator(exported)


@pytest.fixture(scope="module")
def held_out():
    """The first 64 held-out dates (`evaluate --dataset dates --limit 64`'s): one batch, so
    one in-process search is traced per decoding choice."""
    return load_pairs("dates", split="test", seed=0, size=64)


def _teacher_forced_gap(model, out, source_tokens, target_tokens, seed=0):
    """The largest gap between CTranslate2's log-probabilities of random target sentences
    (`score_batch`, `<end>` included) and the Keras model's own (a full pass)."""
    rng = np.random.default_rng(seed)
    sources = [rng.integers(4, len(source_tokens), n) for n in (7, 2, 11)]
    targets = [rng.integers(4, len(target_tokens), n) for n in (5, 9, 1)]
    results = ct2.load_translator(out).score_batch(
        [[source_tokens[i] for i in s] for s in sources],
        [[target_tokens[i] for i in t] for t in targets])
    gap = 0.0
    for source, target, result in zip(sources, targets, results, strict=True):
        logits = model({"source": source[None].astype(np.int32),
                        "target_in": np.concatenate([[1], target])[None].astype(np.int32)})
        log_probs = np.asarray(keras.ops.log_softmax(logits, axis=-1))[0]
        expected = log_probs[np.arange(len(target) + 1), np.concatenate([target, [2]])]
        gap = max(gap, float(np.max(np.abs(expected - np.array(result.log_probs)))))
    return gap


def test_other_layout_maps_exactly_and_copies_unknown_words(tmp_path):
    # The dates run is pre-norm with sine positions and an output matrix of its own; the
    # spa-eng-size model ties its output to the target embedding, the subword one all three
    # matrices. This one is post-norm, with learned positions and heads wider than D / H, and
    # <unk> made to win where its most frequent output would, so that outputs copy words.
    config = from_dict(RunConfig, {"model": {
        "arch": "transformer", "max_decode_length": 10, "transformer": {
            "num_layers": 2, "hidden_dim": 16, "num_heads": 4, "intermediate_dim": 24,
            "dropout": 0.0, "max_length": 24, "norm_first": False, "positions": "learned",
            "head_dim": 6}}})
    keras.utils.set_random_seed(3)
    model = TransformerTranslator(config.model, 23, 30)
    model.build()
    source = Vocabulary(SPECIALS + [f"s{i}" for i in range(23 - 4)])
    target = Vocabulary(SPECIALS + [f"t{i}" for i in range(30 - 4)])
    reference = Translator(model, source, target, config)
    rng = np.random.default_rng(0)
    sentences = [" ".join(source.tokens[i] for i in rng.integers(4, 23, n)) + " zzz"
                 for n in (3, 6, 9, 12)]
    words = [w for t in reference.translate(sentences) for w in t.tokens]
    favourite = target.encode([max(set(words), key=words.count)])[0]
    output = keras.ops.convert_to_numpy(model.target_embedding.reverse_embeddings)
    output[:, 3] = 2 * output[:, favourite]
    model.target_embedding.reverse_embeddings.assign(output)
    out = export_translator(reference, tmp_path / "ct2", beam_sizes=(1,))
    assert _teacher_forced_gap(model, out, source.tokens, target.tokens) < 1e-5
    expected = reference.translate(sentences)
    got = CTranslate2Translator(out).translate(sentences)
    assert sum(len(e.copied) for e in expected) >= 4, "no <unk> to copy"
    assert [(g.tokens, g.copied, g.text) for g in got] == [
        (e.tokens, e.copied, e.text) for e in expected]


def test_greedy_decoding_gives_the_in_process_tokens(translator, engine, held_out):
    expected = translator.translate(held_out.sources)
    got = engine.translate(held_out.sources)
    assert len({e.text for e in expected}) > 10, "the model is degenerate"
    for e, g in zip(expected, got, strict=True):
        assert g.tokens == e.tokens and g.text == e.text
        assert g.source_tokens == e.source_tokens
        assert g.finished == e.finished and g.copied == e.copied
        np.testing.assert_allclose(g.attention, e.attention, atol=1e-5)
        # CTranslate2 renormalizes each step without <pad> and <start>: a little higher.
        assert 0 <= g.score - e.score < 0.05


@pytest.mark.parametrize("beam_size, length_penalty, at_least", [
    (4, None, 60),  # the run's 0.6: 99 of 100 when measured
    (2, 0.0, 48),  # no length penalty: short hypotheses ended off the K best win more (89%)
])
def test_beam_search_finds_no_better_and_mostly_the_same(translator, engine, held_out,
                                                         beam_size, length_penalty, at_least):
    # Both keep the K best candidates that do not end alive; CTranslate2 finishes only the
    # hypotheses whose <end> is among a step's K best candidates (common.decoding.beam: the 2K
    # best) and stops once its best has ended. So it finds a subset: its answer is never
    # better by the ranking both use (but for its renormalized scores, a little higher), and
    # the same where it found the in-process one.
    options = {"beam_size": beam_size, "n_best": 1, "length_penalty": length_penalty}
    expected = translator.translate(held_out.sources, **options)
    got = engine.translate(held_out.sources, **options)
    same = 0
    for e, g in zip(expected, got, strict=True):
        assert g.n_best[0].tokens == g.tokens
        assert e.n_best[0].normalized_score >= g.n_best[0].normalized_score - 0.05
        same += g.tokens == e.tokens
    assert same >= at_least


def test_n_best_is_ranked_by_the_gnmt_penalty(engine, held_out):
    alpha = engine.length_penalty
    for result in engine.translate(held_out.sources[:20], beam_size=4, n_best=4):
        hypotheses = result.n_best
        assert hypotheses[0].tokens == result.tokens and len(hypotheses) == 4
        finished = [h.finished for h in hypotheses]
        assert finished == sorted(finished, reverse=True)
        for h in hypotheses:
            length = len(h.tokens) + h.finished  # <end> counts
            assert h.normalized_score == pytest.approx(h.score / _gnmt(length, alpha), abs=1e-5)
        ranked = [h.normalized_score for h in hypotheses if h.finished]
        assert ranked == sorted(ranked, reverse=True)


def test_spa_eng_size_model_gives_the_in_process_tokens(shared_data, tmp_path):
    """Random weights at the spa-eng-cpu preset's sizes (3 + 3 layers, width 192, 12,000
    tokens a side, the words of test.tsv among them): no sentence ends, so beam search runs
    by the rule both searches share."""
    lines = (shared_data / "spa-eng" / "test.tsv").read_text(encoding="utf-8").splitlines()
    sources = [line.split("\t")[0] for line in lines[:200]]
    targets = [line.split("\t")[1] for line in lines[:200]]

    def vocabulary(texts):
        words = Vocabulary.build(tokenize_texts(texts)).tokens
        return Vocabulary(words + [f"w{i}" for i in range(12_000 - len(words))])

    source_vocab, target_vocab = vocabulary(sources), vocabulary(targets)
    preset = get_preset("spa-eng-cpu").for_arch("transformer")["model"]
    config = from_dict(RunConfig, {"model": {**preset, "arch": "transformer"}})
    keras.utils.set_random_seed(0)
    model = TransformerTranslator(config.model, len(source_vocab), len(target_vocab))
    model.build()
    reference = Translator(model, source_vocab, target_vocab, config)
    out = export_translator(reference, tmp_path / "spa", beam_sizes=(1, 4))
    assert _teacher_forced_gap(model, out, source_vocab.tokens, target_vocab.tokens) < 1e-4
    engine = CTranslate2Translator(out)
    for beam_size in (1, 4):
        expected = reference.translate(sources[:16], beam_size=beam_size, max_length=16)
        got = engine.translate(sources[:16], beam_size=beam_size, max_length=16)
        assert [g.tokens for g in got] == [e.tokens for e in expected]


def test_subword_export_reads_and_writes_text_as_in_process(shared_data, tmp_path):
    """One SentencePiece model for both sides, one matrix for both embeddings and the output
    (random weights): pieces in and text out through the model kept beside the export."""
    from common.text.subwords import SubwordVocabulary, train_sentencepiece
    from seq2seq.vocabularies import Vocabularies

    lines = (shared_data / "spa-eng" / "test.tsv").read_text(encoding="utf-8").splitlines()
    texts = [part for line in lines[:300] for part in line.split("\t")]
    subwords = SubwordVocabulary(train_sentencepiece(texts, 300))
    vocabs = Vocabularies.of_subwords(subwords, subwords)
    config = from_dict(RunConfig, {
        "data": {"vocab": "sentencepiece", "vocab_size": 300, "shared_vocab": True},
        "model": {"arch": "transformer", "max_decode_length": 12, "transformer": {
            "num_layers": 1, "hidden_dim": 16, "num_heads": 2, "intermediate_dim": 32,
            "dropout": 0.0, "max_length": 32, "tie_embeddings": True}}})
    keras.utils.set_random_seed(1)
    model = TransformerTranslator(config.model, 300, 300, shared_vocab=True)
    model.build()
    reference = Translator(model, vocabs.source, vocabs.target, config, subwords, subwords)
    out = export_translator(reference, tmp_path / "subwords", beam_sizes=(1,))
    # One vocabulary file and one weight (CTranslate2 aliases equal variables) for all three.
    assert {"vocab.model", "shared_vocabulary.json"} <= {p.name for p in out.iterdir()}
    assert _teacher_forced_gap(model, out, vocabs.source.tokens, vocabs.target.tokens) < 1e-5
    sentences = texts[:16:2]
    expected = reference.translate(sentences)
    got = CTranslate2Translator(out).translate(sentences)
    assert [(g.source_tokens, g.tokens, g.text) for g in got] == [
        (e.source_tokens, e.tokens, e.text) for e in expected]


# -- the command lines ------------------------------------------------------------------------


def test_translate_and_evaluate_take_the_directory(exported, translator, engine, held_out,
                                                   capsys, tmp_path):
    sentences = ["25th of November 2026", "Nov 3, 1999"]
    assert main(["translate", str(exported), *sentences, "--beam-size", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [t.text for t in engine.translate(sentences, beam_size=2)]
    path = tmp_path / "scores.json"
    assert main(["evaluate", str(exported), "--dataset", "dates", "--limit", "64",
                 "--json", str(path)]) == 0
    capsys.readouterr()
    scores = load_json(path)
    # The run directory's scores: its greedy translations (the same, tested above) scored.
    hypotheses = [t.text for t in translator.translate(held_out.sources)]
    expected = score_translations(hypotheses, list(held_out.targets))
    for key in ("bleu", "chrf", "exact_match"):
        assert scores[key] == pytest.approx(expected[key]), key
    assert scores["checkpoint"] == translator.checkpoint and scores["sentences"] == 64
    assert (scores["format"], scores["quantization"]) == ("ctranslate2", "float32")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _post(url, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_serve_answers_as_for_a_savedmodel(exported, engine, monkeypatch):
    import common.serving.app as app_module

    started = {}
    monkeypatch.setattr(app_module, "serve",
                        lambda path, name, **options: started.update(options, name=name))
    assert main(["serve", str(exported), "--model-name", "dates",
                 "--port", str(_free_port())]) == 0
    versions = started.pop("versions")
    app = app_module.create_app(exported, started["name"], versions=versions)
    sentences = ["March 3, 1999", "25th of November 2026", "3/3/1999"]
    greedy = engine.translate(sentences)
    beam = engine.translate(sentences, beam_size=2, n_best=2)
    with app_module.serve_in_background(app) as url:
        base = f"{url}/v1/models/dates"
        status, body = _post(f"{base}:predict", {"instances": sentences})
        assert status == 200
        assert set(body["predictions"][0]) == set(OUTPUTS)
        assert [p["translations"] for p in body["predictions"]] == [t.text for t in greedy]
        status, body = _post(f"{base}:predict", {
            "signature_name": "translate_with_options",
            "inputs": {"sentences": sentences, "beam_size": 2, "n_best": 2}})
        assert status == 200 and set(body["outputs"]) == set(OUTPUTS) | set(N_BEST_OUTPUTS)
        assert body["outputs"]["n_best_translations"] == [[h.text for h in t.n_best]
                                                          for t in beam]
        refused = [({"instances": ["March 3, 1999", "   "]}, "instance 1 of 'instances': "
                    "empty sentence"),
                   ({"signature_name": "translate_with_options",
                     "inputs": {"sentences": sentences, "beam_size": 3}}, "beam_size must be "
                    "one of [1, 2, 4]")]
        for request, message in refused:
            status, body = _post(f"{base}:predict", request)
            assert status == 400 and body["error"].startswith(message), body
        with urllib.request.urlopen(f"{base}/metadata", timeout=60) as response:
            signatures = json.loads(response.read())["metadata"]["signature_def"]
        assert set(signatures["signature_def"]) == {"serving_default",
                                                    "translate_with_options"}


def test_int8_export_is_smaller_and_translates(run_dir, exported, translator, held_out,
                                               tmp_path):
    out = tmp_path / "int8"
    assert main(["export", str(run_dir), str(out), "--format", "ctranslate2",
                 "--quantization", "int8"]) == 0
    assert load_json(out / ct2.INFO_FILE)["quantization"] == "int8"
    assert (out / "model.bin").stat().st_size < 0.6 * (exported / "model.bin").stat().st_size
    got = CTranslate2Translator(out).translate(held_out.sources)
    expected = translator.translate(held_out.sources)
    # CTranslate2 quantizes the activations too and picks its int8 kernels by the CPU's
    # instruction set (VNNI, AVX2, ...), so which near ties it breaks the other way is the
    # CPU's; the model is sure of every one of these dates (all 64 exact in float32), and
    # int8 keeps at least 60 exact on every instruction set tried (63 with AVX2 and GENERIC,
    # docs/fast_serving.md): a broken quantization loses most of them.
    exact = sum(e.text == t for e, t in zip(expected, held_out.targets, strict=True))
    assert exact == len(held_out.targets)
    assert sum(g.text == t for g, t in zip(got, held_out.targets, strict=True)) >= exact - 4


# -- refusals ---------------------------------------------------------------------------------


def _refused(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def _edited_run(run_dir, tmp_path, **model):
    """A copy of the run's config.json (no weights: refused before they are read)."""
    out = tmp_path / "edited"
    out.mkdir()
    config = load_json(run_dir / "config.json")
    config["model"].update(model)
    (out / "config.json").write_text(json.dumps(config))
    for name in ("vocab.source.txt", "vocab.target.txt"):
        shutil.copy(run_dir / name, out / name)
    return out


@pytest.mark.parametrize("model, message", [
    ({"arch": "bahdanau"}, "a bahdanau translator; CTranslate2 runs Transformer translators"),
    ({"copy": True}, "a pointer-generator (--copy)"),
])
def test_layouts_ctranslate2_cannot_run_are_refused(run_dir, tmp_path, capsys, model, message):
    run = _edited_run(run_dir, tmp_path, **model)
    _refused(capsys, ["export", str(run), str(tmp_path / "out"), "--format", "ctranslate2"],
             message)
    assert not (tmp_path / "out").exists()


def test_export_refusals(run_dir, exported, tmp_path, capsys, monkeypatch):
    out = str(tmp_path / "out")
    _refused(capsys, ["export", str(run_dir), out, "--format", "ctranslate2",
                      "--attention-head", "1"], "CTranslate2 returns the average of a layer's "
             "first N heads")
    _refused(capsys, ["export", str(run_dir), out, "--quantization", "int16"],
             "--quantization int16: a SavedModel takes float32 or int8 (int16: add --format "
             "ctranslate2)")
    _refused(capsys, ["export", str(run_dir), str(exported), "--format", "ctranslate2"],
             "already exists")
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # as if not installed
    _refused(capsys, ["export", str(run_dir), out, "--format", "ctranslate2"],
             "needs the ctranslate2 package; install it (pip install -e .[ctranslate2])")
    assert not (tmp_path / "out").exists()


def test_options_an_export_chose_are_refused(exported, tmp_path, capsys):
    _refused(capsys, ["translate", str(exported), "x", "--checkpoint", "last"],
             "--checkpoint: a CTranslate2 export holds the weights chosen at export time")
    _refused(capsys, ["translate", str(exported), "x", "--attention-layer", "0"],
             "a CTranslate2 export returns the attention chosen at export time")
    _refused(capsys, ["translate", str(exported), "x", "--plot", str(tmp_path / "a.png"),
                      "--all-heads"], "--all-heads: a CTranslate2 export returns the attention")
    _refused(capsys, ["evaluate", str(exported), "--dataset", "dates", "--attention-head", "0"],
             "a CTranslate2 export returns the attention chosen at export time")
    _refused(capsys, ["translate", str(exported), "x", "--beam-size", "3"],
             "--beam-size 3: this export has beam sizes 1, 2, 4")
    foreign = tmp_path / "foreign"
    shutil.copytree(exported, foreign)
    (foreign / ct2.INFO_FILE).unlink()
    _refused(capsys, ["serve", str(foreign), "--port", str(_free_port())],
             "a CTranslate2 model without this package's export_info.json")
