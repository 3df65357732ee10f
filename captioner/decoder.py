"""The attentive LSTM decoder of Show, Attend and Tell, with soft or hard attention.

Paper: Xu et al. 2015, "Show, Attend and Tell: Neural Image Caption Generation with Visual
Attention", https://arxiv.org/abs/1502.03044, sections 3.1.2 and 4.

Shapes: `B` batch, `T` caption steps, `L` image regions, `D` annotation features, `U` LSTM
units, `E` embedding size, `V` vocabulary.
"""

from __future__ import annotations

import keras
from keras import layers, ops

from captioner.config import ATTENTION_QUERIES
from common.layers.attention import Attention
from common.layers.hard_attention import HardAttention

# Scores comparing the query with the keys directly need the query in the keys' space.
_SAME_SPACE_SCORES = ("dot", "scaled_dot", "cosine")


def _offsets(widths: list[int]) -> list[int]:
    """The split points of consecutive widths: `[4, 2, 1] -> [4, 6]`."""
    points, total = [], 0
    for width in widths[:-1]:
        total += width
        points.append(total)
    return points


class _WeightGradientOnce:
    """`x_t @ W` for every step of a recurrence, with `W`'s gradient taken once, as
    `Σ_t x_tᵀ g_t` = one product over all `T·B` rows, instead of a `(B)`-row product per step
    and a sum of T kernel-sized gradients (on the CPU those dominated the backward pass).

    The per-step products use `stop_gradient(W)` (the inputs still get `g_t Wᵀ`) plus a slice
    of a zero tensor whose custom gradient receives every `g_t` at once and gives `W` its
    gradient from the inputs recorded during the forward pass. The TensorFlow backend only
    (its custom gradient runs after the forward pass, in the same graph); other backends get
    the plain products.
    """

    def __init__(self, kernel, steps: int, batch, enabled: bool):
        self.kernel = kernel
        self.enabled = enabled
        self.inputs = []
        if not enabled:
            return
        self.frozen = ops.stop_gradient(kernel)
        recorded = self.inputs

        @ops.custom_gradient
        def zeros(kernel):
            def grad(*args, upstream=None):
                upstream = args[0] if upstream is None else upstream  # (T, B, N)
                inputs = ops.stack(recorded, axis=0)  # (T, B, K)
                rows = ops.reshape(inputs, (-1, inputs.shape[-1]))
                return ops.matmul(ops.transpose(rows),
                                  ops.reshape(upstream, (-1, upstream.shape[-1])))

            return ops.zeros((steps, batch, kernel.shape[-1]), kernel.dtype), grad

        self.zeros = ops.unstack(zeros(kernel), axis=0)

    def __call__(self, x, t: int):
        if not self.enabled:
            return ops.matmul(x, self.kernel)
        self.inputs.append(x)
        return ops.matmul(x, self.frozen) + self.zeros[t]


@keras.saving.register_keras_serializable(package="captioner")
class ShowAttendTellDecoder(keras.layers.Layer):
    """An LSTM that attends over image annotations before emitting each word.

    Paper: Xu et al. 2015, section 3.1.2. The initial memory and state come from an MLP of the
    mean annotation, `h₀ = tanh(W_h ā)`, `c₀ = tanh(W_c ā)`. At step t the attention (any score
    of the common family) over the annotations with query `h_{t-1}` gives weights `αₜ (B, L)`
    and a context `zₜ`, gated by `β = σ(W_β h_{t-1})` (section 4.2.1); the LSTM reads
    `[E y_{t-1}; β zₜ]` and the deep output layer gives
    `p(yₜ) ∝ exp(L_o(E y_{t-1} + L_h hₜ + L_z β zₜ))` (equation 7), with dropout on `hₜ`.

    With `attention="hard"` the context is the annotation at a location sampled from `αₜ`
    (section 4.1); with probability `expected_context_prob` per image (training only), the
    expected context `Σᵢ αₜᵢ aᵢ` is used instead. At inference the hard decoder takes the most
    likely location unless asked to sample.

    Args:
        vocab_size: `V`.
        embedding_dim: `E`.
        units: `U`.
        attention_units: hidden size of the additive score.
        attention: `"soft"` or `"hard"`.
        score: an attention score registry name (`common.layers.SCORES`).
        dropout: dropout rate on `hₜ` before the deep output layer.
        num_regions: `L`, needed only by the `location` score.
        expected_context_prob: hard attention's probability of the expected context per image.
        query: `"hidden"`, the paper's query h_{t-1}, or `"hidden+word"`, the concatenation
            `[h_{t-1}; E y_{t-1}]`: the attention also sees the word the step reads, so once
            "red" is said it can look for what is red (everything else is unchanged).

    Call arguments:
        annotations: `(B, L, D)`.
        caption_in: `(B, T)` int32, `<start> w₁ … wₙ` padded with 0 (teacher forcing).
        training: dropout and hard-attention sampling.
        expected_context_prob: overrides the layer's probability of the expected context
            (a float or scalar tensor; hard attention in training only).

    Returns:
        A dict: `logits (B, T, V)`, `alpha (B, T, L)`, and for hard attention `log_prob (B, T)`
        (log-probability of each sampled location), `entropy (B, T)` and `sampled (B,)` float
        (1 where the sample, not the expected context, was used).

    Example:
    >>> decoder = ShowAttendTellDecoder(vocab_size=20, embedding_dim=8, units=16)
    >>> out = decoder(np.zeros((2, 9, 4), "float32"), np.ones((2, 5), "int32"))
    >>> out["logits"].shape, out["alpha"].shape
    (TensorShape([2, 5, 20]), TensorShape([2, 5, 9]))
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int = 256,
        units: int = 512,
        attention_units: int = 256,
        attention: str = "soft",
        score: str = "additive",
        dropout: float = 0.3,
        num_regions: int | None = None,
        expected_context_prob: float = 0.5,
        query: str = "hidden",
        coverage: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = int(vocab_size)
        self.embedding_dim = int(embedding_dim)
        self.units = int(units)
        self.attention_units = int(attention_units)
        self.attention_kind = attention
        self.score = score
        self.dropout = float(dropout)
        self.num_regions = num_regions
        self.expected_context_prob = float(expected_context_prob)
        if query not in ATTENTION_QUERIES:
            raise ValueError(f"Unknown attention query {query!r}; expected one of "
                             f"{ATTENTION_QUERIES}")
        self.query = query
        self.coverage = bool(coverage)
        if self.coverage and (attention != "soft" or score != "additive"):
            raise ValueError("coverage is a term of the additive score of soft attention")

        score_kwargs = {}
        if score == "additive":
            score_kwargs["units"] = self.attention_units
        elif score == "location":
            score_kwargs["max_positions"] = num_regions
        attention_cls = HardAttention if attention == "hard" else Attention
        # Sub-layers compute in this layer's dtype policy (mixed precision included).
        policy = {"dtype": self.dtype_policy}
        self.attention = attention_cls(score=score, name="attention", **score_kwargs, **policy)
        self.embedding = layers.Embedding(self.vocab_size, self.embedding_dim, name="embedding",
                                          **policy)
        self.init_h = layers.Dense(self.units, activation="tanh", name="init_h", **policy)
        self.init_c = layers.Dense(self.units, activation="tanh", name="init_c", **policy)
        self.gate = layers.Dense(1, activation="sigmoid", name="gate", **policy)
        self.query_projection = None
        self.cell = layers.LSTMCell(self.units, name="lstm", **policy)
        self.output_dropout = layers.Dropout(self.dropout, name="output_dropout", **policy)
        self.hidden_to_output = layers.Dense(self.embedding_dim, name="L_h", **policy)
        self.context_to_output = layers.Dense(self.embedding_dim, use_bias=False, name="L_z",
                                              **policy)
        self.logits_layer = layers.Dense(self.vocab_size, name="L_o", **policy)
        self._sampler = keras.random.SeedGenerator(None, name="expected_context_sampler")
        # w_c: the coverage of each region into the additive score's hidden layer.
        self.coverage_dense = layers.Dense(self.attention_units, use_bias=False,
                                           name="coverage", **policy) if self.coverage else None

    def build(self, annotations_shape, caption_in_shape=None):
        feature_dim = annotations_shape[-1]
        query_dim = self.units + (self.embedding_dim if self.query == "hidden+word" else 0)
        if self.score in _SAME_SPACE_SCORES:
            self.query_projection = layers.Dense(feature_dim, use_bias=False, name="query_proj",
                                                 dtype=self.dtype_policy)
            self.query_projection.build((None, query_dim))
            query_dim = feature_dim  # what the score then sees
        self.embedding.build((None,))
        self.init_h.build((None, feature_dim))
        self.init_c.build((None, feature_dim))
        self.gate.build((None, self.units))
        self.cell.build((None, self.embedding_dim + feature_dim))
        self.hidden_to_output.build((None, self.units))
        self.context_to_output.build((None, feature_dim))
        self.logits_layer.build((None, self.embedding_dim))
        self.attention.build((None, 1, query_dim), tuple(annotations_shape))
        if self.coverage_dense is not None:
            self.coverage_dense.build((None, 1))
        self.built = True

    # -- pieces shared by training and decoding ---------------------------------------------

    def initial_state(self, annotations):
        """`(h₀, c₀)`, each `(B, U)`, from the mean annotation `(B, D)`."""
        mean = ops.mean(annotations, axis=1)
        return self.init_h(mean), self.init_c(mean)

    def project_keys(self, annotations):
        """The attention keys, computed once per image."""
        return self.attention.project_keys(annotations)

    def covered_keys(self, projected, coverage):
        """The projected keys `(B, L, A)` plus `w_c` times each region's coverage `(B, L)`
        (the keys as they are without coverage)."""
        if coverage is None:
            return projected
        return projected + self.coverage_dense(ops.cast(coverage[..., None], projected.dtype))

    def _attend(self, h, embedded, annotations, projected, training=False, sample=None):
        query = h if self.query == "hidden" else ops.concatenate([h, embedded], axis=-1)
        if self.query_projection is not None:
            query = self.query_projection(query)
        query = query[:, None, :]
        if self.attention_kind == "hard":
            context, _, log_prob, alpha = self.attention.attend(
                query, projected, annotations, training=training, sample=sample
            )
            return context[:, 0], alpha[:, 0], log_prob[:, 0]
        context, alpha = self.attention.attend(query, projected, annotations)
        return context[:, 0], alpha[:, 0], None

    def recurrence(self, embedded, h, c, annotations, projected, training=False, sample=None,
                   use_expected=None, coverage=None):
        """One LSTM step: returns `h, c (B, U)`, gated context `(B, D)`, `alpha (B, L)`, log-p.
        `coverage (B, L)`: the attention each region has had before this step (with coverage)."""
        context, alpha, log_prob = self._attend(h, embedded, annotations,
                                                self.covered_keys(projected, coverage), training,
                                                sample)
        if use_expected is not None:
            expected = ops.einsum("bl,bld->bd", alpha, annotations)
            context = ops.where(use_expected[:, None], expected, context)
        context = self.gate(h) * context
        _, (h, c) = self.cell(ops.concatenate([embedded, context], axis=-1), [h, c])
        return h, c, context, alpha, log_prob

    def output_logits(self, embedded, h, context, training=False):
        """The deep output layer: `L_o(E y_{t-1} + L_h hₜ + L_z zₜ)`, `(..., V)`."""
        h = self.output_dropout(h, training=training)
        return self.logits_layer(
            embedded + self.hidden_to_output(h) + self.context_to_output(context)
        )

    def step(self, tokens, h, c, annotations, projected, sample: bool = False, coverage=None):
        """One decoding step from the previous tokens `(N,)`: `logits (N, V), h, c, alpha (N, L)`
        (`coverage (N, L)`: the attention so far, with coverage; the caller adds `alpha`)."""
        embedded = self.embedding(tokens)
        h, c, context, alpha, _ = self.recurrence(
            embedded, h, c, annotations, projected, training=False, sample=sample,
            coverage=coverage)
        return self.output_logits(embedded, h, context), h, c, alpha

    # -- teacher forcing --------------------------------------------------------------------

    def call(self, annotations, caption_in, training=None, expected_context_prob=None):
        steps = caption_in.shape[1]
        if steps is None:
            raise ValueError("caption_in needs a static length (pad_to_max_length=True)")
        hard = self.attention_kind == "hard"
        embedded = self.embedding(caption_in)
        projected = self.project_keys(annotations)
        h, c = self.initial_state(annotations)
        use_expected = None
        if hard and training:
            batch = ops.shape(annotations)[0]
            draw = keras.random.uniform((batch,), seed=self._sampler)
            if expected_context_prob is None:
                expected_context_prob = self.expected_context_prob
            use_expected = draw < expected_context_prob
        hs, contexts, alphas, log_probs = self._teacher_forced(
            embedded, annotations, projected, h, c, training, use_expected)
        hs = ops.stack(hs, axis=1)
        alpha = ops.stack(alphas, axis=1)
        logits = self.output_logits(embedded, hs, ops.stack(contexts, axis=1), training)
        outputs = {"logits": logits, "alpha": alpha}
        if hard:
            outputs["log_prob"] = ops.stack(log_probs, axis=1)
            outputs["entropy"] = -ops.sum(alpha * ops.log(alpha + 1e-12), axis=-1)
            sampled = ops.ones_like(alpha[:, 0, 0]) if use_expected is None else (
                1.0 - ops.cast(use_expected, alpha.dtype))
            outputs["sampled"] = sampled
        return outputs

    def _teacher_forced(self, embedded, annotations, projected, h, c, training, use_expected):
        """The recurrence over every step of `embedded (B, T, E)`, computing what `recurrence`
        computes step by step, arranged for speed:

        - the word's share of the LSTM input, `E y_{t-1} W_x[:E] + b`, and (query
          `"hidden+word"`) of the query projection, for all T in one product each;
        - the products of `h_{t-1}` (LSTM recurrent kernel, the score's or the decoder's
          query projection, the β gate) in one product per step, with the kernels
          concatenated once.

        Variables are those of the layers (names and shapes unchanged); only the order of
        the floating-point sums differs. Returns lists over T of `h (B, U)`, gated context
        `(B, D)`, `alpha (B, L)` and log-probability (None for soft attention).
        """
        dtype = self.compute_dtype
        cast = lambda x: ops.cast(x, dtype)  # noqa: E731  (variables under mixed precision)
        units, embedding_dim = self.units, self.embedding_dim
        steps = embedded.shape[1]
        hard = self.attention_kind == "hard"
        cell = self.cell
        kernel = cast(cell.kernel)  # (E + D, 4U): rows for [E y; β z]
        word_gates = ops.matmul(embedded, kernel[:embedding_dim])  # (B, T, 4U)
        if cell.use_bias:
            word_gates = word_gates + cast(cell.bias)
        context_kernel = kernel[embedding_dim:]
        # The query's linear map: the decoder's projection (same-space scores), or the score's
        # own `W_q` (additive), or none (the score gets the raw query).
        if self.query_projection is not None:
            query_kernel, projected_query = cast(self.query_projection.kernel), False
        else:
            query_kernel = self.attention.scorer.query_kernel
            projected_query = query_kernel is not None  # then the decoder applies W_q
            query_kernel = None if query_kernel is None else cast(query_kernel)
        hidden_kernels = [cast(cell.recurrent_kernel)]
        query_width = 0
        word_query = None
        if query_kernel is not None:
            hidden_kernels.append(query_kernel[:units])
            query_width = query_kernel.shape[-1]
            if self.query == "hidden+word":
                word_query = ops.matmul(embedded, query_kernel[units:])  # (B, T, Q)
        hidden_kernels.append(cast(self.gate.kernel))
        hidden_kernel = ops.concatenate(hidden_kernels, axis=-1)  # (U, 4U + Q + 1)
        gate_bias = cast(self.gate.bias)
        activation, recurrent_activation = cell.activation, cell.recurrent_activation
        # Per-step slices by unstack/split: their gradients are one stack/concat, where
        # strided slices would each give a zero-padded full-size gradient to add up.
        words = ops.unstack(embedded, axis=1) if query_kernel is None else None
        word_gates = ops.unstack(word_gates, axis=1)
        word_query = None if word_query is None else ops.unstack(word_query, axis=1)
        widths = [4 * units] + ([query_width] if query_kernel is not None else []) + [1]
        once = keras.backend.backend() == "tensorflow"
        batch = ops.shape(embedded)[0]
        hidden_product = _WeightGradientOnce(hidden_kernel, steps, batch, once)
        context_product = _WeightGradientOnce(context_kernel, steps, batch, once)
        hs, contexts, alphas, log_probs = [], [], [], []
        coverage = ops.zeros_like(projected[:, :, 0]) if self.coverage else None
        keys = projected
        for t in range(steps):
            fused = ops.split(hidden_product(h, t), _offsets(widths), axis=-1)
            recurrent, gate_logit = fused[0], fused[-1]
            if query_kernel is not None:
                query = fused[1] if word_query is None else fused[1] + word_query[t]
            else:
                query = h if self.query == "hidden" else ops.concatenate([h, words[t]], axis=-1)
            gate = ops.sigmoid(gate_logit + gate_bias)
            # A (B, Q) query: one step, outputs without the T axis.
            if hard:
                context, _, log_prob, alpha = self.attention.attend(
                    query, projected, annotations, training=training, sample=bool(training),
                    query_projected=projected_query)
            else:
                if coverage is not None and t:
                    keys = self.covered_keys(projected, coverage)
                context, alpha = self.attention.attend(query, keys, annotations,
                                                       query_projected=projected_query)
                log_prob = None
                if coverage is not None:
                    coverage = coverage + alpha
            if use_expected is not None:
                expected = ops.einsum("bl,bld->bd", alpha, annotations)
                context = ops.where(use_expected[:, None], expected, context)
            context = gate * context
            z = word_gates[t] + recurrent + context_product(context, t)
            z_i, z_f, z_c, z_o = ops.split(z, 4, axis=-1)
            c = recurrent_activation(z_f) * c + recurrent_activation(z_i) * activation(z_c)
            h = recurrent_activation(z_o) * activation(c)
            hs.append(h)
            contexts.append(context)
            alphas.append(alpha)
            log_probs.append(log_prob)
        return hs, contexts, alphas, log_probs

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            embedding_dim=self.embedding_dim,
            units=self.units,
            attention_units=self.attention_units,
            attention=self.attention_kind,
            score=self.score,
            dropout=self.dropout,
            num_regions=self.num_regions,
            expected_context_prob=self.expected_context_prob,
            query=self.query,
            coverage=self.coverage,
        )
        return config
