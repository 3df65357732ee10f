"""Self-critical sequence training (`captioner.scst`): the policy gradient against a reference
through the decoding step, the rewards against `CiderD` called directly, the baselines against
a NumPy formula, a short SCST stage on shapes and on coco-mini, and its one-line refusals."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from captioner.cli import main
from captioner.config import DecoderConfig, EncoderConfig, SelfCriticalConfig
from captioner.scst import SelfCriticalCaptioner, baseline, make_scst_dataset
from common.text.specials import END_ID, PAD_ID, START_ID

REPO = Path(__file__).resolve().parents[2]
VOCAB, STEPS, IMAGES = 9, 6, 2


def _model(attention="soft", samples=3, kind="greedy", vocab=VOCAB, reward=None,
           xe_weight=0.0, dropout=0.0):
    model = SelfCriticalCaptioner(
        vocab, EncoderConfig("small-cnn", (16, 16), "none", filters=(8,)),
        DecoderConfig(embedding_dim=8, units=16, attention_units=8, dropout=dropout,
                      max_length=STEPS, attention=attention, penalty_weight=0.0),
        SelfCriticalConfig(True, samples=samples, baseline=kind, xe_weight=xe_weight))
    model.reward = reward
    return model


def _images(count=IMAGES, seed=0):
    return tf.constant(np.random.default_rng(seed).uniform(0, 255, (count, 16, 16, 3)),
                       tf.float32)


def _captions(rows, rng):
    """`rows` captions of word ids (3..VOCAB-1), each cut by `<end>` at a random length (the
    last without `<end>`), `<pad>` after it."""
    words = rng.integers(3, VOCAB, (rows, STEPS)).astype(np.int32)
    for row in range(rows - 1):
        end = rng.integers(0, STEPS)
        words[row, end] = END_ID
        words[row, end + 1:] = PAD_ID
    return words


def _step_path(model, images, words, samples):
    """Per-row `Σₜ log p` of `words (N, T)` through the decoding step function
    (`model.make_step`, one token at a time), with hard attention's `log α` of the location
    it takes (its most likely one), and those locations `(N, T)`."""
    annotations = model.annotations({"image": images})
    state = tuple(tf.repeat(x, samples, axis=0)
                  for x in model.initial_decoding_state(features=annotations))
    step = model.make_step()
    tokens = np.concatenate([np.full((len(words), 1), START_ID), words[:, :-1]], 1)
    total, locations = 0.0, []
    for t in range(STEPS):
        logits, state, alpha = step(tf.constant(tokens[:, t]), state, tf.constant(t))
        masked = tf.tensor_scatter_nd_update(  # the sampler never draws <start> or <pad>
            tf.transpose(logits), [[START_ID], [PAD_ID]], tf.fill([2, len(words)], -1e9))
        log_p = tf.nn.log_softmax(tf.transpose(masked))
        term = tf.gather(log_p, words[:, t], batch_dims=1)
        if model.decoder_config.attention == "hard":
            term += tf.math.log(tf.reduce_max(alpha, axis=-1))
            locations.append(tf.argmax(alpha, axis=-1, output_type=tf.int32))
        total += term * (words[:, t] != PAD_ID)
    return total, (tf.stack(locations, 1) if locations else None)


def _references_xent(model, images, references):
    """The mean cross-entropy per word of `references (B, R, T)` through the decoding step
    (one token at a time, the full softmax; hard attention at the step's own, most likely,
    location), all-`<pad>` rows and the `<pad>` after `<end>` left out: a NumPy-style sum."""
    batch, count = references.shape[:2]
    rows = references.reshape(-1, STEPS)
    annotations = model.annotations({"image": images})
    state = tuple(tf.repeat(x, count, axis=0)
                  for x in model.initial_decoding_state(features=annotations))
    step = model.make_step()
    tokens = np.concatenate([np.full((len(rows), 1), START_ID), rows[:, :-1]], 1)
    total, words = 0.0, 0
    for t in range(STEPS):
        logits, state, _ = step(tf.constant(tokens[:, t]), state, tf.constant(t))
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(rows[:, t], logits)
        total += tf.reduce_sum(xent * (rows[:, t] != PAD_ID))
        words += int((rows[:, t] != PAD_ID).sum())
    return total / words


@pytest.mark.parametrize("attention", ["soft", "hard"])
@pytest.mark.parametrize("kind", ["greedy", "mean"])
def test_the_loss_and_its_gradient_are_the_advantage_times_the_samples_log_likelihood(
        attention, kind):
    # Fixed samples, greedy captions and rewards: loss_sum = -Σ (r - b) Σₜ log p(w), and its
    # gradient that of the same sum computed through the decoding step (hard attention: plus
    # log α of each step's location, here the ones the step takes).
    samples, rng = 3, np.random.default_rng(1)
    rewards = rng.uniform(0, 2, IMAGES * samples + IMAGES).astype(np.float32)
    model = _model(attention, samples, kind,
                   reward=lambda tokens, images: rewards[: len(tokens)])
    images = _images()
    words, greedy = _captions(IMAGES * samples, rng), _captions(IMAGES, rng)
    log_p, locations = _step_path(model, images, words, samples)
    model._sample = lambda annotations, k, seed, hard: (tf.constant(words), locations)
    model._greedy = lambda annotations: tf.constant(greedy)

    r, g = rewards[: IMAGES * samples], rewards[IMAGES * samples:]
    if kind == "greedy":
        b = np.repeat(g, samples)
    else:
        b = np.array([np.mean(np.delete(r[i - i % samples: i - i % samples + samples],
                                        i % samples)) for i in range(len(r))])
    advantage = r - b
    batch = {"image": images, "index": tf.range(IMAGES), "seed": tf.fill([IMAGES], 5)}
    with tf.GradientTape() as tape:
        terms = model.loss_terms(batch, training=True)
    grads = tape.gradient(terms["loss_sum"], model.trainable_variables)
    with tf.GradientTape() as tape:
        reference = -tf.reduce_sum(advantage * _step_path(model, images, words, samples)[0])
    expected = tape.gradient(reference, model.trainable_variables)

    np.testing.assert_allclose(float(terms["loss_sum"]), float(reference), rtol=1e-4, atol=1e-5)
    assert float(terms["count"]) == IMAGES * samples
    np.testing.assert_allclose(float(terms["reward"]) / (IMAGES * samples), r.mean(), rtol=1e-6)
    if kind == "greedy":
        np.testing.assert_allclose(float(terms["greedy_reward"]) / (IMAGES * samples),
                                   g.mean(), rtol=1e-6)
    assert sum(g is not None for g in grads) == len(model.trainable_variables)
    for got, want, variable in zip(grads, expected, model.trainable_variables):
        got, want = tf.convert_to_tensor(got).numpy(), tf.convert_to_tensor(want).numpy()
        scale = max(np.abs(want).max(), 1e-3)
        np.testing.assert_allclose(got / scale, want / scale, atol=2e-4, err_msg=variable.path)


@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_the_mixed_loss_and_its_gradient_are_the_weighted_sum_of_scst_and_cross_entropy(
        attention):
    # xe_weight w: loss = (1 - w) · SCST (per sample) + w · XE (per reference word), each part
    # computed apart: SCST through the decoding step as above, XE through the step too, over
    # the references (B, R, T) with an all-<pad> row; the gradient is the same sum's.
    samples, weight, rng = 2, 0.3, np.random.default_rng(4)
    rewards = rng.uniform(0, 2, IMAGES * samples + IMAGES).astype(np.float32)
    model = _model(attention, samples, xe_weight=weight, dropout=0.5,
                   reward=lambda tokens, images: rewards[: len(tokens)])
    images = _images()
    words, greedy = _captions(IMAGES * samples, rng), _captions(IMAGES, rng)
    references = _captions(IMAGES * 3, rng).reshape(IMAGES, 3, STEPS)
    references[1, 2] = PAD_ID  # the second image has two references
    log_p, locations = _step_path(model, images, words, samples)
    model._sample = lambda annotations, k, seed, hard: (tf.constant(words), locations)
    model._greedy = lambda annotations: tf.constant(greedy)
    advantage = rewards[: IMAGES * samples] - np.repeat(rewards[IMAGES * samples:], samples)
    batch = {"image": images, "index": tf.range(IMAGES), "seed": tf.fill([IMAGES], 5),
             "references": tf.constant(references)}
    count = IMAGES * samples

    with tf.GradientTape() as tape:
        terms = model.loss_terms(batch, training=True)
        loss = terms["loss_sum"] / terms["count"]
    grads = tape.gradient(loss, model.trainable_variables)
    with tf.GradientTape() as tape:
        scst = -tf.reduce_sum(advantage * _step_path(model, images, words, samples)[0]) / count
        xent = _references_xent(model, images, references)
        reference = (1 - weight) * scst + weight * xent
    expected = tape.gradient(reference, model.trainable_variables)

    assert float(xent) > 0.5 and abs(float(scst)) > 0.05  # both parts count
    assert float(terms["count"]) == count
    np.testing.assert_allclose(float(loss), float(reference), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(float(terms["xent"]) / count, float(xent), rtol=1e-5)
    for got, want, variable in zip(grads, expected, model.trainable_variables):
        got, want = tf.convert_to_tensor(got).numpy(), tf.convert_to_tensor(want).numpy()
        scale = max(np.abs(want).max(), 1e-3)
        np.testing.assert_allclose(got / scale, want / scale, atol=2e-4, err_msg=variable.path)


def test_the_reference_table_holds_each_images_captions_as_training_targets():
    from captioner.datasets import build_vocabulary, load_split
    from captioner.scst import reference_ids

    split = load_split("shapes", "train", num_images=12)
    vocab = build_vocabulary(split)
    table = reference_ids(split, vocab, max_length=9)
    counts = [len(record.captions) for record in split]
    assert table.shape == (12, max(counts), 9) and min(counts) < max(counts)
    for record, rows in zip(split, table):
        for k, row in enumerate(rows):
            if k >= len(record.captions):
                assert not row.any()
                continue
            ids = [vocab.token_to_id(w) for w in record.captions[k].lower().split()][:8]
            assert row.tolist() == ids + [END_ID] + [PAD_ID] * (8 - len(ids))
    dataset = make_scst_dataset(split, 4, seed=1, epoch=0, image_size=(16, 16),
                                references=table)
    for batch in dataset:
        np.testing.assert_array_equal(batch["references"], table[batch["index"].numpy()])


def test_the_rewards_in_the_step_are_cider_d_of_the_models_own_captions():
    from captioner.datasets import build_vocabulary, load_split
    from captioner.scst import CaptionReward
    from common.metrics.cider_d import CiderD
    from common.text.detokenizer import detokenize

    split = load_split("shapes", "train", num_images=6)
    vocab = build_vocabulary(split)
    calls = []
    reward = CaptionReward([record.captions for record in split], vocab)

    def recording(tokens, images):
        calls.append((tokens.copy(), images.copy()))
        return reward(tokens, images)

    samples = 4
    model = _model(samples=samples, vocab=len(vocab), reward=recording)
    images, index = _images(3, seed=2), tf.constant([4, 0, 4])
    terms = model.loss_terms({"image": images, "index": index, "seed": tf.fill([3], 11)}, True)
    (tokens, owners), = calls
    count = 3 * samples
    assert owners.tolist() == [4] * samples + [0] * samples + [4] * samples + [4, 0, 4]
    # The samples are the model's sampling decoder's with the batch's seed, the baseline
    # rows its greedy captions.
    annotations = model.annotations({"image": images})
    sampled = model.caption(features=tf.repeat(annotations, samples, 0), method="sample",
                            seed=11)
    np.testing.assert_array_equal(tokens[:count], sampled.tokens[:, 0].numpy())
    np.testing.assert_array_equal(tokens[count:],
                                  model.caption(images, method="greedy").tokens[:, 0].numpy())
    cider = CiderD({i: record.captions for i, record in enumerate(split)})
    texts = [detokenize(vocab.decode(row.tolist())) for row in tokens]
    scores = cider.scores(texts, owners.tolist())
    assert scores.max() > 0  # not a test of zeros
    np.testing.assert_allclose(float(terms["reward"]) / count, scores[:count].mean(), rtol=1e-5)
    np.testing.assert_allclose(float(terms["greedy_reward"]) / count, scores[count:].mean(),
                               rtol=1e-5)


def test_the_fact_weight_adds_w_times_each_captions_facts_to_its_cider_d():
    from captioner.datasets import build_vocabulary, load_split
    from captioner.datasets.shapes_metrics import fact_score
    from captioner.scst import CaptionReward
    from common.metrics.cider_d import CiderD

    split = load_split("shapes", "train", num_images=8)
    vocab = build_vocabulary(split)
    # Each image's first reference (facts 1), another image's (facts mostly below 1) and a
    # caption that names an object twice.
    texts = [split[i].captions[0] for i in range(4)] + [split[(i + 1) % 4].captions[0]
                                                        for i in range(4)]
    texts.append(f"{texts[0]} and a {split[0].objects[0].category}")
    images = np.array([*range(4), *range(4), 0])
    tokens = np.full((len(texts), 40), 0, np.int32)
    for row, text in enumerate(texts):
        ids = vocab.encode(text.split()) + [END_ID]
        tokens[row, :len(ids)] = ids
    tokens[tokens == 0] = PAD_ID

    def facts(caption, image):
        return fact_score(caption, split[image].objects)

    plain = CaptionReward([record.captions for record in split], vocab)
    weighted = CaptionReward([record.captions for record in split], vocab, facts, 2.5)
    cider = CiderD({i: record.captions for i, record in enumerate(split)})
    said = plain.texts(tokens)
    expected_facts = np.array([facts(text, image) for text, image in zip(said, images)])
    assert len(set(expected_facts.tolist())) > 1  # not one value for all
    np.testing.assert_allclose(plain(tokens, images), cider.scores(said, images.tolist()),
                               rtol=1e-6)
    np.testing.assert_allclose(weighted(tokens, images),
                               cider.scores(said, images.tolist()) + 2.5 * expected_facts,
                               rtol=1e-6)
    with pytest.raises(ValueError, match="a fact_weight needs facts"):
        CaptionReward([record.captions for record in split], vocab, None, 1.0)


def test_the_baselines_are_the_greedy_reward_or_the_mean_of_the_other_samples():
    rng = np.random.default_rng(3)
    rewards, greedy = rng.uniform(0, 3, 4 * 5), rng.uniform(0, 3, 4)
    by_greedy = np.asarray(baseline(rewards, greedy, 5, "greedy"))
    assert by_greedy.tolist() == [greedy[i // 5] for i in range(20)]
    by_mean = np.asarray(baseline(rewards, greedy, 5, "mean"))
    for i in range(20):
        others = [rewards[j] for j in range(i - i % 5, i - i % 5 + 5) if j != i]
        assert by_mean[i] == pytest.approx(sum(others) / 4)


def test_cached_features_give_batches_of_images_with_their_index_and_seed():
    from captioner.datasets import load_split

    split = load_split("shapes", "train", num_images=10)
    features = np.arange(10 * 2 * 3, dtype=np.float32).reshape(10, 2, 3)
    first = list(make_scst_dataset(split, 4, seed=1, epoch=0, features=features, missing=[3]))
    again = list(make_scst_dataset(split, 4, seed=1, epoch=0, features=features, missing=[3]))
    other = list(make_scst_dataset(split, 4, seed=1, epoch=1, features=features, missing=[3]))
    assert len(first) == 2  # 9 readable images, batches of 4, the remainder dropped
    seen = np.concatenate([b["index"].numpy() for b in first])
    assert len(set(seen)) == 8 and 3 not in seen
    for batch in first:
        np.testing.assert_array_equal(batch["features"], features[batch["index"].numpy()])
        assert len(set(batch["seed"].numpy())) == 1
    assert first[0]["seed"][0] != first[1]["seed"][0]
    assert [b["index"].numpy().tolist() for b in first] == [
        b["index"].numpy().tolist() for b in again]
    assert [b["seed"].numpy().tolist() for b in first] != [
        b["seed"].numpy().tolist() for b in other]


# -- the command line ---------------------------------------------------------------------

TINY = ["train", "--preset", "tiny", "--seed", "3", "--data-option", "num_images=100",
        "--attention-query", "hidden+word", "--verbose", "0"]


def _history(run):
    return [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]


def _epochs(run):
    return [r for r in _history(run) if r["kind"] == "epoch"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A briefly trained tiny run (cross-entropy), then 2 epochs of SCST from it."""
    root = tmp_path_factory.mktemp("scst")
    source, scst = root / "xe", root / "scst"
    assert main([*TINY, "--out", str(source), "--steps-per-epoch", "100",
                 "--learning-rate", "0.01"]) == 0
    assert main([*TINY, "--out", str(scst), "--init-from", str(source), "--scst",
                 "--scst-samples", "4", "--epochs", "2", "--steps-per-epoch", "12",
                 "--learning-rate", "0.001"]) == 0
    return source, scst


def test_an_scst_run_says_what_it_does_before_its_first_epoch_ends(tmp_path, capsys):
    """demo-scst-facts printed nothing for 125 s after "Starting from the weights of ...": now
    the reward, the compiling of the step and the first step are said, each in one line, then
    each epoch as usual (stdout here is not a terminal: lines, no bar)."""
    source = tmp_path / "xe"
    assert main([*TINY, "--out", str(source), "--steps-per-epoch", "2"]) == 0
    capsys.readouterr()
    assert main([*TINY, "--verbose", "1", "--out", str(tmp_path / "scst"), "--init-from",
                 str(source), "--scst", "--scst-samples", "2", "--scst-fact-weight", "10",
                 "--epochs", "1", "--steps-per-epoch", "2", "--validation-examples", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    said = [next(i for i, line in enumerate(lines) if line.startswith(start)) for start in (
        "Self-critical training: a reward of CIDEr-D against the references of 100 images + 10 "
        "x what each caption states, checked against its scene; each step samples 2 captions "
        "an image and decodes its greedy one",
        "Starting from the weights of ",
        "Epoch 1/1: compiling the training step (the first step waits for it)",
        "Epoch 1/1: first step done in ",
        "Epoch 1/1 - 2/2 steps - ",
        "Epoch 1/1: val_cider ")]
    assert said == sorted(said), lines  # in that order
    assert len(lines) <= 8, lines  # a few lines, not a line a step
    assert not any("\r" in line or "\x1b" in line for line in lines)


@pytest.mark.slow
def test_scst_from_a_trained_run_raises_its_validation_cider_and_keeps_the_best(runs):
    source, scst = runs
    epochs = _epochs(scst)
    assert [e["step"] for e in epochs] == [12, 24]
    for epoch in epochs:
        assert 0 < epoch["reward"] < 10 and 0 < epoch["greedy_reward"] < 10
        # On shapes the validation also checks what the captions say (`shapes_metrics`).
        assert 0 <= epoch["val_object_accuracy"] <= 100 and epoch["val_facts"] <= 1
    # Starting from the source's best weights, the stage improves on its validation.
    assert epochs[-1]["val_cider"] > _epochs(source)[-1]["val_cider"] + 5
    assert list((scst / "best").glob("ckpt-*.index"))
    config = json.loads((scst / "config.json").read_text())
    assert config["scst"] == {"enabled": True, "samples": 4, "baseline": "greedy",
                              "xe_weight": 0.0, "fact_weight": 0.0, "relation_bonus": 0.0}
    assert config["training"]["jit_compile"] is False
    # The checkpoints are the captioner's: caption reads the best one.
    sample = REPO / "assets" / "samples" / "shapes_2.png"
    assert main(["caption", str(scst), str(sample)]) == 0


@pytest.mark.slow
def test_an_scst_run_resumes_like_any_run(runs, tmp_path):
    _, scst = runs
    before = _epochs(scst)
    assert main([*TINY, "--out", str(scst), "--scst", "--scst-samples", "4", "--epochs", "3",
                 "--steps-per-epoch", "12", "--learning-rate", "0.001", "--resume"]) == 0
    after = _epochs(scst)
    assert after[:2] == before and after[2]["step"] == 36 and "reward" in after[2]


@pytest.mark.slow
def test_scst_runs_on_coco_images(shared_data, tmp_path, capsys):
    run = tmp_path / "coco"
    assert main(["train", "--dataset", "coco", "--data-dir", str(shared_data / "coco-mini"),
                 "--preset", "tiny", "--weights", "none", "--scst", "--scst-samples", "2",
                 "--batch-size", "4", "--steps-per-epoch", "2", "--verbose", "0",
                 "--out", str(run)]) == 0
    (epoch,) = _epochs(run)
    assert epoch["step"] == 2 and epoch["examples_per_s"] > 0 and "greedy_reward" in epoch
    assert json.loads((run / "status.json").read_text())["state"] == "finished"


# -- refusals -------------------------------------------------------------------------------

def _one_line_error(capsys, argv):
    status = main(argv)
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("args, message", [
    (["--scst", "--scst-samples", "0"], "scst samples must be an integer >= 1, got 0"),
    (["--scst", "--scst-samples", "1", "--scst-baseline", "mean"],
     "expected samples >= 2, got 1"),
    (["--scst", "--scst-baseline", "best"], "invalid choice: 'best'"),
    (["--scst", "--scst-xe-weight", "1"], "scst xe_weight must be a number in [0, 1)"),
    (["--scst", "--scst-xe-weight", "-0.1"], "got -0.1"),
    (["--scst", "--scst-xe-weight", "half"], "invalid float value: 'half'"),
    (["--scst", "--jit-compile"], "--scst computes its CIDEr-D reward in NumPy"),
    (["--scst", "--scst-fact-weight", "-1"], "scst fact_weight must be a number >= 0"),
    (["--scst", "--scst-fact-weight", "nan"], "got nan"),
    (["--scst", "--scst-fact-weight", "1", "--dataset", "coco", "--data-dir", "nowhere"],
     "--scst-fact-weight checks captions against an annotated scene, which only shapes has"),
    (["--scst", "--scst-fact-weight", "1", "--scst-relation-bonus", "-0.5"],
     "scst relation_bonus must be a number >= 0, got -0.5"),
    (["--scst", "--scst-relation-bonus", "0.5"],
     "scst relation_bonus adds to the facts of the reward, which fact_weight 0 leaves out"),
    (["--best-metric", "facts", "--dataset", "coco", "--data-dir", "nowhere"],
     "--best-metric facts: only the validation on shapes reports it"),
])
def test_bad_scst_options_are_one_line(capsys, tmp_path, args, message):
    err = _one_line_error(capsys, ["train", "--preset", "tiny", "--out", str(tmp_path / "r"),
                                   *args])
    assert message in err
    assert not (tmp_path / "r").exists()


def test_the_facts_preset_is_demo_scst_with_the_fact_reward_and_its_best_checkpoint():
    from captioner.config import CaptionerRunConfig
    from captioner.presets import get_preset
    from common.config import from_dict

    plain, facts = get_preset("demo-scst"), get_preset("demo-scst-facts")
    assert facts["scst"].pop("fact_weight") == 10.0
    assert facts["scst"].pop("relation_bonus") == 0.15
    assert facts["training"].pop("best_metric") == "facts"
    assert (facts["training"].pop("epochs"), plain["training"].pop("epochs")) == (8, 4)
    assert facts == plain
    config = from_dict(CaptionerRunConfig, get_preset("demo-scst-facts"))
    assert config.scst.fact_weight == 10.0 and config.data.dataset == "shapes"
    # scripts/demo.sh starts it from a `demo` run: the same model, coverage included.
    demo = from_dict(CaptionerRunConfig, get_preset("demo"))
    assert (config.encoder, config.decoder) == (demo.encoder, demo.decoder)
    assert config.decoder.coverage


def test_a_config_written_before_the_cross_entropy_mix_loads_without_it():
    from captioner.config import CaptionerRunConfig
    from common.config import from_dict

    config = from_dict(CaptionerRunConfig, {"scst": {"enabled": True, "samples": 4,
                                                     "baseline": "mean"}})
    assert config.scst == SelfCriticalConfig(True, 4, "mean", xe_weight=0.0)


def test_scst_is_refused_for_the_jax_trainer_in_one_line(capsys, tmp_path):
    from captioner.family import FAMILY
    from common.errors import UserError
    from common.training.capabilities import refuse_unsupported

    with pytest.raises(UserError, match="--scst needs the tensorflow trainer; its CIDEr-D"):
        refuse_unsupported({}, "jax", "here", sections={"scst": {"enabled": True}},
                           family=FAMILY.capabilities)
    refuse_unsupported({}, "jax", "here", sections={"scst": {"enabled": False}},
                       family=FAMILY.capabilities)
    err = _one_line_error(capsys, ["prepare", "--preset", "tiny", "--scst",
                                   "--out", str(tmp_path / "p")])
    assert "--scst needs the tensorflow trainer" in err
    err = _one_line_error(capsys, ["prepare", "--preset", "demo-scst",  # the preset turns it on
                                   "--out", str(tmp_path / "p")])
    assert "--scst needs the tensorflow trainer" in err
    assert not (tmp_path / "p").exists()


@pytest.mark.slow
def test_train_prepared_on_jax_refuses_scst(tmp_path):
    pytest.importorskip("jax")
    from captioner.config import CaptionerRunConfig
    from common.config import save_json, to_dict

    folder = tmp_path / "prepared"
    folder.mkdir()
    save_json(folder / "config.json", to_dict(CaptionerRunConfig()))
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, "-m", "captioner", "train", "--prepared",
                             str(folder), "--out", str(tmp_path / "r"), "--scst"], env=env,
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    err = result.stderr.strip()
    assert result.returncode == 2 and len(err.splitlines()) == 1, err[-2000:]
    assert "--scst needs the tensorflow trainer" in err
    assert not (tmp_path / "r").exists()
