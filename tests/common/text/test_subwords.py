"""SentencePiece subword vocabularies: training, ids, Python and TensorFlow paths agree."""

import unicodedata
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from common.errors import DataError, UserError
from common.text.specials import END_ID, PAD_ID, SPECIALS, START_ID
from common.text.subwords import SubwordVocabulary, train_sentencepiece

DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "spa-eng"


def _column(split, column, limit):
    path = DATA / f"{split}.tsv"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    lines = path.read_text(encoding="utf-8").splitlines()[:limit]
    return [line.split("\t")[column] for line in lines]


@pytest.fixture(scope="module")
def spanish():
    return _column("train", 1, 20000)


@pytest.fixture(scope="module", params=["unigram", "bpe"])
def vocab(request, spanish):
    return SubwordVocabulary(train_sentencepiece(spanish, 1000, model_type=request.param))


def test_size_and_special_ids(vocab):
    assert len(vocab) == 1000
    assert tuple(vocab.tokens[:4]) == SPECIALS


def test_training_is_deterministic(spanish):
    assert train_sentencepiece(spanish[:3000], 300) == train_sentencepiece(spanish[:3000], 300)


def test_text_round_trips_and_python_equals_tensorflow(vocab):
    texts = _column("test", 1, 200)
    ids = [vocab.encode(t) for t in texts]
    assert min(min(row) for row in ids if row) > START_ID  # no specials inside a text
    assert [vocab.decode(row) for row in ids] == [unicodedata.normalize("NFKC", t) for t in texts]
    tf_ids = vocab.encode_tf(tf.constant(texts)).to_list()
    assert tf_ids == ids
    # Padded like decoder output: <start> first, cut at <end>, pads and garbage after it.
    width = max(map(len, ids)) + 3
    batch = np.full((len(ids), width), PAD_ID, np.int32)
    for i, row in enumerate(ids):
        batch[i, : len(row) + 2] = [START_ID, *row, END_ID]
        batch[i, len(row) + 2:] = 7  # a real piece after <end>: must not show
    decoded = [t.decode("utf-8") for t in vocab.decode_tf(batch).numpy()]
    assert decoded == [vocab.decode(row) for row in batch]
    assert decoded == [vocab.decode(row) for row in ids]


def test_save_load_and_bad_files(vocab, tmp_path):
    vocab.save(tmp_path / "vocab.model")
    again = SubwordVocabulary.load(tmp_path / "vocab.model")
    assert again.tokens == vocab.tokens
    (tmp_path / "bad.model").write_bytes(b"not a model")
    with pytest.raises(DataError, match="bad.model"):
        SubwordVocabulary.load(tmp_path / "bad.model")
    with pytest.raises(DataError, match="no such"):
        SubwordVocabulary.load(tmp_path / "missing.model")


def test_a_vocabulary_the_text_cannot_fill_is_a_user_error():
    with pytest.raises(UserError, match="cannot train a 5000-piece"):
        train_sentencepiece(["a b c", "a b"] * 10, 5000)
    with pytest.raises(UserError, match="unknown SentencePiece model type"):
        train_sentencepiece(["a b"], 10, model_type="wordpiece")


def test_a_saved_model_with_the_tokenizer_loads_with_tensorflow_text_alone(tmp_path):
    import subprocess
    import sys

    vocab = SubwordVocabulary(train_sentencepiece(_column("train", 0, 5000), 300))

    class Module(tf.Module):
        def __init__(self):
            super().__init__()
            self.vocab = vocab

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def round_trip(self, texts):
            ids = self.vocab.encode_tf(texts)
            return {"ids": ids.to_tensor(), "texts": self.vocab.decode_tf(ids.to_tensor())}

    texts = ["Tom is here.", "I don't know what happened."]
    module = Module()
    expected = module.round_trip(tf.constant(texts))
    tf.saved_model.save(module, str(tmp_path / "export"))
    script = (
        "import sys, json\n"
        "import tensorflow as tf, tensorflow_text  # the ops TensorFlow Serving links\n"
        f"m = tf.saved_model.load({str(tmp_path / 'export')!r})\n"
        f"out = m.round_trip(tf.constant({texts!r}))\n"
        "loaded = {'keras_hub', 'common'} & {m.split('.')[0] for m in sys.modules}\n"
        "assert not loaded, f'loaded {loaded}'\n"
        "print(json.dumps({'ids': out['ids'].numpy().tolist(),"
        " 'texts': [t.decode() for t in out['texts'].numpy()]}))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300, env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin"})
    assert result.returncode == 0, result.stderr[-2000:]
    import json

    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["ids"] == expected["ids"].numpy().tolist()
    assert got["texts"] == texts == [t.decode() for t in expected["texts"].numpy()]
