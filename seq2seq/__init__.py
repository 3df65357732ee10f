"""Attention translators: Bahdanau (RNNsearch) and the Transformer (Vaswani et al. 2017).

The Python API (docs/python_api.md): `open_model(path)` gives a `Translator` for a run
directory or an `ExportedTranslator` for an export (a `CTranslate2Translator` for a
CTranslate2 one), and all translate alike (`translate(texts) -> [Translation]`); `export_run`
writes an export; `write_alignment_plots` and `write_translation_viewer` draw what each
output token attended to.

Importing this package imports neither TensorFlow nor Keras (`seq2seq train --help` stays
fast); each name below loads its module on first use.
"""

from __future__ import annotations

from common.lazy import lazy_getattr

_LAZY = {
    "ExportedTranslator": "seq2seq.export",
    "Translation": "seq2seq.inference",
    "Translator": "seq2seq.inference",
    "export_run": "seq2seq.export",
    "open_model": "seq2seq.inference",
    "write_alignment_plots": "seq2seq.visualize",
    "write_translation_viewer": "seq2seq.visualize",
}

__all__ = [
    "ExportedTranslator",
    "Translation",
    "Translator",
    "export_run",
    "open_model",
    "write_alignment_plots",
    "write_translation_viewer",
]


__getattr__ = lazy_getattr(__name__, _LAZY)
