"""detokenize: natural spacing, agreement of the Python and TensorFlow versions, round trips."""

import pytest
import tensorflow as tf

from common.text import detokenize, detokenize_tf, normalize, tokenize_texts


@pytest.mark.parametrize(
    "tokens, expected",
    [
        (["¿", "Qué", "hora", "es", "?"], "¿Qué hora es?"),
        (["¡", "Hola", ",", "Tom", "!"], "¡Hola, Tom!"),
        (["(", "Él", ")", "vino", ";", "yo", "no", "."], "(Él) vino; yo no."),
        (["«", "Sí", "»", ",", "dijo", "."], "«Sí», dijo."),
        (["He", "said", ",", '"', "hi", '"', "."], 'He said, "hi".'),
        (['"', "A", ".", '"', '"', "B", ".", '"'], '"A." "B."'),
        (["dice", "'", "good", "bye", "'", "en", "alemán"], "dice 'good bye' en alemán"),
        (["my", "parents", "'", "house", "."], "my parents' house."),
        (["2026", "-", "11", "-", "25"], "2026-11-25"),
        (["1", "/", "2", "/", "3"], "1/2/3"),
        (["rock", "-", "paper"], "rock - paper"),
        (["$", "5", "and", "200", "$", "and", "50", "%"], "$5 and 200 $ and 50%"),
        ([], ""),
    ],
)
def test_spacing_rules(tokens, expected):
    assert detokenize(tokens) == expected
    assert detokenize_tf(tf.ragged.constant([tokens], dtype=tf.string)).numpy()[0].decode() == expected


def test_accepts_bytes_and_dense_padded_tensors():
    assert detokenize([b"Hola", b"."]) == "Hola."
    dense = tf.constant([["Hola", ".", ""], ["¿", "Sí", "?"]])
    assert detokenize_tf(dense).numpy().tolist() == [b"Hola.", "¿Sí?".encode()]


def read_column(path, column):
    with open(path, encoding="utf-8") as f:
        return [normalize(line.rstrip("\n").split("\t")[column]) for line in f]


@pytest.mark.parametrize("column", [0, 1], ids=["english", "spanish"])
def test_round_trip_on_spa_eng_test_set(shared_data, column):
    texts = read_column(shared_data / "spa-eng" / "test.tsv", column)
    tokens = tokenize_texts(texts)
    python = [detokenize(t) for t in tokens]
    rate = sum(a == b for a, b in zip(python, texts)) / len(texts)
    assert rate > 0.99, rate  # measured: 100% on both columns
    in_tf = detokenize_tf(tf.ragged.constant(tokens, dtype=tf.string)).numpy().tolist()
    assert [s.decode("utf-8") for s in in_tf] == python
