"""Regenerate the README's attention figures from trained runs, training those that are absent.

    nice -n 19 python scripts/experiments/make_readme_figures.py  # the captioner figures
    python scripts/experiments/make_readme_figures.py --translation-run RUN_DIR  # + dates heatmaps

Caption overlays (Xu et al. 2015, figures 2-3: the image, then each word's attention over it,
drawn as a mask that dims what was not attended; see docs/visualization.md):

- `OUT_DIR/overlay_example.png`: no model, a hand-made attention map per word over a light
  320x240 picture (a red disc and a blue square on light grey), to show how the mask reads on
  a light image and that panels keep the picture's 4:3. Drawn in a second, nothing trained.
- `OUT_DIR/overlay_shapes.png`: a `shapes` sample captioned by the demo run
  (`captioner train --dataset shapes --preset demo --attention soft --out runs/demo`, trained
  here when `--shapes-run` holds no checkpoint; 6-10 minutes on a laptop CPU).
- `OUT_DIR/overlay_coco_<image id>.png`: two photos of `../shared/data/coco-mini` captioned
  by a small captioner trained from scratch on its 26 photos (`COCO_TRAIN_OPTIONS`, a few
  minutes): no pretrained weights can be downloaded here, so it has memorized its training
  captions rather than learned to caption. Each photo's attribution is printed from
  `ATTRIBUTION.tsv`.

Beside each model's overlay, `OUT.json` keeps the caption result (`captioner caption --json`
form), so a new drawing style can be applied without the runs:
`captioner render assets/overlay_shapes.json --image assets/samples/shapes_2.png --out ...`.

The translation figure, `OUT_DIR/dates_alignment.png`, shows the alignment heatmaps of a few
dates sentences side by side (Bahdanau et al. 2015, figure 3): each output token is a row, each
source token a column. A Bahdanau run shows the clearest alignment:

    seq2seq train --dataset dates --arch bahdanau --preset dates-demo --out /tmp/l/dates-bahdanau
    python scripts/experiments/make_readme_figures.py --only dates \\
        --translation-run /tmp/l/dates-bahdanau

Deterministic for given runs (beam search or greedy decoding, fixed inputs).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from common.cli import HelpFormatter, Parser, run_cli
from common.errors import UserError
from common.outputs import check_output_file, check_output_folder, reported_write

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ("example", "shapes", "coco", "dates")
SHAPES_SAMPLE = ROOT / "assets" / "samples" / "shapes_2.png"
SHAPES_TRAIN_OPTIONS = ("--dataset", "shapes", "--preset", "demo", "--attention", "soft")
COCO_DATA = ROOT.parent / "shared" / "data" / "coco-mini"
COCO_PHOTOS = ("000000252639.jpg", "000000525891.jpg")
COCO_TRAIN_OPTIONS = ("--dataset", "coco", "--encoder", "small-cnn", "--weights", "none",
                      "--image-size", "112", "--embedding-dim", "128", "--units", "256",
                      "--attention-units", "128", "--dropout", "0.1", "--epochs", "40",
                      "--batch-size", "16", "--learning-rate", "0.002", "--seed", "1")
OVERLAY_PANEL = 144  # pixels per panel; keeps each figure well under 300 KB
OVERLAY_COLUMNS = 6
EXAMPLE_FIGURE = "overlay_example.png"
EXAMPLE_WORDS = ("a", "red", "disc", "and", "a", "blue", "square")
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
    with reported_write(path, "--out-dir"):
        path.parent.mkdir(parents=True, exist_ok=True)
        stack_side_by_side(panels).save(path, format="PNG", optimize=True)
    return path


def example_picture() -> Image.Image:
    """320x240 light grey with a red disc (left) and a blue square (right)."""
    picture = Image.new("RGB", (320, 240), (215, 215, 215))
    draw = ImageDraw.Draw(picture)
    draw.ellipse([40, 60, 140, 160], fill=(220, 30, 30))
    draw.rectangle([200, 120, 280, 200], fill=(30, 60, 200))
    return picture


def example_attention(grid: tuple[int, int] = (6, 8)) -> np.ndarray:
    """Hand-made `(7, h, w)` maps for `EXAMPLE_WORDS`: a bump on the object each word is
    about, both objects for "and", the whole picture for the articles."""
    rows, cols = grid
    ys, xs = (np.arange(rows) + 0.5) / rows, (np.arange(cols) + 0.5) / cols

    def bump(x: float, y: float, sigma: float = 0.12) -> np.ndarray:
        return np.exp(-((xs[None, :] - x) ** 2 + (ys[:, None] - y) ** 2) / (2 * sigma ** 2))

    disc, square = bump(90 / 320, 110 / 240), bump(240 / 320, 160 / 240)
    everywhere = np.ones(grid)
    maps = [everywhere, disc, disc, disc + square, everywhere, square, square]
    return np.stack([m / m.sum() for m in maps]).astype(np.float32)


def example_figure(out_path: str | Path) -> Path:
    """The mask over a light picture, with hand-made attention (no model)."""
    from common.viz import render_caption_overlay

    path = Path(out_path)
    with reported_write(path, "--out-dir"):
        render_caption_overlay(example_picture(), list(EXAMPLE_WORDS), example_attention(),
                               path, panel_size=OVERLAY_PANEL, columns=4)
        Image.open(path).convert("RGB").save(path, format="PNG", optimize=True)
    return path


def ensure_captioner_run(run_dir: str | Path, train_options: Sequence[str]) -> Path:
    """`run_dir`, trained first with `captioner train OPTIONS --out RUN_DIR` when it has no
    finished checkpoint (an interrupted run is resumed)."""
    from captioner.cli import main as captioner_main
    from common.training import RunDir

    run_dir = Path(run_dir)
    if run_dir.is_dir() and (RunDir(run_dir).read_status() or {}).get("state") == "finished":
        return run_dir
    if (run_dir / "config.json").is_file():
        argv = ["train", "--out", str(run_dir), "--resume"]
    else:
        argv = ["train", *train_options, "--out", str(run_dir)]
    print("running: captioner " + " ".join(argv), file=sys.stderr)
    if captioner_main(argv) != 0:
        raise UserError(f"training {run_dir} failed; see the message above")
    return run_dir


def caption_overlays(run_dir: str | Path, images: Sequence[Path],
                     out_paths: Sequence[Path]) -> list[dict]:
    """Captions `images` with the run (beam 3) and draws each one's overlay to its out path,
    the caption result beside it as `OUT.json`.

    Returns:
        The caption results, as `captioner caption --json` prints them.
    """
    from captioner.inference import load_run
    from captioner.visualize import as_result, attention_kind, write_caption_figures

    run = load_run(run_dir)
    done, failed = run.caption_files([str(p) for p in images], beam_size=3)
    if failed:
        raise UserError(f"{failed[0][0]}: {failed[0][1]}")
    results = []
    for (path, caption), out in zip(done, out_paths):
        result = as_result(caption, run.grid_shape, path, attention_kind(run))
        with reported_write(out, "--out-dir"):
            out.parent.mkdir(parents=True, exist_ok=True)
        write_caption_figures([result], overlay=out, panel_size=OVERLAY_PANEL,
                              columns=OVERLAY_COLUMNS, overlay_option="--out-dir")
        with reported_write(out, "--out-dir"):
            _shrink_png(out)
        saved = {**result, "image": _relative(Path(result["image"]))}
        with reported_write(out.with_suffix(".json"), "--out-dir"):
            out.with_suffix(".json").write_text(json.dumps(saved) + "\n", encoding="utf-8")
        results.append(result)
    return results


def _relative(path: Path) -> str:
    """`path` relative to the repository when it lies inside it (so the JSON is portable)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _shrink_png(path: Path) -> None:
    """Re-saves a photo figure with a 256-colour palette; PNG keeps photos large otherwise."""
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT)
    small.save(path, format="PNG", optimize=True)


def coco_attributions(data_dir: Path, names: Sequence[str]) -> list[str]:
    """`file: license, source` lines for `names` from the data's `ATTRIBUTION.tsv`."""
    table = data_dir / "ATTRIBUTION.tsv"
    try:
        text = table.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"--coco-data {data_dir}: no ATTRIBUTION.tsv (the photos' licenses)") \
            from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--coco-data {data_dir}: cannot read ATTRIBUTION.tsv ({exc})") from None
    rows = {}
    for line in text.splitlines()[1:]:
        fields = line.split("\t")
        if len(fields) >= 3:
            rows[fields[0]] = fields
    missing = [name for name in names if name not in rows]
    if missing:
        raise UserError(f"{table}: no attribution for {', '.join(missing)}")
    return [f"{name}: {rows[name][1]}, {rows[name][2]}" for name in names]


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="make_readme_figures.py", description=__doc__.split("\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("--only", action="append", choices=FIGURES,
                   help="draw only these figures (repeatable; default: example, shapes and "
                        "coco, and dates when --translation-run is given)")
    p.add_argument("--translation-run", metavar="RUN_DIR",
                   help=f"a dates translator run: writes OUT_DIR/{DATES_FIGURE}")
    p.add_argument("--shapes-run", metavar="RUN_DIR", default=str(ROOT / "runs" / "demo"),
                   help="the shapes demo captioner (trained here unless it is a finished run)")
    p.add_argument("--coco-run", metavar="RUN_DIR",
                   default=str(ROOT / "runs" / "coco-mini-figures"),
                   help="the coco-mini captioner (trained here unless it is a finished run)")
    p.add_argument("--coco-data", metavar="DIR", default=str(COCO_DATA),
                   help="the coco-mini folder (images, annotations, ATTRIBUTION.tsv)")
    p.add_argument("--out-dir", default=str(ROOT / "assets"), help="where the figures go")
    p.set_defaults(_run=_run)
    return p


def _outputs(figures: Sequence[str], out_dir: Path) -> list[Path]:
    """The files the chosen figures write into `out_dir` (each overlay with its `.json`)."""
    paths = []
    if "example" in figures:
        paths.append(out_dir / EXAMPLE_FIGURE)
    if "dates" in figures:
        paths.append(out_dir / DATES_FIGURE)
    overlays = ([out_dir / "overlay_shapes.png"] if "shapes" in figures else []) + (
        _coco_overlays(out_dir) if "coco" in figures else [])
    for path in overlays:
        paths += [path, path.with_suffix(".json")]
    return paths


def _coco_overlays(out_dir: Path) -> list[Path]:
    """`OUT_DIR/overlay_coco_<image id>.png` of each of `COCO_PHOTOS`."""
    return [out_dir / f"overlay_coco_{Path(name).stem.lstrip('0')}.png" for name in COCO_PHOTOS]


def _check_inputs_and_outputs(args: argparse.Namespace, figures: Sequence[str]) -> list[str]:
    """Every input and output checked before anything is drawn or trained; returns the coco
    photos' attribution lines (none unless coco is drawn)."""
    if "dates" in figures and not args.translation_run:
        raise UserError("--only dates: expected --translation-run RUN_DIR")
    if args.translation_run and "dates" not in figures:
        raise UserError("--translation-run is only read for the dates figure; add --only dates")
    if "dates" in figures and not (Path(args.translation_run) / "config.json").is_file():
        raise UserError(f"--translation-run {args.translation_run}: not a translator run "
                        "directory (no config.json); make one with `seq2seq train`")
    attributions = []
    inputs: list[Path] = [SHAPES_SAMPLE] if "shapes" in figures else []
    if "coco" in figures:
        data = Path(args.coco_data)
        if not (data / "train2017").is_dir():
            raise UserError(f"--coco-data {data}: no train2017 folder of photos")
        for name in COCO_PHOTOS:
            if not (data / "train2017" / name).is_file():
                raise UserError(f"--coco-data {data}: no train2017/{name}")
            inputs.append(data / "train2017" / name)
        attributions = coco_attributions(data, COCO_PHOTOS)
    for figure, option in (("shapes", "--shapes-run"), ("coco", "--coco-run")):
        run_dir = Path(getattr(args, option[2:].replace("-", "_")))
        if figure in figures and not run_dir.is_dir():  # to be trained: made here
            check_output_folder(run_dir, option)
    out_dir = check_output_folder(args.out_dir, "--out-dir")
    if out_dir.is_dir():  # else nothing can be in the way
        for path in _outputs(figures, out_dir):
            check_output_file(path, "--out-dir", inputs=inputs)
    return attributions


def _run(args: argparse.Namespace) -> int:
    figures = args.only or ["example", "shapes", "coco"] + (["dates"] if args.translation_run
                                                            else [])
    attributions = _check_inputs_and_outputs(args, figures)
    out_dir = Path(args.out_dir)
    written = []
    if "example" in figures:
        written.append(example_figure(out_dir / EXAMPLE_FIGURE))
    if "dates" in figures:
        written.append(translation_figure(args.translation_run, out_dir / DATES_FIGURE))
    if "shapes" in figures:
        run = ensure_captioner_run(args.shapes_run, SHAPES_TRAIN_OPTIONS)
        out = out_dir / "overlay_shapes.png"
        (result,) = caption_overlays(run, [SHAPES_SAMPLE], [out])
        print(f"{SHAPES_SAMPLE.name}: {result['caption']}")
        written.append(out)
    if "coco" in figures:
        data = Path(args.coco_data)
        run = ensure_captioner_run(args.coco_run, [*COCO_TRAIN_OPTIONS, "--data-dir", str(data)])
        outs = _coco_overlays(out_dir)
        results = caption_overlays(run, [data / "train2017" / n for n in COCO_PHOTOS], outs)
        for result, line in zip(results, attributions):
            print(f"{line}\n  caption: {result['caption']}")
        written.extend(outs)
    for path in written:
        print(f"wrote {path} ({path.stat().st_size // 1024} KB)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
