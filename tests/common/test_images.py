"""`common.images`: every image a user is likely to have is read as RGB; everything else is a
one-line `DataError` naming the file, and decompression bombs are refused unread."""

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageFile, ImageOps

from common.errors import DataError
from common.images import (
    REENCODED_GROWTH,
    declared_size,
    decode_in_graph,
    graph_bytes,
    load_image,
    lossless_bytes,
    prepare_for_graph,
)
from common.viz.inputs import as_rgb_image
from tests.common.image_cases import (
    _encode,
    _rgb,
    bad_images,
    bomb_png,
    exif_turned,
    good_images,
    png_chunk,
    write_cases,
)

GOOD = good_images()
BAD = bad_images()


@pytest.mark.parametrize("name", sorted(GOOD))
def test_every_likely_image_is_read_as_rgb(name):
    image = load_image(GOOD[name], name)
    assert image.mode == "RGB"
    with Image.open(io.BytesIO(GOOD[name])) as original:
        # The first frame of an animation; a photo turned as its EXIF says.
        assert image.size == ImageOps.exif_transpose(original).size


@pytest.mark.parametrize("name", sorted(GOOD))
def test_graph_bytes_decode_in_tensorflow_to_pillows_pixels(name):
    # What a SavedModel decodes is Pillow's reading of the file, pixel for pixel, JPEG
    # included (TensorFlow's default fast inverse DCT was 8 levels off on photo.jpg).
    decoded = decode_in_graph(tf.constant(graph_bytes(GOOD[name], name))).numpy()
    assert np.array_equal(decoded, np.asarray(load_image(GOOD[name], name))), name


def test_real_photos_decode_in_tensorflow_to_pillows_pixels(shared_data):
    photos = sorted((shared_data / "coco-mini" / "train2017").glob("*.jpg"))
    assert len(photos) == 26
    for photo in photos:
        data = photo.read_bytes()
        assert graph_bytes(data) == data  # sent to the graph as they are
        decoded = decode_in_graph(tf.constant(data)).numpy()
        assert np.array_equal(decoded, np.asarray(load_image(data))), photo.name


def test_formats_the_graph_cannot_read_are_reencoded_and_the_others_kept():
    for name in ("image.tiff", "cmyk.jpg", "phone-photo.jpg", "palette.bmp", "one-bit.bmp",
                 "offset-frame.gif", "transparent.gif", "rgba.webp", "animated.webp"):
        assert graph_bytes(GOOD[name], name) != GOOD[name], name
        assert graph_bytes(GOOD[name], name).startswith(b"BM"), name  # lossless BMP
    for name in ("rgb.png", "photo.jpg", "animated.gif", "image.bmp", "image.webp",
                 "jpeg-named.png", "gray16.png", "gray.bmp", "rgba.bmp"):
        assert graph_bytes(GOOD[name], name) == GOOD[name], name


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "TIFF"])
def test_a_photo_is_turned_upright_as_its_exif_says_on_every_path(fmt):
    """Each of the 8 EXIF orientations, by Pillow's own `exif_transpose` (the reference): what
    `load_image` gives, what the figures read from the bytes and from the opened image, and
    what the graph decodes from `graph_bytes` and from a server's `prepare_for_graph`
    (re-encoded, upright, since TensorFlow ignores EXIF). TIFF: Pillow turns it as it loads
    it, which must not be done twice."""
    stored = _rgb(24, 40)
    options = {"quality": 95} if fmt == "JPEG" else {"lossless": True} if fmt == "WEBP" else {}
    for turn in range(1, 9):
        data = exif_turned(stored, fmt, turn, **options)
        with Image.open(io.BytesIO(data)) as photo:
            reference = np.asarray(ImageOps.exif_transpose(photo).convert("RGB"))
        assert reference.shape[:2] == ((24, 40) if turn < 5 else (40, 24))
        loaded = load_image(data)
        assert np.array_equal(np.asarray(loaded), reference), (fmt, turn)
        assert np.array_equal(np.asarray(as_rgb_image(data)), reference), (fmt, turn)
        with Image.open(io.BytesIO(data)) as photo:
            assert np.array_equal(np.asarray(as_rgb_image(photo)), reference), (fmt, turn)
        # What load_image gives carries no turn: read again, it is not turned twice.
        assert np.array_equal(np.asarray(as_rgb_image(loaded)), reference), (fmt, turn)
        for sent in (graph_bytes(data), prepare_for_graph(data, "photo")):
            kept = turn == 1 and fmt != "TIFF"  # as it is only when the graph reads it so
            assert (sent == data) == kept, (fmt, turn)
            decoded = decode_in_graph(tf.constant(sent)).numpy()
            assert np.array_equal(decoded, reference), (fmt, turn)


def test_a_png_whose_exif_comes_after_its_pixels_is_turned_on_every_path():
    """The eXIf chunk may follow the pixel data: the header does not show it, so the bytes are
    read in full (and re-encoded for the graph) rather than passed on as stored."""
    stored = _rgb(24, 40)
    upright_png = exif_turned(stored, "PNG", 6)
    with Image.open(io.BytesIO(upright_png)) as photo:
        reference = np.asarray(ImageOps.exif_transpose(photo).convert("RGB"))
    plain = _encode(stored, "PNG")
    end = plain.index(b"IEND") - 4
    exif = Image.Exif()
    exif[0x0112] = 6
    late = plain[:end] + png_chunk(b"eXIf", exif.tobytes()) + plain[end:]
    with Image.open(io.BytesIO(late)) as photo:
        assert "exif" not in photo.info  # not in the header
    assert np.array_equal(np.asarray(load_image(late)), reference)
    with Image.open(io.BytesIO(late)) as photo:
        assert np.array_equal(np.asarray(as_rgb_image(photo)), reference)
    for sent in (graph_bytes(late), prepare_for_graph(late, "photo")):
        assert sent != late
        assert np.array_equal(decode_in_graph(tf.constant(sent)).numpy(), reference)


def test_a_malformed_or_out_of_range_orientation_shows_the_pixels_as_stored():
    stored = _rgb(24, 40)
    for turn in (0, 9, 300):
        data = exif_turned(stored, "PNG", turn)
        assert np.array_equal(np.asarray(load_image(data)), np.asarray(stored)), turn
        assert graph_bytes(data) == data


def test_sixteen_bit_is_scaled_like_tensorflow():
    pixels = np.array([[0, 257, 32896, 65535]], np.uint16)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    ours = np.asarray(load_image(buffer.getvalue()))[..., 0]
    theirs = tf.io.decode_png(buffer.getvalue(), channels=1).numpy()[..., 0]
    assert ours.tolist() == theirs.tolist() == [[0, 1, 128, 255]]


def test_every_sixteen_bit_level_is_scaled_like_tensorflow():
    """All 65,536 levels: a rounded x / 257 was one level off TensorFlow's for 16,256 of them
    (the export's pixels were not the run directory's)."""
    levels = np.arange(65536, dtype=np.uint16).reshape(256, 256)
    buffer = io.BytesIO()
    Image.fromarray(levels).save(buffer, format="PNG")
    ours = np.asarray(load_image(buffer.getvalue()))[..., 0]
    theirs = tf.io.decode_png(buffer.getvalue(), channels=1).numpy()[..., 0]
    assert np.array_equal(ours, theirs)


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_files_are_one_line_data_errors_naming_the_file(tmp_path, name):
    data, word = BAD[name]
    path = tmp_path / name
    path.write_bytes(data)
    for source in (path, str(path)):
        with pytest.raises(DataError) as caught:
            load_image(source)
        message = str(caught.value)
        assert message.startswith(f"{path}: ") and word in message
        assert "\n" not in message


def test_a_directory_and_a_missing_path(tmp_path):
    _, bad = write_cases(tmp_path / "cases")
    for name in ("a-folder.png", "missing.png"):
        path, word = bad[name]
        with pytest.raises(DataError, match=word):
            load_image(path)


def test_bytes_are_named_as_told():
    with pytest.raises(DataError, match=r"^upload 3: empty file"):
        load_image(b"", name="upload 3")


def test_a_bomb_is_refused_from_its_header_without_decoding(monkeypatch):
    def no_decoding(self, *args, **kwargs):
        raise AssertionError("the bomb was decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", no_decoding)
    for width, height in ((40_000, 40_000), (6_000, 6_000)):  # above and below Pillow's limit
        with pytest.raises(DataError, match="refused before decoding"):
            load_image(bomb_png(width, height), name="bomb.png")
    with pytest.raises(DataError, match="6000x6000 = 36000000 pixels"):
        graph_bytes(bomb_png(6_000, 6_000), name="bomb.png")
    # a raised limit lets the header through (and then the fake pixels fail to decode)
    monkeypatch.undo()
    assert declared_size(bomb_png(6_000, 6_000), max_pixels=40_000_000) == (6000, 6000, "PNG")
    with pytest.raises(DataError, match="truncated or corrupt PNG"):
        load_image(bomb_png(6_000, 6_000), max_pixels=40_000_000)


def test_a_reencoded_image_stays_within_its_growth_bound_and_keeps_its_pixels():
    """A small file of many pixels (a TIFF of one colour) would be a BMP of 3 bytes a pixel:
    a server holding a request's images would need gigabytes. It becomes a PNG instead."""
    flat = Image.new("RGB", (3000, 2000), (10, 200, 30))
    flat.paste((200, 20, 90), (100, 100, 900, 700))
    buffer = io.BytesIO()
    flat.save(buffer, format="TIFF", compression="tiff_deflate")
    data = buffer.getvalue()
    for sent in (graph_bytes(data, "flat.tiff"), prepare_for_graph(data, "flat.tiff")):
        assert len(sent) <= REENCODED_GROWTH * len(data) and sent.startswith(b"\x89PNG")
        decoded = decode_in_graph(tf.constant(sent)).numpy()
        assert np.array_equal(decoded, np.asarray(flat))
    # An image that does not compress that well stays a BMP, whose size is computed right.
    photo = GOOD["image.tiff"]
    assert graph_bytes(photo, "image.tiff").startswith(b"BM")
    image = load_image(photo, "image.tiff")
    assert len(lossless_bytes(image)) == len(lossless_bytes(image, len(lossless_bytes(image))))
    assert lossless_bytes(image, len(lossless_bytes(image)) - 1).startswith(b"\x89PNG")
