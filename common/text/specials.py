"""The special tokens every vocabulary starts with, and their ids.

Kept apart from `vocabulary.py` (a `tf.Module`) so that model code written in `keras.ops`
can name the ids without importing TensorFlow, and so run on any Keras backend.
"""

from collections import Counter

PAD, START, END, UNK = "<pad>", "<start>", "<end>", "<unk>"
SPECIALS = (PAD, START, END, UNK)
PAD_ID, START_ID, END_ID, UNK_ID = range(4)


def check_tokens(tokens: list[str]) -> None:
    """Raise `ValueError` unless `tokens` can be a vocabulary: the specials first, in order,
    then tokens that are neither empty nor hold whitespace, none twice (what a vocabulary file
    of one token a line can hold; the rule of `Vocabulary`, without TensorFlow)."""
    if tuple(tokens[:4]) != SPECIALS:
        raise ValueError(f"a vocabulary starts with {' '.join(SPECIALS)}, got {tokens[:4]}")
    for token in tokens:
        if not token or token != "".join(token.split()):
            raise ValueError(f"vocabulary token {token!r} is empty or contains whitespace")
    if len(set(tokens)) != len(tokens):
        duplicates = sorted(t for t, n in Counter(tokens).items() if n > 1)
        raise ValueError(f"duplicate vocabulary tokens: {duplicates[:5]}")
