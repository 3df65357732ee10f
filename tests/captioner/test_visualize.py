"""Caption attention drawn from caption results: `caption --overlay/--gif/--html` and `render`."""

import json
import re

import numpy as np
import pytest
from PIL import Image

from captioner.cli import main
from captioner.datasets import load_split
from captioner.visualize import caption_figure, input_order, select_results, write_caption_figures
from common.viz import shade_attention
from tests.browser import CANVAS_ALPHAS, CANVAS_PNG, open_page
from tests.captioner.test_cli import _one_line_error
from tests.common.viz.test_html_viewer import shown_pixels

# The image is 90x50 light grey: panels keep its aspect ratio, PANEL wide and PANEL_H high.
PANEL, PANEL_H, LABEL, GREY = 60, 33, 12, 200
MARK = (255, 40, 0)


def _result(image, hard=False):
    """Three words over a 2x3 grid: "a" looks top-left, "red" bottom-right, "circle" all over.

    The fourth row is the step that chose <end>, which has no word and is not drawn.
    """
    attention = np.zeros((4, 6))
    attention[0, 0] = 1.0
    attention[1, 5] = 0.7
    attention[1, 4] = 0.3
    attention[2] = 1 / 6
    attention[3, 2] = 1.0
    result = {"image": str(image), "caption": "a red circle", "words": ["a", "red", "circle"],
              "score": -1.5, "finished": True, "attention": attention.tolist(), "grid": [2, 3]}
    if hard:
        result["attention_kind"] = "hard"
    return result


@pytest.fixture
def grey_image(tmp_path):
    path = tmp_path / "grey.png"
    Image.new("RGB", (90, 50), (GREY, GREY, GREY)).save(path)  # 50 * 60 / 90 = 33.3
    return path


def _panel(figure, k, columns=2):
    """The image part of panel `k` of a figure drawn with PANEL, LABEL and `columns`."""
    array = np.asarray(figure).astype(int)
    x, y = (k % columns) * PANEL, (k // columns) * (PANEL_H + LABEL)
    return array[y:y + PANEL_H, x:x + PANEL]


def _cell_center(row, col, grid=(2, 3)):
    """(y, x) of a grid cell's centre inside a panel."""
    return int((row + 0.5) * PANEL_H / grid[0]), int((col + 0.5) * PANEL / grid[1])


def _draw(tmp_path, result, **kwargs):
    out = tmp_path / "overlay.png"
    write_caption_figures([result], overlay=out, panel_size=PANEL, label_height=LABEL,
                          columns=2, **kwargs)
    return Image.open(out).convert("RGB")


def test_overlay_has_one_panel_per_word_in_a_wrapping_grid(tmp_path, grey_image):
    figure = _draw(tmp_path, _result(grey_image))
    # The image and three words (not the <end> step) in rows of 2.
    # The image and three words (not the <end> step) in rows of 2, at the image's 9:5.
    assert figure.size == (2 * PANEL, 2 * (PANEL_H + LABEL))


def test_mask_keeps_where_the_weight_is_high_and_dims_the_rest(tmp_path, grey_image):
    figure = _draw(tmp_path, _result(grey_image))
    plain, a, red, circle = (_panel(figure, k) for k in range(4))
    assert (plain == GREY).all()
    grey = np.full((1, 1, 3), GREY, np.uint8)
    attended, unattended = (int(shade_attention(grey, np.array([[w]]))[0, 0, 0])
                            for w in (1.0, 0.0))
    assert abs(attended - 216.5) <= 0.5 and unattended == 60  # 200 + 0.3 * 55, 0.3 * 200
    top_left, bottom_right = _cell_center(0, 0), _cell_center(1, 2)
    # Attended cells keep their grey, lifted a little; the others are dimmed.
    assert a[top_left].min() > GREY and (a[bottom_right] == unattended).all()
    assert red[bottom_right].min() > GREY and (red[top_left] == unattended).all()
    # The 0.3 beside the 0.7: between the two, clearly apart from both.
    assert unattended + 40 < red[_cell_center(1, 1)].min() < attended - 40
    assert (circle == attended).all()  # uniform attention: the whole panel is attended
    assert not (np.asarray(figure) == MARK).all(-1).any()  # soft: nothing marked


def test_hard_attention_marks_the_most_likely_cell(tmp_path, grey_image):
    figure = _draw(tmp_path, _result(grey_image, hard=True))
    red = _panel(figure, 2)
    marked = (red == MARK).all(-1)
    rows, cols = np.nonzero(marked)
    # The outline lies in the bottom-right cell (the 0.7), not the 0.3 one beside it.
    assert marked.any() and rows.min() >= PANEL_H // 2 and cols.min() >= 2 * PANEL // 3
    soft = _draw(tmp_path, _result(grey_image, hard=True), hard=False)
    assert not (np.asarray(soft) == MARK).all(-1).any()


def test_gif_has_a_frame_per_word_and_the_page_every_result(tmp_path, grey_image):
    gif, page = tmp_path / "cap.gif", tmp_path / "cap.html"
    results = [_result(grey_image), None, _result(grey_image, hard=True)]
    written = write_caption_figures(results, gif=gif, html=page, panel_size=PANEL)
    assert written == [tmp_path / "cap-1.gif", tmp_path / "cap-3.gif", page]
    with Image.open(tmp_path / "cap-1.gif") as animation:
        assert animation.n_frames == 4
    data = json.loads(re.search(r'id="viz-data">(.*?)</script>', page.read_text(), re.S)[1])
    assert [item["hard_indices"] for item in data["items"]] == [None, [0, 5, 0]]
    assert np.asarray(data["items"][0]["attention"]).shape == (3, 2, 3)


def test_results_are_picked_by_index_or_image_and_kept_in_input_order():
    results = [{"image": "data/a.png"}, {"image": "data/b.png"}]
    assert select_results(results) == [0, 1]
    assert select_results(results, index=-1) == [1]
    assert select_results(results, image="data/b.png") == [1]
    assert select_results(results, image="elsewhere/a.png") == [0]  # by file name
    assert input_order(["a", "x", "b"], [{"image": "a"}, {"image": "b"}]) == [
        {"image": "a"}, None, {"image": "b"}]
    figure = caption_figure({"words": [], "attention": [], "grid": [2, 2]})
    assert figure.maps.shape == (0, 2, 2)


def _bad(result, **changes):
    return [{**result, **changes}]


@pytest.mark.parametrize("content, extra, needle", [
    ("{not json", [], "not valid JSON"),
    ([], [], "non-empty JSON list"),
    ([{"words": ["a"]}], [], "missing keys ['attention', 'grid']"),
    ("grid", [], "expected 'grid' as [h, w]"),
    ("columns", [], "expected 'attention' of shape (steps, 6) for a 2x3 grid, got shape (4, 5)"),
    ("rows", [], "at least one attention row per word (3 words), got 2 rows"),
    ("words", [], "expected 'words' as a list of strings"),
    ("kind", [], "expected 'attention_kind' as one of soft, hard"),
    ("ok", ["--image", "{tmp}/missing.png"], "missing.png: no such image file"),
    ("ok", ["--image", "{tmp}/broken.png"], "broken.png: not a readable image"),
    ("two", ["--index", "2"], "--index 2: {tmp}/r.json holds 2 results; expected 0 to 1 "
                              "(or -2 to -1 from the end)"),
    ("two", ["--index", "-3"], "--index -3: {tmp}/r.json holds 2 results; expected 0 to 1 "
                               "(or -2 to -1 from the end)"),
    ("two", ["--image", "{tmp}/other.png"], "no result is for that image"),
])
def test_render_reports_bad_input_in_one_line(capsys, tmp_path, grey_image, content, extra,
                                              needle):
    good = _result(grey_image)
    cases = {
        "ok": [good], "two": [good, good],
        "grid": _bad(good, grid=[2, "3"]),
        "columns": _bad(good, attention=np.ones((4, 5)).tolist()),
        "rows": _bad(good, attention=good["attention"][:2]),
        "words": _bad(good, words="a red circle"),
        "kind": _bad(good, attention_kind="firm"),
    }
    data = cases.get(content, content) if isinstance(content, str) else content
    (tmp_path / "r.json").write_text(data if isinstance(data, str) else json.dumps(data))
    (tmp_path / "broken.png").write_bytes(b"not a png")
    argv = ["render", "{tmp}/r.json", "--out", "{tmp}/o.png", *extra]
    err = _one_line_error(capsys, [a.format(tmp=tmp_path) for a in argv])
    assert needle.format(tmp=tmp_path) in err
    assert not (tmp_path / "o.png").exists()


@pytest.mark.parametrize("argv, needle", [
    (["render", "{tmp}/none.json", "--out", "{tmp}/o.png"], "none.json: no such file"),
    (["render", "{tmp}/r.json"], "nothing to draw"),
    (["render", "{tmp}/r.json", "--out", "{tmp}/o.jpg"], "expected a file name ending in .png"),
    (["render", "{tmp}/r.json", "--html", "{tmp}/no/dir/v.html"], "does not exist"),
    (["caption", "{tmp}", "x.png", "--gif", "{tmp}/o.png"], "ending in .gif"),
])
def test_bad_options_fail_before_any_work(capsys, tmp_path, argv, needle):
    (tmp_path / "r.json").write_text("[]")
    assert needle in _one_line_error(capsys, [a.format(tmp=tmp_path) for a in argv])


# -- a served model's answer: TensorFlow Serving's row and columnar bodies -----------------

def _served(result, width=6):
    """`result` as an exported captioner's outputs for one image: tokens padded with "" to
    `width`, attention as `(width, h, w)` maps with zeros after its steps."""
    words, steps = result["words"], len(result["attention"])
    attention = np.zeros((width, *result["grid"]))
    attention[:steps] = np.reshape(result["attention"], (steps, *result["grid"]))
    return {"captions": result["caption"], "tokens": words + [""] * (width - len(words)),
            "lengths": len(words), "scores": result["score"], "finished": result["finished"],
            "attention": attention.tolist(), "attention_lengths": steps}


def _columns(rows):
    return {key: [row[key] for row in rows] for key in rows[0]}


@pytest.mark.parametrize("body", ["row", "columnar", "options"])
def test_render_draws_a_served_answer_as_the_caption_json(capsys, tmp_path, grey_image, body):
    # `captioner render` of TensorFlow Serving's answer gives the figure of the same result as
    # `caption --json` prints it: the row format ({"predictions": [...]}), the columnar one
    # ({"outputs": {...}}), and caption_with_options' (its n-best outputs are not drawn).
    result = {**_result(grey_image), "image": ""}
    other = {**result, "words": ["circle"], "caption": "circle",
             "attention": list(reversed(result["attention"]))[:2]}
    rows = [_served(other), _served(result)]
    if body == "options":
        for row in rows:
            row.update(n_best_captions=[row["captions"]] * 2, n_best_scores=[-1.0, -2.0])
    answer = {"outputs": _columns(rows)} if body == "columnar" else {"predictions": rows}
    (tmp_path / "answer.json").write_text(json.dumps(answer))
    (tmp_path / "caption.json").write_text(json.dumps([other, result]))
    for name in ("answer", "caption"):
        argv = ["render", str(tmp_path / f"{name}.json"), "--index", "1", "--image",
                str(grey_image), "--out", str(tmp_path / f"{name}.png")]
        assert main(argv) == 0, capsys.readouterr().err
    drawn = np.asarray(Image.open(tmp_path / "caption.png"))
    assert drawn.shape[1] == 4 * 224  # the image and three words, not the <end> step
    assert np.array_equal(np.asarray(Image.open(tmp_path / "answer.png")), drawn)


@pytest.mark.parametrize("answer, needle", [
    ({"predictions": [{"captions": "a"}]}, "predictions[0]: missing outputs ['tokens'"),
    ({"predictions": "a cat"}, "'predictions' is not a non-empty list of objects"),
    ({"outputs": {"captions": ["a"], "tokens": [["a"], ["b"]]}}, "not lists of one length"),
    ({"outputs": ["a"]}, "'outputs' is not an object of outputs"),
    ({"error": "Invalid JPEG data"}, "a server's error answer (Invalid JPEG data)"),
    ("attention", "expected 'attention' as (steps, h, w)"),
    ("steps", "'attention_lengths' is 9, but 'attention' holds 6 steps"),
    ("lengths", "expected 'lengths' as an integer >= 0"),
])
def test_render_refuses_a_bad_served_answer_in_one_line(capsys, tmp_path, grey_image, answer,
                                                        needle):
    row = _served(_result(grey_image))
    changed = {"attention": {"attention": [[0.5, 0.5]]}, "steps": {"attention_lengths": 9},
               "lengths": {"lengths": "3"}}
    if isinstance(answer, str):
        answer = {"predictions": [{**row, **changed[answer]}]}
    (tmp_path / "answer.json").write_text(json.dumps(answer))
    err = _one_line_error(capsys, ["render", str(tmp_path / "answer.json"), "--image",
                                   str(grey_image), "--out", str(tmp_path / "o.png")])
    assert needle in err
    assert not (tmp_path / "o.png").exists()


@pytest.mark.slow
def test_render_draws_what_captioner_serve_answered(capsys, tmp_path, exported_captioner,
                                                    shape_images):
    # A real server's answers, both formats, drawn as `caption --json` of the same export is.
    from common.serving.app import create_app, serve_in_background
    from tests.captioner.test_serve import b64, post

    image = shape_images[1]
    assert main(["caption", str(exported_captioner), str(image), "--json"]) == 0
    (tmp_path / "caption.json").write_text(capsys.readouterr().out)
    bodies = {"row": {"instances": [b64(image.read_bytes())]},
              "columnar": {"signature_name": "caption_with_options",
                           "inputs": {"images": [b64(image.read_bytes())], "n_best": 2}}}
    with serve_in_background(create_app(exported_captioner, "captioner")) as url:
        for name, body in bodies.items():
            code, answer = post(f"{url}/v1/models/captioner:predict", body)
            assert code == 200, answer
            (tmp_path / f"{name}.json").write_text(json.dumps(answer))
    figures = {}
    for name in ("caption", *bodies):
        out = tmp_path / f"{name}.png"
        assert main(["render", str(tmp_path / f"{name}.json"), "--image", str(image),
                     "--out", str(out)]) == 0, capsys.readouterr().err
        figures[name] = np.asarray(Image.open(out), int)
    for name in bodies:  # the JSON's 4 decimals against the answer's float32 digits
        assert figures[name].shape == figures["caption"].shape
        assert np.abs(figures[name] - figures["caption"]).max() <= 1


# -- from a trained run: caption --json, then render without the model ---------------------

@pytest.fixture(scope="module")
def captioned(tmp_path_factory):
    """A tiny run's `caption --json --overlay --html` over two shapes images and a broken one."""
    tmp = tmp_path_factory.mktemp("captioned")
    run = tmp / "run"
    assert main(["train", "--preset", "tiny", "--out", str(run), "--seed", "5"]) == 0
    images = []
    for i, record in enumerate(load_split("shapes", "test", num_images=2)):
        images.append(tmp / f"shapes{i}.png")
        Image.fromarray(record.image).resize((96, 96)).save(images[-1])
    broken = tmp / "broken.png"
    broken.write_bytes(b"not a png")
    return tmp, run, [images[0], broken, images[1]]


@pytest.mark.slow
def test_caption_overlays_and_render_from_its_json_agree(capsys, captioned):
    tmp, run, images = captioned
    argv = ["caption", str(run), *map(str, images), "--json", "--overlay", str(tmp / "cap.png"),
            "--html", str(tmp / "cap.html")]
    assert main(argv) == 2  # the broken image is reported; the others are drawn
    captured = capsys.readouterr()
    (tmp / "caption.json").write_text(captured.out)
    results = json.loads(captured.out)
    assert "broken.png" in captured.err and "wrote" in captured.err
    # Files are numbered by input: the broken second image gets none.
    assert (tmp / "cap-1.png").is_file() and (tmp / "cap-3.png").is_file()
    assert not (tmp / "cap-2.png").exists()
    page = (tmp / "cap.html").read_text()
    assert page.count('class="viz-item viz-caption"') == 2

    out = tmp / "rendered.png"
    assert main(["render", str(tmp / "caption.json"), "--image", str(images[2]),
                 "--out", str(out), "--gif", str(tmp / "rendered.gif")]) == 0
    words = results[1]["words"]
    drawn, rendered = Image.open(tmp / "cap-3.png"), Image.open(out)
    columns = min(5, len(words) + 1)
    rows = -(-(len(words) + 1) // columns)
    assert rendered.size == (columns * 224, rows * (224 + 32))
    # Drawn from the JSON without the model: the same picture as `caption --overlay` (the JSON
    # rounds the weights to 4 decimals).
    difference = np.abs(np.asarray(drawn, int) - np.asarray(rendered, int))
    assert difference.max() <= 1
    with Image.open(tmp / "rendered.gif") as animation:
        assert animation.n_frames == len(words) + 1


@pytest.mark.slow
def test_render_marks_a_hard_runs_picks_as_caption_does(capsys, captioned):
    # The JSON says the attention kind, so `render` outlines hard attention's picked cells
    # without being told (`--hard`), as `caption --overlay` does from the model.
    tmp, _, images = captioned
    run = tmp / "hard-run"
    assert main(["train", "--preset", "tiny", "--attention", "hard", "--out", str(run),
                 "--seed", "5"]) == 0
    capsys.readouterr()
    assert main(["caption", str(run), str(images[0]), "--json", "--overlay",
                 str(tmp / "hard.png")]) == 0
    (tmp / "hard.json").write_text(capsys.readouterr().out)
    assert json.loads((tmp / "hard.json").read_text())[0]["attention_kind"] == "hard"
    assert main(["render", str(tmp / "hard.json"), "--out", str(tmp / "hard-rendered.png")]) == 0
    drawn = np.asarray(Image.open(tmp / "hard.png"), int)
    assert (np.abs(drawn - np.asarray(Image.open(tmp / "hard-rendered.png"), int)).max() <= 1)
    assert (drawn == MARK).all(axis=-1).any()  # the picks are outlined: there is a mark


# -- the viewer in a real browser ----------------------------------------------------------

def test_hovering_caption_words_in_a_real_browser(tmp_path, grey_image):
    page_path = tmp_path / "viewer.html"
    write_caption_figures([_result(grey_image), _result(grey_image, hard=True)], html=page_path)
    with open_page(page_path.resolve().as_uri()) as (page, errors, requests):
        canvas = page.locator("#viz-overlay-1")
        width, height = (int(canvas.get_attribute(a)) for a in ("width", "height"))
        assert (width, height) == (400, 222)  # the image's 90x50, longest side 400
        # Cell centres, clear of the hard-attention outline.
        points = [(width // 6, height // 4), (width - width // 6, height - height // 4)]
        assert canvas.evaluate(CANVAS_ALPHAS, points) == [0, 0]
        empty = canvas.evaluate(CANVAS_PNG)

        def brightness(point):
            return shown_pixels(page, 1)[point[1], point[0]].mean()

        page.hover('.viz-word[data-item="1"][data-step="0"]')  # "a": top-left
        assert canvas.get_attribute("data-step") == "0"
        top_left, bottom_right = (brightness(p) for p in points)
        assert top_left > GREY and bottom_right < GREY / 2  # kept (lifted) and dimmed
        first = canvas.evaluate(CANVAS_PNG)

        page.hover('.viz-word[data-item="1"][data-step="1"]')  # "red": bottom-right
        assert canvas.get_attribute("data-step") == "1"
        top_left, bottom_right = (brightness(p) for p in points)
        assert bottom_right > GREY and top_left < GREY / 2
        assert len({empty, first, canvas.evaluate(CANVAS_PNG)}) == 3
        assert "active" in page.get_attribute('.viz-word[data-item="1"][data-step="1"]',
                                              "class")
        # The other caption's overlay is untouched.
        assert page.locator("#viz-overlay-0").get_attribute("data-step") == "-1"

        shot = tmp_path / "viewer.png"
        page.screenshot(path=str(shot), full_page=True)
        assert Image.open(shot).size[0] == 1000
        assert errors == []
        assert all(url.startswith(("file:", "data:")) for url in requests), requests
