"""One self-contained HTML page to explore attention: hover a word, see where it looked.

The page works opened straight from disk (`file://`) with no network: images are embedded as
base64 `data:` URIs, the attention weights as a JSON block, and the CSS and JavaScript inline.

- A caption item shows the image at its own aspect ratio (the longest side `DISPLAY_SIDE` CSS
  pixels) with a canvas of the same size laid over it. Hovering (or clicking, or focusing) a
  word draws that step's `h x w` map on the canvas, scaled to the image with the browser's
  smoothing, as the mask `render_caption_overlay` draws: a black layer of opacity
  `dim * (1 - m)` dims what was not attended and a white one of opacity `glow * m` lifts what
  was, which composites to the same `shade_attention` formula; a hard-attention pick is
  outlined.
- A translation item shows the source and target sentences. Hovering a target word shades
  each source word's background with opacity `weight / max(weights of that row)`, and hovering
  a source word shades the target words by its column. Multi-head weights get a head picker.

Stable hooks for tests and styling: each item is `section.viz-item#viz-item-{i}` with
`data-kind`; caption words are `span.viz-word[data-item][data-step]`, the overlay is
`canvas#viz-overlay-{i}.viz-overlay` whose `data-step` tells the step drawn (-1 for none);
translation words are `span.viz-src[data-index]` and `span.viz-tgt[data-index]`, each carrying
the shown weight in `data-weight`; the hovered word gets the class `active`.

Dimensions: `T` target steps (words), `S` source tokens, `H` heads, `h x w` an image's
attention grid.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from common.errors import DataError, UserError
from common.images import declared_size, shown_as_stored
from common.registry import Registry
from common.viz.inputs import (
    as_alignment,
    as_attention_maps,
    as_hard_indices,
    as_rgb_image,
    as_tokens,
)
from common.viz.overlay import DIM, GLOW, MARK_COLOR

ITEM_KINDS = Registry("viewer item kind")

# The longest side an image is shown at, in CSS pixels, and kept at when re-encoded.
DISPLAY_SIDE = 400
EMBED_SIDE = 800
DECIMALS = 4
EMBEDDABLE = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}


def write_html_viewer(
    items: Sequence[Mapping[str, Any]],
    out_path: str | Path,
    title: str = "Attention viewer",
    dim: float = DIM,
    glow: float = GLOW,
) -> Path:
    """Write one self-contained HTML page showing several attention examples.

    Args:
        items: a list of dicts, each one of
            `{"kind": "caption", "image_png": bytes or (Hi, Wi, 3) uint8 array,
              "words": [T words], "attention": (T, h, w) (or (T, L), L square),
              "title": str (optional), "hard_indices": (T,) ints (optional)}` or
            `{"kind": "translation", "source_tokens": [S tokens], "target_tokens": [T tokens],
              "weights": (T, S) or (H, T, S), "title": str (optional)}`.
        out_path: the `.html` file to write (parent folders are created).
        title: the page title.
        dim, glow: the caption mask, as for `render_caption_overlay`: how far the unattended
            parts go towards black and the most attended towards white.

    Returns:
        The path written.

    Example:
    >>> write_html_viewer([{"kind": "translation", "source_tokens": ["la", "casa"],
    ...                     "target_tokens": ["the", "house"], "weights": np.eye(2)}],
    ...                   "/tmp/viewer.html")
    PosixPath('/tmp/viewer.html')
    """
    if isinstance(items, Mapping) or not isinstance(items, Sequence) or not items:
        raise UserError(f"expected a non-empty list of viewer items, got {type(items).__name__}")
    for name, value in (("dim", dim), ("glow", glow)):
        if not 0.0 <= float(value) <= 1.0:
            raise UserError(f"expected {name} in [0, 1], got {value}")
    sections, data = [], []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise UserError(f"expected viewer item {index} as a dict, got {type(item).__name__}")
        build = ITEM_KINDS.get(item.get("kind"))
        section, payload = build(index, item)
        sections.append(section)
        data.append(payload)
    blob = json.dumps({"dim": float(dim), "glow": float(glow),
                       "mark": "rgb({}, {}, {})".format(*MARK_COLOR), "items": data},
                      separators=(",", ":"))
    page = _PAGE.format(
        title=html.escape(title),
        css=_CSS,
        body="\n".join(sections),
        data=blob.replace("<", "\\u003c"),
        js=_JS,
    )
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


@ITEM_KINDS.register("caption")
def _caption_item(index: int, item: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    _check_keys(index, item, required={"image_png", "words", "attention"},
                optional={"title", "hard_indices"})
    words = as_tokens(item["words"], "words")
    maps = as_attention_maps(item["attention"], len(words))
    picks = item.get("hard_indices")
    if picks is not None:
        picks = as_hard_indices(picks, len(words), maps.shape[1:]).tolist()
    uri, (width, height) = _image_data_uri(item["image_png"])
    scale = DISPLAY_SIDE / max(width, height)
    shown_w, shown_h = max(1, round(width * scale)), max(1, round(height * scale))
    spans = " ".join(
        f'<span class="viz-word" data-item="{index}" data-step="{t}" tabindex="0">'
        f"{html.escape(word)}</span>"
        for t, word in enumerate(words)
    )
    section = f"""<section class="viz-item viz-caption" id="viz-item-{index}" data-item="{index}"
 data-kind="caption">
<h2>{html.escape(str(item.get("title") or f"Caption {index + 1}"))}</h2>
<div class="viz-figure" style="width:{shown_w}px;height:{shown_h}px">
<img class="viz-image" alt="" width="{shown_w}" height="{shown_h}" src="{uri}">
<canvas class="viz-overlay" id="viz-overlay-{index}" width="{shown_w}" height="{shown_h}"
 data-step="-1"></canvas>
</div>
<p class="viz-words">{spans}</p>
<p class="viz-hint">Hover or click a word to see where the model looked: the image stays
bright there and is dimmed where it did not look.</p>
</section>"""
    payload = {"kind": "caption", "attention": _rounded(maps), "hard_indices": picks}
    return section, payload


@ITEM_KINDS.register("translation")
def _translation_item(index: int, item: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    _check_keys(index, item, required={"source_tokens", "target_tokens", "weights"},
                optional={"title"})
    source = as_tokens(item["source_tokens"], "source_tokens")
    target = as_tokens(item["target_tokens"], "target_tokens")
    raw = np.asarray(item["weights"], dtype=object)
    if raw.ndim == 3:
        heads = as_alignment(item["weights"], len(target), len(source), heads=True)
        matrices = [heads.mean(axis=0), *heads]
        names = ["mean of heads", *(f"head {h}" for h in range(len(heads)))]
    else:
        matrices = [as_alignment(item["weights"], len(target), len(source))]
        names = []
    picker = ""
    if names:
        options = "".join(f'<option value="{k}">{name}</option>' for k, name in enumerate(names))
        picker = (f'<label class="viz-head-label">show <select class="viz-head" '
                  f'data-item="{index}">{options}</select></label>')
    src = " ".join(
        f'<span class="viz-src" data-item="{index}" data-index="{s}" data-weight="0" '
        f'tabindex="0">{html.escape(token)}</span>'
        for s, token in enumerate(source)
    )
    tgt = " ".join(
        f'<span class="viz-tgt" data-item="{index}" data-index="{t}" data-weight="0" '
        f'tabindex="0">{html.escape(token)}</span>'
        for t, token in enumerate(target)
    )
    section = f"""<section class="viz-item viz-translation" id="viz-item-{index}"
 data-item="{index}" data-kind="translation">
<h2>{html.escape(str(item.get("title") or f"Translation {index + 1}"))}</h2>
{picker}
<p class="viz-line"><span class="viz-side">source</span> {src}</p>
<p class="viz-line"><span class="viz-side">target</span> {tgt}</p>
<p class="viz-hint">Hover a target word to shade the source words it attended to (and a
source word to shade the target words that attended to it).</p>
</section>"""
    payload = {"kind": "translation", "weights": [_rounded(m) for m in matrices]}
    return section, payload


def _check_keys(index: int, item: Mapping[str, Any], required: set[str],
                optional: set[str]) -> None:
    keys = set(item) - {"kind"}
    missing = sorted(required - keys)
    unknown = sorted(keys - required - optional)
    if missing or unknown:
        raise UserError(
            f"viewer item {index} ({item['kind']}): missing keys {missing}, unknown keys "
            f"{unknown}; expected {sorted(required)} and optionally {sorted(optional)}"
        )


def _image_data_uri(image: Any) -> tuple[str, tuple[int, int]]:
    """A `data:` URI of the image and its size; encoded bytes are embedded as they are.

    Bytes a browser would show otherwise than the model sees them are re-encoded as PNG of
    the model's pixels (`common.images.load_image`): an EXIF orientation other than "upright"
    (turned, with no tag left for a browser to apply again), transparency (the model reads
    the colour under it; a browser shows the page through it) and animation (the model reads
    the first frame).
    """
    if isinstance(image, (bytes, bytearray, memoryview)):
        raw = bytes(image)
        try:
            with Image.open(io.BytesIO(raw)) as probe:
                kind, size = probe.format, probe.size
                upright = (shown_as_stored(probe, raw) and "A" not in probe.mode
                           and "transparency" not in probe.info
                           and getattr(probe, "n_frames", 1) == 1)
        except Exception:  # PIL raises several unrelated types for bad bytes
            where = f"the image bytes ({len(raw)} bytes)"
            declared_size(raw, where)  # raises the one-line DataError that says what is wrong
            raise DataError(f"{where}: unreadable image header") from None
        if kind in EMBEDDABLE and upright:
            return f"data:{EMBEDDABLE[kind]};base64,{base64.b64encode(raw).decode()}", size
    picture = as_rgb_image(image)
    size = picture.size
    if max(size) > EMBED_SIDE:
        picture = picture.copy()
        picture.thumbnail((EMBED_SIDE, EMBED_SIDE))
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return f"data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}", size


def _rounded(values: np.ndarray) -> list[Any]:
    return np.round(values.astype(np.float64), DECIMALS).tolist()


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
<h1>{title}</h1>
{body}
<script type="application/json" id="viz-data">{data}</script>
<script>{js}</script>
</body>
</html>
"""

_CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
.viz-item { border-top: 1px solid #ccc; padding: 0.5em 0 1em; }
.viz-figure { position: relative; }
.viz-image, .viz-overlay { position: absolute; left: 0; top: 0; }
.viz-overlay { pointer-events: none; }
.viz-words, .viz-line { max-width: 60em; line-height: 2.2; }
.viz-word, .viz-src, .viz-tgt { padding: 0.15em 0.3em; border-radius: 3px; cursor: pointer; }
.viz-word:hover, .viz-tgt:hover, .viz-src:hover { outline: 1px solid #999; }
.viz-word.active, .viz-tgt.active, .viz-src.active { outline: 2px solid #d33; }
.viz-side { display: inline-block; width: 4.5em; color: #888; font-size: 0.85em; }
.viz-hint { color: #888; font-size: 0.85em; }
"""

_JS = """
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("viz-data").textContent);

  function setActive(section, selector, element) {
    section.querySelectorAll(selector).forEach(function (other) {
      other.classList.toggle("active", other === element);
    });
  }

  // One smoothed layer of the map: `color` at opacity `level(m)`, m = weight / peak.
  function layer(map, peak, color, level) {
    var rows = map.length, cols = map[0].length;
    var small = document.createElement("canvas");
    small.width = cols;
    small.height = rows;
    var smallContext = small.getContext("2d");
    var pixels = smallContext.createImageData(cols, rows);
    for (var i = 0; i < rows; i++) {
      for (var j = 0; j < cols; j++) {
        var k = 4 * (i * cols + j);
        pixels.data[k] = pixels.data[k + 1] = pixels.data[k + 2] = color;
        pixels.data[k + 3] = Math.round(255 * level(map[i][j] / peak));
      }
    }
    smallContext.putImageData(pixels, 0, 0);
    return small;
  }

  function drawCaption(item, step, word) {
    var entry = DATA.items[item];
    var canvas = document.getElementById("viz-overlay-" + item);
    var context = canvas.getContext("2d");
    var map = entry.attention[step];
    var rows = map.length, cols = map[0].length, peak = 0;
    map.forEach(function (row) { row.forEach(function (v) { peak = Math.max(peak, v); }); });
    context.clearRect(0, 0, canvas.width, canvas.height);
    context.imageSmoothingEnabled = true;
    context.imageSmoothingQuality = "high";
    if (peak > 0) {  // an all-zero map shows the plain image
      // Black at dim * (1 - m), then white at glow * m: over the image this is
      // d = image * (1 - dim * (1 - m)), d + glow * m * (255 - d), as in the PNG figures.
      context.drawImage(layer(map, peak, 0, function (m) { return DATA.dim * (1 - m); }),
                        0, 0, canvas.width, canvas.height);
      context.drawImage(layer(map, peak, 255, function (m) { return DATA.glow * m; }),
                        0, 0, canvas.width, canvas.height);
    }
    if (entry.hard_indices) {
      var pick = entry.hard_indices[step];
      var cellW = canvas.width / cols, cellH = canvas.height / rows;
      var x = cellW * (pick % cols), y = cellH * Math.floor(pick / cols);
      context.lineWidth = 4;
      context.strokeStyle = "rgb(0, 0, 0)";
      context.strokeRect(x + 2, y + 2, cellW - 4, cellH - 4);
      context.lineWidth = 2;
      context.strokeStyle = DATA.mark;
      context.strokeRect(x + 2, y + 2, cellW - 4, cellH - 4);
    }
    canvas.dataset.step = String(step);
    setActive(word.closest(".viz-item"), ".viz-word", word);
  }

  function currentWeights(item) {
    var entry = DATA.items[item];
    var picker = document.querySelector('.viz-head[data-item="' + item + '"]');
    return entry.weights[picker ? Number(picker.value) : 0];
  }

  function shade(section, selector, values, word) {
    var peak = Math.max.apply(null, values.concat([0]));
    section.querySelectorAll(selector).forEach(function (element) {
      var value = values[Number(element.dataset.index)];
      var opacity = peak > 0 ? value / peak : 0;
      element.style.backgroundColor = "rgba(255, 140, 0, " + opacity.toFixed(3) + ")";
      element.dataset.weight = String(value);
      element.title = "weight " + value.toFixed(3);
    });
    section.querySelectorAll(".viz-src, .viz-tgt").forEach(function (other) {
      other.classList.toggle("active", other === word);
    });
  }

  function showTranslation(word) {
    var item = Number(word.dataset.item), index = Number(word.dataset.index);
    var section = word.closest(".viz-item"), weights = currentWeights(item);
    if (word.classList.contains("viz-tgt")) {
      shade(section, ".viz-src", weights[index], word);
    } else {
      shade(section, ".viz-tgt", weights.map(function (row) { return row[index]; }), word);
    }
    section.dataset.shown = (word.classList.contains("viz-tgt") ? "target:" : "source:") + index;
  }

  function onPoint(event) {
    var target = event.target;
    if (!(target instanceof Element)) { return; }
    var word = target.closest(".viz-word");
    if (word) { drawCaption(Number(word.dataset.item), Number(word.dataset.step), word); return; }
    var token = target.closest(".viz-src, .viz-tgt");
    if (token) { showTranslation(token); }
  }

  document.addEventListener("mouseover", onPoint);
  document.addEventListener("click", onPoint);
  document.addEventListener("focusin", onPoint);
  document.addEventListener("change", function (event) {
    var picker = event.target.closest && event.target.closest(".viz-head");
    if (!picker) { return; }
    var section = picker.closest(".viz-item");
    var active = section.querySelector(".viz-src.active, .viz-tgt.active");
    if (active) { showTranslation(active); }
  });
})();
"""
