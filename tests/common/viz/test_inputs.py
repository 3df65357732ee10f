"""The figures read images as the model does (`common.images`): the same pixels for every
kind of image a user has, 16-bit ones scaled rather than clipped to white."""

import io

import numpy as np
import pytest
from PIL import Image, ImageOps

from common.images import load_image
from common.viz.inputs import as_rgb_image
from tests.common.image_cases import _rgb, good_images

GOOD = good_images()


@pytest.mark.parametrize("name", sorted(GOOD))
def test_figures_see_the_pixels_the_model_sees(name):
    expected = np.asarray(load_image(GOOD[name], name))
    assert np.array_equal(np.asarray(as_rgb_image(GOOD[name])), expected)
    with Image.open(io.BytesIO(GOOD[name])) as opened:  # a PIL image, as a caller may pass
        assert np.array_equal(np.asarray(as_rgb_image(opened)), expected)


def test_a_16_bit_image_is_scaled_to_its_8_bit_values():
    gray = np.asarray(_rgb().convert("L"))  # the image cases' gray16.png is this times 257
    picture = np.asarray(as_rgb_image(GOOD["gray16.png"]))
    assert gray.std() > 10  # not a flat image: white would not pass for it
    for channel in range(3):
        assert np.array_equal(picture[..., channel], gray)


def test_a_pil_image_already_turned_upright_is_not_turned_again():
    with Image.open(io.BytesIO(GOOD["phone-photo.jpg"])) as photo:
        turned = ImageOps.exif_transpose(photo)
        assert turned.size == (40, 48)
        assert np.array_equal(np.asarray(as_rgb_image(turned)), np.asarray(turned.convert("RGB")))
        assert np.array_equal(np.asarray(as_rgb_image(photo)), np.asarray(turned.convert("RGB")))
