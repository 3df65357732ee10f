"""The Show, Attend and Tell captioner: encoder, attentive decoder, loss and caption search.

Paper: Xu et al. 2015, "Show, Attend and Tell", https://arxiv.org/abs/1502.03044.

Shapes: `B` batch, `T` caption steps, `L` image regions, `D` features, `V` vocabulary,
`K` beams.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from captioner.config import BEAM_SIZE, REWARDS, DecoderConfig, EncoderConfig
from captioner.decoder import ShowAttendTellDecoder
from captioner.encoders import build_encoder
from common.config import from_dict, to_dict
from common.decoding.defaults import LENGTH_PENALTY

DECODING_METHODS = ("greedy", "beam", "sample")
# The `DecoderConfig` fields that are `ShowAttendTellDecoder` arguments of the same name.
DECODER_LAYER_FIELDS = ("embedding_dim", "units", "attention_units", "attention", "score",
                        "dropout", "expected_context_prob", "query", "coverage")


def doubly_stochastic_penalty(alpha, mask, tau=None):
    """Per-caption `Σᵢ (τ − Σₜ αₜᵢ)²` over the real (unmasked) steps, `(B,)`; 0 for a row
    with no real step (the padding rows that fill a last batch).

    Paper: Xu et al. 2015, equation 14 (section 4.2.1).

    Args:
        alpha: `(B, T, L)` attention weights.
        mask: `(B, T)` 1 for real steps, 0 for padding.
        tau: τ, a float, or `None` for `Tᵦ / L` (each caption's length over the regions).
    """
    mask = ops.cast(mask, alpha.dtype)
    coverage = ops.sum(alpha * mask[:, :, None], axis=1)  # (B, L)
    if tau is None:
        regions = ops.cast(ops.shape(alpha)[-1], alpha.dtype)
        tau = (ops.sum(mask, axis=1) / regions)[:, None]
    real = ops.cast(ops.any(mask > 0, axis=1), alpha.dtype)
    return ops.sum(ops.square(tau - coverage), axis=-1) * real


def reinforce_surrogate(token_xent, mask, location_log_prob, sampled, baseline,
                        reward: str = "caption"):
    """Hard attention's REINFORCE surrogate (summed over the batch) and the batch's reward for
    the moving-average baseline.

    Paper: Xu et al. 2015, section 4.1, equation 12. The gradient of the surrogate with respect
    to the attention is the estimator: `-Σₜ Aₜ ∇ log p(sₜ)` per caption, with

    - `reward="caption"` (the paper): `Aₜ = log p(y | s) − b` for every step, `b` a moving
      average of the caption log-likelihood;
    - `reward="to-go"`: `Aₜ = Σ_{t' ≥ t} log p(y_{t'}) − b · nₜ`, the log-likelihood of the
      words from step t on (a location cannot change the words before it) against a
      per-word baseline `b` times the `nₜ` words left. Still unbiased (the baseline is a
      constant), with much less variance: the words already said and the caption's length
      no longer enter the advantage.

    Args:
        token_xent: `(B, T)` masked cross-entropy of each target word.
        mask: `(B, T)` 1 for real steps.
        location_log_prob: `(B, T)` log-probability of each sampled location.
        sampled: `(B,)` 1 where the sampled (not the expected) context was used.
        baseline: the scalar `b`.
        reward: `"caption"` or `"to-go"`.

    Returns:
        `(surrogate, reward)`: the scalar whose gradient is the estimator, and the value the
        baseline moves towards (mean caption log-likelihood, or mean per-word log-likelihood).
    """
    word_log_likelihood = ops.stop_gradient(-token_xent) * mask  # (B, T)
    if reward == "caption":
        log_likelihood = ops.sum(word_log_likelihood, axis=1)  # (B,)
        advantage = (log_likelihood - baseline)[:, None] * mask
        batch_reward = ops.mean(log_likelihood)
    elif reward == "to-go":
        to_go = ops.flip(ops.cumsum(ops.flip(word_log_likelihood, 1), axis=1), 1)
        words_left = ops.flip(ops.cumsum(ops.flip(mask, 1), axis=1), 1)
        advantage = (to_go - baseline * words_left) * mask
        batch_reward = ops.sum(word_log_likelihood) / ops.maximum(ops.sum(mask), 1.0)
    else:
        raise ValueError(f"Unknown reward {reward!r}; expected one of {REWARDS}")
    surrogate = -ops.sum(sampled[:, None] * advantage * location_log_prob)
    return surrogate, batch_reward


@keras.saving.register_keras_serializable(package="captioner")
class MovingAverage(keras.layers.Layer):
    """A non-trainable scalar `b ← decay · b + (1 − decay) · x`, saved with the model.

    The REINFORCE baseline of hard attention (Xu et al. 2015, section 4.1). Mean-aggregated,
    so each replica may update it under a `tf.distribute` strategy.

    Args:
        decay: the weight of the old value.

    Example:
    >>> average = MovingAverage(0.9)
    >>> average.update(-10.0); float(average.value)
    -10.0
    >>> average.update(0.0); float(average.value)
    -9.0
    """

    def __init__(self, decay: float = 0.9, **kwargs):
        super().__init__(**kwargs)
        self.decay = float(decay)
        self.value = self.add_weight(shape=(), initializer="zeros", trainable=False,
                                     aggregation="mean", name="value")
        self.updates = self.add_weight(shape=(), initializer="zeros", trainable=False,
                                       aggregation="mean", name="updates")
        self.built = True

    def update(self, x) -> None:
        """Moves towards `x`; the first update sets the value to `x` (no bias towards 0)."""
        decay = ops.where(self.updates > 0, self.decay, 0.0)
        self.value.assign(decay * self.value + (1.0 - decay) * ops.cast(x, "float32"))
        self.updates.assign(self.updates + 1.0)

    def get_config(self):
        config = super().get_config()
        config.update(decay=self.decay)
        return config


@keras.saving.register_keras_serializable(package="captioner")
class ShowAttendTell(keras.Model):
    """An image captioner with soft or hard visual attention.

    Paper: Xu et al. 2015. The encoder (`captioner.encoders.ImageEncoder`) turns raw images
    into annotations; `ShowAttendTellDecoder` generates the caption. The loss (`loss_terms`,
    for `common.training.Trainer`) is the masked token cross-entropy plus λ times the doubly
    stochastic penalty; for hard attention it adds the REINFORCE surrogate
    `−(log p(y|s) − b) Σₜ log p(sₜ)` with a moving-average baseline `b` (a checkpointed,
    non-trainable variable) and the entropy bonus `−λₑ Σₜ H(αₜ)` (section 4.1).

    Args:
        vocab_size: `V`.
        encoder: an `EncoderConfig` (or its dict).
        decoder: a `DecoderConfig` (or its dict).

    Call arguments:
        inputs: a dict with `"image" (B, H, W, 3)` in [0, 255] (or `"features" (B, L, D)`, the
            encoder's cached output) and `"caption_in" (B, T)` int32.
        training: dropout, batch norm, hard-attention sampling.

    Returns:
        The decoder's dict: `logits (B, T, V)`, `alpha (B, T, L)`, ...

    Example:
    >>> model = ShowAttendTell(30, EncoderConfig("small-cnn", (32, 32), "none"),
    ...                        DecoderConfig(embedding_dim=8, units=16, attention_units=8))
    >>> decoded = model.caption(np.zeros((2, 32, 32, 3)), start_id=1, end_id=2)
    >>> decoded.tokens.shape[:2]
    TensorShape([2, 1])
    """

    def __init__(self, vocab_size: int, encoder: EncoderConfig | dict | None = None,
                 decoder: DecoderConfig | dict | None = None, **kwargs):
        super().__init__(**kwargs)
        if encoder is None or isinstance(encoder, dict):
            encoder = from_dict(EncoderConfig, encoder or {})
        if decoder is None or isinstance(decoder, dict):
            decoder = from_dict(DecoderConfig, decoder or {})
        self.vocab_size = int(vocab_size)
        self.encoder_config = encoder
        self.decoder_config = decoder
        self.encoder = build_encoder(encoder, name="encoder")
        self.decoder = ShowAttendTellDecoder(
            vocab_size=self.vocab_size, num_regions=self.encoder.num_regions, name="decoder",
            **{field: getattr(decoder, field) for field in DECODER_LAYER_FIELDS},
        )
        self.decoder.build((None, self.encoder.num_regions, self.encoder.feature_dim))
        self.reward_baseline = MovingAverage(decoder.baseline_decay, name="reward_baseline")
        self.built = True

    @property
    def baseline(self):
        """Hard attention's REINFORCE baseline `b`, a non-trainable scalar variable."""
        return self.reward_baseline.value

    @property
    def grid_shape(self) -> tuple[int, int]:
        return self.encoder.grid_shape

    def annotations(self, inputs: dict[str, Any], training=False):
        """`(B, L, D)` from `inputs["features"]` when cached, else from `inputs["image"]`."""
        if "features" in inputs:
            return ops.cast(inputs["features"], "float32")
        return self.encoder(inputs["image"], training=training)

    def call(self, inputs, training=None):
        # The share of the expected context matters only to hard attention in training.
        return self.decoder(self.annotations(inputs, training), inputs["caption_in"],
                            training=training,
                            expected_context_prob=self.expected_context_prob())

    def expected_context_prob(self):
        """Hard attention's probability of the expected context at this training step.

        Falls linearly from 1 to `decoder.expected_context_prob` over the first
        `decoder.expected_context_warmup` steps (counted by the baseline's updates).
        """
        config = self.decoder_config
        if not config.expected_context_warmup:
            return config.expected_context_prob
        progress = ops.minimum(self.reward_baseline.updates / config.expected_context_warmup, 1.0)
        return 1.0 - progress * (1.0 - config.expected_context_prob)

    def loss_terms(self, batch: dict[str, Any], training: bool) -> dict[str, Any]:
        """Sums over this batch's captions for `common.training.Trainer`.

        Returns `loss_sum` (the objective: cross-entropy + penalty, plus for hard attention the
        REINFORCE and entropy surrogates, which add gradient but no value),
        `count` (real target tokens), and the sums `xent`, `penalty`, `accuracy` (correct
        tokens) and, for hard attention, `reinforce`, `entropy`, `baseline` (its value × count).
        """
        config = self.decoder_config
        outputs = self(batch, training=training)
        logits, alpha = outputs["logits"], outputs["alpha"]
        target = ops.cast(batch["caption_out"], "int32")
        mask = ops.cast(ops.not_equal(target, 0), "float32")
        token_xent = keras.losses.sparse_categorical_crossentropy(
            target, ops.cast(logits, "float32"), from_logits=True
        ) * mask
        xent = ops.sum(token_xent)
        count = ops.sum(mask)
        penalty = config.penalty_weight * ops.sum(
            doubly_stochastic_penalty(ops.cast(alpha, "float32"), mask, config.penalty_tau)
        )
        correct = ops.cast(ops.equal(ops.argmax(logits, axis=-1), target), "float32") * mask
        terms = {"xent": xent, "penalty": penalty, "accuracy": ops.sum(correct)}
        loss = xent + penalty
        if config.attention == "hard":
            reinforce, reward = reinforce_surrogate(
                token_xent, mask, outputs["log_prob"], outputs["sampled"],
                ops.convert_to_tensor(self.baseline), config.reward)
            entropy = ops.sum(outputs["entropy"] * mask)
            # Only the gradient of the surrogate matters; its value would hide the loss.
            surrogate = reinforce - config.entropy_weight * entropy
            loss = loss + surrogate - ops.stop_gradient(surrogate)
            terms.update(reinforce=reinforce, entropy=entropy,
                         baseline=ops.convert_to_tensor(self.baseline) * count)
            if training:
                self.reward_baseline.update(reward)
        terms.update(loss_sum=loss, count=count)
        return terms

    # -- decoding ---------------------------------------------------------------------------

    def initial_decoding_state(self, images=None, features=None):
        """The decoding state `(h, c, annotations, projected keys)`, each with leading `B`,
        and with coverage the attention each region has had so far `(B, L)`, zeros."""
        annotations = (
            ops.cast(features, "float32") if features is not None
            else self.encoder(images, training=False)
        )
        h, c = self.decoder.initial_state(annotations)
        state = (h, c, annotations, self.decoder.project_keys(annotations))
        if self.decoder.coverage:
            state += (ops.zeros_like(annotations[:, :, 0]),)
        return state

    def make_step(self, sample_locations: bool = False):
        """The `step(tokens, state, index) -> (logits, state, alpha)` of `common.decoding`."""

        def step(tokens, state, index):
            h, c, annotations, projected, *coverage = state
            coverage = coverage[0] if coverage else None
            logits, h, c, alpha = self.decoder.step(
                tokens, h, c, annotations, projected, sample=sample_locations,
                coverage=coverage)
            state = (h, c, annotations, projected)
            return logits, state if coverage is None else (*state, coverage + alpha), alpha

        return step

    def caption(self, images=None, *, features=None, start_id: int = 1, end_id: int = 2,
                method: str = "beam", beam_size: int = BEAM_SIZE, max_length: int | None = None,
                length_penalty: float = LENGTH_PENALTY, temperature: float = 1.0,
                seed: int | None = None, sample_locations: bool = False):
        """Decode captions with `common.decoding`; returns its `Decoded` (tokens `(B, K, T)`,
        attention `(B, K, T, L)`, ...). `method`: `greedy`, `beam` or `sample`."""
        from common.decoding import make_strategy

        strategy = make_strategy(method, beam_size=beam_size, length_penalty=length_penalty,
                                 temperature=temperature, seed=seed)
        state = self.initial_decoding_state(images, features)
        max_length = max_length or self.decoder_config.max_length
        return strategy(self.make_step(sample_locations), state, ops.shape(state[0])[0],
                        start_id, end_id, max_length)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            encoder=to_dict(self.encoder_config),
            decoder=to_dict(self.decoder_config),
        )
        return config
