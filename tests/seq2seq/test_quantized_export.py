"""`seq2seq export --quantization int8`: Keras's int8 weights in the SavedModel, read back by
plain TensorFlow, the tokens of the in-process model quantized the same way (greedy and beam),
a smaller export, the decoding step's float values of the int8 weights, and one-line refusals.
"""

import json
import os
import re
import shutil
from collections import Counter
from pathlib import Path

import keras
import numpy as np
import pytest

from common.config import from_dict, load_json
from common.errors import UserError
from common.export import savedmodel
from common.export.quantization import quantize_model, summary
from common.layers.quantized_weights import (
    float_embeddings,
    float_kernel,
    float_reverse_embeddings,
)
from seq2seq.cli import main
from seq2seq.config import RunConfig
from seq2seq.datasets import load_pairs
from seq2seq.export import ExportedTranslator, export_run
from seq2seq.inference import Translator
from seq2seq.transformer import TransformerTranslator
from tests.helpers.isolated import inspect_isolated

SENTENCES = ["March 3, 1999", "25th of November 2026", "3/3/1999", "the 7th of July, 2001"]


@pytest.fixture(scope="module")
def int8_export(dates_transformer, tmp_path_factory):
    out = tmp_path_factory.mktemp("int8") / "dates-int8"
    assert main(["export", str(dates_transformer), str(out), "--quantization", "int8",
                 "--beam-sizes", "1,4"]) == 0
    return out


@pytest.fixture(scope="module")
def float_export(dates_transformer, tmp_path_factory):
    out = tmp_path_factory.mktemp("float") / "dates-float32"
    assert main(["export", str(dates_transformer), str(out), "--beam-sizes", "1"]) == 0
    return out


@pytest.fixture(scope="module")
def quantized(dates_transformer):
    """The run in process, quantized as `export --quantization int8` quantizes it."""
    translator = Translator.from_run_dir(dates_transformer)
    quantize_model(translator.model, "int8")
    return translator


@pytest.fixture(scope="module")
def held_out():
    return load_pairs("dates", split="test", seed=0, size=64).sources


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 4])
def test_int8_export_gives_the_quantized_models_tokens(int8_export, quantized, held_out,
                                                       dates_transformer, beam_size):
    expected = quantized.translate(held_out, beam_size=beam_size)
    got = ExportedTranslator(int8_export).translate(held_out, beam_size=beam_size)
    assert len({e.text for e in expected}) > 10, "the model is degenerate"
    for e, g in zip(expected, got, strict=True):
        assert g.tokens == e.tokens and g.text == e.text and g.finished == e.finished
        assert g.score == pytest.approx(e.score, abs=1e-4)
    # The weights really changed: the float model scores the same sentences otherwise.
    plain = Translator.from_run_dir(dates_transformer).translate(held_out, beam_size=beam_size)
    gaps = [abs(p.score - e.score) for p, e in zip(plain, expected, strict=True)]
    assert max(gaps) > 1e-4
    assert sum(p.text == e.text for p, e in zip(plain, expected, strict=True)) >= 56


@pytest.mark.slow
def test_plain_tensorflow_reads_int8_variables(int8_export, quantized):
    outputs, imported, variables = inspect_isolated(
        int8_export, [("serving_default", {"sentences": SENTENCES})])
    assert imported == []
    assert [t.decode() for t in outputs[0]["translations"]] == [
        t.text for t in quantized.translate(SENTENCES, beam_size=1)]
    int8 = Counter(tuple(shape) for _, dtype, shape in variables if dtype == "int8")
    # Every kernel and embedding table of the quantized model, no more.
    model = Counter(tuple(w.shape) for w in quantized.model.weights if w.dtype == "int8")
    # 2 tables, the output matrix, 16 kernels in each of the 2 layers.
    assert int8 == model and sum(int8.values()) == 35
    floats = sum(int(np.prod(shape)) for _, dtype, shape in variables if dtype == "float32")
    int8_values = sum(int(np.prod(shape)) * n for shape, n in int8.items())
    assert int8_values > 3 * floats  # biases, norms and scales are what stays float32
    info = load_json(int8_export / savedmodel.EXTRA_DIR / savedmodel.INFO_FILE)
    assert info["quantization"] == "int8"
    assert info["quantized_layers"] == summary(quantized.model)["quantized_layers"]
    assert "transformer/target_embedding" in info["quantized_layers"]


@pytest.mark.slow
def test_int8_export_is_smaller(int8_export, float_export):
    int8, float32 = _size(int8_export / "variables"), _size(float_export / "variables")
    assert int8 < 0.65 * float32, (int8, float32)
    info = load_json(float_export / savedmodel.EXTRA_DIR / savedmodel.INFO_FILE)
    assert info["quantization"] == "float32" and info["quantized_layers"] == []


# -- the decoding step's float values of int8 weights (no training) ---------------------------


def _transformer(tie: bool) -> TransformerTranslator:
    config = from_dict(RunConfig, {"model": {
        "arch": "transformer", "max_decode_length": 10, "transformer": {
            "num_layers": 2, "hidden_dim": 16, "num_heads": 4, "intermediate_dim": 24,
            "dropout": 0.0, "max_length": 24, "tie_embeddings": tie}}})
    keras.utils.set_random_seed(5)
    model = TransformerTranslator(config.model, 23, 30)
    model.build()
    return model


@pytest.mark.parametrize("tie", [True, False])
def test_the_step_of_int8_weights_gives_the_quantized_full_pass(tie):
    """The decoding step reads int8 weights as their float values, once per decode: at each
    step of a given target prefix, its logits and attention are the quantized model's
    teacher-forced full pass' (Keras's int8 layers) at that position."""
    model = _transformer(tie)
    source = np.array([[5, 9, 4, 11, 0, 0], [7, 7, 12, 3, 8, 6]], np.int32)
    target_in = np.array([[1, 4, 5, 6, 7], [1, 10, 11, 12, 13]], np.int32)
    float_logits = np.asarray(model({"source": source, "target_in": target_in}))
    quantize_model(model, "int8")
    assert model.target_embedding.embeddings.dtype == "int8"
    logits, weights = model({"source": source, "target_in": target_in}, return_attention=True)
    logits, alpha = np.asarray(logits), np.asarray(weights[-1]).mean(1)
    assert np.abs(logits - float_logits).max() > 1e-4  # the int8 grid moved the logits
    step, state = model.make_step(), model.initial_state(source, max_length=6)
    for t in range(target_in.shape[1]):
        step_logits, state, step_alpha = step(target_in[:, t], state, t)
        np.testing.assert_allclose(np.asarray(step_logits), logits[:, t], atol=2e-5)
        np.testing.assert_allclose(np.asarray(step_alpha), alpha[:, t], atol=1e-6)


def test_float_values_of_int8_weights_are_what_the_layers_apply():
    model = _transformer(tie=False)
    quantize_model(model, "int8")
    layer = model.decoder_layers[0]
    x = np.random.default_rng(0).normal(size=(3, 16)).astype("float32")
    dense = layer.ffn_outer  # (24, 16), no activation
    wide = np.random.default_rng(1).normal(size=(3, 24)).astype("float32")
    np.testing.assert_allclose(np.asarray(dense(wide)),
                               wide @ np.asarray(float_kernel(dense)) + np.asarray(dense.bias),
                               atol=1e-5)
    for name in ("query_dense", "output_dense"):  # abc,cde->abde and abcd,cde->abe
        einsum = getattr(layer.self_attention, name)
        inputs = x[:, None] if name == "query_dense" else x.reshape(3, 1, 4, 4)
        expected = np.einsum(einsum.equation, inputs, np.asarray(float_kernel(einsum)))
        np.testing.assert_allclose(np.asarray(einsum(inputs)),
                                   expected + np.asarray(einsum.bias), atol=1e-5)
    embedding = model.target_embedding
    ids = np.array([[3, 17, 29]], np.int32)
    np.testing.assert_allclose(np.asarray(embedding(ids))[0],
                               np.asarray(float_embeddings(embedding))[ids[0]], atol=1e-6)
    np.testing.assert_allclose(np.asarray(embedding(x, reverse=True)),
                               x @ np.asarray(float_reverse_embeddings(embedding)), atol=1e-5)
    # ... and neither is the float weight itself: the values moved to the int8 grid.
    assert embedding.embeddings.dtype == "int8"


# -- refusals ------------------------------------------------------------------------------------


def _refused(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


@pytest.mark.slow
def test_refusals(dates_transformer, tmp_path, capsys):
    out = tmp_path / "out"
    _refused(capsys, ["export", str(dates_transformer), str(out), "--quantization", "int16"],
             "--quantization int16: a SavedModel takes float32 or int8 (int16: add --format "
             "ctranslate2)")
    _refused(capsys, ["export", str(dates_transformer), str(out), "--quantization", "int4"],
             "argument --quantization: invalid choice: 'int4'")
    with pytest.raises(UserError, match="a SavedModel takes float32 or int8"):
        export_run(dates_transformer, out, quantization="int16")
    assert not out.exists()


def test_a_model_keras_cannot_quantize_is_refused():
    model = keras.Sequential([keras.Input((4,)), keras.layers.LayerNormalization()])
    with pytest.raises(UserError) as error:
        quantize_model(model, "int8")
    assert str(error.value) == (
        "--quantization int8: Keras quantizes none of this model's layers (it has int8 Dense, "
        "EinsumDense and Embedding layers); export it in float32")
    assert quantize_model(model, "float32") == [] and quantize_model(model, None) == []


@pytest.mark.slow
def test_evaluate_takes_a_savedmodel_and_scores_it_as_its_run(dates_transformer, float_export,
                                                               int8_export, tmp_path, capsys):
    from seq2seq.evaluate import evaluate

    run = evaluate(dates_transformer, dataset="dates", limit=64, beam_size=1, progress=False)
    exported = evaluate(float_export, dataset="dates", limit=64, beam_size=1, progress=False)
    for name in ("bleu", "chrf", "exact_match", "sentences", "unfinished", "max_decode_length"):
        assert exported[name] == run[name], name
    assert exported["checkpoint"] == run["checkpoint"] and os.path.isabs(run["checkpoint"])
    assert (run["format"], exported["format"], exported["quantization"]) == (
        "run", "savedmodel", "float32")
    # From the command line, int8 as float32, with what the export fixed refused in one line.
    assert main(["evaluate", str(int8_export), "--dataset", "dates", "--limit", "64",
                 "--beam-size", "4", "--json", str(tmp_path / "int8.json")]) == 0
    scored = load_json(tmp_path / "int8.json")
    assert scored["sentences"] == 64
    assert (scored["format"], scored["quantization"], scored["checkpoint"]) == (
        "savedmodel", "int8", run["checkpoint"])
    assert re.search(r"^quantization +int8$", capsys.readouterr().out, re.MULTILINE)
    capsys.readouterr()
    penalty = ExportedTranslator(int8_export).info["length_penalty"]
    assert main(["evaluate", str(int8_export), "--dataset", "dates", "--length-penalty",
                 str(penalty + 1)]) == 2
    assert f"this export searches with {penalty:g}, chosen at export" in capsys.readouterr().err
    old = tmp_path / "old-export"
    shutil.copytree(float_export, old)
    info = load_json(old / savedmodel.EXTRA_DIR / "export_info.json")
    del info["run_config"]
    (old / savedmodel.EXTRA_DIR / "export_info.json").write_text(json.dumps(info))
    assert main(["evaluate", str(old), "--dataset", "dates"]) == 2
    assert "exported before exports recorded their run's settings" in capsys.readouterr().err
