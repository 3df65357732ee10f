"""Write the sample images in assets/samples/ (the README's demo captions use them).

Four `shapes` test images, chosen to show one, two and three objects, as PNG, and one more as
JPEG (to exercise the JPEG path), with `samples.json` listing each file's reference captions
and objects. Deterministic: rerunning with the same arguments rewrites identical files.

    python scripts/make_sample_images.py            # -> assets/samples/
    python scripts/make_sample_images.py --out /tmp/samples --seed 1
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common.cli import HelpFormatter, Parser, run_cli
from common.errors import UserError
from common.outputs import check_output_folder, reported_write

ROOT = Path(__file__).resolve().parents[1]
MIN_IMAGE_SIZE = 32  # the smallest image the `shapes` dataset draws


def make_samples(out: Path, seed: int = 2015, image_size: int = 64) -> list[dict]:
    """Write the samples into `out` and return what `samples.json` lists."""
    from PIL import Image

    from captioner.datasets import load_split

    try:
        split = load_split("shapes", "test", num_images=50, seed=seed, image_size=image_size)
    except UserError as exc:  # sizes the dataset refuses (too small, too large for memory)
        raise UserError(f"--image-size {image_size}: {exc}") from None
    wanted = [(1, "png"), (2, "png"), (3, "png"), (3, "png"), (2, "jpg")]
    chosen, used = [], set()
    for count, ext in wanted:
        record = next((r for r in split if len(r.objects) == count and r.image_id not in used),
                      None)
        if record is None:
            raise UserError(f"--seed {seed}: the shapes test split of that seed has too few "
                            f"images with {count} object(s); try another seed")
        used.add(record.image_id)
        chosen.append((record, ext))

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    listing = []
    for n, (record, ext) in enumerate(chosen, start=1):
        name = f"shapes_{n}.{ext}"
        image = Image.fromarray(record.image)
        if ext == "jpg":
            image.save(out / name, quality=95)
        else:
            image.save(out / name, optimize=True)
        listing.append({
            "file": name,
            "source": f"shapes test split, seed {seed}, image {record.image_id}",
            "captions": list(record.captions),
            "objects": [{"category": o.category, "size": o.attributes["size"],
                         "box": list(o.box)} for o in record.objects],
        })
    (out / "samples.json").write_text(json.dumps(listing, indent=2) + "\n", encoding="utf-8")
    return listing


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="make_sample_images.py", description=__doc__.split("\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("--out", type=Path, default=None,
                   help="the folder to write the images and samples.json into (made if missing; "
                        "default: the repository's assets/samples)")
    p.add_argument("--seed", type=int, default=2015,
                   help="the seed of the shapes test split the images come from (>= 0)")
    p.add_argument("--image-size", type=int, default=64,
                   help=f"the side of the square images in pixels (>= {MIN_IMAGE_SIZE})")
    # Pillow and NumPy only: no TensorFlow, and no Keras backend is used.
    p.set_defaults(_run=run, _uses_tensorflow=False, _runs_on_jax=True)
    return p


def run(args: argparse.Namespace) -> int:
    if args.image_size < MIN_IMAGE_SIZE:
        raise UserError(f"--image-size must be >= {MIN_IMAGE_SIZE} (the shapes dataset's "
                        f"smallest), got {args.image_size}")
    if args.seed < 0:
        raise UserError(f"--seed must be >= 0, got {args.seed}")
    if args.out is None:
        args.out = ROOT / "assets" / "samples"
    check_output_folder(args.out, "--out")
    with reported_write(args.out, "--out"):
        listing = make_samples(args.out, args.seed, args.image_size)
    for sample in listing:
        print(f"{args.out / sample['file']}: {sample['captions'][0]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` and writes the samples; a `UserError` prints one line and gives 2."""
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
