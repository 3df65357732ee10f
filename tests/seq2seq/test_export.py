"""`seq2seq export` and translating with the export: same tokens as the in-process model,
stock TensorFlow only, `saved_model_cli`, `.keras` round trips, and one-line errors."""

import io
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from common.errors import UserError
from common.export import savedmodel
from common.text import Vocabulary
from seq2seq.bahdanau import BahdanauTranslator
from seq2seq.cli import main
from seq2seq.config import BahdanauConfig, ModelConfig, RunConfig, TransformerConfig
from seq2seq.encoder_decoder import EncoderDecoderTranslator
from seq2seq.export import KIND, ExportedTranslator, TranslatorModule
from seq2seq.inference import Translator, decode_batch, pad_batch
from seq2seq.transformer import TransformerTranslator
from tests.helpers.isolated import run_signatures_and_saved_model_cli

SENTENCES = ["March 3, 1999", "25th of November 2026", "3/3/1999", "the 7th of July, 2001",
             "Friday 13 June 1980 Zyx"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    # A few hundred steps: enough that translations differ between sentences. No
    # validation: its one epoch's best checkpoint would be its last.
    out = tmp_path_factory.mktemp("runs") / "tiny"
    status = main(["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
                   "--steps-per-epoch", "300", "--hidden-dim", "16", "--intermediate-dim",
                   "32", "--out", str(out), "--verbose", "0", "--validation-examples", "0"])
    assert status == 0
    return out


@pytest.fixture(scope="module")
def export_dir(run_dir):
    out = run_dir.parent / "export"
    assert main(["export", str(run_dir), str(out), "--beam-sizes", "1,2"]) == 0
    return out


@pytest.fixture(scope="module")
def translator(run_dir):
    return Translator.from_run_dir(run_dir)


@pytest.fixture(scope="module")
def exported(export_dir):
    return ExportedTranslator(export_dir)


# What the tests below send each signature of the export, by name: a TensorFlow Serving
# client's request (the text alone), the 2-best of a beam of 2, and the best of a beam of 2.
ISOLATED_CALLS = {
    "text_alone": ("serving_default", {"sentences": SENTENCES}),
    "n_best": ("translate_with_options",
               {"sentences": SENTENCES, "beam_size": 2, "max_length": 16, "n_best": 2,
                "no_repeat_ngram": 0}),
    "beam_2": ("translate_with_options",
               {"sentences": SENTENCES, "beam_size": 2, "max_length": 16, "n_best": 1,
                "no_repeat_ngram": 0}),
}


@pytest.fixture(scope="module")
def isolated(export_dir, tmp_path_factory):
    """`ISOLATED_CALLS` made in one process that imports TensorFlow and NumPy only: name ->
    outputs, and the forbidden modules that process imported; then, in that process,
    TensorFlow's `saved_model_cli` (`show --all`, and `run` of the options signature): what
    each command printed, and the folder `run` wrote to."""
    out = tmp_path_factory.mktemp("saved-model-cli")
    commands = [
        ["show", "--dir", str(export_dir), "--all"],
        ["run", "--dir", str(export_dir), "--tag_set", "serve", "--signature_def",
         "translate_with_options", "--input_exprs",
         'sentences=["March 3, 1999", "3/3/1999"];beam_size=2;max_length=16;n_best=1;'
         'no_repeat_ngram=0',
         "--outdir", str(out)],
    ]
    outputs, imported, printed = run_signatures_and_saved_model_cli(
        export_dir, list(ISOLATED_CALLS.values()), commands)
    return dict(zip(ISOLATED_CALLS, outputs, strict=True)), imported, (printed, out)


@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 2])
def test_export_gives_the_in_process_tokens(translator, exported, beam_size):
    expected = translator.translate(SENTENCES, beam_size=beam_size)
    got = exported.translate(SENTENCES, beam_size=beam_size)
    assert len({e.text for e in expected}) > 1, "the model is degenerate"
    for e, g in zip(expected, got):
        assert g.tokens == e.tokens
        assert g.text == e.text
        assert g.source_tokens == e.source_tokens
        assert g.finished == e.finished and g.copied == e.copied
        assert g.score == pytest.approx(e.score, abs=1e-4)
        np.testing.assert_allclose(g.attention, e.attention, atol=1e-5)


@pytest.mark.slow
def test_serving_default_takes_the_text_alone(translator, isolated):
    # What a TensorFlow Serving client sends: {"instances": ["..."]}, nothing else; the
    # export's default beam (1) and length (the run's 16), in plain TensorFlow.
    expected = translator.translate(SENTENCES)
    outputs, imported = isolated[0]["text_alone"], isolated[1]
    assert imported == []
    assert [t.decode() for t in outputs["translations"]] == [e.text for e in expected]
    for row, e in enumerate(expected):
        n = int(outputs["lengths"][row])
        assert [t.decode() for t in outputs["tokens"][row, :n]] == e.tokens
        assert float(outputs["scores"][row]) == pytest.approx(e.score, abs=1e-4)
    assert outputs["tokens"].shape[1] == 16 and "n_best_translations" not in outputs


@pytest.mark.slow
def test_n_best_output_is_the_in_process_beam(translator, isolated):
    expected = translator.translate(SENTENCES, beam_size=2, n_best=2)
    outputs, imported = isolated[0]["n_best"], isolated[1]
    assert imported == []
    assert outputs["n_best_tokens"].shape == (len(SENTENCES), 2, 16)
    # the reference: the in-process beam search itself, tokens mapped to words by the vocabulary
    source = pad_batch([translator.source_vocab.encode(e.source_tokens) for e in expected])
    vocab = translator.target_vocab
    decoded = decode_batch(translator.model, source, vocab.start_id, vocab.end_id, 16, 2,
                           n_best=2)
    for row, e in enumerate(expected):
        assert len(e.n_best) == 2 and e.n_best[0].tokens == e.tokens
        for k, h in enumerate(e.n_best):
            length = int(outputs["n_best_lengths"][row, k])
            got = [t.decode() for t in outputs["n_best_tokens"][row, k, :length]]
            assert got == h.tokens == vocab.decode(decoded.tokens[row, k].numpy())
            assert outputs["n_best_translations"][row, k].decode() == h.text
            assert outputs["n_best_scores"][row, k] == pytest.approx(h.score, abs=1e-4)
            assert h.score == pytest.approx(float(decoded.scores[row, k]), abs=1e-5)
            assert outputs["n_best_normalized_scores"][row, k] == pytest.approx(
                h.normalized_score, abs=1e-4)
        assert e.n_best[0].normalized_score >= e.n_best[1].normalized_score
        assert outputs["n_best_translations"][row, 0] == outputs["translations"][row]


@pytest.mark.slow
def test_export_runs_on_stock_tensorflow_alone(translator, isolated):
    expected = translator.translate(SENTENCES, beam_size=2)
    outputs, imported = isolated[0]["beam_2"], isolated[1]
    assert imported == []
    assert [t.decode() for t in outputs["translations"]] == [e.text for e in expected]
    assert outputs["tokens"].shape == (len(SENTENCES), 16)
    assert outputs["attention"].shape[:2] == (len(SENTENCES), 16)
    assert outputs["attention"].shape[2] == outputs["source_tokens"].shape[1]
    for row, e in zip(outputs["tokens"], expected):
        assert [t.decode() for t in row if t] == e.tokens
        assert all(t == b"" for t in row[len(e.tokens):])


@pytest.mark.slow
def test_saved_model_cli_shows_and_runs_the_signature(translator, isolated):
    (shown, printed), out = isolated[2]
    assert "signature_def['serving_default']" in shown
    assert "signature_def['translate_with_options']" in shown
    assert "name: serving_default_sentences:0" in shown and "DT_STRING" in shown
    assert "translations" in printed or (out / "translations.npy").exists()
    got = np.load(out / "translations.npy", allow_pickle=True)
    expected = translator.translate(["March 3, 1999", "3/3/1999"], beam_size=2)
    assert [t.decode() for t in got] == [e.text for e in expected]


@pytest.mark.slow
def test_export_info_and_defaults(export_dir, run_dir):
    info = savedmodel.require_kind(export_dir, KIND, "a translator")
    assert info["beam_sizes"] == [1, 2] and info["default_beam_size"] == 1
    assert info["max_decode_length"] == 16 and info["max_source_tokens"] == 32
    assert info["options_signature"] == "translate_with_options"
    defaults = json.loads((export_dir / "assets.extra" / "serving_input_defaults.json").read_text())
    assert defaults == {"beam_size": 1, "max_length": 16, "n_best": 1, "no_repeat_ngram": 0}
    # exporting onto an existing directory is refused unless --overwrite
    assert main(["export", str(run_dir), str(export_dir)]) == 2


@pytest.mark.slow
def test_signature_refuses_bad_input(exported):
    fn = exported.loaded.signatures["translate_with_options"]  # tf.saved_model.load's

    def call(sentences, beam=1, length=16, n_best=1):
        return fn(sentences=tf.constant(sentences), beam_size=tf.constant(beam),
                  max_length=tf.constant(length), n_best=tf.constant(n_best),
                  no_repeat_ngram=tf.constant(0))

    with pytest.raises(tf.errors.InvalidArgumentError, match="beam_size must be one of"):
        call(["March 3, 1999"], beam=3)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"n_best must be 1..beam_size"):
        call(["March 3, 1999"], beam=1, n_best=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="empty sentence"):
        call(["March 3, 1999", "  "])
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than 32 tokens"):
        call([" ".join(["1"] * 40)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_length must be"):
        call(["March 3, 1999"], length=33)
    assert call(["March 3, 1999"], length=4)["tokens"].shape == (1, 4)


@pytest.mark.slow
def test_translate_cli_with_a_savedmodel_reports_bad_lines(export_dir, monkeypatch, capsys):
    lines = ["March 3, 1999", "   ", "25th of November 2026 🎉 \x07 zzz",
             " ".join(["1"] * 200), ""]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    assert main(["translate", str(export_dir), "--json", "--beam-size", "2"]) == 2
    captured = capsys.readouterr()
    records = [json.loads(line) for line in captured.out.splitlines()]
    assert [r["line"] for r in records] == [1, 2, 3, 4, 5]
    assert "error" not in records[0] and "error" not in records[2]
    assert records[0]["tokens"] and records[2]["tokens"]
    assert "empty" in records[1]["error"] and "empty" in records[4]["error"]
    assert "at most" in records[3]["error"]
    errors = [line for line in captured.err.splitlines() if "warning" not in line]
    assert len(errors) == 3 and all(e.startswith("seq2seq translate: line ") for e in errors)


@pytest.mark.slow
def test_translate_cli_same_text_from_run_and_export(run_dir, export_dir, capsys):
    assert main(["translate", str(run_dir), *SENTENCES[:3]]) == 0
    from_run = capsys.readouterr().out
    assert main(["translate", str(export_dir), *SENTENCES[:3]]) == 0
    assert capsys.readouterr().out == from_run
    assert main(["translate", str(export_dir), "x", "--beam-size", "5"]) == 2
    assert "--beam-size 5: this export has beam sizes 1, 2" in capsys.readouterr().err


@pytest.mark.slow
def test_translate_cli_n_best_lists_the_beam(translator, run_dir, export_dir, capsys):
    expected = translator.translate(SENTENCES[:3], beam_size=2, n_best=2)
    printed = {}
    for name, model in (("run", run_dir), ("export", export_dir)):
        argv = ["translate", str(model), *SENTENCES[:3], "--beam-size", "2", "--n-best", "2"]
        assert main(argv) == 0
        printed[name] = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
        assert main([*argv, "--json"]) == 0
        records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        for record, e in zip(records, expected):
            assert [h["translation"] for h in record["n_best"]] == [h.text for h in e.n_best]
            assert record["n_best"][0]["translation"] == record["translation"]
            assert set(record["n_best"][0]) == {"translation", "tokens", "score",
                                                "normalized_score", "finished"}
    assert [line[:2] for line in printed["run"]] == [[str(i), r] for i in (1, 2, 3)
                                                     for r in "12"]
    assert [line[4] for line in printed["run"]] == [h.text for e in expected for h in e.n_best]
    for ours, theirs in zip(printed["run"], printed["export"]):
        assert ours[:2] + ours[4:] == theirs[:2] + theirs[4:]
        assert float(ours[2]) == pytest.approx(float(theirs[2]), abs=2e-4)
    # Told before the model loads, with what would do: a wider beam for the run, fewer
    # hypotheses or another export for an export of beam sizes 1 and 2.
    for model, fix in ((run_dir, " (got 2): add --beam-size 3"),
                       (export_dir, "; this export has beam sizes 1, 2: ask for --n-best 2")):
        assert main(["translate", str(model), "x", "--beam-size", "2", "--n-best", "3"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert f"--n-best 3 needs a beam of at least 3{fix}" in err, err


def _other_savedmodel(path, kind):
    module = tf.Module()
    module.f = tf.function(lambda x: {"y": x}, input_signature=[tf.TensorSpec([None], tf.string)])
    savedmodel.save(module, path, {"serving_default": module.f.get_concrete_function()}, kind)
    return path


@pytest.mark.parametrize("command", ["translate", "serve"])
def test_a_captioner_savedmodel_is_a_one_line_error(tmp_path, capsys, command):
    path = _other_savedmodel(tmp_path / "cap", "captioner")
    extra = ["hello"] if command == "translate" else []
    assert main([command, str(path), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "'captioner'" in err and "expected an exported translator" in err


def test_a_directory_that_is_neither_is_a_one_line_error(tmp_path, capsys):
    assert main(["translate", str(tmp_path), "hello"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "not a translator run directory" in err and "translator SavedModel" in err


def test_exported_translator_refuses_other_kinds(tmp_path):
    with pytest.raises(UserError, match="not a SavedModel directory"):
        ExportedTranslator(tmp_path)


# -- in-graph rare-word copying against a NumPy reference -------------------------------------


def test_unknown_words_are_copied_from_the_most_attended_source_token():
    # An untrained model whose output bias favours <unk>: every step is a copy.
    source_vocab = Vocabulary.build([["a", "b", "c", "d", "e"]])
    target_vocab = Vocabulary.build([["x", "y"]])
    keras.utils.set_random_seed(3)
    model = BahdanauTranslator(BahdanauConfig(embedding_dim=8, units=8, attention_units=8),
                               len(source_vocab), len(target_vocab))
    model({"source": np.ones((1, 2), np.int32), "target_in": np.ones((1, 2), np.int32)})
    for weight in model.weights:  # sharper, more varied attention
        weight.assign(weight * 4.0)
    bias = np.zeros(len(target_vocab), np.float32)
    bias[target_vocab.unk_id] = 50.0
    model.output_projection.bias.assign(bias)
    config = RunConfig()
    translator = Translator(model, source_vocab, target_vocab, config)
    module = TranslatorModule.from_translator(translator, beam_sizes=(1,), max_decode_length=8)
    sentences = ["a b zz c", "Qq d e e a", "b"]
    out = module.translate_with_options(tf.constant(sentences), tf.constant(1), tf.constant(8),
                                        tf.constant(1), tf.constant(0))
    expected = translator.translate(sentences, max_length=8)
    assert all(len(e.copied) == 8 for e in expected)
    assert len({token for e in expected for token in e.tokens}) >= 3  # not always position 0
    for row, e in enumerate(expected):
        n = int(out["lengths"][row])
        assert [t.decode() for t in out["tokens"][row, :n].numpy()] == e.tokens
        assert np.flatnonzero(out["copied"][row].numpy()).tolist() == e.copied
        # the NumPy rule: each copied position holds the source token of largest attention
        attention = out["attention"][row].numpy()
        source = [t.decode() for t in out["source_tokens"][row].numpy()]
        for t in e.copied:
            assert e.tokens[t] == source[int(np.argmax(attention[t]))]


# -- .keras round trips with safe_mode on -----------------------------------------------------


@pytest.mark.parametrize("arch", ["transformer", "bahdanau", "seq2seq-noattn",
                                  "bahdanau-local-copy", "transformer-copy"])
def test_keras_file_round_trip_in_safe_mode(tmp_path, arch):
    if arch.startswith("transformer"):
        sizes = TransformerConfig(num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16,
                                  max_length=16, tie_embeddings=True)
        model = TransformerTranslator(ModelConfig(transformer=sizes, label_smoothing=0.1,
                                                  copy=arch.endswith("copy")), 11, 9)
    elif arch == "seq2seq-noattn":
        model = EncoderDecoderTranslator(BahdanauConfig(embedding_dim=8, units=8, cell="lstm"),
                                         11, 9)
    else:
        local = {"local": "predictive", "attention_window": 1} if arch.endswith("copy") else {}
        sizes = BahdanauConfig(embedding_dim=8, units=8, cell="lstm", score="general",
                               attention_units=8, input_feeding=True, **local)
        model = BahdanauTranslator(ModelConfig(bahdanau=sizes, copy=arch.endswith("copy")),
                                   11, 9)
    inputs = {"source": np.array([[4, 5, 6, 0], [7, 8, 0, 0]], np.int32),
              "target_in": np.array([[1, 4, 5], [1, 6, 0]], np.int32)}
    logits = np.asarray(model(inputs))
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras", safe_mode=True)
    assert type(loaded) is type(model)
    assert loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(np.asarray(loaded(inputs)), logits)


@pytest.mark.parametrize("arch", ["seq2seq-noattn", "bahdanau-copy"])
def test_n_best_outputs_of_the_module_match_the_translator(arch):
    # Untrained models, so that the beam's hypotheses differ; a model without attention
    # (empty attention through the beam-size `tf.cond`s) and a pointer-generator (extended ids).
    source_vocab = Vocabulary.build([["a", "b", "c", "d", "e"]])
    target_vocab = Vocabulary.build([["x", "y", "z", "w", "a"]])
    keras.utils.set_random_seed(5)
    if arch == "seq2seq-noattn":
        model = EncoderDecoderTranslator(BahdanauConfig(embedding_dim=8, units=8),
                                         len(source_vocab), len(target_vocab))
    else:
        sizes = BahdanauConfig(embedding_dim=8, units=8, attention_units=8)
        model = BahdanauTranslator(ModelConfig(bahdanau=sizes, copy=True), len(source_vocab),
                                   len(target_vocab))
    inputs = {"source": np.ones((1, 2), np.int32), "target_in": np.ones((1, 2), np.int32)}
    if arch == "bahdanau-copy":
        inputs["source_copy"] = np.ones((1, 2), np.int32)
    model(inputs)
    for weight in model.weights:  # larger weights: varied, confident hypotheses
        weight.assign(weight * 3.0)
    translator = Translator(model, source_vocab, target_vocab, RunConfig())
    module = TranslatorModule.from_translator(translator, beam_sizes=(1, 3), max_decode_length=6)
    sentences = ["a b zz c", "Qq d e e a", "b"]
    expected = translator.translate(sentences, beam_size=3, max_length=6, n_best=3)
    out = module.translate_with_options(tf.constant(sentences), tf.constant(3), tf.constant(6),
                                        tf.constant(3), tf.constant(0))
    for row, e in enumerate(expected):
        assert len(e.n_best) == 3
        if arch == "seq2seq-noattn":  # (a pointer-generator may point at what it could write)
            assert len({tuple(h.tokens) for h in e.n_best}) == 3
        for k, h in enumerate(e.n_best):
            n = int(out["n_best_lengths"][row, k])
            assert [t.decode() for t in out["n_best_tokens"][row, k, :n].numpy()] == h.tokens
            assert float(out["n_best_scores"][row, k]) == pytest.approx(h.score, abs=1e-5)
    one = module.translate_with_options(tf.constant(sentences), tf.constant(3), tf.constant(6),
                                        tf.constant(1), tf.constant(0))
    assert one["n_best_tokens"].shape[1] == 1
    np.testing.assert_array_equal(one["tokens"].numpy(), out["tokens"].numpy())


@pytest.mark.slow
def test_serving_benchmark_compares_the_same_translations(run_dir, export_dir, translator,
                                                          tmp_path):
    from tests.helpers.benchmarks import check_serving_report, load_script

    out = tmp_path / "serving.json"
    status = load_script("benchmark_serving").main([
        str(run_dir), "--export", str(export_dir), "--sentence", SENTENCES[1],
        "--beam-sizes", "1,2", "--quick", "--out", str(out)])
    assert status == 0
    report = json.loads(out.read_text())
    assert report["family"] == "translator" and report["sentence"] == SENTENCES[1]
    check_serving_report(report, [1, 2])
    for row in report["results"]:  # the run directory's own translation
        expected = translator.translate([SENTENCES[1]], beam_size=row["beam_size"])[0]
        assert (row["text"], row["words"]) == (expected.text, expected.tokens)
