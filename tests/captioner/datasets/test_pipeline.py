"""The tf.data pipeline: batch format, padding, truncation, determinism and file images."""

import io
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from captioner.datasets import (
    CaptionSplit,
    build_vocabulary,
    load_split,
    make_dataset,
    make_image_dataset,
)
from common.errors import UserError
from common.images import decode_in_graph
from common.text import tokenize_texts

COCO_MINI = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "coco-mini"


@pytest.fixture(scope="module")
def split():
    return load_split("shapes", "valid", num_images=12, seed=5)


@pytest.fixture(scope="module")
def vocab(split):
    return build_vocabulary(split)


def _pairs(ds):
    """Every (image bytes, caption_in row, caption_out row) of a dataset, padding removed."""
    out = []
    for batch in ds:
        for image, cin, cout in zip(batch["image"].numpy(), batch["caption_in"].numpy(),
                                    batch["caption_out"].numpy()):
            n = int((cout != 0).sum())
            assert (cin[n:] == 0).all() and (cout[n:] == 0).all()
            out.append((image.astype(np.uint8).tobytes(), tuple(cin[:n]), tuple(cout[:n])))
    return out


def _expected(split, vocab, max_length=None):
    out = []
    for record in split:
        for words in tokenize_texts(list(record.captions), lowercase=True):
            ids = vocab.encode(words)
            if max_length is not None:
                ids = ids[: max_length - 1]
            out.append((record.image.tobytes(), tuple([vocab.start_id] + ids),
                        tuple(ids + [vocab.end_id])))
    return out


def test_build_vocabulary_counts_lowercased_caption_words(split, vocab):
    # shapes captions are lowercase words and punctuation between spaces: count them directly.
    counts = Counter(w for r in split for c in r.captions for w in c.split())
    expected = sorted(counts, key=lambda w: (-counts[w], w))
    assert vocab.tokens == ["<pad>", "<start>", "<end>", "<unk>"] + expected
    upper = CaptionSplit("x", "train", [replace(split[0], captions=("A Red Circle",))])
    assert build_vocabulary(upper).tokens[4:] == ["a", "circle", "red"]
    small = build_vocabulary(split, max_size=8)
    assert len(small) == 8 and small.tokens[4] == vocab.tokens[4]


def test_batches_have_the_documented_format(split, vocab):
    ds = make_dataset(split, vocab, batch_size=5)
    batch = next(iter(ds))
    assert set(batch) == {"image", "caption_in", "caption_out"}
    assert batch["image"].dtype == tf.float32 and batch["image"].shape == (5, 64, 64, 3)
    assert batch["caption_in"].dtype == tf.int32 and batch["caption_out"].dtype == tf.int32
    assert batch["caption_in"].shape == batch["caption_out"].shape
    assert (batch["caption_in"][:, 0].numpy() == vocab.start_id).all()
    lengths = (batch["caption_out"].numpy() != 0).sum(axis=1)
    assert lengths.max() == batch["caption_out"].shape[1]  # padded to the longest
    assert (batch["caption_out"].numpy()[np.arange(5), lengths - 1] == vocab.end_id).all()
    image = batch["image"].numpy()
    assert 0 <= image.min() and image.max() <= 255


def test_unshuffled_pairs_match_the_split_in_order(split, vocab):
    assert _pairs(make_dataset(split, vocab, batch_size=7)) == _expected(split, vocab)


def test_max_length_truncates_and_pads_to_a_fixed_length(split, vocab):
    ds = make_dataset(split, vocab, batch_size=4, max_length=5, pad_to_max_length=True,
                      drop_remainder=True)
    shapes = {tuple(b["caption_in"].shape) for b in ds}
    assert shapes == {(4, 5)}
    got = _pairs(make_dataset(split, vocab, batch_size=4, max_length=5))
    assert got == _expected(split, vocab, max_length=5)


def test_shuffle_is_deterministic_for_a_seed_and_a_permutation(split, vocab):
    def order(seed):
        return _pairs(make_dataset(split, vocab, batch_size=6, shuffle=True, seed=seed))

    first, again, other = order(1), order(1), order(2)
    assert first == again
    assert first != other
    assert sorted(first) == sorted(_expected(split, vocab))


def test_repeat_and_resize(split, vocab):
    ds = make_dataset(split, vocab, image_size=(32, 48), batch_size=8, repeat=True)
    batches = list(ds.take(20))  # more than one pass over 12 images x 3-5 captions
    assert batches[0]["image"].shape == (8, 32, 48, 3)
    assert len(batches) == 20


def test_image_dataset_gives_each_image_once_in_order(split):
    ds = make_image_dataset(split, batch_size=5)
    indices = np.concatenate([b["index"].numpy() for b in ds])
    np.testing.assert_array_equal(indices, np.arange(len(split)))
    first = next(iter(ds))["image"].numpy()[0]
    np.testing.assert_array_equal(first, split[0].image.astype(np.float32))


def test_bad_arguments_are_user_errors(split, vocab):
    with pytest.raises(UserError, match="batch_size"):
        make_dataset(split, vocab, batch_size=0)
    with pytest.raises(UserError, match="max_length"):
        make_dataset(split, vocab, max_length=1)
    with pytest.raises(UserError, match="image_size"):
        make_dataset(split, vocab, image_size=(1, 2, 3))


@pytest.fixture(scope="module")
def coco_tiny(tmp_path_factory):
    """A copy of three coco-mini images with a fourth, corrupt one."""
    if not COCO_MINI.is_dir():
        pytest.skip(f"{COCO_MINI} is not there")
    root = tmp_path_factory.mktemp("tiny")
    names = sorted(p.name for p in (COCO_MINI / "train2017").glob("*.jpg"))[:3]
    for name in names:
        shutil.copy(COCO_MINI / "train2017" / name, root / name)
    (root / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not a jpeg")
    lines = ["image,caption"] + [f"{n},a photo number {i}" for i, n in enumerate(names)]
    lines.append("broken.jpg,a broken photo")
    (root / "train.csv").write_text("\n".join(lines) + "\n")
    return root, names


def test_file_images_are_decoded_and_resized_like_pil(coco_tiny):
    root, names = coco_tiny
    split = load_split("csv", "train", root)
    assert len(split) == 3 and split.skipped == 1
    vocab = build_vocabulary(split)
    batch = next(iter(make_dataset(split, vocab, image_size=64, batch_size=8)))
    assert batch["image"].shape == (3, 64, 64, 3)
    for image, record in zip(batch["image"].numpy(), split):
        with Image.open(record.path) as pil:
            reference = np.asarray(pil.convert("RGB").resize((64, 64), Image.BILINEAR), float)
        assert np.abs(image - reference).mean() < 8
    with pytest.raises(UserError, match="image_size"):
        make_dataset(split, vocab)


def test_a_jpeg_cut_short_is_named_and_skipped_at_load_time(coco_tiny, tmp_path, caplog):
    root, names = coco_tiny
    data = (root / names[0]).read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) // 3])  # header intact, data cut
    (tmp_path / "padded.jpg").write_bytes(data + bytes(100))  # bytes after the end marker
    shutil.copy(root / names[1], tmp_path / "whole.jpg")
    (tmp_path / "train.csv").write_text("image,caption\ncut.jpg,a cut photo\n"
                                        "padded.jpg,a padded photo\nwhole.jpg,a whole photo\n")
    with caplog.at_level("WARNING"):
        split = load_split("csv", "train", tmp_path)
    assert split.skipped == 1 and [Path(r.path).name for r in split] == ["padded.jpg",
                                                                         "whole.jpg"]
    said = [r.getMessage() for r in caplog.records if "cut.jpg" in r.getMessage()]
    assert len(said) == 1 and "a JPEG cut short" in said[0] and "truncated" in said[0]
    vocab = build_vocabulary(split)
    images = sum(int(b["image"].shape[0]) for b in make_dataset(split, vocab, image_size=32))
    assert images == 2  # nothing else is dropped on the way


def test_a_file_that_does_not_decode_past_the_load_check_is_dropped_not_fatal(coco_tiny,
                                                                              tmp_path):
    root, names = coco_tiny
    data = (root / names[0]).read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) // 3])  # header intact, data cut
    shutil.copy(root / names[1], tmp_path / "whole.jpg")
    (tmp_path / "train.csv").write_text("image,caption\ncut.jpg,a cut photo\n"
                                        "whole.jpg,a whole photo\n")
    split = load_split("csv", "train", tmp_path, check_images=False)
    vocab = build_vocabulary(split)
    images = sum(int(b["image"].shape[0]) for b in make_dataset(split, vocab, image_size=32))
    indices = [int(i) for b in make_image_dataset(split, image_size=32) for i in b["index"]]
    # Unchecked at load time, TF fails on the data: the pair is dropped with a warning.
    assert split.skipped == 0 and len(split) == 2
    assert images == 1 and indices == [1]


def test_the_load_check_is_not_fooled_by_a_thumbnail_or_a_multi_picture_file(tmp_path):
    """A camera's JPEG carries a thumbnail (a whole JPEG, ending FF D9) in its header, and a
    phone's may be an MPO (several JPEGs): cut short, both are caught, as TensorFlow cannot
    decode them; whole, both pass."""
    from captioner.datasets.records import check_image

    rng = np.random.default_rng(0)
    photo = Image.fromarray(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8))
    thumbnail = io.BytesIO()
    photo.resize((160, 120)).save(thumbnail, "JPEG", quality=80)
    with_thumbnail = io.BytesIO()
    photo.save(with_thumbnail, "JPEG", quality=90, comment=thumbnail.getvalue())
    data = with_thumbnail.getvalue()
    header_end = data.find(thumbnail.getvalue()) + len(thumbnail.getvalue())
    multi = io.BytesIO()
    photo.save(multi, "MPO", save_all=True, append_images=[photo.resize((200, 150))], quality=90)
    cases = {"thumbnail": (data, header_end + 1000), "mpo": (multi.getvalue(), None)}
    for name, (whole, cut_at) in cases.items():
        cut = whole[: cut_at or len(whole) // 2]
        with pytest.raises(tf.errors.InvalidArgumentError):
            decode_in_graph(tf.constant(cut)).numpy()  # what training would drop
        (tmp_path / f"{name}.jpg").write_bytes(cut)
        size, why = check_image(tmp_path / f"{name}.jpg")
        assert size is None and "a JPEG cut short" in why, name
        (tmp_path / f"{name}.jpg").write_bytes(whole)
        assert check_image(tmp_path / f"{name}.jpg") == ((300, 400), ""), name


def test_every_likely_image_file_gives_pillows_pixels_in_the_pipeline(tmp_path):
    """TensorFlow's decoders read a GIF frame offset in its canvas, a transparent GIF, a WebP
    with alpha and a palette BMP otherwise than Pillow (the run directory's `caption`) and
    refuse TIFF and an animated WebP (dropped from training without a word): such files go
    through Pillow; JPEG and PNG through TensorFlow as they are."""
    from common.images import load_image
    from tests.common.image_cases import good_images

    names = ["offset-frame.gif", "transparent.gif", "rgba.webp", "animated.webp",
             "palette.bmp", "image.tiff", "cmyk.jpg", "rgb.png", "photo.jpg", "gray16.png"]
    images = good_images()
    lines = ["image,caption"]
    for name in names:
        (tmp_path / name).write_bytes(images[name])
        lines.append(f"{name},a picture")
    (tmp_path / "train.csv").write_text("\n".join(lines) + "\n")
    split = load_split("csv", "train", tmp_path)
    assert [Path(r.path).name for r in split] == names
    found = {}
    for batch in make_image_dataset(split, image_size=32, batch_size=1):
        found[names[int(batch["index"][0])]] = batch["image"][0].numpy()
    assert sorted(found) == sorted(names)
    for name in names:
        pixels = np.asarray(load_image(images[name], name), np.float32)
        expected = tf.clip_by_value(tf.image.resize(pixels, (32, 32), antialias=True), 0, 255)
        np.testing.assert_allclose(found[name], expected.numpy(), atol=1e-3, err_msg=name)
