"""The pointer-generator (`--copy`): extended ids, the loss against NumPy, decoding, a copy
task with unseen names, and the SavedModel round trip."""

import random

import numpy as np
import pytest
import tensorflow as tf

from common.text import Vocabulary
from seq2seq.bahdanau import BahdanauTranslator
from seq2seq.cli import main
from seq2seq.config import BahdanauConfig, ModelConfig, TransformerConfig
from seq2seq.copying import (
    TINY,
    copy_ids,
    copy_ids_tf,
    extend_target_ids,
    extended_words,
    pointer_generator_log_probs,
)
from seq2seq.export import ExportedTranslator
from seq2seq.inference import Translator
from seq2seq.losses import log_prob_loss_terms
from seq2seq.transformer import TransformerTranslator

VOCAB = Vocabulary(["<pad>", "<start>", "<end>", "<unk>", "Tom", "is", "here", "."])


def test_extended_ids_in_python_and_tensorflow_agree():
    sentences = [["Caecilius", "is", "here", "Caecilius", "."], ["Tom", "Metella", "Quintus"]]
    expected = [copy_ids(s, VOCAB) for s in sentences]
    assert expected == [[8, 5, 6, 8, 7], [4, 9, 10]]
    padded = tf.ragged.constant(sentences).to_tensor("")
    got = copy_ids_tf(padded, VOCAB).numpy().tolist()
    assert got == [expected[0], expected[1] + [0, 0]]
    assert extend_target_ids(["Metella", "is", "Grumio"], sentences[1], VOCAB) == [9, 5, 3]
    assert extended_words([9, 5, 3, 2], sentences[1], VOCAB) == ["Metella", "is", "<unk>",
                                                                 "<end>"]


def test_loss_matches_a_numpy_reference():
    rng = np.random.default_rng(0)
    batch, steps, size, source_len, eps = 2, 3, 8, 4, 0.1
    logits = rng.normal(size=(batch, steps, size)).astype(np.float32)
    p_gen = rng.uniform(0.1, 0.9, size=(batch, steps)).astype(np.float32)
    alpha = rng.uniform(size=(batch, steps, source_len)).astype(np.float32)
    alpha[1, :, 3] = 0.0  # padding
    alpha /= alpha.sum(-1, keepdims=True)
    source_copy = np.array([[8, 5, 8, 4], [4, 9, 10, 0]], np.int32)  # a repeat, a pad
    targets = np.array([[8, 5, 2], [9, 3, 0]], np.int32)  # copied, generated, <end>; pad
    log_probs = pointer_generator_log_probs(logits, p_gen, alpha, source_copy)
    terms = log_prob_loss_terms(log_probs, targets, eps, smoothing_size=size)

    extended = size + source_len
    loss, count, correct = 0.0, 0, 0
    for b in range(batch):
        for t in range(steps):
            vocab = np.exp(logits[b, t]) / np.exp(logits[b, t]).sum()
            final = np.zeros(extended)
            final[:size] = p_gen[b, t] * vocab
            for s in range(source_len):
                final[source_copy[b, s]] += (1 - p_gen[b, t]) * alpha[b, t, s]
            assert final.sum() == pytest.approx(1.0, abs=1e-5)
            log_final = np.log(np.maximum(final, TINY))
            np.testing.assert_allclose(log_probs[b, t], log_final, rtol=1e-5, atol=1e-5)
            if targets[b, t] == 0:
                continue
            nll = -log_final[targets[b, t]]
            loss += (1 - eps) * nll + eps * -log_final[:size].mean()
            count += 1
            correct += int(np.argmax(log_final) == targets[b, t])
    assert float(terms["loss_sum"]) == pytest.approx(loss, rel=1e-5)
    assert float(terms["count"]) == count
    assert float(terms["accuracy"]) == correct


def bahdanau(**kwargs):
    sizes = BahdanauConfig(embedding_dim=8, units=8, attention_units=8, dropout=0.0, **kwargs)
    return BahdanauTranslator(ModelConfig(bahdanau=sizes, copy=True), 12, 10)


def transformer():
    sizes = TransformerConfig(num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16,
                              dropout=0.0, max_length=16)
    return TransformerTranslator(ModelConfig(transformer=sizes, copy=True), 12, 10)


SOURCE = np.array([[4, 5, 3, 3, 2], [7, 3, 2, 0, 0]], np.int32)
SOURCE_COPY = np.array([[5, 6, 12, 13, 2], [8, 11, 2, 0, 0]], np.int32)  # V = 10
TARGET_IN = np.array([[1, 5, 12, 13], [1, 11, 6, 7]], np.int32)  # extended ids fed back
INPUTS = {"source": SOURCE, "target_in": TARGET_IN, "source_copy": SOURCE_COPY}


@pytest.mark.parametrize("make", [bahdanau, transformer], ids=["bahdanau", "transformer"])
def test_step_by_step_matches_the_full_pass(make):
    model = make()
    log_probs = np.asarray(model(INPUTS))
    assert log_probs.shape == (2, 4, 10 + 5)
    np.testing.assert_allclose(np.exp(log_probs).sum(-1), 1.0, atol=1e-5)
    state = model.initial_state(SOURCE, source_copy=SOURCE_COPY)
    step = model.make_step()
    for t in range(TARGET_IN.shape[1]):
        step_log_probs, state, _ = step(tf.constant(TARGET_IN[:, t]), state, t)
        np.testing.assert_allclose(step_log_probs, log_probs[:, t], atol=1e-5)


@pytest.mark.parametrize("make", [bahdanau, transformer], ids=["bahdanau", "transformer"])
def test_the_gate_switches_between_generating_and_pointing(make):
    model = make()
    model.build()
    bias = model.generate_gate.bias
    bias.assign([-50.0])  # p_gen = 0: the attention alone, gathered by copy ids
    probs = np.exp(np.asarray(model(INPUTS)))
    assert np.all(probs[:, :, :10][:, :, [0, 1, 3, 4, 7, 9]] < 1e-6)  # nothing points there
    assert np.all(probs[0, :, 12] > 0) and np.all(probs[0, :, 14] < 1e-6)  # slot 12, not 14
    bias.assign([50.0])  # p_gen = 1: the vocabulary distribution alone
    probs = np.exp(np.asarray(model(INPUTS)))
    assert np.all(probs[:, :, 10:] < 1e-6)


# -- a copy task: names the model never saw come through --------------------------------------

TEMPLATES = [("hello {}", "bonjour {}"), ("{} is here", "{} est ici"),
             ("I saw {} today", "j'ai vu {} aujourd'hui"), ("where is {} ?", "où est {} ?")]


def invented_names(count, seed):
    rng = random.Random(seed)
    return ["".join([rng.choice("BDGKMPTZ"), *rng.choices("aeiou", k=2),
                     *rng.choices("lmnrst", k=2)]) for _ in range(count)]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("copy")
    rng = random.Random(0)
    lines = [f"{s.format(n)}\t{t.format(n)}"
             for n in invented_names(1500, 1) for s, t in [rng.choice(TEMPLATES)]]
    (folder / "train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = folder / "run"
    status = main(["train", "--dataset", "tsv", "--data", str(folder / "train.tsv"),
                   "--arch", "bahdanau", "--copy", "--preset", "tiny", "--embedding-dim", "16",
                   "--units", "32", "--attention-units", "16", "--batch-size", "32",
                   "--min-count", "2", "--steps-per-epoch", "200", "--out", str(out), "--verbose", "0"])
    assert status == 0
    return out


@pytest.fixture(scope="module")
def unseen(run_dir):
    vocab = Vocabulary.load(run_dir / "vocab.target.txt")
    assert len(vocab) < 300  # min_count 2: most of the 1,500 names are no words of it
    names = [n for n in invented_names(40, 99) if n not in vocab][:8]
    return [(s.format(n), n) for n, (s, _) in zip(names, TEMPLATES * 2)]


@pytest.mark.slow
def test_a_trained_pointer_generator_copies_names_it_never_saw(run_dir, unseen):
    translator = Translator.from_run_dir(run_dir)
    tokens = [s.split() for s, _ in unseen]
    # copy_unknown=False: no <unk> replacement after the fact, only the pointer itself
    results = translator.translate_tokens(tokens, copy_unknown=False)
    carried = sum(name in r.tokens for (_, name), r in zip(unseen, results))
    assert carried >= 6, [r.text for r in results]
    assert all(r.copied == [] for r in results)


@pytest.mark.slow
def test_export_round_trip_gives_identical_tokens(run_dir, unseen):
    export = run_dir.parent / "export"
    assert main(["export", str(run_dir), str(export), "--beam-sizes", "1,2"]) == 0
    sentences = [s for s, _ in unseen]
    translator, exported = Translator.from_run_dir(run_dir), ExportedTranslator(export)
    assert exported.info["copy"] is True
    for beam in (1, 2):
        expected = translator.translate(sentences, beam_size=beam)
        got = exported.translate(sentences, beam_size=beam)
        assert [g.tokens for g in got] == [e.tokens for e in expected]
        assert [g.text for g in got] == [e.text for e in expected]
    assert sum(name in g.tokens for (_, name), g in zip(unseen, got)) >= 6
