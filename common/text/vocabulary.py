"""A token vocabulary: ids for tokens, in Python and as a lookup table for TensorFlow graphs.

Ids: `<pad>`=0, `<start>`=1, `<end>`=2, `<unk>`=3, then the tokens by descending count, ties
broken by the token itself (code point order), so that building twice gives the same ids.
Saved as one token per line, UTF-8; tokens come from `tokenize`, which never yields an empty
token or one containing whitespace, so a line is always exactly one token.

`Vocabulary` is a `tf.Module`: its lookup tables are tracked, so a model or export module
that holds a vocabulary as an attribute carries the tables into its SavedModel.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import tensorflow as tf

from common.config import atomic_write_text, read_text
from common.errors import DataError
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
    check_tokens,
)

__all__ = ["END", "PAD", "SPECIALS", "START", "UNK", "Vocabulary"]


class Vocabulary(tf.Module):
    """Token <-> id mapping with the four special tokens first.

    Args:
        tokens: every token in id order, starting with `<pad> <start> <end> <unk>`.

    Example:
    >>> vocab = Vocabulary.build([["a", "b", "a"], ["c", "a"]])
    >>> vocab.tokens
    ['<pad>', '<start>', '<end>', '<unk>', 'a', 'b', 'c']
    >>> vocab.encode(["a", "c", "zzz"])
    [4, 6, 3]
    >>> vocab.decode([1, 4, 6, 2, 0])
    ['a', 'c']
    """

    pad_id = PAD_ID
    start_id = START_ID
    end_id = END_ID
    unk_id = UNK_ID

    def __init__(self, tokens: Sequence[str]):
        super().__init__(name="vocabulary")
        tokens = list(tokens)
        check_tokens(tokens)
        # Plain Python containers, set past tf.Module's attribute tracking, which would wrap
        # them in (12x slower) trackable lists and dicts; only the lookup tables are tracked.
        object.__setattr__(self, "_tokens", tokens)
        object.__setattr__(self, "_ids", {token: i for i, token in enumerate(tokens)})
        self._table = None
        self._id_table = None

    @classmethod
    def build(
        cls,
        token_lists: Iterable[Iterable[str]],
        min_count: int = 1,
        max_size: int | None = None,
    ) -> Vocabulary:
        """Count tokens and keep the frequent ones.

        Args:
            token_lists: tokenized sentences (`str` tokens).
            min_count: drop tokens seen fewer times than this.
            max_size: the most ids in all, the four special tokens included (so it is the
                size of the embedding), or None for no limit.

        Returns:
            A `Vocabulary` with the kept tokens by descending count, ties alphabetical.
        """
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        if max_size is not None and max_size < len(SPECIALS):
            raise ValueError(f"max_size must be >= {len(SPECIALS)} (the specials), got {max_size}")
        counts = Counter()
        for tokens in token_lists:
            counts.update(tokens)
        for special in SPECIALS:
            counts.pop(special, None)
        kept = sorted((t for t, n in counts.items() if n >= min_count), key=lambda t: (-counts[t], t))
        if max_size is not None:
            kept = kept[: max_size - len(SPECIALS)]
        return cls(list(SPECIALS) + kept)

    @property
    def tokens(self) -> list[str]:
        """All tokens in id order (a copy)."""
        return list(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._ids

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self._tokens == other._tokens

    __hash__ = tf.Module.__hash__

    def __repr__(self) -> str:
        return f"Vocabulary(size={len(self)})"

    def token_to_id(self, token: str) -> int:
        return self._ids.get(token, self.unk_id)

    def id_to_token(self, index: int) -> str:
        return self._tokens[index]

    def save(self, path: str | os.PathLike) -> None:
        """Write one token per line, UTF-8 (written to a temporary file, then renamed)."""
        atomic_write_text(path, "".join(f"{token}\n" for token in self._tokens))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocabulary:
        """Read a file written by `save`.

        Raises:
            DataError: the file is missing, not UTF-8, or not a vocabulary (special tokens
                missing or out of place, empty lines, duplicates).
        """
        path = Path(path)
        text = read_text(path, "a vocabulary file (one token a line)", DataError, "utf-8")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        try:
            return cls(lines)
        except ValueError as exc:
            raise DataError(f"{path}: not a vocabulary file ({exc})") from None

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Ids of `tokens`; unknown tokens get `unk_id`."""
        return [self._ids.get(token, self.unk_id) for token in tokens]

    def decode(self, ids: Iterable[int], strip_special: bool = True) -> list[str]:
        """Tokens of `ids`.

        Args:
            ids: token ids (ints or integer NumPy/TensorFlow scalars).
            strip_special: stop at the first `<end>` and drop `<pad>` and `<start>`
                (`<unk>` is kept: it stands for a word). False maps every id as it is.
        """
        tokens = []
        for index in ids:
            index = int(index)
            if strip_special:
                if index == self.end_id:
                    break
                if index in (self.pad_id, self.start_id):
                    continue
            tokens.append(self._tokens[index])
        return tokens

    def _lookup_table(self) -> tf.lookup.StaticHashTable:
        if self._table is None:
            with tf.init_scope():
                initializer = tf.lookup.KeyValueTensorInitializer(
                    tf.constant(self._tokens, dtype=tf.string),
                    tf.range(len(self._tokens), dtype=tf.int64),
                )
                self._table = tf.lookup.StaticHashTable(initializer, default_value=self.unk_id)
                inverse = tf.lookup.KeyValueTensorInitializer(
                    tf.range(len(self._tokens), dtype=tf.int64),
                    tf.constant(self._tokens, dtype=tf.string),
                )
                self._id_table = tf.lookup.StaticHashTable(inverse, default_value=UNK)
        return self._table

    def encode_tf(self, tokens) -> tf.Tensor | tf.RaggedTensor:
        """Ids of string tokens inside TensorFlow graphs (tf.data, tf.function, SavedModels).

        Args:
            tokens: tf.string tokens of any shape, typically `(B, None)` ragged from `tokenize`.

        Returns:
            int32 ids of the same shape (ragged stays ragged); unknown tokens get `unk_id`.
        """
        table = self._lookup_table()
        if isinstance(tokens, tf.RaggedTensor):
            return tf.ragged.map_flat_values(lambda t: tf.cast(table.lookup(t), tf.int32), tokens)
        return tf.cast(table.lookup(tf.convert_to_tensor(tokens, dtype=tf.string)), tf.int32)

    def decode_tf(self, ids) -> tf.RaggedTensor:
        """Tokens of `(B, T)` ids inside TensorFlow graphs, cut at the first `<end>`.

        Args:
            ids: `(B, T)` integer ids, e.g. `Decoded.tokens[:, 0]`.

        Returns:
            `(B, None)` tf.RaggedTensor of tf.string: each row up to (not including) its first
            `<end>`, with `<pad>` and `<start>` dropped, as `decode` does.
        """
        self._lookup_table()
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int64)
        before_end = tf.math.cumsum(tf.cast(ids == self.end_id, tf.int32), axis=-1) == 0
        keep = before_end & (ids != self.pad_id) & (ids != self.start_id)
        kept = tf.ragged.boolean_mask(ids, keep)
        return tf.ragged.map_flat_values(self._id_table.lookup, kept)
