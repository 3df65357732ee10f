"""The prepared folder holds exactly what the TensorFlow pipelines serve, and reads without
TensorFlow."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from common.errors import UserError
from common.training.prepare import MANIFEST, Prepared, load_prepared
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


def _two_buckets() -> Prepared:
    """A translation `Prepared` in memory: 5 pairs in the 8-wide bucket, 3 in the 16-wide,
    each pair's id in its first source token."""

    def bucket(ids, width):
        source = np.zeros((len(ids), width), np.int32)
        source[:, 0] = ids
        target = np.zeros((len(ids), width), np.int32)
        target[:, :2] = 5
        return {f"source.{width}": source, f"target_in.{width}": target,
                f"target_out.{width}": target}

    arrays = {**bucket([1, 2, 3, 4, 5], 8), **bucket([6, 7, 8], 16)}
    return Prepared(REPO, "seq2seq", {}, {}, {}, {"train": arrays})


def test_pad_serves_every_example_once_per_pass_and_drop_only_full_batches():
    prepared = _two_buckets()
    dropped = list(prepared.batches("train", 4, seed=0))
    assert [b["source"].shape for b in dropped] == [(4, 8)]  # the 16-wide bucket: never
    padded = list(prepared.batches("train", 4, seed=0, remainder="pad"))
    assert sorted(b["source"].shape for b in padded) == [(4, 8), (4, 8), (4, 16)]
    ids = [i for b in padded for i in b["source"][:, 0].tolist()]
    assert sorted(i for i in ids if i) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert sum(prepared.real_rows(b) for b in padded) == 8
    for batch in padded:  # the padding rows: all zeros, after the real ones
        real = prepared.real_rows(batch)
        assert all(not v[real:].any() for v in batch.values())
    with pytest.raises(ValueError, match="remainder"):
        next(prepared.batches("train", 4, seed=0, remainder="keep"))


@pytest.mark.parametrize("damage, file", [
    ("truncate", "train.npz"), ("remove", "train.npz"), ("remove", "vocab.target.txt")])
def test_a_damaged_folder_is_one_line_naming_the_file(translation_folder, tmp_path, damage, file):
    import shutil

    from common.errors import DataError

    copy = tmp_path / "copy"
    shutil.copytree(translation_folder, copy)
    if damage == "truncate":
        data = (copy / file).read_bytes()
        (copy / file).write_bytes(data[: len(data) // 2])
    else:
        (copy / file).unlink()
    with pytest.raises(DataError, match=f"damaged or incomplete prepared folder: {file} ") as err:
        load_prepared(copy)
    assert "\n" not in str(err.value)


def _rewrite_npz(file, change) -> None:
    with np.load(file) as npz:
        arrays = {key: npz[key] for key in npz.files}
    change(arrays)
    np.savez(file, **arrays)


def _cut_vocabulary(folder) -> None:
    lines = (folder / "vocab.target.txt").read_text(encoding="utf-8").splitlines()
    (folder / "vocab.target.txt").write_text("\n".join(lines[:10]) + "\n", encoding="utf-8")


def _duplicate_token(folder) -> None:
    """Line 6 made `<unk>` by hand: the same size, so only the tokens tell."""
    lines = (folder / "vocab.target.txt").read_text(encoding="utf-8").splitlines()
    lines[5] = "<unk>"
    (folder / "vocab.target.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _edit_manifest(**fields):
    def edit(folder) -> None:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        (folder / MANIFEST).write_text(json.dumps({**manifest, **fields}), encoding="utf-8")
    return edit


def _drop_target_out(folder) -> None:
    _rewrite_npz(folder / "train.npz", lambda arrays: [arrays.pop(key) for key in list(arrays)
                                                       if key.startswith("target_out.")])


def _short_target_in(folder) -> None:
    def change(arrays):
        key = next(key for key in arrays if key.startswith("target_in."))
        arrays[key] = arrays[key][:-1]
    _rewrite_npz(folder / "train.npz", change)


@pytest.mark.parametrize("damage, file, message", [
    # A vocabulary cut short (an interrupted copy): training used to end as "diverged".
    (_cut_vocabulary, "train.npz", "the vocabulary has 10"),
    # Training used to run, and the run's translate refused the vocabulary afterwards.
    (_duplicate_token, "vocab.target.txt", "duplicate vocabulary tokens: ['<unk>']"),
    (_drop_target_out, "train.npz", "no target_out."),
    (_short_target_in, "train.npz", "expected"),
    (_edit_manifest(vocabularies=["vocab.source.txt"]), MANIFEST, "vocabularies"),
    (_edit_manifest(splits=[]), MANIFEST, "expected train"),
    (_edit_manifest(family="robot"), MANIFEST, "family 'robot'"),
])
def test_a_folder_whose_files_read_but_do_not_agree_is_one_line(translation_folder, tmp_path,
                                                                 damage, file, message):
    """Files that load but are wrong (a cut vocabulary, a missing or short array, a manifest of
    the wrong structure) are one `DataError` naming the file, not a traceback or NaNs later."""
    import shutil

    from common.errors import DataError

    copy = tmp_path / "copy"
    shutil.copytree(translation_folder, copy)
    damage(copy)
    with pytest.raises(DataError, match="damaged prepared file") as err:
        load_prepared(copy)
    assert file in str(err.value) and message in str(err.value) and "\n" not in str(err.value)


def test_a_caption_folder_with_ids_past_its_vocabulary_is_refused(caption_folder, tmp_path):
    import shutil

    from common.errors import DataError

    copy = tmp_path / "copy"
    shutil.copytree(caption_folder, copy)
    _rewrite_npz(copy / "train.npz", lambda arrays: arrays["caption_out"].__setitem__(
        (0, 0), 10_000))
    with pytest.raises(DataError, match="caption_out holds ids from 0 to 10000"):
        load_prepared(copy)
    load_prepared(caption_folder)  # the folder as prepared loads
