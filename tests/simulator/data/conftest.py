"""Tiny dataset files written by the tests (idx, Fashion-MNIST), and a search path that finds only those."""
import gzip
from pathlib import Path

import numpy as np
import pytest

from simulator.data import datasets

FASHION_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
                 "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


@pytest.fixture
def no_installed_data(tmp_path, monkeypatch):
    """Point the system and cache locations at empty directories, so only files written by a test are found."""
    monkeypatch.setattr(datasets, "SYSTEM_ROOT", tmp_path / "system")
    monkeypatch.setattr(datasets, "CACHE_ROOT", tmp_path / "cache")


def _write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array in idx format, gzip-compressed if the path ends in .gz."""
    header = bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    with (gzip.open if path.suffix == ".gz" else open)(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def _write_fashion(directory: Path, suffix: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Write tiny Fashion-MNIST idx files (5 train, 3 test images of 6x6) and return their contents."""
    arrays = {}
    for split, count in (("train", 5), ("test", 3)):
        arrays[f"{split}_x"] = rng.integers(0, 256, (count, 6, 6), dtype=np.uint8)
        arrays[f"{split}_y"] = rng.integers(0, 10, count, dtype=np.uint8)
        images_name, labels_name = FASHION_FILES[split]
        _write_idx(directory / f"{images_name}{suffix}", arrays[f"{split}_x"])
        _write_idx(directory / f"{labels_name}{suffix}", arrays[f"{split}_y"])
    return arrays


def write_fashion_28(root: Path, train_labels: np.ndarray) -> None:
    """Fashion-MNIST idx files of 28 x 28 images under ``root``: random train images (seed 0), one per
    entry of ``train_labels``, and 4 test images labelled 0-3 (a data set whose files a test rewrites)."""
    rng = np.random.default_rng(0)
    _write_idx(root / "train-images-idx3-ubyte", rng.integers(0, 256, (len(train_labels), 28, 28), dtype=np.uint8))
    _write_idx(root / "train-labels-idx1-ubyte", train_labels)
    _write_idx(root / "t10k-images-idx3-ubyte", rng.integers(0, 256, (4, 28, 28), dtype=np.uint8))
    _write_idx(root / "t10k-labels-idx1-ubyte", np.arange(4, dtype=np.uint8))


@pytest.fixture
def write_idx():
    """``write_idx(path, array)``: a uint8 array as an idx file (gzip-compressed if the path ends in .gz)."""
    return _write_idx


@pytest.fixture
def write_fashion():
    """``write_fashion(directory, suffix, rng)``: tiny Fashion-MNIST idx files (5 train, 3 test images
    of 6x6, file names ending in ``suffix``); returns their contents (``train_x``, ``train_y``, ...)."""
    return _write_fashion
