"""Bad input to the caption loaders is one line naming the file (and the entry or line) or the
option, and what was expected; never a traceback, never a silently wrong split."""

import json
from pathlib import Path

import pytest

from captioner.datasets import load_split
from common.errors import DataError, UserError
from tests.captioner.datasets.test_loaders import _corrupt, _image

IMAGE = {"id": 1, "file_name": "a.jpg", "height": 16, "width": 24}
CAPTION = {"id": 10, "image_id": 1, "caption": "A red square."}
DEEP = "[" * 100_000  # Python's JSON parser recursed once per bracket: a RecursionError


def _one_line(raised, prefix: str = "") -> str:
    message = str(raised.value)
    assert "\n" not in message and message.startswith(prefix), message
    return message


def _write(path: Path, content) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


# -- COCO ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("captions, needle", [
    ([IMAGE], "expected a COCO captions file, a JSON object with 'images' and 'annotations' "
              "lists; got [{'id': 1"),
    ({"images": 5, "annotations": [CAPTION]}, "expected 'images' as a list (a COCO captions "
                                              "file), got 5"),
    ({"images": [IMAGE]}, "no 'annotations' list; expected a COCO captions file"),
    ({"images": [IMAGE], "annotations": [{**CAPTION, "caption": None}]},
     "annotations[0]: expected 'caption' as non-empty text, got None"),
    ({"images": [IMAGE], "annotations": [CAPTION, {**CAPTION, "caption": 7}]},
     "annotations[1]: expected 'caption' as non-empty text, got 7"),
    ({"images": [IMAGE], "annotations": ["A red square."]},
     "annotations[0]: expected an object, got 'A red square.'"),
    ({"images": [{"id": 1}], "annotations": [CAPTION]},
     "images[0]: expected 'file_name' as non-empty text, got None"),
    ({"images": [IMAGE], "annotations": [{"id": 10, "caption": "A red square."}]},
     "annotations[0]: expected 'image_id' as an integer, got None"),
    (DEEP, "JSON nested too deeply to read; expected a COCO captions file"),
    (b'{"images": [], "annotations": [], "info": "caf\xe9"}', "not UTF-8 text"),
])
def test_a_coco_captions_file_of_the_wrong_shape_is_one_line_naming_it(tmp_path, captions,
                                                                       needle):
    path = _write(tmp_path / "annotations" / "captions_train2017.json", captions)
    _image(tmp_path / "train2017" / "a.jpg")
    with pytest.raises(DataError) as raised:
        load_split("coco", "train", tmp_path)
    assert needle in _one_line(raised, f"{path}: ")


def test_coco_annotation_files_of_the_other_kind_are_named_as_such(tmp_path, shared_data):
    coco = shared_data / "coco-mini"
    with pytest.raises(DataError) as raised:
        load_split("coco", "train", coco, captions_file="annotations/instances_train2017.json")
    assert _one_line(raised).endswith(
        "instances_train2017.json: its annotations have a 'bbox' and no 'caption', as in a "
        "COCO instances file; expected a COCO captions file")
    with pytest.raises(DataError) as raised:
        load_split("coco", "train", coco, with_objects=True,
                   instances_file="annotations/captions_train2017.json")
    assert _one_line(raised).endswith(
        "captions_train2017.json: its annotations have a 'caption' and no 'bbox', as in a "
        "COCO captions file; expected a COCO instances file")


@pytest.mark.parametrize("change, needle", [
    ({"bbox": [1, 2, 3]}, "annotations[0]: expected 'bbox' as [x, y, width, height], four "
                          "numbers, got [1, 2, 3]"),
    ({"category_id": 99}, "annotations[0]: its category_id 99 is not among the 'categories'"),
])
def test_a_broken_coco_instances_file_is_one_line_naming_the_entry(tmp_path, change, needle):
    _write(tmp_path / "annotations" / "captions_train2017.json",
           {"images": [IMAGE], "annotations": [CAPTION]})
    path = _write(tmp_path / "annotations" / "instances_train2017.json", {
        "images": [IMAGE], "categories": [{"id": 1, "name": "square"}],
        "annotations": [{"id": 20, "image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4],
                         **change}]})
    _image(tmp_path / "train2017" / "a.jpg")
    with pytest.raises(DataError) as raised:
        load_split("coco", "train", tmp_path, with_objects=True)
    assert needle in _one_line(raised, f"{path}: ")


# -- Karpathy -----------------------------------------------------------------------------------

def _entry(**changes):
    return {"split": "test", "filepath": "", "filename": "a.jpg", "cocoid": 1,
            "sentences": [{"raw": "A red square."}], **changes}


@pytest.mark.parametrize("content, needle", [
    ({"images": 5}, "expected a Karpathy split file, a JSON object with an 'images' list; got "
                    "'images' = 5"),
    ({"dataset": "coco"}, "an 'images' list; got 'images' = None"),
    ([_entry()], "an 'images' list; got [{'split': 'test'"),
    ({"images": [_entry(sentences=None)]},
     "images[0]: expected 'sentences' as a non-empty list of objects with a 'raw' text, got None"),
    ({"images": [_entry(sentences=[])]}, "images[0]: expected 'sentences' as a non-empty list"),
    ({"images": [_entry(sentences=[{"raw": None}])]},
     "images[0]: expected 'sentences' as a non-empty list of objects with a 'raw' text, got "
     "[{'raw': None}]"),
    ({"images": [_entry(), _entry(filename=None)]},
     "images[1]: expected 'filename' as a file name, got None"),
    ({"images": [_entry(filename=7)]}, "images[0]: expected 'filename' as a file name, got 7"),
    ({"images": [_entry(filepath=2014)]}, "images[0]: expected 'filepath' as a folder name"),
    ({"images": [_entry(cocoid=[1])]}, "images[0]: expected 'cocoid' as an integer, got [1]"),
    ({"images": ["a.jpg"]}, "images[0]: expected an object with a 'split' as text, got 'a.jpg'"),
    (DEEP, "JSON nested too deeply to read; expected a Karpathy split file"),
])
def test_a_karpathy_file_of_the_wrong_shape_is_one_line_naming_it(tmp_path, content, needle):
    path = _write(tmp_path / "dataset_coco.json", content)
    _image(tmp_path / "a.jpg")
    with pytest.raises(DataError) as raised:
        load_split("karpathy", "test", tmp_path)
    assert needle in _one_line(raised, f"{path}: ")


# -- Flickr8k -----------------------------------------------------------------------------------

def _flickr8k(tmp_path: Path, tokens, names=b"a.jpg\n") -> Path:
    _image(tmp_path / "Flicker8k_Dataset" / "a.jpg")
    _write(tmp_path / "Flickr8k.token.txt", tokens)
    _write(tmp_path / "Flickr_8k.trainImages.txt", names)
    return tmp_path


@pytest.mark.parametrize("tokens, names, needle", [
    ("a.jpg#0\tUn caf\xe9 .\n".encode("latin-1"), b"a.jpg\n",
     "Flickr8k.token.txt: not UTF-8 text (invalid continuation byte at byte 14)"),
    (b"a.jpg#0\tA cafe .\n", "caf\xe9.jpg\n".encode("latin-1"),
     "Flickr_8k.trainImages.txt: not UTF-8 text"),
    (b"a.jpg#0\tA red square .\n#1\tNo image named .\n",
     b"a.jpg\n", "Flickr8k.token.txt:2: expected '<image>#<n><TAB><caption>', got "),
    (b"\n\n", b"a.jpg\n", "Flickr8k.token.txt: no captions"),
    (b"a.jpg#0\tA red square .\n", b"\n", "Flickr_8k.trainImages.txt: no image names"),
])
def test_a_flickr8k_file_that_is_not_utf8_or_malformed_is_one_line_naming_it(tmp_path, tokens,
                                                                              names, needle):
    root = _flickr8k(tmp_path, tokens, names)
    with pytest.raises(DataError) as raised:
        load_split("flickr8k", "train", root)
    assert needle in _one_line(raised, f"{root}/")


def test_a_flickr8k_file_with_a_byte_order_mark_is_read(tmp_path):
    root = _flickr8k(tmp_path, "\ufeffa.jpg#0\tA red square .\n".encode(),
                     "\ufeffa.jpg\n".encode())
    assert load_split("flickr8k", "train", root).references() == {"a.jpg": ["A red square ."]}


# -- options, as `--data-option KEY=VALUE` (read as JSON) or a preset gives them ---------------

@pytest.mark.parametrize("name, option, value, expected", [
    ("coco", "max_images", -1, "a whole number >= 1 or null"),  # was: all images but the last
    ("coco", "max_images", 2.7, "a whole number >= 1 or null"),  # was: 2
    ("karpathy", "max_images", 0, "a whole number >= 1 or null"),
    ("flickr8k", "max_images", "abc", "a whole number >= 1 or null"),
    ("coco", "with_objects", "yes", "true or false or null"),
    ("coco", "year", ["train2017"], "non-empty text or null"),
    ("karpathy", "check_images", None, "true or false"),
    ("karpathy", "file", None, "non-empty text"),
    ("flickr8k", "token_file", "", "non-empty text"),
    ("csv", "check_images", "maybe", "true or false"),  # was: true
    ("csv", "images_dir", 2.5, "non-empty text or null"),
    ("csv", "delimiter", "ab", "one character other than a quote mark or a line break (a tab: "
                               "delimiter='\"\\t\"')"),
    ("shapes", "num_images", "abc", "a whole number >= 1 or null"),  # was: a ValueError
    ("shapes", "image_size", 33.5, "a whole number >= 32"),
    ("shapes", "image_size", True, "a whole number >= 32"),
    ("shapes", "seed", -1, "a whole number >= 0"),
    ("shapes", "with_masks", "maybe", "true or false"),
])
def test_an_option_of_the_wrong_type_or_range_is_one_line_naming_it(tmp_path, name, option,
                                                                     value, expected):
    with pytest.raises(UserError) as raised:
        load_split(name, "train", tmp_path, **{option: value})
    assert _one_line(raised) == (f"dataset {name!r} option {option}: expected {expected}, "
                                 f"got {value!r}")


def test_option_values_as_the_command_line_reads_them_are_taken(tmp_path):
    # `check_images=False` arrives as the string "False": it was true, and the image skipped.
    _corrupt(tmp_path / "x.jpg")
    (tmp_path / "train.csv").write_text("image,caption\nx.jpg,a thing\n")
    assert len(load_split("csv", "train", tmp_path, check_images="False")) == 1
    # A column named "3" given as `image_column=3` arrives as the number 3.
    (tmp_path / "valid.csv").write_text("3,caption\nx.jpg,a thing\n")
    split = load_split("csv", "valid", tmp_path, image_column=3, check_images=0)
    assert split.references() == {"x.jpg": ["a thing"]}
    assert len(load_split("shapes", "valid", num_images=3.0, image_size=32.0)) == 3


def test_a_bad_data_option_on_the_command_line_is_one_line(capsys, tmp_path):
    from tests.captioner.test_cli import _one_line_error

    err = _one_line_error(capsys, ["train", "--dataset", "shapes", "--data-option",
                                   "num_images=abc", "--out", str(tmp_path / "run")])
    assert err.endswith("dataset 'shapes' option num_images: expected a whole number >= 1 or "
                        "null, got 'abc'")


@pytest.mark.parametrize("options", [{"num_images": 10**9}, {"image_size": 10**6,
                                                              "num_images": 1}])
def test_a_shapes_split_larger_than_memory_is_refused_before_it_is_made(options):
    """It was generated image by image until the machine ran out of memory."""
    with pytest.raises(UserError) as raised:
        load_split("shapes", "train", **options)
    assert "GiB of memory, more than this machine's" in _one_line(raised)
