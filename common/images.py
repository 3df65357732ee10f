"""Reading images users have on their disk, or that clients send: RGB out, or one clear error.

`load_image(path_or_bytes)` opens a file (or encoded bytes) with Pillow and returns an RGB
`PIL.Image`, whatever the file holds: RGBA (alpha dropped, as `tf.io.decode_image(channels=3)`
does), grayscale, 16-bit (scaled to 8 bits as TensorFlow does), palette, CMYK JPEG, the first
frame of an animation, BMP, TIFF, WebP, and a JPEG named `.png`. Anything else raises a
`common.errors.DataError` of one line that names the file and says why: a missing path, a
directory, an empty file, a text file, an SVG, random bytes, truncated data, and an image whose
header declares more than `max_pixels` pixels (a decompression bomb), refused from the header
before any pixel is decoded.

A photo whose EXIF orientation tag says to turn or mirror it (as phones and cameras write
them) is turned upright, as a photo viewer or a browser shows it: the model captions what the
user sees, not the sensor's sideways rows.

`decode_in_graph` is the graph's decoder (the captioner's one pre-processing function,
`captioner.preprocessing.image_pixels`, for training, `caption RUN_DIR` and its export):
the pixels Pillow gives, for the formats TensorFlow reads, as stored (TensorFlow's decoders
ignore EXIF). `graph_bytes` gives the bytes it should receive: the file as it is when
TensorFlow decodes it the same way `load_image` does, else the pixels `load_image` gives,
re-encoded losslessly as BMP (TIFF, CMYK JPEG, a photo with an EXIF turn, ...; BMP, which the
graph reads, encodes a 12-megapixel photo tens of times faster than PNG:
`scripts/benchmarks/benchmark_images.py`, docs/benchmarks.md); `prepare_for_graph`
is its header-only version for a server. `declared_size` reads only the header (the size as
stored).

Datasets (training, `captioner evaluate`) go through `decode_in_graph`, so their images are
read as stored, whatever their EXIF says.
"""

from __future__ import annotations

import io
import os
import re
import warnings
from pathlib import Path

import numpy as np

from common.errors import DataError

Source = str | os.PathLike | bytes

#: The most pixels an image may declare (5000 x 5000); larger ones are refused unread.
DEFAULT_MAX_PIXELS = 25_000_000
#: What `tf.io.decode_image` reads (Pillow's format names).
GRAPH_FORMATS = ("PNG", "JPEG", "GIF", "BMP", "WEBP")
#: The EXIF tag that says how to turn the stored rows to show the image (1: as stored).
EXIF_ORIENTATION = 0x0112
READABLE = "PNG, JPEG, GIF, BMP, TIFF or WebP"


def _name(source: Source, name: str | None) -> str:
    if name is not None:
        return name
    return "image" if isinstance(source, (bytes, bytearray)) else str(source)


def read_bytes(source: Source, name: str | None = None) -> bytes:
    """The bytes of a path (or `source` itself when it is bytes); `DataError` if unreadable."""
    if isinstance(source, (bytes, bytearray)):
        return bytes(source)
    path = Path(source)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{_name(source, name)}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{_name(source, name)}: is a directory, not an image file") from None
    except PermissionError:
        raise DataError(f"{_name(source, name)}: permission denied") from None
    except OSError as exc:
        raise DataError(f"{_name(source, name)}: cannot be read ({exc.strerror or exc})") from None
    return data


def _open(data: bytes, where: str, max_pixels: int):
    """`Image.open` (header only) with every refusal turned into a one-line `DataError`."""
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise DataError(f"{where}: empty file (0 bytes), not an image")
    head = data[:256].lstrip().lower()
    if head.startswith((b"<?xml", b"<svg", b"<!doctype svg")) or b"<svg" in head:
        raise DataError(f"{where}: an SVG (vector) image; expected a raster image ({READABLE})")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:  # Pillow's own, larger limit
        raise DataError(f"{where}: the header declares {bomb_pixels(exc)}, more than the limit of "
                        f"{max_pixels}; refused before decoding") from None
    except UnidentifiedImageError:
        kind = "a text file" if _looks_like_text(data) else "unrecognized data"
        raise DataError(f"{where}: not an image ({kind}); expected {READABLE}") from None
    except Exception as exc:  # a header Pillow recognizes but cannot parse
        raise DataError(f"{where}: corrupt image header ({_reason(exc)})") from None
    width, height = image.size
    if width * height > max_pixels:
        image.close()
        raise DataError(f"{where}: the header declares {width}x{height} = {width * height} "
                        f"pixels, more than the limit of {max_pixels}; refused before decoding")
    if width < 1 or height < 1:
        image.close()
        raise DataError(f"{where}: the header declares an empty {width}x{height} image")
    return image


def bomb_pixels(exc: BaseException) -> str:
    """What Pillow's `DecompressionBombError` says the header declares ("N pixels")."""
    found = re.search(r"\((\d+) pixels\)", str(exc))
    return f"{int(found.group(1))} pixels" if found else "too many pixels"


def _looks_like_text(data: bytes) -> bool:
    try:
        data[:1024].decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__


def declared_size(source: Source, name: str | None = None,
                  max_pixels: int = DEFAULT_MAX_PIXELS) -> tuple[int, int, str]:
    """`(width, height, format)` from the header alone; `DataError` as `load_image`.

    Example:
    >>> declared_size("assets/samples/shapes_1.png")  # doctest: +SKIP
    (64, 64, 'PNG')
    """
    where = _name(source, name)
    with _open(read_bytes(source, name), where, max_pixels) as image:
        return image.size[0], image.size[1], image.format or "unknown"


def load_image(source: Source, name: str | None = None,
               max_pixels: int = DEFAULT_MAX_PIXELS):
    """An image file or encoded bytes as a fully decoded RGB `PIL.Image.Image`.

    Args:
        source: a path, or the encoded bytes.
        name: how to name the image in errors (default: the path, or "image").
        max_pixels: the most pixels the header may declare; checked before decoding.

    Raises:
        DataError: one line naming the image and the reason (see the module doc).

    Example:
    >>> load_image("assets/samples/shapes_1.png").mode  # doctest: +SKIP
    'RGB'
    """
    where = _name(source, name)
    image = _open(read_bytes(source, name), where, max_pixels)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # palette transparency notes, EXIF oddities
            image.seek(0)  # the first frame of an animation
            image.load()  # (a PNG's eXIf chunk after its pixels is read here)
            return to_rgb(upright(image))
    except DataError:
        raise
    except Exception as exc:  # truncated or corrupt data: Pillow raises many kinds
        kind = image.format or "image"
        raise DataError(f"{where}: truncated or corrupt {kind} data ({_reason(exc)})") from None
    finally:
        image.close()


def orientation(image) -> int:
    """The EXIF orientation of an opened PIL image as Pillow has read it so far: 1..8, or 1 (as
    stored) when it has none or an unreadable one. No pixel is decoded to find it, so a PNG's
    eXIf chunk after its pixel data counts once the image is loaded. Pillow turns a TIFF itself
    as it loads it (and drops the tag), so a loaded TIFF says 1."""
    from PIL import Image

    try:
        if image.format == "PNG":  # its getexif() would decode the pixels to look further
            exif = Image.Exif()
            exif.load(image.info.get("exif") or b"")
        else:
            exif = image.getexif()
        value = exif.get(EXIF_ORIENTATION, 1)
    except Exception:  # a malformed EXIF block: show the pixels as stored
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def upright(image):
    """A loaded PIL image turned (or mirrored) as its EXIF orientation says, by
    `PIL.ImageOps.exif_transpose`, which drops the tag from the result (so it is not turned
    again); the image itself when it needs no turn or its EXIF cannot be read."""
    from PIL import ImageOps

    if orientation(image) == 1:
        return image
    try:
        return ImageOps.exif_transpose(image)
    except Exception:  # a malformed EXIF block: show the pixels as stored
        return image


def shown_as_stored(image, data: bytes) -> bool:
    """Whether `load_image` gives this opened (unloaded) image's pixels as stored, read from
    its header: no EXIF turn. A PNG's eXIf chunk after its pixel data is not in the header:
    such a PNG is taken as turned, to be read in full."""
    if image.format == "PNG" and "exif" not in image.info and b"eXIf" in data:
        return False
    return orientation(image) == 1


def _graph_decodes_as_loaded(image, data: bytes) -> bool:
    """Whether `decode_in_graph` gives `load_image`'s pixels for this opened image: a format
    TensorFlow reads, not a CMYK JPEG nor a BMP its decoder misreads, and shown as stored."""
    if image.format not in GRAPH_FORMATS or (image.format == "JPEG" and image.mode == "CMYK"):
        return False
    if image.format == "BMP" and not _plain_bmp(image, data):
        return False
    if image.format == "GIF" and not _plain_gif(image):
        return False
    # TensorFlow decodes a WebP to 3 channels only when it has no alpha and one frame: with
    # alpha it refuses ("Number of channels requested does not match input").
    if image.format == "WEBP" and (image.mode not in ("RGB", "L")
                                   or getattr(image, "n_frames", 1) > 1):
        return False
    return shown_as_stored(image, data)


def _plain_gif(image) -> bool:
    """Whether TensorFlow's GIF decoder reads this GIF's first frame as Pillow does: a frame
    covering the whole canvas from its corner (TensorFlow's image is the frame's size, the
    frame pasted at its offset, so a smaller or offset one is cropped) with no transparent
    colour (TensorFlow makes it black, Pillow the palette's colour)."""
    tile = image.tile[0] if image.tile else None
    return ("transparency" not in image.info and tile is not None
            and tuple(tile[1]) == (0, 0, *image.size))


def _plain_bmp(image, data: bytes) -> bool:
    """Whether TensorFlow's BMP decoder reads this BMP as Pillow does. It reads the Windows
    header's bit count as 8, 24 or 32 bits of channels and ignores the colour table and the
    compression: a palette's indices would become grey levels, 1, 4 or 16 bits a pixel are
    refused, run-length or bit-field data is misread. So: an uncompressed 24- or 32-bit BMP, or
    an 8-bit one whose table Pillow reads as grey levels (mode "L", the indices themselves)."""
    if len(data) < 34 or int.from_bytes(data[14:18], "little") < 40:  # an OS/2 header
        return False
    bits = int.from_bytes(data[28:30], "little")
    compression = int.from_bytes(data[30:34], "little")
    return compression == 0 and (bits in (24, 32) or (bits == 8 and image.mode == "L"))


def to_rgb(image):
    """A PIL image in RGB mode, as the model sees it: 16-bit greyscale scaled to 8 bits (as
    `tf.io.decode_png` does, where Pillow's own conversion clips it to white), a palette's
    transparency dropped through RGBA."""
    from PIL import Image

    mode = image.mode
    if mode in ("I;16", "I;16L", "I;16B", "I;16N", "I", "F"):
        # 16-bit (or wider) grayscale: scale to 8 bits as tf.io.decode_png does, keeping the
        # high byte (x >> 8; a rounded x / 257 is one level off for a quarter of the values).
        values = np.asarray(image, dtype=np.float64)
        if mode == "F" or (mode == "I" and values.max(initial=0) <= 255):
            scaled = np.rint(values)
        else:
            scaled = np.floor(values / 256.0)
        gray = np.clip(scaled, 0, 255).astype(np.uint8)
        return Image.fromarray(gray, "L").convert("RGB")
    if mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    if image.mode == "RGB":
        return image.copy()
    return image.convert("RGB")


def decode_in_graph(data):
    """One encoded image (a scalar `tf.string`) -> `(H, W, 3)` uint8, the pixels `load_image`
    gives, in a TensorFlow graph (training's input pipeline, the exported captioner).

    `tf.io.decode_image`, except that a JPEG is decoded with the accurate integer inverse DCT,
    Pillow's (libjpeg's default): TensorFlow's default, the fast one, is several grey levels
    off on photos (tests/common/test_images.py compares the accurate one with Pillow). The other formats decode_image reads (PNG, 16-bit included, GIF's
    first frame, BMP, WebP) give Pillow's pixels as they are.
    """
    import tensorflow as tf

    image = tf.cond(
        tf.io.is_jpeg(data),
        lambda: tf.io.decode_jpeg(data, channels=3, dct_method="INTEGER_ACCURATE"),
        lambda: tf.io.decode_image(data, channels=3, expand_animations=False, dtype=tf.uint8))
    image.set_shape([None, None, 3])
    return image


def graph_bytes(source: Source, name: str | None = None,
                max_pixels: int = DEFAULT_MAX_PIXELS) -> bytes:
    """Bytes for a SavedModel's in-graph decoder, after checking the image fully with Pillow.

    The original bytes when the graph (`decode_in_graph`) reads the format and decodes it as
    `load_image` does (PNG, JPEG but CMYK, GIF, plain BMP, WebP; no EXIF turn), else the RGB
    image `load_image` gives (upright) re-encoded losslessly (`lossless_bytes`).

    Raises:
        DataError: as `load_image`.
    """
    data = read_bytes(source, name)
    where = _name(source, name)
    with _open(data, where, max_pixels) as image:
        as_is = _graph_decodes_as_loaded(image, data)
    rgb = load_image(data, where, max_pixels)  # decodes once: truncated data fails here
    return data if as_is else lossless_bytes(rgb, REENCODED_GROWTH * len(data))


#: A re-encoded image takes at most this many times the bytes it came in as a BMP; past that it
#: is a PNG (`lossless_bytes`), so that a small file of many pixels (a 135 KB TIFF of 25 million
#: pixels of two colours is a 75 MB BMP) cannot make a request hold gigabytes.
REENCODED_GROWTH = 32


def lossless_bytes(image, budget: int | None = None) -> bytes:
    """An RGB PIL image encoded so that `decode_in_graph` reads back the same pixels.

    An uncompressed BMP, which encodes in milliseconds where a PNG of a phone photo takes
    seconds; but when the BMP would take more than `budget` bytes, a PNG at zlib's fastest
    level (slower than the BMP, small for an image that compressed that well:
    `scripts/benchmarks/benchmark_images.py --op growth`).
    """
    width, height = image.size
    bmp_size = 54 + height * ((3 * width + 3) // 4 * 4)  # the header and 4-byte aligned rows
    buffer = io.BytesIO()
    if budget is None or bmp_size <= budget:
        image.save(buffer, format="BMP")
    else:
        image.save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def prepare_for_graph(data: bytes, where: str, max_pixels: int = DEFAULT_MAX_PIXELS) -> bytes:
    """For a server: `data` unchanged when its header is of a format the graph decodes
    faithfully, else the image re-encoded (`lossless_bytes`, a BMP of at most
    `REENCODED_GROWTH` times the bytes sent, else a PNG: TIFF, CMYK JPEG, a palette BMP, a photo
    with an EXIF turn, upright). Only the header is read for the formats the graph decodes
    (their truncated data is the graph's to refuse).

    Raises:
        DataError: not an image, an SVG, empty, or over the pixel limit (from the header).
    """
    with _open(data, where, max_pixels) as image:
        as_is = _graph_decodes_as_loaded(image, data)
    if as_is:
        return data
    return lossless_bytes(load_image(data, where, max_pixels), REENCODED_GROWTH * len(data))
