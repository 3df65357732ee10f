"""Regenerate the README's attention figures from trained runs.

The translation figure, `OUT_DIR/dates_alignment.png`, shows the alignment heatmaps of a few
dates sentences side by side (Bahdanau et al. 2015, figure 3): each output token is a row, each
source token a column. A Bahdanau run shows the clearest alignment:

    seq2seq train --dataset dates --arch bahdanau --preset dates-demo --out /tmp/l/dates-bahdanau
    python scripts/make_readme_figures.py --translation-run /tmp/l/dates-bahdanau --out-dir assets

Deterministic for a given run (greedy decoding, fixed sentences).
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Sequence
from pathlib import Path

from PIL import Image

from common.cli import run_cli
from common.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
DATES_SENTENCES = ("25th of November 2026", "Nov 3, 1999", "tuesday 7 march 2023")
DATES_FIGURE = "dates_alignment.png"
GAP = 36  # pixels between panels
FIGURE_DPI = 150


def stack_side_by_side(images: Sequence[Image.Image], gap: int = GAP) -> Image.Image:
    """One white RGB image with `images` left to right, top-aligned, `gap` pixels apart."""
    if not images:
        raise ValueError("expected at least one image")
    width = sum(im.width for im in images) + gap * (len(images) - 1)
    height = max(im.height for im in images)
    out = Image.new("RGB", (width, height), "white")
    x = 0
    for im in images:
        out.paste(im.convert("RGB"), (x, 0))
        x += im.width + gap
    return out


def translation_figure(run_dir: str | Path, out_path: str | Path,
                       sentences: Sequence[str] = DATES_SENTENCES) -> Path:
    """Translates `sentences` with the run and saves their heatmaps as one PNG.

    Returns:
        The path written.
    """
    from common.viz import alignment_figure
    from seq2seq.inference import Translator
    from seq2seq.visualize import alignment

    translator = Translator.from_run_dir(run_dir)
    panels = []
    for result in translator.translate(list(sentences)):
        if result.error:
            raise UserError(f"{result.source!r}: {result.error}")
        source, target, weights = alignment(result)
        figure = alignment_figure(source, target, weights, title=f"{result.source}\n→ {result.text}")
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=FIGURE_DPI)
        buffer.seek(0)
        panels.append(Image.open(buffer).convert("RGB"))
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stack_side_by_side(panels).save(path, format="PNG", optimize=True)
    return path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="make_readme_figures.py",
                                description=__doc__.split("\n")[0])
    p.add_argument("--translation-run", metavar="RUN_DIR",
                   help=f"a dates translator run: writes OUT_DIR/{DATES_FIGURE}")
    p.add_argument("--out-dir", default=str(ROOT / "assets"), help="where the figures go")
    p.set_defaults(_run=_run)
    return p


def _run(args: argparse.Namespace) -> int:
    if not args.translation_run:
        raise UserError("nothing to draw; expected --translation-run RUN_DIR")
    out_dir = Path(args.out_dir)
    path = translation_figure(args.translation_run, out_dir / DATES_FIGURE)
    print(f"wrote {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
