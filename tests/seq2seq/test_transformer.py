"""TransformerTranslator: shapes, masking, cached incremental decoding == the full pass."""

import numpy as np
import pytest
import tensorflow as tf

from seq2seq.config import ModelConfig, TransformerConfig
from seq2seq.transformer import TransformerTranslator
from seq2seq.transformer_layers import InverseSqrtSchedule

SOURCE = np.array([[4, 5, 6, 2, 0, 0], [7, 8, 2, 0, 0, 0]], np.int32)
TARGET_IN = np.array([[1, 9, 10, 11, 12], [1, 12, 13, 14, 15]], np.int32)


def tiny_config(label_smoothing=0.0, **kwargs) -> ModelConfig:
    options = dict(num_layers=2, hidden_dim=8, num_heads=2, intermediate_dim=16, dropout=0.0,
                   max_length=16)
    options.update(kwargs)
    return ModelConfig(transformer=TransformerConfig(**options),
                       label_smoothing=label_smoothing)


def tiny(label_smoothing=0.0, **kwargs):
    return TransformerTranslator(tiny_config(label_smoothing, **kwargs), 20, 30)


@pytest.fixture(scope="module")
def built():
    """`built(**options)`: `tiny(**options)` called once on a batch, one model per config
    within this module, for the tests that call a model without changing it."""
    models = {}

    def get(**options):
        config = tiny_config(**options)
        if config not in models:
            models[config] = TransformerTranslator(config, 20, 30)
            models[config]({"source": SOURCE, "target_in": TARGET_IN})
        return models[config]

    return get


def test_shapes_and_cross_attention_per_head(built):
    model = built()
    logits, weights = model({"source": SOURCE, "target_in": TARGET_IN}, return_attention=True)
    assert tuple(logits.shape) == (2, 5, 30)
    assert len(weights) == 2
    assert tuple(weights[0].shape) == (2, 2, 5, 6)
    w = np.asarray(weights[-1])
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
    assert np.all(w[1, :, :, 3:] == 0)  # padded source positions get no weight


@pytest.mark.parametrize("positions,norm_first", [("sine", True), ("learned", False)])
def test_source_padding_changes_nothing(built, positions, norm_first):
    model = built(positions=positions, norm_first=norm_first)
    logits = model({"source": SOURCE, "target_in": TARGET_IN})
    padded = np.concatenate([SOURCE, np.zeros((2, 4), np.int32)], axis=1)
    np.testing.assert_allclose(
        logits, model({"source": padded, "target_in": TARGET_IN}), atol=1e-5
    )


def test_future_target_tokens_do_not_change_earlier_logits(built):
    model = built()
    logits = model({"source": SOURCE, "target_in": TARGET_IN})
    changed = TARGET_IN.copy()
    changed[:, 3:] = 7
    other = model({"source": SOURCE, "target_in": changed})
    np.testing.assert_allclose(logits[:, :3], other[:, :3], atol=1e-5)
    assert not np.allclose(logits[:, 3:], other[:, 3:])


def test_step_attention_is_the_head_average_by_default(built):
    model = built()
    _, weights = model({"source": SOURCE, "target_in": TARGET_IN}, return_attention=True)
    state = model.initial_state(SOURCE, max_length=8)
    _, _, alpha = model.make_step()(tf.constant(TARGET_IN[:, 0]), state, tf.constant(0))
    np.testing.assert_allclose(alpha, np.asarray(weights[-1])[:, :, 0].mean(1), atol=1e-6)


def test_tied_embeddings_share_the_output_projection(built):
    tied, untied = built(tie_embeddings=True), built(tie_embeddings=False)
    assert len(untied.trainable_weights) == len(tied.trainable_weights) + 1


def test_config_round_trip():
    model = tiny(positions="learned", norm_first=False, tie_embeddings=True,
                 label_smoothing=0.1)
    clone = TransformerTranslator.from_config(model.get_config())
    assert clone.get_config() == model.get_config()


def test_inverse_sqrt_schedule():
    schedule = InverseSqrtSchedule(1e-3, warmup_steps=100)
    values = [float(schedule(s)) for s in (0, 49, 99, 399, 9999)]
    expected = [1e-5, 5e-4, 1e-3, 5e-4, 1e-4]
    np.testing.assert_allclose(values, expected, rtol=1e-5)
    assert InverseSqrtSchedule.from_config(schedule.get_config()).warmup_steps == 100


def test_a_missing_attention_layer_or_head_is_a_user_error(built):
    from common.errors import UserError

    model = built()
    with pytest.raises(UserError, match="attention head 2"):
        model.make_step(attention_head=2)
    with pytest.raises(UserError, match="attention layer 5"):
        model.make_step(attention_layer=5)


@pytest.mark.parametrize("method,positions", [("greedy", "sine"), ("beam", "learned")])
def test_cached_decoding_under_xla_matches_the_graph(built, method, positions):
    """The whole cached decode (encoder, in-place cache writes, the loop) compiled with XLA
    (`scripts/benchmarks/benchmark_decoding.py`'s `cached_xla`) gives the tokens of the plain
    graph, and both give the full pass' argmax at every greedy step (the independent
    reference)."""
    from common.decoding import make_strategy

    model = built(positions=positions)
    strategy = make_strategy(method, beam_size=3, n_best=1, length_penalty=0.6)

    def decode(source):
        state = model.initial_state(source, max_length=8)
        return strategy(model.make_step(), state, tf.shape(source)[0], 1, 2, 8)

    graph = tf.function(decode, autograph=False)(SOURCE)
    compiled = tf.function(decode, autograph=False, jit_compile=True)(SOURCE)
    np.testing.assert_array_equal(compiled.tokens, graph.tokens)
    np.testing.assert_array_equal(compiled.lengths, graph.lengths)
    np.testing.assert_allclose(compiled.scores, graph.scores, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(compiled.attention, graph.attention, atol=1e-5)
    if method == "greedy":  # each token is the full pass' argmax after the tokens before it
        tokens = compiled.tokens.numpy()[:, 0]
        target_in = np.concatenate([np.ones((2, 1), np.int32), tokens[:, :-1]], axis=1)
        logits = model({"source": SOURCE, "target_in": target_in}).numpy()
        logits[..., [0, 1]] = -np.inf  # greedy never emits <pad> or <start>
        for row in range(2):
            n = int(compiled.lengths[row, 0])
            np.testing.assert_array_equal(tokens[row, :n], logits[row, :n].argmax(-1))



@pytest.mark.parametrize("method,positions,norm_first", [
    ("greedy", "sine", True), ("beam", "learned", False), ("beam", "sine", True)])
def test_a_growing_cache_decodes_as_the_fixed_buffer_and_the_full_pass(method, positions,
                                                                       norm_first):
    """The self-attention cache that grows by a position at each step (what the in-process
    translator and the export use on TensorFlow: a step attends over the positions decoded so
    far, not `T_max`) gives, in a graph, the tokens, scores and attention of the fixed buffer
    written in place; and its logits at every step are the full pass' (the independent
    reference), here on random weights where no near tie hides a wrong position."""
    from common.decoding import make_strategy

    model = _randomized(tiny(positions=positions, norm_first=norm_first), seed=3)
    strategy = make_strategy(method, beam_size=3, n_best=1, length_penalty=0.6)

    def decode(source, growing):
        state = model.initial_state(source, max_length=8, growing=growing)
        return strategy(model.make_step(), state, tf.shape(source)[0], 1, 2, 8)

    grown = tf.function(lambda s: decode(s, True), autograph=False)(SOURCE)
    fixed = tf.function(lambda s: decode(s, False), autograph=False)(SOURCE)
    np.testing.assert_array_equal(grown.tokens, fixed.tokens)
    np.testing.assert_array_equal(grown.lengths, fixed.lengths)
    np.testing.assert_allclose(grown.scores, fixed.scores, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grown.attention, fixed.attention, atol=1e-5)

    full = model({"source": SOURCE, "target_in": TARGET_IN}).numpy()
    state = model.initial_state(SOURCE, growing=True)
    assert tuple(state["grown_cache"][0][0].shape) == (2, 0, 2, 4)
    step = model.make_step()
    for index in range(TARGET_IN.shape[1]):
        logits, state, _ = step(TARGET_IN[:, index], state, index)
        assert tuple(state["grown_cache"][-1][1].shape) == (2, index + 1, 2, 4)
        np.testing.assert_allclose(logits.numpy(), full[:, index], rtol=1e-4, atol=1e-4)

def _randomized(model, seed=0):
    """`model` built, every weight drawn at random (biases and norm offsets are zeros and
    scales ones at initialization, which would hide a dropped bias or norm)."""
    model({"source": SOURCE, "target_in": TARGET_IN})
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.normal(0.0, 0.5, variable.shape).astype("float32"))
    return model


# A third row of padding only: its cross-attention weights are all zero on both paths.
PADDED_SOURCE = np.concatenate([SOURCE, np.zeros((1, 6), np.int32)], axis=0)
PADDED_TARGET_IN = np.array([[1, 9, 10, 11, 12], [1, 12, 13, 14, 15], [1, 3, 4, 5, 6]],
                            np.int32)


def copy_model(**options) -> TransformerTranslator:
    """A pointer-generator (`copy`) Transformer of `tiny`'s sizes."""
    sizes = dict(num_layers=2, hidden_dim=8, num_heads=2, intermediate_dim=16, dropout=0.0,
                 max_length=16, **options)
    return TransformerTranslator(ModelConfig(transformer=TransformerConfig(**sizes), copy=True),
                                 20, 30)


def stepped(model, source, target_in, source_copy=None, max_length=8):
    """`target_in (B, T)` fed to `fast_step` one column at a time (the weights of
    `step_weights`, the state of `initial_state`): -> `(logits (B, T, V), [(B, H, T, S)] * N)`
    as NumPy, the step's outputs at every position, in the layout of the full pass'."""
    weights = model.step_weights()
    options = {"source_copy": source_copy} if model.copy else {}
    state = model.initial_state(source, max_length=max_length, **options)
    logits, attention = [], []
    for t in range(target_in.shape[1]):
        out, state, weights_t = model.fast_step(target_in[:, t], state, t, weights)
        assert out.dtype == "float32"
        logits.append(np.asarray(out))
        attention.append([np.asarray(w, np.float32) for w in weights_t])
    return (np.stack(logits, 1),
            [np.stack([a[i] for a in attention], 2) for i in range(model.num_layers)])


def full_pass(model, source, target_in, source_copy=None):
    """The teacher-forced pass: `(logits (B, T, V), [(B, H, T, S)] * N)` as float32 NumPy."""
    inputs = {"source": source, "target_in": target_in}
    if source_copy is not None:
        inputs["source_copy"] = source_copy
    logits, weights = model(inputs, return_attention=True)
    return (np.asarray(tf.cast(logits, tf.float32)),
            [np.asarray(tf.cast(w, tf.float32)) for w in weights])


@pytest.mark.parametrize("options", [
    dict(positions="sine", norm_first=True),
    dict(positions="learned", norm_first=False, tie_embeddings=True),
    dict(positions="sine", norm_first=True, fused_projections=True),
    dict(positions="learned", norm_first=True, head_dim=6, num_heads=3),
    dict(positions="sine", norm_first=False, copy=True),
], ids=["sine-pre", "learned-post-tied", "fused", "head-dim", "copy"])
def test_cached_decoding_matches_full_pass(options):
    """At each step `t` of decoding a given target prefix, the cached step's logits (with
    `copy`, log-probabilities over the extended vocabulary) are the teacher-forced full pass'
    at position `t`, and its cross-attention weights of every layer and head are the full
    pass'; a source of padding only gets zero weights."""
    options = dict(options)
    model = copy_model() if options.pop("copy", False) else tiny(**options)
    model = _randomized(model)
    target_in, source_copy = PADDED_TARGET_IN.copy(), None
    if model.copy:
        target_in[0, 2] = 30 + 1  # an extended id: a copy of source position 1
        source_copy = np.where(PADDED_SOURCE > 0, PADDED_SOURCE + 1, 0).astype(np.int32)
        source_copy[0, 1] = 30 + 1
    logits, weights = full_pass(model, PADDED_SOURCE, target_in, source_copy)
    step_logits, step_weights = stepped(model, PADDED_SOURCE, target_in, source_copy)
    assert float(np.abs(logits).max()) > 1.0  # not a trivially small output
    np.testing.assert_allclose(step_logits, logits, rtol=1e-5, atol=1e-5)
    for got, want in zip(step_weights, weights, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)
    assert np.all(step_weights[-1][2] == 0)


def test_make_step_returns_the_chosen_layer_and_head(built):
    """`make_step(attention_layer, attention_head)`'s weights are that layer's head of the
    full pass (the average over heads by default: `test_step_attention_is_the_head_average_by_default`),
    with a head given as an int or as a tensor."""
    model = built(positions="learned")
    _, weights = full_pass(model, SOURCE, TARGET_IN)
    for head in (1, tf.constant(1)):
        state = model.initial_state(SOURCE, max_length=8)
        step = model.make_step(attention_layer=0, attention_head=head)
        for t in range(TARGET_IN.shape[1]):
            _, state, alpha = step(tf.constant(TARGET_IN[:, t]), state, tf.constant(t))
            np.testing.assert_allclose(alpha, weights[0][:, 1, t], atol=1e-6)


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_decoded_scores_are_the_full_pass_log_probabilities(method):
    """Whole decodes in one `tf.function` (greedy, beam search with 2 best): each
    hypothesis' score is the sum of the full pass' log-probabilities of its tokens, its
    attention the full pass' (head average of the last layer)."""
    from common.decoding import make_strategy

    model = _randomized(tiny(), seed=1)
    strategy = make_strategy(method, beam_size=3, n_best=2, length_penalty=0.6)

    @tf.function(autograph=False)
    def decode(source):
        state = model.initial_state(source, max_length=6)
        return strategy(model.make_step(), state, tf.shape(source)[0], 1, 2, 6)

    decoded = decode(PADDED_SOURCE)
    tokens, lengths, scores, attention = (np.asarray(t) for t in (
        decoded.tokens, decoded.lengths, decoded.scores, decoded.attention))
    for k in range(tokens.shape[1]):
        target_in = np.concatenate([np.ones((3, 1), np.int32), tokens[:, k, :-1]], axis=1)
        logits, weights = full_pass(model, PADDED_SOURCE, target_in)
        log_probs = np.asarray(tf.nn.log_softmax(logits))
        alpha = weights[-1].mean(1)
        for row in range(3):
            n = int(lengths[row, k])
            picked = log_probs[row, np.arange(n), tokens[row, k, :n]]
            assert scores[row, k] == pytest.approx(picked.sum(), abs=1e-4)
            np.testing.assert_allclose(attention[row, k, :n], alpha[row, :n],
                                       atol=1e-5)


def test_the_step_reads_the_weights_at_each_call_of_the_function():
    """`make_step` inside the decoding `tf.function` reads the variables there: a weight
    changed after tracing changes the next decode, to the full pass' logits."""
    model = _randomized(tiny(), seed=2)

    @tf.function(autograph=False)
    def first_logits(source):
        state = model.initial_state(source, max_length=4)
        return model.make_step()(tf.fill([tf.shape(source)[0]], 1), state, tf.constant(0))[0]

    before = first_logits(SOURCE).numpy()
    model.decoder_norm.beta.assign(model.decoder_norm.beta + 1.0)
    after = first_logits(SOURCE).numpy()
    assert not np.allclose(before, after)
    logits, _ = full_pass(model, SOURCE, np.ones((2, 1), np.int32))
    np.testing.assert_allclose(after, logits[:, 0], rtol=1e-5, atol=1e-5)


def test_the_step_reads_each_weight_once_per_decode():
    """No variable is read in the decoding loop: `step_weights` reads them all before it
    (the loop stays stateless, and the step costs no reads)."""
    from common.decoding import make_strategy

    model = tiny(positions="learned")
    model.build()

    @tf.function(autograph=False)
    def decode(source):
        state = model.initial_state(source, max_length=4)
        return make_strategy("greedy")(model.make_step(), state, tf.shape(source)[0], 1, 2,
                                       4).tokens

    graph = decode.get_concrete_function(tf.constant(SOURCE)).graph.as_graph_def()
    loops = [node for node in graph.node if "While" in node.op]
    assert [node.op for node in loops] == ["StatelessWhile"]
    body = {f.signature.name: f for f in graph.library.function}[
        loops[0].attr["body"].func.name]
    assert not [node for node in body.node_def if node.op == "ReadVariableOp"]


@pytest.mark.parametrize("policy,tolerance", [("mixed_bfloat16", 0.03), ("mixed_float16", 0.005)])
@pytest.mark.parametrize("options", [
    dict(positions="sine", norm_first=True),
    dict(positions="learned", norm_first=False, tie_embeddings=True),
])
def test_mixed_precision_step_matches_full_pass(policy, tolerance, options):
    """Under a mixed policy (float32 variables, half-precision products) the step computes as
    the layers do, its softmax and norms in float32: float32 logits, equal to the half-precision
    full pass' to its rounding, and the same attention."""
    import keras

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        model = _randomized(tiny(**options), seed=3)
        logits, weights = full_pass(model, PADDED_SOURCE, PADDED_TARGET_IN)
        step_logits, step_weights = stepped(model, PADDED_SOURCE, PADDED_TARGET_IN)
    finally:
        keras.config.set_dtype_policy(previous)
    assert model.compute_dtype == policy.split("_")[1]
    scale = float(np.abs(logits).max())
    assert scale > 1.0
    np.testing.assert_allclose(step_logits, logits, atol=tolerance * scale)
    for got, want in zip(step_weights, weights, strict=True):
        np.testing.assert_allclose(got, want, atol=tolerance)


def test_the_output_projection_runs_in_the_compute_dtype():
    """Under mixed_bfloat16 the tied output projection (whose embedding variable is not
    autocast) is a bfloat16 product, `bf16(x) @ bf16(E)^T`, giving bfloat16 logits."""
    import keras

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model = tiny()
        logits = model({"source": SOURCE, "target_in": TARGET_IN})
    finally:
        keras.config.set_dtype_policy(previous)
    assert logits.dtype == tf.bfloat16
    x = tf.random.stateless_normal((3, model.hidden_dim), seed=(1, 2))
    layer = model.target_embedding
    kernel = (tf.transpose(layer.embeddings) if layer.tie_weights
              else tf.convert_to_tensor(layer.reverse_embeddings))
    assert kernel.dtype == tf.float32
    want = tf.matmul(tf.cast(x, tf.bfloat16), tf.cast(kernel, tf.bfloat16))
    got = model.target_embedding(tf.cast(x, tf.bfloat16), reverse=True)
    assert got.dtype == tf.bfloat16
    # Before: `ops.matmul` promoted the bfloat16 input and float32 kernel to float32 logits.
    np.testing.assert_allclose(got.numpy().astype(np.float32), want.numpy().astype(np.float32),
                               rtol=2e-2, atol=2e-2)
    assert tiny().target_embedding.reverse_dtype == "float32"  # float32 policy: unchanged


def _attentions(model):
    return [getattr(layer, name) for layer in model.encoder_layers + model.decoder_layers
            for name in ("self_attention", "cross_attention") if hasattr(layer, name)]


@pytest.mark.parametrize("head_dim", [None, 6])
def test_fused_attention_projections_train_as_keras_attention(head_dim):
    """The attention's fused projections give the loss and every gradient of the same model
    through keras' own attention `call` (the default), to float rounding (dropout 0)."""
    model = tiny(head_dim=head_dim)
    batch = {"source": SOURCE, "target_in": TARGET_IN, "target_out": TARGET_IN[:, ::-1]}

    def loss_and_gradients():
        with tf.GradientTape() as tape:
            loss = model.loss_terms(batch, training=True)["loss_sum"]
        return float(loss), tape.gradient(loss, model.trainable_variables)

    model(batch)
    assert not any(layer.fused_projections for layer in _attentions(model))
    reference = loss_and_gradients()
    for layer in _attentions(model):
        layer.fused_projections = True
    fused = loss_and_gradients()
    assert fused[0] == pytest.approx(reference[0], rel=1e-6)
    for got, want in zip(fused[1], reference[1]):
        np.testing.assert_allclose(np.asarray(tf.convert_to_tensor(got)),
                                   np.asarray(tf.convert_to_tensor(want)),
                                   rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("attention_dropout, rate, own_layer",
                         [(None, 0.1, False), (0.0, 0.0, False), (0.3, 0.3, True)])
def test_attention_dropout_sets_the_attention_rate_and_keeps_the_variables(
        built, attention_dropout, rate, own_layer):
    """`attention_dropout` is the attention weights' rate (None: `dropout`); only a rate of
    its own (not 0, not `dropout`) adds a dropout layer, so a model of the default config
    has the variables of runs from before the option (checkpoints load). Keras's dropout
    holds a seed generator only at a rate above 0: at 0 the attention layers hold none."""
    model = tiny(dropout=0.1, attention_dropout=attention_dropout)
    batch = {"source": SOURCE, "target_in": TARGET_IN}
    model(batch)
    reference = built(dropout=0.1)
    assert {layer.dropout for layer in _attentions(model)} == {rate}
    blocks = model.encoder_layers + model.decoder_layers
    assert all((block.weights_drop is not None) == own_layer for block in blocks)
    if own_layer:
        assert {block.weights_drop.rate for block in blocks} == {rate}
    # A seed generator's state per block's own dropout layer; none in attention at rate 0.
    extra = len(blocks) if own_layer else -len(_attentions(model)) if rate == 0 else 0
    assert len(model.variables) == len(reference.variables) + extra
    clone = TransformerTranslator.from_config(model.get_config())
    assert clone.attention_dropout == attention_dropout


@pytest.mark.parametrize("activation_dropout, rate, own_layer",
                         [(None, 0.1, False), (0.0, 0.0, False), (0.3, 0.3, True)])
def test_activation_dropout_drops_the_feed_forward_activations_at_its_rate(
        built, monkeypatch, activation_dropout, rate, own_layer):
    """`activation_dropout` is the rate of the dropout on the feed-forward block's inner
    activations (None: `dropout`; the paper's is 0): a training pass drops `(B, T, 16)`
    tensors at that rate and no others of that width, and only a rate of its own adds a
    dropout layer (a seed generator per block), so the default config keeps the variables
    of runs from before the option."""
    from common.layers import dropout as dropout_module

    dropped = []  # (rate, width) of every dropout applied in a training pass
    call = dropout_module.Dropout.call

    def spy(self, inputs, training=False):
        if training:
            dropped.append((self.rate, inputs.shape[-1]))
        return call(self, inputs, training=training)

    monkeypatch.setattr(dropout_module.Dropout, "call", spy)
    model = tiny(dropout=0.1, activation_dropout=activation_dropout, attention_dropout=0.0)
    batch = {"source": SOURCE, "target_in": TARGET_IN}
    model(batch)
    reference = built(dropout=0.1, attention_dropout=0.0)
    dropped.clear()
    model(batch, training=True)
    inner = [r for r, width in dropped if width == 16]  # intermediate_dim
    assert inner == ([rate] * 4 if rate else [])  # 2 encoder and 2 decoder blocks
    assert {r for r, width in dropped if width == 8} == {0.1}  # the residual dropout stays
    blocks = model.encoder_layers + model.decoder_layers
    assert all((block.ffn_drop is not None) == own_layer for block in blocks)
    assert len(model.variables) == len(reference.variables) + (len(blocks) if own_layer else 0)
    clone = TransformerTranslator.from_config(model.get_config())
    assert clone.activation_dropout == activation_dropout


def test_a_full_pass_without_attention_weights_equals_the_one_with_them(monkeypatch):
    """`call` without `return_attention` runs the cross-attention fused (no weights; on
    TensorFlow too here); its logits are those of the pass that returns the weights, when
    training without dropout too."""
    from common.layers import MultiHeadAttention

    monkeypatch.setattr(MultiHeadAttention, "FUSED_BACKENDS", ("tensorflow",))
    model = tiny(dropout=0.0)
    batch = {"source": SOURCE, "target_in": TARGET_IN}
    for training in (False, True):
        fused = model(batch, training=training)
        reference, weights = model(batch, training=training, return_attention=True)
        assert len(weights) == 2 and all(w is not None for w in weights)
        np.testing.assert_allclose(np.asarray(fused), np.asarray(reference), atol=1e-5)


@pytest.mark.parametrize("name", ["attention_dropout", "activation_dropout"])
def test_attention_and_activation_dropout_out_of_range_is_a_user_error(name):
    from common.errors import UserError

    with pytest.raises(UserError, match=rf"{name} must be in \[0, 1\), got 1.0"):
        TransformerConfig(**{name: 1.0})


def test_fused_projections_give_the_same_logits_and_gradients_from_the_same_weights():
    """`fused_projections` computes every attention's projections as `(B x T)`-row products
    (QKV in one for self-attention): the same variables, and to float rounding the same
    logits and gradients as keras' per-projection `EinsumDense`s, with every attention layer
    told so and the flag kept through `get_config`."""
    batch = {"source": SOURCE, "target_in": TARGET_IN}
    reference = tiny(tie_embeddings=True)
    fused = tiny(tie_embeddings=True, fused_projections=True)
    reference(batch)
    fused(batch)
    def paths(model):  # without the model's own, numbered name
        return [v.path.split("/", 1)[1] for v in model.weights]

    assert paths(fused) == paths(reference)
    for target, source in zip(fused.weights, reference.weights):
        target.assign(source)
    layers = [layer for block in fused.encoder_layers + fused.decoder_layers
              for layer in (getattr(block, name) for name in block.attentions)]
    assert len(layers) == 6 and all(layer.fused_projections for layer in layers)
    assert not any(block.self_attention.fused_projections for block in reference.encoder_layers)

    def loss_and_gradients(model):
        with tf.GradientTape() as tape:
            logits, weights = model(batch, return_attention=True)
            loss = tf.reduce_sum(logits * np.linspace(-1, 1, 30, dtype=np.float32))
        return logits, weights, tape.gradient(loss, model.trainable_weights)

    logits, weights, grads = loss_and_gradients(fused)
    expected_logits, expected_weights, expected_grads = loss_and_gradients(reference)
    np.testing.assert_allclose(logits, expected_logits, atol=1e-5)
    np.testing.assert_allclose(weights[-1], expected_weights[-1], atol=1e-6)
    for got, want in zip(grads, expected_grads):  # the embedding's come as IndexedSlices
        want = tf.convert_to_tensor(want).numpy()
        # float32 sums in another order: they differ by a few ulps of the largest term summed
        # (up to 24 here), not of each result, and by how many depends on the CPU's kernels.
        np.testing.assert_allclose(tf.convert_to_tensor(got), want, rtol=1e-5,
                                   atol=1e-5 * max(1.0, float(np.abs(want).max())))
    assert TransformerTranslator.from_config(fused.get_config()).fused_projections is True


def test_fused_projections_must_be_a_bool():
    from common.errors import UserError

    with pytest.raises(UserError, match="fused_projections must be true or false, got 'yes'"):
        TransformerConfig(fused_projections="yes")
