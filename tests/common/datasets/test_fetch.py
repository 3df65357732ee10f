"""`fetch`: public datasets from a checked local copy or download, prepared for `train`.

Offline throughout: `urlopen` fails the test unless a test serves bytes itself.
"""

import hashlib
import io
import json
import shutil
import urllib.error
import urllib.request
import zipfile
from email.message import Message
from pathlib import Path

import pytest
from PIL import Image

from common.datasets import coco_captions, spa_eng
from common.datasets.download import Fetcher, RemoteFile
from common.datasets.fetch import fetch
from common.errors import DataError, UserError


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"the network was touched: {args} {kwargs}")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def spa_zip(tmp_path, shared_data) -> tuple[Path, list[tuple[str, str]]]:
    """A spa-eng.zip like TensorFlow's from 3,000 real pairs, plus a repeat, a malformed line
    and a three-column line (newer manythings files); returns it and the distinct pairs."""
    lines = (shared_data / "spa-eng" / "train.tsv").read_text(encoding="utf-8").splitlines()
    lines = lines[:2000] + (shared_data / "spa-eng" / "test.tsv").read_text(
        encoding="utf-8").splitlines()[:1000]
    extra = "A zebra test.\tUna prueba cebra.\tCC-BY 2.0 (France)"
    text = "\n".join(lines + [lines[5], "no tab here", extra]) + "\n"
    path = tmp_path / "spa-eng.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("spa-eng/spa.txt", text)
        zf.writestr("spa-eng/_about.txt", "About.\n")
    pairs = list(dict.fromkeys(tuple(line.split("\t")) for line in lines))
    pairs.append(("A zebra test.", "Una prueba cebra."))
    return path, pairs


def read_tsv(path: Path) -> list[tuple[str, str]]:
    return [tuple(line.split("\t")) for line in path.read_text(encoding="utf-8").splitlines()]


def test_spa_eng_splits_by_english_sentence_and_trains_readable(tmp_path, spa_zip):
    from seq2seq.datasets import load_pairs

    archive, pairs = spa_zip
    out = tmp_path / "out"
    record = fetch("spa-eng", out, local=archive, sha256=[sha256(archive)], progress=False)

    splits = {name: read_tsv(out / f"{name}.tsv") for name in ("train", "valid", "test")}
    # Every distinct pair once, in the archive's order within each file.
    assert sorted(p for s in splits.values() for p in s) == sorted(pairs)
    for split in splits.values():
        assert split == sorted(split, key=pairs.index)
    # No English sentence in two files; 2% of the distinct English sentences in valid and test.
    english = {name: {e for e, _ in split} for name, split in splits.items()}
    assert not english["train"] & english["valid"] and not english["train"] & english["test"]
    assert not english["valid"] & english["test"]
    distinct = len({e for e, _ in pairs})
    assert len(english["test"]) == len(english["valid"]) == round(0.02 * distinct)
    assert record["pairs"] == {name: len(split) for name, split in splits.items()}
    assert record["dropped_lines"] == 2  # the repeat and the malformed line
    assert json.loads((out / "FETCHED.json").read_text())["files"]["spa-eng.zip"] == {
        "sha256": sha256(archive)}
    assert (out / "SOURCE-about.txt").read_text() == "About.\n"

    for name, split in splits.items():  # what `seq2seq train --dataset tsv --data OUT` reads
        loaded = load_pairs("tsv", path=str(out), split=name)
        assert (len(loaded), loaded.skipped) == (len(split), 0)
        assert loaded.sources[0] == split[0][0] and loaded.targets[-1] == split[-1][1]


def test_spa_eng_lines_end_at_newlines_alone(tmp_path):
    # U+2028, U+0085 and a form feed inside a sentence used to end the line there (pairs of
    # halves, silently); a line that is not UTF-8 is dropped and counted, as tsv reading does.
    text = ("Line\u2028sep.\tSeparador\u2028de l\u00ednea.\r\n"
            "Next\x85line.\tSiguiente.\nForm\x0cfeed.\tAvance.\n").encode()
    text += "Mal \u00e9.\tMal.\n".encode("latin-1") + b"Good.\tBueno.\n"
    path = tmp_path / "spa-eng.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("spa-eng/spa.txt", text)
    pairs, dropped, _ = spa_eng.read_pairs(path)
    assert pairs == [("Line sep.", "Separador de l\u00ednea."), ("Next line.", "Siguiente."),
                     ("Form feed.", "Avance."), ("Good.", "Bueno.")]
    assert dropped == 1


def test_spa_eng_split_is_fixed_by_the_seed(tmp_path, spa_zip):
    archive, _ = spa_zip
    files = {}
    for run, seed in (("a", 0), ("b", 0), ("c", 1)):
        fetch("spa-eng", tmp_path / run, local=archive, sha256=[sha256(archive)], seed=seed,
              progress=False)
        files[run] = (tmp_path / run / "test.tsv").read_bytes()
    assert files["a"] == files["b"] != files["c"]


def test_recorded_size_is_checked_and_mismatch_is_one_line_exit_2(tmp_path, spa_zip, capsys):
    from seq2seq.cli import main

    archive, _ = spa_zip
    status = main(["fetch", "spa-eng", "--out", str(tmp_path / "out"), "--from", str(archive)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err
    size = archive.stat().st_size
    assert f"{archive}: size {size:,} bytes, expected 2,638,744" in err

    wrong = "0" * 64
    status = main(["fetch", "spa-eng", "--out", str(tmp_path / "out"), "--from", str(archive),
                   "--sha256", f"spa-eng.zip={wrong}"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    assert f"SHA-256 {sha256(archive)}, expected {wrong}" in err and str(archive) in err
    assert not (tmp_path / "out" / "train.tsv").exists()  # checked before anything is prepared


def test_cli_prepares_from_a_local_copy(tmp_path, spa_zip, capsys):
    from seq2seq.cli import main

    archive, pairs = spa_zip
    out = tmp_path / "data"
    status = main(["fetch", "spa-eng", "--out", str(out), "--from", str(tmp_path),
                   "--sha256", sha256(archive)])  # a folder holding spa-eng.zip
    assert status == 0, capsys.readouterr().err
    assert sum(len(read_tsv(out / f"{n}.tsv")) for n in ("train", "valid", "test")) == len(pairs)
    assert f"--data {out}" in capsys.readouterr().out


def test_a_users_own_files_are_never_replaced(tmp_path, spa_zip, capsys):
    from seq2seq.cli import main

    archive, _ = spa_zip
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "train.tsv").write_text("my own\tmío\n", encoding="utf-8")
    argv = ["fetch", "spa-eng", "--out", str(mine), "--from", str(archive), "--sha256",
            sha256(archive)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {mine} holds train.tsv, which `fetch spa-eng`" in err
    assert (mine / "train.tsv").read_text(encoding="utf-8") == "my own\tmío\n"
    assert sorted(p.name for p in mine.iterdir()) == ["train.tsv"]  # nothing written


def test_a_fetch_runs_again_into_its_own_folder_finished_or_not(tmp_path, spa_zip):
    archive, pairs = spa_zip
    out = tmp_path / "data"
    options = {"local": archive, "sha256": [sha256(archive)], "progress": False}
    fetch("spa-eng", out, **options)
    first = (out / "test.tsv").read_bytes()
    assert not (out / "FETCHING.json").exists()
    fetch("spa-eng", out, **options)  # again: its own files
    assert (out / "test.tsv").read_bytes() == first
    # A fetch killed while it prepared: its marker, no record, a file half written.
    (out / "FETCHED.json").unlink()
    (out / "FETCHING.json").write_text('{"dataset": "spa-eng"}\n', encoding="utf-8")
    (out / "test.tsv").write_bytes(first[:10])
    fetch("spa-eng", out, **options)
    assert (out / "test.tsv").read_bytes() == first
    assert json.loads((out / "FETCHED.json").read_text())["dataset"] == "spa-eng"


def test_a_fetch_refused_before_writing_leaves_the_folder_free(tmp_path, spa_zip):
    archive, _ = spa_zip
    out = tmp_path / "data"
    with pytest.raises(UserError, match="SHA-256"):
        fetch("spa-eng", out, local=archive, sha256=["0" * 64], progress=False)
    assert not out.exists()  # no marker left to claim the folder, nor an empty folder
    fetch("spa-eng", out, local=archive, sha256=[sha256(archive)], progress=False)
    assert json.loads((out / "FETCHED.json").read_text())["dataset"] == "spa-eng"


def test_an_unreadable_record_is_named_as_such(tmp_path, spa_zip):
    archive, _ = spa_zip
    out = tmp_path / "data"
    out.mkdir()
    (out / "FETCHED.json").write_text("{not json", encoding="utf-8")
    (out / "train.tsv").write_text("mine\tmío\n", encoding="utf-8")
    with pytest.raises(UserError, match="holds train.tsv.*and an unreadable FETCHED.json"):
        fetch("spa-eng", out, local=archive, sha256=[sha256(archive)], progress=False)


def test_another_datasets_folder_is_refused(tmp_path, spa_zip):
    archive, _ = spa_zip
    out = tmp_path / "coco"
    out.mkdir()
    record = '{"dataset": "coco-captions"}\n'
    (out / "FETCHED.json").write_text(record, encoding="utf-8")
    with pytest.raises(UserError, match=r"was prepared by `fetch coco-captions`"):
        fetch("spa-eng", out, local=archive, sha256=[sha256(archive)], progress=False)
    assert (out / "FETCHED.json").read_text(encoding="utf-8") == record


@pytest.mark.parametrize("argv, message", [
    (["fetch", "tatoeba", "--out", "x"], "invalid choice: 'tatoeba'"),
    (["fetch", "spa-eng", "--out", "x", "--from", "/no/such/file.zip"], "/no/such/file.zip"),
    (["fetch", "spa-eng", "--out", "x", "--sha256", "beef"], "64 hex digits"),
    (["fetch", "spa-eng", "--out", "x", "--sha256", f"val2017.zip={'a' * 64}"],
     "val2017.zip, which spa-eng does not use"),
])
def test_bad_input_exits_2_in_one_line(argv, message, capsys, tmp_path, monkeypatch):
    from seq2seq.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_folder_without_the_file_names_it_and_its_address(tmp_path):
    with pytest.raises(DataError, match=r"no spa-eng\.zip in it .*download\.tensorflow\.org"):
        fetch("spa-eng", tmp_path / "out", local=tmp_path, progress=False)


def test_unknown_dataset_lists_the_known_ones(tmp_path):
    with pytest.raises(UserError, match="spa-eng, coco-captions"):
        fetch("flickr", tmp_path)


# Downloads, against a fake server honouring Range requests.

class FakeResponse(io.BytesIO):
    def __init__(self, data: bytes, status: int):
        super().__init__(data)
        self.status = status
        self.headers = Message()
        self.headers["Content-Length"] = str(len(data))


@pytest.fixture
def server(monkeypatch):
    body = bytes(range(256)) * 40_000  # 10 MB, so reads take several chunks
    requests = []

    def urlopen(request, timeout=None):
        requests.append(request.get_header("Range"))
        start = int(request.get_header("Range", "bytes=0-")[6:-1])
        return FakeResponse(body[start:], 206 if start else 200)

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    remote = RemoteFile("https://example.org/data/blob.zip", size=len(body),
                        sha256=hashlib.sha256(body).hexdigest())
    return body, remote, requests


def test_download_resumes_a_part_file_then_renames_it(tmp_path, server):
    body, remote, requests = server
    (tmp_path / "blob.zip.part").write_bytes(body[:3_000_001])
    path = Fetcher(tmp_path, progress=False).get(remote)
    assert path == tmp_path / "blob.zip" and path.read_bytes() == body
    assert requests == ["bytes=3000001-"] and not (tmp_path / "blob.zip.part").exists()
    Fetcher(tmp_path, progress=False).get(remote)  # a checked file is not downloaded again
    assert len(requests) == 1


def test_download_with_a_wrong_checksum_is_removed(tmp_path, server):
    body, remote, _ = server
    bad = RemoteFile(remote.url, size=len(body), sha256="f" * 64)
    with pytest.raises(DataError, match=f"SHA-256 {remote.sha256}, expected f{{64}}.*removed"):
        Fetcher(tmp_path, progress=False).get(bad)
    assert not list(tmp_path.iterdir())


# COCO, from archives built out of coco-mini's real files.

@pytest.fixture
def coco_copies(tmp_path, shared_data) -> Path:
    mini = shared_data / "coco-mini"
    copies = tmp_path / "copies"
    copies.mkdir()
    with zipfile.ZipFile(copies / "annotations_trainval2017.zip", "w") as zf:
        for kind in ("captions", "instances"):
            zf.write(mini / "annotations" / f"{kind}_train2017.json",
                     f"annotations/{kind}_train2017.json")
    with zipfile.ZipFile(copies / "train2017.zip", "w") as zf:
        for image in sorted((mini / "train2017").glob("*.jpg")):
            zf.write(image, f"train2017/{image.name}")
    shutil.copytree(mini / "train2017", copies / "train2017")  # single images by address path
    return copies


def coco_sha256(copies: Path, names=("annotations_trainval2017.zip", "train2017.zip")):
    return [f"{name}={sha256(copies / name)}" for name in names]


def test_coco_from_archives_is_read_by_the_coco_loader(tmp_path, coco_copies, shared_data):
    from captioner.datasets import load_split

    out = tmp_path / "coco"
    record = fetch("coco-captions", out, local=coco_copies, sha256=coco_sha256(coco_copies),
                   splits=("train",), instances=True, progress=False)
    reference = json.loads((shared_data / "coco-mini/annotations/captions_train2017.json")
                           .read_text())
    assert record["splits"] == {"train2017": {"images": 26, "captions": 130}}
    split = load_split("coco", "train", data_dir=str(out))
    assert (len(split), split.num_captions, split.skipped) == (26, 130, 0)
    expected = {a["image_id"] for a in reference["annotations"]}
    assert {r.image_id for r in split} == expected
    assert (out / "annotations" / "instances_train2017.json").is_file()


ANNOTATIONS_ONLY = ("annotations_trainval2017.zip",)


def test_coco_max_images_takes_the_first_images_by_id(tmp_path, coco_copies, shared_data):
    from captioner.datasets import load_split

    out = tmp_path / "coco"
    (coco_copies / "train2017.zip").unlink()  # single images only: the zip is not needed
    fetch("coco-captions", out, local=coco_copies,
          sha256=coco_sha256(coco_copies, ANNOTATIONS_ONLY), splits=("train",), max_images=5,
          progress=False)
    reference = json.loads((shared_data / "coco-mini/annotations/captions_train2017.json")
                           .read_text())
    first = sorted({a["image_id"] for a in reference["annotations"]})[:5]
    split = load_split("coco", "train", data_dir=str(out))
    assert [r.image_id for r in split] == first
    assert split.num_captions == sum(a["image_id"] in first for a in reference["annotations"])
    assert len(list((out / "train2017").iterdir())) == 5


def test_coco_single_image_of_the_wrong_size_is_refused(tmp_path, coco_copies, shared_data):
    reference = json.loads((shared_data / "coco-mini/annotations/captions_train2017.json")
                           .read_text())
    first = min(a["image_id"] for a in reference["annotations"])
    name = next(i["file_name"] for i in reference["images"] if i["id"] == first)
    entry = next(i for i in reference["images"] if i["id"] == first)
    other = next(p for p in sorted((coco_copies / "train2017").iterdir())
                 if Image.open(p).size != (entry["width"], entry["height"]))
    shutil.copyfile(other, coco_copies / "train2017" / name)
    with pytest.raises(DataError, match=f"{name}: .* pixels, expected"):
        fetch("coco-captions", tmp_path / "coco", local=coco_copies,
              sha256=coco_sha256(coco_copies, ANNOTATIONS_ONLY), splits=("train",),
              max_images=1, progress=False)


def test_recorded_files_are_the_official_addresses():
    assert spa_eng.ARCHIVE.url.endswith("download.tensorflow.org/data/spa-eng.zip")
    names = {remote.name for remote in coco_captions.FILES.values()}
    assert {"annotations_trainval2017.zip", "val2017.zip", "train2017.zip"} <= names
    assert all(r.url.startswith("http://images.cocodataset.org/") and len(r.sha256) == 64
               for r in coco_captions.FILES.values())


def test_an_out_folder_that_cannot_be_made_is_one_line(tmp_path, spa_zip, capsys):
    from seq2seq.cli import main

    archive, _ = spa_zip
    (tmp_path / "a-file").write_text("x")
    out = tmp_path / "a-file" / "data"
    assert main(["fetch", "spa-eng", "--out", str(out), "--from", str(archive), "--sha256",
                 sha256(archive)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {out}: cannot write there (Not a directory)" in err


# Offline: nothing received, nothing promised, nothing left behind.

def offline(request, timeout=None):
    raise urllib.error.URLError(OSError(101, "Network is unreachable"))


@pytest.mark.parametrize("prog, argv", [
    ("seq2seq", ["fetch", "spa-eng", "--out", "data/spa-eng"]),
    ("captioner", ["fetch", "coco-captions", "--out", "data/coco", "--split", "val",
                   "--max-images", "2"]),
])
def test_an_offline_fetch_promises_no_part_file_and_leaves_no_folder(
        tmp_path, monkeypatch, capsys, prog, argv):
    # It said "what was received is kept in data/spa-eng/downloads/spa-eng.zip.part", a file
    # that did not exist, and left data/spa-eng/downloads/ (and coco's annotations/) empty.
    import importlib

    main = importlib.import_module(f"{prog}.cli").main
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "download failed (" in err, err
    assert "Network is unreachable" in err, err
    assert "nothing was received" in err and ".part" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_an_offline_fetch_into_an_existing_folder_keeps_it(tmp_path, monkeypatch):
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    (tmp_path / "out").mkdir()
    with pytest.raises(DataError, match="nothing was received"):
        fetch("spa-eng", tmp_path / "out", progress=False)
    assert (tmp_path / "out").is_dir() and list((tmp_path / "out").iterdir()) == []


def test_a_download_cut_off_keeps_what_came_and_says_where(tmp_path, monkeypatch):
    class CutOff(FakeResponse):
        def read(self, size=-1):
            if self.tell():
                raise ConnectionResetError(104, "Connection reset by peer")
            return super().read(size)

    body = bytes(range(256)) * 8192  # 2 MB: the first 1 MB chunk arrives, then the cut
    monkeypatch.setattr(urllib.request, "urlopen", lambda request, timeout=None: CutOff(body, 200))
    remote = RemoteFile("https://example.org/blob.zip", size=len(body))
    with pytest.raises(DataError, match=r"the 1,048,576 bytes received are kept in .*blob\.zip\."
                                        r"part and resumed next time"):
        Fetcher(tmp_path, progress=False).get(remote)
    assert (tmp_path / "blob.zip.part").read_bytes() == body[:1 << 20]
