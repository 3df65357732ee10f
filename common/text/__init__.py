"""Text for both families: tokenization, detokenization and vocabularies.

Everything that runs on tensors uses core TensorFlow ops only, so it can be carried into an
exported SavedModel that stock TensorFlow loads.

- `tokenize(strings (B,), lowercase=False) -> (B, None) ragged tf.string`
- `tokenize_texts(list[str], lowercase=False) -> list[list[str]]` (NFKC, then `tokenize`)
- `normalize(str) -> str` (NFKC, applied to text read from files)
- `detokenize(list[str]) -> str` and `detokenize_tf((B, None) ragged) -> (B,) tf.string`
- `Vocabulary`: `build`, `save`/`load`, `encode`/`decode`, `encode_tf`/`decode_tf`
"""

from common.text.detokenizer import detokenize, detokenize_tf
from common.text.tokenizer import normalize, tokenize, tokenize_texts
from common.text.vocabulary import END, PAD, SPECIALS, START, UNK, Vocabulary

__all__ = [
    "END",
    "PAD",
    "SPECIALS",
    "START",
    "UNK",
    "Vocabulary",
    "detokenize",
    "detokenize_tf",
    "normalize",
    "tokenize",
    "tokenize_texts",
]
