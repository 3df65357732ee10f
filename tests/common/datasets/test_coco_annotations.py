"""`coco_captions.check_annotations`: the shape of a COCO annotation file, checked once for
`fetch coco-captions` and the `coco` loader alike."""

import hashlib
import json
import urllib.request
import zipfile

import pytest

from common.datasets.coco_captions import check_annotations
from common.datasets.fetch import fetch
from common.errors import DataError

IMAGE = {"id": 1, "file_name": "a.jpg"}


@pytest.mark.parametrize("data, kind, needle", [
    ([IMAGE], "captions", "expected a COCO captions file, a JSON object with 'images' and "
                          "'annotations' lists; got [{'id': 1"),
    ({"images": [IMAGE], "annotations": []}, "instances", "no 'categories' list; expected a "
                                                          "COCO instances file"),
    ({"images": [{"id": True, "file_name": "a.jpg"}], "annotations": []}, "captions",
     "images[0]: expected 'id' as an integer, got True"),
    ({"images": [IMAGE], "annotations": [{"id": 1, "image_id": 1, "caption": "  "}]},
     "captions", "annotations[0]: expected 'caption' as non-empty text, got '  '"),
    ({"images": [IMAGE], "categories": [{"id": 1}], "annotations": []}, "instances",
     "categories[0]: expected 'name' as non-empty text, got None"),
    ({"images": [IMAGE], "categories": [{"id": 1, "name": "dog"}],
      "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, "9", 9]}]},
     "instances", "annotations[0]: expected 'bbox' as [x, y, width, height], four numbers"),
    ({"images": [IMAGE], "annotations": [{"id": 1, "image_id": 7, "caption": "a dog"}]},
     "captions", "annotations[0]: its image_id 7 is not among the 'images'"),
    ({"images": [IMAGE], "categories": [{"id": 1, "name": "dog"}],
      "annotations": [{"id": 1, "image_id": 2, "category_id": 1, "bbox": [0, 0, 9, 9]}]},
     "instances", "annotations[0]: its image_id 2 is not among the 'images'"),
])
def test_a_file_of_the_wrong_shape_is_one_line_naming_the_entry(data, kind, needle):
    with pytest.raises(DataError) as raised:
        check_annotations(data, "f.json", kind)
    message = str(raised.value)
    assert "\n" not in message and message.startswith("f.json: ") and needle in message


def test_real_coco_annotations_pass(shared_data):
    folder = shared_data / "coco-mini" / "annotations"
    for kind in ("captions", "instances"):
        data = json.loads((folder / f"{kind}_train2017.json").read_text(encoding="utf-8"))
        assert check_annotations(data, "f.json", kind) is data


@pytest.mark.parametrize("member_text, needle", [
    ("[" * 100_000, "annotations/captions_train2017.json is JSON nested too deeply to read"),
    ("instances", "annotations/captions_train2017.json: its annotations have a 'bbox' and no "
                  "'caption', as in a COCO instances file; expected a COCO captions file"),
    (json.dumps({"images": [IMAGE], "annotations": ["a dog"]}),
     "annotations/captions_train2017.json: annotations[0]: expected an object, got 'a dog'"),
])
def test_fetch_refuses_an_annotations_archive_of_the_wrong_shape(tmp_path, shared_data,
                                                                monkeypatch, member_text,
                                                                needle):
    def refuse(*args, **kwargs):
        raise AssertionError(f"the network was touched: {args} {kwargs}")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    if member_text == "instances":
        member_text = (shared_data / "coco-mini/annotations/instances_train2017.json").read_text()
    archive = tmp_path / "copies" / "annotations_trainval2017.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("annotations/captions_train2017.json", member_text)
    sha256 = hashlib.sha256(archive.read_bytes()).hexdigest()
    with pytest.raises(DataError) as raised:
        fetch("coco-captions", tmp_path / "coco", local=archive.parent, splits=("train",),
              sha256=[f"annotations_trainval2017.zip={sha256}"], max_images=1, progress=False)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"{archive}: ") and needle in message
