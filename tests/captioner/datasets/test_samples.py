"""assets/samples/ is what scripts/make_sample_images.py makes, and its captions are true."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from captioner.datasets.shapes_metrics import parse_caption

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "assets" / "samples"


def _script():
    spec = importlib.util.spec_from_file_location("make_sample_images",
                                                  ROOT / "scripts" / "make_sample_images.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not SAMPLES.is_dir(), reason="assets/samples has not been made")
def test_the_script_remakes_the_shipped_samples(tmp_path):
    listing = _script().make_samples(tmp_path)
    assert json.loads((SAMPLES / "samples.json").read_text()) == listing
    assert {p.suffix for p in SAMPLES.iterdir()} == {".png", ".jpg", ".json"}
    for sample in listing:
        shipped = np.asarray(Image.open(SAMPLES / sample["file"]).convert("RGB"), np.int16)
        remade = np.asarray(Image.open(tmp_path / sample["file"]).convert("RGB"), np.int16)
        assert shipped.shape == (64, 64, 3)
        if sample["file"].endswith(".png"):
            np.testing.assert_array_equal(shipped, remade)
        else:  # JPEG decoders may differ by a level or two
            assert np.abs(shipped - remade).max() <= 3


def test_sample_captions_name_the_sample_objects(tmp_path):
    for sample in _script().make_samples(tmp_path):
        present = {o["category"] for o in sample["objects"]}
        for caption in sample["captions"]:
            named = {f"{o.colour} {o.shape}" for o in parse_caption(caption).objects}
            assert named == present
