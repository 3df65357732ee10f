"""The shared registries whose names the command lines list, importable without Keras.

Each name is declared with the module that registers its object (`Registry.declare`), so
`--help` reads `SCORES.names()` without importing TensorFlow; `SCORES.get(name)` imports it.
"""

from __future__ import annotations

from common.registry import Registry

SCORES = Registry("attention score")
for _name in ("additive", "cosine", "dot", "general", "location", "scaled_dot"):
    SCORES.declare(_name, "common.layers")

#: The SentencePiece model types of `common.text.subwords` (`--sentencepiece-type`).
SENTENCEPIECE_TYPES = ("unigram", "bpe")
