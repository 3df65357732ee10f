"""The `seq2seq` command line: train, evaluate, translate, export, serve;
translate here, the rest from `common.cli.family_subcommands`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from common.cli import (
    EXIT_OK,
    EXIT_USAGE,
    Subcommand,
    check_model_path,
    exported_beam_sizes,
    family_main,
    family_subcommands,
    positive_int,
)
from common.datasets.fetch import fetch_subcommand
from seq2seq.family import FAMILY, add_decode_arguments

PROG = FAMILY.name


# -- translate -------------------------------------------------------------------------------


def _translate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="MODEL",
                   help="a run directory, or a SavedModel or CTranslate2 directory written by "
                        "`seq2seq export`")
    p.add_argument("text", nargs="*", metavar="TEXT", help="sentences (default: stdin lines)")
    add_decode_arguments(p)
    p.add_argument("--n-best", type=positive_int, metavar="N",
                   help="the N best translations of the beam (at most --beam-size), best "
                        "first: lines LINE<TAB>RANK<TAB>SCORE<TAB>NORMALIZED SCORE<TAB>TEXT "
                        "(the sum of log-probabilities, and the length-normalized score the "
                        "beam ranks by); with --json an 'n_best' list per line")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per line, with tokens, score and attention")
    g = p.add_argument_group("attention figures")
    g.add_argument("--plot", metavar="OUT.png",
                   help="save each sentence's attention as a heatmap (source tokens across, "
                        "target tokens down); with several sentences OUT-1.png, OUT-2.png, ... "
                        "numbered by input line")
    g.add_argument("--all-heads", action="store_true",
                   help="transformer run directory: draw every head of --attention-layer "
                        "(one decode per head), in --plot as a grid and in --html with a picker")
    g.add_argument("--html", metavar="OUT.html",
                   help="write one self-contained page with all sentences: hover a target word "
                        "to see the source words it attended to")


def _check_figure_options(args: argparse.Namespace) -> None:
    """Fails before loading the model when a figure cannot be written."""
    from common.errors import UserError
    from common.viz import check_output_path

    if args.plot:
        check_output_path(args.plot, ".png", "--plot", count=max(len(args.text), 1))
    if args.html:
        check_output_path(args.html, ".html", "--html")
    if args.all_heads:
        from common.export.ctranslate2 import is_ctranslate2
        from common.export.savedmodel import is_saved_model

        if not (args.plot or args.html):
            raise UserError("--all-heads: nothing to draw; add --plot OUT.png or --html OUT.html")
        if args.attention_head is not None:
            raise UserError("--all-heads draws every head; leave out --attention-head")
        if is_saved_model(args.run_dir) or is_ctranslate2(args.run_dir):
            what = "a SavedModel" if is_saved_model(args.run_dir) else "a CTranslate2 export"
            raise UserError(f"--all-heads: {what} returns the attention chosen at export "
                            "time; give a run directory")


def _check_translate(args: argparse.Namespace) -> None:
    """What `translate` can refuse before TensorFlow is imported: the model's path, the options
    a SavedModel does not take, the figures."""
    from common.errors import UserError
    from common.export.ctranslate2 import is_ctranslate2
    from common.export.savedmodel import is_saved_model

    _check_figure_options(args)
    if is_ctranslate2(args.run_dir):  # its own config.json is CTranslate2's, not a run's
        _check_exported(args, "a CTranslate2 export")
        _check_beam(args)
        return
    check_model_path(FAMILY, args.run_dir, "translator", args.checkpoint)
    _check_beam(args)
    if is_saved_model(args.run_dir):
        if args.length_penalty is not None:
            raise UserError("--length-penalty: a SavedModel decodes with the length penalty it "
                            "was exported with (see its export_info.json); give a run directory")
        if args.attention_layer != -1 or args.attention_head is not None:
            raise UserError("--attention-layer/--attention-head: a SavedModel returns the "
                            "attention chosen at export time; give them to `seq2seq export`")


def _check_beam(args: argparse.Namespace) -> None:
    """`--beam-size` and `--n-best` against what the model takes, before it loads (an export's
    beam sizes are in its `export_info.json`): seconds sooner than its loading would tell."""
    from common.export import ctranslate2, savedmodel
    from common.export.beam_sizes import check_decoding_options

    info = None
    if ctranslate2.is_ctranslate2(args.run_dir):
        info = ctranslate2.read_info(args.run_dir)
    elif savedmodel.is_saved_model(args.run_dir):
        info = savedmodel.read_info(args.run_dir)
    check_decoding_options(args.beam_size, getattr(args, "n_best", None), info)


def _check_exported(args: argparse.Namespace, what: str) -> None:
    """The options an export (chosen at export time) does not take from `translate` or
    `evaluate`: `--checkpoint`, `--attention-layer`, `--attention-head`."""
    from common.errors import UserError

    if getattr(args, "checkpoint", None) is not None:
        raise UserError(f"--checkpoint: {what} holds the weights chosen at export time; give "
                        "it to `seq2seq export`")
    if args.attention_layer != -1 or args.attention_head is not None:
        raise UserError(f"--attention-layer/--attention-head: {what} returns the attention "
                        "chosen at export time; give them to `seq2seq export`")


def _check_attention_options(args: argparse.Namespace, translator) -> None:
    """`--attention-layer`/`--attention-head` are checked by the model's `make_step` before
    any input is read: a Transformer's range, none at all for a model with one attention
    (Bahdanau's). A SavedModel refuses them itself."""
    model = getattr(translator, "model", None)
    if model is not None:
        model.make_step(attention_layer=args.attention_layer,
                        attention_head=args.attention_head)


def _write_figures(args: argparse.Namespace, translator, texts, results) -> None:
    from common.outputs import reported_write
    from seq2seq.visualize import head_attention, write_alignment_plots, write_translation_viewer

    heads = None
    if args.all_heads:
        heads = head_attention(translator, texts, args.attention_layer,
                               beam_size=args.beam_size, batch_size=args.batch_size,
                               max_length=args.max_decode_length,
                               no_repeat_ngram=args.no_repeat_ngram)
    if args.plot:
        with reported_write(args.plot, "--plot"):
            written = write_alignment_plots(results, args.plot, heads)
        for path in written:
            print(f"{PROG} translate: wrote {path}", file=sys.stderr)
    if args.html:
        with reported_write(args.html, "--html"):
            path = write_translation_viewer(results, args.html, heads)
        if path is not None:
            print(f"{PROG} translate: wrote {path}", file=sys.stderr)


def _translate(args: argparse.Namespace) -> int:
    translator = FAMILY.open_model(args.run_dir, args.checkpoint, args.attention_layer,
                                   args.attention_head)
    _check_attention_options(args, translator)
    if args.plot or args.html:
        from seq2seq.visualize import require_attention

        require_attention(translator)
    if args.all_heads:
        from seq2seq.visualize import require_heads

        require_heads(translator)
    from common.cli import INVALID_UTF8, read_text_lines

    texts, invalid_utf8 = read_text_lines(
        sys.stdin, args.text, hint=f"{PROG} translate: reading sentences from the terminal, one "
        "per line; end with Ctrl-D (or give them as arguments)")
    if not texts and (args.plot or args.html):
        from common.errors import UserError

        raise UserError("no input lines: nothing to translate, so no --plot/--html to write "
                        "(give sentences as arguments or on stdin)")
    options = {}
    if args.attention_layer != -1 or args.attention_head is not None:
        options = {"attention_layer": args.attention_layer,
                   "attention_head": args.attention_head}
    if args.n_best:
        options["n_best"] = args.n_best
    if args.length_penalty is not None:
        options["length_penalty"] = args.length_penalty
    if args.no_repeat_ngram:
        options["no_repeat_ngram"] = args.no_repeat_ngram
    results = translator.translate(texts, beam_size=args.beam_size, batch_size=args.batch_size,
                                   max_length=args.max_decode_length, **options)
    for i in invalid_utf8:
        if not results[i].error:
            results[i].warning = "; ".join(filter(None, [INVALID_UTF8, results[i].warning]))
    failed = 0
    for number, result in enumerate(results, 1):
        if result.error:
            failed += 1
            print(f"{PROG} translate: line {number}: {result.error}", file=sys.stderr)
        elif result.warning:
            print(f"{PROG} translate: line {number}: warning: {result.warning}", file=sys.stderr)
        if args.json:
            print(json.dumps({"line": number, **result.as_json()}, ensure_ascii=False))
        elif args.n_best:
            for rank, h in enumerate(result.n_best or [], 1):
                print(f"{number}\t{rank}\t{h.score:.4f}\t{h.normalized_score:.4f}\t{h.text}")
        else:
            print(result.text)
    sys.stdout.flush()
    if args.plot or args.html:
        _write_figures(args, translator, texts, results)
    return EXIT_USAGE if failed else 0


# -- export, evaluate and serve: a CTranslate2 directory beside the SavedModel ---------------
# (`seq2seq.ctranslate2_export`, `seq2seq.ctranslate2_translator`, docs/serving.md)


def _extended(shared: Subcommand, given, check, run, arguments=None,
              help: str | None = None) -> Subcommand:
    """The shared sub-command, doing `check(args)` and `run(args)` instead of its own where
    `given(args)` (a CTranslate2 directory is asked for or given); `arguments` adds options."""

    def add_arguments(p: argparse.ArgumentParser) -> None:
        shared.add_arguments(p)
        if arguments is not None:
            arguments(p)

    def checked(args: argparse.Namespace) -> None:
        if given(args):
            check(args)
        elif shared.check is not None:
            shared.check(args)

    return Subcommand(shared.name, help or shared.help, add_arguments,
                      lambda args: run(args) if given(args) else shared.run(args),
                      description=shared.description, uses_tensorflow=shared.uses_tensorflow,
                      runs_on_jax=shared.runs_on_jax, check=checked)


def _export(shared: Subcommand) -> Subcommand:
    """`export ... --format ctranslate2 [--quantization TYPE]`: a CTranslate2 directory."""
    from common.export import ctranslate2 as ct2

    def arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--format", choices=("savedmodel", "ctranslate2"), default="savedmodel",
                       help="savedmodel: a SavedModel for TensorFlow (Serving); ctranslate2: a "
                            "CTranslate2 model directory, for a Transformer run (`pip install "
                            "-e .[ctranslate2]`; docs/serving.md)")

    def given(args: argparse.Namespace) -> bool:
        if args.format != "ctranslate2":  # --quantization is the family's export option
            from common.export.quantization import check_quantization

            check_quantization(args.quantization, hint=" (int16: add --format ctranslate2)")
        return args.format == "ctranslate2"

    def check(args: argparse.Namespace) -> None:
        ct2.engine()
        ct2.check_target(args.out_dir, args.overwrite)

    def run(args: argparse.Namespace) -> int:
        from seq2seq.ctranslate2_export import export_ctranslate2

        sizes = exported_beam_sizes(args)
        quantization = args.quantization or "float32"
        out = export_ctranslate2(
            args.run_dir, args.out_dir, quantization=quantization, checkpoint=args.checkpoint,
            overwrite=args.overwrite, beam_sizes=sizes, default_beam_size=args.beam_size,
            max_decode_length=args.max_decode_length, attention_layer=args.attention_layer,
            attention_head=args.attention_head)
        print(f"Exported {out} (CTranslate2, {quantization} weights; beam sizes: "
              f"{', '.join(map(str, sizes))})")
        return EXIT_OK

    return _extended(shared, given, check, run, arguments,
                     help="export a run as a self-contained SavedModel or a CTranslate2 "
                          "directory")


def _evaluate(shared: Subcommand) -> Subcommand:
    """`evaluate OUT_DIR`: a CTranslate2 export scored as its run (`seq2seq.evaluate`); an
    export's `--beam-size` checked before it loads."""
    from common.export import ctranslate2 as ct2

    def check(args: argparse.Namespace) -> None:
        ct2.engine()
        _check_exported(args, "a CTranslate2 export")

    extended = _extended(shared, lambda args: ct2.is_ctranslate2(args.run_dir), check,
                         shared.run)

    def checked(args: argparse.Namespace) -> None:
        extended.check(args)
        _check_beam(args)

    return dataclasses.replace(extended, check=checked)


def _serve(shared: Subcommand) -> Subcommand:
    """`serve OUT_DIR`: a CTranslate2 export over the same REST API (version 1)."""
    from common.export import ctranslate2 as ct2

    def run(args: argparse.Namespace) -> int:
        from seq2seq.ctranslate2_translator import serve

        serve(args.export_dir, args.model_name, host=args.host, port=args.port,
              max_batch_size=args.max_batch_size, batch_timeout_ms=args.batch_timeout_ms,
              max_request_instances=args.max_request_instances,
              intra_threads=args.intra_threads, inter_threads=args.inter_threads)
        return EXIT_OK

    return _extended(shared, lambda args: ct2.is_ctranslate2(args.export_dir),
                     lambda args: ct2.engine(), run,
                     help="serve a SavedModel or a CTranslate2 export over TensorFlow Serving's "
                          "REST API")


def subcommands() -> list[Subcommand]:
    """train, evaluate, export and serve from `common.cli` (the last three also taking a
    CTranslate2 directory); translate is the translators' own."""
    shared = family_subcommands(FAMILY)
    return [
        shared["train"],
        shared["average"],
        shared["prepare"],
        _evaluate(shared["evaluate"]),
        Subcommand("translate", "translate sentences with a run directory, a SavedModel or a "
                   "CTranslate2 export", _translate_arguments, _translate, check=_check_translate),
        _export(shared["export"]),
        _serve(shared["serve"]),
        fetch_subcommand(["spa-eng"]),
    ]


main = family_main(FAMILY, subcommands)
