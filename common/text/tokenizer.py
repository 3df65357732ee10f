"""Word tokenization in core TensorFlow string ops, so that it runs inside exported SavedModels.

`tokenize` turns sentences into words and punctuation marks. It uses only core TensorFlow ops
(`unicode_transcode`, `regex_replace`, `lower`, `split`): a SavedModel that tokenizes its input
loads in stock TensorFlow, without `tensorflow_text`.

The rules, chosen so that `detokenize(tokenize(s)) == s` for ordinary sentences:
- Every punctuation mark or symbol is its own token: `¿Qué?` -> `¿ Qué ?`, `"Hi!"` ->
  `" Hi ! "`, `50%` -> `50 %`, emoji and `$` too.
- Joiners written with no space between two word characters stay inside the word:
  apostrophes (`don't`, `it's`, `rock'n'roll` are one token), hyphens between words
  (`ten-thirty`, `e-mail`, `F-14`), full stops between word characters (`U.S.` -> `U.S .`),
  and `.`, `,`, `:` between digits (`3.14`, `1,000`, `2:30`).
- A hyphen or slash between two numbers is split (`2026-11-25` -> `2026 - 11 - 25`,
  `25/11/2026` -> `25 / 11 / 2026`), so that dates are made of small, reusable tokens;
  `detokenize` joins them back.
- Control characters, format characters (zero-width space), private-use characters and every
  kind of Unicode space separate tokens; invalid UTF-8 bytes become U+FFFD.
- `lowercase=True` lowercases with Unicode rules (captions); translation keeps case.

Unicode normalization: core TensorFlow has no normalization op, so `tokenize` cannot apply
NFKC itself. Text read from files is put in NFKC by `normalize` (Python) before it is
tokenized; `tokenize` handles the compatibility characters that matter for splitting (all
Unicode spaces, zero-width and control characters).

Example:
>>> tokenize(tf.constant(["I don't know.", "Wait!"])).to_list()
[[b'I', b"don't", b'know', b'.'], [b'Wait', b'!']]
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

import tensorflow as tf

# A word character: letter, number or combining mark.
_W = r"\pL\pN\pM"

# What separates tokens, by Unicode general category: control, format (zero-width space) and
# private-use characters, and every kind of space, line and paragraph separator.
SEPARATOR_CATEGORIES = ("Cc", "Cf", "Co", "Zs", "Zl", "Zp")

# Applied in order with tf.strings.regex_replace (RE2 syntax).
_SEPARATORS = "[" + "".join(rf"\p{{{category}}}" for category in SEPARATOR_CATEGORIES) + "]+"
_SPLIT_SYMBOLS = rf"([^{_W}\s])"
# After _SPLIT_SYMBOLS, "a'b" reads "a ' b" while "a ' b" reads "a  '  b": a single space on
# both sides means the joiner was written inside a word. Each rule runs twice because RE2
# matches do not overlap ("a'b'c" needs a second pass for the second apostrophe).
_REJOIN = (
    (rf"([{_W}]) (['’]) ([{_W}])", r"\1\2\3"),  # don't, it's, rock'n'roll
    (r"([\pL\pM]) - ([\pL\pN])", r"\1-\2"),  # e-mail, F-14
    (r"(\pN) - (\pL)", r"\1-\2"),  # 20-year-old (but 2026-11-25 stays split)
    (r"([\pL\pN]) \. ([\pL\pN])", r"\1.\2"),  # U.S, a.m, 3.14
    (r"(\pN) ([,:]) (\pN)", r"\1\2\3"),  # 1,000 and 2:30
)


def normalize(text: str) -> str:
    """Unicode NFKC normalization (Python), applied to text read from files.

    Example:
    >>> normalize("ﬁn\u00a0２")
    'fin 2'
    """
    return unicodedata.normalize("NFKC", text)


def is_blank(text: str) -> bool:
    """Whether `text` holds separators only (`SEPARATOR_CATEGORIES`), so that `tokenize`
    finds no token in it: "", spaces, or a zero-width space alone (Python, no TensorFlow).

    Example:
    >>> is_blank("\\u200b "), is_blank("a\\u200b")
    (True, False)
    """
    return all(unicodedata.category(c) in SEPARATOR_CATEGORIES for c in text)


def tokenize(strings, lowercase: bool = False) -> tf.RaggedTensor:
    """Split sentences into word and punctuation tokens with core TensorFlow string ops.

    Args:
        strings: `(B,)` tf.string (or anything `tf.convert_to_tensor` takes), UTF-8 sentences,
            best already in NFKC (see `normalize`). A scalar is treated as a batch of one.
        lowercase: lowercase with Unicode rules before splitting.

    Returns:
        `(B, None)` tf.RaggedTensor of tf.string tokens; an empty or blank string gives no
        tokens.

    Example:
    >>> tokenize(["It's 2:30, isn't it?"], lowercase=True).to_list()
    [[b"it's", b'2:30', b',', b"isn't", b'it', b'?']]
    """
    strings = tf.convert_to_tensor(strings, dtype=tf.string)
    if strings.shape.rank == 0:
        strings = tf.reshape(strings, [1])
    text = tf.strings.unicode_transcode(
        strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
    )
    text = tf.strings.regex_replace(text, _SEPARATORS, " ")
    if lowercase:
        text = tf.strings.lower(text, encoding="utf-8")
    text = tf.strings.regex_replace(text, _SPLIT_SYMBOLS, r" \1 ")
    for pattern, rewrite in _REJOIN:
        for _ in range(2):
            text = tf.strings.regex_replace(text, pattern, rewrite)
    return tf.strings.split(text)


def tokenize_texts(
    texts: Sequence[str], lowercase: bool = False, batch_size: int = 4096
) -> list[list[str]]:
    """`tokenize` for Python lists: NFKC-normalizes, tokenizes in batches, returns `str`s.

    Args:
        texts: sentences.
        lowercase: as in `tokenize`.
        batch_size: sentences per TensorFlow call.

    Returns:
        One list of tokens per sentence.

    Example:
    >>> tokenize_texts(["¡Hola, Tom!"])
    [['¡', 'Hola', ',', 'Tom', '!']]
    """
    result: list[list[str]] = []
    for start in range(0, len(texts), batch_size):
        batch = [normalize(t) for t in texts[start : start + batch_size]]
        tokens = tokenize(tf.constant(batch, dtype=tf.string), lowercase=lowercase)
        result.extend([t.decode("utf-8") for t in row] for row in tokens.to_list())
    return result

