"""A small trained captioner and its export, shared by the export and serving tests."""

from pathlib import Path

import pytest
from PIL import Image

from captioner.cli import main
from captioner.datasets import load_split


@pytest.fixture(scope="session")
def trained_captioner(tmp_path_factory) -> Path:
    """A `--preset tiny` run with enough steps (200, at a high learning rate, on 200 images)
    that its captions differ between images; its attention query is the demo's (`hidden+word`),
    so the export and serving tests cover it. No validation: the best checkpoint of its one
    epoch would be its last."""
    run = tmp_path_factory.mktemp("captioner") / "run"
    assert main(["train", "--preset", "tiny", "--out", str(run), "--seed", "3",
                 "--steps-per-epoch", "200", "--learning-rate", "0.01",
                 "--data-option", "num_images=200", "--attention-query", "hidden+word",
                 "--validation-examples", "0"]) == 0
    return run


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
