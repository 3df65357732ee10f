"""Decoding glue: beam size 1 equals greedy, for both architectures; <unk> copying."""

import keras
import numpy as np
import pytest

from common.text import Vocabulary
from seq2seq.bahdanau import BahdanauTranslator
from seq2seq.config import BahdanauConfig, RunConfig, TransformerConfig
from seq2seq.inference import Translator, decode_batch, pad_batch
from seq2seq.transformer import TransformerTranslator

SOURCE = np.array([[4, 5, 6, 7, 0, 0], [7, 8, 9, 0, 0, 0], [5, 0, 0, 0, 0, 0]], np.int32)


def models():
    # Seeded: an untrained model's words can nearly tie, and the cached step and the full pass
    # round differently; this seed's argmaxes win by a clear margin.
    keras.utils.set_random_seed(7)
    return {
        "bahdanau": BahdanauTranslator(
            BahdanauConfig(embedding_dim=8, units=8, attention_units=8, dropout=0.0), 12, 10),
        "transformer": TransformerTranslator(
            TransformerConfig(num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16,
                              dropout=0.0, max_length=16), 12, 10),
    }


@pytest.mark.parametrize("arch", ["bahdanau", "transformer"])
def test_beam_size_one_equals_greedy(arch):
    model = models()[arch]
    greedy = decode_batch(model, SOURCE, start_id=1, end_id=2, max_length=7)
    beam = decode_batch(model, SOURCE, start_id=1, end_id=2, max_length=7, beam_size=1)
    wide = decode_batch(model, SOURCE, start_id=1, end_id=2, max_length=7, beam_size=3)
    np.testing.assert_array_equal(greedy.tokens, beam.tokens)
    assert tuple(greedy.tokens.shape) == (3, 1, 7)
    assert tuple(greedy.attention.shape) == (3, 1, 7, 6)
    assert tuple(wide.tokens.shape) == (3, 1, 7)
    # beam search never finds a worse (length-normalized) hypothesis than greedy here
    assert np.all(wide.normalized_scores.numpy() >= greedy.normalized_scores.numpy() - 1e-4)


def test_greedy_tokens_follow_the_step_argmax():
    model = models()["transformer"]
    decoded = decode_batch(model, SOURCE[:1], start_id=1, end_id=2, max_length=5)
    tokens = [1]
    for _ in range(5):
        logits = model({"source": SOURCE[:1], "target_in": np.array([tokens], np.int32)})
        tokens.append(int(np.argmax(logits[0, -1])))
        if tokens[-1] == 2:
            break
    got = decoded.tokens.numpy()[0, 0, : len(tokens) - 1].tolist()
    assert got == tokens[1:]


def test_unknown_words_are_copied_from_the_attended_source_token():
    class FixedModel:
        """Emits <unk> then <end>, attending to source position 1 first."""

        max_length = 8

        def decoding_state(self, source, max_length, source_copy=None, max_length_limit=None,
                           growing=False):
            return {"source": source}

        def make_step(self, **unused):
            import tensorflow as tf

            def step(tokens, state, index):
                n = tf.shape(tokens)[0]
                chosen = tf.where(index == 0, 3, 2)
                logits = tf.one_hot(tf.fill([n], chosen), 6) * 10.0
                alpha = tf.one_hot(tf.fill([n], 1), tf.shape(state["source"])[1])
                return logits, state, alpha

            return step

    vocab = Vocabulary(["<pad>", "<start>", "<end>", "<unk>", "a", "b"])
    translator = Translator(FixedModel(), vocab, vocab, RunConfig())
    (result,) = translator.translate_tokens([["a", "Zanzibar", "b"]])
    assert result.tokens == ["Zanzibar"]
    assert result.copied == [0]
    assert result.finished


def test_pad_batch_rounds_width_up():
    batch = pad_batch([[1, 2, 3], [4]], multiple=4)
    assert batch.tolist() == [[1, 2, 3, 0], [4, 0, 0, 0]]


class _EchoModel:
    """Emits its source word by word, then <end> (logits 10 apart: no tie to break)."""

    max_length = 32

    def decoding_state(self, source, max_length, source_copy=None, max_length_limit=None,
                       growing=False):
        return {"source": source}

    def make_step(self, **unused):
        import tensorflow as tf

        def step(tokens, state, index):
            source = state["source"]
            width = tf.shape(source)[1]
            word = tf.where(index < width, source[:, tf.minimum(index, width - 1)], 0)
            word = tf.where(word == 0, 2, word)  # the padding after the sentence: <end>
            attention = tf.one_hot(tf.fill(tf.shape(word), tf.minimum(index, width - 1)), width)
            return tf.one_hot(word, 12) * 10.0, state, attention

        return step


def test_batches_of_any_size_and_length_share_one_trace():
    """A file's batches differ in sentence length and the last one in size: the in-process
    translator traces its search once for all of them (a trace costs seconds on a real
    model), and each sentence gets the translation it gets alone."""
    vocab = Vocabulary(["<pad>", "<start>", "<end>", "<unk>", *(f"w{i}" for i in range(8))])
    translator = Translator(_EchoModel(), vocab, vocab, RunConfig())
    batches = [[["w1", "w2"], ["w3"], ["w4", "w5", "w6"]],
               [[f"w{i % 8}" for i in range(11)], ["w2", "w7"]],
               [["w5"]]]
    results = [translator.translate_tokens(batch, beam_size=2) for batch in batches]
    (search,) = translator.module()._in_process.by_key.values()
    assert search.experimental_get_tracing_count() == 1
    for batch, translated in zip(batches, results):
        for tokens, result in zip(batch, translated):
            assert result.tokens == tokens  # echoed
            (alone,) = translator.translate_tokens([tokens], beam_size=2)
            assert (alone.tokens, alone.score) == (result.tokens, result.score)
