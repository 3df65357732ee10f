"""The `no_repeat_ngram` input of a `DecodingModule`'s options signature, on a toy module (a
table of next-token logits, no model): it bans as in-process decoding does, 0 changes nothing,
a negative value fails the call, and an export made before the input still loads and serves."""

import json

import numpy as np
import pytest
import tensorflow as tf

from common.errors import UserError
from common.export.module import ExportedModel
from common.export.savedmodel import DEFAULTS_FILE, EXTRA_DIR
from common.serving.servable import ServedModel
from tests.helpers.toy_export import LENGTH, ToyModule

WORDS = ["<pad>", "<start>", "<end>", "<unk>", "a", "b", "c"]
EXAMPLES = 6


def _table() -> np.ndarray:
    """`(E, V, V)` next-token logits per example: random, with a strong pull back to the token
    just fed or the one before, so that outputs repeat themselves without a ban."""
    rng = np.random.default_rng(0)
    table = rng.normal(size=(EXAMPLES, len(WORDS), len(WORDS))).astype(np.float32)
    table[:, :, 2] -= 2.0  # <end> late
    for token in range(4, len(WORDS)):
        table[:, token, token] += 2.0
        table[:, token, 4 + (token - 3) % 3] += 1.5
    return table


class Toy(ToyModule):
    """Decodes example ids ("0".."5") over `_table()`, beam sizes 1 and 2, no warm-up file."""

    def __init__(self):
        super().__init__(beam_sizes=(1, 2), default_beam_size=1, warmup=False, words=WORDS,
                         logits=_table())


class OldToy(Toy):
    """The toy as exports were before `no_repeat_ngram`: four inputs to the options signature."""

    def __init__(self):
        super().__init__()
        specs = [tf.TensorSpec([None], tf.string, name=self.INPUT),
                 *(tf.TensorSpec([], tf.int32, name=n) for n in ("beam_size", "max_length",
                                                                  "n_best"))]
        setattr(self, self.OPTIONS_SIGNATURE, tf.function(
            lambda raw, beam_size, max_length, n_best: self._serve(raw, beam_size, max_length,
                                                                   n_best),
            autograph=False, input_signature=specs))

    def _serve_defaults(self, raw):
        # Old exports' `serving_default` searched on its own (now it calls the options
        # signature, whose fifth input this one lacks).
        return self._serve(raw, self.default_beam_size,
                           tf.constant(self.max_decode_length, tf.int32), None)


class ExportedToy(ExportedModel):
    MODULE = Toy


RAW = [str(i).encode() for i in range(EXAMPLES)]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """`(module, new export, old export)`, each export loaded by its client; the old one's
    input defaults are those old exports wrote (no `no_repeat_ngram`)."""
    root = tmp_path_factory.mktemp("toy")
    module = Toy()
    new, old = module.save(root / "new"), OldToy().save(root / "old")
    defaults = old / EXTRA_DIR / DEFAULTS_FILE
    written = json.loads(defaults.read_text())
    defaults.write_text(json.dumps({k: v for k, v in written.items() if k != "no_repeat_ngram"}))
    return module, ExportedToy(new), ExportedToy(old)


def _words(outputs, row):
    return [t.decode() for t in outputs["tokens"][row, : outputs["lengths"][row]]]


def _repeats(words, n):
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return len(grams) != len(set(grams))


@pytest.mark.parametrize("beam_size", [1, 2])
def test_the_options_signature_bans_as_in_process_decoding(exports, beam_size):
    module, exported, _ = exports
    assert exported.takes_no_repeat_ngram
    defaults = json.loads((exported.export_dir / EXTRA_DIR / DEFAULTS_FILE).read_text())
    assert defaults["no_repeat_ngram"] == 0
    features = tf.constant(list(range(EXAMPLES)), tf.int32)
    plain = exported._run(RAW, beam_size, LENGTH, None)  # the option left at its default
    assert any(_repeats(_words(plain, row), 2) for row in range(EXAMPLES))
    for n in (0, 1, 2):
        got = exported._run(RAW, beam_size, LENGTH, None, n)
        expected = module.predict(features, None, beam_size, LENGTH, no_repeat_ngram=n)
        for name in ("texts", "tokens", "lengths", "finished"):
            np.testing.assert_array_equal(got[name], expected[name], err_msg=f"{name}, n={n}")
        np.testing.assert_allclose(got["scores"], expected["scores"], rtol=1e-5)
        for row in range(EXAMPLES):
            assert n == 0 or not _repeats(_words(got, row), n), (n, row, _words(got, row))
        if n == 0:
            for name in plain:  # (scores: the same sums, perhaps added in another order)
                if np.asarray(plain[name]).dtype.kind == "f":
                    np.testing.assert_allclose(got[name], plain[name], rtol=1e-6)
                else:
                    np.testing.assert_array_equal(got[name], plain[name])


def test_a_negative_value_fails_the_call_and_the_client_says_so_in_one_line(exports):
    _, exported, _ = exports
    with pytest.raises(tf.errors.InvalidArgumentError, match="no_repeat_ngram must be >= 0"):
        exported._run(RAW, 1, LENGTH, None, -1)
    with pytest.raises(UserError, match="no_repeat_ngram must be an integer >= 0; got -1"):
        exported._options(1, LENGTH, None, -1)


def test_an_export_without_the_input_still_decodes_and_serves(exports):
    _, new, old = exports
    assert not old.takes_no_repeat_ngram
    got = old._run(RAW, 2, LENGTH, 1)
    np.testing.assert_array_equal(got["tokens"], new._run(RAW, 2, LENGTH, 1)["tokens"])
    with pytest.raises(UserError, match="without the no_repeat_ngram input; export the run again"):
        old._options(2, LENGTH, None, 2)
    assert old._options(2, LENGTH, None, 0) == (2, LENGTH)
    # Served, old and new: a request that names no option gets the defaults; the new one takes
    # `no_repeat_ngram` by name, and bans.
    body = {"signature_name": "decode_with_options", "inputs": {"examples": ["0", "1"]}}
    for served in (ServedModel(old.export_dir), ServedModel(new.export_dir)):
        signature, _, inputs, _ = served.parser.parse(body)
        assert served.run(signature, inputs)["texts"].shape == (2,)
    body["inputs"].update(beam_size=2, no_repeat_ngram=1)
    signature, _, inputs, _ = served.parser.parse(body)
    outputs = served.run(signature, inputs)
    for row in range(2):
        assert not _repeats(_words(outputs, row), 1)
