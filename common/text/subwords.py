"""Subword vocabularies: SentencePiece (unigram or BPE) with the package's special ids.

A `SubwordVocabulary` is trained on the training split with the `sentencepiece` package
(Kudo and Richardson 2018) and used in graphs through tensorflow-text's
`SentencepieceTokenizer`, whose ops go into an exported graph (TensorFlow Serving links them; a
plain TensorFlow process loads such an export after `import tensorflow_text`). Not through
keras-hub's `SentencePieceTokenizer`, a wrapper of the same op: it gives the op no name, and
two unnamed SentencePiece models in one SavedModel (a translator's source and target) load as
one, so the export decoded the target with the source model. Each model's op is named by a
digest of the model. The model is trained
with `<pad>`=0, `<start>`=1, `<end>`=2, `<unk>`=3 (the ids of `common.text.specials`), so
models, losses and decoding see the same ids as with a word `Vocabulary`.

Text goes in whole: SentencePiece normalizes it (NFKC) and splits it itself, and
detokenization is exact, so no word tokenizer or detokenizer is involved. What works on
words only (copying source words, `<unk>` replacement) does not apply to subwords.

Whitespace: every character Python's `str.split()` splits on (`WHITESPACE`: the Unicode
spaces, line and paragraph separators, tab to carriage return, the information separators and
NEL, U+0085) is made a space before SentencePiece sees the text, in training and in encoding
(Python and graph alike). SentencePiece's own normalization does so for all but NEL, which it
kept as a piece; a piece holding whitespace cannot be a line of a vocabulary file, nor a
token. The word tokenizer separates tokens at all of them too (`common.text.tokenizer`).
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable
from pathlib import Path

import tensorflow as tf

from common.catalog import SENTENCEPIECE_TYPES as MODEL_TYPES
from common.errors import DataError, UserError
from common.text.specials import (
    END,
    END_ID,
    PAD,
    PAD_ID,
    SPECIALS,
    START,
    START_ID,
    UNK,
    UNK_ID,
)

#: The characters `str.isspace` holds true for (what `str.split()` splits on).
WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680"
              + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000")
_TO_SPACES = str.maketrans(WHITESPACE, " " * len(WHITESPACE))
# The same characters for tf.strings.regex_replace (RE2).
_WHITESPACE_RE2 = "[" + "".join(f"\\x{{{ord(c):x}}}" for c in WHITESPACE) + "]"


def spaced(text: str) -> str:
    """`text` with each `WHITESPACE` character made a space (what SentencePiece reads).

    Example:
    >>> spaced("wait\\u0085what\\u2028now")
    'wait what now'
    """
    return text.translate(_TO_SPACES)


def spaced_tf(strings) -> tf.Tensor:
    """`spaced` on tf.string texts of any shape, in a graph (a core op, RegexReplace)."""
    return tf.strings.regex_replace(tf.convert_to_tensor(strings, tf.string), _WHITESPACE_RE2,
                                    " ")


def _training_error(message: str, vocab_size: int) -> str:
    """SentencePiece's error as one line for this package's options (it suggests its own
    command line's, `--character_coverage`, which no command here has)."""
    what = f"cannot train a {vocab_size}-piece SentencePiece vocabulary"
    small = re.search(r"smaller than required_chars\. \d+ vs (\d+)", message)
    if small:
        needed = int(small.group(1))
        return (f"{what}: the text has {needed - len(SPECIALS)} distinct characters, each needing a piece "
                f"besides the {len(SPECIALS)} special ones; expected a vocabulary size (--vocab-size) of at "
                f"least {needed}")
    large = re.search(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)",
                      message)
    if large:
        return (f"{what}: the text is too small to make so many pieces; expected a vocabulary "
                f"size (--vocab-size) of at most {large.group(1)}")
    return f"{what}: {' '.join(message.split())[:300]}"


def train_sentencepiece(texts: Iterable[str], vocab_size: int, model_type: str = "unigram",
                        character_coverage: float = 1.0) -> bytes:
    """Train a SentencePiece model on `texts`; returns the serialized model proto.

    Training is single-threaded over the texts in the order given, so the same texts give
    the same model.

    Args:
        texts: the training sentences (one string each; `WHITESPACE` is read as spaces).
        vocab_size: the size of the vocabulary, the four special pieces included.
        model_type: "unigram" (Kudo 2018) or "bpe" (Sennrich et al. 2016).
        character_coverage: the share of characters the pieces must cover (1.0 for Latin
            scripts; 0.9995 is usual for large alphabets).

    Raises:
        UserError: an unknown model type, or a vocabulary size the texts cannot fill.
    """
    import sentencepiece as spm

    if model_type not in MODEL_TYPES:
        raise UserError(f"unknown SentencePiece model type {model_type!r}; choose one of: "
                        f"{', '.join(MODEL_TYPES)}")
    sentences = [text for text in map(spaced, texts) if text.strip()]
    if not sentences:
        raise UserError("no text to train a SentencePiece vocabulary on")
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences), model_writer=model, vocab_size=vocab_size,
            model_type=model_type, character_coverage=character_coverage,
            pad_id=PAD_ID, bos_id=START_ID, eos_id=END_ID, unk_id=UNK_ID,
            pad_piece=PAD, bos_piece=START, eos_piece=END, unk_piece=UNK,
            num_threads=1, input_sentence_size=0, shuffle_input_sentence=False,
            hard_vocab_limit=True, minloglevel=2)
    except RuntimeError as exc:
        raise UserError(_training_error(str(exc), vocab_size)) from None
    return model.getvalue()


class SubwordVocabulary(tf.Module):
    """A SentencePiece model: text <-> ids in Python and in TensorFlow graphs.

    Args:
        proto: the serialized SentencePiece model (`train_sentencepiece`, or a `.model` file).

    Example:
    >>> proto = train_sentencepiece(["a cat", "a dog"] * 50, vocab_size=16)  # doctest: +SKIP
    >>> vocab = SubwordVocabulary(proto)                                      # doctest: +SKIP
    >>> vocab.decode(vocab.encode("a cat"))                                  # doctest: +SKIP
    'a cat'
    """

    pad_id = PAD_ID
    start_id = START_ID
    end_id = END_ID
    unk_id = UNK_ID

    def __init__(self, proto: bytes):
        super().__init__(name="subword_vocabulary")
        import sentencepiece as spm

        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(proto)
        except RuntimeError as exc:
            raise DataError(f"not a SentencePiece model ({exc})") from None
        expected = {PAD_ID: PAD, START_ID: START, END_ID: END, UNK_ID: UNK}
        got = {i: processor.IdToPiece(i) for i in expected}
        if got != expected:
            raise DataError(f"a SentencePiece model for this package has the pieces {expected} "
                            f"at those ids; this one has {got}")
        object.__setattr__(self, "_processor", processor)
        object.__setattr__(self, "proto", proto)
        self._tokenizer = None

    @property
    def tokenizer(self):
        """tensorflow-text's `SentencepieceTokenizer` of the model, made on first use.

        Its op is named `sentencepiece_<digest of the model>`: a SavedModel holding two models
        keeps them apart when loaded (unnamed, they load as one). Its resource belongs to the
        op's kernel, which `tf.random.set_seed` (so `keras.utils.set_random_seed`) drops with
        the kernel cache (tensorflow/text#802): made late, it is made after a trainer seeds. A
        module that saves graphs using it touches it first, so the SavedModel tracks it.
        """
        if self._tokenizer is None:
            import hashlib

            import tensorflow_text

            digest = hashlib.sha256(self.proto).hexdigest()[:16]
            self._tokenizer = tensorflow_text.SentencepieceTokenizer(
                model=self.proto, out_type=tf.int32, name=f"sentencepiece_{digest}")
        return self._tokenizer

    def __len__(self) -> int:
        return self._processor.GetPieceSize()

    @property
    def tokens(self) -> list[str]:
        """Every piece in id order."""
        return [self._processor.IdToPiece(i) for i in range(len(self))]

    def save(self, path: str | os.PathLike) -> None:
        """Write the model proto (a SentencePiece `.model` file), atomically."""
        from common.config import replacing

        with replacing(Path(path)) as temporary:
            temporary.write_bytes(self.proto)

    @classmethod
    def load(cls, path: str | os.PathLike) -> SubwordVocabulary:
        try:
            return cls(Path(path).read_bytes())
        except FileNotFoundError:
            raise DataError(f"{path}: no such SentencePiece model file") from None
        except DataError as exc:
            raise DataError(f"{path}: {exc}") from None

    def encode(self, text: str) -> list[int]:
        """The ids of one text (no `<start>`/`<end>`; `WHITESPACE` read as spaces)."""
        return self._processor.EncodeAsIds(spaced(text))

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ids, stopping at the first `<end>` (`<pad>`/`<start>` dropped)."""
        kept = []
        for index in ids:
            index = int(index)
            if index == END_ID:
                break
            if index not in (PAD_ID, START_ID):
                kept.append(index)
        return self._processor.DecodeIds(kept)

    def pieces(self, text: str) -> list[str]:
        """The pieces of one text (for display and attention plots)."""
        return self._processor.EncodeAsPieces(spaced(text))

    def encode_tf(self, strings) -> tf.RaggedTensor:
        """`(B,)` tf.string texts -> `(B, None)` int32 ids, inside TensorFlow graphs (as
        `encode`: `WHITESPACE` read as spaces)."""
        return self.tokenizer.tokenize(spaced_tf(strings))

    def decode_tf(self, ids) -> tf.Tensor:
        """`(B, T)` ids -> `(B,)` tf.string texts, each cut at its first `<end>`."""
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)
        before_end = tf.math.cumsum(tf.cast(ids == END_ID, tf.int32), axis=-1) == 0
        keep = before_end & (ids != PAD_ID) & (ids != START_ID)
        texts = self.tokenizer.detokenize(tf.ragged.boolean_mask(ids, keep))
        return tf.convert_to_tensor(texts, tf.string)

