"""`seq2seq translate --plot/--html/--all-heads` and `seq2seq.visualize`: the figures show the
attention the translator returned, one file per input, every head when asked, and bad paths are
one-line errors."""

import json
import re

import numpy as np
import pytest
from PIL import Image

from common.errors import UserError
from common.viz import render_alignment_heatmap, render_head_grid
from seq2seq.cli import main
from seq2seq.inference import Translation, Translator
from seq2seq.visualize import (
    alignment,
    head_attention,
    viewer_items,
    write_alignment_plots,
    write_translation_viewer,
)

SENTENCES = ["25th of November 2026", "Nov 3, 1999"]


def _pixels(path):
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def _viewer_data(path):
    page = path.read_text(encoding="utf-8")
    match = re.search(r'<script type="application/json" id="viz-data">(.*?)</script>', page,
                      re.S)
    assert match, "the page has no data block"
    return page, json.loads(match.group(1))


def _fake(source, tokens, weights, **kwargs):
    return Translation(source=" ".join(source), text=" ".join(tokens), tokens=list(tokens),
                       source_tokens=list(source), attention=np.asarray(weights, np.float32),
                       **kwargs)


# -- library, on hand-made translations --------------------------------------------------------


def test_alignment_has_one_row_per_output_token():
    weights = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    source, target, matrix = alignment(_fake(["la", "casa"], ["the", "house", "."], weights))
    assert source == ["la", "casa"] and target == ["the", "house", "."]
    np.testing.assert_array_equal(matrix, weights.astype(np.float32))
    # A row without a token (a special token dropped from `tokens`) is cut.
    _, target, matrix = alignment(_fake(["la", "casa"], ["the", "house"], weights))
    assert target == ["the", "house"] and matrix.shape == (2, 2)


def test_plot_is_the_common_viz_heatmap_of_the_attention(tmp_path):
    rng = np.random.default_rng(0)
    weights = rng.dirichlet(np.ones(4), size=3)
    result = _fake(["a", "b", "c", "d"], ["x", "y", "z"], weights)
    (path,) = write_alignment_plots([result], tmp_path / "out.png")
    reference = tmp_path / "reference.png"
    render_alignment_heatmap(result.source_tokens, result.tokens, weights, reference,
                             title=f"{result.source}  →  {result.text}")
    np.testing.assert_array_equal(_pixels(path), _pixels(reference))
    other = _fake(["a", "b", "c", "d"], ["x", "y", "z"], weights[:, ::-1])
    (changed,) = write_alignment_plots([other], tmp_path / "other.png")
    assert not np.array_equal(_pixels(path), _pixels(changed))


def test_failed_lines_get_no_file_and_keep_the_numbering(tmp_path):
    good = _fake(["a", "b"], ["x"], [[0.3, 0.7]])
    bad = Translation(source="", error="empty line: nothing to translate")
    written = write_alignment_plots([bad, good], tmp_path / "out.png")
    assert written == [tmp_path / "out-2.png"] and written[0].is_file()
    assert not (tmp_path / "out-1.png").exists()
    assert write_translation_viewer([bad], tmp_path / "none.html") is None


def test_head_weights_draw_the_grid(tmp_path):
    heads = np.stack([np.eye(2), np.eye(2)[::-1]]).astype(np.float32)
    result = _fake(["a", "b"], ["x", "y"], heads.mean(0))
    (path,) = write_alignment_plots([result], tmp_path / "grid.png", head_weights=[heads])
    reference = tmp_path / "reference.png"
    render_head_grid(["a", "b"], ["x", "y"], heads, reference, title="a b  →  x y")
    np.testing.assert_array_equal(_pixels(path), _pixels(reference))
    (item,) = viewer_items([result], head_weights=[heads])
    np.testing.assert_array_equal(item["weights"], heads)


def test_plot_into_a_missing_folder_fails_before_loading(tmp_path, capsys):
    status = main(["translate", str(tmp_path), "Nov 3, 1999", "--plot",
                   str(tmp_path / "nowhere" / "out.png")])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and "does not exist" in err and "nowhere" in err


def test_all_heads_needs_a_transformer():
    class Config:
        class model:  # noqa: N801 - mimics RunConfig.model
            arch = "bahdanau"

    translator = type("Fake", (), {"config": Config})()
    with pytest.raises(UserError, match="expected a transformer"):
        head_attention(translator, ["x"])


# -- the command line on a trained tiny Transformer ----------------------------------------------


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "tiny"
    status = main(["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
                   "--steps-per-epoch", "20", "--out", str(out), "--verbose", "0"])
    assert status == 0
    return out


@pytest.fixture(scope="module")
def translations(run_dir):
    return Translator.from_run_dir(run_dir).translate(SENTENCES)


@pytest.mark.slow
def test_translate_plot_and_html_show_the_attention(run_dir, translations, tmp_path, capsys):
    status = main(["translate", str(run_dir), *SENTENCES, "--plot", str(tmp_path / "a.png"),
                   "--html", str(tmp_path / "a.html")])
    assert status == 0
    capsys.readouterr()
    for i, result in enumerate(translations, 1):
        path = tmp_path / f"a-{i}.png"
        with Image.open(path) as image:
            assert image.format == "PNG" and min(image.size) >= 150 and max(image.size) < 4000
        reference = tmp_path / f"reference-{i}.png"
        source, target, weights = alignment(result)
        render_alignment_heatmap(source, target, weights, reference,
                                 title=f"{result.source}  →  {result.text}")
        np.testing.assert_array_equal(_pixels(path), _pixels(reference))
    assert not np.array_equal(_pixels(tmp_path / "a-1.png"), _pixels(tmp_path / "a-2.png"))

    page, data = _viewer_data(tmp_path / "a.html")
    assert len(data["items"]) == 2
    for result, item in zip(translations, data["items"]):
        for token in result.source_tokens + result.tokens:
            assert f">{token}</span>" in page
        np.testing.assert_allclose(item["weights"][0], result.attention, atol=1e-4)


@pytest.mark.slow
def test_all_heads_are_the_heads_whose_mean_is_the_default(run_dir, translations, tmp_path,
                                                           capsys):
    status = main(["translate", str(run_dir), SENTENCES[0], "--all-heads", "--attention-layer",
                   "0", "--plot", str(tmp_path / "heads.png"), "--html",
                   str(tmp_path / "heads.html")])
    assert status == 0
    capsys.readouterr()
    _, data = _viewer_data(tmp_path / "heads.html")
    mean, *heads = (np.asarray(w) for w in data["items"][0]["weights"])
    assert len(heads) == 2  # the tiny preset's heads
    assert not np.allclose(heads[0], heads[1], atol=1e-3)
    # The default (average) attention of the only layer, decoded separately.
    np.testing.assert_allclose(np.mean(heads, axis=0), translations[0].attention, atol=2e-4)
    np.testing.assert_allclose(mean, translations[0].attention, atol=2e-4)
    reference = tmp_path / "reference.png"
    source, target, _ = alignment(translations[0])
    render_head_grid(source, target, np.stack(heads), reference,
                     title=f"{translations[0].source}  →  {translations[0].text}")
    # The CLI drew unrounded weights; the reference the page's 4-decimal ones.
    assert _pixels(tmp_path / "heads.png").shape == _pixels(reference).shape
    assert np.mean(_pixels(tmp_path / "heads.png") != _pixels(reference)) < 0.01


@pytest.mark.slow
def test_all_heads_trace_one_search_for_every_head(tmp_path, capsys, monkeypatch):
    """Four heads, drawn through one traced search whose head is a variable: two traces (the
    mean's and the heads'), not one per head, no retracing warning from TensorFlow, and each
    head is the one an eager decode of that head returns."""
    from common.text.specials import END_ID, START_ID
    from seq2seq.export import TranslatorModule
    from seq2seq.inference import decode_batch, pad_batch, source_ids
    from tests.helpers.tracing import calls, retracing_warnings

    run = tmp_path / "four-heads"
    assert main(["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
                 "--heads", "4", "--steps-per-epoch", "5", "--validation-examples", "0",
                 "--out", str(run), "--verbose", "0"]) == 0
    traces = calls(monkeypatch, TranslatorModule, "prepare")  # runs only while tracing
    with retracing_warnings() as warnings:
        assert main(["translate", str(run), *SENTENCES, "--all-heads", "--beam-size", "3",
                     "--plot", str(tmp_path / "h.png"), "--html", str(tmp_path / "h.html")]) == 0
    capsys.readouterr()
    assert len(traces) == 2 and warnings == []
    _, data = _viewer_data(tmp_path / "h.html")
    translator = Translator.from_run_dir(run)
    results = translator.translate(SENTENCES, beam_size=3)
    source = pad_batch([source_ids(translator.source_vocab, r.source_tokens) for r in results])
    for head in range(4):
        decoded = decode_batch(translator.model, source, START_ID, END_ID, max_length=16,
                               beam_size=3, attention_head=head,
                               length_penalty=translator.config.model.length_penalty)
        for row, item in enumerate(data["items"]):
            drawn = np.asarray(item["weights"][1 + head])
            steps, width = drawn.shape
            np.testing.assert_allclose(drawn, decoded.attention[row, 0, :steps, :width],
                                       atol=2e-4)


@pytest.fixture(scope="module")
def export_dir(run_dir):
    out = run_dir.parent / "export"
    assert main(["export", str(run_dir), str(out), "--beam-sizes", "1"]) == 0
    return out


@pytest.mark.slow
def test_savedmodel_plots_its_returned_attention(export_dir, translations, tmp_path, capsys):
    export = export_dir
    status = main(["translate", str(export), *SENTENCES, "--plot", str(tmp_path / "s.png"),
                   "--html", str(tmp_path / "s.html")])
    assert status == 0
    capsys.readouterr()
    assert (tmp_path / "s-1.png").is_file() and (tmp_path / "s-2.png").is_file()
    page, data = _viewer_data(tmp_path / "s.html")
    for result, item in zip(translations, data["items"]):
        weights = np.asarray(item["weights"][0])
        assert all(f">{token}</span>" in page for token in result.tokens)
        np.testing.assert_allclose(weights, result.attention, atol=1e-4)


@pytest.mark.slow
def test_all_heads_with_a_savedmodel_is_a_one_line_error(export_dir, tmp_path, capsys):
    capsys.readouterr()
    status = main(["translate", str(export_dir), "Nov 3, 1999", "--all-heads", "--plot",
                   str(tmp_path / "x.png")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "run directory" in err
