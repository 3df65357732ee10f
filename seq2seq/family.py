"""The translators as a `common.family.Family`: options, presets, training and metrics.

Keras-free to import (the command line reads it to build `--help`); the hooks import the
models, data and metrics when they run.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from common.catalog import SCORES, SENTENCEPIECE_TYPES
from common.cli import (
    ON_OFF,
    add_checkpoint_argument,
    add_no_repeat_ngram_argument,
    choose,
    non_negative_float,
    positive_int,
)
from common.config import add_config_option, from_dict
from common.decoding.defaults import BEAM_SIZE, LENGTH_PENALTY
from common.errors import UserError
from common.family import Family
from common.training.run_dir import RunDir
from seq2seq.catalog import DATASETS
from seq2seq.config import (
    CELLS,
    LOCAL_MODES,
    POSITIONS,
    SIZES_SECTION,
    VOCABS,
    RunConfig,
    check_vocabulary_settings,
)
from seq2seq.models import ARCHS
from seq2seq.presets import PRESETS, get_preset


def _dropout_path(config: dict[str, Any]) -> str:
    """`--dropout` sets the dropout of the chosen architecture's sizes."""
    return f"model.{SIZES_SECTION[config['model']['arch']]}.dropout"


def add_decode_arguments(p: argparse.ArgumentParser) -> None:
    """The decoding options of `evaluate` and `translate`."""
    p.add_argument("--beam-size", type=positive_int, default=BEAM_SIZE,
                   help="hypotheses kept per sentence (1: greedy decoding)")
    p.add_argument("--batch-size", type=positive_int, default=64,
                   help="sentences decoded together")
    p.add_argument("--max-decode-length", type=positive_int,
                   help="longest output (default: the run's)")
    p.add_argument("--length-penalty", type=non_negative_float, metavar="ALPHA",
                   help=f"beam search's length penalty (default: the run's, {LENGTH_PENALTY} "
                        "unless trained with another; a SavedModel keeps the one it was "
                        "exported with)")
    add_no_repeat_ngram_argument(p, "translation")
    add_attention_arguments(p)
    add_checkpoint_argument(p, saved_model=True)


def add_attention_arguments(p: argparse.ArgumentParser) -> None:
    """Which Transformer cross-attention is returned (`translate`, `evaluate`, `export`)."""
    p.add_argument("--attention-layer", type=int, default=-1,
                   help="transformer: the decoder layer whose cross-attention is returned")
    p.add_argument("--attention-head", type=int,
                   help="transformer: the head returned (default: the average of the heads)")


class TranslatorFamily(Family):
    name = "seq2seq"
    vocabularies = (RunDir.source_vocab, RunDir.target_vocab)  # of a word run
    validation_metrics = ("bleu", "chrf", "exact_match")  # `train._make_validate`'s
    description = """\
Attention translators: Bahdanau (RNNsearch) and the Transformer, and the encoder-decoder
without attention (seq2seq-noattn) to compare them with.

Typical use:
  seq2seq train --dataset dates --arch transformer --preset dates-demo --out runs/dates
  seq2seq evaluate runs/dates --dataset dates
  seq2seq translate runs/dates "25th of November 2026"
  seq2seq translate runs/dates "Nov 3, 1999" --plot nov3.png --html dates.html
  seq2seq export runs/dates export/dates
  seq2seq serve export/dates --model-name dates
"""
    config_class = RunConfig
    presets = PRESETS
    datasets = DATASETS
    output = "output"
    export_signature = "translate_with_options"
    export_beam_size = BEAM_SIZE
    export_module = "seq2seq.export"
    serve_model_name = "translator"
    serve_instances = "sentences"
    train_help = "train a translator into a run directory"
    evaluate_help = "score a trained run with sacreBLEU, chrF and exact match"

    def add_train_arguments(self, p: argparse.ArgumentParser) -> None:
        add = add_config_option
        add(p, "--dataset", path="data.dataset", **choose(DATASETS,
            "one of: {names} (a new run needs it, here or in --config)"))
        add(p, "--data", path="data.data", help="training TSV (source<TAB>target), for "
            "--dataset tsv")
        add(p, "--reverse", path="data.reverse", action=ON_OFF,
            help="translate the second column into the first")
        add(p, "--min-count", path="data.min_count", type=positive_int,
            help="the fewest occurrences that put a token in a vocabulary")
        add(p, "--max-vocab", path="data.max_vocab", type=positive_int,
            help="the largest vocabulary per side")
        add(p, "--vocab", path="data.vocab", choices=VOCABS,
            help="word vocabularies, or SentencePiece subwords trained on the training split "
                 "(default word)")
        add(p, "--vocab-size", path="data.vocab_size", type=positive_int, metavar="N",
            help="sentencepiece: pieces per vocabulary (default 8000)")
        add(p, "--sentencepiece-type", path="data.sentencepiece_type",
            choices=SENTENCEPIECE_TYPES, help="sentencepiece: the model (default unigram)")
        add(p, "--shared-vocab", path="data.shared_vocab", action=ON_OFF,
            help="sentencepiece: one vocabulary for source and target (with "
                 "--tie-embeddings: one embedding for source, target and output)")
        add(p, "--arch", path="model.arch", **choose(ARCHS,
            "one of: {names} (a new run needs it, here or in --config)"))

        g = p.add_argument_group("model sizes (override the preset)")
        add(g, "--embedding-dim", path="model.bahdanau.embedding_dim", type=positive_int,
            help="bahdanau: word embedding size")
        add(g, "--units", path="model.bahdanau.units", type=positive_int,
            help="bahdanau: recurrent units")
        add(g, "--cell", path="model.bahdanau.cell", choices=CELLS,
            help="bahdanau: the recurrent cell")
        add(g, "--score", path="model.bahdanau.score", **choose(SCORES,
            "bahdanau attention score: {names}"))
        add(g, "--attention-units", path="model.bahdanau.attention_units", type=positive_int,
            help="bahdanau additive score size")
        add(g, "--input-feeding", path="model.bahdanau.input_feeding", action=ON_OFF,
            help="bahdanau: Luong's input feeding (the last attentional state joins the next "
                 "input)")
        add(g, "--local", path="model.bahdanau.local", choices=LOCAL_MODES,
            help="bahdanau: Luong's local attention, monotonic (local-m) or predictive "
                 "(local-p, with the Gaussian term); default global")
        add(g, "--attention-window", path="model.bahdanau.attention_window", type=positive_int,
            metavar="D", help="bahdanau --local: the window's half-width (2D+1 positions; "
            "default 5)")
        add(g, "--copy", path="model.copy", action=ON_OFF,
            help="bahdanau, transformer: a pointer-generator that copies source words (names "
                 "outside the target vocabulary come through)")
        for flag, field, what in (("--layers", "num_layers", "layers"),
                                  ("--hidden-dim", "hidden_dim", "width"),
                                  ("--heads", "num_heads", "heads"),
                                  ("--head-dim", "head_dim", "head size (default: width / heads)"),
                                  ("--intermediate-dim", "intermediate_dim", "feed-forward")):
            add(g, flag, path=f"model.transformer.{field}", type=positive_int,
                help=f"transformer {what}")
        add(g, "--positions", path="model.transformer.positions", choices=POSITIONS,
            help="transformer positions")
        add(g, "--max-length", path="model.transformer.max_length", type=positive_int,
            help="transformer longest sequence")
        add(g, "--post-norm", path="model.transformer.norm_first", convert=lambda on: not on,
            action=ON_OFF, help="transformer: post-layer-norm (default pre)")
        add(g, "--tie-embeddings", path="model.transformer.tie_embeddings",
            action=ON_OFF, help="transformer: one matrix for the target embedding and the "
                                "output projection")
        add(g, "--warmup-steps", path="model.transformer.warmup_steps", type=positive_int,
            help="transformer warm-up")
        add(g, "--dropout", path=_dropout_path, type=non_negative_float,
            help="the chosen architecture's dropout rate")
        add(g, "--attention-dropout", path="model.transformer.attention_dropout",
            type=non_negative_float, help="transformer: dropout of the attention weights "
            "(default: --dropout; at 0, as in the paper, the attention may run fused)")
        add(g, "--activation-dropout", path="model.transformer.activation_dropout",
            type=non_negative_float, help="transformer: dropout of the feed-forward block's "
            "inner activations (default: --dropout; the paper's is 0)")
        add(g, "--label-smoothing", path="model.label_smoothing", type=non_negative_float,
            help="the training target's weight spread over the vocabulary (eps, in [0, 1))")
        add(g, "--max-decode-length", path="model.max_decode_length", type=positive_int,
            help="longest translation the run decodes (validation, translate, export)")
        add(g, "--length-penalty", path="model.length_penalty", type=non_negative_float,
            help=f"beam search's length penalty alpha (default {LENGTH_PENALTY}): the run's "
                 "default for validation, evaluate, translate and export")

    def preset(self, name: str | None, explicit: dict[str, Any]) -> dict[str, Any]:
        """The preset's values for the architecture chosen, and its name (`preset`); a new run
        names its dataset and architecture (options or config file)."""
        for section, key, flag, names in (("data", "dataset", "--dataset", DATASETS),
                                          ("model", "arch", "--arch", ARCHS)):
            if key not in explicit.get(section, {}):
                raise UserError(f"{flag} is required for a new run (one of: "
                                f"{', '.join(names.names())}), as an option or in --config")
        layer = {}
        if name is not None:
            arch = explicit.get("model", {}).get("arch", RunConfig().model.arch)
            layer = {**get_preset(name).for_arch(arch), "preset": name}
        # Options the chosen vocabulary ignores are refused; a preset's own are not.
        check_vocabulary_settings(explicit.get("data", {}), layer.get("data", {}))
        return layer

    def vocabulary_files(self, config: RunConfig) -> tuple[str, ...]:
        from seq2seq.vocabularies import vocabulary_files

        return vocabulary_files(config.data)

    def check_config(self, config: RunConfig) -> None:
        ARCHS.get(config.model.arch)
        SCORES.get(config.model.bahdanau.score)

    def prepare(self, config, out_dir: Path) -> Path:
        from seq2seq.prepared import prepare_translation

        return prepare_translation(config, out_dir)

    def prepared_layout(self):
        from seq2seq.prepared import LAYOUT

        return LAYOUT

    def build_model(self, config: dict[str, Any], vocab_sizes: dict[str, int]):
        from seq2seq.models import build_model

        return build_model(from_dict(RunConfig, config).model, vocab_sizes["source"],
                           vocab_sizes["target"])

    def learning_rate(self, config: dict[str, Any], training, steps_per_epoch: int):
        """The Transformer's inverse-square-root warm-up, a constant rate otherwise."""
        from seq2seq.models import learning_rate

        return learning_rate(from_dict(RunConfig, config).model, training.learning_rate)

    def create_variables(self, model, config: dict[str, Any]) -> None:
        """A call on a one-pair batch: a translator creates its variables on its first
        call."""
        import numpy as np

        inputs = {"source": np.ones((1, 2), np.int32), "target_in": np.ones((1, 2), np.int32)}
        if config["model"].get("copy"):
            inputs["source_copy"] = np.ones((1, 2), np.int32)
        model(inputs, training=False)

    def validation(self, config: dict[str, Any], prepared, examples: int):
        """`seq2seq.validation` of the prepared folder's first `examples` pairs."""
        from seq2seq.validation import make_validation, pairs_from_prepared

        if not examples or "valid" not in prepared.splits:
            return None
        run = from_dict(RunConfig, config)
        return make_validation(run, pairs_from_prepared(prepared.path, examples),
                               prepared.vocabularies["source"],
                               prepared.vocabularies["target"])

    def train(self, config, run_dir: Path, resume: bool, verbose: int, init_from=None):
        from seq2seq.train import train

        return train(config, run_dir, resume=resume, verbose=verbose, init_from=init_from)

    def add_evaluate_arguments(self, p: argparse.ArgumentParser) -> None:
        from seq2seq.evaluate import REFERENCE_MODES

        p.add_argument("run_dir", metavar="RUN_DIR")
        source = p.add_mutually_exclusive_group(required=True)
        source.add_argument("--data", help="a TSV of source<TAB>reference pairs")
        source.add_argument("--dataset", choices=("dates",), help="the held-out dates split")
        add_decode_arguments(p)
        p.add_argument("--limit", type=positive_int, help="score only the first N pairs")
        p.add_argument("--references", choices=REFERENCE_MODES, default="line",
                       help="line: each line against its own reference; grouped: "
                            "the lines of one source translated once and scored against all "
                            "their references (a source the data translates several ways)")
        p.add_argument("--json", metavar="OUT", help="also write the scores to this JSON file")

    def evaluate(self, run_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
        from seq2seq.evaluate import evaluate

        scores = evaluate(args.run_dir, data=args.data, dataset=args.dataset,
                          beam_size=args.beam_size, batch_size=args.batch_size,
                          max_length=args.max_decode_length, limit=args.limit,
                          json_path=args.json, attention_layer=args.attention_layer,
                          attention_head=args.attention_head, checkpoint=args.checkpoint,
                          length_penalty=args.length_penalty, references=args.references,
                          no_repeat_ngram=args.no_repeat_ngram)
        width = max(len(k) for k in scores)
        for name, value in scores.items():
            shown = f"{value:.2f}" if isinstance(value, float) else value
            print(f"{name:<{width}}  {shown}")
        return scores

    def open_model(self, path, checkpoint: str | None = None, attention_layer: int = -1,
                   attention_head: int | None = None):
        """A run directory (its `checkpoint`) or a SavedModel."""
        from seq2seq.inference import open_model

        return open_model(path, attention_layer, attention_head, checkpoint)

    def predict(self, model, inputs, **options):
        return model.translate(list(inputs), **options)

    def add_export_arguments(self, p: argparse.ArgumentParser) -> None:
        from common.export.quantization import add_quantization_argument

        add_attention_arguments(p)
        # int16 is CTranslate2's alone (`seq2seq.cli` refuses it for a SavedModel).
        add_quantization_argument(p, ("float32", "int8", "int16"), more_help=
                                  "; with --format ctranslate2, CTranslate2's own int8 or "
                                  "int16 (2 bytes)")

    def export_options(self, args: argparse.Namespace) -> dict[str, Any]:
        return {"attention_layer": args.attention_layer, "attention_head": args.attention_head,
                "quantization": args.quantization}


FAMILY = TranslatorFamily()
