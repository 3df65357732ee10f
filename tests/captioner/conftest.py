"""A small trained captioner and its export, shared by the export and serving tests."""

from pathlib import Path

import pytest
from PIL import Image

from captioner.cli import main
from captioner.datasets import load_split


@pytest.fixture(scope="session")
def exported_captioner(trained_captioner) -> Path:
    """`captioner export` of `trained_captioner`: beam sizes 1 and 2, default 2."""
    out = trained_captioner.parent / "export"
    assert main(["export", str(trained_captioner), str(out), "--beam-sizes", "1,2",
                 "--beam-size", "2"]) == 0
    return out


@pytest.fixture(scope="session")
def shape_images(tmp_path_factory) -> list[Path]:
    """Six test-split shapes images as PNGs at the tiny encoder's 32x32, so the run
    directory (Pillow) and the SavedModel (TensorFlow) see the same pixels."""
    folder = tmp_path_factory.mktemp("shape-images")
    paths = []
    for i, record in enumerate(load_split("shapes", "test", num_images=6)):
        paths.append(folder / f"shapes-{i}.png")
        Image.fromarray(record.image).resize((32, 32), Image.Resampling.BILINEAR).save(paths[-1])
    return paths
