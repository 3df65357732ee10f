"""`captioner evaluate`: attention correctness on the generated captions and, teacher-forced,
on the references, checked against a word-by-word decoding loop; the tokenizer in the JSON."""

import json

import numpy as np
import pytest
import tensorflow as tf

from captioner.cli import main
from captioner.datasets import load_split
from captioner.evaluate import evaluate, generate, teacher_forced
from captioner.inference import CaptionerRun
from common.metrics.attention_correctness import corpus_attention_correctness
from tests.common.metrics.java import require_java

SHAPE_WORDS = {"circle", "square", "triangle", "diamond"}
IMAGES = 6


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> CaptionerRun:
    """A `--preset tiny` run (a few steps: its attention is far from uniform but not good)."""
    out = tmp_path_factory.mktemp("evaluate") / "run"
    assert main(["train", "--preset", "tiny", "--out", str(out), "--seed", "5",
                 "--attention-query", "hidden+word", "--verbose", "0"]) == 0
    return CaptionerRun(out)


@pytest.fixture(scope="module")
def split():
    return load_split("shapes", "test", num_images=IMAGES)


def word_by_word(run: CaptionerRun, record, words: list[str]) -> np.ndarray:
    """`alpha (n, L)` of reading `words` one decoding step at a time (the beam search's step
    function, not the teacher-forced pass), the image resized as the evaluation resizes it."""
    image = tf.image.resize(record.image[None].astype("float32"), run.image_size,
                            antialias=True)
    state = run.model.initial_decoding_state(image)
    step = run.model.make_step()
    token = run.vocab.start_id
    alphas = []
    for t, word in enumerate(words):
        _, state, alpha = step(tf.constant([token]), state, t)
        alphas.append(np.asarray(alpha)[0])
        token = run.vocab.token_to_id(word) if word in run.vocab else run.vocab.unk_id
    return np.stack(alphas)


@pytest.mark.slow
def test_teacher_forced_attention_matches_a_word_by_word_decoding_loop(run, split):
    # Batches of 4 images: several batches, captions padded to the split's longest.
    forced = teacher_forced(run, split, batch_size=4)
    expected = [(record, caption.split()) for record in split for caption in record.captions]
    assert [(r.image_id, w) for r, w, _ in forced] == [(r.image_id, w) for r, w in expected]
    for (record, words, alpha), (_, same_words) in zip(forced, expected):
        assert alpha.shape == (len(words), run.model.grid_shape[0] * run.model.grid_shape[1])
        np.testing.assert_allclose(alpha, word_by_word(run, record, same_words),
                                   rtol=1e-4, atol=1e-8)
    # Consecutive steps' maps differ by far more than that, so a map one step off would fail.
    assert min(np.abs(np.diff(a, axis=0)).max() for _, w, a in forced if len(w) > 1) > 1e-5


@pytest.mark.slow
def test_evaluate_scores_generated_and_reference_words_and_counts_the_skipped(run, split):
    results = evaluate(run, "shapes", "test", beam_size=2, options={"num_images": IMAGES},
                       metrics=("bleu",))
    # References: every shape word follows its colour, and colour and shape single out one
    # object of a `shapes` image, so every shape word of every reference is scored.
    items, shape_words = [], 0
    for record in split:
        for caption in record.captions:
            words = caption.split()
            shape_words += sum(w in SHAPE_WORDS for w in words)
            items.append((words, word_by_word(run, record, words), record.objects,
                          (record.height, record.width)))
    reference = corpus_attention_correctness(items, "shapes", run.grid_shape)
    assert results["attention_words_references"] == reference.count == shape_words
    assert results["attention_words_skipped_references"] == 0
    assert results["attention_correctness_references"] == pytest.approx(
        100 * reference.correctness, abs=1e-4)
    assert results["attention_uniform_baseline_references"] == pytest.approx(
        100 * reference.baseline, abs=1e-9)
    # Generated captions: their shape words are either scored or skipped.
    captions = generate(run, split, beam_size=2)
    generated = sum(w in SHAPE_WORDS for c in captions.values() for w in c.words)
    assert results["attention_words"] + results["attention_words_skipped"] == generated
    assert results["tokenizer"] in ("ptb", "simple")


@pytest.mark.slow
@pytest.mark.parametrize("java", [True, False], ids=["java", "no-java"])
def test_the_json_says_which_tokenizer_ran(run, tmp_path, monkeypatch, java):
    if java:
        require_java()
    else:
        monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no java on the PATH
    out = tmp_path / "scores.json"
    assert main(["evaluate", str(run.run_dir), "--dataset", "shapes", "--beam-size", "2",
                 "--json", str(out), "--data-option", f"num_images={IMAGES}"]) == 0
    scores = json.loads(out.read_text())
    assert scores["tokenizer"] == ("ptb" if java else "simple")
    if not java:
        assert "METEOR" not in scores  # METEOR needs the PTB tokens
    for name in ("attention_correctness", "attention_words", "attention_words_skipped",
                 "attention_correctness_references", "attention_uniform_baseline_references",
                 "attention_words_references", "attention_words_skipped_references"):
        assert name in scores, name


def test_printed_scores_line_up_however_long_the_name():
    from captioner.evaluate import format_results

    lines = format_results({"BLEU-4": 75.5, "attention_uniform_baseline_references": 6.8,
                            "attention_words_skipped_references": 0}).splitlines()
    assert len({len(line) for line in lines}) == 1  # values end in one column
    assert lines[1].split() == ["attention_uniform_baseline_references", "6.80"]


@pytest.mark.slow
def test_an_image_tensorflow_cannot_decode_is_named_and_counted_not_dropped_silently(
        run, shared_data, tmp_path, caplog):
    # A JPEG cut short, left unchecked at load time; TensorFlow cannot decode it.
    coco = tmp_path / "coco"
    (coco / "train2017").mkdir(parents=True)
    (coco / "annotations").symlink_to(shared_data / "coco-mini" / "annotations")
    images = sorted((shared_data / "coco-mini" / "train2017").glob("*.jpg"))[:4]
    for image in images:
        (coco / "train2017" / image.name).write_bytes(image.read_bytes())
    cut = coco / "train2017" / images[1].name
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 3])
    assert load_split("coco", "train", coco, max_images=4).skipped == 1  # the load check's
    with caplog.at_level("WARNING"):
        results = evaluate(run, "coco", "train", data_dir=str(coco), beam_size=1,
                           options={"max_images": 4, "check_images": False}, metrics=("bleu",))
    assert results["images"] == 3 and results["skipped_images"] == 1
    assert any(str(cut) in r.getMessage() for r in caplog.records)
