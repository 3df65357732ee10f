"""Drawing what a translator attended to: heatmaps and the HTML viewer for `Translation`s.

The glue between `seq2seq.inference.Translation` (or `seq2seq.export.ExportedTranslator`'s
results, the same type) and `common.viz`: each translated sentence becomes one alignment
heatmap (Bahdanau et al. 2015, figure 3), one grid of every head of a Transformer layer
(Vaswani et al. 2017), or one item of the self-contained HTML viewer.

- `alignment(result)`: the source tokens, target tokens and `(T, S)` weights to draw.
- `head_attention(translator, texts, layer)`: `(H, T, S)` weights per sentence, one decode
  per head (the step function returns one head or their average, never all at once).
- `write_alignment_plots(...)` / `write_translation_viewer(...)`: the files
  `seq2seq translate --plot/--html` writes.

Dimensions: `T` target tokens, `S` source tokens, `H` heads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from common.errors import UserError
from common.viz import (
    numbered_paths,
    render_alignment_heatmap,
    render_head_grid,
    write_html_viewer,
)
from seq2seq.inference import Translation


def alignment(result: Translation, weights: Any = None) -> tuple[list[str], list[str], Any]:
    """The source tokens, target tokens and weights to draw for one translation.

    Both `Translator` and `ExportedTranslator` give one attention row per output token; a row
    whose token was a special one dropped from `tokens` (rare) is cut with the token list.

    Args:
        result: a `Translation` without `error`.
        weights: `(T', S)` or `(H, T', S)` weights to draw instead of `result.attention`.

    Returns:
        `(source_tokens [S], target_tokens [T], weights (T, S) or (H, T, S))`.
    """
    matrix = np.asarray(result.attention if weights is None else weights, dtype=np.float32)
    target = list(result.tokens)
    steps = matrix.shape[-2] if matrix.ndim >= 2 else 0
    n = min(steps, len(target))
    return list(result.source_tokens), target[:n], matrix[..., :n, :]


def require_attention(translator: Any) -> None:
    """Raises `UserError` when `translator` has no attention to draw (`seq2seq-noattn`).

    `translator` is a `Translator` (its run config names the architecture) or an
    `ExportedTranslator` (its `export_info.json` says whether it returns attention).
    """
    info = getattr(translator, "info", None)  # an export's export_info.json
    arch = translator.config.model.arch if info is None else None
    has_attention = (arch != "seq2seq-noattn" if info is None
                     else info.get("attention", True))
    if not has_attention:
        raise UserError(f"--plot/--html: a {arch or 'seq2seq-noattn'} model has no attention "
                        "to draw; use a bahdanau or transformer run")


def require_heads(translator: Any) -> None:
    """Raises `UserError` unless `translator` is a Transformer run's `Translator`."""
    # An export (its `info`) returns the attention chosen at export, whatever its run.
    arch = "exported" if hasattr(translator, "info") else translator.config.model.arch
    if arch != "transformer":
        raise UserError(f"--all-heads: a {arch} model returns one attention matrix per "
                        "step; expected a transformer run directory")


def head_attention(
    translator: Any,
    texts: Sequence[str],
    attention_layer: int = -1,
    **translate_kwargs: Any,
) -> list[np.ndarray | None]:
    """Every head's cross-attention of one Transformer layer, for each of `texts`.

    Decodes once per head: the attention a step returns does not steer the search, so every
    decode yields the same output and only the returned head differs. The heads share one
    traced search (`Translator.module` reads the head from a variable), so H heads cost one
    trace, not H.

    Args:
        translator: a `seq2seq.inference.Translator` of a Transformer run.
        texts: the sentences.
        attention_layer: the decoder layer (-1: the last).
        **translate_kwargs: `beam_size`, `batch_size`, `max_length` for `translate`.

    Returns:
        One `(H, T, S)` array per text, None for the lines that failed.
    """
    require_heads(translator)
    per_head = [
        translator.translate(texts, attention_layer=attention_layer, attention_head=h,
                             **translate_kwargs)
        for h in range(translator.model.num_heads)
    ]
    out: list[np.ndarray | None] = []
    for i in range(len(texts)):
        rows = [results[i] for results in per_head]
        if any(r.error for r in rows):
            out.append(None)
        else:
            out.append(np.stack([np.asarray(r.attention, np.float32) for r in rows]))
    return out


def _title(result: Translation) -> str:
    return f"{result.source}  →  {result.text}"


def write_alignment_plots(
    results: Sequence[Translation],
    out_path: str | Path,
    head_weights: Sequence[Any] | None = None,
) -> list[Path]:
    """Saves one heatmap PNG per translation (a head grid when `head_weights` are given).

    Args:
        results: the translations; those with `error` get no file (numbering stays by input).
        out_path: `OUT.png`; several results are written as `OUT-1.png`, `OUT-2.png`, ...
        head_weights: optional `(H, T, S)` per result (`head_attention`).

    Returns:
        The paths written.

    Example:
    >>> results = Translator.from_run_dir("runs/dates").translate(["Nov 3, 1999"])  # doctest: +SKIP
    >>> write_alignment_plots(results, "dates.png")  # doctest: +SKIP
    [PosixPath('dates.png')]
    """
    written = []
    for i, (result, path) in enumerate(zip(results, numbered_paths(out_path, len(results)))):
        if result.error:
            continue
        heads = None if head_weights is None else head_weights[i]
        source, target, weights = alignment(result, heads)
        if heads is None:
            render_alignment_heatmap(source, target, weights, path, title=_title(result))
        else:
            render_head_grid(source, target, weights, path, title=_title(result))
        written.append(path)
    return written


def viewer_items(
    results: Sequence[Translation],
    head_weights: Sequence[Any] | None = None,
) -> list[dict[str, Any]]:
    """`common.viz.write_html_viewer` translation items for the results without `error`."""
    items = []
    for i, result in enumerate(results):
        if result.error:
            continue
        heads = None if head_weights is None else head_weights[i]
        source, target, weights = alignment(result, heads)
        items.append({"kind": "translation", "source_tokens": source, "target_tokens": target,
                      "weights": weights, "title": _title(result)})
    return items


def write_translation_viewer(
    results: Sequence[Translation],
    out_path: str | Path,
    head_weights: Sequence[Any] | None = None,
    title: str = "Translation attention",
) -> Path | None:
    """Writes one self-contained HTML page with every translation that succeeded.

    Hovering a target word shades the source words by the weight it gave them; with
    `head_weights` the page has a head picker.

    Returns:
        The path written, or None when no translation succeeded (no page is written).
    """
    items = viewer_items(results, head_weights)
    if not items:
        return None
    return write_html_viewer(items, out_path, title=title)
