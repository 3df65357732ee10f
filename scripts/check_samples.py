"""Check the captions of the sample images against the scenes they were drawn from.

    captioner caption runs/demo assets/samples/*.png assets/samples/*.jpg \\
        | python scripts/check_samples.py

Reads `captioner caption`'s text output (`PATH<TAB>CAPTION` a line) from standard input, finds
each image's scene in `assets/samples/samples.json` (its objects: colour, shape, size, box) and
prints each caption with `right` or what is wrong with it
(`captioner.datasets.shapes_metrics.caption_errors`: the objects named, an object named twice,
false relations), then how many were right. `scripts/demo.sh` ends with it.

Exit status: 0 when every caption is right, 1 when one is not, 2 for bad input (a line that is
not `PATH<TAB>CAPTION`, an image with no scene in the file, no line at all).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from captioner.datasets.records import ObjectAnnotation
from captioner.datasets.shapes_metrics import caption_errors
from common.cli import HelpFormatter, Parser, run_cli
from common.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "assets" / "samples" / "samples.json"


def load_scenes(path: Path) -> dict[str, list[ObjectAnnotation]]:
    """`file name -> objects` of a samples file (`assets/samples/samples.json`)."""
    try:
        entries = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"could not read the samples' scenes from {path}: {exc}") from None
    scenes = {}
    for entry in entries:
        objects = []
        for obj in entry["objects"]:
            colour, shape = obj["category"].split()
            objects.append(ObjectAnnotation(
                obj["category"], tuple(obj["box"]),
                attributes={"colour": colour, "shape": shape, "size": obj["size"]}))
        scenes[entry["file"]] = objects
    return scenes


def check(lines: list[str], scenes: dict[str, list[ObjectAnnotation]]) -> list[tuple[str, str,
                                                                                     list[str]]]:
    """`(path, caption, errors)` for each `PATH<TAB>CAPTION` line (blank lines skipped)."""
    results = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        path, tab, caption = line.rstrip("\n").partition("\t")
        if not tab:
            raise UserError(f"line {number} is not PATH<TAB>CAPTION: {line.strip()[:80]!r}")
        name = Path(path).name
        if name not in scenes:
            raise UserError(f"{path}: no scene named {name} in the samples file; expected one "
                            f"of {', '.join(sorted(scenes))}")
        results.append((path, caption, caption_errors(caption, scenes[name])))
    if not results:
        raise UserError("no caption on standard input; expected the output of "
                        "`captioner caption RUN assets/samples/*`")
    return results


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="check_samples.py", description=__doc__.split("\n\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("--samples", default=str(SAMPLES), metavar="FILE",
                   help="the scenes of the sample images (default: assets/samples/samples.json)")
    p.set_defaults(_run=run, _uses_tensorflow=False, _runs_on_jax=True)
    return p


def run(args: argparse.Namespace) -> int:
    results = check(sys.stdin.readlines(), load_scenes(Path(args.samples)))
    for path, caption, errors in results:
        print(f"{path}\t{caption}\t{'right' if not errors else 'WRONG: ' + '; '.join(errors)}")
    right = sum(not errors for _, _, errors in results)
    print(f"{right} of {len(results)} captions right (objects, repeats and relations checked "
          f"against {Path(args.samples).name})")
    return 0 if right == len(results) else 1


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` and checks the captions on standard input; bad input gives 2."""
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
