"""Drawing where a captioner looked: overlays, GIFs and the HTML viewer for caption results.

The glue between caption results and `common.viz`. A result is the JSON object that
`captioner caption --json` prints for one image (and that a served model's answer can be
turned into), or a `captioner.inference.Caption` with its grid:

    {"image": "cat.jpg", "caption": "a cat .", "words": ["a", "cat", "."], "score": -1.2,
     "finished": true, "attention": [[...L weights...], ...], "grid": [h, w]}

`attention` has one row per decoding step: one per word, plus the step that chose `<end>`
when `finished`; rows past the words are not drawn. `grid` says how the `L = h * w` regions
lie over the image (row-major). An optional `"attention_kind": "hard"` (or `hard=True`) marks
in each panel the cell hard attention picks at inference, the most likely one.

A served model's answer (TensorFlow Serving's REST body from `captioner serve` or the model
server, of either signature) is read as the same results: `{"predictions": [{"captions": ...,
"tokens": ..., "lengths": ..., "attention": (T, h, w), "attention_lengths": ..., ...}]}` (row
format) or `{"outputs": {"captions": [...], ...}}` (columnar), one result per instance. It
names no image and no attention kind: the image is given by the caller (`render --image`).

- `load_results(path)` / `select_results(...)`: read `caption --json` output (or a served
  answer, `served_results`), pick entries.
- `attention_kind(model)`: whether a loaded captioner uses soft or hard attention.
- `caption_figure(result)`: the checked words, `(T, h, w)` maps and hard picks to draw.
- `write_caption_figures(...)`: the files `captioner caption --overlay/--gif/--html` and
  `captioner render` write (Xu et al. 2015, figures 2-3, as a PNG, a GIF and a web page).

Dimensions: `T` words, `L` regions, `h x w` the attention grid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common.config import load_json
from common.errors import DataError, UserError
from common.outputs import reported_write
from common.viz import (
    check_output_path,
    numbered_paths,
    render_caption_gif,
    render_caption_overlay,
    write_html_viewer,
)
from common.viz.inputs import as_rgb_image

REQUIRED_KEYS = ("words", "attention", "grid")
ATTENTION_KINDS = ("soft", "hard")
#: The outputs of an exported captioner's signatures that a served answer's result is made of.
SERVED_KEYS = ("captions", "tokens", "lengths", "scores", "finished", "attention",
               "attention_lengths")


@dataclass(frozen=True)
class CaptionFigure:
    """One caption ready to draw.

    Attributes:
        image: the image file the caption belongs to ("" when unknown).
        text: the caption.
        words: the `T` words.
        maps: `(T, h, w)` attention weights, one map per word.
        hard_indices: `(T,)` flat row-major cells hard attention picked, or None for soft.
    """

    image: str
    text: str
    words: list[str]
    maps: np.ndarray
    hard_indices: np.ndarray | None

    @property
    def title(self) -> str:
        name = Path(self.image).name if self.image else "caption"
        return f"{name}: {self.text}"


def as_result(caption: Any, grid: Sequence[int], image: str = "",
              attention_kind: str | None = None) -> dict[str, Any]:
    """The JSON object of a `captioner.inference.Caption` (what `caption --json` prints)."""
    entry = {"image": str(image), **caption.to_json(tuple(grid))}
    if attention_kind is not None:
        entry["attention_kind"] = attention_kind
    return entry


def attention_kind(model: Any) -> str | None:
    """`"soft"` or `"hard"` for a loaded captioner (its run config or its own attribute)."""
    decoder = getattr(getattr(model, "config", None), "decoder", None)
    kind = getattr(decoder, "attention", None) or getattr(model, "attention_kind", None)
    return kind if kind in ATTENTION_KINDS else None


def caption_figure(result: Mapping[str, Any], hard: bool | None = None,
                   where: str = "result") -> CaptionFigure:
    """Checks one caption result and returns what to draw.

    Args:
        result: a `caption --json` object (see the module docstring).
        hard: mark hard attention's picks (True), never (False), or as the result's
            `attention_kind` says (None).
        where: names the result in error messages ("results.json entry 2").

    Returns:
        A `CaptionFigure`.

    Raises:
        UserError: a key is missing or a value has the wrong type or shape.
    """
    if not isinstance(result, Mapping):
        raise UserError(f"{where}: expected a JSON object with keys {', '.join(REQUIRED_KEYS)}, "
                        f"got {type(result).__name__}")
    missing = [key for key in REQUIRED_KEYS if key not in result]
    if missing:
        raise UserError(f"{where}: missing keys {missing}; expected at least "
                        f"{list(REQUIRED_KEYS)} (the output of `captioner caption --json`)")
    words = result["words"]
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise UserError(f"{where}: expected 'words' as a list of strings, got {words!r:.60}")
    grid = result["grid"]
    if (not isinstance(grid, list) or len(grid) != 2
            or not all(isinstance(g, int) and not isinstance(g, bool) and g > 0 for g in grid)):
        raise UserError(f"{where}: expected 'grid' as [h, w], two positive integers, "
                        f"got {grid!r:.60}")
    maps = _attention_rows(result["attention"], len(words), grid, where)
    kind = result.get("attention_kind")
    if kind is not None and kind not in ATTENTION_KINDS:
        raise UserError(f"{where}: expected 'attention_kind' as one of "
                        f"{', '.join(ATTENTION_KINDS)}, got {kind!r:.40}")
    if hard is None:
        hard = kind == "hard"
    picks = maps.reshape(len(words), -1).argmax(axis=1) if hard else None
    image = result.get("image") or ""
    text = result.get("caption", " ".join(words))
    for key, value in (("image", image), ("caption", text)):
        if not isinstance(value, str):
            raise UserError(f"{where}: expected {key!r} as text, got {value!r:.60}")
    return CaptionFigure(image, text, list(words), maps, picks)


def _attention_rows(attention: Any, num_words: int, grid: Sequence[int],
                    where: str) -> np.ndarray:
    regions = grid[0] * grid[1]
    try:
        rows = np.asarray(attention)
    except ValueError:  # rows of different lengths
        rows = None
    if rows is None or rows.dtype.kind not in "iuf":  # nor true/false, text, objects, null
        raise UserError(f"{where}: expected 'attention' as a list of rows of {regions} "
                        "numbers")
    rows = rows.astype(np.float32)
    if num_words == 0 and rows.size == 0:
        rows = rows.reshape(0, regions)
    if rows.ndim != 2 or rows.shape[1] != regions:
        raise UserError(f"{where}: expected 'attention' of shape (steps, {regions}) for a "
                        f"{grid[0]}x{grid[1]} grid, got shape {rows.shape}")
    if rows.shape[0] < num_words:
        raise UserError(f"{where}: expected at least one attention row per word "
                        f"({num_words} words), got {rows.shape[0]} rows")
    if not np.all(np.isfinite(rows)) or rows.min(initial=0.0) < 0:
        raise UserError(f"{where}: expected finite, non-negative attention weights")
    return rows[:num_words].reshape(num_words, grid[0], grid[1])


def load_results(path: str | Path) -> list[Any]:
    """The results of a `caption --json` file: its list, or a single object as a list of one."""
    data = load_json(path, "a list of caption results (the output of `captioner caption "
                     "--json`)", DataError)
    if isinstance(data, dict) and ("predictions" in data or "outputs" in data):
        return served_results(data, str(path))
    if isinstance(data, dict) and set(data) == {"error"}:
        said = " ".join(str(data["error"]).split())[:160]
        raise DataError(f"{path}: a server's error answer ({said}); expected caption results")
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise DataError(f"{path}: expected a non-empty JSON list of caption results (the "
                        f"output of `captioner caption --json`), got {type(data).__name__}")
    return data


def served_results(body: Mapping[str, Any], source: str = "answer") -> list[dict[str, Any]]:
    """The caption results of a served model's answer, one per instance, in order.

    Args:
        body: TensorFlow Serving's REST answer: `{"predictions": [{output: value}, ...]}` (row
            format) or `{"outputs": {output: [value per instance]}}` (columnar), of
            `serving_default` or `caption_with_options` (its `n_best_*` are not drawn).
        source: names the answer in error messages.

    Returns:
        `caption --json` objects without `image` (see the module docstring).

    Raises:
        DataError: not an answer of an exported captioner (a missing output, a wrong shape).
    """
    expected = ("expected the answer of an exported captioner (the outputs "
                f"{', '.join(SERVED_KEYS)})")
    if "predictions" in body:
        rows = body["predictions"]
        if not isinstance(rows, list) or not rows or not all(isinstance(r, Mapping)
                                                             for r in rows):
            raise DataError(f"{source}: 'predictions' is not a non-empty list of objects; "
                            f"{expected}")
        where = [f"{source} predictions[{i}]" for i in range(len(rows))]
    else:
        columns = body["outputs"]
        if not isinstance(columns, Mapping):
            raise DataError(f"{source}: 'outputs' is not an object of outputs; {expected}")
        sizes = {len(v) if isinstance(v, list) else -1 for v in columns.values()}
        if len(sizes) != 1 or sizes == {-1} or sizes == {0}:
            raise DataError(f"{source}: the 'outputs' are not lists of one length (one value "
                            f"per instance); {expected}")
        rows = [{k: v[i] for k, v in columns.items()} for i in range(sizes.pop())]
        where = [f"{source} outputs, instance {i}" for i in range(len(rows))]
    return [_served_result(row, name, expected) for row, name in zip(rows, where)]


def _served_result(row: Mapping[str, Any], where: str, expected: str) -> dict[str, Any]:
    missing = [key for key in SERVED_KEYS if key not in row]
    if missing:
        raise DataError(f"{where}: missing outputs {missing}; {expected}")
    tokens, length, steps = row["tokens"], row["lengths"], row["attention_lengths"]
    for name, value in (("lengths", length), ("attention_lengths", steps)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise DataError(f"{where}: expected {name!r} as an integer >= 0, got {value!r:.40}")
    if not isinstance(tokens, list) or len(tokens) < length:
        raise DataError(f"{where}: expected 'tokens' as a list of at least 'lengths' "
                        f"({length}) words")
    try:
        attention = np.asarray(row["attention"])
    except ValueError:  # ragged rows
        attention = None
    if (attention is None or attention.dtype.kind not in "iuf" or attention.ndim != 3
            or 0 in attention.shape[1:]):
        raise DataError(f"{where}: expected 'attention' as (steps, h, w) nested lists of "
                        "numbers, one map over the image's grid per step")
    if steps > attention.shape[0]:
        raise DataError(f"{where}: 'attention_lengths' is {steps}, but 'attention' holds "
                        f"{attention.shape[0]} steps")
    grid = [int(attention.shape[1]), int(attention.shape[2])]
    return {"caption": row["captions"], "words": tokens[:length], "score": row["scores"],
            "finished": row["finished"],
            "attention": attention[:steps].reshape(steps, -1).tolist(), "grid": grid}


def select_results(results: Sequence[Any], index: int | None = None,
                   image: str | Path | None = None, source: str = "results") -> list[int]:
    """Which results to draw: the one at `index`, the one for `image`, or all of them.

    Args:
        results: the loaded results.
        index: the position in `results` (negative counts from the end).
        image: an image file; without `index` it picks the result whose `image` is the same
            file (the same path, or failing that the only one with the same file name). A
            list of one result needs no match.
        source: names the results in error messages.

    Returns:
        Positions into `results`.
    """
    count = len(results)
    if index is not None:
        if not -count <= index < count:
            raise UserError(f"--index {index}: {source} holds {count} results; expected "
                            f"0 to {count - 1} (or -{count} to -1 from the end)")
        return [index % count]
    if image is None:
        return list(range(count))
    if count == 1:
        return [0]
    names = [str(r.get("image", "")) if isinstance(r, Mapping) else "" for r in results]
    wanted = Path(image)
    same = [i for i, name in enumerate(names) if name and _same_file(Path(name), wanted)]
    if not same:
        same = [i for i, name in enumerate(names) if name and Path(name).name == wanted.name]
    if len(same) == 1:
        return same
    why = "several results are" if same else "no result is"
    raise UserError(f"--image {image}: {why} for that image in {source}; pick one with "
                    f"--index (0 to {count - 1})")


def _same_file(a: Path, b: Path) -> bool:
    return a == b or a.resolve() == b.resolve()


def read_image_bytes(path: str | Path) -> bytes:
    """The bytes of an image file, checked to decode (one-line `DataError` otherwise)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: no such image file") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read the image ({type(exc).__name__})") from None
    try:
        as_rgb_image(raw)
    except DataError:
        raise DataError(f"{path}: not a readable image ({len(raw)} bytes)") from None
    return raw


def input_order(inputs: Sequence[str], results: Sequence[Mapping[str, Any]]) -> list[Any]:
    """`results` placed at their inputs' positions, None where an input gave no result.

    `captioner caption` answers the readable images in order and reports the others; this
    puts each answer back at its image's position so that files stay numbered by input.
    """
    ordered, pending = [], list(results)
    for name in inputs:
        if pending and str(pending[0].get("image")) == str(name):
            ordered.append(pending.pop(0))
        else:
            ordered.append(None)
    return ordered


def check_figure_paths(overlay: str | None = None, gif: str | None = None,
                       html: str | None = None,
                       inputs: Sequence[str | Path | None] = (), count: int = 1,
                       overlay_option: str = "--overlay") -> None:
    """Fails before any work when `--overlay`, `--gif` or `--html` cannot be written, or when
    one of them (or a numbered `OUT-N.png` of `count` inputs) is one of the `inputs`;
    `overlay_option` names the overlay in messages (`render --out`)."""
    for path, suffix, option in ((overlay, ".png", overlay_option), (gif, ".gif", "--gif"),
                                 (html, ".html", "--html")):
        if path:
            # One page holds every input; the overlays and GIFs are numbered by input.
            check_output_path(path, suffix, option, inputs, 1 if suffix == ".html" else count)


def write_caption_figures(
    results: Sequence[Mapping[str, Any] | None],
    overlay: str | Path | None = None,
    gif: str | Path | None = None,
    html: str | Path | None = None,
    images: Sequence[str | Path | None] | None = None,
    hard: bool | None = None,
    source: str = "result",
    title: str = "Caption attention",
    overlay_option: str = "--overlay",
    **render_kwargs: Any,
) -> list[Path]:
    """Writes the figures of caption results: overlays, GIFs, one viewer page.

    Every result and image is checked before anything is written.

    Args:
        results: `caption --json` objects; None for an input without a result (it gets no
            file, and the numbering stays by input).
        overlay: `OUT.png`, the paper's figure; several results give `OUT-1.png`, ...
        gif: `OUT.gif`, one frame per word; numbered the same way.
        html: `OUT.html`, one self-contained page with every result.
        images: the image file of each result (default: each result's `image`).
        hard: as for `caption_figure`.
        source: names the results in error messages.
        title: the viewer page's title.
        overlay_option: the option that named `overlay`, for messages.
        **render_kwargs: `columns`, `panel_size`, `smooth`, `dim`, `glow`, ... for the overlays.

    Returns:
        The paths written.

    Example:
    >>> results = json.loads(Path("caption.json").read_text())       # doctest: +SKIP
    >>> write_caption_figures(results, overlay="out/cap.png")       # doctest: +SKIP
    [PosixPath('out/cap-1.png'), PosixPath('out/cap-2.png')]
    """
    drawn = []
    for i, result in enumerate(results):
        if result is None:
            continue
        where = source if len(results) == 1 else f"{source} {i}"
        figure = caption_figure(result, hard, where)
        image = images[i] if images is not None and images[i] is not None else figure.image
        if not image:
            raise UserError(f"{where}: no 'image' to draw on; give the image file")
        drawn.append((i, figure, read_image_bytes(image)))

    # The images drawn on are inputs too: no figure may replace one (`OUT-2.png` among them).
    sources = [images[i] if images is not None and images[i] is not None else figure.image
               for i, figure, _ in drawn]
    check_figure_paths(overlay, gif, html, sources, len(results), overlay_option)
    written = []
    options = {k: v for k, v in render_kwargs.items() if k != "columns"}
    for path_out, render, option in ((overlay, render_caption_overlay, overlay_option),
                                     (gif, render_caption_gif, "--gif")):
        if not path_out:
            continue
        paths = numbered_paths(path_out, len(results))
        for i, figure, raw in drawn:
            kwargs = render_kwargs if render is render_caption_overlay else options
            with reported_write(paths[i], option):
                render(raw, figure.words, figure.maps, paths[i],
                       hard_indices=figure.hard_indices, **kwargs)
            written.append(paths[i])
    if html and drawn:
        items = [_viewer_item(figure, raw) for _, figure, raw in drawn]
        with reported_write(html, "--html"):
            written.append(write_html_viewer(items, html, title=title))
    return written


def _viewer_item(figure: CaptionFigure, raw: bytes) -> dict[str, Any]:
    item = {"kind": "caption", "image_png": raw, "words": figure.words,
            "attention": figure.maps, "title": figure.title}
    if figure.hard_indices is not None:
        item["hard_indices"] = figure.hard_indices
    return item

