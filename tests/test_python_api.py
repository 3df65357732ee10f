"""Issue 47: the Python API a user sees. Every ```python block of docs/python_api.md and of the
README's "From Python" section runs as written, on tiny runs in place of the runs it names,
and what it prints or writes is checked; every public name resolves, the page's table lists
exactly the packages' `__all__`, and importing the packages imports no TensorFlow.

A block's print line whose comment holds its output (`print(x.shape)  # (2, 7, 10)`; the text
before a `: ` is the output, what follows explains it) is checked to print exactly that.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "python_api.md"
README = REPO / "README.md"
README_SECTION = "From Python"
PACKAGES = ("captioner", "seq2seq", "common")
PANEL = 224 + 32  # a 64 x 64 shapes image's panel and its word strip (the default sizes)


def sections(path: Path, level: str) -> dict[str, str]:
    """The text under each heading of `level` (`##` or `###`) of a Markdown file."""
    parts = re.split(rf"^{level} (.+)$", path.read_text(encoding="utf-8"), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.M | re.S)


def page_blocks() -> dict[str, str]:
    """Each block by the heading above it (the `###` one where there is one); the README's
    block by "README"."""
    blocks = {}
    for heading, text in sections(PAGE, "##").items():
        subsections = re.split(r"^### (.+)$", text, flags=re.M)
        named = [(heading, subsections[0])] + list(zip(subsections[1::2], subsections[2::2]))
        for name, part in named:
            for i, block in enumerate(python_blocks(part)):
                blocks[name if i == 0 else f"{name} {i + 1}"] = block
    (readme,) = python_blocks(sections(README, "##")[README_SECTION])
    blocks["README"] = readme
    return blocks


BLOCKS = page_blocks()


def commented_output(block: str) -> list[str]:
    """What the block's print lines say they print (their comments, before any `: `)."""
    lines = re.findall(r"^print\(.*\)  # (.*)$", block, flags=re.M)
    return [line.split(": ")[0] for line in lines]


def run_block(block: str, places: dict[str, Path]) -> tuple[str, dict]:
    """Runs `block` with the run names of `places` replaced by those folders, from the current
    folder; returns what it printed and its variables."""
    for name, path in places.items():
        block = block.replace(f'"{name}"', repr(str(path)))
    block = block.replace('"assets/', f'"{REPO / "assets"}/')
    namespace: dict = {"__name__": "__python_api_block__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "<python_api block>", "exec"), namespace)
    return out.getvalue(), namespace


def assert_png(path: Path) -> tuple[int, int]:
    """`path` is a PNG that Pillow reads through; its size."""
    with Image.open(path) as image:
        assert image.format == "PNG"
        image.load()
        return image.size


# -- what each block must print or write --------------------------------------------------------

def check_caption_files(out, ns, folder):
    (path, caption), = ns["done"]
    assert Path(path).name == "shapes_2.png" and caption.text.strip()
    (missing, why), = ns["failed"]
    assert missing == "missing.png" and "missing.png" in why
    steps = len(caption.words) + caption.finished  # the step that chose <end> has a map too
    assert caption.attention.shape == (steps, 8 * 8)
    assert out.splitlines()[:2] == [f"{path} -> {caption.text}", f"missing.png -> {why}"]


def check_caption_batch(out, ns, folder):
    lines = out.splitlines()
    assert len(lines) == 2 and all(re.fullmatch(r"\D+ -\d+\.\d+", line) for line in lines), out


def check_captioner_export(out, ns, folder):
    assert (folder / "export" / "demo" / "saved_model.pb").is_file()
    assert out.endswith(" (1, 2, 3, 4, 5)\n") and len(out) > len(" (1, 2, 3, 4, 5)\n")


def check_caption_figures(out, ns, folder):
    assert out.splitlines()[0] == "[PosixPath('out/cap.png'), PosixPath('out/cap.html')]"
    (_, caption), = ns["done"]
    panels = len(caption.words) + 1  # the image, then one panel per word, 5 to a row
    assert assert_png(folder / "out" / "cap.png") == (224 * min(5, panels),
                                                      PANEL * -(-panels // 5))
    assert "<html" in (folder / "out" / "cap.html").read_text(encoding="utf-8").lower()


def check_own_maps(out, ns, folder):
    assert out.splitlines() == commented_output(ns["__block__"])
    assert assert_png(folder / "out" / "mine.png") == (4 * 224, PANEL)


def check_translate(out, ns, folder):
    assert out.splitlines()[:3] == ["'25th of November 2026' -> 2026-11-25",
                                    "'Nov 3, 1999' -> 1999-11-03",
                                    "' ' -> empty line: nothing to translate"]
    result = ns["results"][1]
    assert result.attention.shape[1] == len(result.source_tokens) >= 4
    assert out.splitlines()[-1] == ("[PosixPath('out/dates-1.png'), "
                                    "PosixPath('out/dates-2.png')]")
    for name in ("dates-1.png", "dates-2.png"):
        assert_png(folder / "out" / name)
    assert not (folder / "out" / "dates-3.png").exists()  # the empty line gets no plot


def check_translator_export(out, ns, folder):
    assert (folder / "export" / "dates" / "saved_model.pb").is_file()
    assert out.splitlines() == commented_output(ns["__block__"]) == ["2026-11-25"]


def check_printed_as_commented(out, ns, folder):
    expected = commented_output(ns["__block__"])
    assert expected and out.splitlines() == expected


def check_readme(out, ns, folder):
    caption, translation = out.splitlines()
    assert caption.strip() and translation == "1999-11-03"


CHECKS = {
    "Caption images": check_caption_files,
    "Caption pixels": check_caption_batch,
    "Export, then caption with the export": check_captioner_export,
    "See where it looked": check_caption_figures,
    "Your own model's maps": check_own_maps,
    "Translate text": check_translate,
    "Export, then translate with the export": check_translator_export,
    "Soft attention, functional": check_printed_as_commented,
    "Hard attention, subclassed": check_printed_as_commented,
    "Multi-head self-attention, padding masked": check_printed_as_commented,
    "README": check_readme,
}


def test_every_block_has_a_check():
    assert set(BLOCKS) == set(CHECKS)


# The run each name stands for: a session fixture, trained only for the blocks that name it.
RUNS = {"runs/demo": "trained_captioner", "runs/dates-transformer": "dates_transformer"}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BLOCKS))
def test_the_example_runs_as_documented(name, request, tmp_path, monkeypatch):
    places = {run: request.getfixturevalue(fixture) for run, fixture in RUNS.items()
              if f'"{run}"' in BLOCKS[name]}
    monkeypatch.chdir(tmp_path)
    out, namespace = run_block(BLOCKS[name], places)
    namespace["__block__"] = BLOCKS[name]
    CHECKS[name](out, namespace, tmp_path)


# -- the names --------------------------------------------------------------------------------

def documented_names() -> set[str]:
    """The names the page's table lists, as `package.name`."""
    table = sections(PAGE, "##")["The names"]
    return {match for match in re.findall(r"^\| `([a-z0-9]+\.\w+)", table, flags=re.M)}


def test_every_public_name_resolves_and_is_in_the_table():
    listed = set()
    for package in PACKAGES:
        module = importlib.import_module(package)
        assert module.__all__ and len(set(module.__all__)) == len(module.__all__)
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{package}.{name}"
            listed.add(f"{package}.{name}")
    # The renderers' siblings (`render_caption_gif`, `render_head_grid`) share a row.
    documented = documented_names() | {"common.render_caption_gif", "common.render_head_grid"}
    assert documented == listed


def test_a_name_not_listed_is_an_attribute_error():
    import captioner

    with pytest.raises(AttributeError, match="has no attribute 'CaptioningModel'"):
        captioner.CaptioningModel  # noqa: B018


def test_importing_the_packages_imports_no_tensorflow():
    code = ("import sys\nimport captioner, seq2seq, common\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'tensorflow', 'keras'}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"
