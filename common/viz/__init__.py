"""Attention you can see: overlays, heatmaps and an HTML viewer, independent of any model.

- `render_caption_overlay` / `render_caption_gif`: the Show-Attend-Tell figure, one panel (or
  GIF frame) per word with its attention map over the image as a mask that dims what was not
  attended, each panel at the image's aspect ratio.
- `render_alignment_heatmap` / `render_head_grid`: translation attention as heatmaps, one
  matrix or every head of a layer.
- `write_html_viewer`: one self-contained HTML page; hover a word to see its attention.
- `check_output_path` / `numbered_paths`: the command lines' output files, checked before any
  work and numbered `OUT-1.png`, `OUT-2.png`, ... for several inputs.

Everything takes plain arrays (NumPy or nested lists) and token lists, so the command lines
pass what decoding returned and nothing here imports TensorFlow or Keras.
"""

from common.viz.heatmap import (
    alignment_figure,
    head_grid_figure,
    render_alignment_heatmap,
    render_head_grid,
)
from common.viz.html_viewer import ITEM_KINDS, write_html_viewer
from common.viz.overlay import (
    SMOOTHING,
    PanelOptions,
    default_label_height,
    panel_shape,
    render_caption_gif,
    render_caption_overlay,
    shade_attention,
    upsample_attention,
)
from common.viz.paths import check_output_path, numbered_paths

__all__ = [
    "ITEM_KINDS",
    "PanelOptions",
    "SMOOTHING",
    "alignment_figure",
    "check_output_path",
    "default_label_height",
    "head_grid_figure",
    "numbered_paths",
    "panel_shape",
    "render_alignment_heatmap",
    "render_caption_gif",
    "render_caption_overlay",
    "render_head_grid",
    "shade_attention",
    "upsample_attention",
    "write_html_viewer",
]
