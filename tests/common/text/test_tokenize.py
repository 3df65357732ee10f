"""tokenize: the splitting rules, robustness, and running inside tf.function and SavedModels."""

import pytest
import tensorflow as tf

from common.text import normalize, tokenize, tokenize_texts


def tokens_of(text, lowercase=False):
    return [t.decode("utf-8") for t in tokenize([text], lowercase=lowercase).to_list()[0]]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("¿Dónde está Tom?", ["¿", "Dónde", "está", "Tom", "?"]),
        ("¡Qué alto eres!", ["¡", "Qué", "alto", "eres", "!"]),
        ('He said, "I\'m from Canada."', ["He", "said", ",", '"', "I'm", "from", "Canada", ".", '"']),
        ("Él dijo: «soy de Canadá».", ["Él", "dijo", ":", "«", "soy", "de", "Canadá", "»", "."]),
        ("I don't know, it's Tom's.", ["I", "don't", "know", ",", "it's", "Tom's", "."]),
        ("I don’t.", ["I", "don’t", "."]),
        ("rock'n'roll", ["rock'n'roll"]),
        ("my parents' house", ["my", "parents", "'", "house"]),
        ("'small' and 'little'", ["'", "small", "'", "and", "'", "little", "'"]),
        ("a well-known e-mail from a 20-year-old", ["a", "well-known", "e-mail", "from", "a", "20-year-old"]),
        ("rock - paper", ["rock", "-", "paper"]),
        ("At 2:30 I paid 1,000 dollars, 3.5 each.", ["At", "2:30", "I", "paid", "1,000", "dollars", ",", "3.5", "each", "."]),
        ("An F-14 is a U.S. plane.", ["An", "F-14", "is", "a", "U.S", ".", "plane", "."]),
        ("2026-11-25", ["2026", "-", "11", "-", "25"]),
        ("25/11/2026", ["25", "/", "11", "/", "2026"]),
        ("It costs $5 (50%)...", ["It", "costs", "$", "5", "(", "50", "%", ")", ".", ".", "."]),
        ("Wait...", ["Wait", ".", ".", "."]),
    ],
)
def test_splits_punctuation_and_keeps_words(text, expected):
    assert tokens_of(text) == expected


def test_empty_and_blank_strings_give_no_tokens():
    assert tokenize(["", "   ", "\t\n"]).to_list() == [[], [], []]


def test_scalar_is_a_batch_of_one():
    assert tokenize("Hola, Tom.").to_list() == [[b"Hola", b",", b"Tom", b"."]]


def test_lowercase_uses_unicode_rules_and_is_optional():
    assert tokens_of("ÁRBOL Ñandú İ", lowercase=False) == ["ÁRBOL", "Ñandú", "İ"]
    assert tokens_of("ÁRBOL Ñandú", lowercase=True) == ["árbol", "ñandú"]


def test_control_format_and_unicode_spaces_separate_tokens():
    text = "a\x00b\u200bc\u00a0d\u2003e\tf\ng\x7fh"
    assert tokens_of(text) == list("abcdefgh")


def test_emoji_and_invalid_utf8_do_not_crash():
    result = tokenize([b"ok \xff\xfe bad", "😀👍🏽 fin", "e\u0301"]).to_list()
    assert result[0] == [b"ok", "\ufffd".encode(), "\ufffd".encode(), b"bad"]
    assert result[1][-1] == b"fin" and len(result[1]) == 4
    assert result[2] == ["e\u0301".encode()]  # a combining mark stays in its word


def test_normalize_is_nfkc_and_tokenize_texts_applies_it():
    assert normalize("ﬁn\u00a0２") == "fin 2"
    assert tokenize_texts(["ﬁn ２。", "¡Hola!"]) == [["fin", "2", "。"], ["¡", "Hola", "!"]]
    assert tokenize_texts([]) == []


def test_tokenize_texts_batches_agree_with_one_call():
    texts = [f"Line {i}, isn't it?" for i in range(7)]
    assert tokenize_texts(texts, batch_size=3) == tokenize_texts(texts, batch_size=100)


def test_runs_inside_tf_function():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def count(strings):
        return tokenize(strings, lowercase=True).row_lengths()

    assert count(tf.constant(["¿Qué?", "", "It's 2:30."])).numpy().tolist() == [3, 0, 3]


def test_runs_inside_a_reloaded_savedmodel(tmp_path):
    class Tokenizer(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def __call__(self, strings):
            tokens = tokenize(strings)
            return {"values": tokens.flat_values, "lengths": tokens.row_lengths()}

    tf.saved_model.save(Tokenizer(), str(tmp_path / "tok"))
    loaded = tf.saved_model.load(str(tmp_path / "tok"))
    strings = ["¿Dónde está Tom?", "I don't know, 25/11/2026."]
    out = loaded(tf.constant(strings))
    expected = tokenize(strings)
    assert out["values"].numpy().tolist() == expected.flat_values.numpy().tolist()
    assert out["lengths"].numpy().tolist() == [5, 10]
