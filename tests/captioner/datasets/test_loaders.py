"""The real-data loaders: coco on coco-mini, karpathy/flickr8k/csv on tiny files, bad input."""

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from captioner.datasets import DATASETS, load_split
from common.errors import DataError, UserError

COCO_MINI = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "coco-mini"
needs_coco = pytest.mark.skipif(not COCO_MINI.is_dir(), reason=f"{COCO_MINI} is not there")


def _image(path: Path, size=(24, 16), colour=(200, 30, 30)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path)
    return path


def _corrupt(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF garbage, not an image")
    return path


def test_registry_names():
    assert set(DATASETS.names()) == {"shapes", "coco", "karpathy", "flickr8k", "csv"}


@needs_coco
def test_coco_mini_loads_all_images_captions_and_boxes():
    split = load_split("coco", "train", COCO_MINI, with_objects=True)
    assert len(split) == 26 and split.num_captions == 130 and split.skipped == 0
    raw = json.loads((COCO_MINI / "annotations/captions_train2017.json").read_text())
    by_image = {}
    for ann in raw["annotations"]:
        by_image.setdefault(ann["image_id"], []).append(ann["caption"].strip())
    assert split.references() == by_image
    assert [r.image_id for r in split] == sorted(by_image)
    sizes = {i["id"]: (i["height"], i["width"]) for i in raw["images"]}
    instances = json.loads((COCO_MINI / "annotations/instances_train2017.json").read_text())
    names = {c["id"]: c["name"] for c in instances["categories"]}
    for record in split:
        assert (record.height, record.width) == sizes[record.image_id]
        assert Path(record.path).is_file()
        expected = sorted(
            (names[a["category_id"]], a["bbox"][0], a["bbox"][1]) for a in instances["annotations"]
            if a["image_id"] == record.image_id and not a["iscrowd"])
        assert sorted((o.category, o.box[0], o.box[1]) for o in record.objects) == expected
        for o in record.objects:
            assert 0 <= o.box[0] < o.box[2] <= record.width + 1
            assert 0 <= o.box[1] < o.box[3] <= record.height + 1
    # Boxes are read only when asked for on the (large) train file.
    assert load_split("coco", "train", COCO_MINI)[0].objects == ()
    # Without the image checks, a record with boxes still has its size (from the header):
    # attention correctness clips the boxes to it (an unknown size scored every word 0).
    unchecked = load_split("coco", "train", COCO_MINI, with_objects=True, check_images=False)
    assert [(r.height, r.width) for r in unchecked] == [(r.height, r.width) for r in split]


@needs_coco
def test_coco_skips_a_corrupt_image_with_a_warning(tmp_path, caplog):
    shutil.copytree(COCO_MINI / "annotations", tmp_path / "annotations")
    (tmp_path / "train2017").mkdir()
    files = sorted((COCO_MINI / "train2017").iterdir())
    for f in files[:25]:
        (tmp_path / "train2017" / f.name).symlink_to(f)
    _corrupt(tmp_path / "train2017" / files[25].name)
    with caplog.at_level(logging.WARNING):
        split = load_split("coco", "train", tmp_path)
    assert len(split) == 25 and split.skipped == 1 and split.num_captions == 125
    assert files[25].name in caplog.text
    (tmp_path / "train2017" / files[0].name).unlink()  # a missing image is skipped the same way
    assert load_split("coco", "train", tmp_path).skipped == 2


@needs_coco
def test_coco_missing_files_are_data_errors(tmp_path):
    with pytest.raises(DataError, match="captions_val2017.json"):
        load_split("coco", "valid", COCO_MINI)
    with pytest.raises(DataError, match="no such data directory"):
        load_split("coco", "train", tmp_path / "nowhere")
    with pytest.raises(UserError, match="data directory"):
        load_split("coco", "train")
    with pytest.raises(DataError, match="instances"):
        load_split("coco", "train", COCO_MINI, instances_file="nope.json", with_objects=True)
    (tmp_path / "annotations").mkdir()
    (tmp_path / "train2017").mkdir()
    (tmp_path / "annotations/captions_train2017.json").write_text("[1, 2]")
    with pytest.raises(DataError, match="COCO"):
        load_split("coco", "train", tmp_path)


def _karpathy(tmp_path: Path) -> Path:
    entries = []
    for i, split in enumerate(["train", "restval", "val", "test", "train"]):
        name = f"im{i}.jpg"
        _image(tmp_path / "val2014" / name)
        entries.append({"filepath": "val2014", "filename": name, "split": split, "cocoid": 100 + i,
                        "imgid": i, "sentences": [{"raw": f"A photo {i}. ", "tokens": []},
                                                  {"raw": f"Image {i}", "tokens": []}]})
    _corrupt(tmp_path / "val2014" / "im4.jpg")
    (tmp_path / "dataset_coco.json").write_text(json.dumps({"images": entries, "dataset": "coco"}))
    return tmp_path


def test_karpathy_train_is_train_plus_restval_and_skips_bad_images(tmp_path):
    root = _karpathy(tmp_path)
    train = load_split("karpathy", "train", root)
    assert [r.image_id for r in train] == [100, 101] and train.skipped == 1
    assert train[0].captions == ("A photo 0.", "Image 0")
    assert (train[0].height, train[0].width) == (16, 24)
    assert [r.image_id for r in load_split("karpathy", "val", root)] == [102]
    assert [r.image_id for r in load_split("karpathy", "test", root)] == [103]
    with pytest.raises(DataError, match="dataset_flickr8k.json"):
        load_split("karpathy", "test", root, file="dataset_flickr8k.json")
    (root / "bad.json").write_text('{"images": [{"split": "test"}]}')
    with pytest.raises(DataError, match="filename"):
        load_split("karpathy", "test", root, file="bad.json")


def test_flickr8k_reads_tokens_and_split_lists(tmp_path):
    lines = []
    for i in range(4):
        _image(tmp_path / "Flicker8k_Dataset" / f"{i}_x.jpg")
        lines += [f"{i}_x.jpg#{k}\tCaption {k} of image {i} ." for k in range(5)]
    (tmp_path / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "Flickr_8k.trainImages.txt").write_text("2_x.jpg\n0_x.jpg\n")
    (tmp_path / "Flickr_8k.devImages.txt").write_text("1_x.jpg\n")
    (tmp_path / "Flickr_8k.testImages.txt").write_text("3_x.jpg\n")
    train = load_split("flickr8k", "train", tmp_path)
    assert [r.image_id for r in train] == ["2_x.jpg", "0_x.jpg"]
    assert train[0].captions == tuple(f"Caption {k} of image 2 ." for k in range(5))
    assert [r.image_id for r in load_split("flickr8k", "dev", tmp_path)] == ["1_x.jpg"]
    assert load_split("flickr8k", "test", tmp_path).num_captions == 5
    (tmp_path / "Flickr_8k.testImages.txt").write_text("9_x.jpg\n")
    with pytest.raises(DataError, match="without captions"):
        load_split("flickr8k", "test", tmp_path)
    (tmp_path / "Flickr8k.token.txt").write_text("no tab here\n")
    with pytest.raises(DataError, match="token.txt:1"):
        load_split("flickr8k", "train", tmp_path)


def test_csv_groups_captions_by_image(tmp_path):
    _image(tmp_path / "img" / "a.png")
    _image(tmp_path / "img" / "b.png", colour=(0, 0, 255))
    (tmp_path / "valid.tsv").write_text(
        "file\ttext\nimg/b.png\tA blue image\nimg/a.png\tA red one\nimg/b.png\tBlue again\n")
    split = load_split("csv", "valid", tmp_path, image_column="file", caption_column="text")
    assert split.references() == {"img/b.png": ["A blue image", "Blue again"],
                                  "img/a.png": ["A red one"]}
    with Image.open(split[0].path) as image:
        assert np.asarray(image)[0, 0].tolist() == [0, 0, 255]
    with pytest.raises(DataError, match="no column 'caption'"):
        load_split("csv", "valid", tmp_path, image_column="file")
    with pytest.raises(DataError, match="test.csv"):
        load_split("csv", "test", tmp_path)


def test_csv_and_tsv_captions_are_read_as_written(tmp_path):
    """A TSV caption that starts with a quote mark is text (CSV quoting made it swallow the
    rows after it); a CSV caption with an unquoted comma is refused, naming the line (it was cut
    at the comma); a spreadsheet's byte order mark and a file not in UTF-8 are handled."""
    _image(tmp_path / "a.png")
    _image(tmp_path / "b.png", colour=(0, 0, 255))
    (tmp_path / "train.tsv").write_text(
        'image\tcaption\na.png\t"Stop" reads the sign.\nb.png\t"Hello, says a man.\n'
        "a.png\tA second caption.\nb.png\tA dog.\n", encoding="utf-8")
    split = load_split("csv", "train", tmp_path)
    assert split.references() == {"a.png": ['"Stop" reads the sign.', "A second caption."],
                                  "b.png": ['"Hello, says a man.', "A dog."]}
    (tmp_path / "train.tsv").unlink()
    (tmp_path / "train.csv").write_text(
        'image,caption\na.png,"A man, on a horse."\nb.png,A man rides a horse, holding a flag.\n')
    with pytest.raises(DataError, match=r"train.csv:3: 3 fields, the header has 2"):
        load_split("csv", "train", tmp_path)
    (tmp_path / "train.csv").write_text("image,caption\na.png,A red one.\n", encoding="utf-8-sig")
    assert load_split("csv", "train", tmp_path).references() == {"a.png": ["A red one."]}
    (tmp_path / "train.csv").write_bytes("image,caption\na.png,Un caf\xe9.\n".encode("latin-1"))
    with pytest.raises(DataError, match="train.csv: not UTF-8 text"):
        load_split("csv", "train", tmp_path)


def test_a_split_with_only_bad_images_is_a_data_error(tmp_path):
    _corrupt(tmp_path / "x.jpg")
    (tmp_path / "train.csv").write_text("image,caption\nx.jpg,a thing\n")
    with pytest.raises(DataError, match="no readable images"):
        load_split("csv", "train", tmp_path)


# Each loader's options, written out by hand from its docstring.
OPTIONS = {
    "shapes": ["num_images", "image_size", "seed", "with_masks"],
    "coco": ["year", "captions_file", "instances_file", "images_dir", "with_objects",
             "max_images", "check_images"],
    "karpathy": ["file", "images_dir", "max_images", "check_images"],
    "flickr8k": ["images_dir", "token_file", "max_images", "check_images"],
    "csv": ["file", "image_column", "caption_column", "images_dir", "delimiter",
            "check_images"],
}


def test_each_loader_lists_its_options():
    from captioner.datasets.records import dataset_options

    assert {name: dataset_options(name) for name in DATASETS} == OPTIONS


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_an_option_of_another_loader_is_a_user_error_naming_it(tmp_path, name):
    other = "num_images" if name != "shapes" else "year"
    with pytest.raises(UserError) as raised:
        load_split(name, "train", tmp_path, **{other: 3, OPTIONS[name][0]: None})
    message = str(raised.value)
    assert "\n" not in message
    assert f"dataset {name!r} has no option {other!r}" in message
    assert message.endswith(f"its options are: {', '.join(OPTIONS[name])}")
