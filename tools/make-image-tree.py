#!/usr/bin/python3
"""Write an ImageNet-like ImageFolder tree from real photographs.

  make-image-tree.py OUT_DIR [--count N] [--classes C] [--seed S] [--png-share F]

OUT_DIR/class_NN/img_NNNNNN.{jpg,png}: N images (default 2000) in C
classes (default 10), made from the photographs python3-skimage ships
(astronaut, chelsea, coffee, motorcycle, rocket, ...) by random crops (60-100%
of each side), mirror images and rescales to about ImageNet's typical size
(500x375 landscape or 375x500 portrait, +-20%), saved as JPEG quality 90
(4:2:0) like ImageNet's, with camera-like grain added back (upscaled crops are
smoother than photographs) and the fine detail of a texture photograph
(python3-skimage's grass or gravel, half strength): files of about 100 kB on
average, as ImageNet's (110 kB); about 3% are PNG, 2% grayscale JPEG and 1% CMYK
JPEG, so every decoder path runs (--png-share 0: JPEG only, as tools/bench/run
uses it, so that a plain JPEG decoder reads the same files). Photographs, not noise: random pixels
compress and decode unlike photographs (a noise JPEG decodes several times
slower per pixel). Deterministic for a given seed.
"""
import argparse
import os
import sys

import numpy as np

try:
    from PIL import Image, ImageFilter
    import skimage.data
except ImportError:
    sys.exit("make-image-tree.py needs python3-pil and python3-skimage (tools/install-deps.sh test)")

# Texture photographs whose fine detail is added to every image (see make_image).
TEXTURES = ["grass.png", "gravel.png"]
PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "motorcycle_left.png", "motorcycle_right.png",
          "rocket.jpg", "hubble_deep_field.jpg", "retina.jpg", "ihc.png", "color.png", "immunohistochemistry.png"]


def skimage_images(names, mode):
    """The images of python3-skimage's data folder among `names`, converted to `mode`."""
    d = os.path.dirname(skimage.data.__file__)
    paths = [os.path.join(d, n) for n in names]
    return [Image.open(p).convert(mode) for p in paths if os.path.exists(p)]


def load_photos():
    out = skimage_images(PHOTOS, "RGB")
    if not out:
        sys.exit(f"no photographs found in {os.path.dirname(skimage.data.__file__)}")
    return out


def load_textures():
    """The texture photographs as zero-mean gray float arrays (none: no texture)."""
    out = [np.asarray(t, np.float32) for t in skimage_images(TEXTURES, "L")]
    return [t - t.mean() for t in out]


def make_image(photos, textures, rng):
    src = photos[int(rng.integers(len(photos)))]
    w, h = src.size
    cw = int(w * rng.uniform(0.6, 1.0))
    ch = int(h * rng.uniform(0.6, 1.0))
    x = int(rng.integers(0, w - cw + 1))
    y = int(rng.integers(0, h - ch + 1))
    img = src.crop((x, y, x + cw, y + ch))
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    long_side = int(500 * rng.uniform(0.8, 1.2))
    size = (long_side, long_side * 3 // 4) if rng.random() < 0.8 else (long_side * 3 // 4, long_side)
    img = img.resize(size, Image.BICUBIC)
    # Upscaled crops are smoother than camera images, which carry sensor
    # grain and fine texture: add both back (an unsharp mask, half a texture
    # photograph's detail in luma, film-like grain of sigma 8 in luma and 4 per
    # channel): files of 50-280 kB, about 100 kB on average at quality 90
    # (ImageNet's JPEGs: about 110 kB; grain alone gave 83 kB, and JPEG's
    # decode time grows with the entropy-coded bytes).
    arr = np.asarray(img.filter(ImageFilter.UnsharpMask(radius=2, percent=150, threshold=2)), np.float32)
    if textures:
        tex = Image.fromarray(textures[int(rng.integers(len(textures)))]).resize(img.size, Image.BICUBIC)
        arr += 0.5 * np.asarray(tex, np.float32)[:, :, None]
    arr += rng.normal(0, 8, arr.shape[:2] + (1,)).astype(np.float32)
    arr += rng.normal(0, 4, arr.shape).astype(np.float32)
    return Image.fromarray(np.clip(arr + 0.5, 0, 255).astype(np.uint8))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--png-share", type=float, default=0.03, help="fraction of PNG files (default 0.03)")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    photos = load_photos()
    textures = load_textures()
    total = 0
    for c in range(a.classes):
        os.makedirs(os.path.join(a.out, f"class_{c:02d}"), exist_ok=True)
    for i in range(a.count):
        img = make_image(photos, textures, rng)
        kind = rng.random()
        base = os.path.join(a.out, f"class_{i % a.classes:02d}", f"img_{i:06d}")
        if kind < a.png_share:
            path = base + ".png"
            img.save(path, format="PNG")
        else:
            path = base + ".jpg"
            if 0.03 <= kind < 0.05:
                img = img.convert("L")
            elif 0.05 <= kind < 0.06:
                img = img.convert("CMYK")
            img.save(path, format="JPEG", quality=90)
        total += os.path.getsize(path)
    print(f"{a.count} images in {a.classes} classes, {total / a.count / 1000:.0f} kB each on average: {a.out}")


if __name__ == "__main__":
    main()
