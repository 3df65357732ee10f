"""Text for both families: tokenization, detokenization and vocabularies.

Everything that runs on tensors uses core TensorFlow ops only, so it can be carried into an
exported SavedModel that stock TensorFlow loads.

- `tokenize(strings (B,), lowercase=False) -> (B, None) ragged tf.string`
- `tokenize_texts(list[str], lowercase=False) -> list[list[str]]` (NFKC, then `tokenize`)
- `normalize(str) -> str` (NFKC, applied to text read from files)
- `is_blank(str) -> bool` (nothing but separators: `tokenize` finds no token in it)
- `detokenize(list[str]) -> str` and `detokenize_tf((B, None) ragged) -> (B,) tf.string`
- `Vocabulary`: `build`, `save`/`load`, `encode`/`decode`, `encode_tf`/`decode_tf`

Names are imported on first use (PEP 562), so `from common.text.specials import UNK_ID` and
friends do not pull TensorFlow into backend-agnostic model code.
"""

from common.lazy import lazy_getattr

_HOMES = {
    "detokenize": "detokenizer", "detokenize_tf": "detokenizer",
    "is_blank": "tokenizer", "normalize": "tokenizer", "tokenize": "tokenizer",
    "tokenize_texts": "tokenizer",
    "Vocabulary": "vocabulary",
    "END": "specials", "PAD": "specials", "SPECIALS": "specials", "START": "specials",
    "UNK": "specials",
}

__getattr__ = lazy_getattr(__name__, {name: f"common.text.{home}" for name, home in _HOMES.items()})

__all__ = [
    "END",
    "PAD",
    "SPECIALS",
    "START",
    "UNK",
    "Vocabulary",
    "detokenize",
    "detokenize_tf",
    "is_blank",
    "normalize",
    "tokenize",
    "tokenize_texts",
]
