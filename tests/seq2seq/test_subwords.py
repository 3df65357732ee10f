"""Translators with SentencePiece vocabularies (`--vocab sentencepiece`): training, resuming,
evaluating, translating and exporting; shared vocabularies tie the embeddings three ways."""

import json
import shutil
from pathlib import Path

import pytest
import sentencepiece as spm

from seq2seq.cli import main
from seq2seq.datasets import PairsSplit, load_pairs, make_dataset
from seq2seq.inference import Translator
from seq2seq.vocabularies import Vocabularies
from tests.helpers.isolated import run_signature_isolated

SPA_ENG = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "spa-eng"
TINY = ["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
        "--hidden-dim", "16", "--intermediate-dim", "32", "--verbose", "0"]
SHARED = ["--vocab", "sentencepiece", "--vocab-size", "80", "--shared-vocab",
          "--tie-embeddings"]
SENTENCES = ["March 3, 1999", "25th of November 2026", "3/3/1999", "Friday 13 June 1980"]


def _processor(path):
    return spm.SentencePieceProcessor(model_file=str(path))


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "shared"
    assert main([*TINY, *SHARED, "--steps-per-epoch", "150", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def export_dir(shared_run):
    out = shared_run.parent / "export"
    assert main(["export", str(shared_run), str(out), "--beam-sizes", "1,2"]) == 0
    return out


@pytest.mark.slow
def test_a_shared_run_keeps_one_sentencepiece_model_and_ties_three_ways(shared_run):
    assert sorted(p.name for p in shared_run.glob("vocab*.model")) == ["vocab.model"]
    config = json.loads((shared_run / "config.json").read_text())["data"]
    assert (config["vocab"], config["vocab_size"], config["shared_vocab"]) == (
        "sentencepiece", 80, True)
    translator = Translator.from_run_dir(shared_run)
    model = translator.model
    assert model.source_embedding is model.target_embedding  # and the output projection
    embeddings = [w for w in model.weights if w.shape == (80, 16)]
    assert len(embeddings) == 1  # one (V, D) matrix in the whole model
    # The model's vocabulary is the model's pieces, in id order.
    processor = _processor(shared_run / "vocab.model")
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    assert translator.source_vocab.tokens == translator.target_vocab.tokens == pieces


@pytest.mark.slow
def test_the_model_reads_sentencepiece_ids(shared_run):
    # The batches hold what SentencePiece itself makes of the raw text.
    translator = Translator.from_run_dir(shared_run)
    pairs = load_pairs("dates", split="valid", size=6, seed=3)
    pairs = translator.vocabularies.tokenize_pairs(pairs, None)
    batch = next(iter(make_dataset(pairs, translator.source_vocab, translator.target_vocab, 6,
                                   bucket=False)))
    processor = _processor(shared_run / "vocab.model")
    for row, (source, target) in enumerate(zip(pairs.sources, pairs.targets)):
        expected = processor.encode(source)
        assert batch["source"][row, :len(expected)].numpy().tolist() == expected
        assert not batch["source"][row, len(expected):].numpy().any()
        ids = processor.encode(target)
        width = len(ids) + 1
        assert batch["target_in"][row, :width].numpy().tolist() == [1, *ids]
        assert batch["target_out"][row, :width].numpy().tolist() == [*ids, 2]


def test_the_length_filter_counts_pieces(tmp_path):
    from common.text.subwords import SubwordVocabulary, train_sentencepiece

    texts = ["the cat sat on the mat", "a dog", "unbelievably long words everywhere"] * 30
    vocab = SubwordVocabulary(train_sentencepiece(texts, 40, "bpe"))
    vocabs = Vocabularies.of_subwords(vocab, vocab)
    sources, targets = texts[:3], ["a dog", "the mat", "a cat"]
    pairs = PairsSplit(sources, targets, [s.split() for s in sources],
                       [t.split() for t in targets])
    processor = spm.SentencePieceProcessor(model_proto=vocab.proto)
    lengths = [max(len(processor.encode(s)), len(processor.encode(t)))
               for s, t in zip(sources, targets)]
    limit = sorted(lengths)[1]  # keeps two pairs, whatever the words count
    kept = vocabs.tokenize_pairs(pairs, limit)
    assert kept.dropped == sum(n > limit for n in lengths) == 1
    assert kept.sources == [s for s, n in zip(sources, lengths) if n <= limit]
    assert kept.source_tokens[0] == processor.encode(kept.sources[0], out_type=str)


@pytest.mark.slow
def test_resume_reloads_the_model_and_evaluate_and_translate_work(shared_run, tmp_path,
                                                                   capsys):
    run = tmp_path / "run"
    shutil.copytree(shared_run, run)
    before = (run / "vocab.model").stat().st_mtime_ns
    assert main([*TINY, *SHARED, "--steps-per-epoch", "150", "--epochs", "2", "--resume",
                 "--out", str(run)]) == 0
    assert (run / "vocab.model").stat().st_mtime_ns == before  # loaded, not trained again
    epochs = [json.loads(line) for line in (run / "history.jsonl").open()]
    assert [r["epoch"] for r in epochs if r["kind"] == "epoch"] == [1, 2]
    capsys.readouterr()
    scores = tmp_path / "scores.json"
    assert main(["evaluate", str(run), "--dataset", "dates", "--limit", "20", "--json",
                 str(scores)]) == 0
    assert json.loads(scores.read_text())["sentences"] == 20
    capsys.readouterr()
    assert main(["translate", str(run), *SENTENCES[:2]]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2


@pytest.mark.slow
def test_the_export_translates_as_in_process_with_tensorflow_text_alone(shared_run,
                                                                         export_dir):
    translator = Translator.from_run_dir(shared_run)
    expected = translator.translate(SENTENCES, beam_size=2)
    info = json.loads((export_dir / "assets.extra" / "export_info.json").read_text())
    assert info["vocab"] == "sentencepiece" and info["op_libraries"] == ["tensorflow_text"]
    outputs, imported = run_signature_isolated(
        export_dir, {"sentences": SENTENCES, "beam_size": 2, "max_length": 16, "n_best": 1,
                     "no_repeat_ngram": 0},
        signature="translate_with_options", op_libraries=("tensorflow_text",))
    assert imported == []  # nothing of keras-hub, Keras or the project
    processor = _processor(shared_run / "vocab.model")
    for row, (sentence, e) in enumerate(zip(SENTENCES, expected)):
        assert outputs["translations"][row].decode() == e.text
        n = int(outputs["lengths"][row])
        assert [t.decode() for t in outputs["tokens"][row, :n]] == e.tokens
        # The text is SentencePiece's decoding of the pieces; the source tokens its pieces.
        assert e.text == processor.decode_pieces(e.tokens)
        assert e.source_tokens == processor.encode(sentence, out_type=str)
        m = int(outputs["source_lengths"][row])
        assert [t.decode() for t in outputs["source_tokens"][row, :m]] == e.source_tokens
    # The package's own client of the export (it imports tensorflow_text itself).
    assert main(["translate", str(export_dir), *SENTENCES]) == 0


@pytest.mark.slow
def test_per_side_bpe_models_on_spa_eng(tmp_path):
    path = SPA_ENG / "train.tsv"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    data = tmp_path / "train.tsv"
    data.write_text("".join(path.open(encoding="utf-8").readlines()[:2000]), encoding="utf-8")
    run = tmp_path / "run"
    assert main(["train", "--dataset", "tsv", "--data", str(data), "--arch", "bahdanau",
                 "--preset", "tiny", "--steps-per-epoch", "5", "--vocab", "sentencepiece",
                 "--sentencepiece-type", "bpe", "--vocab-size", "300",
                 "--out", str(run), "--verbose", "0"]) == 0
    assert sorted(p.name for p in run.glob("vocab*.model")) == ["vocab.source.model",
                                                          "vocab.target.model"]
    source, target = (_processor(run / f"vocab.{side}.model") for side in ("source", "target"))
    assert source.get_piece_size() == target.get_piece_size() == 300
    assert source.id_to_piece(10) != target.id_to_piece(10) or source.id_to_piece(
        11) != target.id_to_piece(11)  # English and Spanish pieces
    translator = Translator.from_run_dir(run)
    assert translator.model.source_embedding is not translator.model.target_embedding
    (result,) = translator.translate(["I'm hungry."])
    assert result.error is None and result.source_tokens == source.encode(
        "I'm hungry.", out_type=str)
    # The export keeps the two models apart: the target is decoded with the target's (it was
    # decoded with the source's, the two unnamed tensorflow-text resources loaded as one).
    sentences = ["I'm hungry.", "I don't know.", "Where is the station?"]
    expected = translator.translate(sentences, beam_size=2)
    assert main(["export", str(run), str(tmp_path / "export"), "--beam-sizes", "2"]) == 0
    outputs, _ = run_signature_isolated(
        tmp_path / "export", {"sentences": sentences, "beam_size": 2, "max_length": 16,
                              "n_best": 1, "no_repeat_ngram": 0},
        signature="translate_with_options", op_libraries=("tensorflow_text",))
    for row, e in enumerate(expected):
        n = int(outputs["lengths"][row])
        assert [t.decode() for t in outputs["tokens"][row, :n]] == e.tokens
        assert outputs["translations"][row].decode() == e.text == target.decode_pieces(e.tokens)
    # ... which would read otherwise: the source model makes other text of the same ids.
    assert any(source.decode([target.piece_to_id(p) for p in e.tokens]) != e.text
               for e in expected)


@pytest.mark.slow
def test_init_from_another_vocabulary_is_one_line(shared_run, tmp_path, capsys):
    status = main([*TINY, "--vocab", "sentencepiece", "--vocab-size", "70", "--shared-vocab",
                   "--out", str(tmp_path / "a"), "--init-from", str(shared_run)])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "vocab.model differs from this run's (80 vs 70 tokens" in err
    status = main([*TINY, "--out", str(tmp_path / "b"), "--init-from", str(shared_run)])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "it has no vocab.source.txt (its vocabularies: vocab.model)" in err


@pytest.mark.parametrize("flags, message", [
    (["--vocab", "sentencepiece", "--arch", "bahdanau", "--copy"],
     "--copy copies source words: it applies to word vocabularies"),
    (["--shared-vocab"], "one vocabulary for both sides is a SentencePiece one"),
])
def test_word_only_options_are_one_line_errors(flags, message, tmp_path, capsys):
    status = main([*TINY, *flags, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and message in err
    assert not (tmp_path / "run").exists()
