"""The HTML viewer: one self-contained file, and hovering words works in a real browser."""

import base64
import io
import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest
from PIL import Image, ImageOps

from common.errors import DataError, UserError
from common.registry import UnknownNameError
from common.viz import shade_attention, write_html_viewer
from tests.browser import CANVAS_ALPHAS, CANVAS_PNG, open_page

LIGHT = 215  # the caption item's light grey: the old white glow barely showed on it

SOURCE, TARGET = ["la", "casa", "verde", "."], ["the", "green", "house", "."]
ALIGNMENT = np.array([[0.9, 0.05, 0.03, 0.02],
                      [0.05, 0.1, 0.8, 0.05],
                      [0.1, 0.7, 0.1, 0.1],
                      [0.0, 0.0, 0.1, 0.9]])


def _caption_item(image=None):
    maps = np.zeros((3, 4, 4))
    maps[0, 0, 0] = 1.0  # "a": top-left
    maps[1, 3, 3] = 1.0  # "dog": bottom-right
    maps[2] = 1 / 16  # "<end>": everywhere
    if image is None:
        image = np.full((60, 90, 3), LIGHT, np.uint8)
    return {"kind": "caption", "image_png": image, "words": ["a", "dog", "<end>"],
            "attention": maps, "title": "a dog", "hard_indices": [0, 15, 5]}


def _items():
    heads = np.stack([ALIGNMENT, ALIGNMENT[:, ::-1]])
    return [
        _caption_item(),
        {"kind": "translation", "source_tokens": SOURCE, "target_tokens": TARGET,
         "weights": ALIGNMENT, "title": "es -> en"},
        {"kind": "translation", "source_tokens": SOURCE, "target_tokens": TARGET,
         "weights": heads},
    ]


class _Collector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _parse(path):
    collector = _Collector()
    collector.feed(path.read_text(encoding="utf-8"))
    return collector.tags


def _data(text):
    match = re.search(r'<script type="application/json" id="viz-data">(.*?)</script>', text,
                      re.S)
    return json.loads(match.group(1))


def test_viewer_is_one_self_contained_file(tmp_path):
    path = write_html_viewer(_items(), tmp_path / "out" / "viewer.html")
    text = path.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text
    tags = _parse(path)
    assert not [tag for tag, attrs in tags if tag == "link"]
    assert not [attrs for tag, attrs in tags if tag == "script" and "src" in attrs]
    sources = [attrs["src"] for tag, attrs in tags if "src" in attrs]
    assert sources and all(src.startswith("data:image/png;base64,") for src in sources)
    words = [attrs for tag, attrs in tags if "viz-word" in attrs.get("class", "").split()]
    assert [(w["data-item"], w["data-step"]) for w in words] == [("0", "0"), ("0", "1"),
                                                                 ("0", "2")]
    for kind, count in [("viz-src", 8), ("viz-tgt", 8), ("viz-overlay", 1), ("viz-head", 1)]:
        assert len([a for t, a in tags if kind in a.get("class", "").split()]) == count, kind


def test_embedded_data_matches_the_inputs(tmp_path):
    items = _items()
    data = _data(write_html_viewer(items, tmp_path / "v.html").read_text(encoding="utf-8"))
    caption, single, multi = data["items"]
    np.testing.assert_allclose(caption["attention"], items[0]["attention"], atol=1e-4)
    assert caption["hard_indices"] == [0, 15, 5]
    np.testing.assert_allclose(single["weights"], [ALIGNMENT], atol=1e-4)
    heads = items[2]["weights"]
    np.testing.assert_allclose(multi["weights"], [heads.mean(0), *heads], atol=1e-4)


def test_png_bytes_are_embedded_as_given(tmp_path):
    buffer = io.BytesIO()
    Image.new("RGB", (20, 10), (10, 200, 30)).save(buffer, format="PNG")
    item = _caption_item(image=buffer.getvalue())
    tags = _parse(write_html_viewer([item], tmp_path / "v.html"))
    (src,) = [attrs["src"] for tag, attrs in tags if tag == "img"]
    assert base64.b64decode(src.split(",", 1)[1]) == buffer.getvalue()
    (img,) = [attrs for tag, attrs in tags if tag == "img"]
    assert (int(img["width"]), int(img["height"])) == (400, 200)  # aspect ratio kept


def _transparent_png():
    """A fully transparent red RGBA PNG: the model reads red, a browser shows the page."""
    buffer = io.BytesIO()
    Image.new("RGBA", (50, 40), (255, 0, 0, 0)).save(buffer, format="PNG")
    return buffer.getvalue()


def _palette_gif_with_transparency():
    picture = Image.new("P", (30, 20), 1)
    picture.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    buffer = io.BytesIO()
    picture.save(buffer, format="GIF", transparency=1)
    return buffer.getvalue()


def _animated_gif():
    frames = [Image.new("RGB", (30, 20), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:])
    return buffer.getvalue()


@pytest.mark.parametrize("make", [_transparent_png, _palette_gif_with_transparency,
                                  _animated_gif])
def test_bytes_a_browser_would_show_otherwise_are_the_models_pixels(tmp_path, make):
    """Transparency (the page shows through) and animation (frames the model never read) are
    re-encoded as the opaque pixels the model and the PNG overlay see."""
    from common.images import load_image

    data = make()
    tags = _parse(write_html_viewer([_caption_item(image=data)], tmp_path / "v.html"))
    (img,) = [attrs for tag, attrs in tags if tag == "img"]
    assert img["src"].startswith("data:image/png;base64,")
    with Image.open(io.BytesIO(base64.b64decode(img["src"].split(",", 1)[1]))) as shown:
        assert shown.mode == "RGB"
        np.testing.assert_array_equal(np.asarray(shown), np.asarray(load_image(data)))


def _jpeg_turned_by_exif(width=320, height=240):
    """JPEG bytes of a `width x height` image, red on its left half and blue on its right,
    whose EXIF says "turn 90 degrees clockwise to show it"."""
    exif = Image.Exif()
    exif[0x0112] = 6
    pixels = np.zeros((height, width, 3), np.uint8)
    pixels[:, : width // 2] = (200, 60, 60)
    pixels[:, width // 2:] = (60, 60, 200)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=95, exif=exif.tobytes())
    return buffer.getvalue()


def test_exif_turned_bytes_are_shown_upright_as_the_model_sees_them(tmp_path):
    # The model reads the photo turned upright (common.images.load_image): the page shows that,
    # re-encoded without the tag (a browser would turn it once more), at 3:4 in a 300x400 box.
    data = _jpeg_turned_by_exif()
    tags = _parse(write_html_viewer([_caption_item(image=data)], tmp_path / "v.html"))
    (img,) = [attrs for tag, attrs in tags if tag == "img"]
    assert img["src"].startswith("data:image/png;base64,")
    with Image.open(io.BytesIO(base64.b64decode(img["src"].split(",", 1)[1]))) as shown:
        assert shown.size == (240, 320) and "exif" not in shown.info
        with Image.open(io.BytesIO(data)) as photo:
            reference = np.asarray(ImageOps.exif_transpose(photo).convert("RGB"), float)
        np.testing.assert_array_equal(np.asarray(shown.convert("RGB"), float), reference)
        top, bottom = np.asarray(shown)[:20].mean((0, 1)), np.asarray(shown)[-20:].mean((0, 1))
        assert top[0] > top[2] and bottom[2] > bottom[0]  # red on top once turned clockwise
    assert (int(img["width"]), int(img["height"])) == (300, 400)


def test_text_is_escaped(tmp_path):
    item = {"kind": "translation", "source_tokens": ["<b>", "</script>"],
            "target_tokens": ["&"], "weights": [[0.5, 0.5]], "title": "<i>t</i>"}
    text = write_html_viewer([item], tmp_path / "v.html").read_text(encoding="utf-8")
    assert "<b>" not in text and "<i>" not in text and "&lt;b&gt;" in text
    assert text.count("</script>") == 2  # the data block and the code, nothing else


@pytest.mark.parametrize("items, error, message", [
    ([{"kind": "video"}], UnknownNameError, "caption, translation"),
    ([{"kind": "caption", "words": []}], UserError, "missing keys ['attention', 'image_png']"),
    ([{**_caption_item(), "colour": 1}], UserError, "unknown keys ['colour']"),
    ([{**_caption_item(), "words": ["a"]}], UserError, "one attention map per word"),
    ([{**_caption_item(), "image_png": b"not an image"}], DataError, "not an image"),
    ([], UserError, "non-empty list"),
])
def test_bad_items_are_user_errors(tmp_path, items, error, message):
    with pytest.raises(error, match=re.escape(message)):
        write_html_viewer(items, tmp_path / "v.html")


def shown_pixels(page, item):
    """What the browser shows of a caption item's figure (image and overlay), `(h, w, 3)`."""
    shot = page.locator(f"#viz-item-{item} .viz-figure").screenshot()
    return np.asarray(Image.open(io.BytesIO(shot)).convert("RGB"), dtype=np.int32)


def test_hovering_words_in_a_real_browser(tmp_path):
    path = write_html_viewer(_items(), tmp_path / "viewer.html")
    with open_page(path.resolve().as_uri()) as (page, errors, requests):
        canvas = page.locator("#viz-overlay-0")
        width, height = (int(canvas.get_attribute(a)) for a in ("width", "height"))
        # "a" looks at the top-left cell, "dog" at the bottom-right one.
        points = [(width // 16, height // 16), (width - width // 12, height - height // 12)]
        assert canvas.get_attribute("data-step") == "-1"
        assert canvas.evaluate(CANVAS_ALPHAS, points) == [0, 0]  # nothing drawn yet
        empty = canvas.evaluate(CANVAS_PNG)
        # (the screenshot may hold one more row of page, the figure lying at a fractional y)
        assert (shown_pixels(page, 0)[:height - 1, :width] == LIGHT).all()

        # What the page shows over the light grey is the PNG figures' mask: attended pixels
        # lifted to 215 + 0.3 * 40 = 227, the others dimmed to 0.3 * 215 = 64.5.
        grey = np.full((1, 2, 3), LIGHT, np.uint8)
        attended, unattended = shade_attention(grey, np.array([[1.0, 0.0]]))[0, :, 0]
        for step, (bright, dark) in [(0, points), (1, points[::-1])]:
            page.hover(f'.viz-word[data-item="0"][data-step="{step}"]')
            assert canvas.get_attribute("data-step") == str(step)
            shown = shown_pixels(page, 0)
            (bx, by), (dx, dy) = bright, dark
            np.testing.assert_allclose(shown[by, bx], attended, atol=2)
            np.testing.assert_allclose(shown[dy, dx], unattended, atol=2)
            assert shown[by, bx].mean() - shown[dy, dx].mean() > 100
            if step == 0:
                first = canvas.evaluate(CANVAS_PNG)
        second = canvas.evaluate(CANVAS_PNG)
        assert len({empty, first, second}) == 3
        assert "active" in page.get_attribute('.viz-word[data-step="1"]', "class")

        sources = page.locator('.viz-src[data-item="1"]')
        before = [sources.nth(s).evaluate("e => getComputedStyle(e).backgroundColor")
                  for s in range(4)]
        page.hover('.viz-tgt[data-item="1"][data-index="1"]')  # "green" -> "verde"
        after = [sources.nth(s).evaluate("e => getComputedStyle(e).backgroundColor")
                 for s in range(4)]
        assert after != before
        weights = [float(sources.nth(s).get_attribute("data-weight")) for s in range(4)]
        np.testing.assert_allclose(weights, ALIGNMENT[1], atol=1e-4)
        assert after[2] == "rgb(255, 140, 0)"  # the largest weight is fully opaque
        opacities = [float(re.findall(r"[\d.]+", c)[3]) if c.startswith("rgba") else 1.0
                     for c in after]
        np.testing.assert_allclose(opacities, ALIGNMENT[1] / ALIGNMENT[1].max(), atol=2e-3)

        page.hover('.viz-tgt[data-item="1"][data-index="0"]')
        assert page.get_attribute('.viz-src[data-item="1"][data-index="0"]',
                                  "data-weight") == "0.9"

        # The head picker switches which matrix the shading reads.
        page.hover('.viz-tgt[data-item="2"][data-index="0"]')
        mean_weight = page.get_attribute('.viz-src[data-item="2"][data-index="0"]',
                                         "data-weight")
        page.select_option('.viz-head[data-item="2"]', "2")  # head 1: reversed sources
        head_weight = page.get_attribute('.viz-src[data-item="2"][data-index="0"]',
                                         "data-weight")
        assert (float(mean_weight), float(head_weight)) == (pytest.approx(0.46),
                                                            pytest.approx(0.02))

        shot = tmp_path / "viewer.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 1000
        assert errors == []
        assert all(url.startswith(("file:", "data:")) for url in requests), requests



def test_viewer_keeps_each_images_aspect_ratio_in_a_real_browser(tmp_path):
    buffer = io.BytesIO()
    Image.new("RGB", (320, 240), (LIGHT,) * 3).save(buffer, format="PNG")
    images = {"4:3 png": (buffer.getvalue(), (320, 240)),
              "3:4 array": (np.full((320, 240, 3), LIGHT, np.uint8), (240, 320)),
              "4:3 jpeg turned by exif": (_jpeg_turned_by_exif(), (240, 320))}
    items = [_caption_item(image=image) for image, _ in images.values()]
    path = write_html_viewer(items, tmp_path / "viewer.html")
    sizes = """img => [img.naturalWidth, img.naturalHeight, img.clientWidth, img.clientHeight]"""
    with open_page(path.resolve().as_uri()) as (page, errors, requests):
        for index, (name, (_, (width, height))) in enumerate(images.items()):
            image = page.locator(f"#viz-item-{index} .viz-image")
            natural_w, natural_h, shown_w, shown_h = image.evaluate(sizes)
            assert (natural_w, natural_h) == (width, height), name
            assert max(shown_w, shown_h) == 400, name
            assert abs(shown_w / shown_h - width / height) < 0.01, name
            # The overlay covers the picture exactly, so cells land where the model's were.
            assert page.locator(f"#viz-overlay-{index}").bounding_box() == image.bounding_box()
        assert errors == []
