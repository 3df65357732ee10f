"""`captioner render` on a results file it cannot draw: one line on stderr, status 2."""

import json

import pytest
from PIL import Image

from tests.captioner.test_cli import _one_line_error


def _result(path, **changes):
    return {"image": str(path), "caption": "a red circle", "words": ["a", "red"],
            "attention": [[1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1]], "grid": [2, 3], **changes}


@pytest.mark.parametrize("content, needle", [
    # Python's JSON parser recursed once per bracket: a RecursionError.
    ("[" * 100_000, "r.json: JSON nested too deeply to read; expected a list of caption results"),
    ("[" * 5_000 + "]" * 5_000, "r.json: JSON nested too deeply to read"),
    # An integer of more digits than Python converts: a ValueError.
    ('[{"words": [], "attention": [], "grid": [' + "1" * 5_000 + ", 1]}]",
     "r.json: not readable JSON ("),
    ('[{"caption": "caf\xe9"}]'.encode("latin-1"),
     "r.json: not UTF-8 text (invalid continuation byte at byte 17)"),
    ({"image": 5}, "r.json entry 0: expected 'image' as text, got 5"),
    ({"caption": {"text": "a red circle"}}, "r.json entry 0: expected 'caption' as text, got "
                                            "{'text': 'a red circle'}"),
    ({"attention": [[True, False, False, False, False, False]] * 2},
     "r.json entry 0: expected 'attention' as a list of rows of 6 numbers"),
    ({"attention": [["0.5"] * 6] * 2}, "expected 'attention' as a list of rows of 6 numbers"),
])
def test_render_of_json_it_cannot_draw_is_one_line(capsys, tmp_path, content, needle):
    image = tmp_path / "grey.png"
    Image.new("RGB", (90, 50), (200, 200, 200)).save(image)
    results = tmp_path / "r.json"
    if isinstance(content, bytes):
        results.write_bytes(content)
    elif isinstance(content, dict):
        results.write_text(json.dumps([_result(image, **content)]))
    else:
        results.write_text(content)
    out = tmp_path / "o.png"
    err = _one_line_error(capsys, ["render", str(results), "--out", str(out)])
    assert f"captioner render: error: {results}" in err and needle in err
    assert not out.exists()


def test_render_draws_a_good_result(capsys, tmp_path):
    # The checks above refuse only what is wrong: the same result, unchanged, is drawn.
    from captioner.cli import main

    image = tmp_path / "grey.png"
    Image.new("RGB", (90, 50), (200, 200, 200)).save(image)
    (tmp_path / "r.json").write_text(json.dumps([_result(image)]))
    assert main(["render", str(tmp_path / "r.json"), "--out", str(tmp_path / "o.png")]) == 0
    assert (tmp_path / "o.png").is_file()
