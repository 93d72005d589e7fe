"""Images to training tensors inside the reader: decode, crop, resize and flip in
the reader's I/O threads (C, no GIL), straight into the batch.

    import shardfeed
    loader = shardfeed.Loader("data/train", batch_size=256, transforms={
        "image": shardfeed.image.RandomResizedCrop(224, scale=(0.08, 1.0),
                                                   ratio=(3/4, 4/3), flip=0.5)})
    for batch in loader:
        x = shardfeed.image.normalize(batch["image"].cuda(non_blocking=True),
                                      mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
        y = batch["label"]

``transforms`` maps a field of encoded images (JPEG, PNG or WebP; an ImageFolder's
"image") to one of the transforms below; that field of every batch is then a uint8
tensor ``[B, 3, H, W]`` (layout="CHW", the default) or ``[B, H, W, 3]`` ("HWC"), or
with ``channels=1`` one gray channel. The transforms follow torchvision (bilinear,
antialias=True): RandomResizedCrop draws its boxes as torchvision's does (10 tries,
then the centre crop); CenterCrop is Resize(resize) + CenterCrop(size). JPEGs are
decoded at the smallest DCT scale that still covers the output (exact=True decodes at
full scale: slower, within 1 of torchvision on every pixel). Randomness depends only
on (seed, epoch, sample id): the same pixels with any io_threads, engine, world size,
and after load_state_dict(). EXIF orientation is ignored, as torchvision does.

An image that does not decode (damaged, truncated, not JPEG/PNG/WebP, more than
max_pixels pixels, refused from its header before anything is allocated) is a corrupt
sample: on_corrupt="error" raises shardfeed.Error naming the shard, record and key;
"skip" substitutes the next intact sample (stats()["corrupt_substitutions"]).
"""
import numbers

__all__ = ["RandomResizedCrop", "CenterCrop", "Decode", "normalize"]

_MODE_DECODE, _MODE_RRC, _MODE_CENTER = 1, 2, 3
_LAYOUTS = {"CHW": 0, "HWC": 1}


def _size(size):
    """(height, width) from an int, a pair, or a one-element sequence (as torchvision's
    transforms take it: (224,) is 224)."""
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        size = (size, size)
    elif isinstance(size, (list, tuple)) and len(size) == 1:
        size = (size[0], size[0])
    try:
        h, w = (int(v) for v in size)
    except (TypeError, ValueError):
        raise TypeError(f"shardfeed.image: size must be an int, (height, width) or (side,), not "
                        f"{size!r}") from None
    if not (1 <= h <= 65535 and 1 <= w <= 65535):
        raise ValueError(f"shardfeed.image: size {size!r}: each side from 1 to 65535")
    return h, w


def _pair(name, value, lo, hi):
    try:
        a, b = (float(v) for v in value)
    except (TypeError, ValueError):
        raise TypeError(f"shardfeed.image: {name} must be a pair of numbers, not {value!r}") from None
    if not (lo < a <= b <= hi):
        raise ValueError(f"shardfeed.image: {name}={value!r}: expected {lo} < min <= max <= {hi}")
    return a, b


class _Transform:
    """What every transform shares: layout, channels, flip, the pixel limit, exact."""

    def __init__(self, mode, size, flip, layout, channels, max_pixels, exact):
        self._mode = mode
        self.size = size
        if isinstance(flip, bool) or not isinstance(flip, numbers.Real) or not 0 <= flip <= 1:
            raise ValueError(f"shardfeed.image: flip={flip!r}: a probability from 0 to 1")
        self.flip = float(flip)
        if layout not in _LAYOUTS:
            raise ValueError(f"shardfeed.image: layout={layout!r}: expected 'CHW' or 'HWC'")
        self.layout = layout
        if channels not in (1, 3):
            raise ValueError(f"shardfeed.image: channels={channels!r}: expected 3 (RGB) or 1 (gray)")
        self.channels = channels
        if isinstance(max_pixels, bool) or not isinstance(max_pixels, numbers.Integral) or not 0 <= max_pixels < 2 ** 64:
            raise ValueError(f"shardfeed.image: max_pixels={max_pixels!r}: an int (0: the default limit)")
        self.max_pixels = int(max_pixels)
        self.exact = bool(exact)

    def _spec(self, field, resize=0, scale=(0.0, 0.0), ratio=(0.0, 0.0)):
        h, w = self.size if self.size else (0, 0)
        return (field, self._mode, h, w, resize, scale[0], scale[1], ratio[0], ratio[1],
                self.flip, _LAYOUTS[self.layout], self.channels, self.max_pixels, self.exact)


class RandomResizedCrop(_Transform):
    """torchvision's RandomResizedCrop(size, scale, ratio) (+ RandomHorizontalFlip(flip)),
    fused with the decode: a box of scale * area with aspect ratio in ratio (log-uniform),
    resized to size with antialiased bilinear."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), flip=0.0, layout="CHW",
                 channels=3, max_pixels=0, exact=False):
        super().__init__(_MODE_RRC, _size(size), flip, layout, channels, max_pixels, exact)
        self.scale = _pair("scale", scale, 0.0, 1.0)
        self.ratio = _pair("ratio", ratio, 0.0, float("inf"))

    def _spec(self, field):
        return super()._spec(field, scale=self.scale, ratio=self.ratio)

    def __repr__(self):
        return (f"RandomResizedCrop(size={self.size}, scale={self.scale}, ratio={self.ratio}, "
                f"flip={self.flip}, layout={self.layout!r})")


class CenterCrop(_Transform):
    """torchvision's Resize(resize) (the shorter side) then CenterCrop(size), for
    evaluation; resize defaults to the crop's larger side."""

    def __init__(self, size, resize=None, flip=0.0, layout="CHW", channels=3, max_pixels=0,
                 exact=False):
        super().__init__(_MODE_CENTER, _size(size), flip, layout, channels, max_pixels, exact)
        if resize is None:
            resize = max(self.size)
        if isinstance(resize, bool) or not isinstance(resize, numbers.Integral) or not 1 <= resize <= 65535:
            raise ValueError(f"shardfeed.image: resize={resize!r}: an int from 1 to 65535")
        self.resize = int(resize)

    def _spec(self, field):
        return super()._spec(field, resize=self.resize)

    def __repr__(self):
        return f"CenterCrop(size={self.size}, resize={self.resize}, layout={self.layout!r})"


class Decode(_Transform):
    """The images as they are, no resizing: every image must have one size (that of
    the dataset's first sample, or `size` when given), else the reader raises
    shardfeed.Error naming the sample that differs."""

    def __init__(self, size=None, flip=0.0, layout="CHW", channels=3, max_pixels=0):
        super().__init__(_MODE_DECODE, _size(size) if size is not None else None, flip, layout,
                         channels, max_pixels, True)

    def __repr__(self):
        return f"Decode(size={self.size}, layout={self.layout!r})"


def specs(transforms):
    """Loader's transforms= ({field: transform}) as the extension's tuples."""
    if transforms is None:
        return None
    if not isinstance(transforms, dict):
        raise TypeError("shardfeed: transforms must be a dict {field: shardfeed.image transform}")
    out = []
    for field, t in transforms.items():
        if not isinstance(field, str):
            raise TypeError(f"shardfeed: transforms: field names are strings, not {field!r}")
        if not isinstance(t, _Transform):
            raise TypeError(f"shardfeed: transforms[{field!r}]: expected shardfeed.image.RandomResizedCrop, "
                            f"CenterCrop or Decode, not {type(t).__name__}")
        out.append(t._spec(field))
    return out


def normalize(x, mean, std, dtype=None):
    """(x / 255 - mean) / std per channel, as a new tensor of `dtype` (default
    torch.float32) on x's device: a batch [B, C, H, W] (or one image [C, H, W]) of
    uint8. Run it after the copy to the GPU: uint8 is 4x fewer bytes to move.
    For "HWC" batches, permute first (x.permute(0, 3, 1, 2))."""
    import torch
    dtype = torch.float32 if dtype is None else dtype
    if x.dim() not in (3, 4):
        raise ValueError(f"shardfeed.image.normalize: expected [B, C, H, W] or [C, H, W], got {tuple(x.shape)}")
    c = x.shape[-3]
    mean = torch.as_tensor(mean, dtype=torch.float32, device=x.device).reshape(-1)
    std = torch.as_tensor(std, dtype=torch.float32, device=x.device).reshape(-1)
    if mean.numel() not in (1, c) or std.numel() not in (1, c):
        raise ValueError(f"shardfeed.image.normalize: mean and std need 1 or {c} values")
    # One fused multiply-add per element: x * (1 / (255 std)) - mean / std.
    scale = (1.0 / (255.0 * std)).reshape(-1, 1, 1)
    shift = (-mean / std).reshape(-1, 1, 1)
    return torch.addcmul(shift, x.to(torch.float32), scale).to(dtype)
