"""The decoding defaults are typed in once, in `common.decoding.defaults` (and the captioner's
own beside its config): a beam size, beam sizes, length penalty or length limit typed in as a
default anywhere else in the packages fails here, found with `ast` (parameter defaults,
assignments and dataclass fields, `--beam-size`-like options' `default=`, `.get(name, value)`
fallbacks). A preset's or a call's explicit choice is not a default and is not looked at."""

import ast
import textwrap
from pathlib import Path

from common.decoding import defaults, make_strategy

REPO = Path(__file__).resolve().parents[3]
PACKAGES = ("common", "captioner", "seq2seq")
#: The files whose module-level constants may hold a decoding default typed in.
HOMES = ("common/decoding/defaults.py", "captioner/config.py")
#: Names whose default is a decoding default (compared in lower case: `BEAM_SIZE` too).
NAMES = {"beam_size", "default_beam_size", "export_beam_size", "beam_sizes",
         "default_beam_sizes", "export_beam_sizes", "length_penalty", "max_length_limit"}
FLAGS = {"--beam-size", "--beam-sizes", "--length-penalty"}


def is_number(node) -> bool:
    """A number typed in (`3`, `0.6`), or a tuple or list of them (`(1, 2, 3)`)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    if isinstance(node, ast.Tuple | ast.List):
        return bool(node.elts) and all(is_number(e) for e in node.elts)
    return False


def is_name(name) -> bool:
    return isinstance(name, str) and name.lower() in NAMES


def target_name(node) -> str | None:
    return node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)


def typed_in_defaults(source: str, home: bool = False) -> list[int]:
    """The lines of `source` that type in a decoding default (`home`: its module-level
    constants may)."""
    tree = ast.parse(source)
    allowed = {id(node) for node in tree.body} if home else set()
    found = []
    for node in ast.walk(tree):
        pairs = []  # (name, value) of the defaults this node gives
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs += zip((a.arg for a in positional[len(positional) - len(args.defaults):]),
                         args.defaults)
            pairs += [(a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d]
        elif isinstance(node, ast.Assign | ast.AnnAssign) and id(node) not in allowed:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            pairs += [(target_name(t), node.value) for t in targets]
        elif isinstance(node, ast.Call):
            strings = [a.value for a in node.args if isinstance(a, ast.Constant)]
            if FLAGS & set(s for s in strings if isinstance(s, str)):
                pairs += [("beam_size", k.value) for k in node.keywords if k.arg == "default"]
            method = getattr(node.func, "attr", getattr(node.func, "id", None))
            skip = {"get": 0, "setdefault": 0, "pop": 0, "getattr": 1}.get(method)
            if skip is not None and len(node.args) >= skip + 2:
                key = node.args[skip]
                if isinstance(key, ast.Constant):
                    pairs.append((key.value, node.args[skip + 1]))
        found += [value.lineno for name, value in pairs
                  if is_name(name) and value is not None and is_number(value)]
    return sorted(set(found))


def package_files():
    for package in PACKAGES:
        yield from sorted((REPO / package).rglob("*.py"))


def test_the_scan_finds_each_way_a_default_is_typed_in():
    source = textwrap.dedent('''\
        BEAM_SIZE = 3
        def caption(images, beam_size: int = 3, length_penalty=0.6):
            pass
        def search(*, n_best=1, length_penalty: float = 0.6):
            pass
        class Family:
            export_beam_size = 3
        @dataclass
        class Config:
            length_penalty: float = 0.6
            max_length_limit: int = 100
        p.add_argument("--beam-size", type=int, default=3)
        beam = options.get("beam_size", 3)
        sizes = {"beam_sizes": (1, 2)}
        choice = make_strategy("beam", beam_size=4, length_penalty=1.0)
        DEFAULT_BEAM_SIZES = (1, 2, 3)
        beam_size = BEAM_SIZE
        def fine(beam_size=BEAM_SIZE, length_penalty=None, alpha=0.6):
            pass
        ''')
    assert typed_in_defaults(source) == [1, 2, 4, 7, 10, 11, 12, 13, 16]
    # In a home, module-level constants may (the class attributes below them still may not).
    assert typed_in_defaults(source, home=True) == [2, 4, 7, 10, 11, 12, 13]


def test_no_decoding_default_is_typed_in_outside_the_defaults_module():
    assert (REPO / "common/decoding/defaults.py").is_file()
    offenders = []
    for path in package_files():
        name = path.relative_to(REPO).as_posix()
        lines = typed_in_defaults(path.read_text(), home=name in HOMES)
        offenders += [f"{name}:{line}" for line in lines]
    assert offenders == [], ("decoding defaults typed in; read common.decoding.defaults "
                             "(or the family's, beside its config) instead")


def test_make_strategy_reads_the_shared_length_penalty(monkeypatch):
    monkeypatch.setattr("common.decoding.methods.LENGTH_PENALTY", 0.25)
    assert make_strategy("beam", beam_size=2).length_penalty == 0.25
    assert make_strategy("beam", beam_size=2, length_penalty=1.5).length_penalty == 1.5
    assert defaults.LENGTH_PENALTY == 0.6  # Wu et al. (2016)'s, as docs/decoding.md says


def test_the_commands_and_configs_default_to_the_shared_values():
    import argparse

    import captioner.config
    from captioner.family import FAMILY as CAPTIONER
    from common.cli import add_export_arguments
    from seq2seq.config import ModelConfig
    from seq2seq.family import FAMILY as TRANSLATOR
    from seq2seq.family import add_decode_arguments

    def parsed(add, *args):
        parser = argparse.ArgumentParser()
        add(parser)
        return parser.parse_args(list(args))

    evaluate = parsed(CAPTIONER.add_evaluate_arguments, "RUN")
    translate = parsed(add_decode_arguments)
    export = parsed(lambda p: add_export_arguments(p, CAPTIONER.export_beam_size, "s", "o"),
                    "RUN", "OUT")
    assert evaluate.beam_size == export.beam_size == captioner.config.BEAM_SIZE
    assert translate.beam_size == TRANSLATOR.export_beam_size == defaults.BEAM_SIZE
    assert export.beam_sizes == defaults.EXPORT_BEAM_SIZES
    assert ModelConfig().length_penalty == defaults.LENGTH_PENALTY
    assert captioner.config.DecoderConfig().max_length == captioner.config.MAX_LENGTH
