"""Vocabulary: ids, counts and ordering, save/load, encode/decode in Python and TensorFlow."""

import subprocess
import sys

import pytest
import tensorflow as tf

from common.errors import DataError
from common.text import SPECIALS, Vocabulary, tokenize

SENTENCES = [["b", "a", "c", "a"], ["c", "a", "d"], ["e", "b"]]  # a:3 b:2 c:2 d:1 e:1


def test_specials_first_then_descending_count_ties_alphabetical():
    vocab = Vocabulary.build(SENTENCES)
    assert vocab.tokens == ["<pad>", "<start>", "<end>", "<unk>", "a", "b", "c", "d", "e"]
    assert (vocab.pad_id, vocab.start_id, vocab.end_id, vocab.unk_id) == (0, 1, 2, 3)
    assert len(vocab) == 9


def test_build_is_deterministic_regardless_of_input_order():
    assert Vocabulary.build(SENTENCES) == Vocabulary.build(list(reversed(SENTENCES)))


def test_min_count_and_max_size():
    assert Vocabulary.build(SENTENCES, min_count=2).tokens[4:] == ["a", "b", "c"]
    assert Vocabulary.build(SENTENCES, max_size=6).tokens[4:] == ["a", "b"]
    assert len(Vocabulary.build(SENTENCES, max_size=4)) == 4
    with pytest.raises(ValueError):
        Vocabulary.build(SENTENCES, max_size=3)


def test_special_tokens_in_data_are_not_duplicated():
    vocab = Vocabulary.build([["<unk>", "x", "<pad>"]])
    assert vocab.tokens == list(SPECIALS) + ["x"]


def test_encode_decode():
    vocab = Vocabulary.build(SENTENCES)
    assert vocab.encode(["a", "e", "zzz"]) == [4, 8, 3]
    assert vocab.decode([1, 4, 3, 8, 2, 5, 0]) == ["a", "<unk>", "e"]
    assert vocab.decode([1, 4, 2, 0], strip_special=False) == ["<start>", "a", "<end>", "<pad>"]
    assert vocab.token_to_id("c") == 6 and vocab.id_to_token(6) == "c"


def test_save_load_round_trip_utf8(tmp_path):
    vocab = Vocabulary.build([["¿", "Qué", "niño", "😀", "don't", "Qué"]])
    path = tmp_path / "vocab.txt"
    vocab.save(path)
    assert path.read_text(encoding="utf-8").splitlines()[:5] == list(SPECIALS) + ["Qué"]
    assert Vocabulary.load(path) == vocab


@pytest.mark.parametrize(
    "content",
    ["a\nb\n", "<pad>\n<start>\n<end>\n", "<pad>\n<start>\n<end>\n<unk>\nx\nx\n",
     "<pad>\n<start>\n<end>\n<unk>\n\nx\n", "<pad>\n<start>\n<end>\n<unk>\na b\n", ""],
)
def test_loading_a_file_that_is_not_a_vocabulary_is_a_data_error(tmp_path, content):
    path = tmp_path / "bad.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match="bad.txt"):
        Vocabulary.load(path)


def test_missing_or_binary_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="nope.txt"):
        Vocabulary.load(tmp_path / "nope.txt")
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(DataError, match="bin.txt"):
        Vocabulary.load(tmp_path / "bin.txt")


def test_encode_tf_matches_encode_for_ragged_and_dense():
    vocab = Vocabulary.build(SENTENCES)
    ragged = tf.ragged.constant([["a", "zzz"], [], ["e"]])
    encoded = vocab.encode_tf(ragged)
    assert encoded.dtype == tf.int32
    assert encoded.to_list() == [vocab.encode(["a", "zzz"]), [], vocab.encode(["e"])]
    assert vocab.encode_tf(tf.constant([["b", "c"]])).numpy().tolist() == [[5, 6]]


def test_decode_tf_matches_decode():
    vocab = Vocabulary.build(SENTENCES)
    ids = [[1, 4, 3, 8, 2, 5, 0], [4, 5, 6, 7, 8, 4, 4], [2, 4, 0, 0, 0, 0, 0]]
    decoded = vocab.decode_tf(tf.constant(ids)).to_list()
    assert [[t.decode() for t in row] for row in decoded] == [vocab.decode(row) for row in ids]


def test_encode_tf_in_tf_data_and_in_a_reloaded_savedmodel(tmp_path):
    vocab = Vocabulary.build(SENTENCES)
    dataset = tf.data.Dataset.from_tensor_slices(["a b zzz", "e"]).map(
        lambda s: vocab.encode_tf(tokenize(s)[0])
    )
    assert [x.numpy().tolist() for x in dataset] == [[4, 5, 3], [8]]

    class Encoder(tf.Module):
        def __init__(self, vocab):
            super().__init__()
            self.vocab = vocab

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def __call__(self, strings):
            ids = self.vocab.encode_tf(tokenize(strings))
            return {"ids": ids.to_tensor(), "text": self.vocab.decode_tf(ids.to_tensor()).to_tensor()}

    tf.saved_model.save(Encoder(Vocabulary.build(SENTENCES)), str(tmp_path / "enc"))
    loaded = tf.saved_model.load(str(tmp_path / "enc"))
    out = loaded(tf.constant(["a b zzz", "e"]))
    assert out["ids"].numpy().tolist() == [[4, 5, 3], [8, 0, 0]]
    assert out["text"].numpy().tolist() == [[b"a", b"b", b"<unk>"], [b"e", b"", b""]]


def test_exported_tokenizer_and_vocabulary_load_in_plain_tensorflow(tmp_path):
    """A fresh interpreter that imports only TensorFlow loads and runs the SavedModel."""
    vocab = Vocabulary.build([["¿", "Qué", "?", "Tom"]])

    class Encoder(tf.Module):
        def __init__(self, vocab):
            super().__init__()
            self.vocab = vocab

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def __call__(self, strings):
            return self.vocab.encode_tf(tokenize(strings)).to_tensor()

    tf.saved_model.save(Encoder(vocab), str(tmp_path / "enc"))
    script = (
        "import sys, tensorflow as tf\n"
        "m = tf.saved_model.load(sys.argv[1])\n"
        "print(m(tf.constant(['¿Qué, Tom?'])).numpy().tolist())\n"
        "print(sorted(k for k in sys.modules if k.split('.')[0] in ('common', 'seq2seq')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "enc")],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    ids, modules = result.stdout.strip().splitlines()[-2:]
    assert ids == str([vocab.encode(["¿", "Qué", ",", "Tom", "?"])])
    assert modules == "[]"
