"""Test images made from real photographs (python3-skimage's data folder):
crops and rescales of them saved as JPEG, PNG and WebP in every colour
layout the image layer handles. Photographs, not noise: noise compresses
and decodes unlike what a trainer reads."""
import os
import struct
import zlib

import numpy as np

try:
    from PIL import Image
    import skimage.data
    SKIMAGE_DIR = os.path.dirname(skimage.data.__file__)
except ImportError:  # pragma: no cover - the test skips
    SKIMAGE_DIR = None

PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "motorcycle_left.png", "rocket.jpg",
          "hubble_deep_field.jpg", "camera.png"]


def photo(name):
    """A photograph from skimage's data folder as an RGB PIL image."""
    return Image.open(os.path.join(SKIMAGE_DIR, name)).convert("RGB")


def available_photos():
    return [p for p in PHOTOS if SKIMAGE_DIR and os.path.exists(os.path.join(SKIMAGE_DIR, p))]


def crop_rescale(img, rng, size=(500, 375)):
    """A random crop of at least half of each side, rescaled to size (w, h)."""
    w, h = img.size
    cw = int(rng.integers(w // 2, w + 1))
    ch = int(rng.integers(h // 2, h + 1))
    x = int(rng.integers(0, w - cw + 1))
    y = int(rng.integers(0, h - ch + 1))
    return img.crop((x, y, x + cw, y + ch)).resize(size, Image.BICUBIC)


def png_bytes(arr, color_type, bit_depth=8, interlace=0):
    """A PNG written by hand (PIL writes no 16-bit RGB nor interlaced PNGs):
    arr is uint8 or big-endian-ready uint16 [h, w, c] or [h, w]."""
    h, w = arr.shape[:2]
    if bit_depth == 16:
        raw = arr.astype(">u2").tobytes()
    else:
        raw = np.ascontiguousarray(arr, dtype=np.uint8).tobytes()
    stride = len(raw) // h

    def chunk(kind, data):
        c = kind + data
        return struct.pack(">I", len(data)) + c + struct.pack(">I", zlib.crc32(c) & 0xffffffff)

    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, interlace)
    if interlace:
        rows = b""
        bpp = stride // w
        # Adam7 passes: (x0, y0, dx, dy)
        for x0, y0, dx, dy in [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),
                               (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]:
            if x0 >= w or y0 >= h:
                continue
            for y in range(y0, h, dy):
                line = raw[y * stride:(y + 1) * stride]
                rows += b"\0" + b"".join(line[x * bpp:(x + 1) * bpp] for x in range(x0, w, dx))
    else:
        rows = b"".join(b"\0" + raw[y * stride:(y + 1) * stride] for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))
