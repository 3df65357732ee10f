"""`captioner export` and captioning with the export: the in-process model's tokens, stock
TensorFlow only, `saved_model_cli`, every image a user is likely to have, one-line errors,
and `.keras` round trips."""

import base64
import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from captioner.cli import main
from captioner.config import DecoderConfig, EncoderConfig
from captioner.export import KIND, ExportedCaptioner
from captioner.inference import CaptionerRun, read_image
from captioner.model import ShowAttendTell
from common.decoding import beam_search, greedy_decode
from common.export import savedmodel
from common.text import detokenize
from tests.common.image_cases import write_cases
from tests.helpers.isolated import run_signatures_and_saved_model_cli
from tests.helpers.ties import rows_that_agree, step_log_probs


@pytest.fixture(scope="module")
def run(trained_captioner):
    return CaptionerRun(trained_captioner)


@pytest.fixture(scope="module")
def exported(exported_captioner):
    return ExportedCaptioner(exported_captioner)


def b64(path):
    return {"b64": base64.b64encode(path.read_bytes()).decode("ascii")}


def _options(images, beam_size, n_best):
    return ("caption_with_options",
            {"images": images, "beam_size": beam_size, "max_length": 12, "n_best": n_best,
             "no_repeat_ngram": 0})


@pytest.fixture(scope="module")
def isolated(exported_captioner, shape_images, tmp_path_factory):
    """What the tests below send each signature of the export, made in one process that
    imports TensorFlow and NumPy only: a TensorFlow Serving client's request (the image bytes
    alone), the best of a beam of 2, and the n-best at (beam, n) = (2, 2) and (1, 1). Name ->
    outputs, and the forbidden modules that process imported. Then, in that process,
    TensorFlow's `saved_model_cli`: `show --all`, and `run` of each signature on the first
    image (the bytes in an object array: `--inputs` reads .npy files; the options as
    literals): what each command printed, and the folder each `run` wrote to."""
    images = [b64(path) for path in shape_images]
    calls = {"bytes_alone": ("serving_default", {"images": images}),
             "beam_2": _options(images, 2, 1),
             "n_best_2_2": _options(images, 2, 2),
             "n_best_1_1": _options(images, 1, 1)}
    out = tmp_path_factory.mktemp("saved-model-cli")
    np.save(out / "images.npy", np.array([shape_images[0].read_bytes()], dtype=object))
    run_images = ["run", "--dir", str(exported_captioner), "--tag_set", "serve", "--inputs",
                  f"images={out / 'images.npy'}"]
    commands = [["show", "--dir", str(exported_captioner), "--all"],
                [*run_images, "--signature_def", "caption_with_options", "--input_exprs",
                 "beam_size=1;max_length=12;n_best=1;no_repeat_ngram=0",
                 "--outdir", str(out / "options")],
                # serving_default needs the images alone
                [*run_images, "--signature_def", "serving_default", "--outdir",
                 str(out / "default")]]
    outputs, imported, printed = run_signatures_and_saved_model_cli(
        exported_captioner, list(calls.values()), commands)
    return dict(zip(calls, outputs, strict=True)), imported, (printed, out)


@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 2])
def test_export_gives_the_in_process_captions(run, exported, shape_images, beam_size):
    expected, failed = run.caption_files(shape_images, beam_size=beam_size)
    got, failed_too = exported.caption_files(shape_images, beam_size=beam_size)
    assert failed == failed_too == []
    assert len({c.text for _, c in expected}) > 1, "the model is degenerate"
    for (path, e), (same_path, g) in zip(expected, got):
        assert path == same_path
        assert g.words == e.words and g.text == e.text and g.finished == e.finished
        assert g.score == pytest.approx(e.score, abs=1e-4)
        assert g.attention.shape == e.attention.shape == (len(e.words) + e.finished, 64)
        np.testing.assert_allclose(g.attention, e.attention, atol=1e-5)
        assert g.to_json(exported.grid_shape).keys() == e.to_json(run.grid_shape).keys()


@pytest.mark.slow
def test_a_jpeg_gets_the_run_directorys_caption_and_attention(run, exported, shape_images,
                                                              tmp_path):
    # JPEGs at the encoder's size: the graph decodes them to Pillow's pixels (the accurate
    # inverse DCT), so the export sees what the run directory sees.
    jpegs = []
    for path in shape_images:
        jpegs.append(tmp_path / f"{path.stem}.jpg")
        Image.open(path).save(jpegs[-1], quality=75)
    expected, _ = run.caption_files(jpegs, beam_size=2)
    got, _ = exported.caption_files(jpegs, beam_size=2)
    for (_, e), (_, g) in zip(expected, got, strict=True):
        assert g.words == e.words and g.score == pytest.approx(e.score, abs=1e-4)
        np.testing.assert_allclose(g.attention, e.attention, atol=1e-5)


@pytest.mark.slow
def test_a_phone_photo_is_captioned_upright_as_its_exif_says(run, exported, shape_images,
                                                              tmp_path):
    # A portrait photo as phones write it: rows stored sideways, EXIF orientation 6 ("turn 90
    # degrees clockwise to show it"). The run directory and the export caption what a viewer
    # shows, the upright picture: the same words and attention as that picture saved plainly.
    upright = tmp_path / "upright.png"
    phone = tmp_path / "phone.png"
    with Image.open(shape_images[0]) as picture:
        picture.save(upright)
        exif = Image.Exif()
        exif[0x0112] = 6
        picture.transpose(Image.Transpose.ROTATE_90).save(phone, exif=exif.tobytes())
    for captioner in (run, exported):
        (_, plain), (_, turned) = captioner.caption_files([upright, phone], beam_size=2)[0]
        assert turned.words == plain.words and turned.score == pytest.approx(plain.score)
        np.testing.assert_allclose(turned.attention, plain.attention, atol=1e-6)


@pytest.mark.slow
def test_a_file_given_twice_is_answered_twice_in_input_order(run, exported, shape_images,
                                                             tmp_path):
    # The answers come back in the order of the inputs, like the run's (a file's last position
    # used to order both of its answers); a corrupt file among them is reported, not answered.
    bad = tmp_path / "bad.png"
    bad.write_bytes(shape_images[0].read_bytes()[:100])
    paths = [shape_images[0], shape_images[1], bad, shape_images[0]]
    expected, failed = run.caption_files(paths, beam_size=1)
    got, failed_too = exported.caption_files(paths, beam_size=1)
    assert [p for p, _ in got] == [p for p, _ in expected] == [str(p) for p in paths[:2]] + [
        str(paths[0])]
    assert [c.text for _, c in got] == [c.text for _, c in expected]
    assert [p for p, _ in failed] == [p for p, _ in failed_too] == [str(bad)]


@pytest.mark.slow
def test_serving_default_takes_the_image_bytes_alone(run, isolated, shape_images):
    # What a TensorFlow Serving client sends: {"instances": [{"b64": ...}]}, nothing else; the
    # export's default beam (2) and length (the run's 12), in plain TensorFlow.
    expected, _ = run.caption_files(shape_images, beam_size=2)
    outputs, imported = isolated[0]["bytes_alone"], isolated[1]
    assert imported == []
    assert [c.decode() for c in outputs["captions"]] == [e.text for _, e in expected]
    for row, (_, e) in enumerate(expected):
        n = int(outputs["lengths"][row])
        assert [t.decode() for t in outputs["tokens"][row, :n]] == e.words
        assert float(outputs["scores"][row]) == pytest.approx(e.score, abs=1e-4)
    assert outputs["tokens"].shape[1] == 12 and "n_best_captions" not in outputs


@pytest.mark.slow
def test_export_runs_on_stock_tensorflow_alone(run, isolated, shape_images):
    expected, _ = run.caption_files(shape_images, beam_size=2)
    outputs, imported = isolated[0]["beam_2"], isolated[1]
    assert imported == []
    assert [c.decode() for c in outputs["captions"]] == [e.text for _, e in expected]
    assert outputs["tokens"].shape == (len(shape_images), 12)
    assert outputs["attention"].shape == (len(shape_images), 12, 8, 8)  # (B, T, gh, gw)
    for row, (_, e) in enumerate(expected):
        n = int(outputs["lengths"][row])
        assert [t.decode() for t in outputs["tokens"][row, :n]] == e.words
        steps = int(outputs["attention_lengths"][row])
        assert steps == len(e.words) + e.finished
        np.testing.assert_allclose(outputs["attention"][row, :steps].reshape(steps, -1),
                                   e.attention, atol=1e-5)
        assert not outputs["attention"][row, steps:].any()


@pytest.mark.slow
@pytest.mark.parametrize("beam_size, n_best", [(2, 2), (1, 1)])
def test_n_best_output_is_the_in_process_beam(run, isolated, shape_images, beam_size, n_best):
    pixels = np.stack([read_image(p, run.image_size) for p in shape_images])
    vocab = run.vocab
    state = run.model.initial_decoding_state(pixels)
    if beam_size == 1:
        reference = greedy_decode(run.model.make_step(), state, len(shape_images),
                                  vocab.start_id, vocab.end_id, 12)
    else:
        reference = beam_search(run.model.make_step(), state, len(shape_images),
                                vocab.start_id, vocab.end_id, 12, beam_size, n_best=n_best)
    outputs, imported = isolated[0][f"n_best_{beam_size}_{n_best}"], isolated[1]
    assert imported == []
    assert outputs["n_best_tokens"].shape == (len(shape_images), n_best, 12)
    tokens, scores = reference.tokens.numpy(), reference.scores.numpy()
    for row in range(len(shape_images)):
        for k in range(n_best):
            words = vocab.decode(tokens[row, k])
            length = int(outputs["n_best_lengths"][row, k])
            assert [t.decode() for t in outputs["n_best_tokens"][row, k, :length]] == words
            assert outputs["n_best_captions"][row, k].decode() == detokenize(words)
            assert outputs["n_best_scores"][row, k] == pytest.approx(scores[row, k], abs=1e-4)
            assert outputs["n_best_normalized_scores"][row, k] == pytest.approx(
                reference.normalized_scores.numpy()[row, k], abs=1e-4)
        # the best of the n is the caption the other outputs describe
        assert outputs["n_best_captions"][row, 0] == outputs["captions"][row]
    if n_best > 1:  # distinct hypotheses
        assert (outputs["n_best_tokens"][:, 0] != outputs["n_best_tokens"][:, 1]).any(-1).all()


@pytest.mark.slow
def test_beam_size_1_is_greedy_through_the_export(run, exported, shape_images):
    # An export decodes beam size 1 greedily. (A direct beam_search with one beam may end a
    # caption sooner where <end> ranks second: tests/captioner/test_model.py states that.)
    # The export's graph and the in-process model round differently in the last bits, so a
    # caption may part from greedy's at a near tie (tests/helpers/ties.py); the rows that
    # agree whole have greedy's words and score.
    pixels = np.stack([read_image(p, run.image_size) for p in shape_images])
    vocab = run.vocab
    greedy = run.model.caption(pixels, start_id=vocab.start_id, end_id=vocab.end_id,
                               method="greedy")
    got = exported.caption_bytes([p.read_bytes() for p in shape_images], beam_size=1)
    expected = greedy.tokens.numpy()[:, 0]
    ids = [vocab.encode(c.words) + ([vocab.end_id] if c.finished else []) for c in got]
    width = max(len(i) for i in ids)
    state = run.model.initial_decoding_state(pixels)
    same = rows_that_agree(
        np.array([i + [0] * (width - len(i)) for i in ids]), expected,
        step_log_probs(run.model.make_step(), lambda row: [x[row:row + 1] for x in state],
                       vocab.start_id), end_id=vocab.end_id)
    for row, caption in enumerate(got):
        if same[row]:
            assert caption.words == vocab.decode(expected[row])
            assert caption.score == pytest.approx(float(greedy.scores[row, 0]), abs=1e-4)


@pytest.mark.slow
def test_saved_model_cli_shows_and_runs_the_signature(run, isolated, shape_images):
    (shown, _, _), out = isolated[2]
    assert "signature_def['serving_default']" in shown
    assert "signature_def['caption_with_options']" in shown
    assert "name: serving_default_images:0" in shown and "DT_STRING" in shown
    for outputs, beam_size in (("options", 1), ("default", 2)):  # serving_default's beam: 2
        got = np.load(out / outputs / "captions.npy", allow_pickle=True)
        expected, _ = run.caption_files(shape_images[:1], beam_size=beam_size)
        assert [c.decode() for c in got] == [expected[0][1].text]


@pytest.mark.slow
def test_export_info_and_defaults(exported_captioner, trained_captioner, capsys):
    info = savedmodel.require_kind(exported_captioner, KIND, "a captioner")
    assert info["beam_sizes"] == [1, 2] and info["default_beam_size"] == 2
    assert info["image_size"] == [32, 32] and info["grid_shape"] == [8, 8]
    assert info["max_decode_length"] == 12 and info["attention"] == "soft"
    assert info["options_signature"] == "caption_with_options" and info["format"] == 2
    defaults = json.loads(
        (exported_captioner / "assets.extra" / "serving_input_defaults.json").read_text())
    assert defaults == {"beam_size": 2, "max_length": 12, "n_best": 1, "no_repeat_ngram": 0}
    # exporting onto an existing directory is refused unless --overwrite
    assert main(["export", str(trained_captioner), str(exported_captioner)]) == 2
    assert "already exists" in capsys.readouterr().err


@pytest.mark.slow
def test_signature_refuses_bad_input(exported, shape_images):
    fn = exported.loaded.signatures["caption_with_options"]  # tf.saved_model.load's
    good = shape_images[0].read_bytes()

    def call(images, beam=1, length=12, n_best=1):
        return fn(images=tf.constant(images), beam_size=tf.constant(beam),
                  max_length=tf.constant(length), n_best=tf.constant(n_best),
                  no_repeat_ngram=tf.constant(0))

    with pytest.raises(tf.errors.InvalidArgumentError, match="beam_size must be one of"):
        call([good], beam=3)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"n_best must be 1..beam_size"):
        call([good], beam=2, n_best=3)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"n_best must be 1..beam_size"):
        call([good], beam=2, n_best=0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_length must be"):
        call([good], length=0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_length must be"):
        call([good], length=101)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Unknown image file format"):
        call([good, b"not an image"])
    assert call([good], length=4)["attention"].shape == (1, 4, 8, 8)


@pytest.mark.slow
def test_caption_cli_same_text_from_run_and_export(trained_captioner, exported_captioner,
                                                   shape_images, capsys):
    paths = [str(p) for p in shape_images]
    assert main(["caption", str(trained_captioner), *paths, "--beam-size", "2"]) == 0
    from_run = capsys.readouterr().out
    assert main(["caption", str(exported_captioner), *paths, "--beam-size", "2"]) == 0
    assert capsys.readouterr().out == from_run
    assert main(["caption", str(exported_captioner), *paths, "--beam-size", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--beam-size 5: this export has beam sizes 1, 2" in err


@pytest.mark.slow
def test_caption_cli_n_best_lists_the_beam(run, trained_captioner, exported_captioner,
                                          shape_images, capsys):
    paths = [str(p) for p in shape_images[:3]]
    expected = run.caption_batch(np.stack([read_image(p, run.image_size) for p in paths]),
                                 beam_size=2)
    outputs = {}
    for name, source in (("run", trained_captioner), ("export", exported_captioner)):
        assert main(["caption", str(source), *paths, "--beam-size", "2", "--n-best", "2"]) == 0
        outputs[name] = capsys.readouterr().out
        assert main(["caption", str(source), *paths, "--beam-size", "2", "--n-best", "2",
                     "--json"]) == 0
        answers = json.loads(capsys.readouterr().out)
        for answer, e in zip(answers, expected):
            hypotheses = answer["n_best"]
            assert len(hypotheses) == 2 and hypotheses[0]["caption"] == e.text == answer["caption"]
            assert hypotheses[0]["score"] == pytest.approx(e.score, abs=1e-4)
            assert hypotheses[0]["normalized_score"] >= hypotheses[1]["normalized_score"]
            assert hypotheses[0]["words"] != hypotheses[1]["words"]
    lines = [line.split("\t") for line in outputs["run"].splitlines()]
    assert [(path, rank) for path, rank, *_ in lines] == [(p, r) for p in paths for r in "12"]
    assert [line[4] for line in lines[::2]] == [e.text for e in expected]
    # the same lines from the run and the export, scores within printing precision
    for ours, theirs in zip(lines, (line.split("\t") for line in outputs["export"].splitlines())):
        assert ours[:2] + ours[4:] == theirs[:2] + theirs[4:]
        assert float(ours[2]) == pytest.approx(float(theirs[2]), abs=2e-4)
    # Told before the model loads, with what would do: a wider beam for the run, fewer
    # hypotheses or another export for an export of beam sizes 1 and 2.
    for source, fix in ((trained_captioner, " (got 2): add --beam-size 3"),
                        (exported_captioner, "; this export has beam sizes 1, 2: ask for "
                                             "--n-best 2")):
        assert main(["caption", str(source), paths[0], "--beam-size", "2", "--n-best", "3"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert f"--n-best 3 needs a beam of at least 3{fix}" in err, err


@pytest.fixture(scope="module")
def image_cases(tmp_path_factory):
    return write_cases(tmp_path_factory.mktemp("image-cases"))


@pytest.mark.slow
@pytest.mark.parametrize("model", ["run", "export"])
def test_caption_cli_accepts_every_likely_image(model, trained_captioner, exported_captioner,
                                                image_cases, capsys):
    good, _ = image_cases
    source = trained_captioner if model == "run" else exported_captioner
    assert main(["caption", str(source), *map(str, good.values()), "--json"]) == 0
    captured = capsys.readouterr()
    answers = json.loads(captured.out)
    assert [a["image"] for a in answers] == [str(p) for p in good.values()]
    for answer in answers:
        assert isinstance(answer["caption"], str) and answer["grid"] == [8, 8]
        assert np.asarray(answer["attention"]).shape == (
            len(answer["words"]) + answer["finished"], 64)
    assert "error" not in captured.err


@pytest.mark.slow
@pytest.mark.parametrize("model", ["run", "export"])
def test_caption_cli_names_each_bad_image_and_answers_the_good(
        model, trained_captioner, exported_captioner, image_cases, capsys):
    good, bad = image_cases
    source = trained_captioner if model == "run" else exported_captioner
    good_paths = [str(good["rgb.png"]), str(good["image.tiff"])]
    argv = ["caption", str(source), good_paths[0], *(str(p) for p, _ in bad.values()),
            good_paths[1], "--json"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert [a["image"] for a in json.loads(captured.out)] == good_paths
    lines = captured.err.strip().splitlines()
    assert "Traceback" not in captured.err
    assert len(lines) == len(bad), lines
    for (path, word), line in zip(bad.values(), lines):
        assert line.startswith(f"captioner caption: error: {path}: ") and word in line, line


@pytest.mark.slow
def test_the_bomb_is_refused_before_decoding(trained_captioner, exported_captioner,
                                             image_cases, capsys, monkeypatch):
    from PIL import ImageFile

    def no_decoding(self, *args, **kwargs):
        raise AssertionError("the bomb was decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", no_decoding)
    _, bad = image_cases
    for source in (trained_captioner, exported_captioner):
        assert main(["caption", str(source), str(bad["bomb.png"][0])]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "refused before decoding" in err, err


def _other_savedmodel(path, kind):
    module = tf.Module()
    module.f = tf.function(lambda x: {"y": x}, input_signature=[tf.TensorSpec([None], tf.string)])
    savedmodel.save(module, path, {"serving_default": module.f.get_concrete_function()}, kind)
    return path


@pytest.mark.parametrize("command", ["caption", "serve"])
def test_a_translator_savedmodel_is_a_one_line_error(tmp_path, capsys, command):
    path = _other_savedmodel(tmp_path / "translator", "seq2seq.translator")
    extra = ["photo.png"] if command == "caption" else []
    assert main([command, str(path), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "'seq2seq.translator'" in err and "expected an exported captioner" in err


def test_a_directory_that_is_neither_is_a_one_line_error(tmp_path, capsys):
    assert main(["caption", str(tmp_path), "photo.png"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "not a captioner run directory" in err and "captioner SavedModel" in err


def test_serve_refuses_a_directory_that_is_not_a_savedmodel(tmp_path, capsys):
    assert main(["serve", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a SavedModel directory" in err


# -- .keras round trips with safe_mode on -----------------------------------------------------


@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_keras_file_round_trip_in_safe_mode(tmp_path, attention):
    model = ShowAttendTell(
        30, EncoderConfig("small-cnn", (32, 32), "none", filters=(8, 16), coordinates=True),
        DecoderConfig(embedding_dim=8, units=16, attention_units=8, attention=attention,
                      dropout=0.0, score="general" if attention == "soft" else "additive"))
    model.reward_baseline.update(-4.0)  # a non-trainable weight that must survive too
    inputs = {"image": np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32"),
              "caption_in": np.array([[1, 4, 5], [1, 6, 0]], np.int32)}
    outputs = model(inputs)
    model.save(tmp_path / "captioner.keras")
    loaded = keras.saving.load_model(tmp_path / "captioner.keras", safe_mode=True)
    assert type(loaded) is ShowAttendTell
    assert loaded.get_config() == model.get_config()
    assert float(loaded.baseline) == pytest.approx(float(model.baseline))
    reloaded = loaded(inputs)
    for name in ("logits", "alpha"):
        np.testing.assert_array_equal(np.asarray(reloaded[name]), np.asarray(outputs[name]))
    a = model.caption(inputs["image"], start_id=1, end_id=2, beam_size=2, max_length=5)
    b = loaded.caption(inputs["image"], start_id=1, end_id=2, beam_size=2, max_length=5)
    np.testing.assert_array_equal(a.tokens.numpy(), b.tokens.numpy())
