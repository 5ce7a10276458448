"""Fashion-MNIST images from Debian's ``dataset-fashion-mnist`` package, and image resizing.

Shape legend: N images, C channels (1), H/W height/width (28 in the files), R target resolution.

The package installs the original gzip-compressed IDX files under
``/usr/share/datasets/fashion-mnist/``. IDX layout: 2 zero bytes, a type byte (0x08 = uint8),
a byte with the number of dimensions d, d big-endian uint32 sizes, then the data row-major.
Only the header is checked by hand; the payload is read with ``numpy.frombuffer``.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.errors import DataError

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
INSTALL_HINT = "install it with `apt-get install -y dataset-fashion-mnist` or set POSENC_FASHION_MNIST"
_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
#: Mean and standard deviation of the training pixels scaled to [0, 1].
PIXEL_MEAN, PIXEL_STD = 0.2860, 0.3530


@dataclass
class ImageSet:
    images: Tensor  # (N, 1, 28, 28) uint8
    labels: Tensor  # (N,) int64

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def subset(self, n: int | None) -> ImageSet:
        """The first ``n`` examples (all when ``n`` is None)."""
        return self if n is None else ImageSet(self.images[:n], self.labels[:n])


def read_idx(path: Path, ndim: int) -> np.ndarray:
    """Read a (gzip-compressed) uint8 IDX file with ``ndim`` dimensions."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError) as err:
        raise DataError(f"{path}: cannot read IDX file ({err})") from None
    if len(raw) < 4 + 4 * ndim or raw[0:2] != b"\0\0" or raw[2] != 0x08 or raw[3] != ndim:
        raise DataError(f"{path}: not a uint8 IDX file with {ndim} dimensions")
    shape = tuple(int(s) for s in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise DataError(f"{path}: header says {shape} = {int(np.prod(shape))} values, file has {data.size}")
    return data.reshape(shape)


def check_fashion_mnist(root: str | Path | None = None) -> None:
    """Whether both Fashion-MNIST splits' files are at hand (``root`` resolved as
    :func:`load_fashion_mnist` does), without reading them: a one-line DataError naming the
    directory and how to get the data. The experiment runner calls it before any run starts."""
    base = Path(root or os.environ.get("POSENC_FASHION_MNIST") or FASHION_MNIST_DIR)
    missing = [name for names in _FILES.values() for name in names if not (base / name).is_file()]
    if missing:
        raise DataError(f"Fashion-MNIST not found at {base} (missing {', '.join(missing)}): {INSTALL_HINT}")


def load_fashion_mnist(split: str = "train", root: str | Path | None = None, limit: int | None = None) -> ImageSet:
    """Fashion-MNIST ``split`` ("train" 60k / "test" 10k) as uint8 images ``(N, 1, 28, 28)``.

    ``root`` defaults to $POSENC_FASHION_MNIST or the Debian package's directory; ``limit``
    keeps the first examples only.
    """
    if split not in _FILES:
        raise DataError(f"Fashion-MNIST split {split!r} unknown (known: train, test)")
    base = Path(root or os.environ.get("POSENC_FASHION_MNIST") or FASHION_MNIST_DIR)
    image_file, label_file = (base / name for name in _FILES[split])
    if not image_file.is_file() or not label_file.is_file():
        raise DataError(f"Fashion-MNIST not found at {base}: {INSTALL_HINT}")
    images, labels = read_idx(image_file, 3), read_idx(label_file, 1)
    if images.shape[0] != labels.shape[0]:
        raise DataError(f"{image_file}: {images.shape[0]} images but {labels.shape[0]} labels in {label_file}")
    n = images.shape[0] if limit is None else min(limit, images.shape[0])
    return ImageSet(torch.from_numpy(images[:n].copy()).unsqueeze(1), torch.from_numpy(labels[:n].astype(np.int64)))


def to_model_input(images: Tensor, resolution: int | None = None) -> Tensor:
    """uint8 ``(N, C, H, W)`` → normalised float ``(N, C, R, R)``.

    Resizing (when ``resolution`` differs from H or W) is bilinear with antialiasing.
    """
    if images.dim() != 4:
        raise DataError(f"expected images (N, C, H, W), got shape {tuple(images.shape)}")
    x = images.to(torch.float32) / 255.0
    if resolution is not None and tuple(x.shape[-2:]) != (resolution, resolution):
        if resolution < 1:
            raise DataError(f"resolution must be >= 1, got {resolution}")
        x = F.interpolate(x, size=(resolution, resolution), mode="bilinear", align_corners=False, antialias=True)
    return (x - PIXEL_MEAN) / PIXEL_STD
