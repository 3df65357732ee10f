"""What the captioner and the translators share: attention, decoding, text, training, metrics.

The Python API (docs/python_api.md) names the attention layers a Keras model of your own can
use (`Attention`, soft; `HardAttention`; `LocalAttention`; `MultiHeadAttention`; their scores
in `SCORES`) and the renderers that draw attention from plain arrays
(`render_caption_overlay`, `render_caption_gif`, `render_alignment_heatmap`,
`render_head_grid`, `write_html_viewer`). The rest lives in the subpackages (`common.decoding`,
`common.text`, `common.metrics`, ...).

Importing this package imports neither TensorFlow nor Keras; each name below loads its
subpackage on first use.
"""

from __future__ import annotations

from common.lazy import lazy_getattr

_LAZY = {
    "SCORES": "common.layers",
    "Attention": "common.layers",
    "HardAttention": "common.layers",
    "LocalAttention": "common.layers",
    "MultiHeadAttention": "common.layers",
    "render_alignment_heatmap": "common.viz",
    "render_caption_gif": "common.viz",
    "render_caption_overlay": "common.viz",
    "render_head_grid": "common.viz",
    "write_html_viewer": "common.viz",
}

__all__ = [  # noqa: RUF022 (the layers, then the renderers)
    "SCORES",
    "Attention",
    "HardAttention",
    "LocalAttention",
    "MultiHeadAttention",
    "render_alignment_heatmap",
    "render_caption_gif",
    "render_caption_overlay",
    "render_head_grid",
    "write_html_viewer",
]


__getattr__ = lazy_getattr(__name__, _LAZY)
