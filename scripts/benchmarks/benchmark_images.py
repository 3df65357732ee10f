"""Image costs of the captioner's input paths: the re-encoding an image takes on its way to an
exported model's graph, and the dataset load check.

    python scripts/benchmarks/benchmark_images.py --rounds 5 \\
        --out docs/records/benchmarks/images_cpu.json

`--op encode`: a photo-like `--height x --width` RGB image (smooth colour waves and noise, as a
camera's) re-encoded as `common.images.lossless_bytes` does (BMP, what the graph gets for a TIFF,
a CMYK JPEG or a photo with an EXIF turn), as PNG (what it got before), and as PNG at zlib's
fastest level (what `lossless_bytes` writes when the BMP would be over `REENCODED_GROWTH` times
the bytes sent), each then decoded by `common.images.decode_in_graph`; prints the median
milliseconds of each step and the ratios to BMP, and checks that all decode to the image's
pixels.

`--op growth`: a TIFF of one colour with a rectangle (`--height x --width`, deflate: a small
file of many pixels) prepared for the graph as `captioner serve` does (`prepare_for_graph`,
bounded by `REENCODED_GROWTH`) and as an unbounded BMP; prints the bytes each holds against the
bytes sent, and the time each takes.

`--op load-check`: the JPEGs of a folder (default `../shared/data/coco-mini/train2017`) checked
as a caption dataset is loaded, by `captioner.datasets.records.check_image` (the header, PIL's
verify, and a JPEG's end-of-image marker after its image data), against PIL's header and verify
alone (the check before it); prints the median microseconds per image of each and their ratio.

Both alternate the forms and reverse their order every other round; with `--out` the
figures are written as JSON.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from pathlib import Path

from common.cli import HelpFormatter, Parser, run_cli
from common.errors import UserError
from common.outputs import check_output_file, reported_write

REPO = Path(__file__).resolve().parents[2]
DEFAULT_JPEGS = REPO / ".." / "shared" / "data" / "coco-mini" / "train2017"


def photo(height: int, width: int):
    """A photo-like RGB image: smooth colour waves with a little noise (so PNG compresses it
    as it does a camera's picture, not as a flat drawing)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width]
    waves = np.stack([127 + 120 * np.sin(x / 37 + y / 53 + p) for p in (0, 2, 4)], -1)
    noisy = waves + rng.integers(-8, 8, waves.shape)
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8), "RGB")


def encode_forms(args):
    """`{form: step}` for `--op encode`, each step re-encoding and decoding in the graph."""
    import numpy as np
    import tensorflow as tf

    from common.images import decode_in_graph, lossless_bytes

    image = photo(args.height, args.width)
    pixels = np.asarray(image)

    def png(picture):
        buffer = io.BytesIO()
        picture.save(buffer, format="PNG")
        return buffer.getvalue()

    def step(encode):
        def run():
            started = time.perf_counter()
            data = encode(image)
            encoded = time.perf_counter()
            decoded = decode_in_graph(tf.constant(data)).numpy()
            done = time.perf_counter()
            if not np.array_equal(decoded, pixels):
                raise AssertionError("the graph decoded other pixels than the image's")
            return {"encode": (encoded - started) * 1e3, "decode": (done - encoded) * 1e3,
                    "bytes": len(data)}
        return run

    # "png-fast": what `lossless_bytes` writes when the BMP would outgrow its budget.
    return {"bmp": step(lossless_bytes), "png": step(png),
            "png-fast": step(lambda picture: lossless_bytes(picture, budget=0))}, "ms"


def flat_tiff(height: int, width: int) -> bytes:
    """A TIFF (deflate) of one colour with one rectangle of another: a small file of many
    pixels."""
    from PIL import Image

    image = Image.new("RGB", (width, height), (10, 200, 30))
    image.paste((200, 20, 90), (width // 8, height // 8, width // 2, height // 2))
    buffer = io.BytesIO()
    image.save(buffer, format="TIFF", compression="tiff_deflate")
    return buffer.getvalue()


def growth_forms(args):
    """`{form: step}` for `--op growth`: a small TIFF of many pixels prepared for the graph
    as the server does (`prepare_for_graph`, bounded) and as an unbounded BMP."""
    import numpy as np
    import tensorflow as tf

    from common.images import decode_in_graph, load_image, lossless_bytes, prepare_for_graph

    data = flat_tiff(args.height, args.width)
    pixels = np.asarray(load_image(data, "flat.tiff"))

    def step(prepare):
        def run():
            started = time.perf_counter()
            prepared = prepare(data)
            done = time.perf_counter()
            if not np.array_equal(decode_in_graph(tf.constant(prepared)).numpy(), pixels):
                raise AssertionError("the graph decoded other pixels than the image's")
            return {"prepare": (done - started) * 1e3, "bytes": len(prepared), "sent": len(data)}
        return run

    return {"bmp": step(lambda d: lossless_bytes(load_image(d, "flat.tiff"))),
            "bounded": step(lambda d: prepare_for_graph(d, "flat.tiff"))}, "ms"


def load_check_forms(args):
    """`{form: step}` for `--op load-check`, each checking every JPEG of the folder once."""
    from PIL import Image

    from captioner.datasets.records import check_image

    paths = jpegs(args.folder)

    def header_and_verify(path):
        with Image.open(path) as image:
            size = image.size
            image.verify()
        return size

    def step(check):
        def run():
            started = time.perf_counter()
            for path in paths:
                check(path)
            return {"per_image": (time.perf_counter() - started) / len(paths) * 1e6,
                    "images": len(paths)}
        return run

    return {"check_image": step(check_image), "verify": step(header_and_verify)}, "us"


def jpegs(folder: str) -> list[Path]:
    """The `.jpg` files of `folder`, sorted; none when it is not a folder."""
    return sorted(Path(folder).glob("*.jpg")) if Path(folder).is_dir() else []


OPS = {"encode": encode_forms, "growth": growth_forms, "load-check": load_check_forms}
# The step figure each op's summary is the median of, and the ratio it reports.
MAIN = {"encode": ("encode", "png", "bmp"), "growth": ("bytes", "bmp", "bounded"),
        "load-check": ("per_image", "check_image", "verify")}


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="benchmark_images.py", description=__doc__.split("\n\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("--op", default="encode", choices=sorted(OPS),
                   help="what to time (see the module's docstring)")
    p.add_argument("--height", type=int, default=3000, help="--op encode, growth: image rows")
    p.add_argument("--width", type=int, default=4000, help="--op encode, growth: image columns")
    p.add_argument("--folder", default=str(DEFAULT_JPEGS),
                   help="--op load-check: a folder of JPEG photos")
    p.add_argument("--rounds", type=int, default=5, help="rounds, the forms alternating")
    p.add_argument("--out", help="also write the results to this JSON file")
    p.set_defaults(_run=run)
    return p


def main(argv=None) -> int:
    """Parses `argv` and runs the benchmark; a bad option prints one line and gives 2."""
    return run_cli(build_parser(), argv)


def run(args: argparse.Namespace) -> int:
    for name in ("height", "width", "rounds"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.op == "load-check" and not jpegs(args.folder):
        raise UserError(f"--folder {args.folder}: no .jpg files; expected a folder of JPEG "
                        "photos")
    if args.out:
        check_output_file(args.out, "--out")

    forms, unit = OPS[args.op](args)
    names = list(forms)
    for name in names:
        forms[name]()  # warm up: imports, the graph's first call, the file cache
    rounds = {name: [] for name in names}
    for round_ in range(args.rounds):
        for name in (names if round_ % 2 == 0 else names[::-1]):
            rounds[name].append(forms[name]())
    key, top, bottom = MAIN[args.op]
    medians = {name: {field: statistics.median(r[field] for r in results)
                      for field in results[0]} for name, results in rounds.items()}
    ratio = medians[top][key] / medians[bottom][key]
    report = {"op": args.op, "rounds": args.rounds, "unit": unit, "runs": rounds,
              "median": medians, f"{top}_over_{bottom}": ratio}
    if args.op == "encode":
        report["image"] = [args.height, args.width]
        total = {name: m["encode"] + m["decode"] for name, m in medians.items()}
        report["png_over_bmp_with_decode"] = total["png"] / total["bmp"]
        report["png_fast_over_bmp"] = medians["png-fast"]["encode"] / medians["bmp"]["encode"]
        report["png_fast_over_bmp_with_decode"] = total["png-fast"] / total["bmp"]
        print(f"{args.height} x {args.width} photo: BMP encode {medians['bmp']['encode']:.0f} "
              f"ms + graph decode {medians['bmp']['decode']:.0f} ms; PNG "
              f"{medians['png']['encode']:.0f} + {medians['png']['decode']:.0f} ms (PNG / BMP: "
              f"encode {ratio:.1f}x, with the decode {report['png_over_bmp_with_decode']:.1f}x); "
              f"PNG at zlib level 1 {medians['png-fast']['encode']:.0f} + "
              f"{medians['png-fast']['decode']:.0f} ms ({report['png_fast_over_bmp']:.1f}x, "
              f"{report['png_fast_over_bmp_with_decode']:.1f}x)")
    elif args.op == "growth":
        report["image"] = [args.height, args.width]
        sent, bmp, bounded = (medians["bmp"]["sent"], medians["bmp"]["bytes"],
                              medians["bounded"]["bytes"])
        print(f"{args.height} x {args.width} TIFF of {sent / 1e3:.0f} KB: as BMP "
              f"{bmp / 1e6:.1f} MB ({bmp / sent:.0f}x the bytes sent) in "
              f"{medians['bmp']['prepare']:.0f} ms; bounded {bounded / 1e6:.2f} MB "
              f"({bounded / sent:.1f}x) in {medians['bounded']['prepare']:.0f} ms")
    else:
        report["folder"] = args.folder
        print(f"{medians['verify']['images']:.0f} JPEGs: check_image "
              f"{medians['check_image']['per_image']:.0f} us per image, header and verify alone "
              f"{medians['verify']['per_image']:.0f} us (check_image / verify {ratio:.2f})")
    if args.out:
        with reported_write(args.out, "--out"), open(args.out, "w", encoding="utf-8") as f:
            f.write(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
