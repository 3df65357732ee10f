"""The comparison scripts: BLEU by source length, and the copy test set of unseen names."""

import json

import pytest
from PIL import Image

from seq2seq.cli import main as seq2seq_main
from seq2seq.datasets import load_pairs
from tests.helpers.benchmarks import load_script

TRAIN = """Tom is here.\tTom está aquí.
Tom, no.\tTom, no.
no way\tde ninguna manera
I saw Mary.\tVi a Mary.
Where is Boston?\t¿Dónde está Boston?
Mary sings.\tMary canta.
I like tea.\tMe gusta el té.
Tom sings.\tTom canta.
"""
TEST = """Tom is tired.\tTom está cansado.
No.\tNo.
Mary saw Tom.\tMary vio a Tom.
I like tea.\tMe gusta el té.
"""


by_length, copy_names = load_script("compare_by_length"), load_script("copy_names")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spa")
    (folder / "train.tsv").write_text(TRAIN * 4, encoding="utf-8")
    (folder / "valid.tsv").write_text(TEST, encoding="utf-8")
    (folder / "test.tsv").write_text(TEST, encoding="utf-8")
    return folder


def test_buckets_cover_every_length_and_score_separately():
    edges = by_length.bucket_edges(2, 4)
    assert edges == [(1, 2), (3, 4), (5, None)]
    assert [by_length.bucket_index(n, edges) for n in (1, 2, 3, 4, 5, 40)] == [0, 0, 1, 1, 2, 2]
    scores = by_length.scores_by_bucket(["a b c d", "x y", "the cat sat on the mat"],
                                        ["a b c d", "p q", "the cat sat on the mat"], [1, 2, 6],
                                        edges)
    assert [s["sentences"] for s in scores] == [2, 0, 1]
    assert scores[1]["bleu"] is None and scores[2]["bleu"] == pytest.approx(100.0)
    assert 0 < scores[0]["bleu"] < 100


def test_plot_draws_one_line_per_run(tmp_path):
    result = {"buckets": [{"bucket": "1-5", "sentences": 3}, {"bucket": "6+", "sentences": 1}],
              "runs": {name: {"bleu": 20.0, "buckets": [{"bleu": 30.0}, {"bleu": b}]}
                       for name, b in (("noattn", 5.0), ("bahdanau", None))}}
    path = by_length.plot_bleu_by_length(result, tmp_path / "plot.png")
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > 400


def test_copy_testset_replaces_names_on_both_sides_with_unseen_ones(data, tmp_path):
    carried = copy_names.carried
    train = load_pairs("tsv", path=str(data), split="train")
    cases = copy_names.make_copy_testset(load_pairs("tsv", path=str(data), split="test"), train,
                                         seed=3)
    # "No" is used lowercase in training ("no way"): a word, not a name; pair 4 has no name
    assert [c.originals for c in cases] == [["Tom"], ["Mary", "Tom"]]
    seen = {t for tokens in train.source_tokens + train.target_tokens for t in tokens}
    for case in cases:
        for name, original in zip(case.names, case.originals):
            assert name not in seen and name.lower() not in {t.lower() for t in seen}
            assert carried(case.source, name) and carried(case.target, name)
            assert not carried(case.source, original) and not carried(case.target, original)
    assert len({n for c in cases for n in c.names}) == 3
    path, names = copy_names.write_copy_testset(cases, tmp_path / "copy.tsv")
    assert names.name == "copy.names.json" and copy_names.read_copy_testset(path) == cases
    assert len(load_pairs("tsv", path=str(path), split="test")) == 2  # a TSV evaluate reads
    invent = copy_names.invent_names
    assert invent(5, {"Tom"}, seed=1) == invent(5, {"Tom"}, seed=1)
    assert carried("Zorvik's dog.", "Zorvik") and not carried("Zorviko", "Zorvik")


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    made = {}
    for label, options in (("noattn", ["--arch", "seq2seq-noattn"]),
                           ("copy", ["--arch", "bahdanau", "--copy"])):
        status = seq2seq_main(["train", "--dataset", "tsv", "--data", str(data / "train.tsv"),
                               "--preset", "tiny", "--out", str(out / label), "--verbose", "0",
                               *options])
        assert status == 0
        made[label] = out / label
    return made


@pytest.mark.slow
def test_compare_by_length_writes_the_plot_and_the_numbers(data, runs, tmp_path, capsys):
    out = tmp_path / "bleu.png"
    status = by_length.main(
        ["--data", str(data / "test.tsv"), f"noattn={runs['noattn']}", str(runs["copy"]),
         "--out", str(out), "--bucket-width", "2", "--last-bucket", "4"])
    assert status == 0
    result = json.loads(out.with_suffix(".json").read_text())
    assert list(result["runs"]) == ["noattn", "copy"]
    assert [b["sentences"] for b in result["buckets"]] == [1, 3, 0]  # lengths 4, 2, 4, 4
    assert result["runs"]["copy"]["copy"] is True
    assert result["runs"]["noattn"]["arch"] == "seq2seq-noattn"
    assert all(len(r["buckets"]) == 3 for r in result["runs"].values())
    assert out.is_file() and "all" in capsys.readouterr().out


@pytest.mark.slow
def test_copy_scripts_make_the_set_and_count_the_names(data, runs, tmp_path, capsys):
    testset = tmp_path / "copy.tsv"
    assert copy_names.main(["make", "--data", str(data), "--out", str(testset)]) == 0
    out = tmp_path / "names.json"
    status = copy_names.main(
        ["evaluate", "--data", str(testset), f"noattn={runs['noattn']}", f"copy={runs['copy']}",
         "--json", str(out)])
    assert status == 0
    results = json.loads(out.read_text())["runs"]
    for r in results.values():
        assert r["names"] == 3 and r["sentences"] == 2
        assert 0 <= r["share_without_unk_replacement"] <= 100 and 0 <= r["share"] <= 100
    # no attention: nothing to copy from, with or without the <unk> replacement
    assert results["noattn"]["carried"] == results["noattn"]["carried_without_unk_replacement"]
    assert "noattn" in capsys.readouterr().out
