"""One image pre-processing for training, `caption RUN_DIR` and the export
(`captioner.preprocessing`): real COCO photos of several sizes and aspect ratios, not resized
beforehand, get the same words and attention from a run directory and from its export, and
the same pixels in training's input pipeline."""

import numpy as np
import pytest
from PIL import Image

from captioner.datasets import load_split
from captioner.datasets.pipeline import make_image_dataset
from captioner.export import ExportedCaptioner
from captioner.inference import CaptionerRun, read_image
from captioner.preprocessing import resize_pixels

#: coco-mini photos: 500x375 (4:3), 480x640 (portrait), 640x383 (wide), 621x640 (near square),
#: 640x522.
PHOTOS = ("000000084284.jpg", "000000121647.jpg", "000000125870.jpg", "000000256353.jpg",
          "000000358083.jpg")


@pytest.fixture(scope="module")
def photos(shared_data):
    folder = shared_data / "coco-mini" / "train2017"
    paths = [folder / name for name in PHOTOS]
    if not all(p.is_file() for p in paths):
        pytest.skip(f"coco-mini photos not found in {folder}")
    return paths


@pytest.fixture(scope="module")
def run(trained_captioner):
    return CaptionerRun(trained_captioner)


@pytest.fixture(scope="module")
def exported(exported_captioner):
    return ExportedCaptioner(exported_captioner)


def assert_same_captions(expected, got):
    """The same words and attention (within 1e-5: the same pixels give the same maps; Pillow's
    bilinear resize, which `caption RUN_DIR` used before, moved this model's maps by up to
    5e-4 on these photos and kept its words)."""
    assert [path for path, _ in got] == [path for path, _ in expected]
    for (path, e), (_, g) in zip(expected, got, strict=True):
        assert g.words == e.words, path
        assert g.attention.shape == e.attention.shape, path
        np.testing.assert_allclose(g.attention, e.attention, atol=1e-5, err_msg=path)


def test_the_photos_are_of_several_sizes_none_the_encoders(photos, run):
    sizes = [Image.open(p).size for p in photos]
    assert len(set(sizes)) == len(sizes) and len({w / h for w, h in sizes}) == len(sizes)
    assert all(min(size) > 5 * max(run.image_size) for size in sizes)


@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 2])
def test_a_run_and_its_export_caption_photos_alike(run, exported, photos, beam_size):
    expected, failed = run.caption_files(photos, beam_size=beam_size)
    got, failed_too = exported.caption_files(photos, beam_size=beam_size)
    assert failed == failed_too == []
    assert len({tuple(c.words) for _, c in expected}) > 1, "the model is degenerate"
    assert_same_captions(expected, got)


@pytest.mark.slow
def test_a_turned_photo_is_captioned_upright_by_both(run, exported, photos, tmp_path):
    # A photo stored sideways with EXIF orientation 6 (turn 90 degrees clockwise to show it),
    # as phones write them: both caption the upright photo.
    phone = tmp_path / "phone.jpg"
    with Image.open(photos[0]) as picture:
        exif = Image.Exif()
        exif[0x0112] = 6
        picture.transpose(Image.Transpose.ROTATE_90).save(phone, quality=95,
                                                          exif=exif.tobytes())
    upright = read_image(photos[0], run.image_size)
    turned = read_image(phone, run.image_size)
    assert np.abs(turned - upright).mean() < 4  # (the JPEG saved again)
    expected, _ = run.caption_files([phone], beam_size=2)
    got, _ = exported.caption_files([phone], beam_size=2)
    assert_same_captions(expected, got)


def test_training_reads_a_photo_as_caption_does(run, photos, tmp_path):
    lines = ["image,caption"] + [f"{p},a photo" for p in photos]
    (tmp_path / "train.csv").write_text("\n".join(lines) + "\n")
    split = load_split("csv", "train", tmp_path)
    found = {}
    for batch in make_image_dataset(split, image_size=run.image_size, batch_size=2):
        for index, image in zip(batch["index"].numpy(), batch["image"].numpy()):
            found[int(index)] = image
    assert sorted(found) == list(range(len(photos)))
    for index, path in enumerate(photos):
        np.testing.assert_allclose(found[index], read_image(path, run.image_size), atol=1e-4,
                                   err_msg=str(path))


def test_resize_pixels_is_tensorflows_antialiased_bilinear_and_keeps_an_image_at_size():
    import tensorflow as tf

    rng = np.random.default_rng(0)
    photo = rng.integers(0, 256, (45, 60, 3), dtype=np.uint8)
    expected = tf.image.resize(photo.astype(np.float32), (32, 32), antialias=True).numpy()
    np.testing.assert_allclose(resize_pixels(photo, (32, 32)).numpy(), expected, atol=1e-4)
    np.testing.assert_array_equal(resize_pixels(photo, (45, 60)).numpy(), photo)
    batch = resize_pixels(np.stack([photo, photo]), (16, 20)).numpy()
    assert batch.shape == (2, 16, 20, 3) and batch.min() >= 0 and batch.max() <= 255

    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8)])
    def unknown_size(image):  # the shape known only at run time, as after decoding
        return resize_pixels(image, (45, 60))

    np.testing.assert_array_equal(unknown_size(photo).numpy(), photo)
    assert unknown_size(photo[:40]).shape == (45, 60, 3)
