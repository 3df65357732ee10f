"""Show, Attend and Tell (Xu et al. 2015): image captioning with soft and hard attention.

The Python API (docs/python_api.md): `open_model(path)` gives a `CaptionerRun` for a run
directory or an `ExportedCaptioner` for an export, and both caption files alike
(`caption_files(paths) -> ([(path, Caption)], [(path, why)])`); `export_run` writes an export;
`write_caption_figures` draws a caption's attention over its image (`as_result` makes a
`Caption` into the result it draws).

Importing this package imports neither TensorFlow nor Keras (`captioner train --help` stays
fast); each name below loads its module on first use.
"""

from __future__ import annotations

from common.lazy import lazy_getattr

_LAZY = {
    "Caption": "captioner.inference",
    "CaptionerRun": "captioner.inference",
    "ExportedCaptioner": "captioner.export",
    "as_result": "captioner.visualize",
    "attention_kind": "captioner.visualize",
    "export_run": "captioner.export",
    "open_model": "captioner.inference",
    "read_image": "captioner.preprocessing",
    "write_caption_figures": "captioner.visualize",
}

__all__ = [
    "Caption",
    "CaptionerRun",
    "ExportedCaptioner",
    "as_result",
    "attention_kind",
    "export_run",
    "open_model",
    "read_image",
    "write_caption_figures",
]


__getattr__ = lazy_getattr(__name__, _LAZY)
