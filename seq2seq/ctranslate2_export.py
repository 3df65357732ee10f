"""Exporting a Transformer translator run to CTranslate2, OpenNMT's inference engine.

`export_ctranslate2(RUN_DIR, OUT_DIR, quantization="int8")` (`seq2seq export RUN_DIR OUT_DIR
--format ctranslate2`) fills a `ctranslate2.specs.TransformerSpec` from the Keras model's
variables, as CTranslate2's own converters fill it from theirs (`converters/opennmt_tf.py`),
and writes a CTranslate2 model directory (`common.export.ctranslate2.save`):

- `model.bin` (the weights, of the `--quantization` type: int8, int16 or float32) and
  CTranslate2's `config.json` (`<start>`, `<end>`, `<unk>`; layer norm epsilon 1e-5);
- `source_vocabulary.json`, `target_vocabulary.json` (or `shared_vocabulary.json`): the run's
  tokens in id order (a subword run's pieces);
- a subword run's SentencePiece models under their run-directory names (`vocab.source.model`,
  `vocab.target.model` or `vocab.model`), which turn text into pieces and back;
- `export_info.json`: what `seq2seq.ctranslate2_translator` needs (the run's config, which
  checkpoint, the limits and defaults of a SavedModel export's `export_info.json`).

The layout, `TransformerTranslator` (`seq2seq.transformer`) -> CTranslate2's spec, per layer
`i` (Keras kernels are `(in, out)`, CTranslate2's weights `(out, in)`):

- `source_embedding`, `target_embedding` -> `encoder/embeddings_0`, `decoder/embeddings`
  (both scaled by `sqrt(D)`, as here);
- the sine (keras-hub: sin on the even features, cos on the odd) or learned positions ->
  `*/position_encodings/encodings`, the `(max_length, D)` table itself (CTranslate2's own
  sinusoids put sin and cos in halves);
- `encoder_i.self_attention`'s query, key and value `(D, H, K)` -> `encoder/layer_i/
  self_attention/linear_0` `(3 H K, D)`, one fused product; its `output_dense` `(H, K, D)` ->
  `linear_1`; the decoder's self-attention alike;
- `decoder_i.cross_attention`'s query -> `decoder/layer_i/attention/linear_0`, its key and
  value -> `linear_1` (fused), its output -> `linear_2`;
- each block's norm (before it, pre-norm; after it, post-norm) -> its `layer_norm`, with
  `pre_norm` set; `encoder_norm`, `decoder_norm` (pre-norm only) -> `encoder/layer_norm`,
  `decoder/layer_norm`;
- `ffn_inner` (ReLU), `ffn_outer` -> `*/ffn/linear_0`, `linear_1`;
- the output projection (the target embedding when tied, else its own `(D, V)`) ->
  `decoder/projection` `(V, D)`. Tied matrices are saved once (CTranslate2 aliases equal
  variables).

Refused in one line, before any weight is read: another architecture (Bahdanau,
`seq2seq-noattn`: CTranslate2 runs Transformers), a pointer-generator (`--copy`: its output mixes
a copy distribution over the source into the vocabulary's, which CTranslate2 has no layer
for), an attention head other than 0 or the average (CTranslate2 returns a layer's first `N`
heads averaged), and a missing `ctranslate2` package.

Dimensions: `V` vocabulary, `D` model width, `H` heads, `K` head size.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from common.decoding.defaults import BEAM_SIZE, EXPORT_BEAM_SIZES
from common.errors import UserError
from common.export import ctranslate2 as ct2
from common.export.beam_sizes import check_export_options

KIND = "seq2seq.translator"  # `seq2seq.export.KIND`: one marker for both formats
WHAT = ("a translator exported for CTranslate2 (make one with `seq2seq export RUN_DIR OUT_DIR "
        "--format ctranslate2`)")
#: The layer norm epsilon of every `LayerNormalization` of the Transformer.
EPSILON = 1e-5


def check_layout(arch: str, copy: bool, attention_head: int | None = None) -> None:
    """A one-line `UserError` for a translator CTranslate2 cannot represent, read from its
    config alone (before its weights load): another architecture, a pointer-generator, an
    attention head CTranslate2 cannot return."""
    if arch != "transformer":
        raise UserError(f"--format ctranslate2: a {arch} translator; CTranslate2 runs "
                        "Transformer translators (export this run as a SavedModel: leave out "
                        "--format)")
    if copy:
        raise UserError("--format ctranslate2: a pointer-generator (--copy) mixes a copy "
                        "distribution over the source into its output, which CTranslate2 has "
                        "no layer for; export it as a SavedModel")
    if attention_head not in (None, 0):
        raise UserError(f"--attention-head {attention_head}: CTranslate2 returns the average "
                        "of a layer's first N heads; export with --attention-head 0 or without "
                        "it (the average of all heads)")


def check_exportable(model: Any, attention_layer: int = -1,
                     attention_head: int | None = None) -> None:
    """`check_layout` for a built model, and the attention layer's and head's ranges."""
    import keras

    check_layout(getattr(model, "arch", type(model).__name__), getattr(model, "copy", False),
                 attention_head)
    model.make_step(attention_layer=attention_layer, attention_head=attention_head)  # ranges

    for layer in model.encoder_layers + model.decoder_layers:
        if layer.ffn_inner.activation is not keras.activations.relu:
            raise UserError("--format ctranslate2: a feed-forward activation other than ReLU")


def _value(variable: Any) -> np.ndarray:
    return np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable, np.float32)


def _linear(spec: Any, denses: Sequence[Any], rows: int) -> None:
    """`spec.weight` `(out, in)` from Keras kernels `(in, ...)` side by side (one fused
    product for several), and their biases."""
    spec.weight = np.concatenate([_value(d.kernel).reshape(rows, -1).T for d in denses])
    if all(d.bias is not None for d in denses):
        spec.bias = np.concatenate([_value(d.bias).reshape(-1) for d in denses])


def _norm(spec: Any, norm: Any) -> None:
    spec.gamma, spec.beta = _value(norm.gamma), _value(norm.beta)


def _attention(spec: Any, attention: Any, norm: Any, width: int, self_attention: bool) -> None:
    """One attention block: its norm, its projections (query, key and value fused for
    self-attention; key and value for cross-attention), its output."""
    _norm(spec.layer_norm, norm)
    projections = (attention.query_dense, attention.key_dense, attention.value_dense)
    if self_attention:
        _linear(spec.linear[0], projections, width)
    else:
        _linear(spec.linear[0], projections[:1], width)
        _linear(spec.linear[1], projections[1:], width)
    heads = attention.num_heads * attention.key_dim
    _linear(spec.linear[-1], [attention.output_dense], heads)


def _ffn(spec: Any, layer: Any, width: int) -> None:
    _norm(spec.layer_norm, layer.ffn_norm)
    _linear(spec.linear_0, [layer.ffn_inner], width)
    _linear(spec.linear_1, [layer.ffn_outer], layer.intermediate_dim)


def _positions(model: Any, which: str) -> np.ndarray:
    """The `(max_length, D)` positions added to the embeddings: the learned table, or the
    sinusoids keras-hub's layer computes for positions `0 .. max_length - 1`."""
    layer = getattr(model, f"{which}_positions")
    if model.positions == "learned":
        return _value(layer.position_embeddings)
    return _value(layer(np.zeros((1, model.max_length, model.hidden_dim), np.float32)))[0]


def transformer_spec(model: Any, source_tokens: Sequence[str], target_tokens: Sequence[str],
                     attention_layer: int = -1, attention_head: int | None = None) -> Any:
    """The `ctranslate2.specs.TransformerSpec` of a `TransformerTranslator`, its weights set.

    Args:
        model: a built `seq2seq.transformer.TransformerTranslator` with its weights.
        source_tokens: the source vocabulary's tokens in id order.
        target_tokens: the target vocabulary's.
        attention_layer: the decoder layer whose cross-attention CTranslate2 returns.
        attention_head: 0 (that head) or None (the average of the heads).

    Returns:
        The spec, vocabularies registered and config set (`<start>` starts the decoder;
        nothing is added to the source).
    """
    from common.text.specials import END, START, UNK

    check_exportable(model, attention_layer, attention_head)
    specs = ct2.engine().specs
    head_dim = None if model.head_dim in (None, model.hidden_dim // model.num_heads) \
        else model.head_dim
    shared = {"num_heads": model.num_heads, "pre_norm": model.norm_first,
              "activation": specs.common_spec.Activation.RELU, "head_dim": head_dim}
    encoder = specs.TransformerEncoderSpec(model.num_layers, **shared)
    decoder = specs.TransformerDecoderSpec(
        model.num_layers, alignment_layer=attention_layer,
        alignment_heads=0 if attention_head is None else 1, **shared)
    spec = specs.TransformerSpec(encoder, decoder)
    width = model.hidden_dim

    encoder.embeddings[0].weight = _value(model.source_embedding.embeddings)
    encoder.position_encodings.encodings = _positions(model, "source")
    for layer_spec, layer in zip(encoder.layer, model.encoder_layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attention, layer.self_attention_norm,
                   width, self_attention=True)
        _ffn(layer_spec.ffn, layer, width)
    if model.norm_first:
        _norm(encoder.layer_norm, model.encoder_norm)

    embedding = model.target_embedding
    decoder.embeddings.weight = _value(embedding.embeddings)
    decoder.position_encodings.encodings = _positions(model, "target")
    for layer_spec, layer in zip(decoder.layer, model.decoder_layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attention, layer.self_attention_norm,
                   width, self_attention=True)
        _attention(layer_spec.attention, layer.cross_attention, layer.cross_attention_norm,
                   width, self_attention=False)
        _ffn(layer_spec.ffn, layer, width)
    if model.norm_first:
        _norm(decoder.layer_norm, model.decoder_norm)
    decoder.projection.weight = (_value(embedding.embeddings) if embedding.tie_weights
                                 else _value(embedding.reverse_embeddings).T)

    spec.config.layer_norm_epsilon = EPSILON
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = UNK, START, END
    spec.config.decoder_start_token = START
    spec.config.add_source_bos = spec.config.add_source_eos = False
    spec.register_source_vocabulary(list(source_tokens))
    spec.register_target_vocabulary(list(target_tokens))
    return spec


def export_ctranslate2(
    run_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    quantization: str = "float32",
    checkpoint: str | None = None,
    overwrite: bool = False,
    **options: Any,
) -> Path:
    """`seq2seq export RUN_DIR OUT_DIR --format ctranslate2`: the run's checkpoint as a
    CTranslate2 model directory (see the module doc).

    Args:
        run_dir: a Transformer translator run directory.
        out_dir: the directory to write (`overwrite`: replace an earlier export there).
        quantization: the weight type: int8, int16 or float32.
        checkpoint: best, last, a number or a path (None: the best when the run keeps one,
            else the last).
        **options: those of `export_translator` (`beam_sizes`, `default_beam_size`,
            `max_decode_length`, `attention_layer`, `attention_head`).

    Returns:
        The directory written.
    """
    from seq2seq.family import FAMILY
    from seq2seq.inference import Translator

    ct2.engine()  # a missing package, the target, the layout: before the seconds of loading
    _check_quantization(quantization)
    ct2.check_target(out_dir, overwrite)
    config = FAMILY.load_config(run_dir)
    check_layout(config.model.arch, config.model.copy, options.get("attention_head"))
    translator = Translator.from_run_dir(run_dir, checkpoint)
    return export_translator(translator, out_dir, quantization, overwrite, run_dir=run_dir,
                             **options)


def export_translator(
    translator: Any,
    out_dir: str | os.PathLike,
    quantization: str = "float32",
    overwrite: bool = False,
    beam_sizes: Sequence[int] = EXPORT_BEAM_SIZES,
    default_beam_size: int = BEAM_SIZE,
    max_decode_length: int | None = None,
    attention_layer: int = -1,
    attention_head: int | None = None,
    run_dir: str | os.PathLike | None = None,
) -> Path:
    """An in-process `seq2seq.inference.Translator` (a Transformer's) as a CTranslate2 model
    directory: `export_ctranslate2` once the run is loaded.

    Args:
        translator: the translator: its model, vocabularies, config and checkpoint.
        out_dir: the directory to write (`overwrite`: replace an earlier export there).
        quantization: the weight type: int8, int16 or float32.
        beam_sizes: the beam sizes a request may ask for (a SavedModel export's contract;
            nothing is compiled).
        default_beam_size: the beam size of a request that names none.
        max_decode_length: the longest output of a request that names none (None: the
            run's).
        attention_layer: the decoder layer whose cross-attention is returned (and used to copy
            `<unk>`).
        attention_head: 0, or None for the average of its heads.
        run_dir: the run directory it came from, recorded in `export_info.json`.

    Returns:
        The directory written.
    """
    from common.config import to_dict

    _check_quantization(quantization)
    model, config, vocabs = translator.model, translator.config, translator.vocabularies
    check_exportable(model, attention_layer, attention_head)
    max_decode_length = int(max_decode_length or config.model.max_decode_length)
    sizes = check_export_options(beam_sizes, default_beam_size, max_decode_length,
                                 translator.max_decode_limit)
    spec = transformer_spec(model, vocabs.source.tokens, vocabs.target.tokens, attention_layer,
                            attention_head)
    files = ({name: vocab.proto for name, vocab in vocabs.files().items()}
             if vocabs.subwords else {})
    info = {
        "run_dir": None if run_dir is None else str(Path(run_dir).resolve()),
        "checkpoint": (None if getattr(translator, "checkpoint", None) is None
                       else os.path.abspath(translator.checkpoint)),  # read from anywhere
        "run_config": to_dict(config),
        "lowercase": config.data.lowercase, "max_source_tokens": translator.max_source_tokens,
        "max_decode_length": max_decode_length,
        "max_length_limit": translator.max_decode_limit, "beam_sizes": list(sizes),
        "default_beam_size": int(default_beam_size),
        "length_penalty": float(config.model.length_penalty),
        "attention_layer": attention_layer, "attention_head": attention_head,
        "attention": True, "copy": False,
        "source_vocab_size": len(vocabs.source), "target_vocab_size": len(vocabs.target),
        "vocab": "sentencepiece" if vocabs.subwords else "word",
        "subwords": sorted(files),
        "options_signature": "translate_with_options",
    }
    return ct2.save(spec, out_dir, KIND, quantization, info, files=files, overwrite=overwrite)


def _check_quantization(quantization: str) -> None:
    if quantization not in ct2.QUANTIZATIONS:
        raise UserError(f"--quantization {quantization!r}; expected one of: "
                        f"{', '.join(ct2.QUANTIZATIONS)}")
