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
from pathlib import Path

from PIL import Image

from captioner.datasets import load_split

ROOT = Path(__file__).resolve().parents[1]


def make_samples(out: Path, seed: int = 2015, image_size: int = 64) -> list[dict]:
    """Write the samples into `out` and return what `samples.json` lists."""
    split = load_split("shapes", "test", num_images=50, seed=seed, image_size=image_size)
    wanted = [(1, "png"), (2, "png"), (3, "png"), (3, "png"), (2, "jpg")]
    chosen, used = [], set()
    for count, ext in wanted:
        record = next(r for r in split if len(r.objects) == count and r.image_id not in used)
        used.add(record.image_id)
        chosen.append((record, ext))

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "assets" / "samples")
    parser.add_argument("--seed", type=int, default=2015)
    parser.add_argument("--image-size", type=int, default=64)
    args = parser.parse_args()
    for sample in make_samples(args.out, args.seed, args.image_size):
        print(f"{args.out / sample['file']}: {sample['captions'][0]}")


if __name__ == "__main__":
    main()
