"""Fashion-MNIST IDX reader and image resizing."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from posenc.data.images import FASHION_MNIST_DIR, PIXEL_MEAN, PIXEL_STD, load_fashion_mnist, read_idx, to_model_input
from posenc.errors import DataError

HAVE_FASHION_MNIST = (FASHION_MNIST_DIR / "t10k-labels-idx1-ubyte.gz").is_file()
needs_data = pytest.mark.skipif(
    not HAVE_FASHION_MNIST, reason=f"Fashion-MNIST not found at {FASHION_MNIST_DIR} (apt-get install -y dataset-fashion-mnist)"
)


def write_idx(path: Path, array: np.ndarray, compress: bool = True) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    data = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(data) if compress else data)


def make_split(root: Path, n: int, prefix: str = "t10k") -> tuple[np.ndarray, np.ndarray]:
    images = np.arange(n * 28 * 28, dtype=np.int64).reshape(n, 28, 28) % 251
    labels = np.arange(n) % 10
    write_idx(root / f"{prefix}-images-idx3-ubyte.gz", images)
    write_idx(root / f"{prefix}-labels-idx1-ubyte.gz", labels)
    return images, labels


def test_read_idx_roundtrip(tmp_path: Path):
    array = np.array([[1, 2, 3], [250, 0, 7]], dtype=np.uint8)
    write_idx(tmp_path / "a.gz", array)
    write_idx(tmp_path / "b", array, compress=False)
    assert np.array_equal(read_idx(tmp_path / "a.gz", 2), array)
    assert np.array_equal(read_idx(tmp_path / "b", 2), array)


def test_read_idx_rejects_bad_files(tmp_path: Path):
    array = np.zeros((2, 3), dtype=np.uint8)
    write_idx(tmp_path / "a.gz", array)
    with pytest.raises(DataError, match="with 3 dimensions"):
        read_idx(tmp_path / "a.gz", 3)
    raw = gzip.decompress((tmp_path / "a.gz").read_bytes())
    (tmp_path / "short.gz").write_bytes(gzip.compress(raw[:-1]))
    with pytest.raises(DataError, match="header says"):
        read_idx(tmp_path / "short.gz", 2)
    (tmp_path / "junk.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match="cannot read"):
        read_idx(tmp_path / "junk.gz", 2)


def test_load_from_root_with_limit(tmp_path: Path):
    images, labels = make_split(tmp_path, 12)
    data = load_fashion_mnist("test", root=tmp_path, limit=5)
    assert data.images.dtype == torch.uint8 and data.images.shape == (5, 1, 28, 28)
    assert torch.equal(data.images[:, 0], torch.from_numpy(images[:5].astype(np.uint8)))
    assert data.labels.tolist() == labels[:5].tolist()
    assert len(data.subset(3)) == 3


def test_load_errors(tmp_path: Path):
    with pytest.raises(DataError, match="apt-get install -y dataset-fashion-mnist"):
        load_fashion_mnist("train", root=tmp_path)
    with pytest.raises(DataError, match="split 'valid' unknown"):
        load_fashion_mnist("valid", root=tmp_path)
    make_split(tmp_path, 4)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", np.zeros(3))
    with pytest.raises(DataError, match="4 images but 3 labels"):
        load_fashion_mnist("test", root=tmp_path)


@needs_data
def test_real_fashion_mnist_files():
    test = load_fashion_mnist("test")
    assert test.images.shape == (10_000, 1, 28, 28) and test.images.dtype == torch.uint8
    assert torch.bincount(test.labels, minlength=10).tolist() == [1000] * 10  # balanced test split
    train = load_fashion_mnist("train", limit=1000)
    assert train.images.shape == (1000, 1, 28, 28)
    mean = train.images.float().mean().item() / 255
    assert abs(mean - PIXEL_MEAN) < 0.02  # the normalisation constant fits the real data


def test_to_model_input_normalises_and_resizes():
    images = torch.randint(0, 256, (2, 1, 28, 28), dtype=torch.uint8)
    same = to_model_input(images)
    assert torch.allclose(same, (images.float() / 255 - PIXEL_MEAN) / PIXEL_STD)
    assert torch.equal(to_model_input(images, 28), same)
    assert to_model_input(images, 44).shape == (2, 1, 44, 44)
    constant = torch.full((1, 1, 28, 28), 51, dtype=torch.uint8)  # 51 / 255 = 0.2
    small = to_model_input(constant, 12)
    assert torch.allclose(small, torch.full_like(small, (0.2 - PIXEL_MEAN) / PIXEL_STD), atol=1e-5)
    with pytest.raises(DataError, match="expected images"):
        to_model_input(torch.zeros(28, 28, dtype=torch.uint8))
