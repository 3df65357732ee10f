"""Self-critical sequence training (SCST): the captioner trained on the CIDEr-D of its samples.

Paper: Rennie et al. 2017, "Self-critical Sequence Training for Image Captioning",
https://arxiv.org/abs/1612.00563; the baseline of the other samples: Luo 2020, "A Better
Variant of Self-Critical Sequence Training", https://arxiv.org/abs/2003.09971.

`SelfCriticalCaptioner` is a `ShowAttendTell` (the same layers and variables, so its
checkpoints are the captioner's: `evaluate`, `caption` and `export` read them as they are)
whose `loss_terms` is the policy gradient of the reward, for the trainer's compiled step
(`common.training.step`). Per step, on a batch of `B` images:

1. the images are encoded once, `(B, L, D)`;
2. `K` captions per image are sampled from the model (`common.decoding.Sampling`: temperature
   1, every word but `<start>` and `<pad>`, up to `decoder.max_length` tokens), from a copy of
   the annotations without gradient; for hard attention each step's location is sampled too,
   from its attention weights, and recorded;
3. with the `greedy` baseline, each image's greedy caption (the caption `caption --beam-size 1`
   gives; hard attention at its most likely locations);
4. the rewards: CIDEr-D of every caption against its image's training references
   (`common.metrics.cider_d.CiderD`, document frequencies from the training references, built
   once), plus with `scst.fact_weight` `W` what the caption states checked against the
   image's scene (`W · shapes_metrics.fact_score`, shapes only), in NumPy through
   `tf.numpy_function`, so the step is not compiled by XLA;
5. each sample's advantage `Aᵢ = rᵢ − bᵢ`: `bᵢ` the reward of the image's greedy caption, or
   (`mean`) the mean reward of the image's other `K − 1` samples;
6. a teacher-forced pass over the samples with the gradient, dropout off as when they were
   sampled, gives the log-probability of each sampled word up to and including `<end>` under
   the distribution sampled from (`<start>` and `<pad>` excluded), and for hard attention of
   each sampled location: `loss_sum = −Σᵢ Aᵢ Σₜ log p(wᵢₜ) + λ Σᵢ penaltyᵢ`, `count = N`, so the
   loss is the mean over the samples, per caption (not per word).

With `scst.xe_weight` `w > 0` the cross-entropy of the images' reference captions is mixed
in, as self-critical.pytorch's `structure_loss_weight` does: the batch also carries each
image's references `(B, R, T)` (`reference_ids`), read under teacher forcing with dropout off,
and the step's loss is `(1 − w) · (the SCST loss above) + w · XE`, XE the mean over the
references' words: `loss_sum = (1 − w) · loss_sum + w · N · XE` (the trainer divides by `N`).
It keeps the model's captions among those the references say: SCST alone follows CIDEr-D's
consensus wherever it leads (on `shapes`, to listing the objects without their relations).

The reported terms (means over the `N` samples): `reward`, the samples' CIDEr-D;
`greedy_reward`, their images' greedy captions' (greedy baseline only); `penalty`; with the
mix, `xent`, the references' cross-entropy per word.

Shapes: `B` images, `K` samples per image, `N = B·K` sampled captions, `T` steps
(`decoder.max_length`), `L` regions, `D` features, `V` vocabulary, `R` references per image.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from captioner.config import CaptionerRunConfig, SelfCriticalConfig
from captioner.model import ShowAttendTell, doubly_stochastic_penalty
from common.config import from_dict, to_dict
from common.text.specials import END_ID, PAD_ID, START_ID

NEG = -1e9  # the logit of a word never sampled (`common.decoding.utils.NEG`)


class CaptionReward:
    """CIDEr-D of captions given as token ids, against the training references of their images,
    plus, optionally, what they state checked against the images' scenes.

    Args:
        references: the reference captions of each image, by its index in the training split
            (`[record.captions for record in split]`): the corpus of the document frequencies.
        vocab: the run's `common.text.Vocabulary`.
        facts: `(caption, image index) -> float`, the caption's facts about its image
            (`shapes_metrics.fact_score` of the image's objects), or None.
        fact_weight: `W` in `reward = CIDEr-D + W · facts` (`scst.fact_weight`).

    Call arguments:
        tokens: `(M, T)` int ids, each row cut at its first `<end>` (`<pad>` and `<start>`
            dropped), its words detokenized as the validation's captions are.
        images: `(M,)` the image index of each row.

    Returns:
        `(M,)` float32 CIDEr-D (pycocoevalcap's scale: 1.0, not 100), plus `W · facts`.
    """

    def __init__(self, references: Sequence[Sequence[str]], vocab: Any,
                 facts: Callable[[str, int], float] | None = None, fact_weight: float = 0.0):
        from common.metrics.cider_d import CiderD

        self.cider = CiderD({index: list(captions) for index, captions in enumerate(references)
                             if captions})
        self.vocab = vocab
        if fact_weight and facts is None:
            raise ValueError("a fact_weight needs facts: (caption, image index) -> float")
        self.facts, self.fact_weight = facts, float(fact_weight)

    def texts(self, tokens: np.ndarray) -> list[str]:
        """The caption of each row of `tokens`."""
        from common.text.detokenizer import detokenize

        return [detokenize(self.vocab.decode(row.tolist())) for row in np.asarray(tokens)]

    def __call__(self, tokens: np.ndarray, images: np.ndarray) -> np.ndarray:
        images = np.asarray(images).reshape(-1)
        if not len(images):
            return np.zeros(0, np.float32)
        texts, images = self.texts(tokens), images.tolist()
        rewards = self.cider.scores(texts, images)
        if self.fact_weight:
            rewards = rewards + self.fact_weight * np.array(
                [self.facts(text, image) for text, image in zip(texts, images)])
        return rewards.astype(np.float32)


def baseline(rewards, greedy_rewards, samples: int, kind: str):
    """`(N,)` the baseline of each sample: its image's greedy reward (`greedy`, from
    `greedy_rewards (B,)`) or the mean reward of its image's other samples (`mean`); `rewards`
    `(N,)` image-major (the `samples` of image 0 first)."""
    if kind == "greedy":
        return ops.repeat(greedy_rewards, samples, axis=0)
    per_image = ops.reshape(rewards, (-1, samples))
    others = (ops.sum(per_image, axis=1, keepdims=True) - per_image) / (samples - 1)
    return ops.reshape(others, (-1,))


def word_log_probs(logits, words):
    """`(N, T)` the log-probability of each of `words (N, T)` under `logits (N, T, V)` as the
    sampler draws from them: `<start>` and `<pad>` excluded, the rest renormalized."""
    logits = ops.cast(logits, "float32")
    vocab = ops.shape(logits)[-1]
    never = ops.one_hot(START_ID, vocab) + ops.one_hot(PAD_ID, vocab)
    if START_ID == END_ID or PAD_ID == END_ID:  # `<end>` is never excluded
        never = never * (1.0 - ops.one_hot(END_ID, vocab))
    logits = ops.where(never > 0, NEG, logits)
    log_probs = logits - ops.logsumexp(logits, axis=-1, keepdims=True)
    return ops.squeeze(ops.take_along_axis(log_probs, ops.cast(words, "int32")[..., None],
                                           axis=-1), -1)


def reference_ids(split: Any, vocab: Any, max_length: int) -> np.ndarray:
    """`(len(split), R, max_length)` int32: the reference captions of each image of `split` as
    cross-entropy training's targets (`caption_out`: the words, cut to `max_length − 1`, then
    `<end>`), `<pad>` after them and in the rows of an image with fewer than `R` (the most any
    image has) captions."""
    from captioner.datasets.pipeline import caption_pairs

    owners, ids = caption_pairs(split, vocab, max_length=max_length)
    counts = np.bincount(owners, minlength=len(split))
    table = np.full((len(split), max(int(counts.max()), 1), max_length), PAD_ID, np.int32)
    first = np.concatenate([[0], np.cumsum(counts)])
    for n, row in enumerate(ids.to_list()):
        table[owners[n], n - first[owners[n]], :len(row) + 1] = [*row, END_ID]
    return table


def _hard_step(decoder, tokens, h, c, annotations, projected, location):
    """One step of the hard-attention decoder at a chosen location: `decoder.step` with the
    location given (an `(N,)` index, or a function of the weights `(N, L)` that draws one).
    Returns `logits (N, V), h, c, alpha (N, L), location (N,), log α(location) (N,)`."""
    embedded = decoder.embedding(tokens)
    _, alpha, _ = decoder._attend(h, embedded, annotations, projected)  # the weights α
    weights = ops.cast(alpha, "float32")
    if callable(location):
        location = location(weights)
    one_hot = ops.one_hot(ops.cast(location, "int32"), ops.shape(weights)[-1])
    log_prob = ops.log(ops.maximum(ops.sum(one_hot * weights, axis=-1), 1e-30))
    context = ops.einsum("nl,nld->nd", ops.cast(one_hot, annotations.dtype), annotations)
    context = decoder.gate(h) * context
    _, (h, c) = decoder.cell(ops.concatenate([embedded, context], axis=-1), [h, c])
    return decoder.output_logits(embedded, h, context), h, c, alpha, location, log_prob


@keras.saving.register_keras_serializable(package="captioner")
class SelfCriticalCaptioner(ShowAttendTell):
    """A `ShowAttendTell` trained by self-critical sequence training (see the module docstring).

    Paper: Rennie et al. 2017. The layers, variables and decoding are `ShowAttendTell`'s; only
    `loss_terms` differs.

    Args:
        vocab_size, encoder, decoder: as for `ShowAttendTell`.
        scst: a `SelfCriticalConfig` (or its dict): `K` and the baseline.

    Attributes:
        reward: `(tokens (M, T), images (M,)) -> (M,)` float32 NumPy rewards (a
            `CaptionReward`), set before training: state of the run, not of the config.

    Call arguments, returns: as for `ShowAttendTell`.

    Example:
    >>> model = SelfCriticalCaptioner(30, EncoderConfig("small-cnn", (32, 32), "none"),
    ...     DecoderConfig(embedding_dim=8, units=16, attention_units=8, max_length=6),
    ...     SelfCriticalConfig(True, samples=2))  # doctest: +SKIP
    >>> model.reward = CaptionReward(references, vocab)  # doctest: +SKIP
    >>> model.loss_terms({"image": images, "index": indices, "seed": seeds}, True)  # doctest: +SKIP
    {'loss_sum': ..., 'count': ..., 'reward': ..., 'greedy_reward': ..., 'penalty': ...}
    """

    def __init__(self, vocab_size: int, encoder=None, decoder=None,
                 scst: SelfCriticalConfig | dict | None = None, **kwargs):
        super().__init__(vocab_size, encoder, decoder, **kwargs)
        if scst is None or isinstance(scst, dict):
            scst = from_dict(SelfCriticalConfig, scst or {"enabled": True})
        self.scst_config = scst
        self.reward = None

    def get_config(self):
        config = super().get_config()
        config.update(scst=to_dict(self.scst_config))
        return config

    # -- one step ------------------------------------------------------------------------

    def loss_terms(self, batch: dict[str, Any], training: bool) -> dict[str, Any]:
        """The policy gradient's sums over the batch's `N` samples for
        `common.training.Trainer`: `loss_sum`, `count` (`N`), `reward`, `greedy_reward`
        (greedy baseline only) and `penalty`.

        `batch`: `"image" (B, H, W, 3)` or `"features" (B, L, D)`, `"index" (B,)` the images'
        indices in the training split (the reward's), and `"seed" (B,)` (the first one seeds
        the batch's samples; `make_scst_dataset`); with `scst.xe_weight`, `"references"
        (B, R, T)` (`reference_ids`).
        """
        if self.reward is None:
            raise ValueError("SelfCriticalCaptioner needs a reward: set model.reward")
        scst, config = self.scst_config, self.decoder_config
        samples, hard = scst.samples, config.attention == "hard"
        # Dropout and batch statistics off throughout: the samples are drawn from the
        # inference model, and the gradient is that of the same distribution.
        annotations = self.annotations(batch, training=False)  # (B, L, D)
        images = ops.cast(batch["index"], "int32")
        seed = ops.cast(batch["seed"][0], "int32") if "seed" in batch else None
        words, locations = self._sample(ops.stop_gradient(annotations), samples, seed, hard)
        greedy = (self._greedy(ops.stop_gradient(annotations)) if scst.baseline == "greedy"
                  else ops.zeros((0, ops.shape(words)[1]), "int32"))
        rewards, greedy_rewards = self._rewards(words, greedy, images, samples)
        advantage = ops.stop_gradient(
            rewards - baseline(rewards, greedy_rewards, samples, scst.baseline))

        caption_in = ops.concatenate(
            [ops.full((ops.shape(words)[0], 1), START_ID, "int32"), words[:, :-1]], axis=1)
        mask = ops.cast(ops.not_equal(words, PAD_ID), "float32")  # (N, T): up to <end>
        tiled = ops.repeat(annotations, samples, axis=0)  # (N, L, D), with the gradient
        logits, alpha, location_log_prob = self._forced(tiled, caption_in, locations, hard)
        log_prob = ops.sum(word_log_probs(logits, words) * mask, axis=1)  # (N,)
        if hard:
            log_prob = log_prob + ops.sum(location_log_prob * mask, axis=1)
        penalty = config.penalty_weight * ops.sum(
            doubly_stochastic_penalty(ops.cast(alpha, "float32"), mask, config.penalty_tau))
        count = ops.cast(ops.shape(words)[0], "float32")
        terms = {"loss_sum": -ops.sum(advantage * log_prob) + penalty, "count": count,
                 "reward": ops.sum(rewards)}
        if scst.baseline == "greedy":
            terms["greedy_reward"] = ops.sum(greedy_rewards) * samples
        terms["penalty"] = penalty
        if scst.xe_weight:
            weight = scst.xe_weight
            xent = count * self._reference_xent(annotations, batch["references"])
            terms["loss_sum"] = (1.0 - weight) * terms["loss_sum"] + weight * xent
            terms["xent"] = xent
        return terms

    def _reference_xent(self, annotations, references):
        """The mean cross-entropy per word of `references (B, R, T)` (`caption_out` rows,
        all-`<pad>` rows ignored) read under teacher forcing from `annotations (B, L, D)`,
        with the gradient; dropout off, hard attention at its most likely locations."""
        steps = references.shape[-1]
        target = ops.reshape(ops.cast(references, "int32"), (-1, steps))  # (B·R, T)
        caption_in = ops.concatenate(
            [ops.full((ops.shape(target)[0], 1), START_ID, "int32"), target[:, :-1]], axis=1)
        tiled = ops.repeat(annotations, ops.shape(references)[1], axis=0)  # (B·R, L, D)
        logits = self.decoder(tiled, caption_in, training=False)["logits"]
        mask = ops.cast(ops.not_equal(target, PAD_ID), "float32")
        token_xent = keras.losses.sparse_categorical_crossentropy(
            target, ops.cast(logits, "float32"), from_logits=True) * mask
        return ops.sum(token_xent) / ops.maximum(ops.sum(mask), 1.0)

    def _sample(self, annotations, samples: int, seed, hard: bool):
        """`K` sampled captions per image, image-major: `words (N, T)` int32 (`<pad>` after
        `<end>`) and, for hard attention, the location of each step `(N, T)` (else None)."""
        from common.decoding import Sampling

        if seed is None:
            seed = tf.random.uniform([], 0, 2**31 - 1, dtype=tf.int32)
        state = tuple(ops.repeat(x, samples, axis=0) for x in self.initial_decoding_state(
            features=annotations))
        step = self.make_step()
        if hard:
            decoder = self.decoder

            def step(tokens, state, index):
                h, c, annotations, projected = state

                def draw(weights):  # the step's location, from α
                    return tf.random.stateless_categorical(
                        tf.math.log(tf.maximum(weights, 1e-30)), 1, tf.stack([seed, index]),
                        dtype=tf.int32)[:, 0]

                logits, h, c, _, location, _ = _hard_step(decoder, tokens, h, c, annotations,
                                                          projected, draw)
                # The one-hot location as the "attention": `Decoded.attention` records it.
                return (logits, (h, c, annotations, projected),
                        tf.one_hot(location, tf.shape(annotations)[1]))

        decoded = Sampling(seed=seed)(step, state, ops.shape(state[0])[0], START_ID, END_ID,
                                      self.decoder_config.max_length, PAD_ID)
        words = decoded.tokens[:, 0]
        locations = tf.argmax(decoded.attention[:, 0], axis=-1, output_type=tf.int32) if hard \
            else None
        return tf.stop_gradient(words), locations

    def _greedy(self, annotations):
        """`(B, T)` each image's greedy caption (hard attention: at the likeliest locations)."""
        from common.decoding import GreedySearch

        state = self.initial_decoding_state(features=annotations)
        decoded = GreedySearch()(self.make_step(), state, ops.shape(annotations)[0], START_ID,
                                 END_ID, self.decoder_config.max_length, PAD_ID)
        return tf.stop_gradient(decoded.tokens[:, 0])

    def _rewards(self, words, greedy, images, samples: int):
        """The samples' rewards `(N,)` and the greedy captions' `(B,)` (empty without), by one
        call of the reward in NumPy."""
        reward = self.reward
        count = tf.shape(words)[0]

        def score(words, greedy, images):
            owners = np.concatenate([np.repeat(images, samples), images[: len(greedy)]])
            rows = np.concatenate([words, greedy]) if len(greedy) else words
            return np.asarray(reward(rows, owners), np.float32)

        scores = tf.numpy_function(score, [words, greedy, images], tf.float32, stateful=False)
        scores = tf.ensure_shape(scores, [None])
        return scores[:count], scores[count:]

    def _forced(self, annotations, caption_in, locations, hard: bool):
        """The teacher-forced pass over the samples (dropout off): `logits (N, T, V)`,
        `alpha (N, T, L)` and, for hard attention, the log-probability of each sampled
        location `(N, T)` (else None)."""
        if not hard:
            outputs = self.decoder(annotations, caption_in, training=False)
            return outputs["logits"], outputs["alpha"], None
        decoder = self.decoder
        h, c = decoder.initial_state(annotations)
        projected = decoder.project_keys(annotations)
        logits, alphas, log_probs = [], [], []
        for t in range(caption_in.shape[1]):
            step_logits, h, c, alpha, _, log_prob = _hard_step(
                decoder, caption_in[:, t], h, c, annotations, projected, locations[:, t])
            logits.append(step_logits)
            alphas.append(alpha)
            log_probs.append(log_prob)
        return ops.stack(logits, 1), ops.stack(alphas, 1), ops.stack(log_probs, 1)


def build_self_critical(config: CaptionerRunConfig, vocab_size: int,
                        reward: Any) -> SelfCriticalCaptioner:
    """The `SelfCriticalCaptioner` of a run config (variables created), as
    `captioner.train.build_model` builds its `ShowAttendTell`."""
    model = SelfCriticalCaptioner(vocab_size, config.encoder, config.decoder, config.scst,
                                  name="show_attend_tell")
    model.reward = reward
    if config.data.cache_features:
        model.encoder.trainable = False
    return model


def batch_seeds(seed: int, epoch: int, batches: tf.Tensor) -> tf.Tensor:
    """The sampling seed of each batch number `batches` of `epoch` in a run of `seed`: the same
    for the same batch however often the run is resumed."""
    mixed = (tf.cast(seed, tf.int64) * 1_000_003 + epoch) * 1_000_033 + tf.cast(batches, tf.int64)
    return tf.cast(tf.math.floormod(mixed, 2**31 - 1), tf.int32)


def make_scst_dataset(split: Any, batch_size: int, seed: int, epoch: int,
                      image_size: Any = None, features: np.ndarray | None = None,
                      missing: Sequence[int] = (), repeat: bool = False,
                      references: np.ndarray | None = None) -> tf.data.Dataset:
    """Batches of the training split's images for SCST, shuffled by `seed + epoch`.

    Args:
        split: the training `CaptionSplit`.
        batch_size: images per batch (each gives `K` samples); a last, smaller batch is
            dropped.
        seed, epoch: the run's seed and the epoch: the order and the samples' seeds.
        image_size: the encoder's input size (images).
        features: the cached annotations `(len(split), L, D)` (`captioner.features`), read
            instead of the images; `missing`: the indices whose image could not be read.
        repeat: repeat forever (`steps_per_epoch` set).
        references: `(len(split), R, T)` the images' reference captions (`reference_ids`),
            for the cross-entropy mixed in (`scst.xe_weight`); None: not in the batches.

    Returns:
        A `tf.data.Dataset` of dicts: `image (B, H, W, 3)` float32 in [0, 255] or
        `features (B, L, D)`, `index (B,)` int32 (the image's index in `split`), and
        `seed (B,)` int32, the batch's sampling seed (`batch_seeds`) repeated, and with
        `references` their rows, `references (B, R, T)` int32.
    """
    from captioner.datasets.pipeline import make_image_dataset

    order = dict(shuffle=True, seed=seed + epoch, repeat=repeat, drop_remainder=True)
    if features is None:
        dataset = make_image_dataset(split, image_size, batch_size, **order)
    else:
        keep = np.setdiff1d(np.arange(len(split), dtype=np.int32),
                            np.asarray(missing, np.int32))
        table = tf.constant(np.asarray(features, np.float32))
        dataset = tf.data.Dataset.from_tensor_slices(keep).shuffle(
            len(keep), seed=seed + epoch, reshuffle_each_iteration=True)
        if repeat:
            dataset = dataset.repeat()
        dataset = dataset.batch(batch_size, drop_remainder=True).map(
            lambda index: {"features": tf.gather(table, index), "index": index})

    table = None if references is None else tf.constant(np.asarray(references, np.int32))

    def with_seed(number, batch):
        size = tf.shape(batch["index"])[0]
        batch = {**batch, "seed": tf.fill([size], batch_seeds(seed, epoch, number))}
        if table is not None:
            batch["references"] = tf.gather(table, batch["index"])
        return batch

    return dataset.enumerate().map(with_seed).prefetch(tf.data.AUTOTUNE)
