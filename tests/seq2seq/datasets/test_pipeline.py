"""build_vocabularies and make_dataset: shapes, padding, <start>/<end>, bucketing, determinism."""

import numpy as np
import pytest

from common.errors import UserError
from seq2seq.datasets import build_vocabularies, load_pairs, make_dataset
from seq2seq.datasets.pairs import PairsSplit


def toy_pairs():
    sources = ["a b c", "a", "b c d e f g h i j k l", "c a"]
    targets = ["x y", "y y y z", "z", "x"]
    split = [s.split() for s in sources], [t.split() for t in targets]
    return PairsSplit(sources, targets, *split)


def batches(dataset):
    return [{k: v.numpy() for k, v in b.items()} for b in dataset]


def test_build_vocabularies_counts_each_side():
    source_vocab, target_vocab = build_vocabularies(toy_pairs())
    assert source_vocab.tokens[4:7] == ["a", "c", "b"]
    assert target_vocab.tokens[4:] == ["y", "x", "z"]
    assert build_vocabularies(toy_pairs(), min_count=3)[1].tokens[4:] == ["y"]
    assert len(build_vocabularies(toy_pairs(), max_size=5)[0]) == 5


@pytest.mark.parametrize("bucket", [True, False])
def test_batches_hold_every_pair_padded_with_start_and_end(bucket):
    pairs = toy_pairs()
    source_vocab, target_vocab = build_vocabularies(pairs)
    got = batches(make_dataset(pairs, source_vocab, target_vocab, batch_size=2, bucket=bucket))
    rows = []
    for batch in got:
        assert set(batch) == {"source", "target_in", "target_out"}
        assert all(v.dtype == np.int32 and v.ndim == 2 for v in batch.values())
        assert batch["target_in"].shape == batch["target_out"].shape
        assert (batch["target_in"][:, 0] == target_vocab.start_id).all()
        # target_in shifted left by one is target_out, up to the <end> in place of padding
        assert (batch["target_in"][:, 1:] == np.where(
            batch["target_out"][:, :-1] == target_vocab.end_id, 0, batch["target_out"][:, :-1]
        )).all()
        for source, target_out in zip(batch["source"], batch["target_out"]):
            n = int((source != 0).sum())
            assert (source[n:] == 0).all()  # padding only at the end
            m = int((target_out != 0).sum())
            assert target_out[m - 1] == target_vocab.end_id and (target_out[m:] == 0).all()
            rows.append((tuple(source[:n]), tuple(target_out[: m - 1])))
    expected = {
        (tuple(source_vocab.encode(s)), tuple(target_vocab.encode(t)))
        for s, t in zip(pairs.source_tokens, pairs.target_tokens)
    }
    assert len(rows) == len(pairs) and set(rows) == expected


def test_bucketing_groups_similar_lengths_and_pads_each_batch_to_its_longest():
    pairs = load_pairs("dates", split="train", size=64, seed=0)
    long_source = PairsSplit(
        pairs.sources + ["long"], pairs.targets + ["t"],
        pairs.source_tokens + [["w"] * 30], pairs.target_tokens + [["2026"]],
    )
    source_vocab, target_vocab = build_vocabularies(long_source)
    got = batches(make_dataset(long_source, source_vocab, target_vocab, batch_size=16))
    widths = sorted(b["source"].shape[1] for b in got)
    assert widths[-1] == 30 and widths[0] == 5  # the long one is not in a short batch
    assert sum(b["source"].shape[0] for b in got) == 65
    assert max(b["source"].shape[0] for b in got) == 16


def test_shuffle_is_deterministic_per_seed():
    pairs = load_pairs("dates", split="train", size=100, seed=0)
    vocabs = build_vocabularies(pairs)

    def first_sources(seed):
        dataset = make_dataset(pairs, *vocabs, batch_size=10, shuffle=True, seed=seed)
        return [b["source"].tolist() for b in batches(dataset)]

    assert first_sources(3) == first_sources(3)
    assert first_sources(3) != first_sources(4)
    unshuffled = make_dataset(pairs, *vocabs, batch_size=10, shuffle=False, bucket=False)
    assert batches(unshuffled)[0]["source"][0].tolist()[:1] == vocabs[0].encode(
        pairs.source_tokens[0]
    )[:1]


def test_drop_remainder_gives_fixed_batch_size():
    pairs = load_pairs("dates", split="train", size=50, seed=0)
    vocabs = build_vocabularies(pairs)
    got = batches(make_dataset(pairs, *vocabs, batch_size=8, bucket=False, drop_remainder=True))
    assert [b["source"].shape[0] for b in got] == [8] * 6


def test_unknown_tokens_map_to_unk_and_empty_input_is_an_error():
    pairs = toy_pairs()
    source_vocab, target_vocab = build_vocabularies(PairsSplit(["a"], ["x"], [["a"]], [["x"]]))
    got = batches(make_dataset(pairs, source_vocab, target_vocab, batch_size=4, bucket=False))
    assert got[0]["source"][0].tolist()[:3] == [4, 3, 3]
    with pytest.raises(UserError, match="no sentence pairs"):
        make_dataset(PairsSplit([], [], [], []), source_vocab, target_vocab, batch_size=2)
    with pytest.raises(UserError, match="batch_size"):
        make_dataset(pairs, source_vocab, target_vocab, batch_size=0)
