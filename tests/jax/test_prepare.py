"""The prepared folder holds exactly what the TensorFlow pipelines serve, and reads without
TensorFlow."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from common.errors import UserError
from common.training.prepare import MANIFEST, load_prepared
from tests.jax.conftest import REPO, WORKER


def _rows(batch: dict, keys: tuple[str, ...]) -> set:
    """Each example of a batch as a tuple of its fields without trailing padding."""
    out = set()
    for i in range(len(batch[keys[0]])):
        out.add(tuple(tuple(np.trim_zeros(np.asarray(batch[k][i]), "b").tolist())
                      for k in keys))
    return out


def test_prepared_translation_matches_the_tf_pipeline(translation_folder):
    from common.config import from_dict
    from common.text import Vocabulary
    from seq2seq.config import RunConfig
    from seq2seq.datasets import load_pairs, make_dataset

    prepared = load_prepared(translation_folder)
    config = from_dict(RunConfig, prepared.config)
    pairs = load_pairs("tsv", path=config.data.data, split="train",
                       max_length=config.data.max_length)
    vocabs = [Vocabulary.load(translation_folder / prepared.vocab_files[n])
              for n in ("source", "target")]
    keys = ("source", "target_in", "target_out")
    expected = set()
    for batch in make_dataset(pairs, *vocabs, batch_size=64, bucket=False):
        expected |= _rows({k: v.numpy() for k, v in batch.items()}, keys)
    got = set()
    for bound in (8,):
        got |= _rows({k: prepared.splits["train"][f"{k}.{bound}"] for k in keys}, keys)
    assert prepared.num_examples() == len(pairs.sources)
    assert got == expected
    batches = list(prepared.batches("train", 8, seed=1, epoch=0))
    assert len(batches) == len(pairs.sources) // 8
    assert all(b["source"].shape == (8, 8) for b in batches)
    again = list(prepared.batches("train", 8, seed=1, epoch=0))
    other = list(prepared.batches("train", 8, seed=1, epoch=1))
    assert all(np.array_equal(a["source"], b["source"]) for a, b in zip(batches, again))
    assert not all(np.array_equal(a["source"], b["source"]) for a, b in zip(batches, other))


def test_prepared_captions_match_the_tf_pipeline(caption_folder):
    from captioner.config import CaptionerRunConfig
    from captioner.datasets import load_split
    from captioner.datasets.pipeline import make_dataset
    from common.config import from_dict
    from common.text import Vocabulary

    prepared = load_prepared(caption_folder)
    config = from_dict(CaptionerRunConfig, prepared.config)
    split = load_split("shapes", "train", None, **config.data.options)
    vocab = Vocabulary.load(caption_folder / prepared.vocab_files["words"])
    dataset = make_dataset(split, vocab, image_size=config.encoder.image_size, batch_size=1000,
                           max_length=config.data.max_length, pad_to_max_length=True)
    batch = {k: v.numpy() for k, v in next(iter(dataset)).items()}
    arrays = prepared.splits["train"]
    np.testing.assert_array_equal(arrays["caption_in"], batch["caption_in"])
    np.testing.assert_array_equal(arrays["caption_out"], batch["caption_out"])
    images = arrays["images"][arrays["owner"]].astype(np.float32)
    assert arrays["images"].dtype == np.uint8
    np.testing.assert_allclose(images, batch["image"], atol=0.5)  # rounded to uint8
    assert "valid" in prepared.splits


def test_load_prepared_imports_no_tensorflow_nor_keras(translation_folder, caption_folder):
    code = (
        f"import runpy, sys; runpy.run_path({str(WORKER)!r}, run_name='blocker');"
        "from common.training.prepare import load_prepared\n"
        f"for path in ({str(translation_folder)!r}, {str(caption_folder)!r}):\n"
        "    p = load_prepared(path); b = next(p.batches('train', 8, seed=0))\n"
        "    print(p.family, sorted(b), p.num_examples())\n"
        "print('loaded:', sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("seq2seq ['source', 'target_in', 'target_out']")
    assert lines[1].startswith("captioner ['caption_in', 'caption_out', 'image']")
    assert lines[-1] == "loaded: []"


def test_an_unfinished_folder_is_refused(translation_folder, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(translation_folder, copy)
    (copy / MANIFEST).unlink()
    with pytest.raises(UserError, match="not a prepared folder"):
        load_prepared(copy)
    with pytest.raises(UserError, match="no such prepared folder"):
        load_prepared(tmp_path / "nothing")
