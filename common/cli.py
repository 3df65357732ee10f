"""What the `captioner` and `seq2seq` command lines share: sub-commands and error handling.

A command line here is thin: it parses arguments and calls one library function. Heavy
imports (TensorFlow, Keras) happen inside the sub-command's handler, so `--help` is instant.
`family_subcommands(family)` builds the sub-commands every family has (train, evaluate,
export, serve) from its `common.family.Family`; a family's own `cli.py` adds only its own
(caption and render, translate). Choices come from the registries (`choose`). A sub-command's
`check` looks at what needs no model (paths, options) before TensorFlow is imported, so a
mistake there is told at once, not after the seconds that import takes.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from common.decoding.defaults import EXPORT_BEAM_SIZES
from common.errors import UserError
from common.options import (  # noqa: F401  (the argument types, for every command line)
    ON_OFF,
    add_config_options,
    add_training_options,
    beam_size_list,
    check_distinct_labels,
    distinct_list,
    labelled_run,
    non_negative_float,
    non_negative_int,
    port_number,
    positive_float,
    positive_int,
    seed_number,
)
from common.registry import Registry

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


@dataclass(frozen=True)
class Subcommand:
    """One sub-command: its name, a one-line help, how to add its arguments, how to run it.

    `run(args)` returns an exit status (or None for 0); `check(args)`, when given, runs first,
    before TensorFlow is imported, and raises `UserError` for what it can tell without a
    model (a missing run directory, a figure that cannot be written).
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int | None]
    description: str | None = None
    uses_tensorflow: bool = True  # False: skip the quiet TensorFlow import before `run`
    runs_on_jax: bool = False  # True: also under KERAS_BACKEND=jax (train --prepared, prepare)
    check: Callable[[argparse.Namespace], None] | None = None


class WholeWordsFormatter(argparse.HelpFormatter):
    """Never breaks a help line at a hyphen: `--scst-fact-weight`, `demo-scst-facts` stay whole
    (every `Parser`'s default formatter)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class HelpFormatter(WholeWordsFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default only when it has a meaningful one (not None, not a flag)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default  # `is`: a default of 0 is shown (0 == False)
        if default is None or default is False or default is argparse.SUPPRESS or (
                "%(default)" in text):
            return text
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return f"{text} (default: %(default)s)" if text else "default: %(default)s"
        return text


class Parser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors are one line (no usage block) and exit status 2.

    A parser with a `--quick` option also records, in the namespace's `given_options`, the
    destinations of the options its command line gave (however spelled or abbreviated), so
    that `apply_quick` sets only those it did not give."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", WholeWordsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        first_line = " ".join(str(message).split())
        self.exit(EXIT_USAGE, f"{self.prog}: error: {first_line} (see {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed, unknown = super().parse_known_args(args, namespace)
        dests = {action.dest for action in self._actions if action.dest != argparse.SUPPRESS}
        if namespace is None and "quick" in dests:
            # argparse sets a default only where the namespace has no value: parsed again onto
            # a namespace holding a marker everywhere, the options given are those it replaced.
            unset = object()
            probe = argparse.Namespace(**dict.fromkeys(dests, unset))
            super().parse_known_args(args, probe)
            parsed.given_options = {k for k, v in vars(probe).items() if v is not unset}
        return parsed, unknown


def apply_quick(args: argparse.Namespace, values: dict[str, Any]) -> None:
    """With `args.quick`, set each of `values` (destination -> value) that the command line did
    not give (`Parser`'s `given_options`): `--quick` is a smoke run's defaults, and an option
    given with it still wins, as options win over a preset."""
    if not getattr(args, "quick", False):
        return
    given = getattr(args, "given_options", set())
    for dest, value in values.items():
        if dest not in given:
            setattr(args, dest, value)


class SubcommandParser(Parser):
    """A sub-command's parser: options and positional arguments in any order.

    Plain argparse reads `translate RUN --beam-size 4 "12 May 2020"` as RUN with no TEXT (a
    `nargs="*"` positional matches zero words before the option) and then refuses the text;
    intermixed parsing reads the options first and the positionals from what is left, so that
    line means the same as `translate RUN "12 May 2020" --beam-size 4`.
    """

    _intermixing = False

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        # `parse_known_intermixed_args` calls `parse_known_args` for each of its two passes
        # (Python < 3.12); those passes are plain.
        if self._intermixing:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def build_parser(prog: str, description: str, subcommands: Sequence[Subcommand]) -> argparse.ArgumentParser:
    parser = Parser(
        prog=prog,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{prog} {package_version()}",
                        help="print the package's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands",
                                parser_class=SubcommandParser)
    sub.required = True
    for command in subcommands:
        p = sub.add_parser(
            command.name,
            help=command.help,
            description=command.description or command.help,
            formatter_class=HelpFormatter,
        )
        command.add_arguments(p)
        p.set_defaults(_run=command.run, _check=command.check,
                       _uses_tensorflow=command.uses_tensorflow,
                       _runs_on_jax=command.runs_on_jax, _command=command.name)
    return parser


DISTRIBUTION = "attention-models"


def package_version() -> str:
    """The installed version of this package (`setup.py`'s `version`), read without importing
    TensorFlow; from `setup.py` itself for a checkout that was never installed."""
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    import re
    from pathlib import Path

    setup = Path(__file__).resolve().parents[1] / "setup.py"
    try:
        found = re.search(r"""\bversion\s*=\s*["']([^"']+)["']""", setup.read_text("utf-8"))
    except OSError:
        found = None
    return found.group(1) if found else "unknown (not installed)"


def error(prog: str, message: str) -> int:
    """Print `message` as one line on stderr and return the usage exit status."""
    first_line = " ".join(str(message).split())
    print(f"{prog}: error: {first_line}", file=sys.stderr)
    return EXIT_USAGE


def command_prog(parser: argparse.ArgumentParser, args: argparse.Namespace | None) -> str:
    """What a message of the command line starts with: `PROG COMMAND` once a sub-command is
    chosen (as argparse's own errors of a sub-command say: `captioner render: error: ...`),
    `PROG` before."""
    command = getattr(args, "_command", None)
    return f"{parser.prog} {command}" if command else parser.prog


def run_cli(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse `argv`, run the chosen sub-command, and turn user errors into exit status 2.

    Every error is one line on stderr, `PROG COMMAND: error: ...` once a sub-command is chosen,
    whether argparse or the sub-command finds it (`PROG: error: ...` before one is: no command,
    an unknown one)."""
    # TensorFlow's C++ start-up chatter (oneDNN notices, "failed call to cuInit" on machines
    # without a GPU) is not for users; real failures still surface as Python exceptions.
    # Set before the sub-command imports TensorFlow; an explicit setting is kept.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        args, unknown = parser.parse_known_args(argv)
    except SystemExit as exc:  # --help, or a one-line usage error (see `Parser`)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    prog = command_prog(parser, args)
    if unknown:  # pointed at the sub-command's own --help, which lists its options
        return error(prog, f"unrecognized arguments: {' '.join(unknown)} (see {prog} --help)")
    if os.environ.get("KERAS_BACKEND") == "jax" and not getattr(args, "_runs_on_jax", False):
        # The models of every other command are built and run by TensorFlow (exports,
        # tf.data, checkpoints); a JAX-trained run is read there from its weights file.
        what = getattr(args, "_command", None) or parser.prog
        return error(prog, f"{what} runs on the TensorFlow backend; got "
                     "KERAS_BACKEND=jax (which only `train --prepared` and `prepare` use): "
                     "run it without KERAS_BACKEND")
    try:
        check = getattr(args, "_check", None)
        if check is not None:
            check(args)
        if getattr(args, "_uses_tensorflow", True):
            _import_tensorflow_quietly()
        status = args._run(args)
    except UserError as exc:
        return error(prog, str(exc))
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM in training (`runner.Terminated`)
        print(f"{prog}: interrupted" + (f" ({exc})" if str(exc) else ""), file=sys.stderr)
        return 128 + getattr(exc, "signum", signal.SIGINT)
    except BrokenPipeError:  # `... | head -1` stopped reading: not an error of this command
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush is quiet
        return 141  # 128 + SIGPIPE, as a shell reports a command ended by it
    return EXIT_OK if status is None else int(status)


def _import_tensorflow_quietly() -> None:
    """Import TensorFlow with its native start-up lines (printed by C++ before any log level
    applies: oneDNN notices, "Could not find cuda drivers") kept off the terminal.

    Only file descriptor 2 is redirected, only during the import; a failing import still
    raises its Python exception afterwards. Skipped when TF_CPP_MIN_LOG_LEVEL is set to 0.
    """
    if "tensorflow" in sys.modules or os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0":
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (embedded use): nothing to hide
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            try:
                import tensorflow  # noqa: F401
            except Exception:  # the sub-command's own import reports it
                pass
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def not_yet(prog: str, command: str, issue: str) -> Callable[[argparse.Namespace], int]:
    """A handler for a sub-command whose implementation lands with a later issue."""

    def run(args: argparse.Namespace) -> int:
        print(f"{prog} {command}: not implemented yet ({issue})", file=sys.stderr)
        return EXIT_FAILURE

    return run


INVALID_UTF8 = "invalid UTF-8: the undecodable bytes were replaced by U+FFFD"


def decode_line(raw: bytes) -> tuple[str, bool]:
    """One line of input as text, and whether it was valid UTF-8 (else bytes become U+FFFD)."""
    try:
        return raw.decode("utf-8"), True
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace"), False


def read_text_lines(stream: Any = None, arguments: Sequence[str] | None = None,
                    hint: str | None = None) -> tuple[list[str], set[int]]:
    """The lines to process: `arguments` when given, else the lines of `stream` (stdin).

    `hint` is said on stderr when the lines come from a terminal (someone typing, who would
    otherwise see a command waiting silently), never when they come from a pipe or a file.

    Lines are split on "\n" only (a stray "\r" or other control character stays inside its
    line), a final "\r" is dropped, and a line that is not valid UTF-8 is decoded with
    U+FFFD in place of its bad bytes rather than failing the whole input. Arguments the
    shell passed as invalid UTF-8 (Python keeps them as lone surrogates) get the same.

    Returns:
        `(lines, invalid)`: the texts, and the indices of those that were not valid UTF-8.
    """
    if arguments:
        lines, invalid = [], set()
        for i, text in enumerate(arguments):
            line, ok = decode_line(text.encode("utf-8", errors="surrogateescape"))
            lines.append(line)
            if not ok:
                invalid.add(i)
        return lines, invalid
    stream = sys.stdin if stream is None else stream
    if hint and _is_terminal(stream):
        print(hint, file=sys.stderr, flush=True)
    buffer = getattr(stream, "buffer", None)
    if buffer is None:  # a text stream without bytes underneath (io.StringIO)
        return [line.rstrip("\r\n") for line in stream], set()
    data = buffer.read()
    raw_lines = data.split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    lines, invalid = [], set()
    for i, raw in enumerate(raw_lines):
        line, ok = decode_line(raw[:-1] if raw.endswith(b"\r") else raw)
        lines.append(line)
        if not ok:
            invalid.add(i)
    return lines, invalid


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def add_checkpoint_argument(p: argparse.ArgumentParser, saved_model: bool = False) -> None:
    """`--checkpoint best|last|N|PATH`: which of a run directory's checkpoints is used."""
    also = "; not with a SavedModel, which holds the weights chosen at export" if saved_model \
        else ""
    p.add_argument("--checkpoint", metavar="WHICH",
                   help="the run's checkpoint: best (the best validation), last, a step N "
                        "(ckpt-N, numbered by training step) or a path; default: best when "
                        f"the run keeps one, else last{also}")


def add_no_repeat_ngram_argument(p: argparse.ArgumentParser, output: str) -> None:
    """`--no-repeat-ngram N`: the n-gram size no decoded `output` repeats (`common.decoding`;
    0, the default, is off), and when it hurts."""
    p.add_argument("--no-repeat-ngram", type=non_negative_int, default=0, metavar="N",
                   help=f"never repeat an N-gram (N tokens in a row) within one {output} (1: "
                        "no token twice; 0: off). For outputs that should not repeat "
                        "themselves (a caption naming an object twice); it hurts those that "
                        "must: dates (2 turns 1999-03-03, which says '- 03' twice, into "
                        "1999-06-03), numbers, code")


def check_model_path(family: Any, path: str, what: str, checkpoint: str | None = None) -> None:
    """Fails in one line, before TensorFlow is imported, when `path` (a `MODEL` argument) is
    neither a SavedModel nor a run directory of `family` (a `common.family.Family`, whose
    name its `config.json` must hold); `what` names its models ("captioner", "translator").
    `checkpoint` (`--checkpoint`) is refused with a SavedModel, which holds the weights chosen
    at export. Only `config.json` is read."""
    from pathlib import Path

    from common.config import load_json
    from common.export.savedmodel import is_saved_model

    if is_saved_model(path):
        if checkpoint is not None:
            raise UserError("--checkpoint: a SavedModel holds the weights chosen at export "
                            f"time; give it to `{family.name} export`")
        return
    folder = Path(path)
    if not folder.is_dir():
        why = "a file" if folder.exists() else "no such file or folder"
        raise UserError(f"{path} is not a {what} run directory nor a SavedModel ({why})")
    if not (folder / "config.json").is_file():
        raise UserError(f"{path} is not a {what} run directory (no config.json) nor an "
                        f"exported {what} SavedModel (no saved_model.pb)")
    data = load_json(folder / "config.json", f"a {family.name} run config")
    found = data.get("family") if isinstance(data, dict) else None
    if found != family.name:
        raise UserError(f"{path} holds a {found!r} run; expected a {family.name!r} run")


def add_export_arguments(p: argparse.ArgumentParser, default_beam_size: int,
                         row_signature: str, output: str) -> None:
    """The options of `PROG export RUN_DIR OUT_DIR` shared by both families.

    `row_signature` names the signature that takes inputs only; `output` is what is decoded
    ("caption", "output") for the help of `--max-decode-length`.
    """
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("out_dir", metavar="OUT_DIR", help="the SavedModel directory to write")
    add_checkpoint_argument(p)
    p.add_argument("--beam-sizes", type=beam_size_list, default=EXPORT_BEAM_SIZES,
                   help="the beam sizes compiled in (each adds export time and graph size)")
    p.add_argument("--beam-size", type=positive_int, default=default_beam_size,
                   help=f"the default beam size (of the `{row_signature}` signature and the "
                   "server)")
    p.add_argument("--max-decode-length", type=positive_int,
                   help=f"the default longest {output} (default: the run's)")


def exported_beam_sizes(args: argparse.Namespace) -> tuple[int, ...]:
    """The beam sizes to compile: `--beam-sizes` plus the default `--beam-size`."""
    return tuple(sorted(set(args.beam_sizes) | {args.beam_size}))


#: The most threads `serve --intra-threads/--inter-threads` take: a pool starts its threads
#: at once, so a slip of the keyboard (100000) would exhaust the process, not serve.
MAX_THREADS = 1024


def thread_count(text: str) -> int:
    """argparse type: a thread pool's size, 0 (the engine's default) to `MAX_THREADS`."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of threads (0: the engine's "
                                         f"default), got {text!r}") from None
    if not 0 <= value <= MAX_THREADS:
        raise argparse.ArgumentTypeError(f"expected 0 (the engine's default) to {MAX_THREADS} "
                                         f"threads, got {value}")
    return value


def add_serve_arguments(p: argparse.ArgumentParser, prog: str, model_name: str,
                        instances: str, max_batch_size: int = 32) -> None:
    """The options of `PROG serve SAVEDMODEL_DIR` (read by `serve_savedmodel`)."""
    p.add_argument("export_dir", metavar="SAVEDMODEL_DIR",
                   help=f"written by `{prog} export`, or a directory of versions BASE/1, "
                        "BASE/2, ... (TensorFlow Serving's model base path: the highest "
                        "answers, /versions/N reaches any)")
    p.add_argument("--host", default="127.0.0.1",
                   help="the address to bind (put an authenticating proxy in front before "
                        "exposing it)")
    p.add_argument("--port", type=port_number, default=8501,
                   help="the port to listen on (TensorFlow Serving's REST port)")
    p.add_argument("--model-name", default=model_name, help="the NAME in /v1/models/NAME")
    p.add_argument("--max-batch-size", type=positive_int, default=max_batch_size,
                   help=f"the most {instances} merged into one model call")
    p.add_argument("--batch-timeout-ms", type=non_negative_float, default=5.0,
                   help="how long a request waits for others to share its call")
    p.add_argument("--max-request-instances", type=positive_int, default=1024,
                   help=f"the most {instances} one request may hold (more is refused with "
                        "413: a request runs in one model call, however large)")
    p.add_argument("--intra-threads", type=thread_count, default=0, metavar="N",
                   help="the threads one operation uses: TensorFlow's intra-op pool, or a "
                        "CTranslate2 export's intra_threads (0: the engine's default, about "
                        "one per core; 1 on a machine shared with other work)")
    p.add_argument("--inter-threads", type=thread_count, default=0, metavar="N",
                   help="the operations run at once: TensorFlow's inter-op pool, or a "
                        "CTranslate2 export's inter_threads (a merged batch split into N "
                        "parts translated at once, each with --intra-threads; 0: the "
                        "engine's default, TensorFlow's about one per core, CTranslate2's 1)")


def serve_savedmodel(args: argparse.Namespace, kind: str, what: str, **options) -> int:
    """`PROG serve`: check the SavedModel is of `kind`, then serve it until interrupted.

    `options` go to `common.serving.app.serve` (e.g. `max_image_pixels`).
    """
    from common.export.savedmodel import model_versions, require_kind

    for path in model_versions(args.export_dir).values():
        require_kind(path, kind, what)
    from common.serving.app import serve

    serve(args.export_dir, args.model_name, host=args.host, port=args.port,
          max_batch_size=args.max_batch_size, batch_timeout_ms=args.batch_timeout_ms,
          max_request_instances=args.max_request_instances, intra_threads=args.intra_threads,
          inter_threads=args.inter_threads, **options)
    return EXIT_OK


# -- choices read from the registries -----------------------------------------------------------


def choose(registry: Registry, help: str, metavar: str = "NAME") -> dict[str, Any]:
    """`add_argument` keywords for a name of `registry`, whose names `help` lists where it
    says `{names}`. The name is checked where it is used (the registry's one-line error,
    `PROG COMMAND: error: Unknown ...`), as a config file's names are; `--help` lists the
    registry's names, so the two cannot disagree. The registry stays readable as
    `action.type.registry`."""

    def name(text: str) -> str:
        return text

    name.__name__ = registry.kind  # argparse names the type in its messages
    name.registry = registry  # type: ignore[attr-defined]
    return {"type": name, "metavar": metavar,
            "help": help.format(names=", ".join(registry.names()))}


# -- the sub-commands every family has --------------------------------------------------------


def family_main(family: Any, subcommands: Callable[[], Sequence[Subcommand]]
                ) -> Callable[[Sequence[str] | None], int]:
    """A family's `main(argv)`: its command line of `subcommands()`, errors as exit statuses."""

    def main(argv: Sequence[str] | None = None) -> int:
        return run_cli(build_parser(family.name, family.description, subcommands()), argv)

    main.__doc__ = f"The `{family.name}` command line; returns its exit status."
    return main


# The sub-commands every family has: each one's arguments and its handler, given the family.


def _train_arguments(family: Any, p: argparse.ArgumentParser) -> None:
    prog = family.name
    p.add_argument("--preset", **choose(family.presets, "named settings, one of: {names}; "
                                               "options override it"))
    p.add_argument("--config", metavar="FILE",
                   help="a JSON file nested like RUN_DIR/config.json (any part of it): "
                        "over the preset, under the options; it also sets what no option "
                        "does (docs/training.md)")
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="the run directory")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in RUN_DIR from its last checkpoint (its model "
                        "and data are kept: an option that would change them is refused; "
                        "training options may change)")
    p.add_argument("--verbose", type=int, choices=(0, 1, 2), default=1,
                   help="0 silent, 1 a progress bar, 2 one line per epoch")
    p.add_argument("--prepared", metavar="DIR",
                   help=f"train on Keras's JAX backend (KERAS_BACKEND=jax) from a folder of "
                        f"`{prog} prepare`; --distribute then takes none, data-parallel "
                        "(the default: every visible device) or model-parallel")
    p.add_argument("--model-parallel", type=positive_int, default=1, metavar="M",
                   help="with --prepared and --distribute model-parallel: devices on the "
                        "model axis (the Transformer's large matrices split M ways; M "
                        "must divide the device count)")
    p.add_argument("--init-from", metavar="RUN_DIR[:CHECKPOINT]",
                   help="start from another run's weights (its best checkpoint, else its "
                        "last; CHECKPOINT: best, last or a number); the vocabularies must "
                        "be the same")
    add_config_options(p, family)


def _train(family: Any, args: argparse.Namespace) -> int:
    from common.runner import Runner

    prog = family.name
    runner = Runner(family, args.out)
    on_jax = os.environ.get("KERAS_BACKEND") == "jax"
    if args.prepared or on_jax:
        if args.prepared and not on_jax:
            raise UserError("--prepared trains on Keras's JAX backend: run `KERAS_BACKEND=jax "
                            f"{prog} train --prepared DIR ...`")
        if args.init_from:
            raise UserError("--init-from needs the tensorflow trainer (not the jax one: it "
                            "reads TensorFlow checkpoints; docs/jax.md)")
        if args.prepared and (args.preset or args.config):
            raise UserError("--prepared: the prepared folder holds the config; --preset "
                            "and --config apply to `prepare` (or leave --prepared out: "
                            "`train` then prepares the data into RUN_DIR/prepared)")
        if args.prepared:
            records = runner.train_jax(args.prepared, args, resume=args.resume,
                                       verbose=args.verbose,
                                       model_parallel=args.model_parallel)
        else:  # the command TensorFlow takes: the data prepared into the run directory
            distribute, args.distribute = args.distribute, None  # JAX's names, not TF's
            config = runner.make_config(args.preset, args.config, args, resume=args.resume)
            records = runner.train_jax_from_data(
                config, distribute, resume=args.resume, verbose=args.verbose,
                model_parallel=args.model_parallel)
        summary = family.train_summary(records, args.out)
        if summary:
            print(summary)
        return EXIT_OK
    if args.model_parallel != 1:
        raise UserError("--model-parallel splits a model over JAX devices; it applies to "
                        "`train --prepared` on KERAS_BACKEND=jax")
    config = runner.make_config(args.preset, args.config, args, resume=args.resume)
    records = runner.train(config, resume=args.resume, verbose=args.verbose,
                           init_from=args.init_from)
    summary = family.train_summary(records, args.out)
    if summary:
        print(summary)
    return EXIT_OK


def _evaluate(family: Any, args: argparse.Namespace) -> int:
    from common.runner import Runner

    Runner(family, args.run_dir).evaluate(args)
    return EXIT_OK


def _export_arguments(family: Any, p: argparse.ArgumentParser) -> None:
    add_export_arguments(p, default_beam_size=family.export_beam_size,
                         row_signature="serving_default", output=family.output)
    family.add_export_arguments(p)
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT_DIR")


def _export(family: Any, args: argparse.Namespace) -> int:
    from common.runner import Runner

    sizes = exported_beam_sizes(args)
    out = Runner(family, args.run_dir).export(
        args.out_dir, beam_sizes=sizes, default_beam_size=args.beam_size,
        max_decode_length=args.max_decode_length, overwrite=args.overwrite,
        checkpoint=args.checkpoint, **family.export_options(args))
    weights = "int8 weights; " if getattr(args, "quantization", None) == "int8" else ""
    print(f"Exported {out} ({weights}signatures: serving_default, "
          f"{family.export_signature}; beam sizes: {', '.join(map(str, sizes))})")
    return EXIT_OK


def _serve_arguments(family: Any, p: argparse.ArgumentParser) -> None:
    prog = family.name
    add_serve_arguments(p, prog, model_name=family.serve_model_name,
                        instances=family.serve_instances,
                        max_batch_size=family.serve_max_batch_size)
    family.add_serve_arguments(p)


def _serve(family: Any, args: argparse.Namespace) -> int:
    import importlib

    module = importlib.import_module(family.export_module)
    return serve_savedmodel(args, module.KIND, module.WHAT, **family.serve_options(args))


def _prepare_arguments(family: Any, p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", **choose(family.presets, "named settings, one of: {names}; "
                                               "options override it"))
    p.add_argument("--config", metavar="FILE",
                   help="a JSON file nested like RUN_DIR/config.json (any part of it)")
    p.add_argument("--out", required=True, metavar="DIR", help="the folder to write")
    add_config_options(p, family)


def _prepare(family: Any, args: argparse.Namespace) -> int:
    from common.config import to_dict
    from common.runner import Runner
    from common.training.capabilities import explicit_settings, refuse_unsupported

    prog = family.name
    # The folder is for the JAX trainer: what it would not honour is refused here too,
    # whether an option, the preset or the config file sets it.
    runner = Runner(family, args.out)
    config = runner.make_config(args.preset, args.config, args)
    refuse_unsupported(explicit_settings(config.training or {}), "jax", "of `prepare`",
                       sections=to_dict(config), family=family.capabilities)
    out = runner.prepare(config)
    print(f"Prepared {out}: train on JAX with `KERAS_BACKEND=jax {prog} train --prepared "
          f"{out} --out RUN_DIR`")
    return EXIT_OK


def _average_arguments(family: Any, p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--last", type=positive_int, required=True, metavar="N",
                   help="average the last N checkpoints (the run keeps --keep-checkpoints "
                        "of them)")
    p.add_argument("--out", required=True, metavar="NEW_RUN_DIR",
                   help="the run directory to write: the same config and vocabularies, one "
                        "checkpoint of the averaged weights (every command reads it)")


def _average(family: Any, args: argparse.Namespace) -> int:
    from common.runner import Runner

    out = Runner(family, args.run_dir).average(args.out, args.last)
    print(f"Averaged the last {args.last} checkpoints of {args.run_dir} into {out}")
    return EXIT_OK


def family_subcommands(family: Any) -> dict[str, Subcommand]:
    """`train`, `evaluate`, `export` and `serve` of a `common.family.Family`, by name
    (each one's arguments and handler below, given the family)."""
    def command(name, help, arguments, handler, runs_on_jax=False):
        return Subcommand(name, help, arguments, partial(handler, family),
                          runs_on_jax=runs_on_jax)

    commands = [
        command("train", family.train_help, partial(_train_arguments, family), _train,
                runs_on_jax=True),
        command("average", "average a run's last checkpoints into a new run directory",
                partial(_average_arguments, family), _average),
        command("prepare", "write the tokenized training data as NumPy arrays for the JAX "
                "trainer (train --prepared)", partial(_prepare_arguments, family), _prepare,
                runs_on_jax=True),
        command("evaluate", family.evaluate_help, family.add_evaluate_arguments, _evaluate),
        command("export", "export a run as a self-contained SavedModel",
                partial(_export_arguments, family), _export),
        command("serve", "serve a SavedModel over TensorFlow Serving's REST API",
                partial(_serve_arguments, family), _serve),
    ]
    return {command.name: command for command in commands}
