"""Image files users are likely to have, good and bad, generated in memory for the tests.

`good_images()` and `bad_images()` return name -> bytes (file name suffixes included: the
JPEG named `.png` is one of them); `write_cases(folder)` writes them out, and adds the cases
that only exist on disk (a directory, a missing path).
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image


def _encode(image: Image.Image, fmt: str, **kwargs) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **kwargs)
    return buffer.getvalue()


def _rgb(height: int = 40, width: int = 48, seed: int = 0) -> Image.Image:
    """A smooth colourful picture (JPEG keeps it recognizable)."""
    y, x = np.mgrid[0:height, 0:width]
    rng = np.random.default_rng(seed)
    phase = rng.uniform(0, 6, 3)
    pixels = np.stack([127 + 120 * np.sin(x / 7 + y / 11 + p) for p in phase], -1)
    return Image.fromarray(pixels.astype(np.uint8), "RGB")


def png_chunk(kind: bytes, data: bytes) -> bytes:
    """One PNG chunk: length, type, data and CRC."""
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


def bomb_png(width: int = 40_000, height: int = 40_000) -> bytes:
    """A ~100-byte PNG whose header declares `width` x `height` pixels."""
    chunk = png_chunk
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00" * 64)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels)
            + chunk(b"IEND", b""))


def good_images() -> dict[str, bytes]:
    """Valid images of every kind the captioner must accept."""
    rgb = _rgb()
    frames = [_rgb(seed=1).convert("P"), _rgb(seed=2).convert("P")]
    sixteen = (np.asarray(rgb.convert("L"), np.uint16) * 257).astype(np.uint16)
    return {
        "rgb.png": _encode(rgb, "PNG"),
        "rgba.png": _encode(rgb.convert("RGBA"), "PNG"),
        "gray.png": _encode(rgb.convert("L"), "PNG"),
        "gray16.png": _encode(Image.fromarray(sixteen), "PNG"),
        "palette.png": _encode(rgb.convert("P"), "PNG"),
        "cmyk.jpg": _encode(rgb.convert("CMYK"), "JPEG", quality=95),
        "photo.jpg": _encode(rgb, "JPEG", quality=95),
        "animated.gif": _encode(frames[0], "GIF", save_all=True, append_images=frames[1:],
                                duration=100, loop=0),
        "one-pixel.png": _encode(Image.new("RGB", (1, 1), (200, 30, 30)), "PNG"),
        "wide.png": _encode(_rgb(2, 4000), "PNG"),
        "image.bmp": _encode(rgb, "BMP"),
        # BMPs TensorFlow's decoder does not read as Pillow does: a colour table (it takes the
        # indices for grey levels), one bit a pixel (it refuses), and four channels.
        "palette.bmp": _encode(rgb.convert("P"), "BMP"),
        "gray.bmp": _encode(rgb.convert("L"), "BMP"),
        "one-bit.bmp": _encode(rgb.convert("1"), "BMP"),
        "rgba.bmp": _encode(rgb.convert("RGBA"), "BMP"),
        "image.tiff": _encode(rgb, "TIFF"),
        "image.webp": _encode(rgb, "WEBP", lossless=True),
        "jpeg-named.png": _encode(rgb, "JPEG", quality=95),
        "phone-photo.jpg": exif_turned(rgb, "JPEG", 6, quality=95),  # shown turned clockwise
        # Images TensorFlow's decoders read otherwise than Pillow, or refuse at 3 channels:
        # a GIF whose first frame is smaller than its canvas and offset in it (TensorFlow
        # crops it), a GIF with a transparent colour (TensorFlow makes it black), a WebP with
        # alpha and an animated WebP.
        "offset-frame.gif": gif_with_offset_frame(),
        "transparent.gif": _encode(_rgb(seed=3).quantize(8), "GIF", transparency=1),
        "rgba.webp": _encode(_translucent(rgb), "WEBP", lossless=True),
        "animated.webp": _encode(_rgb(seed=1), "WEBP", save_all=True, lossless=True,
                                 append_images=[_rgb(seed=2)], duration=100),
    }


def _translucent(image: Image.Image) -> Image.Image:
    rgba = image.convert("RGBA")
    rgba.putalpha(Image.linear_gradient("L").resize(image.size))
    return rgba


def gif_with_offset_frame(canvas: int = 48, side: int = 24, left: int = 8,
                          top: int = 16) -> bytes:
    """A GIF89a whose only frame, `side` x `side` pixels of four colours, sits at (`left`,
    `top`) of a `canvas` x `canvas` screen (Pillow always writes a first frame covering the
    screen). LZW with 9-bit codes, a clear code every 250 codes so the table never grows."""
    import struct

    rng = np.random.default_rng(5)
    pixels = rng.integers(1, 4, side * side).tolist()
    codes = []
    for start in range(0, len(pixels), 250):
        codes += [256, *pixels[start:start + 250]]
    codes.append(257)  # end of information
    packed, bits, nbits = bytearray(), 0, 0
    for code in codes:
        bits |= code << nbits
        nbits += 9
        while nbits >= 8:
            packed.append(bits & 0xFF)
            bits, nbits = bits >> 8, nbits - 8
    if nbits:
        packed.append(bits & 0xFF)
    blocks = bytearray([8])  # the minimum code size
    for start in range(0, len(packed), 255):
        chunk = packed[start:start + 255]
        blocks += bytes([len(chunk)]) + chunk
    blocks.append(0)
    palette = bytes([0, 0, 0, 230, 40, 40, 40, 200, 60, 50, 60, 220]).ljust(768, b"\0")
    screen = struct.pack("<HHBBB", canvas, canvas, 0xF7, 0, 0)  # a 256-colour global table
    frame = b"\x2c" + struct.pack("<HHHHB", left, top, side, side, 0)
    return b"GIF89a" + screen + palette + frame + bytes(blocks) + b"\x3b"


def exif_turned(image: Image.Image, fmt: str, orientation: int, **kwargs) -> bytes:
    """`image` encoded with an EXIF orientation tag (6: "turn 90 degrees clockwise to show it",
    as phones write a portrait photo whose rows the sensor stored sideways)."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    return _encode(image, fmt, exif=exif.tobytes(), **kwargs)


def bad_images() -> dict[str, tuple[bytes, str]]:
    """Files that are not usable images: name -> (bytes, a word the error must contain)."""
    jpeg = _encode(_rgb(64, 64), "JPEG", quality=95)
    rng = np.random.default_rng(7)
    svg = (b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="10" '
           b'height="10"><rect width="10" height="10" fill="red"/></svg>\n')
    return {
        "empty.png": (b"", "empty"),
        "truncated.jpg": (jpeg[: len(jpeg) // 2], "truncated"),
        "notes.txt": (b"just some text, not a picture\n", "not an image"),
        "drawing.svg": (svg, "SVG"),
        "noise.png": (rng.integers(0, 256, 2048, dtype=np.uint8).tobytes(), "not an image"),
        "bomb.png": (bomb_png(), "refused before decoding"),
    }


def write_cases(folder: Path) -> tuple[dict[str, Path], dict[str, tuple[Path, str]]]:
    """Write the good and bad images into `folder`; the bad ones also get a directory and a
    missing path. Returns `(good name -> path, bad name -> (path, expected word))`."""
    folder.mkdir(parents=True, exist_ok=True)
    good = {}
    for name, data in good_images().items():
        good[name] = folder / name
        good[name].write_bytes(data)
    bad = {}
    for name, (data, word) in bad_images().items():
        bad[name] = (folder / name, word)
        bad[name][0].write_bytes(data)
    (folder / "a-folder.png").mkdir(exist_ok=True)
    bad["a-folder.png"] = (folder / "a-folder.png", "directory")
    bad["missing.png"] = (folder / "missing.png", "no such file")
    return good, bad
